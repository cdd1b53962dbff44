//! Running a WASI preview 1 command under wasmtime, with or without the probes linked.

use std::io::Write;

use std::sync::Arc;

use wasmtime::{Engine, Linker, Module, Store};
use wprof_agent::{ContextArena, ProbeCode, ProbeMode, SwitchTable};

use crate::exit::Failure;
use crate::run::adaptive::stopwatch::TimerCost;
use crate::run::adaptive::walker::Walker;
use crate::run::adaptive::AdaptiveSettings;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::host_calls::meter::HostAccount;
use crate::run::host_calls::{HostCalls, InjectedTrap};
use crate::run::inline::replay::replay_tree;
pub use crate::run::start::ProbeBytes;
use crate::run::start::{call_start, StartProbes};
use crate::run::switches::Switchboard;
use crate::run::threads::{ThreadRun, Threads};
use crate::run::time::probe_log::ProbeLog;
use crate::run::wasi_ctx::wasi_context;
pub use crate::run::wasi_ctx::Stdio;
use crate::settings::RunSettings;
use crate::timings::{Timings, PROGRAM};

pub use crate::run::host_state::HostState;
pub(crate) use crate::run::host_state::{
    attach_stopwatch, bare_store, probe_linker, reset_slot, take_collector, take_stopwatch,
};
use crate::run::host_state::{define_probes, never_moves};

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The program's exit code (0 when `_start` returns, the `proc_exit` code, or
    /// [`crate::exit::TRAP`]).
    pub exit_code: i32,
    /// The trap, if the program trapped: a one-line message and the full report.
    pub trap: Option<(String, String)>,
    /// The trap's wasm backtrace, innermost first (frames of the module that ran).
    pub backtrace: Vec<crate::run::backtrace::Frame>,
    /// Wall time of `_start` in nanoseconds.
    pub wall_time: u64,
    /// Sample mode: how the time was sampled.
    pub sampling: Option<crate::profile::SamplingRecord>,
    /// The collector, every frame closed, when the module was instrumented.
    pub collector: Option<Collector>,
    /// Live probes: what was switched when.
    pub live: Option<crate::profile::LiveRecord>,
    /// Adaptive mode: the walks and what was timed.
    pub adaptive: Option<crate::profile::AdaptiveRecord>,
    /// What `--inject` did.
    pub injections: Vec<crate::settings::injection::InjectionRecord>,
    /// The host's figures per WASI function called (profiled runs only).
    pub host_calls: Vec<crate::profile::HostCallRecord>,
    /// Coverage: every probed function's block counts.
    pub coverage: Option<crate::profile::coverage::Coverage>,
    /// Allocation profiling: the allocator and the run's totals.
    pub allocations: Option<crate::profile::AllocationsRecord>,
    /// How long instantiating, running and collecting took.
    pub timings: Timings,
    /// A program that spawned threads: the spawned threads that ended, and how many were
    /// still running when the program ended (see [`crate::run::threads`]).
    pub threads: Option<(Vec<ThreadRun>, u32)>,
    /// Stack mode: the first thread's calls, when its module counts them.
    pub entry_counts: Option<crate::run::stacks::entry_counts::EntryCounts>,
    /// Time mode: the first thread's CPU time in `_start`, in nanoseconds.
    pub start_cpu_ns: Option<u64>,
}

/// What an instrumented module's run needs besides the module.
#[derive(Debug)]
pub struct Probes {
    /// Where the probes report.
    pub collector: Collector,
    /// The mode the module was instrumented for.
    pub mode: ProbeMode,
    /// Sample mode: where the probes' own instructions are, to leave out their time.
    pub probe_bytes: Option<ProbeBytes>,
    /// Live probes: who turns the switches.
    pub live: Option<Live>,
    /// Adaptive mode: what a timer costs, subtracted from the times it measures.
    pub timer_cost: Option<TimerCost>,
    /// Coverage: the module's block map, filled with its counts when the program ends.
    pub blocks: Option<crate::profile::coverage::Coverage>,
    /// Allocation profiling: the module's allocator functions.
    pub allocators: Option<Vec<crate::profile::AllocatorRecord>>,
    /// Fault injection into the module's own functions.
    pub injected: Option<crate::run::host_calls::inject::FunctionInjectors>,
    /// `--serve`: who serves windows of the profile while the program runs.
    pub serve: Option<Serve>,
}

