//! Adaptive mode's probes on the host side: a timed activation's entry starts a frame, its
//! exit ends it (see [`wprof_agent::TimerTable`]), and each context's timed activations add
//! up. Runs on the program's thread, inside the probes' calls.

use std::collections::HashMap;
use std::sync::Arc;

use crate::run::clock::Clock;

use super::live_tree::LiveTree;
use super::timers::Timers;

/// The timed activations of one context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTimes {
    /// Activations timed from entry to exit.
    pub timed: u64,
    /// Their total, in picoseconds.
    pub total_ps: u64,
    /// The shortest and longest, in picoseconds.
    pub min_ps: u64,
    pub max_ps: u64,
}

/// What a timer costs, in picoseconds (see [`super::calibrate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerCost {
    /// Inside the activation it times: between the start's clock reading and the
    /// function's first instruction, and between its last and the stop's reading.
    pub inside_ps: u64,
    /// Outside it: the rest of the two calls, which a timed caller's clock sees.
    pub outside_ps: u64,
}

/// A timed activation that has not ended yet.
#[derive(Debug, Clone, Copy)]
struct Open {
    node: u32,
    started_ps: u64,
    /// Timed activations that ended inside it.
    nested: u64,
}

/// Times the activations the timers select.
#[derive(Debug)]
pub struct Stopwatch {
    clock: Clock,
    timers: Arc<Timers>,
    tree: LiveTree,
    cost: TimerCost,
    open: Vec<Open>,
    /// Per node address.
    times: HashMap<u32, NodeTimes>,
    /// Timed activations that never ended.
    unfinished: u64,
}

impl Stopwatch {
    /// A stopwatch reading `clock`, spending the budgets of `timers`, finding a node's
    /// function in `tree`, subtracting `cost` from what it measures.
    pub fn new(clock: Clock, timers: Arc<Timers>, tree: LiveTree, cost: TimerCost) -> Self {
        Stopwatch {
            clock,
            timers,
            tree,
            cost,
            open: Vec::new(),
            times: HashMap::new(),
            unfinished: 0,
        }
    }

    /// An activation of the node at `node` starts: its token (never 0).
    pub fn start(&mut self, node: u32) -> u32 {
        self.open.push(Open {
            node,
            started_ps: self.clock.now_ps(),
            nested: 0,
        });
        self.open.len() as u32
    }

    /// The activation of token `token` ends; those started after it and still open were
    /// unwound by an exception and never end.
    pub fn stop(&mut self, token: u32) {
        let now = self.clock.now_ps();
        let Some(keep) = (token as usize).checked_sub(1) else {
            return;
        };
        if keep >= self.open.len() {
            return;
        }
        self.unfinished += (self.open.len() - keep - 1) as u64;
        self.open.truncate(keep + 1);
        let frame = self.open.pop().expect("kept one more than `keep`");
        // Less its own timer's cost, and the whole cost of the timers inside it.
        let timers =
            self.cost.inside_ps + frame.nested * (self.cost.inside_ps + self.cost.outside_ps);
        let elapsed = now.saturating_sub(frame.started_ps).saturating_sub(timers);
        if let Some(caller) = self.open.last_mut() {
            caller.nested += 1 + frame.nested;
        }
        let times = self.times.entry(frame.node).or_insert(NodeTimes {
            min_ps: u64::MAX,
            ..NodeTimes::default()
        });
        times.timed += 1;
        times.total_ps += elapsed;
        times.min_ps = times.min_ps.min(elapsed);
        times.max_ps = times.max_ps.max(elapsed);
        if let Some(function) = self.tree.function_of(frame.node) {
            self.timers.spend(function);
        }
    }

    /// Every context's timed activations, by node address, and how many never ended.
    pub fn finish(self) -> (HashMap<u32, NodeTimes>, u64) {
        (self.times, self.unfinished + self.open.len() as u64)
    }
}
