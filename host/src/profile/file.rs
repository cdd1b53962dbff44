//! The profile on disk: compact JSON compressed with zstd, encoded in memory and written in
//! one piece, atomically (a reader sees the old file or the new one, never a part).
//!
//! Why this encoding: the JSON is the schema `wprof report --format json` prints and
//! scripts read (`zstd -dc app.wprof | jq`), so the file needs no second schema; zstd makes
//! it about a tenth of its pretty-printed size at a few hundred MB/s. Profiles written
//! before the compression (plain JSON of the same format version) are still read.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::Context;

use super::{Profile, FORMAT_VERSION};

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// zstd's level: 3 (its default) compresses a profile's JSON about tenfold, several times
/// faster than encoding the JSON itself; higher levels gain little on this data.
const LEVEL: i32 = 3;

/// The largest decompressed profile read (a damaged or hostile file cannot make wprof
/// allocate more).
const MAX_DECODED: u64 = 4 << 30;

impl Profile {
    /// The file's bytes: compact JSON, zstd-compressed.
    pub fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let json = serde_json::to_vec(self).context("failed to encode the profile")?;
        zstd::bulk::compress(&json, LEVEL).context("failed to compress the profile")
    }

    /// Writes the encoded profile to `out` in one `write_all`.
    pub fn write_to(&self, out: &mut impl Write) -> anyhow::Result<()> {
        out.write_all(&self.encode()?)?;
        Ok(())
    }

    /// Writes the profile to `path` atomically: a reader sees the old file or the new one,
    /// never a part.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        write_bytes(&self.encode()?, path)
    }

    /// Reads a profile written by [`Profile::write`] (or by a wprof of the same profile
    /// format that wrote plain JSON).
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::decode(&bytes).with_context(|| format!("{} is not a wprof profile", path.display()))
    }

    /// Decodes a profile file's bytes: zstd-compressed JSON, or plain JSON.
    pub fn decode(bytes: &[u8]) -> anyhow::Result<Self> {
        let json = if bytes.starts_with(&ZSTD_MAGIC) {
            decompress(bytes)?
        } else {
            bytes.to_vec()
        };
        let profile: Profile = serde_json::from_slice(&json)?;
        anyhow::ensure!(
            profile.format_version == FORMAT_VERSION,
            "profile format {}, this wprof reads format {FORMAT_VERSION}",
            profile.format_version
        );
        Ok(profile)
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory, renamed into
/// place.
pub fn write_bytes(bytes: &[u8], path: &Path) -> anyhow::Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// Writes what `write` writes to `path`, buffered, through a temporary file in the same
/// directory, renamed into place once whole: a reader never sees half a file, and a failed
/// write leaves an earlier file as it was. A path that is not a regular file (a device, a
/// pipe) is written directly.
pub fn write_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    // A device, a pipe or a socket (`-o /dev/null`, `/dev/stdout`, a FIFO) is written as it
    // is: renaming a file over it would put a regular file in its place (as root, in /dev).
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("failed to open {}", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        return write(&mut out)
            .and_then(|()| out.flush())
            .with_context(|| format!("failed to write {}", path.display()));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // A directory the user named (`-o profiles/app.wprof`, or the configuration file's
    // `output`) is made when missing.
    std::fs::create_dir_all(dir)
        .with_context(|| format!("failed to create the directory {}", dir.display()))?;
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("failed to create a file in {}", dir.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, tmp);
    write(&mut out)
        .and_then(|()| out.flush())
        .with_context(|| format!("failed to write in {}", dir.display()))?;
    let tmp = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("failed to write in {}", dir.display()))?;
    tmp.persist(path)
        .with_context(|| format!("failed to write {}", path.display()))?;
    Ok(())
}

