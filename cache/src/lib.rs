//! wprof's content-addressed store.
//!
//! Keys are blake3 digests of everything a value depends on; values are opaque bytes in an
//! envelope that carries their own digest, checked on every read. The store knows nothing
//! about WebAssembly: the host decides what a key covers and what a value holds.
//!
//! # Layout of a cache directory
//!
//! ```text
//! DIR/            mode 0700
//!   store/        the sled database: one tree per kind, plus `usage` and `stats`
//!   artifacts/    companion files of the `artifacts` kind, one per key (hex)
//! ```
//!
//! # Promises
//!
//! - A value that does not match its digest (a flipped bit, a truncated write, a value
//!   moved under another key) is never returned: [`Cache::get`] reports a miss and counts
//!   it as corrupt, and the next [`Cache::put`] replaces it. The same holds for companion
//!   files: their length is checked on every read, their digest by [`Cache::verify`] (and
//!   by whatever the host checks before using one).
//! - The directory is created private to the user (mode 0700 on Unix), files 0600.
//! - sled lets one process at a time open a directory: [`Cache::open`] fails at once with
//!   [`CacheError::Locked`], [`Cache::open_wait`] retries with backoff for a while first.
//! - A process killed at any moment leaves a store that opens; what it had not finished
//!   writing is absent, never torn: values are sealed, companion files are renamed into
//!   place before their record is written, and leftovers are removed at the next open.
//! - Every entry has a usage record (first and last use, hits, size, a host note) and the
//!   store keeps counters of hits, misses, corrupt values, writes and evictions per kind, for
//!   all processes, since the cache was created.
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
//! assert_eq!(cache.usage(Kind::Function, &key).unwrap().unwrap().hits, 1);
//! ```

#![deny(missing_docs)]

mod envelope;
mod error;
mod files;
mod stats;
mod usage;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use error::CacheError;
pub use files::{hex, key_from_hex};
pub use stats::KindCounts;
pub use usage::{now_ms, Usage};

/// A cache key: a blake3 digest.
pub type Key = [u8; 32];

/// The kinds of values, each in its own keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An instrumented function body with its offset map.
    Function,
    /// A module manifest: what an instrumented module is made of.
    Manifest,
    /// A whole module (original or instrumented), keyed by its own digest.
    Module,
    /// A small record in the store plus a large companion file beside it (wprof: compiled
    /// machine code).
    Artifact,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 4] = [Kind::Function, Kind::Manifest, Kind::Module, Kind::Artifact];

    /// The kind's name (also the name of its sled tree, and of its folder of files).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Manifest => "manifests",
            Kind::Module => "modules",
            Kind::Artifact => "artifacts",
        }
    }

    /// The kind called `name` (see [`Kind::name`]).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether values of this kind have a companion file.
    pub fn has_file(self) -> bool {
        self == Kind::Artifact
    }

    fn tag(self) -> u8 {
        self.index() as u8 + 1
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Kind::Function => 0,
            Kind::Manifest => 1,
            Kind::Module => 2,
            Kind::Artifact => 3,
        }
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }
}

/// The envelope tag of usage records: this bit over the kind's tag.
const USAGE_TAG: u8 = 0x80;

/// What a lookup found, without counting it as a hit or miss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing stored under the key.
    Missing,
    /// Something is stored but fails its check; says what is wrong.
    Corrupt(String),
    /// The value (for kinds with a file, the record without the file).
    Valid(Vec<u8>),
}

/// A value with a companion file, as [`Cache::get_file`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileValue {
    /// The value stored with the file.
    pub value: Vec<u8>,
    /// Where the file is.
    pub path: PathBuf,
    /// The file's length as recorded (and found).
    pub len: u64,
    /// The file's blake3 digest as recorded (not recomputed on reads).
    pub digest: [u8; 32],
}

/// One entry as listed by [`Cache::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    /// Its kind.
    pub kind: Kind,
    /// Its key.
    pub key: Key,
    /// Bytes it takes: the sealed value, plus its file if it has one.
    pub size: u64,
    /// Its usage record, if it has a readable one.
    pub usage: Option<Usage>,
}

