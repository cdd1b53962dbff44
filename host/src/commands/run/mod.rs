//! `wprof run`: run a WASI program under the profiler.

pub mod component;
mod component_prepare;
pub mod probe_settings;
pub mod settings;
mod stacks;
pub mod summary;
pub mod trace;

use std::path::PathBuf;

use std::collections::HashMap;
use wasmtime::Module;

use wprof_agent::{ProbeMode, ProbePlan};

use crate::exit::Failure;
use crate::prepare::instrument::{self, Prepared};
use crate::prepare::loader::{self, LoadedModule};
use crate::prepare::session::{warn, CacheSession};
use crate::profile::{Ending, ModuleRef, Profile};
use crate::progress::Progress;
use crate::run::collector::Collector;
use crate::run::runner::{self, Stdio};
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

    /// Keep the probes' own cost in the times (time mode subtracts it by default, measured
    /// at start-up).
    #[arg(long)]
    keep_overhead: bool,

    /// Instrument without reading or writing the cache.
    #[arg(long)]
    no_cache: bool,

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
    /// a table, or with `--timings=json` one JSON line.
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
sample types. Cost mode counts calls and bytes only.

Go modules (GOOS=wasip1): every mode counts calls exactly across goroutine switches and
keeps the work resumed after a switch under its real caller.

Threaded programs (wasi-threads: a shared memory and wasi::thread-spawn, as wasm32-wasip1-
threads builds them): every thread runs and is profiled, each with its own calling-context
tree, merged into one profile with a thread column (the summary's `threads` line, pprof's
`thread` label, a Firefox thread and a speedscope profile per thread). In time mode, a
thread blocked in memory.atomic.wait32/wait64 (a mutex, a condition variable, a join) is
charged to `memory.atomic.wait [waiting]`, a callee of the function that waited. A thread
that traps or calls proc_exit ends the program, with its exit code and no profile.

Components (WASI 0.2 commands, exporting wasi:cli/run): run as `wasmtime run` runs them,
every core module at the top level instrumented (through the cache, each by its own bytes)
and profiled, functions named MODULE!function: in sample and cost mode a tree per module, in
time mode one tree across them. Adaptive mode asked for samples instead (one warning).

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

/// The engine for a run of `settings`: compiled functions (wasmtime's incremental cache) are
/// kept only for runs with probes and a cache, unless `--no-incremental`; whole compiled
/// modules for every run with a cache. Stack mode compiles its module whole, and the
/// incremental cache would have Cranelift hash every function for nothing (2 s of CPU on
/// a 69 MB module).
fn engine_for(settings: &RunSettings, timings: &mut Timings) -> Result<wasmtime::Engine, Failure> {
    let keeps_functions = settings.profiling
        && !settings.stacks
        && settings.cache_dir.is_some()
        && settings.incremental;
    Ok(timings.time("engine", || match keeps_functions {
        true => crate::prepare::compiled::new_engine_caching(),
        false => crate::run::engine::new_engine(),
    })?)
}

