//! `wprof cache gc`: evict least recently used entries down to a size cap.

use super::{failed, print_json, CacheDirArg};
use crate::display::format_size;
use crate::exit::Failure;
use crate::prepare::cache_model;

/// Evict least recently used entries until the cache fits a size cap.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
A module's manifest, instrumented and original module and compiled code are evicted
together; function bodies (only needed when a module changes) on their own. The least
recently used go first. Leftovers of interrupted work older than a minute (temporary files,
what a killed process was removing) are removed first.

`wprof run` applies a cap by itself after a run that stored something: 5 GiB, or
WPROF_CACHE_MAX_SIZE (e.g. `500M`; `off` for no cap), or the configuration file's
`[cache] max_size`.

Examples:
  wprof cache gc                 # down to WPROF_CACHE_MAX_SIZE (off: nothing), else 5 GiB
  wprof cache gc --max-size 200M
  wprof cache gc --max-size 0    # empty it

Exit status:
  0; 2 on a bad size or if DIR holds no cache.")]
pub struct GcCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// The cap: bytes, or with a suffix K, M, G, T (powers of 1024) [default:
    /// WPROF_CACHE_MAX_SIZE, else 5G].
    #[arg(long, value_name = "SIZE", value_parser = crate::display::parse_size)]
    max_size: Option<u64>,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl GcCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        // No cap (WPROF_CACHE_MAX_SIZE=off, or `max_size = "off"` in the configuration
        // file) keeps everything: nothing to evict.
        let cap = match self.max_size {
            Some(cap) => Some(cap),
            None => crate::prepare::session::auto_max_size().map_err(Failure::input)?,
        };
        let cache = self.dir.open_existing()?;
        let report = cache_model::gc(&cache, cap.unwrap_or(u64::MAX)).map_err(failed)?;
        drop(cache);
        if self.json {
            print_json(&report);
        } else {
            println!(
                "{} before, {} after (cap {}): {} entries evicted ({}){}",
                format_size(report.before),
                format_size(report.after),
                cap.map_or("none: the cap is off".to_string(), format_size),
                report.evicted_entries,
                format_size(report.evicted_bytes),
                if report.leftover_bytes > 0 {
                    format!(
                        "; {} of leftovers of interrupted work removed",
                        format_size(report.leftover_bytes)
                    )
                } else {
                    String::new()
                }
            );
        }
        Ok(0)
    }
}
