//! Checking the whole store: every value, companion file, usage record and the counters
//! against their digests; with repair, dropping what is damaged and the leftovers of
//! interrupted writes.

use std::path::Path;
use std::time::Duration;

use crate::kind::USAGE_TAG;
use crate::stats::{self, Counters, COUNTERS_KEY};
use crate::{envelope, files, hex, io, key_from_hex, now_ms, Cache, CacheError, Key, Kind, Usage};

/// Leftovers of interrupted writes older than this are garbage (a live writer renames its
/// temporary file within milliseconds, or, writing a value in parts while a module compiles,
/// adds to it every second or so).
const STALE: Duration = Duration::from_secs(60);

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

impl Cache {
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
}

impl Cache {
    /// Removes the leftovers of interrupted work older than a minute, anywhere in the
    /// cache: temporary files of writes, and files or folders renamed aside to be removed
    /// (a process killed while removing a 250 MB artifact leaves it there otherwise).
    /// Returns the bytes freed. Leftovers are never read, only counted in the size.
    pub fn sweep_leftovers(&self) -> Result<u64, CacheError> {
        let mut dirs = vec![self.dir.clone()];
        for kind in Kind::ALL {
            dirs.push(self.entry_dir(kind));
            dirs.push(self.dir.join("usage").join(kind.name()));
            if kind.has_file() {
                dirs.push(self.file_dir(kind));
            }
        }
        let mut freed = 0;
        for dir in dirs {
            // The folder itself, and one level of fan-out folders below it.
            let mut places = vec![dir.clone()];
            places.extend(
                files::list(&dir)
                    .map_err(io("list", &dir))?
                    .into_iter()
                    .filter(|(name, p)| !name.starts_with(files::TEMP_PREFIX) && p.is_dir())
                    .map(|(_, p)| p),
            );
            for place in places {
                for (name, path) in files::list(&place).map_err(io("list", &place))? {
                    if name.starts_with(files::TEMP_PREFIX) && is_stale(&path) {
                        let size = files::size_of(&path);
                        let removed = if path.is_dir() {
                            std::fs::remove_dir_all(&path)
                        } else {
                            std::fs::remove_file(&path)
                        };
                        if removed.is_ok() {
                            freed += size;
                        }
                    }
                }
            }
        }
        Ok(freed)
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
