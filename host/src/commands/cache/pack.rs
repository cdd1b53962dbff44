//! `wprof cache pack` / `wprof cache unpack`: the whole cache as one file to attach to a
//! support ticket, and back.
//!
//! A bundle is a zstd-compressed tar (with zstd's checksum) of the store's records as
//! stored, each still sealed with its own digest:
//!
//! ```text
//! wprof-cache-bundle/FORMAT                 "wprof cache bundle 1"
//! wprof-cache-bundle/<section>/<hex key>    one sealed record
//! wprof-cache-bundle/INDEX                  "<section> <hex key> <length> <blake3>" per record
//! ```
//!
//! Sections are `functions`, `manifests`, `modules`, `usage` and `stats`. Compiled code is
//! not packed: it is specific to a machine and authenticated with the user's secret key,
//! so it could not be used elsewhere anyway. Unpacking reads the whole bundle and checks
//! everything (the index, every record's seal, nothing else inside) before writing
//! anything: a damaged or tampered bundle is refused and leaves the target cache as it
//! was.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use wprof_cache::{hex, Cache, Kind, Section};

use super::{failed, CacheDirArg};
use crate::exit::Failure;

const ROOT: &str = "wprof-cache-bundle";
const FORMAT: &str = "wprof cache bundle 1\n";
/// No record is larger (a whole module is a few MB).
const MAX_RECORD: u64 = 1 << 30;
/// Nor a bundle, unpacked.
const MAX_TOTAL: u64 = 16 << 30;

fn sections() -> [Section; 5] {
    [
        Section::Values(Kind::Function),
        Section::Values(Kind::Manifest),
        Section::Values(Kind::Module),
        Section::Usage,
        Section::Stats,
    ]
}

/// Pack the cache into one compressed file, for a support ticket.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The bundle (tar + zstd) holds every instrumented body, manifest, instrumented and original
module, usage record and counter, each sealed with its digest, and an index. Compiled code
is left out: it only loads on the machine and for the user that compiled it.

Examples:
  wprof cache pack -o bundle.tar.zst
  wprof cache pack --cache-dir /tmp/ci-cache -o ci-cache.tar.zst

Exit status:
  0; 2 if DIR holds no cache or OUT cannot be written.")]
pub struct PackCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// The bundle to write.
    #[arg(short = 'o', long = "output", value_name = "BUNDLE")]
    output: PathBuf,
}

/// Unpack a bundle made by `wprof cache pack` into a cache directory, after checking it.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Everything in the bundle is checked before anything is written: zstd's checksum, the
index, and every record's digest. A bad bundle is refused whole. Records are added to the
cache in DIR (created if needed); counters are taken only into an empty cache.

Examples:
  wprof cache unpack bundle.tar.zst --cache-dir ./ticket-1234
  wprof cache ls --cache-dir ./ticket-1234

Exit status:
  0; 2 if the bundle is unreadable, damaged or not a wprof bundle (nothing is written).")]
pub struct UnpackCommand {
    /// The bundle to read.
    #[arg(value_name = "BUNDLE")]
    bundle: PathBuf,

    #[command(flatten)]
    dir: CacheDirArg,
}

fn io_failure(what: &str, path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::input(format!("cannot {what} {}: {e}", path.display()))
}

/// A record as packed.
type Record = (Section, Vec<u8>, Vec<u8>);

/// Writes the bundle of `records` to `out`.
fn write_bundle(out: &Path, records: &[Record]) -> Result<(), Failure> {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_failure("write", out, e))?;
    let write = |file: &std::fs::File| -> std::io::Result<()> {
        let mut zstd = zstd::Encoder::new(file, 3)?;
        zstd.include_checksum(true)?;
        let mut tar = tar::Builder::new(zstd);
        let mut add = |path: &str, data: &[u8]| -> std::io::Result<()> {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o600);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            tar.append_data(&mut header, format!("{ROOT}/{path}"), data)
        };
        add("FORMAT", FORMAT.as_bytes())?;
        let mut index = String::new();
        for (section, key, raw) in records {
            add(&format!("{}/{}", section.name(), hex(key)), raw)?;
            index.push_str(&format!(
                "{} {} {} {}\n",
                section.name(),
                hex(key),
                raw.len(),
                blake3::hash(raw).to_hex()
            ));
        }
        add("INDEX", index.as_bytes())?;
        tar.into_inner()?.finish()?.sync_all()
    };
    write(temp.as_file()).map_err(|e| io_failure("write", out, e))?;
    temp.persist(out)
        .map_err(|e| io_failure("write", out, e.error))?;
    Ok(())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads and checks a whole bundle; every record is valid when this returns.
