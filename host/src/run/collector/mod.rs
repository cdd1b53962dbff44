//! The collector behind the probes: a shadow stack and per-function, per-edge counters.
//!
//! # Accuracy
//!
//! - Calls are exact: one per `enter`.
//! - Self time of a frame is its inclusive time minus the inclusive time of the frames it
//!   called; an import's frame holds the time spent in the host, so that time is never a
//!   caller's self time.
//! - Inclusive time of a function counts each outermost activation once: with recursion,
//!   only the frame that has no other activation of the same function below it adds its
//!   time. Edges (caller -> callee) follow the same rule per edge.
//! - A tail call (`tail(id)` just before the callee's `enter`) keeps the caller's frame
//!   open; it closes when the callee's closes.
//! - An `exit` whose frame is not the top (frames skipped by an exception) closes every
//!   frame above it at the same moment. An `exit` with no matching frame is counted in
//!   [`Collector::unmatched_exits`] and otherwise ignored.
//!
//! - A function that catches exceptions enters with [`Collector::enter_with_token_at`],
//!   the probes giving its frame a token; when it catches,
//!   [`Collector::unwind_to_token_at`] closes every frame above that exact activation,
//!   recursion included.
//!
//! "Time" is whatever the probes report: picoseconds of [`crate::run::clock`] in time mode. In
//! the inline modes the module counts calls itself and the collector is fed by replaying
//! its calling-context tree (see [`crate::run::inline::tree`]), in instructions (cost mode) or
//! sampled picoseconds (sample mode). [`Collector::last`] is the latest value seen.

use std::collections::HashMap;

use crate::profile::context_tree::ContextTree;
use crate::profile::HostFigures;

/// The caller of the outermost frames.
pub const ROOT: u32 = u32::MAX;

/// A frame without a token.
const NO_TOKEN: u32 = u32::MAX;

/// Time mode's collector unit is the picosecond.
pub const PS_PER_NS: u64 = 1000;

mod allocs;
mod go;
mod sampled;
mod stack;
mod totals;
mod trace;

pub use sampled::SampledShare;
use stack::Frame;
pub use totals::{EdgeTotals, FunctionTotals, ProbeOverhead};
pub use trace::Tracer;

/// The runtime state behind the probes of one run.
#[derive(Debug)]
pub struct Collector {
    functions: Vec<FunctionTotals>,
    edges: Vec<EdgeTotals>,
    edge_index: HashMap<(u32, u32, u32), u32>,
    /// The call site announced for the next `enter`.
    pending_site: Option<u32>,
    /// Per callee, the last edge used to reach it: most callees have one hot caller.
    last_edge: Vec<u32>,
    stack: Vec<Frame>,
    root_inclusive: i64,
    unmatched_exits: u64,
    last: u64,
    contexts: ContextTree,
    overhead: ProbeOverhead,
    /// Self times are whole multiples of this (1000: whole nanoseconds from picoseconds),
    /// the remainder carried to the next frame that closes, so that the profile's rounded
    /// figures add up exactly.
    quantum: u64,
    /// The remainder not yet charged (below `quantum`).
    carry: u64,
    /// Picoseconds of wprof's own work inside the run excluded from every time (see
    /// [`crate::run::time::probe_log`]).
    excluded: u64,
    /// Inline modes with call sites: per function id, the offsets of its call
    /// instructions (call site `k` of the module's tree is at index `k`).
    call_site_offsets: Option<HashMap<u32, Vec<u32>>>,
    /// A Go module in time mode: goroutines' frames switched out (see [`go`]).
    go: Option<Box<go::GoState>>,
    /// The host's figures of the imports' contexts, by context node (see
    /// [`Collector::add_host`]).
    host: HashMap<u32, HostFigures>,
    /// Allocation profiling (see [`allocs`]).
    allocs: allocs::AllocContexts,
    /// Time mode with `--trace`: the calls as they end (see [`trace`]).
    trace: Option<Box<Tracer>>,
    /// Time mode: program-counter ticks by the context node on top (see [`sampled`]).
    ticks: HashMap<u32, sampled::ContextTicks>,
    sampled: SampledShare,
}