/// Something wrong found by [`Cache::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The keyspace or folder it is in: a kind's name, `usage` or `stats`.
    pub section: String,
    /// The key (hex) or file name.
    pub key: String,
    /// What is wrong.
    pub what: String,
    /// The kind and key of the entry, when it is one (so a host can drop it or say more).
    pub entry: Option<(Kind, Key)>,
}

/// Totals for one kind, as [`Cache::stats`] reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Entries stored.
    pub entries: u64,
    /// Bytes they take (sealed values and files).
    pub bytes: u64,
    /// What every process counted since [`Stats::since`].
    pub counts: KindCounts,
}

/// Totals for the whole cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// When counting started (ms since the Unix epoch): when the cache was created.
    pub since: u64,
    /// Per kind, in [`Kind::ALL`] order.
    pub kinds: Vec<(Kind, KindStats)>,
    /// Bytes the store's files take on disk (sled's own figure, garbage included).
    pub store_on_disk: u64,
}

/// A part of the store as [`Cache::records`] exports it and [`Cache::import_record`]
/// takes it back: the raw sealed bytes, verifiable on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The values of a kind without companion files.
    Values(Kind),
    /// Usage records.
    Usage,
    /// Counters.
    Stats,
}

impl Section {
    /// The section's name: a kind's name, `usage` or `stats`.
    pub fn name(self) -> &'static str {
        match self {
            Section::Values(k) => k.name(),
            Section::Usage => "usage",
            Section::Stats => "stats",
        }
    }

    /// The section called `name`; kinds with files are not exportable.
    pub fn from_name(name: &str) -> Option<Section> {
        match name {
            "usage" => Some(Section::Usage),
            "stats" => Some(Section::Stats),
            _ => Kind::from_name(name)
                .filter(|k| !k.has_file())
                .map(Section::Values),
        }
    }
}

/// A record as stored: `(key, sealed bytes)`.
pub type RawRecord = (Vec<u8>, Vec<u8>);

/// An open cache directory.
#[derive(Debug)]
pub struct Cache {
    db: sled::Db,
    trees: [sled::Tree; 4],
    usage: sled::Tree,
    stats: sled::Tree,
    dir: PathBuf,
    /// Counts not yet added to the stored totals.
    pending: stats::Pending,
    /// Counts of this handle since it was opened.
    session_counts: std::sync::Mutex<[KindCounts; 4]>,
}

