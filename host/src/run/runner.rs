//! Running a WASI preview 1 command under wasmtime, with or without the probes linked.

use std::io::Write;
use std::time::Instant;

use wasmtime::{Caller, Engine, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::WasiCtxBuilder;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::exit::Failure;
use crate::run::adaptive::live_tree::LiveTree;
use crate::run::adaptive::stopwatch::{Stopwatch, TimerCost};
use crate::run::adaptive::timers::Timers;
use crate::run::adaptive::walker::Walker;
use crate::run::adaptive::AdaptiveSettings;
use crate::run::address_map::ArtifactAddressMap;
use crate::run::attribution::Attribution;
use crate::run::code_map::CodeMap;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::inline_tree::InlineTree;
use crate::run::probe_log::ProbeLog;
use crate::run::sampler::{Asking, CurrentCell, Samples};
use crate::run::switches::Switchboard;
use crate::settings::RunSettings;
use crate::timings::{Timings, PROGRAM};
use std::sync::Arc;
use wprof_agent::{ContextArena, ProbeCode, ProbeMode, SwitchTable};

use std::collections::HashSet;

/// What the store holds: WASI's state and, when the module is instrumented, the probe log
/// feeding the collector (time mode) or the collector itself (the inline modes, which fill
/// it when the program ends).
pub struct HostState {
    wasi: WasiP1Ctx,
    collector: Option<Collector>,
    log: Option<ProbeLog>,
    /// Adaptive mode: times the activations the timers select.
    stopwatch: Option<Stopwatch>,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("collector", &self.collector)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

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
    /// How long instantiating, running and collecting took.
    pub timings: Timings,
}

/// Where the program's stdio goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio {
    /// This process's stdin, stdout and stderr (what `wprof run` does).
    Inherit,
    /// Empty stdin; output discarded (benchmarks).
    Discard,
}

fn wasi_context(settings: &RunSettings, stdio: Stdio) -> Result<WasiP1Ctx, Failure> {
    let mut builder = WasiCtxBuilder::new();
    if stdio == Stdio::Inherit {
        builder.inherit_stdio();
    }
    let mut argv = vec![settings.module.display().to_string()];
    argv.extend(settings.args.iter().cloned());
    builder.args(&argv);
    builder.envs(&settings.env);
    for dir in &settings.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, wasmtime_wasi::FsPerms::ReadWrite)
            .map_err(|e| {
                Failure::input(format!("cannot open --dir {}: {e}", dir.host.display()))
            })?;
    }
    Ok(builder.build_p1())
}

/// A linker with the probe imports of `mode` bound to the store's collector (and nothing
/// else).
pub(crate) fn probe_linker(
    engine: &Engine,
    mode: ProbeMode,
) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    define_probes(&mut linker, mode)?;
    Ok(linker)
}

/// A store with an empty WASI context and time mode's probe log feeding `collector`.
pub(crate) fn bare_store(engine: &Engine, collector: Option<Collector>) -> Store<HostState> {
    Store::new(
        engine,
        HostState {
            wasi: WasiCtxBuilder::new().build_p1(),
            collector: None,
            log: collector.map(ProbeLog::start),
            stopwatch: None,
        },
    )
}

/// The collector of a [`bare_store`], every event replayed.
pub(crate) fn take_collector(store: Store<HostState>) -> Option<Collector> {
    store.into_data().log.map(|log| log.finish().0)
}

