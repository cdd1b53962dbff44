//! What a cache holds, as wprof understands it: modules (one per manifest) with their
//! usage, the instrumented and original modules and compiled artifacts they point to;
//! finding a module or function from what a person types; least-recently-used eviction
//! that keeps each module's parts together; sizes and dates for people.
//!
//! Nothing here compiles or runs anything: it reads values and decodes manifests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use wprof_cache::{key_from_hex, Cache, CacheError, Key, Kind, Lookup, Usage};

use crate::prepare::cache_values::{facts_key, ArtifactEntry, Manifest, ManifestFunction};
use wprof_cache::hex;

/// One module the cache knows: a manifest and what it points to.
#[derive(Debug, Clone)]
pub struct ModuleRecord {
    /// Its number in `wprof cache ls` (1-based, in order of first use).
    pub index: usize,
    /// The manifest's key.
    pub manifest_key: Key,
    /// The manifest.
    pub manifest: Manifest,
    /// The manifest's usage record.
    pub usage: Option<Usage>,
    /// The instrumented module is stored and intact.
    pub module_stored: bool,
    /// The original module is stored and intact.
    pub original_stored: bool,
    /// Compiled artifacts of the instrumented module: the wasmtime version of each.
    pub compiled: Vec<String>,
}

impl ModuleRecord {
    /// The path the module was last loaded from.
    pub fn path(&self) -> String {
        match &self.usage {
            Some(u) if !u.note.is_empty() => String::from_utf8_lossy(&u.note).into_owned(),
            _ => self.manifest.path.clone(),
        }
    }

    /// Functions defined in the module.
    pub fn local_functions(&self) -> usize {
        self.manifest
            .functions
            .iter()
            .filter(|f| f.kind != "import")
            .count()
    }

    /// The instrumented module's digest.
    pub fn instrumented_digest(&self) -> Option<Key> {
        key_from_hex(&self.manifest.instrumented_digest)
    }

    /// The original module's digest.
    pub fn module_digest(&self) -> Option<Key> {
        key_from_hex(&self.manifest.module_digest)
    }
}

/// Every module in the cache, in order of first use, without counting reads.
pub fn modules(cache: &Cache) -> Result<Vec<ModuleRecord>, CacheError> {
    let mut compiled: HashMap<String, Vec<String>> = HashMap::new();
    for key in cache.keys(Kind::Artifact)? {
        if let Lookup::Valid(v) = cache.peek(Kind::Artifact, &key)? {
            if let Some(a) = ArtifactEntry::decode(&v) {
                compiled
                    .entry(a.instrumented_digest)
                    .or_default()
                    .push(a.wasmtime);
            }
        }
    }
    let mut out = Vec::new();
    for key in cache.keys(Kind::Manifest)? {
        let Lookup::Valid(bytes) = cache.peek(Kind::Manifest, &key)? else {
            continue;
        };
        let Some(manifest) = Manifest::decode(&bytes) else {
            continue;
        };
        let stored = |digest: &str| -> Result<bool, CacheError> {
            Ok(match key_from_hex(digest) {
                Some(k) => cache.contains(Kind::Module, &k)?,
                None => false,
            })
        };
        out.push(ModuleRecord {
            index: 0,
            manifest_key: key,
            usage: cache.usage(Kind::Manifest, &key)?,
            module_stored: stored(&manifest.instrumented_digest)?,
            original_stored: stored(&manifest.module_digest)?,
            compiled: compiled
                .get(manifest.compiled_digest())
                .cloned()
                .unwrap_or_default(),
            manifest,
        });
    }
    out.sort_by_key(|m| (m.usage.as_ref().map_or(0, |u| u.first_use), m.manifest_key));
    for (i, m) in out.iter_mut().enumerate() {
        m.index = i + 1;
    }
    Ok(out)
}

/// The digest wprof gives the module in file `path` (text is converted first, as
/// `wprof run` does), if it is a readable module.
fn digest_of_file(path: &Path) -> Option<Key> {
    let raw = std::fs::read(path).ok()?;
    let bytes = if raw.starts_with(b"\0asm") {
        raw
    } else {
        wat::parse_bytes(&raw).ok()?.into_owned()
    };
    Some(*blake3::hash(&bytes).as_bytes())
}

