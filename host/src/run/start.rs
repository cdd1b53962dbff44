//! Calling the instance's `_start`: plainly, or (sample and adaptive mode) with the sampler
//! reading where the program is from another thread, and adaptive mode's walker beside it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use wasmtime::{Module, Store};
use wprof_agent::{ContextArena, ProbeCode, ProbeMode};

use crate::exit::Failure;
use crate::run::adaptive::walker::Walker;
use crate::run::code::address_map::ArtifactAddressMap;
use crate::run::code::map::CodeMap;
use crate::run::host_state::{never_moves, reset_slot, HostState};
use crate::run::inline::sampler::{Asking, CurrentCell, Samples};
use crate::run::switches::Switchboard;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Sample mode: the module's current-node cell, in its tree memory. `None` where that
/// memory's base could move while the program runs.
fn current_cell(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
) -> Option<CurrentCell> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    if !never_moves(&memory.ty(&*store)) {
        return None;
    }
    let (base, size) = crate::run::adaptive::live_tree::prepare(&mut *store, &memory);
    if size < u64::from(ContextArena::CURRENT) + 4 {
        return None;
    }
    // SAFETY: in bounds (checked above); the memory never moves (a 32-bit memory in a
    // full reservation), holds `size` bytes, and the cell is only read inside `run`, while
    // the store is alive.
    Some(unsafe { CurrentCell::new(base, size) })
}

/// What [`call_start`] needs to know of the probes.
#[derive(Clone, Copy)]
pub(crate) struct StartProbes<'a> {
    /// The mode the module was instrumented for (`None`: not instrumented).
    pub(crate) mode: Option<ProbeMode>,
    /// Sample mode: where the probes' own instructions are.
    pub(crate) bytes: Option<&'a ProbeBytes>,
    /// Live probes: the switches.
    pub(crate) switches: Option<&'a Switchboard>,
    /// `--serve`: where the sampler hands copies of its readings.
    pub(crate) desk: Option<&'a crate::run::inline::sampler::SampleDesk>,
    /// A threaded program: sample mode charges the thread's CPU time (see
    /// [`crate::run::inline::sampler::Timing::cpu`]).
    pub(crate) cpu_time: bool,
    /// A spawned thread: told on the thread as soon as the entry function returns, before
    /// the sampler is stopped and joined (which may sleep), so that the end of the program
    /// does not take the thread for one blocked in wasm (see
    /// [`crate::run::threads::Threads::take_ended`]).
    pub(crate) returned: Option<&'a dyn Fn()>,
}

/// Adaptive mode: the walker, on the sampler's thread, and the clock the stopwatch reads.
pub(crate) type Walking<'a> = Option<&'a mut Walker>;

/// The export a spawned thread (wasi-threads) starts at.
pub const THREAD_START: &str = "wasi_thread_start";

/// Where a thread of the program starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The program's first thread: the command's `_start`.
    Start,
    /// A thread the program spawned (wasi-threads): `wasi_thread_start(tid, arg)`. Its
    /// warnings are left to the first thread's.
    Thread { tid: i32, arg: i32 },
}

/// The entry function, called.
enum EntryFunc {
    Start(wasmtime::TypedFunc<(), ()>),
    Thread(wasmtime::TypedFunc<(i32, i32), ()>, i32, i32),
}

impl EntryFunc {
    fn of(
        store: &mut Store<HostState>,
        instance: &wasmtime::Instance,
        entry: Entry,
        settings: &RunSettings,
    ) -> Result<Self, Failure> {
        let shown = settings.module.display();
        match entry {
            Entry::Start => instance
                .get_typed_func::<(), ()>(&mut *store, "_start")
                .map(EntryFunc::Start)
                .map_err(|e| Failure::input(format!("{shown} has no usable `_start`: {e}"))),
            Entry::Thread { tid, arg } => instance
                .get_typed_func::<(i32, i32), ()>(&mut *store, THREAD_START)
                .map(|f| EntryFunc::Thread(f, tid, arg))
                .map_err(|e| {
                    Failure::input(format!(
                        "{shown} spawns threads but has no usable `{}`: {e}",
                        THREAD_START
                    ))
                }),
        }
    }

    fn call(&self, store: &mut Store<HostState>) -> wasmtime::Result<()> {
        match self {
            EntryFunc::Start(f) => f.call(store, ()),
            EntryFunc::Thread(f, tid, arg) => f.call(store, (*tid, *arg)),
        }
    }
}

/// Calls the instance's `_start` (sampling it in sample mode): its result, the samples and
/// its wall time in nanoseconds.
pub(crate) fn call_start(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    module: &Module,
    probes: StartProbes<'_>,
    settings: &RunSettings,
    walker: Walking<'_>,
    timings: &mut Timings,
) -> Result<(wasmtime::Result<()>, Option<Samples>, u64), Failure> {
    call_entry(
        store,
        instance,
        module,
        Entry::Start,
        probes,
        settings,
        walker,
        timings,
    )
}

