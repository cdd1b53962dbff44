//! `wprof run`: run a WASI program under the profiler.

pub mod component;
mod component_prepare;
pub mod modes;
pub mod probe_settings;
pub mod settings;
pub mod summary;
pub mod trace;

use std::path::PathBuf;

use crate::commands::run::modes::groundwork::Groundwork;
use crate::exit::Failure;
use crate::prepare::loader;
use crate::prepare::session::{warn, CacheSession};
use crate::progress::Progress;
use crate::settings::{DirMapping, Mode, RunSettings};
use crate::timings::Timings;
use settings::SettingsArgs;
use trace::TraceArgs;

/// Run a WASI command (a preview 1 module, or a WASI 0.2 component) and profile it, then
/// write its profile.
#[derive(Debug, clap::Args)]
#[command(after_help = run_after_help(), disable_version_flag = true)]
pub struct RunCommand {
    /// Give the program a host directory, as `HOST` or `HOST::GUEST` (repeatable).
    #[arg(long = "dir", value_name = "HOST[::GUEST]")]
    dirs: Vec<String>,

    /// Set an environment variable of the program, `NAME=VALUE`, or `NAME` to pass this
    /// process's value through (repeatable). The program sees no other variables.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    envs: Vec<String>,

    #[command(flatten)]
    pub settings: SettingsArgs,

    /// Keep the probes' own cost in the times (time mode's probes and adaptive mode's
    /// timers: both are measured at start-up and subtracted by default).
    #[arg(long)]
    keep_overhead: bool,

    /// In an interpreter (Lua 5.4), show its own native frames (`luaV_execute`) rather than
    /// the script's functions in their place (stack mode, the default, shows the script's).
    #[arg(long)]
    native: bool,

    /// Instrument without reading or writing the cache.
    #[arg(long)]
    no_cache: bool,

    /// Call the exported function FUNCTION instead of `_start`, as `wasmtime run --invoke`
    /// does: for a reactor (a module that exports `_initialize`, called first) or a
    /// library. FUNCTION takes no arguments; what it returns is printed on stdout, a value
    /// a line.
    #[arg(long, value_name = "FUNCTION")]
    invoke: Option<String>,

    /// Link the imports wprof does not provide (anything but WASI preview 1) to functions
    /// that trap when called, as `wasmtime run -W unknown-imports-trap=y` does, instead of
    /// refusing the module.
    #[arg(long)]
    unknown_imports_trap: bool,

    /// Serve the profile while the program runs, as Go programs do, at ADDR (`PORT` or
    /// `:PORT`: the loopback interface; `HOST:PORT` as given):
    /// `/debug/pprof/profile?seconds=N` answers after N seconds (default 30) with the
    /// profile of those seconds, for `go tool pprof http://ADDR/debug/pprof/profile` and
    /// continuous-profiling agents; with --allocs, `/debug/pprof/allocs` the blocks so far.
    /// In the inline modes (sample, cost, adaptive); the program and its profile file are
    /// as without it.
    #[arg(long, value_name = "ADDR", env = "WPROF_SERVE")]
    serve: Option<String>,

    #[command(flatten)]
    trace: TraceArgs,

    /// Print no summary on stderr, and no progress bar while a first run of a large module is
    /// instrumented and compiled (the bar shows only on a terminal, after a second).
    #[arg(short, long)]
    quiet: bool,

    /// Print on stderr how long each of wprof's own phases took (open the cache, load,
    /// instrument, compile, instantiate, run, locate, collect, encode, write, and store: waiting
    /// after a cold start for its compiled code, stored while the program runs), even with --quiet:
    /// a table, or with `--timings=json` one JSON line. What wprof read on a thread of its own
    /// while the program ran (the manifest, the DWARF, line tables parsed ahead) is listed
    /// apart, "beside the program", and counts in no phase.
    #[arg(long, value_enum, env = "WPROF_TIMINGS", value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "text")]
    timings: Option<crate::timings::Format>,

    /// The module to run (`.wasm`, or `.wat` text).
    #[arg(value_name = "APP.wasm")]
    module: PathBuf,

    /// Arguments for the program (after `--`; without it, every one that is not a flag of
    /// `wprof run`, `--version` included).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<String>,
}

/// `wprof run --help`'s closing sections.
fn run_after_help() -> String {
    format!("{}\n{RUN_EXAMPLES}", super::environment_help())
}

const RUN_EXAMPLES: &str = "\
Examples:
  wprof run app.wasm -- input.txt
  wprof run --dir data::/data -o app.wprof app.wasm
  WPROF=0 wprof run app.wasm

