//! Adaptive mode: sample mode (see [`super::inline`]) with, on the program's first thread,
//! a walker beside the sampler that starts timers along the hot paths (see
//! [`crate::run::adaptive`]); what they timed becomes the run's adaptive record.

use std::sync::Arc;

use wasmtime::Linker;
use wprof_agent::ProbeMode;

use super::inline::Inline;
use super::{Entered, EntryCall, First, HostFigures, ReadCall, Readings, ThreadMode};
use crate::exit::Failure;
use crate::languages::Interpreter;
use crate::run::adaptive::walker::Walker;
use crate::run::host_state::HostState;
use crate::run::start::ProbeBytes;

/// Adaptive mode.
#[derive(Debug)]
pub struct Adaptive {
    /// Its sampling and counting, sample mode's.
    inline: Inline,
}

impl Adaptive {
    /// Adaptive mode over a module whose probes are at `probe_bytes` (`interpreter`: the
    /// one it is, whose eval loop's state its probes keep).
    pub fn new(probe_bytes: Option<ProbeBytes>, interpreter: Option<Arc<Interpreter>>) -> Self {
        Adaptive {
            inline: Inline::new(ProbeMode::Adaptive, probe_bytes, interpreter),
        }
    }
}

impl ThreadMode for Adaptive {
    fn probes(&self) -> Option<ProbeMode> {
        Some(ProbeMode::Adaptive)
    }

    fn link(&self, linker: &mut Linker<HostState>) -> Result<(), Failure> {
        self.inline.link(linker)
    }

    fn host_figures(&self) -> HostFigures {
        self.inline.host_figures()
    }

    fn samples(&self) -> bool {
        true
    }

    fn serves_windows(&self) -> bool {
        true
    }

    fn probe_bytes(&self) -> Option<&ProbeBytes> {
        self.inline.probe_bytes()
    }

    fn prepare_first(&self, first: First<'_>) -> Option<Walker> {
        let walker = crate::run::adaptive::walker::start(
            first.store,
            first.instance,
            first.settings.adaptive,
            first.timer_cost,
        );
        if walker.is_none() {
            crate::say!(
                "wprof: warning: adaptive mode cannot reach the module's timers on this host; \
                 times are sampled only"
            );
        }
        walker
    }

    fn enter(&self, call: EntryCall<'_>) -> Result<Entered, Failure> {
        self.inline.enter(call)
    }

    fn scripts(&self) -> Option<crate::run::stacks::languages::LanguageSamples> {
        self.inline.scripts()
    }

    fn read(&self, mut read: ReadCall<'_>) -> Readings {
        let walks = read.walker.take().map(Walker::finish);
        let stopwatch = read.store.data_mut().stopwatch.take();
        let cost = read.timer_cost;
        let settings = read.settings.adaptive;
        let (mut readings, tree) = self.inline.replay(&mut read);
        readings.adaptive = match (tree, &readings.attribution, walks, stopwatch) {
            (Some(tree), Some(attribution), Some(walks), Some(stopwatch)) => {
                let (times, unfinished) = stopwatch.finish();
                Some(crate::run::adaptive::record(
                    settings,
                    cost,
                    &walks,
                    &times,
                    unfinished,
                    &tree,
                    |address| attribution.time.get(&address).copied().unwrap_or(0),
                ))
            }
            _ => None,
        };
        readings
    }
}
