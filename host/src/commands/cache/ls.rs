//! `wprof cache ls`: every module in the cache, with where it was last loaded from, its
//! size, its functions and how it was used.

use serde::Serialize;

use super::{failed, print_json, CacheDirArg};
use crate::display::{format_size, format_time};
use crate::exit::Failure;
use crate::prepare::cache_model::{self, ModuleRecord};
use wprof_cache::hex;

/// List the modules in the cache.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
One line per module and probe plan: its number (for `show` and `export`), the first digits
of its blake3, the probe mode (`stack`: the module with its call counters), its functions,
the instrumented module's size, first and last use (UTC), how often a run found it, whether
compiled code is cached, and the path it was last loaded from.

Examples:
  wprof cache ls
  wprof cache ls --json | jq '.[].path'
  wprof cache ls --cache-dir ./ticket-1234/cache

Exit status:
  0; 2 if DIR holds no cache or cannot be read.")]
pub struct LsCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// Print JSON (an array of modules) instead of a table.
    #[arg(long)]
    json: bool,
}

/// One module, as `ls --json` prints it.
#[derive(Debug, Serialize)]
pub struct ModuleRow {
    /// Number for `show` and `export`.
    pub index: usize,
    /// blake3 of the original module.
    pub module: String,
    /// The manifest's key.
    pub manifest: String,
    /// blake3 of the instrumented module.
    pub instrumented: String,
    /// Where it was last loaded from.
    pub path: String,
    /// Probe mode.
    pub mode: String,
    /// Call-site probes.
    pub call_sites: bool,
    /// Functions defined in it.
    pub functions: usize,
    /// Functions it imports.
    pub imports: usize,
    /// Bytes of the original module.
    pub original_size: u64,
    /// Bytes of the instrumented module.
    pub instrumented_size: u64,
    /// First use, ms since the Unix epoch.
    pub first_use: u64,
    /// Last use, ms since the Unix epoch.
    pub last_use: u64,
    /// Runs that found it in the cache.
    pub hits: u64,
    /// The instrumented module is stored.
    pub module_stored: bool,
    /// The original module is stored.
    pub original_stored: bool,
    /// wasmtime versions it is compiled for.
    pub compiled: Vec<String>,
}

impl ModuleRow {
    /// The row of a module record.
    pub fn of(m: &ModuleRecord) -> Self {
        let u = m.usage.clone().unwrap_or_default();
        Self {
            index: m.index,
            module: m.manifest.module_digest.clone(),
            manifest: hex(&m.manifest_key),
            instrumented: m.manifest.instrumented_digest.clone(),
            path: m.path(),
            mode: m.manifest.mode.clone(),
            call_sites: m.manifest.call_sites,
            functions: m.local_functions(),
            imports: m.manifest.functions.len() - m.local_functions(),
            original_size: m.manifest.original_size,
            instrumented_size: m.manifest.instrumented_size,
            first_use: u.first_use,
            last_use: u.last_use,
            hits: u.hits,
            module_stored: m.module_stored,
            original_stored: m.original_stored,
            compiled: m.compiled.clone(),
        }
    }
}

impl LsCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache = self.dir.open_existing()?;
        let modules = cache_model::modules(&cache).map_err(failed)?;
        drop(cache);
        let rows: Vec<ModuleRow> = modules.iter().map(ModuleRow::of).collect();
        if self.json {
            print_json(&rows);
            return Ok(0);
        }
        if rows.is_empty() {
            println!("no modules in the cache");
            return Ok(0);
        }
        println!(
            "{:>3}  {:<12}  {:<4}  {:>9}  {:>12}  {:<19}  {:<19}  {:>5}  {:<8}  path",
            "#",
            "module",
            "mode",
            "functions",
            "instrumented",
            "first use",
            "last use",
            "hits",
            "compiled"
        );
        for r in &rows {
            let mode = if r.call_sites {
                format!("{}+", r.mode)
            } else {
                r.mode.clone()
            };
            let size = if r.module_stored {
                format_size(r.instrumented_size)
            } else {
                "missing".to_string()
            };
            println!(
                "{:>3}  {:<12}  {:<4}  {:>9}  {:>12}  {:<19}  {:<19}  {:>5}  {:<8}  {}",
                r.index,
                &r.module[..12.min(r.module.len())],
                mode,
                r.functions,
                size,
                format_time(r.first_use),
                format_time(r.last_use),
                r.hits,
                if r.compiled.is_empty() { "no" } else { "yes" },
                r.path
            );
        }
        Ok(0)
    }
}
