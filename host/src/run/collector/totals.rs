//! The accounting: per-function, per-edge and per-context totals, charged when a frame
//! closes, with the probes' own cost subtracted (see [`crate::run::time::calibrate`]) so that no
//! estimate makes a time negative or self time exceed inclusive time.

use super::stack::Frame;
use super::Collector;

/// What the probes themselves cost per activation, in the collector's unit (picoseconds in
/// time mode); subtracted from every frame as it closes (see [`crate::run::time::calibrate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeOverhead {
    /// Charged to the activation itself: from its entry clock read to its first
    /// instruction, and from its last instruction to its exit clock read.
    pub inside: u64,
    /// Charged to the caller, per call it makes: from the call to the callee's entry clock
    /// read, and from the callee's exit clock read back to the caller.
    pub outside: u64,
    /// Charged to the caller, per call it makes to a function counted, not timed (see
    /// [`wprof_agent::ProbePlan::short_max`]): the `called` probe.
    #[serde(default)]
    pub called: u64,
}

/// Totals for one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionTotals {
    /// Activations.
    pub calls: u64,
    /// Time in the function itself (never negative: see [`Collector::close_top`]).
    pub self_time: i64,
    /// Time in the function and everything it called, outermost activations only.
    pub inclusive: i64,
    /// Smallest self time of one activation.
    pub min_self: u64,
    /// Largest self time of one activation.
    pub max_self: u64,
    /// Of [`FunctionTotals::calls`], those counted but not timed (a short function in time
    /// mode): their time is their caller's.
    pub untimed_calls: u64,
    pub(super) active: u32,
}

impl Default for FunctionTotals {
    fn default() -> Self {
        Self {
            calls: 0,
            self_time: 0,
            inclusive: 0,
            min_self: u64::MAX,
            max_self: 0,
            untimed_calls: 0,
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
    pub(super) active: u32,
}

impl Collector {
    /// Adds `calls` to function `id`'s calls and nothing else: calls counted per function
    /// only (stack mode's entry counters), which no edge or context knows of.
    pub fn add_function_calls(&mut self, id: u32, calls: u64) {
        self.ensure(id);
        self.functions[id as usize].calls += calls;
    }

    /// Adds `calls` to the edge from `caller` (or [`super::ROOT`]) to `callee` and nothing
    /// else: calls counted per edge only (stack mode's edge counters), which no context
    /// knows of. The edge is made if no tick saw it.
    pub fn add_edge_calls(&mut self, caller: u32, callee: u32, calls: u64) {
        self.ensure(callee);
        if caller != super::ROOT {
            self.ensure(caller);
        }
        let edge = self.edge(caller, callee, None);
        self.edges[edge as usize].calls += calls;
    }

    pub(super) fn ensure(&mut self, id: u32) {
        let needed = id as usize + 1;
        if self.functions.len() < needed {
            self.functions.resize(needed, FunctionTotals::default());
            self.last_edge.resize(needed, u32::MAX);
        }
    }

    pub(super) fn edge(&mut self, caller: u32, callee: u32, site: Option<u32>) -> u32 {
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

    /// Closes the top frame; returns whether its caller must close with it.
    pub(super) fn close_top(&mut self, now: u64) -> bool {
        let Some(frame) = self.stack.pop() else {
            return false;
        };
        let stretch = now.saturating_sub(frame.start);
        let closes_parent = frame.closes_parent;
        let (inclusive, to_caller) = self.account(&frame, now);
        if let Some(inclusive) = to_caller {
            // A re-entered Go frame: its caller is parked, the scheduler's frame below it
            // only saw this stretch of it.
            if let Some(below) = self.stack.last_mut() {
                below.children += stretch;
            }
            self.charge_parked_caller(&frame, inclusive);
            return closes_parent;
        }
        match self.stack.last_mut() {
            Some(parent) => {
                parent.children += stretch;
                parent.children_inclusive += inclusive;
                parent.child_calls += 1;
            }
            None => {
                self.root_inclusive += inclusive;
                self.contexts.add_root(inclusive);
            }
        }
        closes_parent
    }

    /// Charges a closing frame's self and inclusive time (stretches before its goroutine
    /// was switched out included) to its function, edge and context; returns its inclusive
    /// time, and again when it goes to a parked caller instead of the frame below.
    pub(super) fn account(&mut self, frame: &Frame, now: u64) -> (i64, Option<i64>) {
        self.trace_closed(frame, now);
        let raw_inclusive = frame.elapsed + now.saturating_sub(frame.start);
        let o = self.overhead;
        // Self time is the frame's raw time less its callees' raw time and the probes'
        // estimated cost, never below zero; inclusive time is self time plus the callees'
        // inclusive times. An estimate larger than what a frame measured thus costs it
        // nothing more than its own time, and self <= inclusive, the sum of self times
        // equal to the total and every edge within its callee hold exactly.
        let exact = (raw_inclusive as i64
            - frame.children as i64
            - (o.inside + frame.child_calls * o.outside + frame.untimed_calls * o.called) as i64)
            .max(0) as u64
            + self.carry;
        self.carry = exact % self.quantum;
        let self_time = (exact - self.carry) as i64;
        let inclusive = self_time + frame.children_inclusive;
        // A re-entered Go frame with an outer activation still switched out (recursion
        // across a switch): that one's inclusive time holds this one's.
        let outer = if frame.resumed {
            self.parked_outer(frame)
        } else {
            Default::default()
        };
        let f = &mut self.functions[frame.id as usize];
        f.self_time += self_time;
        f.min_self = f.min_self.min(self_time as u64);
        f.max_self = f.max_self.max(self_time as u64);
        f.active -= 1;
        if f.active == 0 && !outer.function {
            f.inclusive += inclusive;
        }
        let e = &mut self.edges[frame.edge as usize];
        e.active -= 1;
        if e.active == 0 && !outer.edge {
            e.inclusive += inclusive;
        }
        if outer.node {
            self.contexts.close_inner(frame.node, self_time);
        } else {
            self.contexts.close(frame.node, self_time, inclusive);
        }
        (inclusive, outer.caller.then_some(inclusive))
    }
}