fn define_probes(linker: &mut Linker<HostState>, mode: ProbeMode) -> wasmtime::Result<()> {
    use wprof_agent::ProbeImports as P;
    fn log<'a>(caller: &'a mut Caller<'_, HostState>) -> &'a mut ProbeLog {
        caller
            .data_mut()
            .log
            .as_mut()
            .expect("time-mode probes are linked only with a probe log")
    }
    match mode {
        ProbeMode::Time => {
            linker.func_wrap(
                P::MODULE,
                P::ENTER,
                |mut c: Caller<'_, HostState>, id: i32| log(&mut c).enter(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::EXIT,
                |mut c: Caller<'_, HostState>, id: i32| log(&mut c).exit(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::TAIL,
                |mut c: Caller<'_, HostState>, id: i32| log(&mut c).tail(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::ENTER_CATCHING,
                |mut c: Caller<'_, HostState>, id: i32| {
                    log(&mut c).enter_catching(id as u32) as i32
                },
            )?;
            linker.func_wrap(
                P::MODULE,
                P::SITE,
                |mut c: Caller<'_, HostState>, site: i32| log(&mut c).site(site as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::UNWIND,
                |mut c: Caller<'_, HostState>, token: i32| log(&mut c).unwind(token as u32),
            )?;
        }
        ProbeMode::Adaptive => {
            // Timed activations only (see `wprof_agent::ContextArena::TIMER`).
            linker.func_wrap(
                P::MODULE,
                P::ENTER_CATCHING,
                |mut c: Caller<'_, HostState>, node: i32| {
                    c.data_mut()
                        .stopwatch
                        .as_mut()
                        .map_or(0, |s| s.start(node as u32) as i32)
                },
            )?;
            linker.func_wrap(
                P::MODULE,
                P::EXIT,
                |mut c: Caller<'_, HostState>, token: i32| {
                    if let Some(s) = c.data_mut().stopwatch.as_mut() {
                        s.stop(token as u32);
                    }
                },
            )?;
            for name in [P::ENTER, P::TAIL, P::UNWIND, P::SITE] {
                linker.func_wrap(P::MODULE, name, |_: i32| {})?;
            }
        }
        ProbeMode::Cost | ProbeMode::Sample => {
            // The inline modes import the probes but never call them: the module counts
            // into its own tree (see `crate::run::inline_tree`).
            for name in [P::ENTER, P::EXIT, P::TAIL, P::UNWIND, P::SITE] {
                linker.func_wrap(P::MODULE, name, |_: i32| {})?;
            }
            linker.func_wrap(P::MODULE, P::ENTER_CATCHING, |_: i32| 0i32)?;
        }
    }
    Ok(())
}

/// Inline modes: points the module's slot global at the root, so that the export called
/// next is counted as an outermost call (the start function, run at instantiation, may have
/// left it anywhere).
pub(crate) fn reset_slot(store: &mut Store<HostState>, instance: &wasmtime::Instance) {
    if let Some(slot) = instance.get_global(&mut *store, ContextArena::SLOT) {
        let _ = slot.set(
            &mut *store,
            wasmtime::Val::I32(ContextArena::ROOT_SLOT as i32),
        );
    }
}

/// Sample mode: the module's current-node cell, in its tree memory. `None` where that
/// memory's base could move while the program runs.
fn current_cell(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
) -> Option<CurrentCell> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    if !never_moves(&memory.ty(&*store))
        || memory.data_size(&*store) < ContextArena::CURRENT as usize + 4
    {
        return None;
    }
    // SAFETY: in bounds (checked above); the memory never moves (a 32-bit memory in a
    // full reservation) and the cell is only read inside `run`, while the store is alive.
    Some(unsafe { CurrentCell::new(memory.data_ptr(&*store)) })
}

/// Inline modes: replays the module's tree into the collector, with each context's self
/// cost (cost mode) or sampled time (sample and adaptive mode, where the samples'
/// attribution is returned); and the tree.
fn replay_tree(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    samples: Option<&Samples>,
) -> Option<(InlineTree, Option<Attribution>)> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    let (data, state) = memory.data_and_store_mut(&mut *store);
    let collector = state.collector.as_mut()?;
    let tree = InlineTree::read(data, collector.functions().len() as u32);
    if tree.damaged > 0 {
        tracing::warn!(
            links = tree.damaged,
            "the module's context tree has bad links"
        );
    }
    if !tree.overflow.is_empty() {
        eprintln!(
            "wprof: warning: the program made more calling contexts than wprof keeps ({} MiB); \
             {} calls are counted without their context",
            ContextArena::LIMIT >> 20,
            tree.overflow_calls()
        );
    }
    let sites = collector.take_call_site_offsets();
    let attribution = match samples {
        Some(samples) => {
            let attribution = crate::run::attribution::attribute(&tree, samples);
            tracing::info!(
                probe_ps = attribution.probe_ps,
                moved_ps = attribution.moved_ps,
                unmatched_ps = attribution.unmatched_ps,
                "samples attributed"
            );
            tree.replay(
                collector,
                |n| attribution.time.get(&n.address).copied().unwrap_or(0),
                sites.as_ref(),
            );
            Some(attribution)
        }
        None => {
            tree.replay(collector, |n| n.self_cost, sites.as_ref());
            None
        }
    };
    Some((tree, attribution))
}

/// What [`call_start`] needs to know of the probes.
#[derive(Clone, Copy)]
struct StartProbes<'a> {
    /// The mode the module was instrumented for (`None`: not instrumented).
    mode: Option<ProbeMode>,
    /// Sample mode: where the probes' own instructions are.
    bytes: Option<&'a ProbeBytes>,
    /// Live probes: the switches.
    switches: Option<&'a Switchboard>,
}

