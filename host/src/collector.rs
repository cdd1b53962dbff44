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
//! "Time" is whatever the probes report: picoseconds of [`crate::clock`] in time mode. In
//! the inline modes the module counts calls itself and the collector is fed by replaying
//! its calling-context tree (see [`crate::inline_tree`]), in instructions (cost mode) or
//! sampled picoseconds (sample mode). [`Collector::last`] is the latest value seen.

use std::collections::HashMap;

use crate::context_tree::{ContextTree, ROOT_NODE};

/// The caller of the outermost frames.
pub const ROOT: u32 = u32::MAX;

/// A frame without a token.
const NO_TOKEN: u32 = u32::MAX;

/// Time mode's collector unit is the picosecond.
pub const PS_PER_NS: u64 = 1000;

/// What the probes themselves cost per activation, in the collector's unit (picoseconds in
/// time mode); subtracted from every frame as it closes (see [`crate::calibrate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeOverhead {
    /// Charged to the activation itself: from its entry clock read to its first
    /// instruction, and from its last instruction to its exit clock read.
    pub inside: u64,
    /// Charged to the caller, per call it makes: from the call to the callee's entry clock
    /// read, and from the callee's exit clock read back to the caller.
    pub outside: u64,
}

/// Totals for one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionTotals {
    /// Activations.
    pub calls: u64,
    /// Time in the function itself. Signed: after overhead subtraction an estimate can dip
    /// below zero, and keeping the sign keeps every total consistent (profiles clamp).
    pub self_time: i64,
    /// Time in the function and everything it called, outermost activations only.
    pub inclusive: i64,
    /// Smallest self time of one activation.
    pub min_self: u64,
    /// Largest self time of one activation.
    pub max_self: u64,
    active: u32,
}

impl Default for FunctionTotals {
    fn default() -> Self {
        Self {
            calls: 0,
            self_time: 0,
            inclusive: 0,
            min_self: u64::MAX,
            max_self: 0,
            active: 0,
        }
    }
}

