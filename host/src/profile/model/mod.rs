//! The profile's records: what a profile says about one run, the schema `wprof report
//! --format json` prints. Field names are stable; new fields may be added.

use serde::{Deserialize, Serialize};

mod host_and_allocations;
mod sampling;
mod symbols;

pub use host_and_allocations::{
    AllocFigures, AllocationsRecord, AllocatorRecord, HostCallRecord, HostFigures,
};
pub use sampling::{SamplingRecord, StackWalkRecord, TicksRecord};
pub use symbols::{FunctionSymbol, LineTime, LinesRecord, SymbolsRecord};

/// The current profile format.
pub const FORMAT_VERSION: u32 = 1;

/// The module that was profiled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRef {
    /// The path it was run from.
    pub path: String,
    /// blake3 of its bytes (hex).
    pub blake3: String,
}

/// One function that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRecord {
    /// Index in the original module (a script's function, after the module's).
    pub id: u32,
    /// Display name (`module::field` for imports).
    pub name: String,
    /// `local` or `import`; a script's function, the language's name (`lua`, see
    /// [`FunctionRecord::is_script`]).
    pub kind: String,
    /// Activations.
    pub calls: u64,
    /// Time in the function itself.
    #[serde(rename = "self")]
    pub self_time: u64,
    /// Time in the function and its callees (each outermost activation once).
    pub inclusive: u64,
    /// Smallest self time of one activation (time mode only: the inline modes count
    /// per calling context, not per activation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_self: Option<u64>,
    /// Largest self time of one activation (time mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_self: Option<u64>,
}

/// The kinds of a script's functions: an interpreted language's, read from its
/// interpreter's structures (see `crate::languages`).
pub const SCRIPT_KINDS: &[&str] = &["lua", "js", "py"];

impl FunctionRecord {
    /// Whether this is a function of the script an interpreter ran (not of the module):
    /// its calls are not counted, and it has no code in the module.
    pub fn is_script(&self) -> bool {
        SCRIPT_KINDS.contains(&self.kind.as_str())
    }
}

/// One caller -> callee edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// The caller's id; `null` for the root (the engine calling `_start`).
    pub caller: Option<u32>,
    /// The callee's id.
    pub callee: u32,
    /// The call site: the call's offset from the start of the caller's body (with
    /// `--call-sites` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// Calls along this edge.
    pub calls: u64,
    /// The callee's inclusive time caused by this caller.
    pub inclusive: u64,
}

/// One node of the calling-context tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextRecord {
    /// The node's index in `contexts`.
    pub id: u32,
    /// The parent node's index; `null` for the outermost functions.
    pub parent: Option<u32>,
    /// The function's id.
    pub function: u32,
    /// Activations in this context.
    pub calls: u64,
    /// Self time in this context.
    #[serde(rename = "self")]
    pub self_time: u64,
    /// Inclusive time in this context (outermost activations).
    pub inclusive: u64,
    /// An import's context: the host's time during its calls from here, measured around
    /// each call (see [`HostFigures`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostFigures>,
    /// An allocator's context (`--allocs`): the blocks it handed out when called from
    /// here (see [`AllocFigures`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocs: Option<AllocFigures>,
    /// A program that spawned threads: the thread this context ran on (0: the program's
    /// first thread; others by the id `wasi::thread-spawn` gave them). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<u32>,
}

/// A program that spawned threads (wasi-threads): each thread's calling-context tree is in
/// `contexts`, its nodes marked with the thread; functions and edges add up every thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadsRecord {
    /// The threads whose trees are in the profile, the first thread first.
    pub threads: Vec<ThreadRecord>,
    /// Threads still running when the program ended: not in the profile.
    pub unfinished: u32,
}

/// One thread of the program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// 0 for the program's first thread; the id `wasi::thread-spawn` returned for others.
    pub id: u32,
    /// Activations on this thread.
    pub calls: u64,
    /// Its total (self time, or instructions, of every function it ran).
    pub total: u64,
    /// Wall time from its start to its end, in nanoseconds (not in cost mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<u64>,
    /// The thread could not be interrupted (the system refused its timer): in stack mode
    /// its time was not sampled, in sample and adaptive mode it was read from the calling
    /// context alone; its calls are counted all the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsampled: bool,
}

