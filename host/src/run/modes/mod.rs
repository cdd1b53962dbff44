//! The modes as each thread of a run sees them, each one module behind one interface,
//! [`ThreadMode`]: the probe imports it links, how the host's wrappers measure the thread's
//! calls to WASI, where its probes report, what it starts and stops around the thread's
//! entry function, and what it reads once the entry returned. The runner (the program's
//! first thread, [`crate::run::runner`]) and a threaded program's spawned threads
//! ([`crate::run::threads`]) call the same steps in the same order and ask no other
//! question of the mode: adding a mode is adding a module here and a line in [`of`].
//!
//! - [`plain`]: no probes (`WPROF=0`, or a module that could not be instrumented).
//! - [`stack`]: the original with an entry counter per function, its stacks walked.
//! - [`time`]: probes that log clock readings, replayed into the thread's collector.
//! - [`inline`]: sample and cost mode, whose probes count in the module's tree;
//!   [`adaptive`] is sample mode with timers along the hot paths.

pub mod adaptive;
pub mod inline;
pub mod plain;
pub mod stack;
pub mod time;

use std::sync::Arc;

use wasmtime::{Instance, Linker, Module, Store};
use wprof_agent::ProbeMode;

use crate::exit::Failure;
use crate::profile::coverage::Coverage;
use crate::profile::AdaptiveRecord;
use crate::run::adaptive::stopwatch::TimerCost;
use crate::run::adaptive::walker::Walker;
use crate::run::collector::Collector;
use crate::run::host_state::HostState;
use crate::run::inline::attribution::Attribution;
use crate::run::stacks::entry_counts::EntryCounts;
use crate::run::start::ProbeBytes;
pub(crate) use crate::run::start::{Entered, EntryCall};
use crate::run::time::probe_log::ProbeLog;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// How the host's wrappers of WASI's functions measure a thread's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFigures {
    /// Not at all (the wrappers stand only where `--inject` asks).
    Unmeasured,
    /// Calls and bytes, no clock read.
    Counted,
    /// Calls, bytes and each call's time.
    Timed,
}

impl HostFigures {
    /// Whether the wrappers record anything.
    pub fn measured(self) -> bool {
        self != HostFigures::Unmeasured
    }
}

/// One mode, as every thread of a run sees it. The runner and the spawned threads call,
/// in order: [`link`](ThreadMode::link) and [`host_figures`](ThreadMode::host_figures)
/// while they link the thread's instance, [`reporting`](ThreadMode::reporting) for its
/// store, then (the first thread only) [`prepare_first`](ThreadMode::prepare_first),
/// then [`enter`](ThreadMode::enter) and [`read`](ThreadMode::read).
pub trait ThreadMode: Send + Sync {
    /// The mode the module was instrumented for; `None` where it runs without probes.
    /// Handed to the features that read the probes (live switches, `--serve`).
    fn probes(&self) -> Option<ProbeMode>;

    /// Defines the probe imports the module's instrumented code calls.
    fn link(&self, _linker: &mut Linker<HostState>) -> Result<(), Failure> {
        Ok(())
    }

    /// How the host's wrappers measure the thread's calls to WASI.
    fn host_figures(&self) -> HostFigures;

    /// Where the thread's probes report: `collector` as it is (the store's collector), or
    /// behind a probe log (the store's log).
    fn reporting(&self, collector: Option<Collector>) -> (Option<Collector>, Option<ProbeLog>) {
        (collector, None)
    }

    /// Whether the mode's sampler reads the program's thread: `--serve` then asks it for
    /// copies of its readings.
    fn samples(&self) -> bool {
        false
    }

    /// Whether `--serve` can make windows of the running program from the module's tree.
    fn serves_windows(&self) -> bool {
        false
    }

    /// Sample mode: where the probes' own instructions are.
    fn probe_bytes(&self) -> Option<&ProbeBytes> {
        None
    }

    /// The program's first thread, once instantiated and before anything reads its tree
    /// (`--serve`'s windows start after): what the mode starts beside its sampler.
    fn prepare_first(&self, _first: First<'_>) -> Option<Walker> {
        None
    }