impl Collector {
    /// A collector for a module with `functions` functions (ids `0..functions`).
    pub fn new(functions: usize) -> Self {
        Self {
            functions: vec![FunctionTotals::default(); functions],
            edges: Vec::new(),
            edge_index: HashMap::new(),
            pending_site: None,
            last_edge: vec![u32::MAX; functions],
            stack: Vec::with_capacity(1024),
            root_inclusive: 0,
            unmatched_exits: 0,
            last: 0,
            contexts: ContextTree::new(),
            overhead: ProbeOverhead::default(),
            quantum: 1,
            carry: 0,
            excluded: 0,
            call_site_offsets: None,
            go: None,
            host: HashMap::new(),
            allocs: Default::default(),
            trace: None,
            ticks: HashMap::new(),
            sampled: SampledShare::default(),
        }
    }

    /// An empty collector configured as this one (its quantum, probe overhead and call
    /// site offsets), for another thread of the same program; without a trace and Go's
    /// goroutine state, which only the first thread keeps.
    pub fn fresh_copy(&self) -> Self {
        let mut copy = Collector::new(self.functions.len());
        copy.quantum = self.quantum;
        copy.overhead = self.overhead;
        copy.call_site_offsets = self.call_site_offsets.clone();
        copy
    }

    /// Inline modes: splits edges by call site, `offsets` giving each function's call
    /// instruction offsets in order.
    pub fn with_call_site_offsets(mut self, offsets: HashMap<u32, Vec<u32>>) -> Self {
        self.call_site_offsets = Some(offsets);
        self
    }

    /// Takes the call site offsets given to [`Collector::with_call_site_offsets`] (read
    /// once, when the module's tree is replayed).
    pub fn take_call_site_offsets(&mut self) -> Option<HashMap<u32, Vec<u32>>> {
        self.call_site_offsets.take()
    }

    /// Records `ps` picoseconds of wprof's own work that the times exclude.
    pub fn add_excluded(&mut self, ps: u64) {
        self.excluded += ps;
    }

    /// Picoseconds of wprof's own work that the times exclude.
    pub fn excluded(&self) -> u64 {
        self.excluded
    }

    /// Subtracts `overhead` from every frame from now on.
    pub fn with_overhead(mut self, overhead: ProbeOverhead) -> Self {
        self.overhead = overhead;
        self
    }

    /// Charges self times in whole multiples of `quantum` (see the field); time-measuring
    /// modes use [`PS_PER_NS`], so that every total is a whole number of nanoseconds.
    pub fn with_quantum(mut self, quantum: u64) -> Self {
        self.quantum = quantum.max(1);
        self
    }

    /// The overhead being subtracted.
    pub fn overhead(&self) -> ProbeOverhead {
        self.overhead
    }

    /// Adds what the host did during calls to import `id` to the context of the frame on
    /// top, if it is that import's (a call the probes bracketed); else the figures belong
    /// to no context (the import's own totals, kept by its wrapper, still hold them).
    pub fn add_host(&mut self, id: u32, figures: &HostFigures) {
        if let Some(top) = self.stack.last().filter(|f| f.id == id) {
            self.host.entry(top.node).or_default().add(figures);
        }
    }

    /// The host's figures of context `node`, if it is an import's that ran.
    pub fn host_at(&self, node: u32) -> Option<HostFigures> {
        self.host.get(&node).copied()
    }

    /// The latest time (or cost) a probe reported.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Totals per function id (functions never called have `calls == 0`).
    pub fn functions(&self) -> &[FunctionTotals] {
        &self.functions
    }

    /// Totals per edge, in order of first call.
    pub fn edges(&self) -> &[EdgeTotals] {
        &self.edges
    }

    /// The calling-context tree.
    pub fn contexts(&self) -> &ContextTree {
        &self.contexts
    }

    /// Time in all outermost frames.
    pub fn root_inclusive(&self) -> i64 {
        self.root_inclusive
    }

    /// Exits that matched no open frame.
    pub fn unmatched_exits(&self) -> u64 {
        self.unmatched_exits
    }

    /// Frames still open.
    pub fn depth(&self) -> usize {
        self.stack.len()
    }
}

#[cfg(test)]
mod tests;
