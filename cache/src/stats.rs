//! Counters of what every process did with the cache, kept in the cache: per kind, hits,
//! misses, corrupt values found, writes and evictions, and since when they are counted.
//!
//! Each handle counts in memory and adds what it counted to the stored totals (under the
//! cache's lock) when it flushes and when it is dropped: one write per run, not per read.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{envelope, files, io, now_ms, Cache, CacheError, Kind};

/// What is counted, per kind.
pub(crate) const COUNTERS: [&str; 5] = ["hits", "misses", "corrupt", "writes", "evicted"];
pub(crate) const HITS: usize = 0;
pub(crate) const MISSES: usize = 1;
pub(crate) const CORRUPT: usize = 2;
pub(crate) const WRITES: usize = 3;
pub(crate) const EVICTED: usize = 4;

/// The envelope tag of a stored counter.
pub(crate) const TAG: u8 = 0x20;

/// In-memory counts not yet added to the store.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    counts: [[AtomicU64; 5]; Kind::ALL.len()],
}

impl Pending {
    pub(crate) fn add(&self, kind: Kind, counter: usize) {
        self.counts[kind.index()][counter].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes every pending count, leaving zeros.
    pub(crate) fn take(&self) -> Vec<(Kind, usize, u64)> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            for c in 0..COUNTERS.len() {
                let n = self.counts[kind.index()][c].swap(0, Ordering::Relaxed);
                if n > 0 {
                    out.push((kind, c, n));
                }
            }
        }
        out
    }

    /// Puts counts back after a failed store.
    pub(crate) fn restore(&self, taken: &[(Kind, usize, u64)]) {
        for &(kind, c, n) in taken {
            self.counts[kind.index()][c].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Counts for one kind, stored totals plus what this handle has not stored yet.
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
    /// Values evicted to keep the cache under its size cap.
    pub evicted: u64,
}

impl KindCounts {
    pub(crate) fn set(&mut self, counter: usize, value: u64) {
        match counter {
            HITS => self.hits = value,
            MISSES => self.misses = value,
            CORRUPT => self.corrupt = value,
            WRITES => self.writes = value,
            _ => self.evicted = value,
        }
    }

    pub(crate) fn get(&self, counter: usize) -> u64 {
        match counter {
            HITS => self.hits,
            MISSES => self.misses,
            CORRUPT => self.corrupt,
            WRITES => self.writes,
            _ => self.evicted,
        }
    }
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

/// The key of the counters record.
pub(crate) const COUNTERS_KEY: &[u8] = b"counters";

/// The stored counters: since when, and per kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    since: u64,
    kinds: [KindCounts; Kind::ALL.len()],
}

impl Counters {
    pub(crate) fn new(since: u64) -> Self {
        Self {
            since,
            kinds: Default::default(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = self.since.to_le_bytes().to_vec();
        for k in &self.kinds {
            for c in 0..COUNTERS.len() {
                out.extend_from_slice(&k.get(c).to_le_bytes());
            }
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let n = COUNTERS.len();
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

impl Cache {
    pub(crate) fn read_counters(&self) -> Result<Option<Counters>, CacheError> {
        let path = self.dir.join("counters");
        let raw = files::read_optional(&path).map_err(io("read", &path))?;
        Ok(raw.and_then(|raw| envelope::open(TAG, COUNTERS_KEY, &raw).and_then(Counters::decode)))
    }

    pub(crate) fn write_counters(&self, counters: &Counters) -> Result<(), CacheError> {
        let sealed = envelope::seal(TAG, COUNTERS_KEY, &counters.encode());
        self.write(&self.dir.join("counters"), &sealed)
    }

    pub(crate) fn store_counts(&self) -> Result<(), CacheError> {
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
}