impl Cache {
    /// Opens (creating if needed) the cache in `dir`. Fails at once with
    /// [`CacheError::Locked`] if another process has it open.
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
        let open = |name: &str| {
            db.open_tree(name)
                .map_err(|e| CacheError::from_sled(e, &store))
        };
        let trees = [
            open(Kind::Function.name())?,
            open(Kind::Manifest.name())?,
            open(Kind::Module.name())?,
            open(Kind::Artifact.name())?,
        ];
        let usage = open("usage")?;
        let stats = open("stats")?;
        let cache = Self {
            db,
            trees,
            usage,
            stats,
            dir: dir.to_path_buf(),
            pending: Default::default(),
            session_counts: Default::default(),
        };
        if cache.read_counter(stats::SINCE)?.is_none() {
            cache.write_counter(stats::SINCE, now_ms())?;
        }
        cache.remove_leftover_files()?;
        Ok(cache)
    }

    /// Like [`Cache::open`], but while another process holds the cache, retries with a
    /// growing pause (5 ms doubling up to 100 ms, with jitter) for up to `wait` before
    /// failing with [`CacheError::Locked`].
    pub fn open_wait(dir: &Path, wait: Duration) -> Result<Self, CacheError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match Self::open(dir) {
                Err(CacheError::Locked { .. }) if start.elapsed() < wait => {
                    let jitter = Duration::from_micros(
                        u64::from(std::process::id()) * 7919 % 3000
                            + u64::from(Instant::now().duration_since(start).subsec_nanos() % 2000),
                    );
                    let left = wait.saturating_sub(start.elapsed());
                    std::thread::sleep((pause + jitter).min(left));
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    /// The directory this cache lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn tree(&self, kind: Kind) -> &sled::Tree {
        &self.trees[kind.index()]
    }

    fn file_dir(&self, kind: Kind) -> PathBuf {
        self.dir.join(kind.name())
    }

    /// Where the companion file of `key` is (or would be).
    pub fn file_path(&self, kind: Kind, key: &Key) -> PathBuf {
        self.file_dir(kind).join(hex(key))
    }

    fn sled_err(&self, e: sled::Error) -> CacheError {
        CacheError::from_sled(e, &self.dir)
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

    /// Opens a raw stored value: `Ok(payload)` or `Err(why it is corrupt)`. For kinds with
    /// files, the payload is `len | digest | value` and the file's length is checked, and
    /// with `hash_file` its digest too.
    fn open_raw(
        &self,
        kind: Kind,
        key: &Key,
        raw: &[u8],
        hash_file: bool,
    ) -> Result<Vec<u8>, String> {
        let payload = envelope::open(kind.tag(), key, raw)
            .ok_or_else(|| "the value does not match its digest".to_string())?;
        if !kind.has_file() {
            return Ok(payload.to_vec());
        }
        let (len, digest, _) =
            split_file_record(payload).ok_or_else(|| "malformed file record".to_string())?;
        let path = self.file_path(kind, key);
        if hash_file {
            let (found, found_len) = files::digest_file(&path)
                .map_err(|e| format!("its file {} cannot be read: {e}", path.display()))?;
            if found_len != len || found != digest {
                return Err(format!(
                    "its file {} does not match its digest",
                    path.display()
                ));
            }
        } else {
            let meta = std::fs::metadata(&path)
                .map_err(|e| format!("its file {} cannot be read: {e}", path.display()))?;
            if meta.len() != len {
                return Err(format!(
                    "its file {} has {} bytes, not {len}",
                    path.display(),
                    meta.len()
                ));
            }
        }
        Ok(payload.to_vec())
    }

    fn raw(&self, kind: Kind, key: &Key) -> Result<Option<sled::IVec>, CacheError> {
        self.tree(kind).get(key).map_err(|e| self.sled_err(e))
    }

    fn lookup(&self, kind: Kind, key: &Key, counted: bool) -> Result<Lookup, CacheError> {
        let found = match self.raw(kind, key)? {
            None => Lookup::Missing,
            Some(raw) => match self.open_raw(kind, key, &raw, false) {
                Ok(payload) => Lookup::Valid(payload),
                Err(why) => Lookup::Corrupt(why),
            },
        };
        if counted {
            match &found {
                Lookup::Valid(_) => {
                    self.count(kind, stats::HITS);
                    self.touch(kind, key, true, None)?;
                }
                Lookup::Missing => self.count(kind, stats::MISSES),
                Lookup::Corrupt(_) => {
                    self.count(kind, stats::MISSES);
                    self.count(kind, stats::CORRUPT);
                }
            }
        }
        Ok(found)
    }

    /// Reads the value stored under `key`, verified against its digest, counting a hit
    /// (and updating its usage) or a miss. A missing or corrupt value is `Ok(None)`.
    pub fn get(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(match self.lookup(kind, key, true)? {
            Lookup::Valid(payload) if kind.has_file() => {
                split_file_record(&payload).map(|(_, _, v)| v.to_vec())
            }
            Lookup::Valid(payload) => Some(payload),
            _ => None,
        })
    }

    /// Like [`Cache::get`] for a kind with files: the value and where its file is. The
    /// file's length is checked; its contents are the caller's to check before trusting.
    pub fn get_file(&self, kind: Kind, key: &Key) -> Result<Option<FileValue>, CacheError> {
        let Lookup::Valid(payload) = self.lookup(kind, key, true)? else {
            return Ok(None);
        };
        Ok(
            split_file_record(&payload).map(|(len, digest, value)| FileValue {
                value: value.to_vec(),
                path: self.file_path(kind, key),
                len,
                digest,
            }),
        )
    }

    /// Looks `key` up without counting anything or touching its usage (for inspection).
    pub fn peek(&self, kind: Kind, key: &Key) -> Result<Lookup, CacheError> {
        Ok(match self.lookup(kind, key, false)? {
            Lookup::Valid(payload) if kind.has_file() => match split_file_record(&payload) {
                Some((_, _, v)) => Lookup::Valid(v.to_vec()),
                None => Lookup::Corrupt("malformed file record".into()),
            },
            other => other,
        })
    }

    /// Like [`Cache::peek`], and for kinds with files the file's digest is recomputed.
    pub fn check(&self, kind: Kind, key: &Key) -> Result<Lookup, CacheError> {
        let Some(raw) = self.raw(kind, key)? else {
            return Ok(Lookup::Missing);
        };
        Ok(match self.open_raw(kind, key, &raw, true) {
            Ok(payload) if kind.has_file() => match split_file_record(&payload) {
                Some((_, _, v)) => Lookup::Valid(v.to_vec()),
                None => Lookup::Corrupt("malformed file record".into()),
            },
            Ok(payload) => Lookup::Valid(payload),
            Err(why) => Lookup::Corrupt(why),
        })
    }

    /// Whether a verified value is stored under `key` (without counting a hit or miss).
    pub fn contains(&self, kind: Kind, key: &Key) -> Result<bool, CacheError> {
        Ok(matches!(self.peek(kind, key)?, Lookup::Valid(_)))
    }

    /// Stores `value` under `key`, replacing whatever was there. Not for kinds with files
    /// (see [`Cache::put_file`]).
    pub fn put(&self, kind: Kind, key: &Key, value: &[u8]) -> Result<(), CacheError> {
        assert!(!kind.has_file(), "{} values need a file", kind.name());
        let sealed = envelope::seal(kind.tag(), key, value);
        self.tree(kind)
            .insert(key, sealed.as_slice())
            .map_err(|e| self.sled_err(e))?;
        self.count(kind, stats::WRITES);
        self.touch(kind, key, false, Some(sealed.len() as u64))?;
        Ok(())
    }

    /// Stores `value` under `key` with a companion file holding `file`. The file is
    /// written (atomically) before the record, so a reader never finds a record whose
    /// file is incomplete.
    pub fn put_file(
        &self,
        kind: Kind,
        key: &Key,
        value: &[u8],
        file: &[u8],
    ) -> Result<(), CacheError> {
        assert!(kind.has_file(), "{} values have no file", kind.name());
        let dir = self.file_dir(kind);
        create_private_dir(&dir).map_err(|source| CacheError::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        let path = self.file_path(kind, key);
        files::write_atomic(&path, file).map_err(|source| CacheError::Io {
            what: format!("write {}", path.display()),
            source,
        })?;
        let mut record = Vec::with_capacity(40 + value.len());
        record.extend_from_slice(&(file.len() as u64).to_le_bytes());
        record.extend_from_slice(blake3::hash(file).as_bytes());
        record.extend_from_slice(value);
        let sealed = envelope::seal(kind.tag(), key, &record);
        self.tree(kind)
            .insert(key, sealed.as_slice())
            .map_err(|e| self.sled_err(e))?;
        self.count(kind, stats::WRITES);
        self.touch(kind, key, false, Some((sealed.len() + file.len()) as u64))?;
        Ok(())
    }

    fn usage_key(kind: Kind, key: &Key) -> [u8; 33] {
        let mut k = [0u8; 33];
        k[0] = kind.tag();
        k[1..].copy_from_slice(key);
        k
    }

    /// The usage record of an entry, if it has a readable one.
    pub fn usage(&self, kind: Kind, key: &Key) -> Result<Option<Usage>, CacheError> {
        let uk = Self::usage_key(kind, key);
        let raw = self.usage.get(uk).map_err(|e| self.sled_err(e))?;
        Ok(raw.and_then(|raw| {
            envelope::open(USAGE_TAG | kind.tag(), &uk, &raw).and_then(Usage::decode)
        }))
    }

    fn write_usage(&self, kind: Kind, key: &Key, usage: &Usage) -> Result<(), CacheError> {
        let uk = Self::usage_key(kind, key);
        let sealed = envelope::seal(USAGE_TAG | kind.tag(), &uk, &usage.encode());
        self.usage
            .insert(uk, sealed)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    fn touch(&self, kind: Kind, key: &Key, hit: bool, size: Option<u64>) -> Result<(), CacheError> {
        let now = now_ms();
        let mut u = self.usage(kind, key)?.unwrap_or(Usage {
            first_use: now,
            ..Default::default()
        });
        u.last_use = now.max(u.last_use);
        if hit {
            u.hits += 1;
        }
        if let Some(size) = size {
            u.size = size;
        } else if u.size == 0 {
            u.size = self.entry_size(kind, key)?;
        }
        self.write_usage(kind, key, &u)
    }

    /// Attaches `note` to an entry's usage record (wprof: the path a module was loaded
    /// from), and marks it used now.
    pub fn set_note(&self, kind: Kind, key: &Key, note: &[u8]) -> Result<(), CacheError> {
        let now = now_ms();
        let mut u = match self.usage(kind, key)? {
            Some(u) => u,
            None => Usage {
                first_use: now,
                size: self.entry_size(kind, key)?,
                ..Default::default()
            },
        };
        u.last_use = now.max(u.last_use);
        u.note = note.to_vec();
        self.write_usage(kind, key, &u)
    }

    fn entry_size(&self, kind: Kind, key: &Key) -> Result<u64, CacheError> {
        let Some(raw) = self.raw(kind, key)? else {
            return Ok(0);
        };
        let file = if kind.has_file() {
            std::fs::metadata(self.file_path(kind, key))
                .map(|m| m.len())
                .unwrap_or(0)
        } else {
            0
        };
        Ok(raw.len() as u64 + file)
    }

    /// Removes an entry, its usage record and its file. Whether there was an entry.
    pub fn remove(&self, kind: Kind, key: &Key) -> Result<bool, CacheError> {
        // Usage first: a process killed in between leaves an entry without usage (which
        // reads as never used), never usage without an entry.
        self.usage
            .remove(Self::usage_key(kind, key))
            .map_err(|e| self.sled_err(e))?;
        let had = self
            .tree(kind)
            .remove(key)
            .map_err(|e| self.sled_err(e))?
            .is_some();
        if kind.has_file() {
            match std::fs::remove_file(self.file_path(kind, key)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CacheError::Io {
                        what: format!("remove {}", self.file_path(kind, key).display()),
                        source,
                    })
                }
            }
        }
        Ok(had)
    }

    /// Removes an entry to make room, counting it as evicted.
    pub fn evict(&self, kind: Kind, key: &Key) -> Result<bool, CacheError> {
        let had = self.remove(kind, key)?;
        if had {
            self.count(kind, stats::EVICTED);
        }
        Ok(had)
    }

    /// The keys stored for `kind`, in key order (keys of the wrong length are skipped:
    /// [`Cache::verify`] reports them).
    pub fn keys(&self, kind: Kind) -> Result<Vec<Key>, CacheError> {
        let mut out = Vec::new();
        for item in self.tree(kind).iter().keys() {
            let k = item.map_err(|e| self.sled_err(e))?;
            if let Ok(k) = <Key>::try_from(k.as_ref()) {
                out.push(k);
            }
        }
        Ok(out)
    }

    /// Every entry of `kind` with its size and usage, in key order (values unverified).
    pub fn entries(&self, kind: Kind) -> Result<Vec<EntryInfo>, CacheError> {
        let mut out = Vec::new();
        for item in self.tree(kind).iter() {
            let (k, raw) = item.map_err(|e| self.sled_err(e))?;
            let Ok(key) = <Key>::try_from(k.as_ref()) else {
                continue;
            };
            let file = if kind.has_file() {
                std::fs::metadata(self.file_path(kind, &key))
                    .map(|m| m.len())
                    .unwrap_or(0)
            } else {
                0
            };
            out.push(EntryInfo {
                kind,
                key,
                size: raw.len() as u64 + file,
                usage: self.usage(kind, &key)?,
            });
        }
        Ok(out)
    }

    /// Total bytes of every entry of every kind.
    pub fn total_size(&self) -> Result<u64, CacheError> {
        let mut total = 0;
        for kind in Kind::ALL {
            total += self.entries(kind)?.iter().map(|e| e.size).sum::<u64>();
        }
        Ok(total)
    }

    /// A quick upper bound of the cache's size: the store's files on disk (garbage
    /// included) plus the companion files. Cheap: no value is read.
    pub fn size_on_disk(&self) -> Result<u64, CacheError> {
        let mut total = self.db.size_on_disk().map_err(|e| self.sled_err(e))?;
        for kind in Kind::ALL.into_iter().filter(|k| k.has_file()) {
            let listed = files::list(&self.file_dir(kind)).map_err(|source| CacheError::Io {
                what: format!("list {}", self.file_dir(kind).display()),
                source,
            })?;
            for (_, path) in listed {
                total += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            }
        }
        Ok(total)
    }

    fn read_counter(&self, name: &[u8]) -> Result<Option<u64>, CacheError> {
        let raw = self.stats.get(name).map_err(|e| self.sled_err(e))?;
        Ok(raw.and_then(|raw| {
            envelope::open(stats::TAG, name, &raw)
                .and_then(|v| Some(u64::from_le_bytes(v.try_into().ok()?)))
        }))
    }

    fn write_counter(&self, name: &[u8], value: u64) -> Result<(), CacheError> {
        let sealed = envelope::seal(stats::TAG, name, &value.to_le_bytes());
        self.stats
            .insert(name, sealed)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    fn store_counts(&self) -> Result<(), CacheError> {
        let taken = self.pending.take();
        let result = (|| {
            for &(kind, counter, n) in &taken {
                let name = stats::key(kind, counter);
                let old = self.read_counter(&name)?.unwrap_or(0);
                self.write_counter(&name, old.saturating_add(n))?;
            }
            Ok(())
        })();
        if result.is_err() {
            self.pending.restore(&taken);
        }
        result
    }

    /// Adds this handle's counts to the stored totals and makes every write so far
    /// durable.
    pub fn flush(&self) -> Result<(), CacheError> {
        self.store_counts()?;
        self.db.flush().map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// What this handle did for `kind` since it was opened.
    pub fn counts(&self, kind: Kind) -> KindCounts {
        self.session_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())[kind.index()]
    }

    /// Entries, bytes and counters of every kind.
    pub fn stats(&self) -> Result<Stats, CacheError> {
        self.store_counts()?;
        let mut kinds = Vec::new();
        for kind in Kind::ALL {
            let entries = self.entries(kind)?;
            let mut counts = KindCounts::default();
            for c in 0..stats::COUNTERS.len() {
                counts.set(c, self.read_counter(&stats::key(kind, c))?.unwrap_or(0));
            }
            kinds.push((
                kind,
                KindStats {
                    entries: entries.len() as u64,
                    bytes: entries.iter().map(|e| e.size).sum(),
                    counts,
                },
            ));
        }
        Ok(Stats {
            since: self.read_counter(stats::SINCE)?.unwrap_or(0),
            kinds,
            store_on_disk: self.db.size_on_disk().map_err(|e| self.sled_err(e))?,
        })
    }

    /// Checks everything: every value against its digest, every companion file against its
    /// recorded digest, every usage record and counter, and that no file lies in a kind's
    /// folder without an entry. With `repair`, whatever is wrong is removed (a damaged
    /// counter is reset). Returns what was wrong.
    pub fn verify(&self, repair: bool) -> Result<Vec<Problem>, CacheError> {
        let mut problems = Vec::new();
        for kind in Kind::ALL {
            for item in self.tree(kind).iter() {
                let (k, raw) = item.map_err(|e| self.sled_err(e))?;
                let Ok(key) = <Key>::try_from(k.as_ref()) else {
                    problems.push(Problem {
                        section: kind.name().into(),
                        key: hex(&k),
                        what: format!("a key of {} bytes, not 32", k.len()),
                        entry: None,
                    });
                    if repair {
                        self.tree(kind).remove(&k).map_err(|e| self.sled_err(e))?;
                    }
                    continue;
                };
                if let Err(what) = self.open_raw(kind, &key, &raw, true) {
                    problems.push(Problem {
                        section: kind.name().into(),
                        key: hex(&key),
                        what,
                        entry: Some((kind, key)),
                    });
                    if repair {
                        self.remove(kind, &key)?;
                    }
                }
            }
            if kind.has_file() {
                let dir = self.file_dir(kind);
                let listed = files::list(&dir).map_err(|source| CacheError::Io {
                    what: format!("list {}", dir.display()),
                    source,
                })?;
                for (name, path) in listed {
                    let known = key_from_hex(&name)
                        .map(|k| self.raw(kind, &k).map(|r| r.is_some()))
                        .transpose()?
                        .unwrap_or(false);
                    if !known {
                        problems.push(Problem {
                            section: kind.name().into(),
                            key: name,
                            what: "a file without an entry".into(),
                            entry: None,
                        });
                        if repair {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
            }
        }
        for item in self.usage.iter() {
            let (k, raw) = item.map_err(|e| self.sled_err(e))?;
            let parsed = (k.len() == 33)
                .then(|| Kind::from_tag(k[0]))
                .flatten()
                .map(|kind| (kind, <Key>::try_from(&k[1..]).expect("33 bytes")));
            let what = match parsed {
                None => Some("not the usage record of any kind of entry".to_string()),
                Some((kind, key)) => {
                    if envelope::open(USAGE_TAG | kind.tag(), &k, &raw)
                        .and_then(Usage::decode)
                        .is_none()
                    {
                        Some("the usage record does not match its digest".into())
                    } else if self.raw(kind, &key)?.is_none() {
                        Some(format!(
                            "usage of a {} entry that is not stored",
                            kind.name()
                        ))
                    } else {
                        None
                    }
                }
            };
            if let Some(what) = what {
                problems.push(Problem {
                    section: "usage".into(),
                    key: hex(&k),
                    what,
                    entry: None,
                });
                if repair {
                    self.usage.remove(&k).map_err(|e| self.sled_err(e))?;
                }
            }
        }
        for item in self.stats.iter() {
            let (k, raw) = item.map_err(|e| self.sled_err(e))?;
            if envelope::open(stats::TAG, &k, &raw).is_none_or(|v| v.len() != 8) {
                problems.push(Problem {
                    section: "stats".into(),
                    key: String::from_utf8_lossy(&k).into_owned(),
                    what: "the counter does not match its digest".into(),
                    entry: None,
                });
                if repair {
                    let value = if k.as_ref() == stats::SINCE {
                        now_ms()
                    } else {
                        0
                    };
                    self.write_counter(&k, value)?;
                }
            }
        }
        if repair && !problems.is_empty() {
            self.flush()?;
        }
        Ok(problems)
    }

    /// Every record of a section, raw and sealed as stored: `(key, bytes)`.
    pub fn records(&self, section: Section) -> Result<Vec<RawRecord>, CacheError> {
        if section == Section::Stats {
            self.store_counts()?;
        }
        let tree = match section {
            Section::Values(kind) => self.tree(kind),
            Section::Usage => &self.usage,
            Section::Stats => &self.stats,
        };
        let mut out = Vec::new();
        for item in tree.iter() {
            let (k, v) = item.map_err(|e| self.sled_err(e))?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Whether `raw` is a valid sealed record of `section` under `key`: what
    /// [`Cache::import_record`] accepts.
    pub fn record_is_valid(section: Section, key: &[u8], raw: &[u8]) -> bool {
        match section {
            Section::Values(kind) => {
                !kind.has_file()
                    && key.len() == 32
                    && envelope::open(kind.tag(), key, raw).is_some()
            }
            Section::Usage => {
                key.len() == 33
                    && Kind::from_tag(key[0]).is_some_and(|kind| {
                        envelope::open(USAGE_TAG | kind.tag(), key, raw)
                            .and_then(Usage::decode)
                            .is_some()
                    })
            }
            Section::Stats => envelope::open(stats::TAG, key, raw).is_some_and(|v| v.len() == 8),
        }
    }

    /// Stores a record exported by [`Cache::records`] (from this or another cache), after
    /// checking it. Values and usage records are added (a usage record only if the entry
    /// has none here); counters only if `with_stats`. Whether it was stored.
    pub fn import_record(
        &self,
        section: Section,
        key: &[u8],
        raw: &[u8],
        with_stats: bool,
    ) -> Result<bool, CacheError> {
        if !Self::record_is_valid(section, key, raw) {
            return Ok(false);
        }
        let tree = match section {
            Section::Values(kind) => self.tree(kind),
            Section::Usage => &self.usage,
            Section::Stats if with_stats => &self.stats,
            Section::Stats => return Ok(false),
        };
        if section == Section::Usage && tree.contains_key(key).map_err(|e| self.sled_err(e))? {
            return Ok(false);
        }
        tree.insert(key, raw).map_err(|e| self.sled_err(e))?;
        Ok(true)
    }

    /// The kind of entry a usage record's key (as [`Cache::records`] exports it) is for.
    pub fn usage_record_kind(key: &[u8]) -> Option<Kind> {
        (key.len() == 33).then(|| Kind::from_tag(key[0])).flatten()
    }

    /// Whether the cache holds no entry at all.
    pub fn is_empty(&self) -> bool {
        Kind::ALL.iter().all(|k| self.tree(*k).is_empty())
    }

    /// Removes temporary files of interrupted writes, and files whose record was never
    /// written (the writer was killed in between). Only ever called with the store open,
    /// so no other process is writing.
    fn remove_leftover_files(&self) -> Result<(), CacheError> {
        for kind in Kind::ALL.into_iter().filter(|k| k.has_file()) {
            let dir = self.file_dir(kind);
            let listed = files::list(&dir).map_err(|source| CacheError::Io {
                what: format!("list {}", dir.display()),
                source,
            })?;
            for (name, path) in listed {
                let unfinished = if name.starts_with(files::TEMP_PREFIX) {
                    true
                } else if let Some(key) = key_from_hex(&name) {
                    self.raw(kind, &key)?.is_none()
                } else {
                    false
                };
                if unfinished {
                    remove_quietly(&path);
                }
            }
        }
        Ok(())
    }

    /// Raw access for tests and repair tools: overwrites the stored bytes of `key` as is,
    /// without an envelope.
    #[doc(hidden)]
    pub fn put_raw_for_tests(&self, kind: Kind, key: &Key, raw: &[u8]) -> Result<(), CacheError> {
        self.tree(kind)
            .insert(key, raw)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// The stored bytes of `key` with their envelope, unverified.
    #[doc(hidden)]
    pub fn get_raw_for_tests(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self.raw(kind, key)?.map(|v| v.to_vec()))
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Best effort: a failure here only loses a few counts.
        let _ = self.store_counts();
        let _ = self.db.flush();
    }
}

fn remove_quietly(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// `len | digest | value` of a record with a companion file.
fn split_file_record(payload: &[u8]) -> Option<(u64, [u8; 32], &[u8])> {
    let len = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let digest: [u8; 32] = payload.get(8..40)?.try_into().ok()?;
    Some((len, digest, &payload[40..]))
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
mod tests;
