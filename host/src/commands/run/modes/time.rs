//! Time mode: probes that read a clock at every entry and exit, logged for a collector
//! thread (see [`crate::run::time`]); the probes' own cost is measured at start-up and
//! subtracted (unless `--keep-overhead`).

use wprof_agent::ProbeMode;

use super::probed::Probing;
use super::Job;
use crate::prepare::instrument::Prepared;
use crate::prepare::session::warn;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::runner::Probes;

/// Time mode's part.
#[derive(Debug)]
pub struct Time;

impl Probing for Time {
    fn mode(&self) -> ProbeMode {
        ProbeMode::Time
    }

    fn collector(&self, job: &Job, prepared: &Prepared) -> Collector {
        let collector = Collector::new(prepared.functions.len()).with_quantum(PS_PER_NS);
        if !crate::go_symbols::is_go(&job.loaded.bytes) {
            return collector;
        }
        // Go: a goroutine's frames re-entered after a switch are told from calls, and
        // the stack's growth is no call of the function that grew it.
        let morestack = prepared
            .functions
            .iter()
            .find(|f| f.name == "runtime.morestack")
            .map(|f| f.id);
        collector.with_go(morestack)
    }

    fn calibrate(&self, job: &mut Job, mut probes: Probes) -> Probes {
        let settings = &job.settings;
        let measured = job.timings.time("calibrate", || {
            crate::run::time::calibrate::measure(
                &job.engine,
                settings.call_sites,
                settings.short_max > 0,
            )
        });
        match measured {
            Ok(overhead) => {
                tracing::debug!(?overhead, "probe overhead measured");
                probes.collector = probes.collector.with_overhead(overhead);
            }
            Err(e) => warn(format_args!(
                "cannot measure the probe overhead ({e}); times include it"
            )),
        }
        probes
    }
}
