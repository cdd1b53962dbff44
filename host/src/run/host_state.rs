//! What a store holds while a module runs (WASI's state and the probes' host side), and the
//! probe imports of each mode bound to it: the runner's, the calibrations' and the
//! benchmarks' stores all link the probes here.

use wasmtime::{Caller, Engine, Linker, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wprof_agent::{ContextArena, ProbeMode};

use crate::run::adaptive::live_tree::LiveTree;
use crate::run::adaptive::stopwatch::{Stopwatch, TimerCost};
use crate::run::adaptive::timers::Timers;
use crate::run::allocs::{Allocs, Change, Owner};
use crate::run::collector::Collector;
use crate::run::host_calls::meter::HostAccount;
use crate::run::time::probe_log::ProbeLog;
use crate::run::wasi::Wasi;

/// What the store holds: WASI's state and, when the module is instrumented, the probe log
/// feeding the collector (time mode) or the collector itself (the inline modes, which fill
/// it when the program ends).
pub struct HostState {
    /// The program's WASI context: this thread's own, or shared by its threads.
    pub(crate) wasi: Wasi,
    pub(crate) collector: Option<Collector>,
    pub(crate) log: Option<ProbeLog>,
    /// Adaptive mode: times the activations the timers select.
    pub(crate) stopwatch: Option<Stopwatch>,
    /// The host's figures of the program's calls to WASI (see [`crate::run::host_calls`]).
    pub(crate) host: Option<HostAccount>,
    /// Allocation profiling: the blocks the allocator reported.
    pub(crate) allocs: Option<Allocs>,
    /// Fault injection into the module's own functions.
    pub(crate) injected: Option<crate::run::host_calls::inject::FunctionInjectors>,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("collector", &self.collector)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl crate::run::wasi::HoldsWasi for HostState {
    fn wasi(&mut self) -> &mut Wasi {
        &mut self.wasi
    }
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
            wasi: Wasi::Own(WasiCtxBuilder::new().build_p1()),
            collector: None,
            log: collector.map(ProbeLog::start),
            stopwatch: None,
            host: None,
            allocs: None,
            injected: None,
        },
    )
}

/// The collector of a [`bare_store`], every event replayed.
pub(crate) fn take_collector(store: Store<HostState>) -> Option<Collector> {
    store.into_data().log.map(|log| log.finish().0)
}

