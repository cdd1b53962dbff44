//! Time mode in a component: every module's probes log clock readings into one probe log,
//! in the component's id space, so that calls crossing from module to module make one
//! calling-context tree; with short functions counted (`--short`), ticks of the program
//! counter give them their share of their callers' time (see
//! [`crate::run::component::ticks`]).

use wasmtime::Engine;
use wprof_agent::ProbeMode;

use super::{ComponentMode, Entry, RunResult};
use crate::run::collector::Collector;
use crate::run::inline::sampler::Samples;
use crate::run::time::probe_log::ProbeLog;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Time mode.
#[derive(Debug)]
pub struct Time;

impl ComponentMode for Time {
    fn probes(&self) -> ProbeMode {
        ProbeMode::Time
    }

    fn counts_in_trees(&self) -> bool {
        false
    }

    fn calibrate(
        &mut self,
        engine: &Engine,
        settings: &RunSettings,
        timings: &mut Timings,
        collector: Collector,
    ) -> Collector {
        if !settings.subtract_overhead {
            return collector;
        }
        match timings.time("calibrate", || {
            crate::run::component::calibrate::measure(
                engine,
                settings.call_sites,
                settings.short_max > 0,
            )
        }) {
            Ok(overhead) => collector.with_overhead(overhead),
            Err(e) => {
                crate::say!(
                    "wprof: warning: cannot measure the probe overhead ({e}); times include it"
                );
                collector
            }
        }
    }

    fn reporting(&self, collector: Collector) -> (Option<Collector>, Option<ProbeLog>) {
        (None, Some(ProbeLog::start(collector)))
    }

    fn enter(&self, entry: Entry<'_>) -> (RunResult, Option<Vec<Samples>>) {
        let ticking = crate::run::component::ticks::start(
            entry.store,
            entry.component,
            entry.modules,
            entry.settings.short_max > 0,
        );
        let result = entry.command.wasi_cli_run().call_run(&mut *entry.store);
        drop(ticking);
        (result, None)
    }
}
