//! `wprof cache verify`: recompute every digest and check that every value means what it
//! should; report each bad entry; `--repair` drops them.

use serde::Serialize;
use wprof_cache::{Cache, CacheError, Key, Kind, Lookup};

use super::{failed, print_json, CacheDirArg};
use crate::exit::Failure;
use crate::prepare::cache_values::{self, ArtifactEntry, FunctionEntry, Manifest};
use crate::prepare::{compiled, instrument};
use wprof_cache::hex;

/// Check every entry of the cache; report (and with --repair drop) the bad ones.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Checks every stored value against its digest, every compiled-code file against its
recorded digest, every usage record and counter; that modules are stored under their own
blake3, that function entries and manifests decode, that every manifest's instrumented
module is there, that every value stored against another (an instrumented module and
function bodies against their original module, compiled functions against their compiled
artifact) finds it, and that every compiled artifact is of a known kind. A bad entry is never
used by a run (it is a miss and gets rewritten); --repair removes it now.

Examples:
  wprof cache verify
  wprof cache verify --repair --json

Exit status:
  0 if everything is intact; 1 if bad entries were found (with --repair they have been
  dropped, and a second verify exits 0); 2 on wprof's own errors (no cache there).")]
pub struct VerifyCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// Drop every bad entry (the cache is then consistent; runs rebuild what they need).
    #[arg(long)]
    repair: bool,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One bad entry.
#[derive(Debug, Serialize)]
pub struct BadEntry {
    /// Kind of value, `usage` or `stats`.
    pub section: String,
    /// Its key (hex) or file name.
    pub key: String,
    /// What is wrong.
    pub problem: String,
    /// Whether --repair dropped it.
    pub dropped: bool,
}

/// `verify --json`.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// Entries checked (values of every kind).
    pub checked: u64,
    /// What was wrong.
    pub bad: Vec<BadEntry>,
    /// Nothing was wrong.
    pub clean: bool,
}

/// What wprof's own values must satisfy beyond their digests: `Some(problem)` if not.
fn semantic_problem(cache: &Cache, kind: Kind, key: &Key, value: &[u8]) -> Option<String> {
    match kind {
        Kind::Module => {
            // The original it is stored against, if it is, expanded once.
            let original = crate::prepare::referenced::reference(value)
                .map(|r| (r.locator, cache_values::module_in(cache, &r.locator)));
            match original {
                Some((locator, None)) => Some(format!(
                    "the module it is stored against, {}, is missing or damaged",
                    &hex(&locator)[..16]
                )),
                _ => cache_values::decode_module_with(value, key, |_| {
                    original
                        .and_then(|(_, bytes)| bytes)
                        .map(std::borrow::Cow::Owned)
                })
                .is_none()
                .then(|| "a module not stored under its own blake3".to_string()),
            }
        }
        Kind::Function => match instrument::unpack_bodies(value, |original| {
            cache_values::module_in(cache, original).map(std::borrow::Cow::Owned)
        }) {
            None if crate::prepare::referenced::reference(value).is_some() => Some(
                "a pack of function bodies whose original module is missing, or not its pack"
                    .into(),
            ),
            None => Some("not a pack of function bodies".into()),
            Some(bodies) => bodies
                .values()
                .any(|entry| FunctionEntry::decode(entry).is_none())
                .then(|| "a pack with a malformed function body".to_string()),
        },
        Kind::Manifest => match Manifest::decode(value) {
            None => Some("not a manifest of this version".into()),
            Some(m) => match wprof_cache::key_from_hex(&m.instrumented_digest) {
                None => Some("a manifest without an instrumented digest".into()),
                Some(d) => match cache_values::module_in(cache, &d) {
                    Some(_) => None,
                    None => Some(format!(
                        "its instrumented module {} is missing or damaged",
                        &m.instrumented_digest[..16]
                    )),
                },
            },
        },
        Kind::Facts => (!crate::prepare::facts::decodes(value))
            .then(|| "not a module's facts of this wprof's layout".to_string()),
        Kind::Artifact => ArtifactEntry::decode(value)
            .is_none()
            .then(|| "not a compiled-artifact record".to_string()),
        Kind::Compiled if !compiled::is_pack(value) => {
            Some("not a pack of compiled functions".into())
        }
        Kind::Compiled => {
            // Its artifact is read only with the user's key: that it is there is what can
            // be checked here.
            let artifact = crate::prepare::referenced::reference(value)?;
            match cache.peek(Kind::Artifact, &artifact.locator) {
                Ok(Lookup::Valid(_)) => None,
                _ => Some(format!(
                    "the compiled artifact it is stored against, {}, is missing or damaged",
                    &hex(&artifact.locator)[..16]
                )),
            }
        }
    }
}

/// Verifies the whole cache; with `repair`, drops what is bad.
pub fn verify(cache: &Cache, repair: bool) -> Result<VerifyReport, CacheError> {
    let mut checked = 0;
    for kind in Kind::ALL {
        checked += cache.keys(kind)?.len() as u64;
    }
    let mut bad: Vec<BadEntry> = cache
        .verify(repair)?
        .into_iter()
        .map(|p| BadEntry {
            section: p.section,
            key: p.key,
            problem: p.what,
            dropped: repair,
        })
        .collect();
    // Manifests last: they look at the modules, which may just have been dropped.
    for kind in [
        Kind::Function,
        Kind::Module,
        Kind::Artifact,
        Kind::Compiled,
        Kind::Facts,
        Kind::Manifest,
    ] {
        for key in cache.keys(kind)? {
            let Lookup::Valid(value) = cache.peek(kind, &key)? else {
                continue;
            };
            if let Some(problem) = semantic_problem(cache, kind, &key, &value) {
                if repair {
                    cache.remove(kind, &key)?;
                }
                bad.push(BadEntry {
                    section: kind.name().into(),
                    key: hex(&key),
                    problem,
                    dropped: repair,
                });
            }
        }
    }
    if repair {
        cache.flush()?;
    }
    let clean = bad.is_empty();
    Ok(VerifyReport {
        checked,
        bad,
        clean,
    })
}

impl VerifyCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache = self.dir.open_existing()?;
        let report = verify(&cache, self.repair).map_err(failed)?;
        drop(cache);
        if self.json {
            print_json(&report);
        } else {
            for b in &report.bad {
                println!(
                    "bad {} {}: {}{}",
                    b.section,
                    b.key,
                    b.problem,
                    if b.dropped { " (dropped)" } else { "" }
                );
            }
            match (report.bad.len(), self.repair) {
                (0, _) => println!("{} entries checked: all intact", report.checked),
                (n, false) => println!(
                    "{} entries checked: {n} bad (run with --repair to drop them)",
                    report.checked
                ),
                (n, true) => println!("{} entries checked: {n} bad, dropped", report.checked),
            }
        }
        Ok(if report.clean { 0 } else { 1 })
    }
}
