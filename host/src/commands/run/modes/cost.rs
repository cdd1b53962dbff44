//! Cost mode: the calling-context tree counted in the module's memory, with the
//! instructions each context ran instead of time; no clock read, no tick.

use wprof_agent::ProbeMode;

use super::probed::{inline_collector, Probing};
use super::Job;
use crate::prepare::instrument::Prepared;
use crate::run::collector::Collector;

/// Cost mode's part.
#[derive(Debug)]
pub struct Cost;

impl Probing for Cost {
    fn mode(&self) -> ProbeMode {
        ProbeMode::Cost
    }

    /// Counts, not times: no quanta.
    fn collector(&self, job: &Job, prepared: &Prepared) -> Collector {
        inline_collector(job, prepared, self.mode())
    }
}