pub(crate) fn define_probes(
    linker: &mut Linker<HostState>,
    mode: ProbeMode,
) -> wasmtime::Result<()> {
    use wprof_agent::{GoTimeFlags, ProbeImports as P};
    linker.func_wrap(P::MODULE, P::ALLOC, alloc_probe)?;
    linker.func_wrap(
        P::MODULE,
        P::INJECT,
        |c: Caller<'_, HostState>, id: i32| -> wasmtime::Result<i32> {
            match &c.data().injected {
                Some(injected) => injected.ask(id as u32),
                None => Ok(0),
            }
        },
    )?;
    fn log<'a>(caller: &'a mut Caller<'_, HostState>) -> &'a mut ProbeLog {
        caller
            .data_mut()
            .log
            .as_mut()
            .expect("time-mode probes are linked only with a probe log")
    }
    match mode {
        ProbeMode::Time
            if std::env::var_os(crate::run::time::probe_log::FLOOR_VARIABLE).is_some() =>
        {
            // The benchmark's floor: the same host calls, each reading the clock only.
            for name in [P::ENTER, P::EXIT, P::TAIL, P::UNWIND, P::SITE] {
                linker.func_wrap(P::MODULE, name, |mut c: Caller<'_, HostState>, _: i32| {
                    log(&mut c).read_clock();
                })?;
            }
            linker.func_wrap(
                P::MODULE,
                P::ENTER_CATCHING,
                |mut c: Caller<'_, HostState>, _: i32| {
                    log(&mut c).read_clock();
                    0i32
                },
            )?;
            linker.func_wrap(P::MODULE, P::CALLED, |_: i32| {})?;
        }
        ProbeMode::Time => {
            linker.func_wrap(
                P::MODULE,
                P::ENTER,
                |mut c: Caller<'_, HostState>, id: i32| {
                    let mut id = id as u32;
                    if id & GoTimeFlags::SWITCHED != 0 {
                        // A Go module: another goroutine runs; its `g` is exported.
                        id &= !GoTimeFlags::SWITCHED;
                        let g = c
                            .get_export(GoTimeFlags::G_EXPORT)
                            .and_then(|e| e.into_global())
                            .and_then(|global| global.get(&mut c).i64())
                            .unwrap_or(0);
                        log(&mut c).go_switch(g as u32);
                    }
                    log(&mut c).enter(id)
                },
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
            linker.func_wrap(
                P::MODULE,
                P::CALLED,
                |mut c: Caller<'_, HostState>, id: i32| log(&mut c).called(id as u32),
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
            for name in [P::ENTER, P::TAIL, P::UNWIND, P::SITE, P::CALLED] {
                linker.func_wrap(P::MODULE, name, |_: i32| {})?;
            }
        }
        ProbeMode::Cost | ProbeMode::Sample => {
            // The inline modes import the probes but never call them: the module counts
            // into its own tree (see `crate::run::inline::tree`).
            for name in [P::ENTER, P::EXIT, P::TAIL, P::UNWIND, P::SITE, P::CALLED] {
                linker.func_wrap(P::MODULE, name, |_: i32| {})?;
            }
            linker.func_wrap(P::MODULE, P::ENTER_CATCHING, |_: i32| 0i32)?;
        }
    }
    Ok(())
}

/// `wprof.alloc(id, kind, a, b, result, node)`: an allocator's report (see
/// [`crate::run::allocs`]), in every mode.
fn alloc_probe(
    mut caller: Caller<'_, HostState>,
    id: i32,
    kind: i32,
    a: i64,
    b: i64,
    result: i64,
    node: i32,
) {
    if caller.data().allocs.is_none() {
        return;
    }
    let started = caller.data().log.as_ref().map(ProbeLog::now_ps);
    let stored = |out: u64| -> u64 {
        // `posix_memalign`'s address, in the program's memory.
        let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
            return 0;
        };
        let wide = memory.ty(&caller).is_64();
        let data = memory.data(&caller);
        let width = if wide { 8 } else { 4 };
        let Some(bytes) = usize::try_from(out)
            .ok()
            .and_then(|at| data.get(at..at.checked_add(width)?))
        else {
            return 0;
        };
        let mut word = [0u8; 8];
        word[..width].copy_from_slice(bytes);
        u64::from_le_bytes(word)
    };
    let change = Change::of(kind as u32, a as u64, b as u64, result as u64, stored);
    let state = caller.data_mut();
    let owner = match started {
        Some(_) => Owner::Numbered,
        // Node addresses are 8-aligned; adaptive mode may set bit 0.
        None => Owner::Node(node as u32 & !7),
    };
    let Some(tracker) = state.allocs.as_mut() else {
        return;
    };
    let logged = tracker.with(|t| t.record(id as u32, change, owner));
    if let (Some(log), Some(started)) = (state.log.as_mut(), started) {
        log.allocs(logged.freed, logged.allocated, started);
    }
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
    let (base, size) = crate::run::adaptive::live_tree::prepare(&mut *store, &memory);
    // SAFETY: the memory never moves and holds `size` bytes, and the tree view (in the
    // walker and the stopwatch) is used only while the store lives (see `run` and the
    // calibration).
    let tree =
        unsafe { LiveTree::new(base, crate::run::adaptive::live_tree::TreeSize::Fixed(size)) };
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
pub(crate) fn never_moves(ty: &wasmtime::MemoryType) -> bool {
    cfg!(target_pointer_width = "64")
        && crate::run::engine::MEMORY_RESERVATION >= 1 << 32
        && !ty.is_64()
        && !ty.is_shared()
}
