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
//!   FORMAT                     "wprof cache 2"
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
mod stats;
mod usage;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

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
    /// Machine-specific values that never leave the machine (wprof: compiled functions of
    /// wasmtime's incremental compilation cache).
    Compiled,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 5] = [
        Kind::Function,
        Kind::Manifest,
        Kind::Module,
        Kind::Artifact,
        Kind::Compiled,
    ];

    /// The kind's name (also the name of its folders).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Manifest => "manifests",
            Kind::Module => "modules",
            Kind::Artifact => "artifacts",
            Kind::Compiled => "compiled",
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

    /// Whether values of this kind mean anything on another machine (and so belong in an
    /// export): not compiled code.
    pub fn is_portable(self) -> bool {
        !matches!(self, Kind::Artifact | Kind::Compiled)
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
            Kind::Compiled => 4,
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
    /// Bytes of every file under the cache directory (leftovers of interrupted writes
    /// included).
    pub on_disk: u64,
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

    /// The section called `name`; kinds that are not portable are not exportable.
    pub fn from_name(name: &str) -> Option<Section> {
        match name {
            "usage" => Some(Section::Usage),
            "stats" => Some(Section::Stats),
            _ => Kind::from_name(name)
                .filter(|k| k.is_portable())
                .map(Section::Values),
        }
    }
}

/// A record as stored: `(key, sealed bytes)`.
pub type RawRecord = (Vec<u8>, Vec<u8>);

/// What the FORMAT file says.
const FORMAT: &str = "wprof cache 2\n";

/// The key of the counters record.
const COUNTERS_KEY: &[u8] = b"counters";

/// Leftovers of interrupted writes older than this are garbage (a live writer renames its
/// temporary file within milliseconds).
const STALE: Duration = Duration::from_secs(60);