fn decompress(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let decoder = zstd::stream::read::Decoder::with_buffer(bytes)?;
    let mut json = Vec::new();
    decoder
        .take(MAX_DECODED + 1)
        .read_to_end(&mut json)
        .context("damaged compressed data")?;
    anyhow::ensure!(
        json.len() as u64 <= MAX_DECODED,
        "more than {} GiB of profile",
        MAX_DECODED >> 30
    );
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextRecord, EdgeRecord, FunctionRecord, ModuleRef};

    /// A profile the size of a call-heavy program's: 2,000 functions, 6,000 edges, 60,000
    /// contexts.
    fn large_profile() -> Profile {
        let mut p = Profile {
            format_version: FORMAT_VERSION,
            tool: "wprof test".into(),
            module: ModuleRef {
                path: "big.wasm".into(),
                blake3: "ab".repeat(32),
            },
            mode: "time".into(),
            unit: "ns".into(),
            exit_code: 0,
            outcome: "exit".into(),
            trap: None,
            wall_time: Some(123_456_789),
            total: 123_000_000,
            instrumentation: Default::default(),
            excluded_ns: None,
            cpu_wait_ns: None,
            unprobed: Vec::new(),
            untimed: Vec::new(),
            untimed_samples: None,
            ticks: None,
            probe_overhead: None,
            functions: Vec::new(),
            edges: Vec::new(),
            contexts: Vec::new(),
            sampling: None,
            live: None,
            adaptive: None,
            injections: Vec::new(),
            coverage: None,
            host_calls: Vec::new(),
            allocations: None,
            threads: None,
            symbols: None,
            lines: None,
        };
        p.functions = (0..2000)
            .map(|id| FunctionRecord {
                id,
                name: format!("package.(*type{}).method{}", id % 97, id),
                kind: "local".into(),
                calls: u64::from(id) * 1_234_567 % 99_991,
                self_time: u64::from(id) * 7_654_321 % 1_000_003,
                inclusive: u64::from(id) * 9_876_543 % 10_000_019,
                min_self: Some(u64::from(id % 13)),
                max_self: Some(u64::from(id) * 31),
            })
            .collect();
        p.edges = (0..6000)
            .map(|i| EdgeRecord {
                caller: (i % 7 != 0).then_some(i % 2000),
                callee: (i * 13) % 2000,
                site: None,
                calls: u64::from(i) * 3 + 1,
                inclusive: u64::from(i) * 1_000 + 17,
            })
            .collect();
        p.contexts = (0..60_000)
            .map(|id| ContextRecord {
                id,
                parent: id.checked_sub(1).map(|p| p / 3),
                function: (id * 7) % 2000,
                calls: u64::from(id % 1000) + 1,
                self_time: u64::from(id) * 77 % 100_000,
                inclusive: u64::from(id) * 991 % 1_000_000,
                host: None,
                allocs: None,
                thread: None,
            })
            .collect();
        p
    }

    /// Counts the calls to `write` that reach it.
    #[derive(Default)]
    struct CountingWriter {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl Write for CountingWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_large_profile_is_written_in_one_piece_and_compact() {
        let profile = large_profile();
        let mut out = CountingWriter::default();
        profile.write_to(&mut out).unwrap();
        // One write of the whole file: an unbuffered encoder makes one per JSON token
        // (hundreds of thousands here).
        assert_eq!(out.writes, 1);
        let pretty = serde_json::to_vec_pretty(&profile).unwrap();
        assert!(
            out.bytes.len() * 4 <= pretty.len(),
            "{} bytes, pretty JSON {}",
            out.bytes.len(),
            pretty.len()
        );
        assert_eq!(Profile::decode(&out.bytes).unwrap(), profile);
    }

    #[test]
    fn files_round_trip_and_old_plain_json_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let profile = large_profile();
        let path = dir.path().join("p.wprof");
        profile.write(&path).unwrap();
        assert!(std::fs::read(&path).unwrap().starts_with(&ZSTD_MAGIC));
        assert_eq!(Profile::read(&path).unwrap(), profile);

        // What wprof wrote before the compression: pretty-printed JSON.
        let old = dir.path().join("old.wprof");
        std::fs::write(&old, serde_json::to_vec_pretty(&profile).unwrap()).unwrap();
        assert_eq!(Profile::read(&old).unwrap(), profile);
    }

    #[test]
    fn damaged_and_foreign_files_are_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut encoded = large_profile().encode().unwrap();
        let cut = dir.path().join("cut.wprof");
        std::fs::write(&cut, &encoded[..encoded.len() / 2]).unwrap();
        let message = format!("{:#}", Profile::read(&cut).unwrap_err());
        assert!(message.contains("is not a wprof profile"), "{message}");

        let middle = encoded.len() / 2;
        encoded[middle] ^= 0xff;
        assert!(Profile::decode(&encoded).is_err());
        assert!(Profile::decode(b"precious").is_err());
        assert!(Profile::decode(&ZSTD_MAGIC).is_err());

        let mut other = large_profile();
        other.format_version = FORMAT_VERSION + 1;
        let message = format!(
            "{:#}",
            Profile::decode(&other.encode().unwrap()).unwrap_err()
        );
        assert!(message.contains("this wprof reads format"), "{message}");
    }
}