/// Calls the thread's `entry` (sampling it in sample mode): its result, the samples and
/// its wall time in nanoseconds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call_entry(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    module: &Module,
    entry: Entry,
    probes: StartProbes<'_>,
    settings: &RunSettings,
    walker: Walking<'_>,
    timings: &mut Timings,
) -> Result<(wasmtime::Result<()>, Option<Samples>, u64), Failure> {
    let StartProbes {
        mode,
        bytes: probe_bytes,
        switches,
        desk,
        cpu_time,
        returned,
    } = probes;
    let returned = || {
        if let Some(returned) = returned {
            returned();
        }
    };
    let first = entry == Entry::Start;
    let start = EntryFunc::of(store, instance, entry, settings)?;
    if mode.is_some_and(ProbeMode::counts_inline) {
        reset_slot(store, instance);
    }
    let cell = match mode {
        Some(m) if m.samples() => {
            let cell = current_cell(store, instance);
            if cell.is_none() && first {
                crate::say!(
                    "wprof: warning: sample mode cannot read the running context on this \
                     host; calls are counted, times will be zero"
                );
            }
            cell
        }
        _ => None,
    };
    let ticking = time_ticks(store, module, mode, probe_bytes, settings.short_max > 0);
    let clock = crate::run::clock::Clock::new();
    let started = Instant::now();
    let (result, samples, wall_time) = match cell {
        Some(cell) => {
            let stop = AtomicBool::new(false);
            // SAFETY: the cell stays valid while the store lives, which outlives the session
            // (dropped at the end of this block).
            let session = unsafe {
                crate::run::interrupt::Session::begin(cell.as_ptr(), settings.sample_period.base)
            };
            if session.is_none() && first {
                crate::say!(
                    "wprof: warning: sample mode cannot ask the program's thread where it is \
                     (SIGPROF is taken, no thread timer can be made, or this platform is not Linux \
                     on x86-64 or AArch64); \
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
            let cpu = cpu_time
                .then(crate::run::clock::ThreadCpuClock::of_this_thread)
                .flatten()
                .and_then(|c| Some((c, c.now_ps()?)));
            let (result, mut samples) = std::thread::scope(|s| {
                let (clock, stop, period) = (&clock, &stop, settings.sample_period);
                let from = clock.now_ps();
                let sampler = s.spawn(move || {
                    let watch = walker.map(|w| w as &mut dyn crate::run::inline::sampler::Watch);
                    crate::run::inline::sampler::sample(
                        cell,
                        asking,
                        crate::run::inline::sampler::Timing {
                            clock,
                            period,
                            stop,
                            started: from,
                            cpu,
                        },
                        watch,
                        desk,
                    )
                });
                let result = start.call(&mut *store);
                returned();
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
            let result = start.call(&mut *store);
            returned();
            drop(ticking);
            (result, None, started.elapsed())
        }
    };
    Ok((result, samples, wall_time.as_nanos() as u64))
}

/// Time mode, on each thread of the program when some functions may be counted, not
/// timed: the thread's timer interrupts it, and the ticks go to its collector (see
/// [`crate::run::time::ticks`]) until the session returned is dropped (on this thread).
fn time_ticks(
    store: &Store<HostState>,
    module: &Module,
    mode: Option<ProbeMode>,
    probe_bytes: Option<&ProbeBytes>,
    wanted: bool,
) -> Option<crate::run::interrupt::Session> {
    if !wanted || mode != Some(ProbeMode::Time) {
        return None;
    }
    let log = store.data().log.as_ref()?;
    let probes = probe_bytes.map(|b| {
        crate::run::time::ticks::ProbeFinder::new(module, b.code.clone(), b.image.as_ref())
    });
    let code = crate::run::time::ticks::TickCode::Module {
        code: CodeMap::of(module, ProbeMode::Time),
        probes,
    };
    // SAFETY: the store keeps the log until the run's end, after the session (dropped by
    // the caller once the entry returned).
    unsafe {
        crate::run::time::ticks::start(log.logged_cell(), log.clock(), code, |r| log.read_ticks(r))
    }
}

/// Which of `pcs` (sorted) are in wprof's probes rather than the original's instructions,
/// by the module's address map (from its artifact file when there is one) and its
/// probe-code section (none without the section).
pub(crate) fn probe_pcs(
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

/// Sample mode: which bytes of the module are probes, and how to find a program counter's
/// byte.
#[derive(Debug)]
pub struct ProbeBytes {
    /// The module's `wprof.probe-code` section.
    pub code: ProbeCode,
    /// wasmtime's serialized module, when the module was loaded from one: its address map
    /// finds a sampled program counter's wasm offset quickly (see
    /// [`crate::run::code::address_map`]).
    pub image: Option<std::fs::File>,
}

impl ProbeBytes {
    /// Another handle on the same bytes (the image file opened again); `None` without one
    /// when it cannot be.
    pub fn try_clone(&self) -> ProbeBytes {
        ProbeBytes {
            code: self.code.clone(),
            image: self.image.as_ref().and_then(|f| f.try_clone().ok()),
        }
    }
}
