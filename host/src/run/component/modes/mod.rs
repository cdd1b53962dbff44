//! The modes as a component's run sees them, each one module behind one interface,
//! [`ComponentMode`], as [`crate::run::modes`] is for a core module's threads: what the mode
//! measures before the run (its calibration), where the probes report, what it starts and
//! stops around `wasi:cli/run`, and what it reads from each module's tree once the run
//! returned. The command ([`crate::commands::run::component`]) and the run
//! ([`crate::run::component::run`]) call these steps and ask no other question of the mode.
//!
//! - [`time`]: probes that log clock readings into one probe log over every module.
//! - [`inline`]: cost and sample mode, whose probes count in each module's tree.
//! - [`adaptive`]: sample mode with a stopwatch and a walker per module.
//!
//! Stack mode has no component form: a component is profiled in sample mode (see
//! [`crate::commands::run`]).

pub mod adaptive;
pub mod inline;
pub mod time;

use wasmtime::component::Component;
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::bindings::sync::Command;
use wprof_agent::ProbeMode;

use crate::profile::AdaptiveRecord;
use crate::run::collector::Collector;
use crate::run::component::memory::MadeMemory;
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::inline::replay::ScriptPath;
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::inline::scripts::SharedScripts;
use crate::run::inline::tree::InlineTree;
use crate::run::switches::Switchboard;
use crate::run::time::probe_log::ProbeLog;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// What `wasi:cli/run` returned: the program's own result, or how it ended otherwise.
pub type RunResult = wasmtime::Result<Result<(), ()>>;

/// One mode, as a component's run sees it. In order: [`calibrate`](ComponentMode::calibrate)
/// before the run, [`reporting`](ComponentMode::reporting) for the store,
/// [`prepare`](ComponentMode::prepare) once instantiated, [`enter`](ComponentMode::enter),
/// then [`read_module`](ComponentMode::read_module) for each instrumented module's tree.
pub trait ComponentMode: std::fmt::Debug {
    /// The mode the modules were instrumented for.
    fn probes(&self) -> ProbeMode;

    /// Whether the probes count in a tree in each module's memory, which the run reads (the
    /// inline modes): only an engine whose memories wprof makes can find them, and only
    /// there can `--live` turn switches.
    fn counts_in_trees(&self) -> bool {
        true
    }

    /// Whether a sampler reads where the program is: `--serve` then asks it for copies of
    /// its readings.
    fn samples(&self) -> bool {
        false
    }

    /// The run's collector over `functions` component ids, before calibration.
    fn collector(&self, functions: usize) -> Collector {
        Collector::new(functions).with_quantum(crate::run::collector::PS_PER_NS)
    }

    /// Measures, on `engine`, what the mode subtracts from what it measures (timed as
    /// `calibrate`; a failure is one warning and the figures include the cost): the
    /// collector to report to.
    fn calibrate(
        &mut self,
        _engine: &Engine,
        _settings: &RunSettings,
        _timings: &mut Timings,
        collector: Collector,
    ) -> Collector {
        collector
    }

    /// Where the probes report: `collector` as it is (the inline modes read it at the end),
    /// or behind a probe log (time mode).
    fn reporting(&self, collector: Collector) -> (Option<Collector>, Option<ProbeLog>) {
        (Some(collector), None)
    }

    /// Once instantiated, over the modules' trees: what the mode starts beside the program.
    fn prepare(&self, _prepare: Prepare<'_>) {}

    /// Calls `wasi:cli/run`, with what the mode starts and stops around it: the result and,
    /// where the mode samples, each core module's samples (by position).
    fn enter(&self, entry: Entry<'_>) -> (RunResult, Option<Vec<Samples>>) {
        (entry.command.wasi_cli_run().call_run(entry.store), None)
    }

    /// Reads what module `read.k` measured besides its tree's counts, setting each of
    /// `read.tree`'s nodes' self cost where the mode measures it otherwise.
    fn read_module(&self, _read: ModuleRead<'_>) -> ModuleReading {
        ModuleReading::default()
    }
}

/// The mode a component's modules were instrumented for.
pub fn of(mode: ProbeMode) -> Box<dyn ComponentMode> {
    match mode {
        ProbeMode::Time => Box::new(time::Time),
        ProbeMode::Adaptive => Box::new(adaptive::Adaptive::default()),
        mode => Box::new(inline::Inline::new(mode)),
    }
}

/// What a mode's preparation works with.
pub struct Prepare<'a> {
    pub store: &'a mut Store<ComponentState>,
    pub modules: &'a [ModuleProbes],
    /// Each instrumented module's tree memory, as `(module, memory)`.
    pub trees: &'a [(usize, MadeMemory)],
    pub settings: &'a RunSettings,
}

/// What a mode's call of `wasi:cli/run` works with.
pub struct Entry<'a> {
    pub store: &'a mut Store<ComponentState>,
    pub command: &'a Command,
    pub component: &'a Component,
    pub modules: &'a [ModuleProbes],
    /// The inline modes: each instrumented module's tree memory, when found.
    pub trees: Option<&'a [(usize, MadeMemory)]>,
    /// Sample and adaptive mode in an interpreter: its module, and its linear memory, where
    /// the ticks read its script's frames.
    pub program: Option<(usize, &'a MadeMemory)>,
    /// `--live`: the switches the sampler turns with the readings.
    pub switches: Option<&'a Switchboard>,
    /// `--serve`: where the sampler hands copies of its readings.
    pub desk: Option<&'a SampleDesk<Vec<Samples>>>,
    pub settings: &'a RunSettings,
}

/// What reading one module's tree works with.
pub struct ModuleRead<'a> {
    pub store: &'a mut Store<ComponentState>,
    /// The module's index among the instrumented ones.
    pub k: usize,
    pub module: &'a ModuleProbes,
    /// Its tree, as the probes left it.
    pub tree: &'a mut InlineTree,
    /// Sample and adaptive mode: the run's samples, by position.
    pub samples: Option<&'a [Samples]>,
    /// Sample and adaptive mode in an interpreter: the numbering of its script's functions.
    pub scripts: &'a SharedScripts,
    pub settings: &'a RunSettings,
}

/// What a module measured besides its tree's counts.
#[derive(Debug, Default)]
pub struct ModuleReading {
    /// Sample mode: the time the probes' own instructions took, in picoseconds.
    pub probe_ps: u64,
    /// Adaptive mode: the walks and what was timed, in the module's ids.
    pub adaptive: Option<AdaptiveRecord>,
    /// In an interpreter: the contexts' time with its script's frames, in the module's ids
    /// (see [`crate::run::inline::replay::script_paths`]).
    pub script_paths: Vec<ScriptPath>,
}

/// The steps' arguments hold the store and the program's borrowed parts, which print
/// nothing useful: each shows its name only.
macro_rules! opaque_debug {
    ($($name:ident),*) => {$(
        impl std::fmt::Debug for $name<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    )*};
}

opaque_debug!(Prepare, Entry, ModuleRead);
