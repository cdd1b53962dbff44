//! Adaptive mode's probes on the host side: a timed activation's entry starts a frame, its
//! exit ends it (see [`wprof_agent::ContextArena::TIMER`]), and each context's timed
//! activations add up. Runs on the program's thread, inside the probes' calls.

use crate::run::clock::Clock;
use std::collections::HashMap;

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
    timers: Timers,
    cost: TimerCost,
    open: Vec<Open>,
    /// Per node address.
    times: HashMap<u32, NodeTimes>,
    /// Timed activations that never ended.
    unfinished: u64,
}

impl Stopwatch {
    /// A stopwatch reading `clock`, counting down `timers`, subtracting `cost` from what
    /// it measures.
    pub fn new(clock: Clock, timers: Timers, cost: TimerCost) -> Self {
        Stopwatch {
            clock,
            timers,
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
        self.timers.spend(frame.node);
    }

    /// Every context's timed activations, by node address, and how many never ended.
    pub fn finish(self) -> (HashMap<u32, NodeTimes>, u64) {
        (self.times, self.unfinished + self.open.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn frames_an_exception_skipped_are_unfinished_and_budgets_are_spent() {
        let memory: Box<[AtomicU64]> = (0..32).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: the box outlives the stopwatch and is never moved.
        let tree = unsafe {
            use super::super::live_tree::{LiveTree, TreeSize};
            LiveTree::new(
                memory.as_ptr().cast(),
                TreeSize::Fixed(memory.len() as u64 * 8),
            )
        };
        let timers = Timers::new(tree);
        let (a, b) = (88, 128);
        timers.arm(a, 2);
        timers.arm(b, 5);
        let mut watch = Stopwatch::new(Clock::new(), timers, TimerCost::default());
        let outer = watch.start(a);
        let inner = watch.start(b);
        let skipped = watch.start(b);
        assert_eq!((outer, inner, skipped), (1, 2, 3));
        // An exception unwound `skipped`; `inner` caught it and returns.
        watch.stop(inner);
        watch.stop(outer);
        // A token already closed, or none, changes nothing.
        watch.stop(outer);
        watch.stop(0);
        let again = watch.start(a);
        watch.stop(again);
        assert!(!timers.armed(a), "two timed activations spent a's budget");
        assert!(timers.armed(b));
        let left_open = watch.start(b);
        assert_eq!(left_open, 1);
        let (times, unfinished) = watch.finish();
        assert_eq!(unfinished, 2);
        assert_eq!(times[&a].timed, 2);
        assert_eq!(times[&b].timed, 1);
        assert!(times[&a].min_ps <= times[&a].max_ps);
        // The outer activation lasted at least as long as the inner one inside it.
        assert!(times[&a].max_ps >= times[&b].total_ps);
    }
}
