//! `wprof cache`: inspect and maintain a cache directory, one file per subcommand.
//!
//! Every subcommand works on a copied directory with nothing else: no original module, no
//! secret key, no compiler. None of them compiles or executes anything from the cache.
//! Inspection commands never create a cache: a directory that holds none is an error.

use std::path::{Path, PathBuf};

use wprof_cache::{Cache, CacheError};

use crate::exit::Failure;

pub mod bench;
pub mod export;
pub mod gc;
pub mod ls;
pub mod pack;
pub mod show;
pub mod stats;
pub mod verify;

/// Inspect and maintain the cache: list, show, export, verify, stats, gc, pack, unpack.
#[derive(Debug, clap::Args)]
#[command(after_help = CACHE_AFTER_HELP)]
pub struct CacheCommand {
    #[command(subcommand)]
    command: CacheSubcommand,
}

const CACHE_AFTER_HELP: &str = "\
The cache is self-contained: a support engineer can run these on a copy of it. None of
them compiles or executes anything from the cache (`bench` measures in caches of its own).

Examples:
  wprof cache ls
  wprof cache show fib.wasm fib
  wprof cache export 1 -o app.instrumented.wasm
  wprof cache verify --repair
  wprof cache pack -o bundle.tar.zst

Exit status:
  0 on success; 1 from `verify` when it found bad entries; 2 on wprof's own errors (no
  cache there, an unreadable one, bad arguments).";

#[derive(Debug, clap::Subcommand)]
enum CacheSubcommand {
    Ls(ls::LsCommand),
    Stats(stats::StatsCommand),
    Verify(verify::VerifyCommand),
    Show(show::ShowCommand),
    Export(export::ExportCommand),
    Gc(gc::GcCommand),
    Pack(pack::PackCommand),
    Unpack(pack::UnpackCommand),
    Bench(bench::BenchCommand),
}

impl CacheCommand {
    /// Runs the subcommand; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        match &self.command {
            CacheSubcommand::Ls(c) => c.execute(),
            CacheSubcommand::Stats(c) => c.execute(),
            CacheSubcommand::Verify(c) => c.execute(),
            CacheSubcommand::Show(c) => c.execute(),
            CacheSubcommand::Export(c) => c.execute(),
            CacheSubcommand::Gc(c) => c.execute(),
            CacheSubcommand::Pack(c) => c.execute(),
            CacheSubcommand::Unpack(c) => c.execute(),
            CacheSubcommand::Bench(c) => c.execute(),
        }
    }
}

/// The `--cache-dir` flag every subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheDirArg {
    /// The cache directory [default: $XDG_CACHE_HOME/wprof, else ~/.cache/wprof].
    #[arg(long, value_name = "DIR", env = "WPROF_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl CacheDirArg {
    /// The directory, resolved.
    pub fn dir(&self) -> Result<PathBuf, Failure> {
        self.cache_dir
            .clone()
            .or_else(crate::settings::default_cache_dir)
            .ok_or_else(|| {
                Failure::input("no cache directory: give --cache-dir or set WPROF_CACHE_DIR")
            })
    }

    /// Opens the existing cache (waiting for another process as runs do); never creates
    /// one.
    pub fn open_existing(&self) -> Result<Cache, Failure> {
        open_existing(&self.dir()?)
    }
}

/// The module of digest `blake3_hex` as the cache keeps it (`WPROF_CACHE_DIR`, else the
/// default cache), checked against its digest; `None` when there is no cache or it holds
/// no such module. Reports read a profiled module from here when it is no longer on disk.
pub fn module_by_digest(blake3_hex: &str) -> Option<Vec<u8>> {
    let digest = blake3::Hash::from_hex(blake3_hex).ok()?;
    let dir = std::env::var_os("WPROF_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(crate::settings::default_cache_dir)?;
    let cache = open_existing(&dir).ok()?;
    crate::prepare::cache_values::module_in(&cache, digest.as_bytes())
}

/// Opens the cache in `dir`, which must already hold one.
pub fn open_existing(dir: &Path) -> Result<Cache, Failure> {
    if !Cache::exists(dir) {
        return Err(Failure::input(format!(
            "{} holds no wprof cache (no FORMAT file)",
            dir.display()
        )));
    }
    // Inspection never changes a cache: an earlier wprof's is refused, not emptied.
    if let Some(format) = Cache::older_format(dir) {
        return Err(Failure::input(format!(
            "{} holds an earlier wprof's cache ({format}), which this wprof cannot read (a \
             `wprof run` with it empties it)",
            dir.display()
        )));
    }
    open_or_create(dir)
}

/// Opens (or creates) the cache in `dir`.
pub fn open_or_create(dir: &Path) -> Result<Cache, Failure> {
    Cache::open(dir).map_err(failed)
}

/// A cache error during a command, as a one-line failure.
pub fn failed(e: CacheError) -> Failure {
    Failure::input(e.to_string())
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("plain data serializes")
    );
}
