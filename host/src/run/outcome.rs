//! How a run ended: the program's exit code, its trap (told as `wasmtime run` tells it),
//! and everything the run measured, as [`crate::run::runner::run`] hands it back.

use crate::exit::TRAP;
use crate::run::collector::Collector;
use crate::run::host_calls::InjectedTrap;
use crate::run::threads::ThreadRun;
use crate::timings::Timings;

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The program's exit code (0 when `_start` returns, the `proc_exit` code, or
    /// [`crate::exit::TRAP`]).
    pub exit_code: i32,
    /// The trap, if the program trapped: a one-line message and the full report.
    pub trap: Option<(String, String)>,
    /// The trap's wasm backtrace, innermost first (frames of the module that ran).
    pub backtrace: Vec<crate::run::backtrace::Frame>,
    /// Wall time of `_start` in nanoseconds.
    pub wall_time: u64,
    /// Sample mode: how the time was sampled.
    pub sampling: Option<crate::profile::SamplingRecord>,
    /// The collector, every frame closed, when the module was instrumented.
    pub collector: Option<Collector>,
    /// Live probes: what was switched when.
    pub live: Option<crate::profile::LiveRecord>,
    /// Adaptive mode: the walks and what was timed.
    pub adaptive: Option<crate::profile::AdaptiveRecord>,
    /// What `--inject` did.
    pub injections: Vec<crate::settings::injection::InjectionRecord>,
    /// The host's figures per WASI function called (profiled runs only).
    pub host_calls: Vec<crate::profile::HostCallRecord>,
    /// Coverage: every probed function's block counts.
    pub coverage: Option<crate::profile::coverage::Coverage>,
    /// Allocation profiling: the allocator and the run's totals.
    pub allocations: Option<crate::profile::AllocationsRecord>,
    /// How long instantiating, running and collecting took.
    pub timings: Timings,
    /// A program that spawned threads: the spawned threads that ended, and how many were
    /// still running when the program ended (see [`crate::run::threads`]).
    pub threads: Option<(Vec<ThreadRun>, u32)>,
    /// Stack mode: the first thread's calls (its functions' counters and its calls to
    /// WASI), when its module counts them.
    pub entry_counts: Option<crate::run::stacks::entry_counts::EntryCounts>,
    /// Time mode: the first thread's CPU time in `_start`, in nanoseconds.
    pub start_cpu_ns: Option<u64>,
    /// Sample and adaptive mode in an interpreter: what every thread's ticks learnt of its
    /// language (its functions' ids in the collectors follow the module's).
    pub languages: Option<crate::run::stacks::languages::LanguageSamples>,
}

/// The exit code and the trap (a one-line message and wasmtime's report) of an entry's
/// `result`: `proc_exit`'s code, 134 for a trap as under `wasmtime run`, 1 for any other
/// error that ends the program (a host error), as wasmtime's does.
pub(crate) fn ending_of(
    result: wasmtime::Result<()>,
    shown: &str,
    invoked: Option<&str>,
    backtrace: &[crate::run::backtrace::Frame],
) -> (i32, Option<(String, String)>) {
    let Err(e) = result else {
        return (0, None);
    };
    match exit_of(&e) {
        (code, None) => (code, None),
        (code, Some(message)) => {
            let report = crate::run::backtrace::report(shown, invoked, backtrace, &message);
            (code, Some((message, report)))
        }
    }
}

/// The exit code of an error that ended a program's entry, and, unless it was
/// `proc_exit`, its one-line message: 134 for a trap (an injected one told as wprof's
/// injection), 1 for any other error (a host error), as wasmtime's CLI exits.
pub(crate) fn exit_of(e: &wasmtime::Error) -> (i32, Option<String>) {
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return (exit.0, None);
    }
    let trap = e.downcast_ref::<wasmtime::Trap>();
    let code = if trap.is_some() { TRAP } else { 1 };
    let message = match (e.downcast_ref::<InjectedTrap>(), trap) {
        (Some(injected), _) => injected.to_string(),
        (None, Some(trap)) => trap.to_string(),
        (None, None) => first_line(&e.root_cause().to_string()),
    };
    (code, Some(message))
}

/// The first line of `s`.
pub(crate) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}