/// `--serve` (the inline modes): who serves windows of the profile while the program runs
/// (see [`crate::run::inline::window`]).
pub struct Serve {
    /// Every function of the original module, in id order (the windows' names).
    pub functions: Vec<crate::profile::FunctionInfo>,
    /// The module, as profiles name it.
    pub module_ref: crate::profile::ModuleRef,
    /// Called with the window source before the program starts; what it returns is dropped
    /// when the program ends, which must stop whatever reads windows.
    pub start: Box<dyn FnOnce(crate::run::inline::window::WindowSource) -> Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

/// Live probes (see [`crate::run::switches`]): which functions have switches, and who
/// turns them while the program runs.
pub struct Live {
    /// Per function id, its name (for the profile's record).
    pub names: Vec<String>,
    /// Per function id, whether it has switched probes.
    pub switchable: Vec<bool>,
    /// Called with the switchboard before the program starts: sets the switches' first
    /// state and starts whatever turns them; what it returns is dropped when the program
    /// ends, which must stop it.
    pub start: Box<dyn FnOnce(Arc<Switchboard>) -> Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("functions", &self.names.len())
            .finish_non_exhaustive()
    }
}

impl Probes {
    /// The probes of a module instrumented for `mode`, whose probe code (sample mode) is
    /// `probe_code`, loaded from the serialized `image` when known.
    pub fn new(
        collector: Collector,
        mode: ProbeMode,
        probe_code: Option<ProbeCode>,
        image: Option<std::fs::File>,
    ) -> Self {
        let probe_bytes = probe_code
            .filter(|_| mode.samples() || mode == ProbeMode::Time)
            .map(|code| ProbeBytes { code, image });
        Probes {
            collector,
            mode,
            probe_bytes,
            live: None,
            timer_cost: None,
            blocks: None,
            allocators: None,
            injected: None,
            serve: None,
        }
    }

    /// With windows served while the program runs.
    pub fn with_serve(mut self, serve: Serve) -> Self {
        self.serve = Some(serve);
        self
    }

    /// With injections into the module's own functions.
    pub fn with_injected(
        mut self,
        injected: crate::run::host_calls::inject::FunctionInjectors,
    ) -> Self {
        self.injected = Some(injected);
        self
    }

    /// With allocation profiling, the module's allocator being `allocators`.
    pub fn with_allocators(mut self, allocators: Vec<crate::profile::AllocatorRecord>) -> Self {
        self.allocators = Some(allocators);
        self
    }

    /// With block counters, laid out as `map` says.
    pub fn with_coverage(mut self, map: crate::profile::coverage::Coverage) -> Self {
        self.blocks = Some(map);
        self
    }

    /// With the cost of adaptive mode's timers, to subtract.
    pub fn with_timer_cost(mut self, cost: TimerCost) -> Self {
        self.timer_cost = Some(cost);
        self
    }

    /// With live probes.
    pub fn with_live(mut self, live: Live) -> Self {
        self.live = Some(live);
        self
    }
}

/// Live probes: the switchboard over the module's switch table, `None` where its memory
/// is missing or could move while the program runs.
fn switchboard(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    mode: ProbeMode,
    switchable: Vec<bool>,
) -> Option<Switchboard> {
    let memory = instance.get_memory(&mut *store, SwitchTable::MEMORY)?;
    let functions = switchable.len() as u32;
    let base = SwitchTable::base(mode, functions) as usize;
    if !never_moves(&memory.ty(&*store)) || memory.data_size(&*store) < base + functions as usize {
        return None;
    }
    // SAFETY: in bounds (checked above); the memory never moves, and the board is closed
    // before the store goes (see `run`).
    Some(unsafe {
        Switchboard::new(
            memory.data_ptr(&*store).wrapping_add(base),
            functions,
            switchable,
        )
    })
}

/// The module's tree read while it runs, `None` where its memory could move.
fn live_tree(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
) -> Option<crate::run::adaptive::live_tree::LiveTree> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    if !never_moves(&memory.ty(&*store)) {
        return None;
    }
    // SAFETY: the memory never moves, and the view is used only while the store lives
    // (the windows stop before `run` goes on past the program).
    Some(unsafe { crate::run::adaptive::live_tree::LiveTree::new(memory.data_ptr(&*store)) })
}

