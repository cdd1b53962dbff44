//! Time mode: probes that log clock readings (see [`crate::run::time::probe_log`]),
//! replayed by a worker into the thread's collector, and, when some functions are only
//! counted, the thread's timer ticks that time them (see [`crate::run::time::ticks`]).

use wasmtime::{Linker, Module, Store};
use wprof_agent::ProbeMode;

use super::{Entered, EntryCall, HostFigures, ThreadMode};
use crate::exit::Failure;
use crate::run::code::map::CodeMap;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::host_state::HostState;
use crate::run::start::{Entry, ProbeBytes};
use crate::run::time::probe_log::ProbeLog;

/// Time mode.
#[derive(Debug)]
pub struct Time {
    /// Where the probes' instructions are, so that a tick in one goes to its function.
    probe_bytes: Option<ProbeBytes>,
}

impl Time {
    /// Time mode over a module whose probes are at `probe_bytes`.
    pub fn new(probe_bytes: Option<ProbeBytes>) -> Self {
        Time { probe_bytes }
    }

    /// When some functions may be counted, not timed: the thread's timer interrupts it,
    /// and the ticks go to its collector until the session returned is dropped (on this
    /// thread).
    fn ticks(
        &self,
        store: &Store<HostState>,
        module: &Module,
    ) -> Option<crate::run::interrupt::Session> {
        let log = store.data().log.as_ref()?;
        let probes = self.probe_bytes.as_ref().map(|b| {
            crate::run::time::ticks::ProbeFinder::new(module, b.code.clone(), b.image.as_ref())
        });
        let code = crate::run::time::ticks::TickCode::Module {
            code: CodeMap::of(module, ProbeMode::Time),
            probes,
        };
        // SAFETY: the store keeps the log until the run's end, after the session (dropped
        // by the caller once the entry returned).
        unsafe {
            crate::run::time::ticks::start(log.logged_cell(), log.clock(), code, |r| {
                log.read_ticks(r)
            })
        }
    }
}

impl ThreadMode for Time {
    fn probes(&self) -> Option<ProbeMode> {
        Some(ProbeMode::Time)
    }

    fn link(&self, linker: &mut Linker<HostState>) -> Result<(), Failure> {
        crate::run::host_state::define_probes(linker, ProbeMode::Time)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))
    }

    fn host_figures(&self) -> HostFigures {
        HostFigures::Timed
    }

    fn reporting(&self, collector: Option<Collector>) -> (Option<Collector>, Option<ProbeLog>) {
        (None, collector.map(ProbeLog::start))
    }

    fn enter(&self, mut call: EntryCall<'_>) -> Result<Entered, Failure> {
        let ticking = (call.settings.short_max > 0)
            .then(|| self.ticks(call.store, call.module))
            .flatten();
        // A wall clock times the functions: the first thread's CPU time in its entry says
        // how long it waited for a processor (see `Profile::cpu_wait_ns`).
        let cpu = (call.entry == Entry::Start)
            .then(crate::run::clock::ThreadCpuClock::of_this_thread)
            .flatten()
            .and_then(|c| Some((c, c.now_ps()?)));
        let entered = crate::run::start::call_plain(&mut call);
        drop(ticking);
        let cpu_ns = cpu.and_then(|(c, from)| Some(c.now_ps()?.saturating_sub(from) / PS_PER_NS));
        Ok(Entered { cpu_ns, ..entered? })
    }
}