/// Adaptive mode: the walker, on the sampler's thread, and the clock the stopwatch reads.
type Walking<'a> = Option<&'a mut Walker>;

/// Calls the instance's `_start` (sampling it in sample mode): its result, the samples and
/// its wall time in nanoseconds.
fn call_start(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    module: &Module,
    probes: StartProbes<'_>,
    settings: &RunSettings,
    walker: Walking<'_>,
    timings: &mut Timings,
) -> Result<(wasmtime::Result<()>, Option<Samples>, u64), Failure> {
    let StartProbes {
        mode,
        bytes: probe_bytes,
        switches,
    } = probes;
    let start = instance
        .get_typed_func::<(), ()>(&mut *store, "_start")
        .map_err(|e| {
            Failure::input(format!(
                "{} has no usable `_start`: {e}",
                settings.module.display()
            ))
        })?;
    if mode.is_some_and(ProbeMode::counts_inline) {
        reset_slot(store, instance);
    }
    let cell = match mode {
        Some(m) if m.samples() => {
            let cell = current_cell(store, instance);
            if cell.is_none() {
                eprintln!(
                    "wprof: warning: sample mode cannot read the running context on this \
                     host; calls are counted, times will be zero"
                );
            }
            cell
        }
        _ => None,
    };
    let clock = crate::run::clock::Clock::new();
    let started = Instant::now();
    let (result, samples, wall_time) = match cell {
        Some(cell) => {
            let stop = AtomicBool::new(false);
            // SAFETY: the cell stays valid while the store lives, which outlives the session
            // (dropped at the end of this block).
            let session = unsafe { crate::run::interrupt::Session::begin(cell.as_ptr()) };
            if session.is_none() {
                eprintln!(
                    "wprof: warning: sample mode cannot ask the program's thread where it is \
                     (SIGPROF is taken, or this platform is not Linux on x86-64 or AArch64); \
                     the time a function spends after a call returns goes to the callee"
                );
            }
            let code = session
                .as_ref()
                .map(|_| CodeMap::of(module, mode.unwrap_or(ProbeMode::Sample)));
            let asking = session
                .as_ref()
                .zip(code.as_ref())
                .map(|(session, code)| Asking {
                    target: session.target(),
                    code,
                    switches,
                });
            let (result, mut samples) = std::thread::scope(|s| {
                let (clock, stop, period) = (&clock, &stop, settings.sample_period);
                let from = clock.now_ps();
                let sampler = s.spawn(move || {
                    let watch = walker.map(|w| w as &mut dyn crate::run::sampler::Watch);
                    crate::run::sampler::sample(cell, asking, clock, period, stop, from, watch)
                });
                let result = start.call(&mut *store, ());
                stop.store(true, Ordering::Release);
                sampler.thread().unpark();
                (result, sampler.join().ok())
            });
            let wall_time = started.elapsed();
            if let (Some(samples), Some(code)) = (samples.as_mut(), code.as_ref()) {
                timings.time("locate", || {
                    let probes = probe_pcs(module, code, probe_bytes, &samples.located_pcs());
                    samples.resolve(code, &probes);
                });
            }
            (result, samples, wall_time)
        }
        None => {
            let result = start.call(&mut *store, ());
            (result, None, started.elapsed())
        }
    };
    Ok((result, samples, wall_time.as_nanos() as u64))
}