Time in the host: every profiled run measures each call to WASI (wall time, the program
thread's on-CPU time, so that wall - CPU is time blocked or waiting, and the bytes fd_read,
fd_write, fd_pread, fd_pwrite, sock_recv and sock_send moved), per import and per calling
context: the summary's `host:` line, `wprof report`'s host calls table, pprof's host_*
sample types. Cost mode counts calls and bytes only; stack mode, the default, counts calls
and bytes at each call and samples the times, as it samples its functions'.

Go modules (GOOS=wasip1): every probed mode counts calls exactly across goroutine switches
and keeps the work resumed after a switch under its real caller; stack mode's stacks start
at wasm_pc_f_loop, as perf's do.

Threaded programs (wasi-threads: a shared memory and wasi::thread-spawn, as wasm32-wasip1-
threads builds them): every thread runs and is profiled, each with its own calling-context
tree, merged into one profile with a thread column (the summary's `threads` line, pprof's
`thread` label, a Firefox thread and a speedscope profile per thread). In time mode, a
thread blocked in memory.atomic.wait32/wait64 (a mutex, a condition variable, a join) is
charged to `memory.atomic.wait [waiting]`, a callee of the function that waited. A spawned
thread that traps or calls proc_exit ends the program, with its exit code and no profile.

Components (WASI 0.2 commands, exporting wasi:cli/run): run as `wasmtime run` runs them,
every core module instrumented, nested components' too (through the cache, each by its own
bytes) and profiled, functions named MODULE!function: in sample, cost and adaptive mode a
tree per module, in time mode one tree across them. Stack mode samples a core module's
stacks: a component is profiled in sample mode (one warning when stack mode was chosen).

Exit status:
  the program's own exit code (134 if it trapped, as under `wasmtime run`);
  2 if wprof could not run it (bad flag, unreadable or invalid module, not a WASI command)";

impl RunCommand {
    /// Resolves flags over environment over the configuration file over defaults.
    pub fn settings(&self) -> Result<RunSettings, Failure> {
        let resolved = self.settings.resolve(Some(&self.module), self.no_cache)?;
        let (trace, mode) = self.trace.resolve(&resolved, &self.settings.given)?;
        let adaptive = resolved.adaptive();
        let env = self
            .envs
            .iter()
            .map(|e| crate::settings::parse_env(e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RunSettings {
            module: self.module.clone(),
            args: self.args.clone(),
            dirs: self.dirs.iter().map(|d| DirMapping::parse(d)).collect(),
            env,
            profiling: resolved.profiling.value,
            profile_path: resolved.output.value.clone(),
            mode: mode.into(),
            stacks: mode.walks_stacks(),
            stack_by_default: mode.walks_stacks() && resolved.mode.is_default(),
            cache_dir: resolved.cache_dir.value,
            incremental: resolved.incremental.value,
            quiet: self.quiet,
            native: self.native,
            subtract_overhead: !self.keep_overhead,
            call_sites: resolved.call_sites.value,
            coverage: resolved.coverage.value,
            short_max: u32::try_from(resolved.short_max.value).unwrap_or(u32::MAX),
            sample_period: crate::settings::sample_period::SamplePeriod {
                base: std::time::Duration::from_micros(resolved.sample_period_us.value),
                // A period someone chose stays; the default stretches as the program runs,
                // in sample mode (adaptive mode's walks follow the ticks: they stay dense).
                stretches: resolved.sample_period_us.is_default()
                    && matches!(mode, Mode::Sample | Mode::Stack),
            },
            timings: self.timings,
            filter: resolved.function_filter,
            allocs: resolved.allocs.value,
            allocators: resolved.allocator_rules,
            live: resolved.live.value,
            off: resolved.off_patterns,
            adaptive,
            injections: resolved.injections,
            serve: self.serve.clone(),
            trace,
            interpreter: None,
            entry: crate::settings::EntryPoint {
                invoke: self.invoke.clone(),
                unknown_imports_trap: self.unknown_imports_trap,
            },
        })
    }

    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let settings = self.settings()?;
        let perf_map = std::env::var("WPROF_PERFMAP").ok();
        crate::run::engine::set_perf_map(crate::settings::switch(
            "WPROF_PERFMAP",
            perf_map.as_deref(),
            false,
        )?);
        tracing::debug!(?settings, "resolved settings");
        run(&settings)
    }
}

/// `wprof run` with resolved settings.
pub fn run(settings: &RunSettings) -> Result<i32, Failure> {
    let mut timings = Timings::new();
    let code = run_timed(settings, &mut timings);
    match settings.timings {
        Some(crate::timings::Format::Text) => crate::say_text!("{}", timings.render()),
        Some(crate::timings::Format::Json) => crate::say!("{}", timings.to_json()),
        None => {}
    }
    code
}