fn run_timed(settings: &RunSettings, timings: &mut Timings) -> Result<i32, Failure> {
    // Validated only where nothing else does: compiling validates, and a module the cache
    // knows by its digest was validated before it was stored.
    let loaded = match timings.time("load", || loader::read_program(&settings.module))? {
        loader::Program::Module(loaded) => loaded,
        loader::Program::Component(bytes) if settings.stacks => {
            if !settings.stack_by_default {
                warn(format_args!(
                    "stack mode samples a core module's stacks; {} is a component, profiled in sample mode",
                    settings.module.display()
                ));
            }
            let settings = settings.in_sample_mode();
            let engine = engine_for(&settings, timings)?;
            return crate::commands::run::component::run(&settings, &engine, bytes, timings);
        }
        loader::Program::Component(bytes) => {
            let engine = engine_for(settings, timings)?;
            return crate::commands::run::component::run(settings, &engine, bytes, timings);
        }
    };
    // `--inject` into imports stays with the host's wrappers; into the module's own
    // functions, it goes to the agent.
    let injections = crate::prepare::injections::split(&loaded.bytes, &settings.injections)?;
    if let (false, Some(first)) = (settings.profiling, injections.functions.first()) {
        return Err(Failure::input(format!(
            "--inject {}: {} is one of the module's own functions, which only a profiled run \
             can inject into (WPROF=0 runs the original as it is)",
            first.injection.spec, first.name
        )));
    }
    let mut settings = RunSettings {
        injections: injections.imports.clone(),
        ..settings.clone()
    };
    if settings.profiling && settings.stacks {
        let wanting = [
            (
                "--serve (profiles the probes keep while the program runs)",
                settings.serve.is_some(),
            ),
            (
                "--inject into the module's own functions",
                !injections.functions.is_empty(),
            ),
        ];
        if let Some((what, _)) = wanting.iter().find(|w| w.1) {
            if !settings.stack_by_default {
                return Err(Failure::input(format!(
                    "stack mode runs the module without probes but its entry counters, which {what} needs; use sample mode"
                )));
            }
            // No mode was chosen: the default gives way to the probed mode closest to it.
            tracing::debug!("{what} needs probes: sample mode instead of stack mode");
            settings = settings.in_sample_mode();
        }
    }
    let settings = &settings;
    let engine = engine_for(settings, timings)?;
    // `--serve` listens before anything runs: a bad address is one line.
    let server = crate::commands::serve::PprofServer::bind_for(settings)?;
    // `--live`: `wprof ctl` reaches the run while it prepares (and is told so).
    let mut control = crate::live::open_control(settings);
    if settings.trace.is_some() && !settings.profiling {
        warn(format_args!(
            "--trace: profiling is off (WPROF=0); no trace is written"
        ));
    }
    let shown = settings.module.display().to_string();

    let mut cache = timings.time("open cache", || {
        CacheSession::open(settings.cache_dir.as_deref())
    });
    compile_trampolines_through(&cache, settings);
    // Cleared before the program runs (or when this returns early).
    let progress = Progress::on_terminal(settings.quiet);
    if !settings.profiling {
        // Off: the original, as wasmtime would run it, its compiled code cached.
        progress.step("compiling", None);
        let module = timings.time("compile", || {
            compile_original(&engine, &loaded, settings, &mut cache)
        })?;
        progress.finish();
        let outcome = runner::run(&engine, &module, settings, Stdio::Inherit, None)?;
        timings.extend(&outcome.timings);
        cache.wait_for_stores(timings);
        return Ok(summary::finish_unprofiled(outcome, settings.quiet));
    }

    if settings.stacks {
        progress.step("compiling", None);
        let code = timings.time("compile", || {
            crate::prepare::counted::compile(
                &engine,
                &loaded,
                &settings.module,
                &mut cache,
                |cache| compile_original(&engine, &loaded, settings, cache),
            )
        })?;
        progress.finish();
        let code = crate::commands::run::stacks::run(
            &engine, code, &loaded, settings, &mut cache, timings,
        );
        cache.wait_for_stores(timings);
        return code;
    }

    let plan = ProbePlan {
        mode: settings.mode,
        call_sites: settings.call_sites,
        selection: settings.filter.selection().map(std::sync::Arc::new),
        live: settings.live,
        short_max: settings.short_max,
        coverage: settings.coverage,
        allocators: settings
            .allocs
            .then(|| std::sync::Arc::new(settings.allocators.plan())),
        injections: injections.plan.clone().map(std::sync::Arc::new),
    };
    crate::prepare::guard::test_slow_prepare();
    // A panic in the agent or the cache is caught: one warning, the program runs as it is.
    let prepared = timings.time("instrument", || {
        crate::prepare::guard::quietly(|| {
            if let Some(hit) = instrument::from_cache(&loaded, &settings.module, &plan, &mut cache)
            {
                return Ok(Some(hit));
            }
            // Bad input stops here, before anything of it reaches the cache.
            loader::validate(&loaded, &settings.module, &engine)?;
            match instrument::instrument(
                &loaded,
                &settings.module,
                &plan,
                &instrument::FunctionRules {
                    filter: &settings.filter,
                    allocators: &settings.allocators,
                    left_out: None,
                },
                &mut cache,
                &progress,
            ) {
                Ok(p) => Ok(Some(p)),
                Err(e) => {
                    warn(format_args!(
                        "cannot instrument {shown} ({e}); running it without profiling"
                    ));
                    Ok::<_, Failure>(None)
                }
            }
        })
        .unwrap_or_else(|why| {
            warn(format_args!(
                "wprof failed while preparing {shown} ({why}); running it without profiling"
            ));
            Ok(None)
        })
    })?;
    // What instrumenting freed is not reused by the compiling threads.
    crate::prepare::heap::give_back_freed();
    // Compiled through the cache of compiled artifacts (see `prepare::compile`).
    progress.step("compiling", None);
    let compiled = timings.time("compile", || {
        prepared.and_then(|mut p| {
            match crate::prepare::guard::quietly(|| {
                crate::prepare::compile::compile(
                    &engine,
                    &mut p,
                    &loaded,
                    &mut cache,
                    settings.incremental,
                )
            })
            .unwrap_or_else(|why| Err(anyhow::anyhow!("wprof failed: {why}")))
            {
                Ok(module) => Some((p, module)),
                Err(e) => {
                    warn(format_args!(
                    "the instrumented {shown} does not compile ({}); running it without profiling",
                    e.to_string().lines().next().unwrap_or_default()
                ));
                    None
                }
            }
        })
    });
    let Some((mut prepared, compiled)) = compiled else {
        // No probes, no switches: `wprof ctl` finds no run.
        drop(control.take());
        let module = timings.time("compile", || {
            compile_original(&engine, &loaded, settings, &mut cache)
        })?;
        progress.finish();
        let outcome = runner::run(&engine, &module, settings, Stdio::Inherit, None)?;
        timings.extend(&outcome.timings);
        cache.wait_for_stores(timings);
        return Ok(summary::finish_unprofiled(outcome, settings.quiet));
    };

    progress.finish();
    let mut collector = Collector::new(prepared.functions.len());
    if settings.mode != ProbeMode::Cost {
        collector = collector.with_quantum(crate::run::collector::PS_PER_NS);
    }
    if settings.mode == ProbeMode::Time && crate::go_symbols::is_go(&loaded.bytes) {
        let morestack = prepared
            .functions
            .iter()
            .find(|f| f.name == "runtime.morestack")
            .map(|f| f.id);
        collector = collector.with_go(morestack);
    }
    if let Some(trace) = &settings.trace {
        collector = collector.with_trace(crate::run::collector::Tracer::new(
            trace.buffer,
            trace.max_depth,
            trace::selected(trace, &prepared.functions, &loaded.bytes),
        ));
    }
    if settings.call_sites && settings.mode.counts_inline() {
        collector = collector.with_call_site_offsets(call_site_offsets(&loaded.bytes, settings));
    }
    if settings.mode == ProbeMode::Time && settings.subtract_overhead {
        match timings.time("calibrate", || {
            crate::run::time::calibrate::measure(
                &engine,
                settings.call_sites,
                settings.short_max > 0,
            )
        }) {
            Ok(overhead) => {
                tracing::debug!(?overhead, "probe overhead measured");
                collector = collector.with_overhead(overhead);
            }
            Err(e) => warn(format_args!(
                "cannot measure the probe overhead ({e}); times include it"
            )),
        }
    }
    let mut probes = runner::Probes::new(
        collector,
        settings.mode,
        prepared.probe_code.clone(),
        compiled.image,
    );
    if settings.live {
        probes = probes.with_live(live_hook(
            settings,
            control.take(),
            &prepared,
            &loaded.bytes,
        ));
    }
    if let Some(map) = prepared.blocks.take() {
        probes = probes.with_coverage(map);
    }
    if settings.allocs {
        probes = probes.with_allocators(std::mem::take(&mut prepared.allocators));
    }
    if let Some(server) = server {
        probes = probes.with_serve(server.serve(
            settings,
            prepared.functions.clone(),
            crate::profile::ModuleRef {
                path: shown.clone(),
                blake3: loaded.digest_hex(),
            },
        ));
    }
    if !injections.functions.is_empty() {
        let mut injected = crate::run::host_calls::inject::FunctionInjectors::default();
        for f in &injections.functions {
            injected.add(f.id, &f.name, &f.injection, f.order);
        }
        probes = probes.with_injected(injected);
    }
    if settings.mode == ProbeMode::Adaptive && settings.subtract_overhead {
        match timings.time("calibrate", || {
            crate::run::adaptive::calibrate::measure(&engine)
        }) {
            Ok(cost) => {
                tracing::debug!(?cost, "timer cost measured");
                probes = probes.with_timer_cost(cost);
            }
            Err(e) => warn(format_args!(
                "cannot measure the timers' cost ({e}); times include it"
            )),
        }
    }
    let mut outcome = runner::run(
        &engine,
        &compiled.module,
        settings,
        Stdio::Inherit,
        Some(probes),
    )?;
    let trace = outcome.collector.as_mut().and_then(Collector::take_trace);
    timings.extend(&outcome.timings);
    if let Some((message, _)) = &outcome.trap {
        // Tell the backtrace in terms of the original module, as `wasmtime run` would.
        let frames = match prepared.bytes(&loaded) {
            Some(instrumented) => crate::run::backtrace::to_original(
                &outcome.backtrace,
                &loaded.bytes,
                instrumented,
                &plan,
            ),
            None => outcome.backtrace.clone(),
        };
        crate::say!(
            "Error: {}",
            crate::run::backtrace::report(&shown, &frames, message)
        );
    }
    let collector = outcome
        .collector
        .as_ref()
        .expect("instrumented runs have a collector");
    let profile = timings.time("profile", || {
        crate::run::profile_of_run(
            ModuleRef {
                path: shown.clone(),
                blake3: loaded.digest_hex(),
            },
            &prepared.functions,
            prepared.stats,
            settings.mode,
            collector,
            Ending {
                exit_code: outcome.exit_code,
                trap: outcome.trap.as_ref().map(|(m, _)| m.clone()),
                wall_time: outcome.wall_time,
                sampling: outcome.sampling,
            },
        )
    });
    let mut profile = Profile {
        live: outcome.live.clone(),
        adaptive: outcome.adaptive.clone(),
        injections: outcome.injections.clone(),
        coverage: outcome.coverage.clone(),
        host_calls: outcome.host_calls.clone(),
        allocations: outcome.allocations.clone(),
        ..profile
    };
    if outcome.threads.is_none() {
        profile.cpu_wait_ns = outcome
            .start_cpu_ns
            .and_then(|cpu| profile.cpu_wait_of(cpu));
    }
    if let Some((threads, unfinished)) = outcome.threads.take() {
        // Each spawned thread as if alone, then all of them in one profile.
        let mut others = Vec::new();
        for thread in threads {
            if let (Some(mine), Some(theirs)) = (profile.coverage.as_mut(), &thread.coverage) {
                if let Err(e) = mine.merge(theirs) {
                    warn(format_args!(
                        "thread {}'s coverage not merged: {e}",
                        thread.tid
                    ));
                }
            }
            let Some(collector) = &thread.collector else {
                continue;
            };
            let own = crate::run::profile_of_run(
                profile.module.clone(),
                &prepared.functions,
                prepared.stats,
                settings.mode,
                collector,
                Ending {
                    exit_code: 0,
                    trap: None,
                    wall_time: thread.wall_time,
                    sampling: None,
                },
            );
            others.push((thread.tid, own));
        }
        crate::profile::threads::merge(&mut profile, others, unfinished);
    }
    if let Some(coverage) = &mut profile.coverage {
        coverage.set_calls(&profile.functions);
    }
    let written = summary::write_profile(&profile, settings, timings);
    if !settings.quiet {
        summary::print(&profile, &loaded.bytes, &prepared, settings, written);
    }
    if let (Some(trace), Some(to)) = (&trace, &settings.trace) {
        match timings.time("trace", || trace::write(trace, to, &profile, &loaded.bytes)) {
            Ok(line) if !settings.quiet => crate::say!("{line}"),
            Ok(_) => {}
            Err(e) => warn(format_args!("{e}; no trace written")),
        }
    }
    cache.wait_for_stores(timings);
    Ok(outcome.exit_code)
}

