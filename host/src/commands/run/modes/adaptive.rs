//! Adaptive mode: sample mode's tree and ticks, and timers armed on the functions the
//! samples find hot (see [`crate::run::adaptive`]); what a timer costs is measured at
//! start-up and subtracted (unless `--keep-overhead`).

use wprof_agent::ProbeMode;

use super::probed::Probing;
use super::Job;
use crate::prepare::session::warn;
use crate::run::runner::Probes;

/// Adaptive mode's part.
#[derive(Debug)]
pub struct Adaptive;

impl Probing for Adaptive {
    fn mode(&self) -> ProbeMode {
        ProbeMode::Adaptive
    }

    fn calibrate(&self, job: &mut Job, probes: Probes) -> Probes {
        let measured = job.timings.time("calibrate", || {
            crate::run::adaptive::calibrate::measure(&job.engine)
        });
        match measured {
            Ok(cost) => {
                tracing::debug!(?cost, "timer cost measured");
                probes.with_timer_cost(cost)
            }
            Err(e) => {
                warn(format_args!(
                    "cannot measure the timers' cost ({e}); times include it"
                ));
                probes
            }
        }
    }
}
