//! Time mode's program-counter ticks in a component (see [`crate::run::time::ticks`]): the
//! program's thread is interrupted as for a module, and each tick's program counter is
//! looked up in the component's compiled code, module by module, their probes' instructions
//! told apart, so that the short functions of every core module get their share of their
//! callers' time.

use wasmtime::component::Component;
use wasmtime::Store;
use wprof_agent::ProbeMode;

use crate::run::component::code::ComponentCode;
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::interrupt::Session;
use crate::run::time::ticks::TickCode;

/// Starts the ticks on the calling thread, the program's, when `wanted` and the store has
/// time mode's log. The ticks stop when the session is dropped, on this thread, before the
/// store goes. `None` where the thread cannot be interrupted or the component's code cannot
/// be read: the short functions' time then stays their callers'.
pub fn start(
    store: &Store<ComponentState>,
    component: &Component,
    modules: &[ModuleProbes],
    wanted: bool,
) -> Option<Session> {
    if !wanted {
        return None;
    }
    let log = store.data().log.as_ref()?;
    let positions = modules.iter().map(|m| m.position + 1).max()?;
    let mut indices = vec![None; positions];
    let mut probe_code = vec![None; positions];
    let mut offsets = vec![None; positions];
    for m in modules {
        indices[m.position] = Some(m.indices);
        probe_code[m.position] = m.probe_code.clone();
        offsets[m.position] = Some(m.offset);
    }
    let code = ComponentCode::of(component, &indices, probe_code, ProbeMode::Time)?;
    // SAFETY: the store keeps the log until the run's end, after the session (dropped by
    // the caller once the program returned).
    unsafe {
        crate::run::time::ticks::start(
            log.logged_cell(),
            log.clock(),
            TickCode::Component { code, offsets },
            |r| log.read_ticks(r),
        )
    }
}
