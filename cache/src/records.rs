//! Export and import: every record of a section as stored (sealed, verifiable on its own),
//! and taking such records back after checking them.

use crate::kind::USAGE_TAG;
use crate::stats::{self, Counters, COUNTERS_KEY};
use crate::{envelope, files, io, Cache, CacheError, Key, Kind, Usage};

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

impl Cache {
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
}
