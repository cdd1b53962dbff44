//! What an instrumented module's run needs besides the module: the collector its probes
//! report to, and what the run starts around `_start` for the features asked (live
//! switches, `--serve`'s windows, coverage, allocations, injections into the module's own
//! functions, adaptive mode's timer cost).

use wprof_agent::{ProbeCode, ProbeMode};

use crate::run::adaptive::stopwatch::TimerCost;
use crate::run::collector::Collector;
use crate::run::inline::window::Serve;
use crate::run::start::ProbeBytes;
use crate::run::switches::Live;

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
