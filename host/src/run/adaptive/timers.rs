//! The timers of the contexts (see [`wprof_agent::ContextArena::TIMER`]): how many of a
//! node's next activations are timed, written in the node by the walker, which arms a
//! context, and counted down by the stopwatch as timed activations end, so that a context
//! is disarmed as soon as its budget is spent.

use std::sync::atomic::{AtomicU32, Ordering};

use wprof_agent::ContextArena as A;

use super::live_tree::LiveTree;

/// The timers in a running module's tree.
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    tree: LiveTree,
}

impl Timers {
    /// The timers of the nodes of `tree`.
    pub fn new(tree: LiveTree) -> Self {
        Timers { tree }
    }

    fn timer(&self, node: u32) -> Option<&AtomicU32> {
        self.tree.u32_cell(node.checked_add(A::TIMER)?)
    }

    /// Times the next `calls` activations of the context at `node` (a node read from the
    /// tree: the timer is written there), `calls` at least 1.
    pub fn arm(&self, node: u32, calls: u32) {
        if let Some(timer) = self.timer(node) {
            timer.store(calls.max(1), Ordering::Relaxed);
        }
    }

    /// Stops timing the context at `node` (activations already timed still end timed).
    pub fn disarm(&self, node: u32) {
        if let Some(timer) = self.timer(node) {
            timer.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the context at `node` is timed.
    pub fn armed(&self, node: u32) -> bool {
        self.timer(node)
            .is_some_and(|t| t.load(Ordering::Relaxed) != 0)
    }

    /// A timed activation of the context at `node` ended: one less to time.
    pub fn spend(&self, node: u32) {
        if let Some(timer) = self.timer(node) {
            let _ = timer.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn a_spent_budget_disarms() {
        let memory: Box<[AtomicU64]> = (0..32).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: the box outlives the timers and is never moved.
        let timers = Timers::new(unsafe { LiveTree::new(memory.as_ptr().cast()) });
        let node = 96;
        timers.arm(node, 2);
        assert!(timers.armed(node) && !timers.armed(node + 40));
        assert_eq!(
            memory[(node + A::TIMER) as usize / 8].load(Ordering::Relaxed),
            2 << 32,
            "the node's timer field"
        );
        timers.spend(node);
        assert!(timers.armed(node));
        timers.spend(node);
        assert!(!timers.armed(node));
        // More activations that were already timed end later: nothing underflows.
        timers.spend(node);
        assert!(!timers.armed(node));
        timers.arm(node, 1);
        timers.disarm(node);
        assert!(!timers.armed(node));
    }
}