/// Which of `pcs` (sorted) are in wprof's probes rather than the original's instructions,
/// by the module's address map (from its artifact file when there is one) and its
/// probe-code section (none without the section).
fn probe_pcs(
    module: &Module,
    code: &CodeMap,
    probe_bytes: Option<&ProbeBytes>,
    pcs: &[usize],
) -> HashSet<usize> {
    let Some(probe_bytes) = probe_bytes.filter(|_| !pcs.is_empty()) else {
        return HashSet::new();
    };
    let artifact = probe_bytes
        .image
        .as_ref()
        .and_then(ArtifactAddressMap::open);
    code.module_offsets(module, artifact.as_ref(), pcs)
        .into_iter()
        .zip(pcs)
        .filter(|(offset, _)| offset.is_some_and(|o| probe_bytes.code.contains(o)))
        .map(|(_, &pc)| pc)
        .collect()
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

/// Sample mode: which bytes of the module are probes, and how to find a program counter's
/// byte.
#[derive(Debug)]
pub struct ProbeBytes {
    /// The module's `wprof.probe-code` section.
    pub code: ProbeCode,
    /// wasmtime's serialized module, when the module was loaded from one: its address map
    /// finds a sampled program counter's wasm offset quickly (see
    /// [`crate::run::address_map`]).
    pub image: Option<std::fs::File>,
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
            .filter(|_| mode.samples())
            .map(|code| ProbeBytes { code, image });
        Probes {
            collector,
            mode,
            probe_bytes,
            live: None,
            timer_cost: None,
        }
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

/// Adaptive mode: puts a stopwatch subtracting `cost` in the store of `instance`; the view
/// of its tree, `None` where the tree's memory could move while the program runs.
pub(crate) fn attach_stopwatch(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    cost: TimerCost,
) -> Option<LiveTree> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    if !never_moves(&memory.ty(&*store)) {
        return None;
    }
    // SAFETY: the memory never moves, and the tree view (in the walker and the stopwatch)
    // is used only while the store lives (see `run` and the calibration).
    let tree = unsafe { LiveTree::new(memory.data_ptr(&*store)) };
    store.data_mut().stopwatch = Some(Stopwatch::new(
        crate::run::clock::Clock::new(),
        Timers::new(tree),
        cost,
    ));
    Some(tree)
}

/// Adaptive mode: the stopwatch of a [`bare_store`] once its run is over.
pub(crate) fn take_stopwatch(store: &mut Store<HostState>) -> Option<Stopwatch> {
    store.data_mut().stopwatch.take()
}

/// Whether a memory of type `ty` stays where it is as it grows: a 32-bit memory inside a
/// reservation of its whole 4 GiB range (see `crate::run::engine::MEMORY_RESERVATION`).
fn never_moves(ty: &wasmtime::MemoryType) -> bool {
    cfg!(target_pointer_width = "64")
        && crate::run::engine::MEMORY_RESERVATION >= 1 << 32
        && !ty.is_64()
        && !ty.is_shared()
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
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(|e| Failure::input(format!("cannot link WASI: {e}")))?;
    let mode = probes.as_ref().map(|p| p.mode);
    let probe_bytes = probes.as_mut().and_then(|p| p.probe_bytes.take());
    let live = probes.as_mut().and_then(|p| p.live.take());
    let timer_cost = probes.as_ref().and_then(|p| p.timer_cost);
    if let Some(mode) = mode {
        define_probes(&mut linker, mode)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
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
    };
    let mut store = Store::new(engine, state);
    let mut timings = Timings::new();
    let instantiated = timings.time("instantiate", || linker.instantiate(&mut store, module));
    let mut attribution = None;
    let mut live_record = None;
    let mut adaptive_record = None;
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
                            eprintln!(
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
                        eprintln!(
                            "wprof: warning: adaptive mode cannot reach the module's timers on \
                             this host; times are sampled only"
                        );
                    }
                    walker
                }
                _ => None,
            };
            let (result, samples, wall_time) = call_start(
                &mut store,
                &instance,
                module,
                StartProbes {
                    mode,
                    bytes: probe_bytes.as_ref(),
                    switches: board.as_ref().map(|(b, _, _)| &**b),
                },
                settings,
                walker.as_mut(),
                &mut timings,
            )?;
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
                let message = match e.downcast_ref::<wasmtime::Trap>() {
                    Some(trap) => trap.to_string(),
                    None => first_line(&e.root_cause().to_string()),
                };
                let report = crate::run::backtrace::report(&shown, &backtrace, &message);
                (code, Some((message, report)))
            }
        }
    };
    // Frames left open (a trap, proc_exit) close at the end: now (time mode), or the last
    // count (the inline modes).
    let state = store.into_data();
    let collector = timings.time("collect", || match state.log {
        Some(log) => Some(log.finish().0),
        None => state.collector.map(|mut c| {
            c.finish_at(c.last());
            c
        }),
    });
    Ok(RunOutcome {
        exit_code,
        trap,
        backtrace,
        wall_time,
        sampling: samples.as_ref().map(|s| crate::profile::SamplingRecord {
            period_ns: settings.sample_period.as_nanos() as u64,
            readings: s.readings,
            answered: s.answered,
            probe_ns: attribution.as_ref().map_or(0, |a| a.probe_ps / PS_PER_NS),
        }),
        collector,
        live: live_record,
        adaptive: adaptive_record,
        timings,
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}
