//! The shadow stack: what each probe does to the open frames (enter, exit, tail calls,
//! exceptions unwinding to a catching frame, the end of the run). Closing a frame is the
//! accounting of [`super::totals`].

use super::{Collector, NO_TOKEN, ROOT};
use crate::profile::context_tree::ROOT_NODE;

#[derive(Debug, Clone, Copy)]
pub(super) struct Frame {
    pub(super) id: u32,
    /// The frame token the probes gave it, if it catches (see [`crate::run::time::probe_log`]).
    pub(super) token: u32,
    pub(super) edge: u32,
    /// Its node in the calling-context tree.
    pub(super) node: u32,
    pub(super) start: u64,
    /// Raw time (overhead not subtracted) of the calls this frame made.
    pub(super) children: u64,
    /// Inclusive time (overhead subtracted) of the calls this frame made.
    pub(super) children_inclusive: i64,
    /// This frame was entered by a tail call: closing it closes its caller too.
    pub(super) closes_parent: bool,
    /// This frame announced a tail call; the next frame entered replaces it.
    pub(super) tail_pending: bool,
    /// Calls this frame made.
    pub(super) child_calls: u64,
    /// Calls this frame made to functions counted, not timed.
    pub(super) untimed_calls: u64,
    /// Go modules: the goroutine (its `g`) the frame runs in.
    pub(super) g: u32,
    /// Go modules: raw time of the frame's earlier stretches, before its goroutine was
    /// switched out (its current stretch started at `start`).
    pub(super) elapsed: u64,
    /// Go modules: the frame was re-entered after a switch; the frame below it on the
    /// stack is the scheduler's, its caller is parked (see [`super::go`]).
    pub(super) resumed: bool,
    /// Go modules: how many of its goroutine's frames are outside it.
    pub(super) depth: u32,
    /// With a call trace: when it started on the trace's clock (see [`super::trace`]).
    pub(super) trace_start: u64,
}

impl Collector {
    /// [`Collector::enter_at`] for a catching function whose frame token was chosen by the
    /// probes (see [`crate::run::time::probe_log`]).
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

    /// [`Collector::enter`] at a given time. In a Go module the id may carry
    /// [`wprof_agent::GoTimeFlags::REENTRY`].
    pub fn enter_at(&mut self, id: u32, now: u64) {
        if self.go.is_some() {
            self.go_enter_at(id, now);
            return;
        }
        self.enter_counted_at(id, 1, now);
    }

    /// [`Collector::enter_at`] for a frame that stands for `calls` activations: a calling
    /// context the module counted itself, replayed once (see [`crate::run::inline::tree`]).
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
        let g = self.go.as_ref().map_or(0, |go| go.running);
        let depth = match self.stack.last() {
            Some(top) if top.g == g => top.depth + 1,
            _ => 0,
        };
        // A site announced for a call that entered no probed function (an import reached
        // through a table) is stale: never give it to an outermost entry.
        let site = self.pending_site.take().filter(|_| caller != ROOT);
        let edge = self.edge(caller, id, site);
        let trace_start = self.trace_entered(now);
        let f = &mut self.functions[id as usize];
        f.calls += calls;
        f.active += 1;
        let e = &mut self.edges[edge as usize];
        e.calls += calls;
        e.active += 1;
        self.stack.push(Frame {
            id,
            edge,
            node,
            start: now,
            children: 0,
            children_inclusive: 0,
            closes_parent,
            tail_pending: false,
            token: NO_TOKEN,
            child_calls: 0,
            untimed_calls: 0,
            g,
            elapsed: 0,
            resumed: false,
            depth,
            trace_start,
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
        true
    }

    /// Function `id` was called and is counted, not timed (time mode: a short function):
    /// one call on the function, its edge from the running frame and its context under
    /// it, no time; its time is the running frame's. After an announced tail call it is
    /// counted under the announcing frame, as any callee of a tail call is, and that frame
    /// (with the tail chain it ends) closes at `now`: the callee's own few instructions
    /// are the next frame's.
    pub fn called_at(&mut self, id: u32, now: u64) {
        self.called_times_at(id, 1, now);
    }

    /// [`Collector::called_at`] for `calls` calls of `id` in a row from the running frame
    /// (the probe log folds them into one event).
    pub fn called_times_at(&mut self, id: u32, calls: u64, now: u64) {
        self.ensure(id);
        let (caller, parent_node, tail) = match self.stack.last_mut() {
            Some(top) => {
                top.untimed_calls += calls;
                (top.id, top.node, std::mem::take(&mut top.tail_pending))
            }
            None => (ROOT, ROOT_NODE, false),
        };
        let node = self.contexts.enter_counted(parent_node, id, calls);
        self.contexts.close(node, 0, 0);
        let site = self.pending_site.take().filter(|_| caller != ROOT);
        let edge = self.edge(caller, id, site);
        self.edges[edge as usize].calls += calls;
        let f = &mut self.functions[id as usize];
        f.calls += calls;
        f.untimed_calls += calls;
        self.trace_called(calls);
        if tail {
            self.last = now;
            while self.close_top(now) {}
        }
    }

    /// [`Collector::exit`] at a given time. In a Go module the id may carry
    /// [`wprof_agent::GoTimeFlags::UNWINDING`].
    pub fn exit_at(&mut self, id: u32, now: u64) {
        if self.go.is_some() && self.go_unwind_at(id, now) {
            return;
        }
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

    /// Closes every open frame (the program ended, trapped or exited), and in a Go module
    /// the frames of goroutines still switched out.
    pub fn finish_at(&mut self, now: u64) {
        while !self.stack.is_empty() {
            self.close_top(now);
        }
        self.go_finish(now);
    }
}