/// The probe overhead subtracted, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadRecord {
    /// Per activation, inside the activation's own time.
    pub inside_ns: f64,
    /// Per call, in the caller's time.
    pub outside_ns: f64,
    /// Per call to a function counted, not timed, in the caller's time.
    #[serde(default)]
    pub called_ns: f64,
}

impl Eq for OverheadRecord {}

/// How the instrumented module came to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstrumentationStats {
    /// Functions defined in the module.
    pub functions_total: u32,
    /// Bodies the agent rewrote in this run.
    pub functions_instrumented: u32,
    /// Bodies taken from the cache.
    pub functions_from_cache: u32,
    /// The whole instrumented module came from the cache.
    pub module_from_cache: bool,
    /// Its compiled code came from the cache (an authenticated artifact): nothing was
    /// compiled.
    #[serde(default)]
    pub compiled_from_cache: bool,
    /// When compiled: functions whose machine code came from the cache (compiled before
    /// for an earlier version of the module).
    #[serde(default)]
    pub compiled_functions_reused: u64,
    /// When compiled: functions Cranelift compiled.
    #[serde(default)]
    pub compiled_functions: u64,
}

/// A function of the original module, as profiles name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Index in the original module.
    pub id: u32,
    /// Display name.
    pub name: String,
    /// `local` or `import`.
    pub kind: String,
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The wprof that wrote it.
    pub tool: String,
    /// The module.
    pub module: ModuleRef,
    /// The mode: `stack`, `sample`, `time`, `cost` or `adaptive`.
    pub mode: String,
    /// Unit of `self`, `inclusive`, `total` and friends: `ns` or `instructions`.
    pub unit: String,
    /// The program's exit code (wprof's own exit code too).
    pub exit_code: i32,
    /// `exit` (returned or `proc_exit`) or `trap`.
    pub outcome: String,
    /// The trap message, if the program trapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trap: Option<String>,
    /// Wall time of the run from `_start` to the end, in nanoseconds. Absent in cost mode,
    /// whose profiles hold no time at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<u64>,
    /// Sum of the inclusive cost of the outermost frames, in `unit`.
    pub total: u64,
    /// How the instrumented module was produced.
    pub instrumentation: InstrumentationStats,
    /// Time mode: nanoseconds of wprof's own work during the run (handing probe events to
    /// the collector thread), excluded from every time and from `total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_ns: Option<u64>,
    /// Time mode: nanoseconds the program's first thread was ready to run the module's code
    /// but had no processor (a busy machine): its wall time in `_start` less its CPU time,
    /// the host calls' time off the CPU and wprof's own pauses. Time mode reads a wall
    /// clock, so this time is in the times of whatever ran then (the other modes charge
    /// CPU time). Absent in the other modes and for threaded programs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_ns: Option<u64>,
    /// Functions left without probes (`--only`, `--exclude`): each is part of its nearest
    /// probed caller, and calls to it are not counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unprobed: Vec<String>,
    /// Time mode: functions that ran and were counted but not timed (short functions, see
    /// `wprof run --short-max`): calls exact, their time their callers' self time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untimed: Vec<String>,
    /// Time mode: how many program-counter samples shared the callers' self time with the
    /// short functions they called (see `run::time::ticks`); absent when none did, and
    /// those functions' time is then all their callers'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untimed_samples: Option<u64>,
    /// Time mode: the program-counter ticks taken to share the short functions' time (see
    /// `run::time::ticks`); absent when none were taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticks: Option<TicksRecord>,
    /// The probe overhead subtracted from every frame, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_overhead: Option<OverheadRecord>,
    /// Every function that ran, by id.
    pub functions: Vec<FunctionRecord>,
    /// Every edge, in order of first call.
    pub edges: Vec<EdgeRecord>,
    /// The calling-context tree, parents before children (recursive cycles collapsed:
    /// see [`crate::profile::context_tree`]).
    #[serde(default)]
    pub contexts: Vec<ContextRecord>,
    /// Stack, sample and adaptive mode: how the time was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingRecord>,
    /// Live probes (`--live`): what was switched on and off while the program ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveRecord>,
    /// Adaptive mode: the hot paths walked and the contexts timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRecord>,
    /// Faults injected into imported functions (`--inject`), and how often.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<crate::settings::injection::InjectionRecord>,
    /// Coverage (`--coverage`): every probed function's basic blocks and how often each
    /// ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<super::coverage::Coverage>,
    /// The host functions the program called (WASI), with the host's wall and on-CPU time
    /// and the bytes moved, by import; per calling context in `contexts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_calls: Vec<HostCallRecord>,
    /// Allocation profiling (`--allocs`): the allocator and the run's totals; per calling
    /// context in `contexts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocations: Option<AllocationsRecord>,
    /// A program that spawned threads: its threads (see [`ThreadsRecord`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<ThreadsRecord>,
    /// The functions' shown names and sources, and where the module was (see
    /// [`SymbolsRecord`]); absent in profiles of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<SymbolsRecord>,
    /// Stack mode, a module with line tables: the sampled time of each source line (see
    /// [`LinesRecord`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<LinesRecord>,
}

