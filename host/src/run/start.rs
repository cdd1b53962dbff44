//! Calling a thread's entry function (`_start`, or a spawned thread's `wasi_thread_start`):
//! plainly, or (sample and adaptive mode) with the sampler reading where the program is from
//! another thread, and adaptive mode's walker beside it. The modes (see
//! [`crate::run::modes`]) call these with what they start and stop around them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use wasmtime::{Instance, Module, Store};
use wprof_agent::{ContextArena, ProbeCode, ProbeMode};

use crate::exit::Failure;
use crate::run::adaptive::walker::Walker;
use crate::run::code::address_map::ArtifactAddressMap;
use crate::run::code::map::CodeMap;
use crate::run::host_state::{never_moves, HostState};
use crate::run::inline::sampler::{Asking, CurrentCell};
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::stacks::StackSamples;
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

/// The export a reactor (a module that is no command) is initialised by, before the
/// function `--invoke` names.
pub const INITIALIZE: &str = "_initialize";

/// The entry function, called.
enum EntryFunc {
    Start(wasmtime::TypedFunc<(), ()>),
    /// `--invoke`: a reactor's `_initialize` (if it exports one), then the function named,
    /// whose results are printed as `wasmtime run --invoke` prints them, a value a line.
    Invoke {
        initialize: Option<wasmtime::TypedFunc<(), ()>>,
        func: wasmtime::Func,
    },
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
            Entry::Start if settings.entry.invoke.is_some() => {
                let name = settings.entry.invoke.as_deref().unwrap_or_default();
                let func = instance.get_func(&mut *store, name).ok_or_else(|| {
                    Failure::input(format!("{shown} exports no function `{name}` to invoke"))
                })?;
                let initialize = match instance.get_func(&mut *store, INITIALIZE) {
                    Some(f) => Some(f.typed::<(), ()>(&*store).map_err(|e| {
                        Failure::input(format!("{shown} has an unusable `{INITIALIZE}`: {e}"))
                    })?),
                    None => None,
                };
                Ok(EntryFunc::Invoke { initialize, func })
            }
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
            EntryFunc::Invoke { initialize, func } => {
                if let Some(initialize) = initialize {
                    initialize.call(&mut *store, ())?;
                }
                let count = func.ty(&*store).results().len();
                let mut results = vec![wasmtime::Val::I32(0); count];
                func.call(&mut *store, &[], &mut results)?;
                print_results(&results);
                Ok(())
            }
            EntryFunc::Thread(f, tid, arg) => f.call(store, (*tid, *arg)),
        }
    }
}

/// An invoked function's results on stdout, a value a line, as `wasmtime run --invoke`
/// prints them (the loader let through numbers only).
fn print_results(results: &[wasmtime::Val]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for value in results {
        let _ = match value {
            wasmtime::Val::I32(v) => writeln!(out, "{v}"),
            wasmtime::Val::I64(v) => writeln!(out, "{v}"),
            wasmtime::Val::F32(bits) => writeln!(out, "{}", f32::from_bits(*bits)),
            wasmtime::Val::F64(bits) => writeln!(out, "{}", f64::from_bits(*bits)),
            other => writeln!(out, "{other:?}"),
        };
    }
    let _ = out.flush();
}

/// One call of a thread's entry function, and what it is called with.
pub(crate) struct EntryCall<'a> {
    pub store: &'a mut Store<HostState>,
    pub instance: &'a Instance,
    pub module: &'a Module,
    pub entry: Entry,
    pub settings: &'a RunSettings,
    /// Live probes: the switches.
    pub switches: Option<&'a Switchboard>,
    /// `--serve`: where the sampler hands copies of its readings.
    pub desk: Option<&'a SampleDesk>,
    /// A threaded program: sample mode charges the thread's CPU time (see
    /// [`crate::run::inline::sampler::Timing::cpu`]).
    pub cpu_time: bool,
    /// Adaptive mode's walker, on the sampler's thread (the first thread's).
    pub walker: Option<&'a mut Walker>,
    /// A spawned thread: told on the thread as soon as the entry function returns, before
    /// the sampler is stopped and joined (which may sleep), so that the end of the program
    /// does not take the thread for one blocked in wasm (see
    /// [`crate::run::threads::Threads::take_ended`]).
    pub returned: Option<&'a dyn Fn()>,
    pub timings: &'a mut Timings,
}