/// Adaptive mode: puts a stopwatch in the store that subtracts `cost`, and returns the
/// walker that arms its timers; `None` where the tree's memory could move while the
/// program runs.
fn start_stopwatch(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    settings: AdaptiveSettings,
    cost: TimerCost,
) -> Option<Walker> {
    let functions = store.data().collector.as_ref()?.functions().len() as u32;
    let tree = attach_stopwatch(store, instance, cost)?;
    Some(Walker::new(tree, functions, settings))
}

/// Runs `module`'s `_start`. With `probes`, the probe imports are linked to its collector.
pub fn run(
    engine: &Engine,
    module: &Module,
    settings: &RunSettings,
    stdio: Stdio,
    mut probes: Option<Probes>,
) -> Result<RunOutcome, Failure> {
    let shown = settings.module.display().to_string();
    let _runtime = crate::run::wasi_ctx::enter_runtime();
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(|e| Failure::input(format!("cannot link WASI: {e}")))?;
    let mode = probes.as_ref().map(|p| p.mode);
    let probe_bytes = probes.as_mut().and_then(|p| p.probe_bytes.take());
    let live = probes.as_mut().and_then(|p| p.live.take());
    let timer_cost = probes.as_ref().and_then(|p| p.timer_cost);
    let blocks = probes.as_mut().and_then(|p| p.blocks.take());
    let injected = probes.as_mut().and_then(|p| p.injected.take());
    let serve = probes.as_mut().and_then(|p| p.serve.take());
    // Shared with `--serve`'s thread when it serves allocation profiles.
    let shared_allocs = Arc::new(std::sync::Mutex::new(
        crate::run::allocs::AllocTracker::new(Vec::new()),
    ));
    let allocs = probes
        .as_mut()
        .and_then(|p| p.allocators.take())
        .map(crate::run::allocs::AllocTracker::new)
        .map(|tracker| match serve {
            Some(_) => {
                *shared_allocs.lock().unwrap_or_else(|e| e.into_inner()) = tracker;
                crate::run::allocs::Allocs::Shared(shared_allocs.clone())
            }
            None => crate::run::allocs::Allocs::Own(tracker),
        });
    let served_allocs = matches!(allocs, Some(crate::run::allocs::Allocs::Shared(_)))
        .then(|| shared_allocs.clone());
    let mut coverage = None;
    if let Some(mode) = mode {
        define_probes(&mut linker, mode)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
    let threaded = crate::run::threads::is_threaded(module);
    let template = probes
        .as_ref()
        .filter(|_| threaded)
        .map(|p| p.collector.fresh_copy());
    let (collector, log) = match probes {
        Some(Probes {
            collector,
            mode: ProbeMode::Time,
            ..
        }) => (None, Some(ProbeLog::start(collector))),
        Some(p) => (Some(p.collector), None),
        None => (None, None),
    };
    let state = HostState {
        wasi: wasi_context(settings, stdio)?,
        collector,
        log,
        stopwatch: None,
        host: None,
        allocs,
        injected,
    };
    let mut store = Store::new(engine, state);
    // Profiled runs measure the host's calls; `WPROF=0` wraps only what `--inject` names.
    // The probed modes time each call; cost mode times nothing, and stack mode samples the
    // calls' time as it samples the rest (see `StackSamples::imports`): its wrappers count
    // calls and bytes, and read no clock.
    let profiled = mode.is_some() || settings.profiling && settings.stacks;
    let host_calls = HostCalls::install(
        &mut linker,
        &mut store,
        module,
        &settings.injections,
        profiled,
        mode.is_some_and(|m| m != ProbeMode::Cost),
    )?;
    if profiled {
        store.data_mut().host = Some(HostAccount::for_module(module));
    }
    let threads = match threaded {
        true => {
            let threads = Threads::new(
                engine,
                module,
                settings,
                stdio,
                mode,
                probe_bytes.as_ref().map(ProbeBytes::try_clone),
                template,
                blocks.clone(),
            )?;
            threads.link(&mut linker, &store)?;
            Some(threads)
        }
        false => None,
    };
    let mut timings = Timings::new();
    let instantiated = timings.time("instantiate", || linker.instantiate(&mut store, module));
    if let Ok(instance) = &instantiated {
        host_calls.connect(&mut store, instance);
        let arena = instance.get_memory(&mut store, ContextArena::MEMORY);
        if let (Some(account), Some(arena)) = (store.data_mut().host.as_mut(), arena) {
            account.set_arena(arena);
        }
    }
    let mut attribution = None;
    let mut live_record = None;
    let mut adaptive_record = None;
    let mut entry_counts = None;
    let mut start_cpu_ns = None;
    let (result, samples, wall_time) = match instantiated {
        Ok(instance) => {
            let board = match (live, mode) {
                (Some(live), Some(mode)) => {
                    match switchboard(&mut store, &instance, mode, live.switchable) {
                        Some(board) => {
                            let board = Arc::new(board);
                            let running = (live.start)(board.clone());
                            Some((board, running, live.names))
                        }
                        None => {
                            crate::say!(
                                "wprof: warning: the probes' switches cannot be reached on this \
                                 host; every probe stays on"
                            );
                            None
                        }
                    }
                }
                _ => None,
            };
            let mut walker = match mode {
                Some(ProbeMode::Adaptive) => {
                    let cost = timer_cost.unwrap_or_default();
                    let walker = start_stopwatch(&mut store, &instance, settings.adaptive, cost);
                    if walker.is_none() {
                        crate::say!(
                            "wprof: warning: adaptive mode cannot reach the module's timers on \
                             this host; times are sampled only"
                        );
                    }
                    walker
                }
                _ => None,
            };
            // `--serve`: windows read the tree while the program runs, and ask the sampler
            // for its readings.
            let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let desk = mode
                .filter(|m| m.samples())
                .map(|_| Arc::new(crate::run::inline::sampler::SampleDesk::default()));
            let serving = match (serve, mode) {
                (Some(serve), Some(mode)) if mode.counts_inline() => {
                    match live_tree(&mut store, &instance) {
                        Some(tree) => {
                            let source = crate::run::inline::window::WindowSource::new(
                                tree,
                                mode,
                                serve.functions,
                                serve.module_ref,
                                desk.clone().map(|d| {
                                    (
                                        d,
                                        module.clone(),
                                        probe_bytes.as_ref().map(ProbeBytes::try_clone),
                                        settings.sample_period.longest(),
                                    )
                                }),
                                ended.clone(),
                            )
                            .with_allocs(served_allocs.clone());
                            Some((serve.start)(source))
                        }
                        None => {
                            crate::say!(
                                "wprof: warning: --serve cannot read the module's tree while it \
                                 runs on this host; nothing is served"
                            );
                            None
                        }
                    }
                }
                _ => None,
            };
            // Time mode reads a wall clock: the thread's CPU time in `_start` says how long
            // it waited for a processor (see `Profile::cpu_wait_ns`).
            let cpu = (mode == Some(ProbeMode::Time))
                .then(crate::run::clock::ThreadCpuClock::of_this_thread)
                .flatten()
                .and_then(|c| Some((c, c.now_ps()?)));
            let (result, samples, wall_time) = call_start(
                &mut store,
                &instance,
                module,
                StartProbes {
                    mode,
                    bytes: probe_bytes.as_ref(),
                    switches: board.as_ref().map(|(b, _, _)| &**b),
                    desk: desk.as_deref(),
                    cpu_time: threaded,
                    returned: None,
                },
                settings,
                walker.as_mut(),
                &mut timings,
            )?;
            start_cpu_ns =
                cpu.and_then(|(c, from)| Some(c.now_ps()?.saturating_sub(from) / PS_PER_NS));
            if settings.profiling && settings.stacks {
                entry_counts = crate::run::stacks::entry_counts::read(&mut store, &instance);
            }
            // Windows stop before the tree's memory can go.
            ended.store(true, std::sync::atomic::Ordering::Release);
            drop(serving);
            let walks = walker.map(Walker::finish);
            let stopwatch = store.data_mut().stopwatch.take();
            timings.record(PROGRAM, std::time::Duration::from_nanos(wall_time));
            if let Some((board, running, names)) = board {
                // Whoever turns the switches stops before the memory goes.
                drop(running);
                live_record =
                    Some(board.close(&|id| names.get(id as usize).cloned().unwrap_or_default()));
            }
            if mode.is_some_and(ProbeMode::counts_inline) {
                let replayed = timings.time("collect", || {
                    replay_tree(&mut store, &instance, samples.as_ref())
                });
                coverage = blocks.and_then(|map| read_coverage(&mut store, &instance, map));
                if let (Some((tree, Some(attribution))), Some(walks), Some(stopwatch)) =
                    (&replayed, &walks, stopwatch)
                {
                    let (times, unfinished) = stopwatch.finish();
                    adaptive_record = Some(crate::run::adaptive::record(
                        settings.adaptive,
                        timer_cost.unwrap_or_default(),
                        walks,
                        &times,
                        unfinished,
                        tree,
                        |address| attribution.time.get(&address).copied().unwrap_or(0),
                    ));
                }
                attribution = replayed.and_then(|(_, a)| a);
            }
            (result, samples, wall_time)
        }
        // The start function ended the program (`proc_exit`, a trap): the program's own
        // ending, as under `wasmtime run`, not wprof's.
        Err(e)
            if e.downcast_ref::<wasmtime_wasi::I32Exit>().is_some()
                || e.downcast_ref::<wasmtime::Trap>().is_some() =>
        {
            (Err(e), None, 0)
        }
        Err(e) => {
            return Err(Failure::input(format!(
                "cannot instantiate {shown}: {}",
                first_line(&e.to_string())
            )))
        }
    };
    let _ = std::io::stdout().flush();

    let backtrace = match &result {
        Err(e) => crate::run::backtrace::frames_of(e),
        Ok(()) => Vec::new(),
    };
    let (exit_code, trap) = match result {
        Ok(()) => (0, None),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                (exit.0, None)
            } else {
                // A trap exits as under `wasmtime run` (134); any other error that ends the
                // program (a host error) exits with 1, as wasmtime's does.
                let code = if e.downcast_ref::<wasmtime::Trap>().is_some() {
                    crate::exit::TRAP
                } else {
                    1
                };
                let message = match (
                    e.downcast_ref::<InjectedTrap>(),
                    e.downcast_ref::<wasmtime::Trap>(),
                ) {
                    (Some(injected), _) => injected.to_string(),
                    (None, Some(trap)) => trap.to_string(),
                    (None, None) => first_line(&e.root_cause().to_string()),
                };
                let report = crate::run::backtrace::report(&shown, &backtrace, &message);
                (code, Some((message, report)))
            }
        }
    };
    // Frames left open (a trap, proc_exit) close at the end: now (time mode), or the last
    // count (the inline modes).
    let state = store.into_data();
    let host_records = state
        .host
        .as_ref()
        .map(|account| host_calls.records(account))
        .unwrap_or_default();
    let collector = timings.time("collect", || match state.log {
        Some(log) => {
            let mut collector = log.finish().0;
            collector.settle_allocs();
            Some(collector)
        }
        None => state.collector.map(|mut c| {
            c.finish_at(c.last());
            c
        }),
    });
    let allocations = state.allocs.map(|mut t| t.with(|t| t.record_of_run()));
    let threads = threads.map(|t| t.take_ended());
    // The spawned threads' samplers read and were answered as the first's.
    let spawned = threads.iter().flat_map(|(ended, _)| ended);
    let (readings, answered) = spawned.fold((0, 0), |(r, a), t| (r + t.readings, a + t.answered));
    Ok(RunOutcome {
        exit_code,
        trap,
        backtrace,
        wall_time,
        sampling: samples.as_ref().map(|s| crate::profile::SamplingRecord {
            period_ns: settings.sample_period.base.as_nanos() as u64,
            longest_period_ns: crate::settings::sample_period::longest_reached(
                settings.sample_period,
                std::time::Duration::from_nanos(wall_time),
            ),
            readings: s.readings + readings,
            answered: s.answered + answered,
            probe_ns: attribution.as_ref().map_or(0, |a| a.probe_ps / PS_PER_NS),
            off_ns: s.off_ps / PS_PER_NS,
            stacks: None,
        }),
        collector,
        live: live_record,
        adaptive: adaptive_record,
        injections: host_calls.injections(state.injected.as_ref()),
        host_calls: host_records,
        coverage,
        allocations,
        timings,
        threads,
        entry_counts,
        start_cpu_ns,
    })
}

/// Coverage: `map` with the counts of the module's block counters; `None` (and a warning)
/// if they cannot be read.
fn read_coverage(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    map: crate::profile::coverage::Coverage,
) -> Option<crate::profile::coverage::Coverage> {
    let functions = store
        .data()
        .collector
        .as_ref()
        .map_or(0, |c| c.functions().len() as u32);
    crate::run::inline::coverage::read(store, instance, functions, map)
        .map_err(|e| crate::say!("wprof: warning: coverage not recorded: {e}"))
        .ok()
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}
