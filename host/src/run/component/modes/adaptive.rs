//! Adaptive mode in a component: sample mode (see [`super::inline`]) with, per instrumented
//! module, a stopwatch that its timed activations' probes start and stop and a walker,
//! told of the sampler's ticks in the module's functions, that arms the timers along the hot
//! paths (see [`crate::run::adaptive`]); what they timed becomes the run's adaptive record.

use std::cell::RefCell;

use wasmtime::Engine;
use wprof_agent::ProbeMode;

use super::inline::Inline;
use super::{ComponentMode, Entry, ModuleRead, ModuleReading, Prepare, RunResult};
use crate::run::adaptive::stopwatch::{Stopwatch, TimerCost};
use crate::run::adaptive::walker::Walker;
use crate::run::collector::Collector;
use crate::run::inline::sampler::Samples;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Adaptive mode.
#[derive(Debug, Default)]
pub struct Adaptive {
    /// What a timer costs, reached through the component's lowered calls (see
    /// [`crate::run::component::calibrate::measure_timers`]); nothing when not measured.
    timer_cost: TimerCost,
    /// Each module's walker, by its position among the component's core modules, as the
    /// sampler knows the modules.
    walkers: RefCell<Vec<Option<Walker>>>,
}

impl ComponentMode for Adaptive {
    fn probes(&self) -> ProbeMode {
        ProbeMode::Adaptive
    }

    fn samples(&self) -> bool {
        true
    }

    fn calibrate(
        &mut self,
        engine: &Engine,
        settings: &RunSettings,
        timings: &mut Timings,
        collector: Collector,
    ) -> Collector {
        if settings.subtract_overhead {
            match timings.time("calibrate", || {
                crate::run::component::calibrate::measure_timers(engine)
            }) {
                Ok(cost) => self.timer_cost = cost,
                Err(e) => crate::say!(
                    "wprof: warning: cannot measure the timers' cost ({e}); timed figures \
                     include it"
                ),
            }
        }
        collector
    }

    fn prepare(&self, prepare: Prepare<'_>) {
        let modules = prepare.modules;
        let positions = modules.iter().map(|m| m.position + 1).max().unwrap_or(0);
        let mut walkers = self.walkers.borrow_mut();
        walkers.resize_with(positions, || None);
        let mut stopwatches: Vec<Option<Stopwatch>> = (0..modules.len()).map(|_| None).collect();
        for (k, memory) in prepare.trees {
            let module = &modules[*k];
            // SAFETY: the tree memory never moves and lives as long as the store; the
            // walkers and stopwatches go before it (the sampler is joined, the store's data
            // dropped with it, the walkers taken when the module is read).
            let tree = unsafe { memory.live_tree() };
            stopwatches[*k] = Some(Stopwatch::new(
                crate::run::clock::Clock::new(),
                crate::run::adaptive::timers::Timers::new(tree),
                self.timer_cost,
            ));
            walkers[module.position] = Some(Walker::new(
                tree,
                module.indices.functions,
                prepare.settings.adaptive,
            ));
        }
        prepare.store.data_mut().stopwatches = stopwatches;
    }

    fn enter(&self, entry: Entry<'_>) -> (RunResult, Option<Vec<Samples>>) {
        Inline::call_sampled(entry, &mut self.walkers.borrow_mut())
    }

    fn read_module(&self, mut read: ModuleRead<'_>) -> ModuleReading {
        let mut reading = Inline::attribute(&mut read);
        let walker = self
            .walkers
            .borrow_mut()
            .get_mut(read.module.position)
            .and_then(Option::take);
        let stopwatch = read
            .store
            .data_mut()
            .stopwatches
            .get_mut(read.k)
            .and_then(Option::take);
        if let (Some(walker), Some(stopwatch)) = (walker, stopwatch) {
            let (times, unfinished) = stopwatch.finish();
            let sampled: std::collections::HashMap<u32, u64> = read
                .tree
                .nodes
                .iter()
                .map(|n| (n.address, n.self_cost))
                .collect();
            reading.adaptive = Some(crate::run::adaptive::record(
                read.settings.adaptive,
                self.timer_cost,
                &walker.finish(),
                &times,
                unfinished,
                read.tree,
                |address| sampled.get(&address).copied().unwrap_or(0),
            ));
        }
        reading
    }
}
