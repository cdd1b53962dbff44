//! Time mode: the short functions' share of their callers' exact self time, from the
//! program-counter ticks taken among the events (see [`crate::run::time::ticks`]).
//!
//! A tick whose program counter is in the function of the frame on top counts for that
//! frame's context; one in a short function (counted, not timed) that the frame called
//! counts for that callee's context under it. When the run ends, each context's self time
//! is shared between it and those callees in proportion to its ticks. Only self time
//! moves, from a context to its leaf children: inclusive times above stay as they were, the
//! sum of self times stays the total, and calls stay exact. A context without ticks keeps
//! its time, as before.

use std::collections::HashMap;

use super::Collector;
use crate::run::code::map::Running;

/// Ticks that landed in one context's frames.
#[derive(Debug, Clone, Default)]
pub(super) struct ContextTicks {
    /// In the context's own function.
    own: u64,
    /// In a short callee, by the callee's context node.
    short: Vec<(u32, u64)>,
}

/// What the ticks of a run came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampledShare {
    /// Ticks taken among the events.
    pub ticks: u64,
    /// Of those, in a context's own function or one of its short callees (the ones that
    /// share time).
    pub placed: u64,
    /// Ticks overwritten before they were read.
    pub lost: u64,
    /// Picoseconds moved to short functions.
    pub moved_ps: u64,
    /// What one tick cost, in picoseconds (measured once per run).
    pub cost_ps: u64,
    /// How many times the timer stopped while the program's thread waited.
    pub pauses: u64,
}

impl Collector {
    /// A tick, taken now among the events: `running` is what the program counter said;
    /// it cost the thread `cost_ps`, taken out of every later reading.
    pub fn tick(&mut self, running: Running, cost_ps: u64) {
        self.sampled.ticks += 1;
        self.sampled.cost_ps = cost_ps;
        let Some(top) = self.stack.last() else {
            return;
        };
        let Running::Function(id) = running else {
            return;
        };
        let (node, own) = (top.node, top.id == id);
        let short = !own
            && self
                .functions
                .get(id as usize)
                .is_some_and(|f| f.untimed_calls > 0);
        let child = match short {
            true => match self.contexts.child(node, id) {
                Some(child) => Some(child),
                None => return,
            },
            false if own => None,
            false => return,
        };
        self.sampled.placed += 1;
        let counts = self.ticks.entry(node).or_default();
        match child {
            None => counts.own += 1,
            Some(child) => match counts.short.iter_mut().find(|(c, _)| *c == child) {
                Some((_, n)) => *n += 1,
                None => counts.short.push((child, 1)),
            },
        }
    }

    /// What the ticks so far cost, taken out of every reading after them.
    pub fn ticks_excluded(&self) -> u64 {
        self.sampled.ticks * self.sampled.cost_ps
    }

    /// At the end: ticks the handler overwrote before the collector read them, and how
    /// many times the timer stopped while the program waited.
    pub fn ticks_ended(&mut self, lost: u64, pauses: u64) {
        self.sampled.lost += lost;
        self.sampled.pauses += pauses;
    }

    /// What the ticks came to (after [`Collector::share_sampled`]).
    pub fn sampled(&self) -> SampledShare {
        self.sampled
    }

    /// Shares each context's self time with its short callees in proportion to its ticks
    /// (see the module docs). Called once, when every frame is closed.
    pub fn share_sampled(&mut self) {
        let ticks = std::mem::take(&mut self.ticks);
        if ticks.is_empty() {
            return;
        }
        // Edges by (caller, callee): a callee's share goes to them by their calls.
        let mut edges: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
        for (i, e) in self.edges.iter().enumerate() {
            edges.entry((e.caller, e.callee)).or_default().push(i);
        }
        let mut nodes: Vec<_> = ticks.into_iter().collect();
        nodes.sort_unstable_by_key(|(node, _)| *node);
        for (node, counts) in nodes {
            let total = counts.own + counts.short.iter().map(|(_, n)| n).sum::<u64>();
            let self_time = self.contexts.nodes()[node as usize].self_time.max(0) as u128;
            if total == 0 || self_time == 0 {
                continue;
            }
            let caller = self.contexts.nodes()[node as usize].function;
            for (child, n) in counts.short {
                // Whole quanta, so that every figure stays a whole number of them.
                let share = self_time * u128::from(n) / u128::from(total);
                let amount = (share as u64 / self.quantum * self.quantum) as i64;
                if amount == 0 {
                    continue;
                }
                let callee = self.contexts.nodes()[child as usize].function;
                self.contexts.move_self(node, child, amount);
                self.functions[caller as usize].self_time -= amount;
                let f = &mut self.functions[callee as usize];
                f.self_time += amount;
                f.inclusive += amount;
                self.sampled.moved_ps += amount as u64;
                if let Some(along) = edges.get(&(caller, callee)) {
                    let calls: u64 = along.iter().map(|&e| self.edges[e].calls).sum();
                    let mut left = amount;
                    for (k, &e) in along.iter().enumerate() {
                        let part = if k + 1 == along.len() || calls == 0 {
                            left
                        } else {
                            let part = i128::from(amount) * i128::from(self.edges[e].calls)
                                / i128::from(calls);
                            (part as i64) / self.quantum as i64 * self.quantum as i64
                        };
                        self.edges[e].inclusive += part;
                        left -= part;
                    }
                }
            }
        }
    }
}
