//! wprof's content-addressed store.
//!
//! Keys are blake3 digests of everything a value depends on; values are opaque bytes in an
//! envelope that carries their own digest, checked on every read. The store knows nothing
//! about WebAssembly: the host decides what a key covers and what a value holds.
//!
//! # Promises
//!
//! - A value that does not match its digest (a flipped bit, a truncated write, a value
//!   moved under another key) is never returned: [`Cache::get`] reports a miss and counts
//!   it as corrupt, and the next [`Cache::put`] replaces it.
//! - The directory is created private to the user (mode 0700 on Unix).
//! - sled lets one process at a time open a directory; a second [`Cache::open`] fails at once
//!   with [`CacheError::Locked`], which callers treat as "run without the cache".
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
//! ```

#![deny(missing_docs)]

mod envelope;
mod error;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::CacheError;

/// A cache key: a blake3 digest.
pub type Key = [u8; 32];

/// The kinds of values, each in its own keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An instrumented function body with its offset map.
    Function,
    /// A module manifest: what an instrumented module is made of.
    Manifest,
    /// A whole instrumented module, keyed by its own digest.
    Module,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 3] = [Kind::Function, Kind::Manifest, Kind::Module];

    /// The kind's name (also the name of its sled tree).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Manifest => "manifests",
            Kind::Module => "modules",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Kind::Function => 1,
            Kind::Manifest => 2,
            Kind::Module => 3,
        }
    }
}

/// Counts of what this handle did, per kind, since it was opened.
#[derive(Debug, Default)]
pub struct Counters {
    hits: [AtomicU64; 3],
    misses: [AtomicU64; 3],
    corrupt: [AtomicU64; 3],
    writes: [AtomicU64; 3],
}

/// A snapshot of [`Counters`] for one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts {
    /// Reads that found a valid value.
    pub hits: u64,
    /// Reads that found nothing (or a corrupt value).
    pub misses: u64,
    /// Reads that found a value failing its digest check (also counted as misses).
    pub corrupt: u64,
    /// Values written.
    pub writes: u64,
}

/// An open cache directory.
#[derive(Debug)]
pub struct Cache {
    db: sled::Db,
    trees: [sled::Tree; 3],
    dir: PathBuf,
    counters: Counters,
}