/// Live probes: the switches of every probed function, turned by `wprof ctl` through a
/// socket in the cache directory and by edits of the configuration file.
fn live_hook(
    settings: &RunSettings,
    control: Option<crate::live::control::Server>,
    prepared: &Prepared,
    module: &[u8],
) -> runner::Live {
    let names: Vec<String> = prepared.functions.iter().map(|f| f.name.clone()).collect();
    let shown = crate::go_symbols::shown_names(module, &names);
    let switchable = instrument::switchable(&prepared.functions);
    crate::live::hook(
        crate::live::LiveSetup::of(settings),
        control,
        names,
        shown,
        switchable,
    )
}

/// Per function id, the offsets of its call instructions (the inline modes number call
/// sites in this order). Empty if the module cannot be read, which instrumenting it
/// already ruled out.
fn call_site_offsets(module: &[u8], settings: &RunSettings) -> HashMap<u32, Vec<u32>> {
    let plan = ProbePlan {
        mode: settings.mode,
        call_sites: true,
        selection: None,
        live: false,
        short_max: 0,
        coverage: false,
        allocators: None,
        injections: None,
    };
    let Ok(instrumenter) = wprof_agent::Instrumenter::new(module, &plan) else {
        return HashMap::new();
    };
    let imports = instrumenter.imported_function_count();
    (0..instrumenter.defined_function_count())
        .filter_map(|defined| {
            let sites = instrumenter.call_sites(defined).ok()?;
            Some((imports + defined, sites))
        })
        .collect()
}

/// Compiles the original module (which validates it) through the cache of compiled
/// artifacts, as `WPROF=0` and a run whose instrumentation failed both run it: a module
/// that does not validate is the loader's one-line failure, any other compile error one
/// line of its own.
fn compile_original(
    engine: &wasmtime::Engine,
    loaded: &LoadedModule,
    settings: &RunSettings,
    cache: &mut CacheSession,
) -> Result<Module, Failure> {
    crate::prepare::compile::compile_bytes(
        engine,
        || Ok(&loaded.bytes),
        &loaded.digest,
        cache,
        None,
    )
    .map(|compiled| compiled.module)
    .map_err(|e| {
        if let Err(invalid) = loader::validate(loaded, &settings.module, engine) {
            return invalid;
        }
        Failure::input(format!(
            "cannot compile {}: {}",
            settings.module.display(),
            e.to_string().lines().next().unwrap_or_default()
        ))
    })
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
