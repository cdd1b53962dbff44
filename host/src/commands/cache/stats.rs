//! `wprof cache stats`: entries, bytes, and what every run counted per kind of value.

use serde::Serialize;

use super::{failed, print_json, CacheDirArg};
use crate::display::{format_size, format_time};
use crate::exit::Failure;

/// Show entries, bytes, hits and misses per kind of value, since the cache was created.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Kinds: functions (instrumented bodies with offset maps), manifests (what each instrumented
module is made of), modules (instrumented and original modules), artifacts (compiled modules,
files beside the store), compiled (compiled functions of wasmtime's incremental compilation
cache; they never leave this machine), facts (what was learnt of a module by reading it: the
interpreter it is, its functions' sources). Hits, misses, corrupt values found, writes and evictions are
counted by every process that used the cache, since it was created.

Examples:
  wprof cache stats
  wprof cache stats --json

Exit status:
  0; 2 if DIR holds no cache or cannot be read.")]
pub struct StatsCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One kind's figures.
#[derive(Debug, Serialize)]
pub struct KindRow {
    /// The kind.
    pub kind: String,
    /// Entries stored.
    pub entries: u64,
    /// Bytes they take.
    pub bytes: u64,
    /// Reads that found a valid value.
    pub hits: u64,
    /// Reads that found none (corrupt included).
    pub misses: u64,
    /// Reads that found a damaged value.
    pub corrupt: u64,
    /// Values written.
    pub writes: u64,
    /// Values evicted by the size cap.
    pub evicted: u64,
}

/// `stats --json`.
#[derive(Debug, Serialize)]
pub struct StatsReport {
    /// The cache directory.
    pub dir: String,
    /// Counting since (ms since the Unix epoch).
    pub since: u64,
    /// Per kind.
    pub kinds: Vec<KindRow>,
    /// Entries of every kind.
    pub entries: u64,
    /// Bytes of every kind.
    pub bytes: u64,
    /// Bytes of every file under the cache directory (leftovers included).
    pub on_disk: u64,
}

impl StatsCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let dir = self.dir.dir()?;
        let cache = super::open_existing(&dir)?;
        let stats = cache.stats().map_err(failed)?;
        drop(cache);
        let kinds: Vec<KindRow> = stats
            .kinds
            .iter()
            .map(|(kind, k)| KindRow {
                kind: kind.name().to_string(),
                entries: k.entries,
                bytes: k.bytes,
                hits: k.counts.hits,
                misses: k.counts.misses,
                corrupt: k.counts.corrupt,
                writes: k.counts.writes,
                evicted: k.counts.evicted,
            })
            .collect();
        let report = StatsReport {
            dir: dir.display().to_string(),
            since: stats.since,
            entries: kinds.iter().map(|k| k.entries).sum(),
            bytes: kinds.iter().map(|k| k.bytes).sum(),
            kinds,
            on_disk: stats.on_disk,
        };
        if self.json {
            print_json(&report);
            return Ok(0);
        }
        println!(
            "cache {} (counting since {} UTC)",
            report.dir,
            format_time(report.since)
        );
        println!(
            "{:<10} {:>8} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "kind", "entries", "bytes", "hits", "misses", "corrupt", "writes", "evicted"
        );
        for k in &report.kinds {
            println!(
                "{:<10} {:>8} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8}",
                k.kind,
                k.entries,
                format_size(k.bytes),
                k.hits,
                k.misses,
                k.corrupt,
                k.writes,
                k.evicted
            );
        }
        println!(
            "{:<10} {:>8} {:>11}",
            "total",
            report.entries,
            format_size(report.bytes)
        );
        println!("on disk: {}", format_size(report.on_disk));
        Ok(0)
    }
}