impl Cache {
    /// Opens (creating if needed) the cache in `dir`.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        create_private_dir(dir).map_err(|source| CacheError::Io {
            what: format!("create cache directory {}", dir.display()),
            source,
        })?;
        let store = dir.join("store");
        let db = sled::Config::new()
            .path(&store)
            .open()
            .map_err(|e| CacheError::from_sled(e, &store))?;
        let open = |kind: Kind| {
            db.open_tree(kind.name())
                .map_err(|e| CacheError::from_sled(e, &store))
        };
        let trees = [
            open(Kind::Function)?,
            open(Kind::Manifest)?,
            open(Kind::Module)?,
        ];
        Ok(Self {
            db,
            trees,
            dir: dir.to_path_buf(),
            counters: Counters::default(),
        })
    }

    /// The directory this cache lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn tree(&self, kind: Kind) -> &sled::Tree {
        &self.trees[kind.tag() as usize - 1]
    }

    /// Reads the value stored under `key`, verified against its digest. A missing or
    /// corrupt value is `Ok(None)`.
    pub fn get(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        let i = kind.tag() as usize - 1;
        let raw = self
            .tree(kind)
            .get(key)
            .map_err(|e| CacheError::from_sled(e, &self.dir))?;
        let Some(raw) = raw else {
            self.counters.misses[i].fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        match envelope::open(kind.tag(), key, &raw) {
            Some(payload) => {
                self.counters.hits[i].fetch_add(1, Ordering::Relaxed);
                Ok(Some(payload.to_vec()))
            }
            None => {
                self.counters.misses[i].fetch_add(1, Ordering::Relaxed);
                self.counters.corrupt[i].fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// Whether a verified value is stored under `key` (without counting a hit or miss).
    pub fn contains(&self, kind: Kind, key: &Key) -> Result<bool, CacheError> {
        let raw = self
            .tree(kind)
            .get(key)
            .map_err(|e| CacheError::from_sled(e, &self.dir))?;
        Ok(raw.is_some_and(|raw| envelope::open(kind.tag(), key, &raw).is_some()))
    }

    /// Stores `value` under `key`, replacing whatever was there.
    pub fn put(&self, kind: Kind, key: &Key, value: &[u8]) -> Result<(), CacheError> {
        let sealed = envelope::seal(kind.tag(), key, value);
        self.tree(kind)
            .insert(key, sealed)
            .map_err(|e| CacheError::from_sled(e, &self.dir))?;
        self.counters.writes[kind.tag() as usize - 1].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> Result<(), CacheError> {
        self.db
            .flush()
            .map_err(|e| CacheError::from_sled(e, &self.dir))?;
        Ok(())
    }

    /// What this handle did for `kind` since it was opened.
    pub fn counts(&self, kind: Kind) -> KindCounts {
        let i = kind.tag() as usize - 1;
        let c = &self.counters;
        KindCounts {
            hits: c.hits[i].load(Ordering::Relaxed),
            misses: c.misses[i].load(Ordering::Relaxed),
            corrupt: c.corrupt[i].load(Ordering::Relaxed),
            writes: c.writes[i].load(Ordering::Relaxed),
        }
    }

    /// Raw access for tests and repair tools: overwrites the stored bytes of `key` as is,
    /// without an envelope.
    #[doc(hidden)]
    pub fn put_raw_for_tests(&self, kind: Kind, key: &Key, raw: &[u8]) -> Result<(), CacheError> {
        self.tree(kind)
            .insert(key, raw)
            .map_err(|e| CacheError::from_sled(e, &self.dir))?;
        Ok(())
    }

    /// The stored bytes of `key` with their envelope, unverified.
    #[doc(hidden)]
    pub fn get_raw_for_tests(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self
            .tree(kind)
            .get(key)
            .map_err(|e| CacheError::from_sled(e, &self.dir))?
            .map(|v| v.to_vec()))
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        *blake3::hash(s.as_bytes()).as_bytes()
    }

    #[test]
    fn round_trip_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert_eq!(cache.get(Kind::Manifest, &key("a")).unwrap(), None);
        cache.put(Kind::Manifest, &key("a"), b"value").unwrap();
        assert_eq!(
            cache.get(Kind::Manifest, &key("a")).unwrap().unwrap(),
            b"value"
        );
        // Kinds are separate keyspaces.
        assert_eq!(cache.get(Kind::Function, &key("a")).unwrap(), None);
        let c = cache.counts(Kind::Manifest);
        assert_eq!((c.hits, c.misses, c.writes), (1, 1, 1));
    }

    #[test]
    fn every_flipped_byte_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let k = key("body");
        cache
            .put(Kind::Function, &k, b"some instrumented bytes")
            .unwrap();
        let good = cache
            .get_raw_for_tests(Kind::Function, &k)
            .unwrap()
            .unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            cache.put_raw_for_tests(Kind::Function, &k, &bad).unwrap();
            assert_eq!(cache.get(Kind::Function, &k).unwrap(), None, "byte {at}");
        }
        // Truncated and moved values are misses too.
        cache
            .put_raw_for_tests(Kind::Function, &k, &good[..good.len() - 1])
            .unwrap();
        assert_eq!(cache.get(Kind::Function, &k).unwrap(), None);
        cache
            .put_raw_for_tests(Kind::Function, &key("other"), &good)
            .unwrap();
        assert_eq!(cache.get(Kind::Function, &key("other")).unwrap(), None);
        assert!(cache.counts(Kind::Function).corrupt >= good.len() as u64);
    }

    #[test]
    fn a_second_open_is_locked_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Cache::open(dir.path()).unwrap();
        // The second handle fails at once with a lock error: no hang, no other error.
        match Cache::open(dir.path()) {
            Err(CacheError::Locked { .. }) => {}
            other => panic!("expected a lock error, got {other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/cache");
        Cache::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