    /// Calls the thread's entry function, with what the mode starts and stops around it.
    fn enter(&self, call: EntryCall<'_>) -> Result<Entered, Failure>;

    /// What the thread's instance measured, read once its entry returned.
    fn read(&self, _read: ReadCall<'_>) -> Readings {
        Readings::default()
    }

    /// In an interpreter, what the ticks of every thread learnt of the script's functions
    /// (the inline modes number them across the threads), once the threads have ended.
    fn scripts(&self) -> Option<crate::run::stacks::languages::LanguageSamples> {
        None
    }
}

/// The mode that runs a module: the one its probes were made for (`probes`), else stack
/// mode's counted original when `settings` profile its stacks, else no probes at all.
pub fn of(
    probes: Option<ProbeMode>,
    probe_bytes: Option<ProbeBytes>,
    module: &Module,
    settings: &RunSettings,
) -> Arc<dyn ThreadMode> {
    match probes {
        Some(ProbeMode::Time) => Arc::new(time::Time::new(probe_bytes)),
        Some(ProbeMode::Adaptive) => Arc::new(adaptive::Adaptive::new(
            probe_bytes,
            settings.interpreter.clone(),
        )),
        Some(mode) => Arc::new(inline::Inline::new(
            mode,
            probe_bytes,
            settings.interpreter.clone(),
        )),
        None if settings.profiling && settings.stacks => {
            Arc::new(stack::Stack::new(module, settings.interpreter.clone()))
        }
        None => Arc::new(plain::Plain),
    }
}

/// How the ticks of a thread running `instance` walk `interpreter`'s language: from the
/// eval loop's state its probes or counters keep at `state` (the name of one of the
/// instance's memories, and the byte offset of the word there), in the program's memory.
/// `None` where that memory may move, or `instance` keeps no such memory.
fn language_walk(
    store: &mut Store<HostState>,
    instance: &Instance,
    interpreter: &Arc<crate::languages::Interpreter>,
    (memory, offset): (&str, usize),
) -> Option<&'static crate::run::interrupt::language::LanguageWalk> {
    let state = instance.get_memory(&mut *store, memory)?;
    let state = state
        .data_ptr(&*store)
        .wrapping_add(offset)
        .cast::<u32>()
        .cast_const();
    let (base, size) = match instance.get_export(&mut *store, "memory")? {
        wasmtime::Extern::Memory(memory)
            if crate::run::host_state::never_moves(&memory.ty(&*store)) =>
        {
            (
                memory.data_ptr(&*store).cast_const(),
                memory.data_size(&*store),
            )
        }
        wasmtime::Extern::SharedMemory(memory) => {
            let data = memory.data();
            (data.as_ptr().cast::<u8>(), data.len())
        }
        _ => return None,
    };
    // SAFETY: the state's memory and the program's belong to the thread's instance, which
    // lives until the thread's entry returned, when the walk stops (see each mode's
    // `enter`); neither moves (a shared memory never does, nor one that never moves).
    let walk = unsafe {
        crate::run::interrupt::language::LanguageWalk::new(
            (**interpreter).clone(),
            state,
            base,
            size,
        )
    };
    Some(Box::leak(Box::new(walk)))
}

/// What the first thread's preparation works with.
pub struct First<'a> {
    pub store: &'a mut Store<HostState>,
    pub instance: &'a Instance,
    pub settings: &'a RunSettings,
    /// Adaptive mode: what a timer costs.
    pub timer_cost: TimerCost,
}

/// What reading a thread's instance works with.
pub struct ReadCall<'a> {
    pub store: &'a mut Store<HostState>,
    pub instance: &'a Instance,
    pub entered: &'a Entered,
    /// Coverage: the block map, to fill with the thread's counts.
    pub blocks: Option<Coverage>,
    /// Adaptive mode: the first thread's walker, and what a timer costs.
    pub walker: Option<Walker>,
    pub timer_cost: TimerCost,
    /// The program's first thread (a spawned thread's failures are not told).
    pub first: bool,
    pub settings: &'a RunSettings,
    pub timings: &'a mut Timings,
}

/// What a thread's instance measured besides its collector.
#[derive(Debug, Default)]
pub struct Readings {
    /// Sample and adaptive mode: where the samples' time went, and the probes' share.
    pub attribution: Option<Attribution>,
    /// `--coverage`: the block counts.
    pub coverage: Option<Coverage>,
    /// Adaptive mode: the walks and what was timed.
    pub adaptive: Option<AdaptiveRecord>,
    /// Stack mode: the calls of each function and edge, counted by the module.
    pub entry_counts: Option<EntryCounts>,
}
