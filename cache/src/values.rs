//! Reading and writing values: sealed in an envelope keyed by their digest, checked on
//! every read, and for kinds with a companion file, the file's length (or digest) too.

use std::path::PathBuf;

use crate::{envelope, files, io, stats, Cache, CacheError, Key, Kind};

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

impl Cache {
    /// Opens a raw stored value: `Ok(payload)` or `Err(why it is corrupt)`. For kinds with
    /// files, the payload is `len | digest | value` and the file's length is checked, and
    /// with `hash_file` its digest too.
    pub(crate) fn open_raw(
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

    pub(crate) fn raw(&self, kind: Kind, key: &Key) -> Result<Option<Vec<u8>>, CacheError> {
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
        // The header, then the value itself: a pack of 100 MB is not copied to be stored.
        let header = envelope::header(kind.tag(), key, value);
        self.write_parts(&self.entry_path(kind, key), &[&header, value])?;
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

/// `len | digest | value` of a record with a companion file.
fn split_file_record(payload: &[u8]) -> Option<(u64, [u8; 32], &[u8])> {
    let len = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let digest: [u8; 32] = payload.get(8..40)?.try_into().ok()?;
    Some((len, digest, &payload[40..]))
}