/// The run of a module or component: read, its mode chosen, then the mode's steps (see
/// [`modes::RunMode`]) in order.
fn run_timed(settings: &RunSettings, timings: &mut Timings) -> Result<i32, Failure> {
    // The clock the run's measurements read is calibrated while the module is read and
    // compiled, instead of in a wait of its own at the program's first WASI call.
    crate::run::clock::start_calibrating();
    // Validated only where nothing else does: compiling validates, and a module the cache
    // knows by its digest was validated before it was stored.
    let read = || loader::read_program_entered(&settings.module, &settings.entry);
    let loaded = match timings.time("load", read)? {
        loader::Program::Module(loaded) => loaded,
        loader::Program::Component(_) if settings.entry.invoke.is_some() => {
            return Err(Failure::input(format!(
                "--invoke takes a core module's export; {} is a component",
                settings.module.display()
            )));
        }
        loader::Program::Component(bytes) => {
            let settings = modes::settle_component(settings);
            let engine = modes::engine_for(&*modes::of(&settings), &settings, timings)?;
            return component::run(&settings, &engine, bytes, timings);
        }
    };
    let (settings, injections) = modes::settle(settings, &loaded)?;
    let mut mode = modes::of(&settings);
    let engine = modes::engine_for(&*mode, &settings, timings)?;
    // `--serve` listens before anything runs: a bad address is one line.
    let server = crate::commands::serve::PprofServer::bind_for(&settings)?;
    // `--live`: `wprof ctl` reaches the run while it prepares (and is told so).
    let control = crate::live::open_control(&settings);
    if settings.trace.is_some() && !settings.profiling {
        warn(format_args!(
            "--trace: profiling is off (WPROF=0); no trace is written"
        ));
    }
    let cache = timings.time("open cache", || {
        CacheSession::open(settings.cache_dir.as_deref())
    });
    compile_trampolines_through(&cache, &settings);
    let mut job = modes::Job {
        shown: settings.module.display().to_string(),
        // Cleared before the program runs (or when this returns early).
        progress: Progress::on_terminal(settings.quiet),
        settings,
        loaded: std::sync::Arc::new(loaded),
        injections,
        engine,
        cache,
        timings,
        control,
        server,
    };
    let code = run_in(&mut *mode, &mut job);
    job.cache.wait_for_stores(job.timings);
    code
}

/// Runs `job` in `mode`: prepared, run, and its profile written and summed up.
fn run_in(mode: &mut dyn modes::RunMode, job: &mut modes::Job) -> Result<i32, Failure> {
    // What earlier runs learnt of the module (the interpreter it is, its functions'
    // sources), before anything asks.
    if job.settings.profiling {
        crate::prepare::facts::recall(&mut job.cache, &job.loaded);
    }
    let module = mode.prepare(job)?;
    // What the profile needs of the module is read beside the program.
    let loaded = std::sync::Arc::clone(&job.loaded);
    let wanted = mode.groundwork(job);
    let wanted_now = std::sync::atomic::AtomicBool::new(false);
    let (outcome, profile) = std::thread::scope(|scope| {
        let cache = job.cache.share();
        let mut ground = Groundwork::start(scope, &loaded, cache, wanted, &wanted_now);
        let mut outcome = mode.run(job, &module)?;
        job.timings.extend(&outcome.timings);
        let profile = mode.profile(job, &mut outcome, &mut ground);
        Ok::<_, Failure>((outcome, profile))
    })?;
    crate::prepare::facts::keep(&mut job.cache, &job.loaded);
    let Some(profile) = profile else {
        return Ok(summary::finish_unprofiled(outcome, job.settings.quiet));
    };
    let written = summary::write_profile(&profile, &job.settings, job.timings);
    mode.summarize(job, &profile, written);
    Ok(outcome.exit_code)
}

/// The host calls' trampoline (a small module made for the program's WASI imports, see
/// [`crate::run::host_calls`]) is compiled once and then taken from the cache's compiled
/// artifacts, as the program's own code is, when the run has a usable cache.
fn compile_trampolines_through(cache: &CacheSession, settings: &RunSettings) {
    if !(settings.profiling && cache.is_enabled()) {
        return;
    }
    let shared = cache.share();
    crate::run::host_calls::compile_with(move |engine, bytes| {
        let mut cache = shared.share();
        let digest = *blake3::hash(bytes).as_bytes();
        crate::prepare::compile::compile_bytes(engine, || Ok(bytes), &digest, &mut cache, None)
            .map(|compiled| compiled.module)
    });
}
