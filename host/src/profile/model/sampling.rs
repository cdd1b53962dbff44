//! The profile's records of how its time was sampled: stack and sample mode's period and
//! readings, what stack mode's walks could not place, and time mode's program-counter
//! ticks.

use serde::{Deserialize, Serialize};

use super::host_and_allocations::is_zero;

/// Time mode: the program-counter ticks of a run (see [`super::Profile::ticks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicksRecord {
    /// Ticks read, each at its place among the probes' events.
    pub taken: u64,
    /// Of those, in a timed activation's own function or a short function it called (the
    /// ones that share time; the rest were in the probes, the host or the engine).
    pub placed: u64,
    /// Ticks the timer took but a later one overwrote before they were read.
    pub lost: u64,
    /// What one tick cost the thread it interrupted, measured when the ticks started and
    /// taken out of the times (part of `excluded_ns`).
    pub cost_ns: u64,
    /// How many times the timer stopped while the program's thread waited (used under a
    /// quarter of the CPU), to start again when it ran.
    pub pauses: u64,
}

/// Sample mode: how the time of a profile was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplingRecord {
    /// The period asked for, in nanoseconds (readings can come later on a busy machine).
    pub period_ns: u64,
    /// When the default period stretched as the program ran on (see `wprof run
    /// --sample-period-us`): the longest it reached, in nanoseconds; else absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub longest_period_ns: u64,
    /// The samplers' readings (every thread's): the intervals the time was split into, each
    /// among the ticks in it (or, with none, the calling context read at its end).
    pub readings: u64,
    /// Ticks of the program threads' timers, each locating its thread by its program
    /// counter and calling context.
    #[serde(default)]
    pub answered: u64,
    /// Time the program spent in wprof's own code (the probes' instructions and the node
    /// finder), in nanoseconds: charged to no function, since the program without probes
    /// never spends it.
    #[serde(default)]
    pub probe_ns: u64,
    /// Live probes: time during which every switch was off, in nanoseconds. Not sampled
    /// (the timer sleeps) and charged to no function.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub off_ns: u64,
    /// Stack mode: what the walks of the stacks could not place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StackWalkRecord>,
}

/// Stack mode: the ticks and time its walks could not give a function, every thread's
/// together (see `wprof run --mode stack`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackWalkRecord {
    /// Time of ticks that found none of the module's functions on the stack (the host
    /// before or after the program, or a walk stopped by code without frame pointers), in
    /// nanoseconds: charged to no function.
    pub outside_ns: u64,
    /// CPU time that threads blocked in the host used between two ticks that both found
    /// them blocked, in nanoseconds: taking the ticks, charged to no function.
    pub interrupting_ns: u64,
    /// CPU time of ticks at the counters' own instructions (the default mode's), left out
    /// of every function, in nanoseconds: the program would not spend it uncounted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub counters_ns: u64,
    /// Ticks read too late (a later tick took their slot): their time went to the next
    /// tick read.
    pub lost: u64,
    /// Stacks deeper than the walk follows (192 frames): their outermost functions are
    /// missing, so their contexts start below the program's entry.
    pub truncated: u64,
    /// Each function's calls were counted (an entry counter in each of the module's
    /// functions; WASI's by the host in each thread): `calls` of functions
    /// are exact, those of contexts 0 (not counted).
    #[serde(default)]
    pub function_calls: bool,
    /// Each edge's calls were counted as well (a counter per direct call site's edge, a
    /// table for calls through a table or a reference): `calls` of edges are exact.
    #[serde(default)]
    pub edge_calls: bool,
    /// Calls through a table or a reference whose edge found the module's table of them
    /// full: counted by their callee, on the root's edge.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_calls_lost: u64,
}
