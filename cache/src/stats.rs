//! Counters of what every process did with the cache, kept in the cache: per kind, hits,
//! misses, corrupt values found, writes and evictions, and since when they are counted.
//!
//! Each handle counts in memory and adds what it counted to the stored totals (under the
//! cache's lock) when it flushes and when it is dropped: one write per run, not per read.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Kind;

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
