//! No probes: `WPROF=0`, or a module that could not be instrumented. The module runs as
//! under wasmtime; the host's wrappers stand only where `--inject` asks for them.

use super::{Entered, EntryCall, HostFigures, ThreadMode};
use crate::exit::Failure;
use wprof_agent::ProbeMode;

/// No probes.
#[derive(Debug)]
pub struct Plain;

impl ThreadMode for Plain {
    fn probes(&self) -> Option<ProbeMode> {
        None
    }

    fn host_figures(&self) -> HostFigures {
        HostFigures::Unmeasured
    }

    fn enter(&self, mut call: EntryCall<'_>) -> Result<Entered, Failure> {
        crate::run::start::call_plain(&mut call)
    }
}