/// How a thread's entry function ended, and what was measured around it.
#[derive(Debug)]
pub(crate) struct Entered {
    /// The entry function's result.
    pub result: wasmtime::Result<()>,
    /// Sample mode: where the sampler found the thread.
    pub samples: Option<Samples>,
    /// Its wall time in nanoseconds.
    pub wall_time: u64,
    /// Time mode, the first thread: its CPU time in its entry, in nanoseconds (a wall clock times the
    /// functions: see `Profile::cpu_wait_ns`).
    pub cpu_ns: Option<u64>,
    /// Stack mode, a spawned thread: its stacks (`None` when it could not be interrupted;
    /// the first thread's are walked over the whole run, see
    /// `commands::run::modes::stack`).
    pub stacks: Option<StackSamples>,
    /// A sampled thread whose own timer could not be made (the system refused it): its
    /// time was read from the calling context alone.
    pub unsampled: bool,
}

impl Entered {
    /// An entry that ran with nothing measured around it.
    pub fn plain(result: wasmtime::Result<()>, wall_time: u64) -> Self {
        Entered {
            result,
            samples: None,
            wall_time,
            cpu_ns: None,
            stacks: None,
            unsampled: false,
        }
    }
}

/// Calls the thread's entry function with nothing started around it: its result and wall
/// time in nanoseconds.
pub(crate) fn call_plain(call: &mut EntryCall<'_>) -> Result<Entered, Failure> {
    call_plain_then(call, &|| {})
}

/// [`call_plain`], with `first` told as soon as the entry returns, before the call's own
/// `returned`.
pub(crate) fn call_plain_then(
    call: &mut EntryCall<'_>,
    first: &dyn Fn(),
) -> Result<Entered, Failure> {
    let entry = EntryFunc::of(call.store, call.instance, call.entry, call.settings)?;
    let started = Instant::now();
    let result = entry.call(&mut *call.store);
    first();
    if let Some(returned) = call.returned {
        returned();
    }
    Ok(Entered::plain(result, started.elapsed().as_nanos() as u64))
}

/// Calls the thread's entry function with sample mode's sampler reading where it is from
/// another thread (and adaptive mode's walker beside it); plainly, with a warning on the
/// first thread, where the running context cannot be read. `mode` is the module's
/// (sample or adaptive), whose probes are at `probe_bytes`.
pub(crate) fn call_sampled(
    mut call: EntryCall<'_>,
    mode: ProbeMode,
    probe_bytes: Option<&ProbeBytes>,
    language: Option<&'static crate::run::interrupt::language::LanguageWalk>,
) -> Result<Entered, Failure> {
    let first = call.entry == Entry::Start;
    let Some(cell) = current_cell(call.store, call.instance) else {
        if first {
            crate::say!(
                "wprof: warning: sample mode cannot read the running context on this \
                 host; calls are counted, times will be zero"
            );
        }
        return call_plain(&mut call);
    };
    let start = EntryFunc::of(call.store, call.instance, call.entry, call.settings)?;
    let EntryCall {
        store,
        module,
        settings,
        switches,
        desk,
        cpu_time,
        walker,
        returned,
        timings,
        ..
    } = call;
    let clock = crate::run::clock::Clock::new();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    // SAFETY: the cell stays valid while the store lives, which outlives the session
    // (dropped at the end of this function).
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
    // The ticks walk the interpreter's language too, when there is one.
    let walking = session.is_some() && language.is_some_and(crate::run::interrupt::walk_language);
    let code = session.as_ref().map(|_| CodeMap::of(module, mode));
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
        if let Some(returned) = returned {
            returned();
        }
        stop.store(true, Ordering::Release);
        sampler.thread().unpark();
        (result, sampler.join().ok())
    });
    // The sampler has read the frames: the walk ends before the session does.
    if walking {
        crate::run::interrupt::stop_walking_language();
    }
    let wall_time = started.elapsed();
    if let (Some(samples), Some(code)) = (samples.as_mut(), code.as_ref()) {
        timings.time("locate", || {
            let probes = probe_pcs(module, code, probe_bytes, &samples.located_pcs());
            samples.resolve(code, &probes);
        });
    }
    Ok(Entered {
        samples,
        unsampled: session.is_none(),
        ..Entered::plain(result, wall_time.as_nanos() as u64)
    })
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