fn read_bundle(path: &Path) -> Result<Vec<Record>, Failure> {
    let bad = |why: String| {
        Failure::input(format!(
            "{} is not a valid wprof bundle: {why}",
            path.display()
        ))
    };
    let file = std::fs::File::open(path).map_err(|e| io_failure("read", path, e))?;
    let zstd = zstd::Decoder::new(file).map_err(|e| bad(e.to_string()))?;
    let mut archive = tar::Archive::new(zstd);
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut total = 0u64;
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(bad("it holds something other than plain files".into()));
        }
        let name = entry
            .path()
            .map_err(|e| bad(e.to_string()))?
            .to_str()
            .map(str::to_string)
            .ok_or_else(|| bad("a name that is not UTF-8".into()))?;
        let Some(inner) = name.strip_prefix(&format!("{ROOT}/")) else {
            return Err(bad(format!("unexpected file {name:?}")));
        };
        let size = entry.header().size().map_err(|e| bad(e.to_string()))?;
        total += size;
        if size > MAX_RECORD || total > MAX_TOTAL {
            return Err(bad("it is larger than any cache".into()));
        }
        let mut data = Vec::with_capacity(size as usize);
        entry
            .read_to_end(&mut data)
            .map_err(|e| bad(e.to_string()))?;
        if files.insert(inner.to_string(), data).is_some() {
            return Err(bad(format!("{name:?} appears twice")));
        }
    }
    if files.remove("FORMAT").as_deref() != Some(FORMAT.as_bytes()) {
        return Err(bad("no FORMAT of a version this wprof reads".into()));
    }
    let index = files
        .remove("INDEX")
        .ok_or_else(|| bad("no INDEX".into()))?;
    let index = String::from_utf8(index).map_err(|_| bad("INDEX is not text".into()))?;
    let mut records = Vec::new();
    for line in index.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [section_name, key_hex, len, digest] = parts.as_slice() else {
            return Err(bad(format!("INDEX line {line:?}")));
        };
        let section = Section::from_name(section_name)
            .ok_or_else(|| bad(format!("unknown section {section_name:?}")))?;
        let key = unhex(key_hex).ok_or_else(|| bad(format!("bad key {key_hex:?}")))?;
        let name = format!("{section_name}/{key_hex}");
        let raw = files
            .remove(&name)
            .ok_or_else(|| bad(format!("{name} is in the INDEX but missing")))?;
        if raw.len().to_string() != *len || blake3::hash(&raw).to_hex().as_str() != *digest {
            return Err(bad(format!("{name} does not match the INDEX")));
        }
        if !Cache::record_is_valid(section, &key, &raw) {
            return Err(bad(format!("{name} does not match its own digest")));
        }
        records.push((section, key, raw));
    }
    if let Some(extra) = files.keys().next() {
        return Err(bad(format!("{extra} is not in the INDEX")));
    }
    Ok(records)
}

impl PackCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache = self.dir.open_existing()?;
        let mut records = Vec::new();
        for section in sections() {
            for (key, raw) in cache.records(section).map_err(failed)? {
                // Usage of compiled code stays behind with the code.
                if section == Section::Usage
                    && Cache::usage_record_kind(&key).is_some_and(|k| !k.is_portable())
                {
                    continue;
                }
                records.push((section, key, raw));
            }
        }
        drop(cache);
        write_bundle(&self.output, &records)?;
        let bytes = std::fs::metadata(&self.output)
            .map(|m| m.len())
            .unwrap_or(0);
        crate::say!(
            "wprof: {} records packed into {} ({})",
            records.len(),
            self.output.display(),
            crate::display::format_size(bytes)
        );
        Ok(0)
    }
}

impl UnpackCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let records = read_bundle(&self.bundle)?;
        let dir = self.dir.dir()?;
        let cache = super::open_or_create(&dir)?;
        let fresh = cache.is_empty().map_err(failed)?;
        let mut added = 0;
        // Values before their usage records, as a run writes them.
        for pass in [0, 1] {
            for (section, key, raw) in &records {
                if matches!(section, Section::Values(_)) != (pass == 0) {
                    continue;
                }
                if cache
                    .import_record(*section, key, raw, fresh)
                    .map_err(failed)?
                    && matches!(section, Section::Values(_))
                {
                    added += 1;
                }
            }
        }
        cache.flush().map_err(failed)?;
        drop(cache);
        crate::say!(
            "wprof: {added} entries unpacked into {} (bundle checked: {} records)",
            dir.display(),
            records.len()
        );
        Ok(0)
    }
}
