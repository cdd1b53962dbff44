//! What a component's run keeps in its store ([`ComponentState`]: WASI 0.2, time mode's
//! log, fault injection, `--allocs`, adaptive mode's stopwatches) and what it knows of each
//! instrumented core module ([`ModuleProbes`]); shared by the run
//! ([`crate::run::component`]), its probe instances ([`crate::run::component::probes`]), its
//! sampler and the calibrations.

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::components::ProbeImport;
use crate::run::adaptive::stopwatch::{Stopwatch, TimerCost};
use crate::run::host_calls::inject::FunctionInjectors;
use crate::run::time::probe_log::ProbeLog;

/// What a component's run keeps: WASI 0.2's context and resources, and time mode's log.
pub struct ComponentState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) log: Option<ProbeLog>,
    /// `--inject` into the modules' own functions, by component id.
    pub(crate) injected: FunctionInjectors,
    /// `--allocs`: every module's blocks.
    pub(crate) allocs: Option<crate::run::component::allocs::ComponentAllocs>,
    /// Adaptive mode: each instrumented module's stopwatch (by probe instance), which its
    /// timed activations' probes start and stop.
    pub(crate) stopwatches: Vec<Option<Stopwatch>>,
}

impl std::fmt::Debug for ComponentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentState").finish_non_exhaustive()
    }
}

impl ComponentState {
    /// A state with an empty WASI context, and time mode's log when given one.
    pub(crate) fn bare(log: Option<ProbeLog>) -> Self {
        ComponentState {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            log,
            injected: FunctionInjectors::default(),
            allocs: None,
            stopwatches: Vec::new(),
        }
    }

    /// Time mode's log, taken.
    pub(crate) fn take_log(&mut self) -> Option<ProbeLog> {
        self.log.take()
    }

    /// Adaptive mode's calibration: a stopwatch over `tree`, the one module's, costing
    /// nothing.
    pub(crate) fn attach_stopwatch(&mut self, tree: crate::run::adaptive::live_tree::LiveTree) {
        self.stopwatches = vec![Some(Stopwatch::new(
            crate::run::clock::Clock::new(),
            crate::run::adaptive::timers::Timers::new(tree),
            TimerCost::default(),
        ))];
    }

    /// The one module's stopwatch, taken (see [`ComponentState::attach_stopwatch`]).
    pub(crate) fn take_stopwatch(&mut self) -> Option<Stopwatch> {
        self.stopwatches.first_mut()?.take()
    }
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// One instrumented core module of the component: where its ids start in the component's
/// id space and the probe functions it imports.
#[derive(Debug, Clone)]
pub struct ModuleProbes {
    /// The component id of the module's function 0.
    pub offset: u32,
    /// How the instrumented module numbers its functions (how many it has, imported and
    /// defined, and how many the original imports).
    pub indices: wprof_agent::FunctionIndices,
    /// Its position among the component's core modules (the `M` of its compiled code's
    /// symbols, see [`crate::run::component::code`]).
    pub position: usize,
    /// Sample mode: which of its bytes are probes.
    pub probe_code: Option<wprof_agent::ProbeCode>,
    /// Its probe imports, as [`crate::components::probe_imports`] read them.
    pub imports: Vec<ProbeImport>,
    /// With `--coverage`: its block map and where its counters are.
    pub coverage: Option<crate::run::component::coverage::ModuleCoverage>,
    /// With `--allocs`: its allocator functions, by component id.
    pub allocators: Vec<crate::profile::AllocatorRecord>,
    /// Sample and adaptive mode: the interpreter the module is, whose eval loop's state its
    /// probes keep (see [`crate::prepare::component::interpreter`]).
    pub interpreter: Option<std::sync::Arc<crate::languages::Interpreter>>,
}
