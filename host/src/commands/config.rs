//! `wprof config`: the settings `wprof run` would use, and where each comes from.

use std::path::PathBuf;

use crate::commands::run::settings::{RunConfig, SettingsArgs};
use crate::exit::Failure;

/// Print the settings `wprof run` would use (with the same flags and variables) and where
/// each comes from: a flag, a `WPROF_*` variable, the configuration file, or the default.
#[derive(Debug, clap::Args)]
#[command(after_help = CONFIG_HELP)]
pub struct ConfigCommand {
    #[command(flatten)]
    pub settings: SettingsArgs,

    /// As `wprof run --no-cache`.
    #[arg(long)]
    no_cache: bool,

    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,

    /// The module to resolve for (its `[[module]]` section applies).
    #[arg(value_name = "APP.wasm")]
    module: Option<PathBuf>,
}

const CONFIG_HELP: &str = "\
The configuration file is ./wprof.toml, or the file WPROF_CONFIG names (WPROF_CONFIG=off:
none). Flags win over WPROF_* variables, which win over the file, which wins over the
defaults; in the file, the first [[module]] section matching the module wins over the top
level. Relative paths in the file are relative to its directory.

  profiling = true              # false: run the original, as WPROF=0
  mode = \"stack\"                # stack (the default) | sample | time | cost | adaptive
  output = \"profiles/app.wprof\"
  call_sites = false
  coverage = false              # count basic blocks (wprof report --format coverage|lcov)
  allocs = false                # profile allocations (wprof run --allocs)
  allocators = [\"malloc=my_alloc\", \"free=my_free\"]   # ROLE=FUNCTION, instead of
                                # the known names; ROLE: malloc calloc realloc free
                                # aligned_alloc posix_memalign rust_alloc rust_realloc
                                # rust_dealloc (the signature of the function so named)
  short_max = 40                # time mode: short functions are counted, not timed
  sample_period_us = 100        # stack, sample and adaptive mode: µs between ticks
  adaptive_calls = 1000         # adaptive mode: timed activations per step
  adaptive_timers = 4           # adaptive mode: functions timed at once
  include = [\"sqlite3_*\"]      # probe only these (globs, /regex/, #N-M ids)
  exclude = [\"*alloc*\"]        # and not these

  [cache]
  dir = \"/var/cache/wprof\"
  max_size = \"2G\"               # or \"off\"
  incremental = true            # probed modes: keep compiled functions for the next version

  [[module]]
  name = \"sqlite*.wasm\"         # a glob on the file name, or
  # blake3 = \"1f0c9a2e\"         # the start of the module's blake3 (wprof cache ls)
  # path = \"build/app.wasm\"     # one file: `wprof instrument` alone prepares these
  mode = \"cost\"

A bad file is one error naming the file, the line and the key (exit 2), before anything
runs.

Examples:
  wprof config
  wprof config --json app.wasm
  WPROF_CONFIG=ci.toml wprof config --mode time app.wasm";

impl ConfigCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let resolved = self
            .settings
            .resolve(self.module.as_deref(), self.no_cache)?;
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&resolved).expect("settings always serialize")
            );
        } else {
            print!("{}", table(&resolved));
        }
        Ok(0)
    }
}

/// The settings as a table: name, value, source.
fn table(c: &RunConfig) -> String {
    let mut out = match (&c.file, c.module_section) {
        (None, _) => "configuration file: none\n".to_string(),
        (Some(f), None) => format!("configuration file: {}\n", f.display()),
        (Some(f), Some(line)) => format!(
            "configuration file: {} ([[module]] of line {line} applies)\n",
            f.display()
        ),
    };
    let on_off = |b: bool| if b { "on" } else { "off" }.to_string();
    // A list as one line, or what its absence means.
    let or = |list: &str, empty: &str| if list.is_empty() { empty } else { list }.to_string();
    let rows = [
        ("profiling", on_off(c.profiling.value), &c.profiling.source),
        ("mode", c.mode.value.to_string(), &c.mode.source),
        (
            "output",
            c.output.value.display().to_string(),
            &c.output.source,
        ),
        (
            "call_sites",
            on_off(c.call_sites.value),
            &c.call_sites.source,
        ),
        ("coverage", on_off(c.coverage.value), &c.coverage.source),
        ("allocs", on_off(c.allocs.value), &c.allocs.source),
        (
            "allocators",
            c.allocators.value.clone(),
            &c.allocators.source,
        ),
        (
            "short_max",
            c.short_max.value.to_string(),
            &c.short_max.source,
        ),
        (
            "sample_period_us",
            c.sample_period_us.value.to_string(),
            &c.sample_period_us.source,
        ),
        (
            "adaptive_calls",
            c.adaptive_calls.value.to_string(),
            &c.adaptive_calls.source,
        ),
        (
            "adaptive_timers",
            c.adaptive_timers.value.to_string(),
            &c.adaptive_timers.source,
        ),
        ("filter", or(&c.filter.value, "all"), &c.filter.source),
        ("live", on_off(c.live.value), &c.live.source),
        ("off", or(&c.off.value, "none"), &c.off.source),
        ("inject", or(&c.inject.value, "none"), &c.inject.source),
        (
            "cache.dir",
            c.cache_dir
                .value
                .as_ref()
                .map_or("none".to_string(), |d| d.display().to_string()),
            &c.cache_dir.source,
        ),
        (
            "cache.max_size",
            c.cache_max_size
                .value
                .map_or("off".to_string(), crate::display::format_size),
            &c.cache_max_size.source,
        ),
        (
            "cache.incremental",
            on_off(c.incremental.value),
            &c.incremental.source,
        ),
    ];
    let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, value, source) in rows {
        out.push_str(&format!("  {name:<17} {value:<width$}  {source}\n"));
    }
    out
}