/// Adaptive mode: from each hot spot (a context where samples found the most self time) the
/// walk timed the activations of its function for a step, then its caller's, one level at
/// a time up to the root, a few functions at a time. A timed activation is measured from
/// its entry to its exit with a clock read, as in time mode; the other activations of its
/// context are counted exactly but not timed, so a context's inclusive time is its timed
/// activations' mean times its calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveRecord {
    /// Timed activations a step waits for before it moves to the caller.
    pub calls_per_step: u64,
    /// The most functions timed at once.
    pub max_timers: u32,
    /// Steps taken: functions timed, one after another.
    pub steps: u64,
    /// Timed activations that never ended (an exception unwound them, or the program
    /// ended inside them): not in any figure.
    pub unfinished: u64,
    /// What one timer costs (measured at start-up, subtracted from every timed
    /// activation), in nanoseconds.
    pub timer_cost_ns: u64,
    /// Every context walked or timed, in the order first reached.
    pub contexts: Vec<TimedContext>,
    /// The walks: indices in `contexts`, the hot spot first, then its callers upward.
    pub paths: Vec<Vec<u32>>,
}

/// A calling context that a walk reached, or whose function was timed while a walk timed
/// it elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedContext {
    /// Function ids from the outermost frame to this context's.
    pub stack: Vec<u32>,
    /// Its exact activations.
    pub calls: u64,
    /// Its inclusive time as the samples estimate it, in nanoseconds.
    pub sampled_ns: u64,
    /// Activations timed from entry to exit.
    pub timed: u64,
    /// Their total time, in nanoseconds.
    pub timed_ns: u64,
    /// The shortest and longest timed activation, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ns: Option<u64>,
    /// The longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<u64>,
    /// The inclusive time of all its activations, the timed ones' mean times its calls, in
    /// nanoseconds: `None` when none was timed, or when they were too short for the timer
    /// (a mean below [`AdaptiveRecord::RESOLUTION`] times the timer's cost; then
    /// `sampled_ns` is the better figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inclusive_ns: Option<u64>,
}

impl AdaptiveRecord {
    /// How many times its cost an activation must last for its timed figure to be
    /// trusted.
    pub const RESOLUTION: u64 = 10;
}

/// Live probes: every change of the switches during a run, and when each function that was
/// ever off had its probes on. A function's calls, contexts and times count only while its
/// probes were on; while off, it was part of its nearest probed caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRecord {
    /// Every change, in order.
    pub changes: Vec<SwitchChange>,
    /// The functions whose probes were off at some time (the others were on all along).
    pub switched: Vec<SwitchedFunction>,
}

