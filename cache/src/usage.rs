//! Usage records: when an entry was first stored and last used, how often it was read, how
//! many bytes it takes, and a short note the host may attach (wprof keeps the path a module
//! was last loaded from). They drive `ls` and the least-recently-used eviction.
//!
//! A record lives in its own tree under `kind tag | key` and is sealed like any value; a
//! damaged record reads as absent (the entry then looks never used, and is evicted first).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::kind::USAGE_TAG;
use crate::{envelope, files, io, Cache, CacheError, Key, Kind};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How an entry has been used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// When the entry was first written (ms since the Unix epoch).
    pub first_use: u64,
    /// When the entry was last written or read (ms since the Unix epoch).
    pub last_use: u64,
    /// Reads that found it valid.
    pub hits: u64,
    /// Bytes it takes in the store (envelope included) plus its file, if it has one.
    pub size: u64,
    /// What the host attached (wprof: the path the module was last loaded from).
    pub note: Vec<u8>,
}

impl Usage {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.note.len());
        for v in [self.first_use, self.last_use, self.hits, self.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.note.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.note);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let note_len = u32::from_le_bytes(bytes.get(32..36)?.try_into().ok()?) as usize;
        if bytes.len() != 36usize.checked_add(note_len)? {
            return None;
        }
        Some(Self {
            first_use: u64_at(0)?,
            last_use: u64_at(1)?,
            hits: u64_at(2)?,
            size: u64_at(3)?,
            note: bytes[36..].to_vec(),
        })
    }
}

/// Usage records of entries, and marking entries used.
impl Cache {
    pub(crate) fn usage_key(kind: Kind, key: &Key) -> [u8; 33] {
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
    pub(crate) fn touch(
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

    pub(crate) fn mark_used(&self, kind: Kind, key: &Key) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let u = Usage {
            first_use: 1,
            last_use: 2,
            hits: 3,
            size: 4,
            note: b"app.wasm".to_vec(),
        };
        let bytes = u.encode();
        assert_eq!(Usage::decode(&bytes), Some(u));
        for cut in 0..bytes.len() {
            assert_eq!(Usage::decode(&bytes[..cut]), None);
        }
    }
}
