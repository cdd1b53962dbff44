//! What the store holds: its keys and entries with their sizes, removal and eviction.

use std::path::{Path, PathBuf};

use crate::{files, io, key_from_hex, stats, Cache, CacheError, Key, Kind, Usage};

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

impl Cache {
    pub(crate) fn entry_size(&self, kind: Kind, key: &Key) -> Result<u64, CacheError> {
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
    pub(crate) fn walk(root: &Path) -> Result<Vec<(String, PathBuf)>, CacheError> {
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
        Ok(files::size_of(&self.dir))
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
}
