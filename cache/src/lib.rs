//! wprof's content-addressed store.
//!
//! Keys are blake3 digests of everything a value depends on; values are opaque bytes in an
//! envelope that carries their own digest, checked on every read. The store knows nothing
//! about WebAssembly: the host decides what a key covers and what a value holds.
//!
//! # Layout of a cache directory
//!
//! ```text
//! DIR/                         mode 0700; files 0600
//!   FORMAT                     "wprof cache 3"
//!   entries/<kind>/<ab>/<key>  one sealed value per file (<ab>: the key's first byte)
//!   usage/<kind>/<ab>/<key>    its usage record
//!   artifacts/<key>            companion files of the `artifacts` kind (compiled code)
//!   counters                   hits, misses, ... per kind, since when
//!   lock                       taken (flock) only to update usage records and counters
//! ```
//!
//! Every file is written aside and renamed into place. That makes the store:
//!
//! - **crash-safe**: a process killed at any moment leaves whole files or none; at worst a
//!   temporary file (ignored, removed by gc) or a value without its usage record (reads as
//!   never used). There is no log to recover and nothing to repair.
//! - **shared**: any number of processes read and write at once, with no lock on the
//!   values; two writers of one key write the same content-addressed value. Only the
//!   read-modify-write of usage records and counters takes a short file lock.
//! - **portable**: a copied or archived directory is a valid cache.
//!
//! The first design put everything in sled; sled 0.34 lets one process open a store at a
//! time, and a store killed mid-write could fail to open at all ("Read corrupted data"),
//! which the kill -9 tests of wprof reproduced within a few rounds.
//!
//! # Promises
//!
//! - A value that does not match its digest (a flipped bit, a truncated write, a value
//!   moved under another key) is never returned: [`Cache::get`] reports a miss and counts
//!   it as corrupt, and the next [`Cache::put`] replaces it. Companion files: their length
//!   is checked on every read, their digest by [`Cache::verify`] (and by whatever the host
//!   checks before using one).
//! - The directory is private to the user (0700, files 0600 on Unix).
//! - Every entry has a usage (first and last use, hits, size, a host note; see
//!   [`Cache::usage`]) and the cache keeps counters of hits, misses, corrupt values, writes
//!   and evictions per kind, for all processes, since it was created.
//!
//! # Example
//!
//! ```
//! use wprof_cache::{Cache, Kind};
//! let dir = tempfile::tempdir().unwrap();
//! let cache = Cache::open(dir.path()).unwrap();
//! let key = *blake3::hash(b"what the value depends on").as_bytes();
//! cache.put(Kind::Function, &key, b"instrumented body").unwrap();
//! assert_eq!(cache.get(Kind::Function, &key).unwrap().unwrap(), b"instrumented body");
//! assert_eq!(cache.counts(Kind::Function).hits, 1);
//! assert!(cache.verify(false).unwrap().is_empty());
//! ```

#![deny(missing_docs)]

mod envelope;
mod error;
mod files;
mod inventory;
mod kind;
mod records;
mod stats;
mod streaming;
mod usage;
mod values;
mod verify;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use error::CacheError;
pub use files::{bytes_from_hex, hex, key_from_hex};
pub use inventory::EntryInfo;
pub use kind::Kind;
pub use records::{RawRecord, Section};
pub use stats::{KindCounts, KindStats, Stats};
pub use streaming::ValueWriter;
pub use usage::{now_ms, Usage};
pub use values::{FileValue, Lookup};
pub use verify::Problem;

use stats::Counters;

/// A cache key: a blake3 digest.
pub type Key = [u8; 32];

/// What the FORMAT file says.
const FORMAT: &str = "wprof cache 3\n";

/// FORMAT files of earlier versions of this store, whose caches a run empties (they hold
/// values this version would misread: per-function files, uncompressed modules).
const OLDER_FORMATS: &[&str] = &["wprof cache 2\n"];

/// What a cache directory holds besides FORMAT and lock, all dropped with an older format.
const CONTENTS: &[&str] = &["entries", "usage", "artifacts", "counters"];

/// An open cache directory.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    /// Counts not yet added to the stored totals.
    pending: stats::Pending,
    /// Counts of this handle since it was opened.
    session_counts: Mutex<[KindCounts; Kind::ALL.len()]>,
    /// The older format this handle found and emptied, if it did.
    emptied: Option<String>,
    lock: Mutex<File>,
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CacheError {
    let what = format!("{what} {}", path.display());
    move |e| CacheError::io(what, e)
}

