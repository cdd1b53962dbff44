//! The timers of the contexts (see [`wprof_agent::ContextArena::TIMED`]): the walker arms a
//! context by setting the bit in its node's function field and writing how many of its
//! next activations to time; the stopwatch counts them down as timed activations end, and
//! clears the bit as soon as the budget is spent.

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

    /// A node's function field and its budget.
    fn fields(&self, node: u32) -> Option<(&AtomicU32, &AtomicU32)> {
        Some((
            self.tree.u32_cell(node.checked_add(A::FUNCTION)?)?,
            self.tree.u32_cell(node.checked_add(A::TIMER)?)?,
        ))
    }

    /// Times the next `calls` activations of the context at `node` (a node read from the
    /// tree: both are written there), `calls` at least 1.
    pub fn arm(&self, node: u32, calls: u32) {
        if let Some((function, budget)) = self.fields(node) {
            budget.store(calls.max(1), Ordering::Relaxed);
            function.fetch_or(A::TIMED, Ordering::Relaxed);
        }
    }

    /// Stops timing the context at `node` (activations already timed still end timed).
    pub fn disarm(&self, node: u32) {
        if let Some((function, budget)) = self.fields(node) {
            function.fetch_and(!A::TIMED, Ordering::Relaxed);
            budget.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the context at `node` is timed.
    pub fn armed(&self, node: u32) -> bool {
        self.fields(node)
            .is_some_and(|(f, _)| f.load(Ordering::Relaxed) & A::TIMED != 0)
    }

    /// A timed activation of the context at `node` ended: one less to time; the last one
    /// disarms it.
    pub fn spend(&self, node: u32) {
        if let Some((function, budget)) = self.fields(node) {
            let before =
                budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1));
            if before == Ok(1) {
                function.fetch_and(!A::TIMED, Ordering::Relaxed);
            }
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
        let size = super::super::live_tree::TreeSize::Fixed(memory.len() as u64 * 8);
        let timers = Timers::new(unsafe { LiveTree::new(memory.as_ptr().cast(), size) });
        let node = 96;
        memory[(node + A::FUNCTION) as usize / 8].store(5, Ordering::Relaxed);
        timers.arm(node, 2);
        assert!(timers.armed(node) && !timers.armed(node + 40));
        let word = |at: u32| memory[(node + at) as usize / 8].load(Ordering::Relaxed);
        assert_eq!(word(A::FUNCTION), u64::from(5 | A::TIMED), "its id is kept");
        assert_eq!(word(A::TIMER), 2 << 32, "the budget, at offset 28");
        timers.spend(node);
        assert!(timers.armed(node));
        timers.spend(node);
        assert!(!timers.armed(node));
        assert_eq!(
            memory[(node + A::FUNCTION) as usize / 8].load(Ordering::Relaxed),
            5
        );
        // More activations that were already timed end later: nothing underflows.
        timers.spend(node);
        assert!(!timers.armed(node));
        timers.arm(node, 1);
        timers.disarm(node);
        assert!(!timers.armed(node));
    }
}