/// An open cache directory.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    /// Counts not yet added to the stored totals.
    pending: stats::Pending,
    /// Counts of this handle since it was opened.
    session_counts: Mutex<[KindCounts; Kind::ALL.len()]>,
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
        match files::read_optional(&format).map_err(io("read", &format))? {
            Some(found) if found == FORMAT.as_bytes() => {}
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
        let parent = path.parent().expect("cache files live in folders");
        let result = files::write_atomic(path, bytes);
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                files::create_private_dir(parent).map_err(io("create", parent))?;
                files::write_atomic(path, bytes).map_err(io("write", path))
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

    fn raw(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        let path = self.entry_path(kind, key);
        files::read_optional(&path).map_err(io("read", &path))
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
                    if kind == Kind::Manifest {
                        // What `ls` shows: hits, first and last use, the note.
                        self.touch(kind, key, true, None, None)?;
                    } else {
                        // Only the last use matters (eviction): the file's mtime says it,
                        // at the cost of one system call rather than a record under a lock.
                        self.mark_used(kind, key);
                    }
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
        self.write(&self.entry_path(kind, key), &sealed)?;
        self.count(kind, stats::WRITES);
        Ok(())
    }

    /// Stores `value` under `key` with a companion file holding `file`. The file is
    /// written before the record, so a reader never finds a record without its file.
    pub fn put_file(
        &self,
        kind: Kind,
        key: &Key,
        value: &[u8],
        file: &[u8],
    ) -> Result<(), CacheError> {
        assert!(kind.has_file(), "{} values have no file", kind.name());
        self.write(&self.file_path(kind, key), file)?;
        let mut record = Vec::with_capacity(40 + value.len());
        record.extend_from_slice(&(file.len() as u64).to_le_bytes());
        record.extend_from_slice(blake3::hash(file).as_bytes());
        record.extend_from_slice(value);
        let sealed = envelope::seal(kind.tag(), key, &record);
        self.write(&self.entry_path(kind, key), &sealed)?;
        self.count(kind, stats::WRITES);
        Ok(())
    }

    fn usage_key(kind: Kind, key: &Key) -> [u8; 33] {
        let mut k = [0u8; 33];
        k[0] = kind.tag();
        k[1..].copy_from_slice(key);
        k
    }

    /// The usage record of an entry. Only manifests keep a record of their own (hits, first
    /// use, note) once read; for the rest, and for an entry never read since it was written,
    /// the file's modification time is its last use (reads update it), and without a record
    /// its first use too. `None` if there is
    /// no such entry (or only a damaged record of one).
    pub fn usage(&self, kind: Kind, key: &Key) -> Result<Option<Usage>, CacheError> {
        let path = self.usage_path(kind, key);
        let raw = files::read_optional(&path).map_err(io("read", &path))?;
        let uk = Self::usage_key(kind, key);
        let modified = std::fs::metadata(self.entry_path(kind, key))
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
        if let Some(raw) = raw {
            let record = envelope::open(USAGE_TAG | kind.tag(), &uk, &raw).and_then(Usage::decode);
            return Ok(record.map(|mut u| {
                // Reads of kinds other than manifests mark the file, not the record.
                if kind != Kind::Manifest {
                    u.last_use = u.last_use.max(modified.unwrap_or(0));
                }
                u
            }));
        }
        let Some(written) = modified else {
            return Ok(None);
        };
        Ok(Some(Usage {
            first_use: written,
            last_use: written,
            hits: 0,
            size: self.entry_size(kind, key)?,
            note: Vec::new(),
        }))
    }

    /// Updates a usage record under the lock: used now, a hit or not, its size, a note.
    fn touch(
        &self,
        kind: Kind,
        key: &Key,
        hit: bool,
        size: Option<u64>,
        note: Option<&[u8]>,
    ) -> Result<(), CacheError> {
        self.locked(|c| {
            let now = now_ms();
            let mut u = c.usage(kind, key)?.unwrap_or(Usage {
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
                u.size = c.entry_size(kind, key)?;
            }
            if let Some(note) = note {
                u.note = note.to_vec();
            }
            let uk = Self::usage_key(kind, key);
            let sealed = envelope::seal(USAGE_TAG | kind.tag(), &uk, &u.encode());
            c.write(&c.usage_path(kind, key), &sealed)
        })
    }

    fn mark_used(&self, kind: Kind, key: &Key) {
        let path = self.entry_path(kind, key);
        if let Ok(f) = std::fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
    }

    /// Attaches `note` to an entry's usage record (wprof: the path a module was loaded
    /// from), and marks it used now.
    pub fn set_note(&self, kind: Kind, key: &Key, note: &[u8]) -> Result<(), CacheError> {
        self.touch(kind, key, false, None, Some(note))
    }

    fn entry_size(&self, kind: Kind, key: &Key) -> Result<u64, CacheError> {
        let value = std::fs::metadata(self.entry_path(kind, key)).map_or(0, |m| m.len());
        let file = if kind.has_file() {
            std::fs::metadata(self.file_path(kind, key)).map_or(0, |m| m.len())
        } else {
            0
        };
        Ok(value + file)
    }

    /// Removes an entry, its usage record and its file. Whether there was an entry.
    pub fn remove(&self, kind: Kind, key: &Key) -> Result<bool, CacheError> {
        // Usage first: a process killed in between leaves an entry without usage (which
        // reads as never used), never usage without an entry.
        let usage = self.usage_path(kind, key);
        files::remove_optional(&usage).map_err(io("remove", &usage))?;
        let entry = self.entry_path(kind, key);
        let had = files::remove_optional(&entry).map_err(io("remove", &entry))?;
        if kind.has_file() {
            let file = self.file_path(kind, key);
            files::remove_optional(&file).map_err(io("remove", &file))?;
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

    /// Files of a two-level tree `<ab>/<name>`: `(name, path)`, temporary files included.
    fn walk(root: &Path) -> Result<Vec<(String, PathBuf)>, CacheError> {
        let mut out = Vec::new();
        for (_, sub) in files::list(root).map_err(io("list", root))? {
            if !sub.is_dir() {
                out.push((
                    sub.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    sub,
                ));
                continue;
            }
            out.extend(files::list(&sub).map_err(io("list", &sub))?);
        }
        Ok(out)
    }

    /// The keys stored for `kind`, in key order.
    pub fn keys(&self, kind: Kind) -> Result<Vec<Key>, CacheError> {
        let mut out: Vec<Key> = Self::walk(&self.entry_dir(kind))?
            .into_iter()
            .filter_map(|(name, _)| key_from_hex(&name))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Every entry of `kind` with its size and usage, in key order (values unverified).
    pub fn entries(&self, kind: Kind) -> Result<Vec<EntryInfo>, CacheError> {
        let mut out = Vec::new();
        for key in self.keys(kind)? {
            out.push(EntryInfo {
                kind,
                key,
                size: self.entry_size(kind, &key)?,
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

    /// Bytes of every file under the cache directory: entries, usage records, companion
    /// files and leftovers. Reads no value.
    pub fn size_on_disk(&self) -> Result<u64, CacheError> {
        fn du(path: &Path) -> u64 {
            match std::fs::read_dir(path) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok())
                    .map(|e| match e.file_type() {
                        Ok(t) if t.is_dir() => du(&e.path()),
                        _ => e.metadata().map_or(0, |m| m.len()),
                    })
                    .sum(),
                Err(_) => 0,
            }
        }
        Ok(du(&self.dir))
    }

    fn read_counters(&self) -> Result<Option<Counters>, CacheError> {
        let path = self.dir.join("counters");
        let raw = files::read_optional(&path).map_err(io("read", &path))?;
        Ok(raw.and_then(|raw| {
            envelope::open(stats::TAG, COUNTERS_KEY, &raw).and_then(Counters::decode)
        }))
    }

    fn write_counters(&self, counters: &Counters) -> Result<(), CacheError> {
        let sealed = envelope::seal(stats::TAG, COUNTERS_KEY, &counters.encode());
        self.write(&self.dir.join("counters"), &sealed)
    }

    fn store_counts(&self) -> Result<(), CacheError> {
        let taken = self.pending.take();
        if taken.is_empty() {
            return Ok(());
        }
        let result = self.locked(|c| {
            let mut counters = c.read_counters()?.unwrap_or(Counters::new(now_ms()));
            for &(kind, counter, n) in &taken {
                let slot = &mut counters.kinds[kind.index()];
                slot.set(counter, slot.get(counter).saturating_add(n));
            }
            c.write_counters(&counters)
        });
        if result.is_err() {
            self.pending.restore(&taken);
        }
        result
    }

    /// Adds this handle's counts to the stored totals. (Values are written through at
    /// once; there is nothing else to flush.)
    pub fn flush(&self) -> Result<(), CacheError> {
        self.store_counts()
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
        let counters = self.read_counters()?.unwrap_or(Counters::new(0));
        let mut kinds = Vec::new();
        for kind in Kind::ALL {
            let entries = self.entries(kind)?;
            kinds.push((
                kind,
                KindStats {
                    entries: entries.len() as u64,
                    bytes: entries.iter().map(|e| e.size).sum(),
                    counts: counters.kinds[kind.index()],
                },
            ));
        }
        Ok(Stats {
            since: counters.since,
            kinds,
            on_disk: self.size_on_disk()?,
        })
    }

    /// Checks everything: every value against its digest, every companion file against its
    /// recorded digest, every usage record and the counters. With `repair`, whatever is
    /// wrong is removed (damaged counters are reset), and so are leftovers: temporary files
    /// of interrupted writes, files without an entry, usage records without an entry.
    /// Returns what was wrong (leftovers are not damage: they are never read).
    pub fn verify(&self, repair: bool) -> Result<Vec<Problem>, CacheError> {
        let mut problems = Vec::new();
        for kind in Kind::ALL {
            for (name, path) in Self::walk(&self.entry_dir(kind))? {
                if name.starts_with(files::TEMP_PREFIX) {
                    if repair {
                        remove_if_stale(&path);
                    }
                    continue;
                }
                let Some(key) = key_from_hex(&name) else {
                    problems.push(Problem {
                        section: kind.name().into(),
                        key: name,
                        what: "a file that is not an entry".into(),
                        entry: None,
                    });
                    if repair {
                        remove_quietly(&path);
                    }
                    continue;
                };
                let raw = files::read_optional(&path).map_err(io("read", &path))?;
                let Some(raw) = raw else { continue };
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
            for (name, path) in Self::walk(&self.dir.join("usage").join(kind.name()))? {
                if name.starts_with(files::TEMP_PREFIX) {
                    if repair {
                        remove_if_stale(&path);
                    }
                    continue;
                }
                let key = key_from_hex(&name);
                let valid = key.is_some_and(|key| {
                    let uk = Self::usage_key(kind, &key);
                    std::fs::read(&path).is_ok_and(|raw| {
                        envelope::open(USAGE_TAG | kind.tag(), &uk, &raw)
                            .and_then(Usage::decode)
                            .is_some()
                    })
                });
                if !valid {
                    problems.push(Problem {
                        section: "usage".into(),
                        key: name,
                        what: "the usage record does not match its digest".into(),
                        entry: None,
                    });
                    if repair {
                        remove_quietly(&path);
                    }
                } else if repair
                    && key.is_some_and(|k| !self.entry_path(kind, &k).exists())
                    && is_stale(&path)
                {
                    remove_quietly(&path);
                }
            }
            if kind.has_file() {
                let dir = self.file_dir(kind);
                for (name, path) in files::list(&dir).map_err(io("list", &dir))? {
                    let orphan = match key_from_hex(&name) {
                        Some(k) => !self.entry_path(kind, &k).exists(),
                        None => true,
                    };
                    if repair && orphan {
                        remove_if_stale(&path);
                    }
                }
            }
        }
        let counters = self.dir.join("counters");
        let damaged = files::read_optional(&counters)
            .map_err(io("read", &counters))?
            .is_some_and(|raw| {
                envelope::open(stats::TAG, COUNTERS_KEY, &raw)
                    .and_then(Counters::decode)
                    .is_none()
            });
        if damaged {
            problems.push(Problem {
                section: "stats".into(),
                key: "counters".into(),
                what: "the counters do not match their digest".into(),
                entry: None,
            });
            if repair {
                self.locked(|c| c.write_counters(&Counters::new(now_ms())))?;
            }
        }
        Ok(problems)
    }

    /// Every record of a section, raw and sealed as stored: `(key, bytes)`.
    pub fn records(&self, section: Section) -> Result<Vec<RawRecord>, CacheError> {
        let mut out = Vec::new();
        match section {
            Section::Values(kind) => {
                for key in self.keys(kind)? {
                    if let Some(raw) = self.raw(kind, &key)? {
                        out.push((key.to_vec(), raw));
                    }
                }
            }
            Section::Usage => {
                for kind in Kind::ALL {
                    for key in self.keys(kind)? {
                        let path = self.usage_path(kind, &key);
                        if let Some(raw) = files::read_optional(&path).map_err(io("read", &path))? {
                            out.push((Self::usage_key(kind, &key).to_vec(), raw));
                        }
                    }
                }
            }
            Section::Stats => {
                self.store_counts()?;
                let path = self.dir.join("counters");
                if let Some(raw) = files::read_optional(&path).map_err(io("read", &path))? {
                    out.push((COUNTERS_KEY.to_vec(), raw));
                }
            }
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
            Section::Usage => Self::usage_record_kind(key).is_some_and(|kind| {
                envelope::open(USAGE_TAG | kind.tag(), key, raw)
                    .and_then(Usage::decode)
                    .is_some()
            }),
            Section::Stats => {
                key == COUNTERS_KEY
                    && envelope::open(stats::TAG, key, raw)
                        .and_then(Counters::decode)
                        .is_some()
            }
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
        match section {
            Section::Values(kind) => {
                let key: Key = key.try_into().expect("checked: 32 bytes");
                self.write(&self.entry_path(kind, &key), raw)?;
            }
            Section::Usage => {
                let kind = Self::usage_record_kind(key).expect("checked");
                let k: Key = key[1..].try_into().expect("checked: 33 bytes");
                let path = self.usage_path(kind, &k);
                if path.exists() {
                    return Ok(false);
                }
                self.write(&path, raw)?;
            }
            Section::Stats if with_stats => {
                self.locked(|c| c.write(&c.dir.join("counters"), raw))?;
            }
            Section::Stats => return Ok(false),
        }
        Ok(true)
    }

    /// The kind of entry a usage record's key (as [`Cache::records`] exports it) is for.
    pub fn usage_record_kind(key: &[u8]) -> Option<Kind> {
        (key.len() == 33).then(|| Kind::from_tag(key[0])).flatten()
    }

    /// Whether the cache holds no entry at all.
    pub fn is_empty(&self) -> Result<bool, CacheError> {
        for kind in Kind::ALL {
            if !self.keys(kind)?.is_empty() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Raw access for tests and repair tools: overwrites the stored bytes of `key` as is,
    /// without an envelope.
    #[doc(hidden)]
    pub fn put_raw_for_tests(&self, kind: Kind, key: &Key, raw: &[u8]) -> Result<(), CacheError> {
        self.write(&self.entry_path(kind, key), raw)
    }

    /// The stored bytes of `key` with their envelope, unverified.
    #[doc(hidden)]
    pub fn get_raw_for_tests(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
        self.raw(kind, key)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Best effort: a failure here only loses a few counts.
        let _ = self.store_counts();
    }
}

/// The stored counters: since when, and per kind.
#[derive(Debug, Clone, Copy)]
struct Counters {
    since: u64,
    kinds: [KindCounts; Kind::ALL.len()],
}

impl Counters {
    fn new(since: u64) -> Self {
        Self {
            since,
            kinds: Default::default(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = self.since.to_le_bytes().to_vec();
        for k in &self.kinds {
            for c in 0..stats::COUNTERS.len() {
                out.extend_from_slice(&k.get(c).to_le_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let n = stats::COUNTERS.len();
        // Counters written before a kind was added have fewer kinds: the rest are zero.
        let kinds = (bytes.len() / 8).checked_sub(1)? / n;
        if bytes.len() != 8 * (1 + kinds * n) || kinds == 0 || kinds > Kind::ALL.len() {
            return None;
        }
        let at = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        let mut counters = Self::new(at(0));
        for (k, slot) in counters.kinds.iter_mut().enumerate().take(kinds) {
            for c in 0..n {
                slot.set(c, at(1 + k * n + c));
            }
        }
        Some(counters)
    }
}

fn is_stale(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|e| e > STALE))
}

fn remove_if_stale(path: &Path) {
    if is_stale(path) {
        remove_quietly(path);
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

#[cfg(test)]
mod tests;