/// Finds the module `spec` names: its number in `wprof cache ls`, a path (of a file,
/// matched by content, or as recorded), a file name or stem, or a prefix (4+ hex digits) of
/// the module's digest, the instrumented module's digest, or the manifest key.
pub fn resolve<'a>(modules: &'a [ModuleRecord], spec: &str) -> Result<&'a ModuleRecord, String> {
    if let Ok(n) = spec.parse::<usize>() {
        if let Some(m) = modules.iter().find(|m| m.index == n) {
            return Ok(m);
        }
    }
    let by_content = Path::new(spec)
        .is_file()
        .then(|| digest_of_file(Path::new(spec)))
        .flatten()
        .map(|d| hex(&d));
    let prefix = spec.to_ascii_lowercase();
    let is_prefix = prefix.len() >= 4 && prefix.chars().all(|c| c.is_ascii_hexdigit());
    let found: Vec<&ModuleRecord> = modules
        .iter()
        .filter(|m| {
            let path = m.path();
            let p = Path::new(&path);
            by_content.as_deref() == Some(m.manifest.module_digest.as_str())
                || path == spec
                || m.manifest.path == spec
                || p.file_name().is_some_and(|n| n == spec)
                || p.file_stem().is_some_and(|n| n == spec)
                || (is_prefix
                    && (m.manifest.module_digest.starts_with(&prefix)
                        || m.manifest.instrumented_digest.starts_with(&prefix)
                        || hex(&m.manifest_key).starts_with(&prefix)))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no module in the cache matches {spec:?} (see `wprof cache ls`)"
        )),
        many => Err(format!(
            "{spec:?} matches {} modules ({}); give its number from `wprof cache ls`",
            many.len(),
            many.iter()
                .map(|m| format!("#{} {} {}", m.index, m.path(), m.manifest.mode))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Finds a defined function of a module: by id (its index in the original module), name,
/// or a prefix (4+ hex digits) of its body's cache key.
pub fn resolve_function<'a>(
    module: &'a ModuleRecord,
    spec: &str,
) -> Result<&'a ManifestFunction, String> {
    let functions = &module.manifest.functions;
    if let Ok(id) = spec.parse::<u32>() {
        if let Some(f) = functions.iter().find(|f| f.id == id) {
            return Ok(f);
        }
    }
    let prefix = spec.to_ascii_lowercase();
    let is_prefix = prefix.len() >= 4 && prefix.chars().all(|c| c.is_ascii_hexdigit());
    let found: Vec<&ManifestFunction> = functions
        .iter()
        .filter(|f| {
            f.name == spec
                || (is_prefix
                    && f.key
                        .is_some_and(|k| wprof_cache::hex(&k).starts_with(&prefix)))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("module #{} has no function {spec:?}", module.index)),
        many => Err(format!(
            "{spec:?} matches {} functions of module #{} (ids {}); give an id",
            many.len(),
            module.index,
            many.iter()
                .map(|f| f.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// What [`gc`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    /// Bytes before.
    pub before: u64,
    /// Bytes after.
    pub after: u64,
    /// Entries evicted.
    pub evicted_entries: u64,
    /// Bytes they took.
    pub evicted_bytes: u64,
    /// Bytes of leftovers of interrupted work removed first (see
    /// [`Cache::sweep_leftovers`]).
    pub leftover_bytes: u64,
}

/// Removes the leftovers of interrupted work, then evicts the least recently used entries
/// until the cache holds at most `cap` bytes. A
/// module's manifest, its instrumented and original modules, its compiled artifacts and
/// what was learnt of it (its facts) go together (when the last manifest using them goes); function bodies, and anything no
/// manifest uses, go on their own, and a pack stored against a value that went goes with it.
pub fn gc(cache: &Cache, cap: u64) -> Result<GcReport, CacheError> {
    let leftover_bytes = cache.sweep_leftovers()?;
    let mut entries: BTreeMap<(Kind, Key), (u64, u64)> = BTreeMap::new();
    for kind in Kind::ALL {
        for e in cache.entries(kind)? {
            let last = e.usage.as_ref().map_or(0, |u| u.last_use);
            entries.insert((kind, e.key), (e.size, last));
        }
    }
    let before: u64 = entries.values().map(|(s, _)| s).sum();
    let mut report = GcReport {
        before,
        after: before,
        leftover_bytes,
        ..Default::default()
    };
    if before <= cap {
        return Ok(report);
    }
    // Which artifacts belong to which instrumented module.
    let mut artifacts_of: HashMap<Key, Vec<Key>> = HashMap::new();
    for key in cache.keys(Kind::Artifact)? {
        if let Lookup::Valid(v) = cache.peek(Kind::Artifact, &key)? {
            if let Some(d) =
                ArtifactEntry::decode(&v).and_then(|a| key_from_hex(&a.instrumented_digest))
            {
                artifacts_of.entry(d).or_default().push(key);
            }
        }
    }
    // Units: each manifest with what it points to, and every other entry alone.
    let mut parts: HashMap<Key, Vec<(Kind, Key)>> = HashMap::new();
    let mut users: HashMap<(Kind, Key), usize> = HashMap::new();
    for key in cache.keys(Kind::Manifest)? {
        let Lookup::Valid(bytes) = cache.peek(Kind::Manifest, &key)? else {
            continue;
        };
        let Some(m) = Manifest::decode(&bytes) else {
            continue;
        };
        let mut p = Vec::new();
        for d in [&m.instrumented_digest, &m.module_digest] {
            if let Some(d) = key_from_hex(d) {
                p.push((Kind::Module, d));
            }
        }
        if let Some(d) = key_from_hex(m.compiled_digest()) {
            for a in artifacts_of.get(&d).into_iter().flatten() {
                p.push((Kind::Artifact, *a));
            }
        }
        if let Some(d) = key_from_hex(&m.module_digest) {
            p.push((Kind::Facts, facts_key(&d)));
        }
        p.retain(|e| entries.contains_key(e));
        p.dedup();
        for e in &p {
            *users.entry(*e).or_default() += 1;
        }
        parts.insert(key, p);
    }
    let mut units: Vec<(u64, (Kind, Key))> = Vec::new();
    for (&(kind, key), &(_, last)) in &entries {
        if users.contains_key(&(kind, key)) {
            continue;
        }
        let last = match parts.get(&key).filter(|_| kind == Kind::Manifest) {
            Some(p) => p
                .iter()
                .filter_map(|e| entries.get(e).map(|(_, l)| *l))
                .fold(last, u64::max),
            None => last,
        };
        units.push((last, (kind, key)));
    }
    units.sort();
    let mut gone: HashSet<(Kind, Key)> = HashSet::new();
    let mut evict = |e: (Kind, Key), report: &mut GcReport| -> Result<(), CacheError> {
        if gone.insert(e) && cache.evict(e.0, &e.1)? {
            let size = entries.get(&e).map_or(0, |(s, _)| *s);
            report.after -= size;
            report.evicted_bytes += size;
            report.evicted_entries += 1;
        }
        Ok(())
    };
    for (_, unit) in units {
        if report.after <= cap {
            break;
        }
        evict(unit, &mut report)?;
        if unit.0 == Kind::Manifest {
            for part in parts.get(&unit.1).into_iter().flatten() {
                let n = users.get_mut(part).expect("counted above");
                *n -= 1;
                if *n == 0 {
                    evict(*part, &mut report)?;
                }
            }
        }
    }
    // A pack stored against a value that is gone cannot be read: it goes too.
    if report.evicted_entries > 0 {
        for (kind, against) in [
            (Kind::Function, Kind::Module),
            (Kind::Compiled, Kind::Artifact),
        ] {
            for key in cache.keys(kind)? {
                let Lookup::Valid(value) = cache.peek(kind, &key)? else {
                    continue;
                };
                if let Some(r) = crate::prepare::referenced::reference(&value) {
                    if !cache.contains(against, &r.locator)? {
                        evict((kind, key), &mut report)?;
                    }
                }
            }
        }
    }
    cache.flush()?;
    Ok(report)
}
