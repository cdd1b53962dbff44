//! Sample mode: the calling-context tree counted in the module's memory, its time sampled
//! at the thread's timer ticks (see [`crate::run::inline`]). All of its part is
//! [`Probing`]'s default.

use wprof_agent::ProbeMode;

use super::probed::Probing;

/// Sample mode's part.
#[derive(Debug)]
pub struct Sample;

impl Probing for Sample {
    fn mode(&self) -> ProbeMode {
        ProbeMode::Sample
    }
}