impl Cache {
    /// Opens (creating if needed) the cache in `dir`. Any number of processes may have it
    /// open at once.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        files::create_private_dir(dir).map_err(io("create cache directory", dir))?;
        let format = dir.join("FORMAT");
        let mut emptied = None;
        match files::read_optional(&format).map_err(io("read", &format))? {
            Some(found) if found == FORMAT.as_bytes() => {}
            Some(found) if OLDER_FORMATS.iter().any(|f| f.as_bytes() == found) => {
                // A cache of an earlier wprof: emptied, never misread. Each part is renamed
                // aside first, so that runs emptying it at once never trip over each other.
                for name in CONTENTS {
                    files::remove_aside(&dir.join(name)).map_err(io("empty", dir))?;
                }
                files::write_atomic(&format, FORMAT.as_bytes()).map_err(io("write", &format))?;
                emptied = Some(String::from_utf8_lossy(&found).trim().to_string());
            }
            Some(found) => {
                return Err(CacheError::Format {
                    path: dir.to_path_buf(),
                    found: String::from_utf8_lossy(&found).trim().to_string(),
                })
            }
            None => {
                // The store of wprof before this format (a sled database in `store/`): a
                // cache, so it is dropped rather than converted; runs rebuild what they need.
                let legacy = dir.join("store");
                if legacy.join("conf").is_file() && legacy.join("db").is_file() {
                    std::fs::remove_dir_all(&legacy).map_err(io("remove", &legacy))?;
                }
                files::write_atomic(&format, FORMAT.as_bytes()).map_err(io("write", &format))?
            }
        }
        let lock_path = dir.join("lock");
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let lock = options.open(&lock_path).map_err(io("open", &lock_path))?;
        let cache = Self {
            dir: dir.to_path_buf(),
            pending: Default::default(),
            session_counts: Default::default(),
            emptied,
            lock: Mutex::new(lock),
        };
        if cache.read_counters()?.is_none() {
            cache.locked(|c| {
                if c.read_counters()?.is_none() {
                    c.write_counters(&Counters::new(now_ms()))?;
                }
                Ok(())
            })?;
        }
        Ok(cache)
    }

    /// The format of an earlier wprof that [`Cache::open`] found in the directory and
    /// emptied (its FORMAT line), if it did: the caller's to report.
    pub fn emptied_older_format(&self) -> Option<&str> {
        self.emptied.as_deref()
    }

    /// The FORMAT line of an earlier wprof's cache in `dir`, if it holds one (which
    /// [`Cache::open`] would empty).
    pub fn older_format(dir: &Path) -> Option<String> {
        let found = std::fs::read(dir.join("FORMAT")).ok()?;
        OLDER_FORMATS
            .iter()
            .any(|f| f.as_bytes() == found)
            .then(|| String::from_utf8_lossy(&found).trim().to_string())
    }

    /// Whether `dir` holds a cache (of any version): its FORMAT file exists.
    pub fn exists(dir: &Path) -> bool {
        dir.join("FORMAT").is_file()
    }

    /// The directory this cache lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` holding the cache's file lock (and this handle's mutex).
    fn locked<T>(&self, f: impl FnOnce(&Self) -> Result<T, CacheError>) -> Result<T, CacheError> {
        let file = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        file.lock().map_err(io("lock", &self.dir.join("lock")))?;
        let result = f(self);
        let _ = file.unlock();
        result
    }

    fn entry_dir(&self, kind: Kind) -> PathBuf {
        self.dir.join("entries").join(kind.name())
    }

    fn entry_path(&self, kind: Kind, key: &Key) -> PathBuf {
        let h = hex(key);
        self.entry_dir(kind).join(&h[..2]).join(h)
    }

    fn usage_path(&self, kind: Kind, key: &Key) -> PathBuf {
        let h = hex(key);
        self.dir
            .join("usage")
            .join(kind.name())
            .join(&h[..2])
            .join(h)
    }

    fn file_dir(&self, kind: Kind) -> PathBuf {
        self.dir.join(kind.name())
    }

    /// Where the companion file of `key` is (or would be).
    pub fn file_path(&self, kind: Kind, key: &Key) -> PathBuf {
        self.file_dir(kind).join(hex(key))
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
        self.write_parts(path, &[bytes])
    }

    /// [`Cache::write`] of the concatenation of `parts`.
    fn write_parts(&self, path: &Path, parts: &[&[u8]]) -> Result<(), CacheError> {
        let parent = path.parent().expect("cache files live in folders");
        let result = files::write_atomic_parts(path, parts);
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                files::create_private_dir(parent).map_err(io("create", parent))?;
                files::write_atomic_parts(path, parts).map_err(io("write", path))
            }
            other => other.map_err(io("write", path)),
        }
    }

    fn count(&self, kind: Kind, counter: usize) {
        self.pending.add(kind, counter);
        let mut c = self
            .session_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let slot = &mut c[kind.index()];
        slot.set(counter, slot.get(counter) + 1);
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Best effort: a failure here only loses a few counts.
        let _ = self.store_counts();
    }
}

#[cfg(test)]
mod tests;