/// One change of the switches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchChange {
    /// Nanoseconds from the start of the run.
    pub at_ns: u64,
    /// Turned on (else off).
    pub on: bool,
    /// Which functions, as asked (patterns).
    pub what: String,
    /// Who asked: `start`, `ctl`, or the configuration file's path.
    pub source: String,
    /// How many functions changed.
    pub functions: u32,
}

/// A function whose probes were off at some time during the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchedFunction {
    /// Its name.
    pub name: String,
    /// The intervals its probes were on, in nanoseconds from the start of the run.
    pub on: Vec<[u64; 2]>,
    /// Their total length.
    pub on_ns: u64,
}

/// How the program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// Exit code.
    pub exit_code: i32,
    /// Trap message, if it trapped.
    pub trap: Option<String>,
    /// Wall time from `_start` to the end.
    pub wall_time: u64,
    /// Sample mode: how time was sampled.
    pub sampling: Option<SamplingRecord>,
}

impl Profile {
    /// Whether its functions' calls were counted: in every mode but stack mode, and there
    /// when the module's functions counted their entries (see [`StackWalkRecord`]).
    pub fn counts_calls(&self) -> bool {
        self.counts_edge_calls()
            || self
                .sampling
                .as_ref()
                .and_then(|s| s.stacks)
                .is_some_and(|s| s.function_calls)
    }

    /// Whether the calls of its edges were counted: in every mode but stack mode, and there
    /// when the module counted its edges (see [`StackWalkRecord`]).
    pub fn counts_edge_calls(&self) -> bool {
        self.counts_context_calls()
            || self
                .sampling
                .as_ref()
                .and_then(|s| s.stacks)
                .is_some_and(|s| s.edge_calls)
    }

    /// Whether the calls of its calling contexts were counted: every mode but stack mode's,
    /// whose counters know a function's callers but not their callers'.
    pub fn counts_context_calls(&self) -> bool {
        self.mode != crate::settings::Mode::STACK_NAME
    }

    /// Whether its host calls' times are samples (stack mode's) rather than clocks read
    /// around every call (see [`HostFigures`]).
    pub fn samples_host_time(&self) -> bool {
        self.mode == crate::settings::Mode::STACK_NAME
    }

    /// The record of function `id`, if it ran.
    pub fn function(&self, id: u32) -> Option<&FunctionRecord> {
        self.functions
            .binary_search_by_key(&id, |f| f.id)
            .ok()
            .map(|i| &self.functions[i])
    }

    /// Time mode: how long the first thread was ready to run the module's code but had no
    /// processor (see [`Profile::cpu_wait_ns`]), from this profile's wall time, host calls
    /// and wprof's excluded work, and the thread's CPU time in `_start`, `cpu_ns`. wprof's own
    /// work is taken out whole, on the CPU or not, so the figure errs low.
    pub fn cpu_wait_of(&self, cpu_ns: u64) -> Option<u64> {
        let wall = self.wall_time?;
        let host_off_cpu: u64 = self.host_calls.iter().map(|h| h.figures.off_cpu_ns()).sum();
        Some(
            wall.saturating_sub(cpu_ns)
                .saturating_sub(host_off_cpu)
                .saturating_sub(self.excluded_ns.unwrap_or(0)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_for_a_processor_is_the_wall_time_nothing_else_explains() {
        let mut p = crate::profile::invariants::tests::profile();
        p.wall_time = Some(1_000_000_000);
        p.excluded_ns = Some(50_000_000);
        p.host_calls = vec![HostCallRecord {
            function: 0,
            name: "wasi_snapshot_preview1::poll_oneoff".into(),
            figures: HostFigures {
                calls: 1,
                wall_ns: 300_000_000,
                cpu_ns: 100_000_000,
                bytes: None,
            },
        }];
        // 1 s of wall time: 0.6 s on the CPU, 0.2 s asleep in the host, 50 ms wprof's.
        assert_eq!(p.cpu_wait_of(600_000_000), Some(150_000_000));
        // More CPU than the rest leaves: no wait, never an underflow.
        assert_eq!(p.cpu_wait_of(2_000_000_000), Some(0));
        p.wall_time = None;
        assert_eq!(p.cpu_wait_of(600_000_000), None);
    }
}