/// Totals for one caller -> callee edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeTotals {
    /// The calling function, or [`ROOT`].
    pub caller: u32,
    /// The called function.
    pub callee: u32,
    /// The call site (offset in the caller's body), when call sites are reported.
    pub site: Option<u32>,
    /// Calls along this edge.
    pub calls: u64,
    /// Inclusive time of the callee when called from this caller (outermost activations of
    /// the edge only).
    pub inclusive: i64,
    active: u32,
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    id: u32,
    /// The frame token the probes gave it, if it catches (see [`crate::probe_log`]).
    token: u32,
    edge: u32,
    /// Its node in the calling-context tree.
    node: u32,
    start: u64,
    children: u64,
    /// This frame was entered by a tail call: closing it closes its caller too.
    closes_parent: bool,
    /// This frame announced a tail call; the next frame entered replaces it.
    tail_pending: bool,
    /// Calls this frame made.
    child_calls: u64,
    /// The collector's `enters` when this frame was entered (itself included).
    enters_at_entry: u64,
}

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
    /// Frames entered so far.
    enters: u64,
    overhead: ProbeOverhead,
    /// Picoseconds of wprof's own work inside the run excluded from every time (see
    /// [`crate::probe_log`]).
    excluded: u64,
    /// Inline modes with call sites: per function id, the offsets of its call
    /// instructions (call site `k` of the module's tree is at index `k`).
    call_site_offsets: Option<HashMap<u32, Vec<u32>>>,
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
            enters: 0,
            overhead: ProbeOverhead::default(),
            excluded: 0,
            call_site_offsets: None,
        }
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

    /// [`Collector::enter_at`] for a catching function whose frame token was chosen by the
    /// probes (see [`crate::probe_log`]).
    pub fn enter_with_token_at(&mut self, id: u32, token: u32, now: u64) {
        self.enter_at(id, now);
        if let Some(top) = self.stack.last_mut() {
            top.token = token;
        }
    }

    /// An exception was caught in the frame the probes know as `token`: closes every
    /// frame above it. A token no open frame holds is ignored.
    pub fn unwind_to_token_at(&mut self, token: u32, now: u64) {
        self.last = now;
        if let Some(at) = self.stack.iter().rposition(|f| f.token == token) {
            while self.stack.len() > at + 1 {
                self.close_top(now);
            }
        }
    }

    /// Subtracts `overhead` from every frame from now on.
    pub fn with_overhead(mut self, overhead: ProbeOverhead) -> Self {
        self.overhead = overhead;
        self
    }

    /// The overhead being subtracted.
    pub fn overhead(&self) -> ProbeOverhead {
        self.overhead
    }

    /// The latest time (or cost) a probe reported.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Probe: the next call is made from `offset` in the caller's body.
    pub fn site(&mut self, offset: u32) {
        self.pending_site = Some(offset);
    }

    /// Probe: function `id` is about to tail-call.
    pub fn tail(&mut self, id: u32) {
        if let Some(top) = self.stack.last_mut() {
            if top.id == id {
                top.tail_pending = true;
            }
        }
    }

    fn ensure(&mut self, id: u32) {
        let needed = id as usize + 1;
        if self.functions.len() < needed {
            self.functions.resize(needed, FunctionTotals::default());
            self.last_edge.resize(needed, u32::MAX);
        }
    }

    fn edge(&mut self, caller: u32, callee: u32, site: Option<u32>) -> u32 {
        let last = self.last_edge[callee as usize];
        if let Some(e) = self.edges.get(last as usize) {
            if e.caller == caller && e.site == site {
                return last;
            }
        }
        let next = self.edges.len() as u32;
        let key = (caller, callee, site.unwrap_or(u32::MAX));
        let edge = *self.edge_index.entry(key).or_insert(next);
        if edge == next {
            self.edges.push(EdgeTotals {
                caller,
                callee,
                site,
                calls: 0,
                inclusive: 0,
                active: 0,
            });
        }
        self.last_edge[callee as usize] = edge;
        edge
    }

    /// [`Collector::enter`] at a given time.
    pub fn enter_at(&mut self, id: u32, now: u64) {
        self.enter_counted_at(id, 1, now);
    }

    /// [`Collector::enter_at`] for a frame that stands for `calls` activations: a calling
    /// context the module counted itself, replayed once (see [`crate::inline_tree`]).
    pub fn enter_counted_at(&mut self, id: u32, calls: u64, now: u64) {
        self.last = now;
        self.ensure(id);
        if self.reenter_tail_chain(id, calls, now) {
            return;
        }
        let mut closes_parent = false;
        let (caller, parent_node) = match self.stack.last_mut() {
            Some(top) => {
                closes_parent = std::mem::take(&mut top.tail_pending);
                (top.id, top.node)
            }
            None => (ROOT, ROOT_NODE),
        };
        let node = self.contexts.enter_counted(parent_node, id, calls);
        // A site announced for a call that entered no probed function (an import reached
        // through a table) is stale: never give it to an outermost entry.
        let site = self.pending_site.take().filter(|_| caller != ROOT);
        let edge = self.edge(caller, id, site);
        let f = &mut self.functions[id as usize];
        f.calls += calls;
        f.active += 1;
        let e = &mut self.edges[edge as usize];
        e.calls += calls;
        e.active += 1;
        self.enters += calls;
        self.stack.push(Frame {
            id,
            edge,
            node,
            start: now,
            children: 0,
            closes_parent,
            tail_pending: false,
            token: NO_TOKEN,
            child_calls: 0,
            enters_at_entry: self.enters,
        });
    }

    /// A tail call to a function already open in the current chain of tail calls (a loop
    /// made of `return_call`s: `f` calling itself, or `a` and `b` calling each other)
    /// re-enters that frame instead of opening one more: the frames above it end now, and
    /// the call is counted (function, edge, context) on the frame already there. Without
    /// this, a loop of tail calls would keep one open frame per iteration, and a program
    /// that runs in constant memory under wasmtime would grow without bound under wprof.
    fn reenter_tail_chain(&mut self, id: u32, calls: u64, now: u64) -> bool {
        let Some(top) = self.stack.last() else {
            return false;
        };
        if !top.tail_pending {
            return false;
        }
        let caller = top.id;
        // The chain: the frames entered by tail calls, and the frame that started it.
        let mut at = None;
        for (i, frame) in self.stack.iter().enumerate().rev() {
            if frame.id == id {
                at = Some(i);
                break;
            }
            if !frame.closes_parent {
                break;
            }
        }
        let Some(at) = at else {
            return false;
        };
        let site = self.pending_site.take();
        while self.stack.len() > at + 1 {
            // Each ends as if it returned now; the frame below stays open.
            self.close_top(now);
        }
        let frame = &mut self.stack[at];
        frame.tail_pending = false;
        let node = frame.node;
        self.functions[id as usize].calls += calls;
        let edge = self.edge(caller, id, site);
        self.edges[edge as usize].calls += calls;
        self.contexts.count_again(node, calls);
        self.enters += calls;
        true
    }

    /// [`Collector::exit`] at a given time.
    pub fn exit_at(&mut self, id: u32, now: u64) {
        self.last = now;
        // A site announced before a call that entered no probed function is stale.
        self.pending_site = None;
        let Some(depth) = self.stack.iter().rposition(|f| f.id == id) else {
            self.unmatched_exits += 1;
            return;
        };
        while self.stack.len() > depth + 1 {
            self.close_top(now);
        }
        // Close the frame, and its tail-calling callers with it.
        while self.close_top(now) {}
    }

    /// Closes every open frame (the program ended, trapped or exited).
    pub fn finish_at(&mut self, now: u64) {
        while !self.stack.is_empty() {
            self.close_top(now);
        }
    }

    /// Closes the top frame; returns whether its caller must close with it.
    fn close_top(&mut self, now: u64) -> bool {
        let Some(frame) = self.stack.pop() else {
            return false;
        };
        let raw_inclusive = now.saturating_sub(frame.start);
        let o = self.overhead;
        let descendants = self.enters - frame.enters_at_entry;
        let inclusive =
            raw_inclusive as i64 - (o.inside + descendants * (o.inside + o.outside)) as i64;
        // Children are taken off at their raw time, so a child that ran faster than the
        // overhead estimate would leave its caller more self than inclusive time: an
        // estimate never makes self exceed inclusive.
        let self_time = (raw_inclusive as i64
            - frame.children as i64
            - (o.inside + frame.child_calls * o.outside) as i64)
            .min(inclusive.max(0));
        let self_clamped = self_time.max(0) as u64;
        let f = &mut self.functions[frame.id as usize];
        f.self_time += self_time;
        f.min_self = f.min_self.min(self_clamped);
        f.max_self = f.max_self.max(self_clamped);
        f.active -= 1;
        if f.active == 0 {
            f.inclusive += inclusive;
        }
        let e = &mut self.edges[frame.edge as usize];
        e.active -= 1;
        if e.active == 0 {
            e.inclusive += inclusive;
        }
        self.contexts.close(frame.node, self_time, inclusive);
        match self.stack.last_mut() {
            Some(parent) => {
                parent.children += raw_inclusive;
                parent.child_calls += 1;
            }
            None => {
                self.root_inclusive += inclusive;
                self.contexts.add_root(inclusive);
            }
        }
        frame.closes_parent
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
mod tests {
    use super::*;

    fn edge(c: &Collector, caller: u32, callee: u32) -> EdgeTotals {
        *c.edges()
            .iter()
            .find(|e| e.caller == caller && e.callee == callee)
            .unwrap()
    }

    #[test]
    fn nested_calls_split_self_and_inclusive() {
        let mut c = Collector::new(3);
        c.enter_at(0, 0);
        c.enter_at(1, 10);
        c.exit_at(1, 40);
        c.enter_at(2, 50);
        c.exit_at(2, 55);
        c.exit_at(0, 100);
        let f = c.functions();
        assert_eq!((f[0].calls, f[0].self_time, f[0].inclusive), (1, 65, 100));
        assert_eq!((f[1].self_time, f[1].inclusive), (30, 30));
        assert_eq!((f[2].min_self, f[2].max_self), (5, 5));
        assert_eq!(edge(&c, ROOT, 0).inclusive, 100);
        assert_eq!(edge(&c, 0, 1).calls, 1);
        assert_eq!(c.root_inclusive(), 100);
    }

    #[test]
    fn recursion_counts_outermost_activation_once() {
        let mut c = Collector::new(1);
        c.enter_at(0, 0);
        c.enter_at(0, 10);
        c.enter_at(0, 20);
        c.exit_at(0, 30);
        c.exit_at(0, 40);
        c.exit_at(0, 50);
        let f = c.functions()[0];
        assert_eq!((f.calls, f.inclusive, f.self_time), (3, 50, 50));
        // The recursive edge 0 -> 0 counts its outermost activation: 10..40.
        assert_eq!(edge(&c, 0, 0).inclusive, 30);
        assert_eq!(edge(&c, 0, 0).calls, 2);
    }

    #[test]
    fn tail_call_keeps_caller_open_until_callee_returns() {
        let mut c = Collector::new(3);
        c.enter_at(0, 0);
        c.enter_at(1, 10);
        c.tail(1);
        c.enter_at(2, 20);
        c.exit_at(2, 50); // closes 2, then 1 with it
        assert_eq!(c.depth(), 1);
        c.exit_at(0, 60);
        let f = c.functions();
        assert_eq!(f[1].inclusive, 40);
        assert_eq!(f[1].self_time, 10);
        assert_eq!(f[2].inclusive, 30);
        assert_eq!(edge(&c, 1, 2).calls, 1);
        assert_eq!(f[0].self_time, 20);
    }

    #[test]
    fn loops_of_tail_calls_reenter_their_frame_instead_of_stacking() {
        let mut c = Collector::new(4);
        let mut t = 0;
        let mut tick = || {
            t += 10;
            t
        };
        c.enter_at(0, tick());
        // 1 tail-calls itself 1000 times.
        c.enter_at(1, tick());
        for _ in 0..1000 {
            c.tail(1);
            c.enter_at(1, tick());
            assert_eq!(c.depth(), 2);
        }
        c.exit_at(1, tick());
        // 2 and 3 tail-call each other: at most one frame of each.
        c.enter_at(2, tick());
        for _ in 0..500 {
            c.tail(2);
            c.enter_at(3, tick());
            c.tail(3);
            c.enter_at(2, tick());
            assert!(c.depth() <= 3);
        }
        c.exit_at(2, tick());
        c.exit_at(0, tick());
        assert_eq!(c.depth(), 0);
        let f = c.functions();
        assert_eq!((f[1].calls, f[2].calls, f[3].calls), (1001, 501, 500));
        assert_eq!(edge(&c, 1, 1).calls, 1000);
        assert_eq!((edge(&c, 2, 3).calls, edge(&c, 3, 2).calls), (500, 500));
        let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
        assert_eq!(self_sum, c.root_inclusive());
        assert_eq!(f[0].inclusive, c.root_inclusive());
        let context_calls: u64 = c.contexts().nodes().iter().map(|n| n.calls).sum();
        assert_eq!(context_calls, 1 + 1001 + 501 + 500);
    }

    #[test]
    fn skipped_frames_close_at_the_catching_exit_and_finish_closes_all() {
        let mut c = Collector::new(3);
        c.enter_at(0, 0);
        c.enter_at(1, 10);
        c.enter_at(2, 20);
        c.exit_at(0, 40); // 2 and 1 never ran their exit probes
        assert_eq!(c.depth(), 0);
        assert_eq!(c.functions()[2].inclusive, 20);
        c.exit_at(1, 50);
        assert_eq!(c.unmatched_exits(), 1);
        c.enter_at(0, 60);
        c.enter_at(1, 70);
        c.finish_at(100);
        assert_eq!(c.depth(), 0);
        assert_eq!(c.functions()[0].inclusive, 80);
    }

    #[test]
    fn unwind_closes_down_to_the_exact_catching_activation() {
        let mut c = Collector::new(2);
        c.enter_at(0, 0);
        c.enter_with_token_at(1, 7, 10); // rec depth 1 (catches)
        c.enter_with_token_at(1, 8, 20); // rec depth 2 (does not catch this time)
        c.enter_at(1, 30); // rec depth 3, throws
        c.unwind_to_token_at(7, 50); // caught at depth 1
        assert_eq!(c.depth(), 2);
        c.exit_at(1, 60);
        c.exit_at(0, 70);
        let f = c.functions()[1];
        assert_eq!(f.calls, 3);
        assert_eq!(f.inclusive, 50);
        assert_eq!(c.unmatched_exits(), 0);
        let total: i64 = c.functions().iter().map(|f| f.self_time).sum();
        assert_eq!(total, 70);
    }

    #[test]
    fn overhead_is_subtracted_consistently() {
        let o = ProbeOverhead {
            inside: 2,
            outside: 3,
        };
        let mut c = Collector::new(3).with_overhead(o);
        // _start(0) calls f(1) twice; f calls g(2) once each time.
        c.enter_at(0, 0);
        for base in [10, 100] {
            c.enter_at(1, base);
            c.enter_at(2, base + 20);
            c.exit_at(2, base + 30);
            c.exit_at(1, base + 50);
        }
        c.exit_at(0, 200);
        let f = c.functions();
        // g: raw self 10 - inside 2.
        assert_eq!(f[2].self_time, 2 * 8);
        // f: raw self 40, minus inside 2 and one child call's outside 3.
        assert_eq!(f[1].self_time, 2 * 35);
        // f inclusive: raw 50 - inside 2 - 1 descendant × 5.
        assert_eq!(f[1].inclusive, 2 * 43);
        // _start: raw 200, minus 2, minus 4 descendants × 5.
        assert_eq!(f[0].inclusive, 178);
        let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
        assert_eq!(self_sum, c.root_inclusive());
    }

    #[test]
    fn call_sites_split_edges() {
        let mut c = Collector::new(2);
        c.enter_at(0, 0);
        for (site, t) in [(0x10, 10), (0x10, 20), (0x1c, 30)] {
            c.site(site);
            c.enter_at(1, t);
            c.exit_at(1, t + 5);
        }
        c.exit_at(0, 50);
        let sites: Vec<_> = c
            .edges()
            .iter()
            .filter(|e| e.callee == 1)
            .map(|e| (e.site, e.calls, e.inclusive))
            .collect();
        assert_eq!(sites, [(Some(0x10), 2, 10), (Some(0x1c), 1, 5)]);
        assert_eq!(c.functions()[1].calls, 3);
    }

    #[test]
    fn self_times_add_up_to_root_inclusive() {
        let mut c = Collector::new(4);
        let mut t = 0;
        let mut tick = || {
            t += 7;
            t
        };
        c.enter_at(0, tick());
        for _ in 0..3 {
            c.enter_at(1, tick());
            c.enter_at(2, tick());
            c.enter_at(1, tick());
            c.exit_at(1, tick());
            c.exit_at(2, tick());
            c.enter_at(3, tick());
            c.exit_at(3, tick());
            c.exit_at(1, tick());
        }
        c.exit_at(0, tick());
        let total: i64 = c.functions().iter().map(|f| f.self_time).sum();
        assert_eq!(total, c.root_inclusive());
    }
}
#[cfg(test)]
mod overhead_recursion_tests {
    use super::*;

    #[test]
    fn recursion_with_overhead_stays_consistent() {
        let o = ProbeOverhead {
            inside: 38,
            outside: 43,
        };
        let mut c = Collector::new(2).with_overhead(o);
        let mut t = 0;
        c.enter_at(0, t);
        // fib-like: 0 calls 1, which recurses as a binary tree of depth 3.
        fn rec(c: &mut Collector, t: &mut u64, depth: u32) {
            *t += 40;
            c.enter_at(1, *t);
            if depth > 0 {
                rec(c, t, depth - 1);
                rec(c, t, depth - 1);
            }
            *t += 40;
            c.exit_at(1, *t);
        }
        rec(&mut c, &mut t, 12);
        t += 10;
        c.exit_at(0, t);
        let f = c.functions();
        let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
        assert_eq!(self_sum, c.root_inclusive());
        assert_eq!(f[1].inclusive, f[1].self_time);
    }
}
