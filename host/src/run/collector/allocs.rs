//! Allocation profiling in the collector: each context's blocks (see
//! [`crate::profile::AllocFigures`]).
//!
//! In time mode the probe log carries an allocator's blocks as events in the order they
//! happened: a block handed out goes to the frame on top (the allocator's own, its report
//! comes before its exit), numbered in order, and a block taken back names that number, so
//! that the blocks still live at the end are known with their contexts. In the inline
//! modes the host keeps the blocks by node of the module's tree, and the tree's replay
//! gives each node's figures to its context ([`Collector::add_allocs`]).

use rustc_hash::FxHashMap;

use super::Collector;
use crate::profile::AllocFigures;

/// The blocks of a run by context.
#[derive(Debug, Default)]
pub(super) struct AllocContexts {
    /// Per context node.
    figures: FxHashMap<u32, AllocFigures>,
    /// Time mode: the blocks live now, by number: their context and size.
    live: FxHashMap<u64, (u32, u64)>,
    /// Time mode: the next block's number.
    next: u64,
}

impl Collector {
    /// Time mode: the frame on top handed out a block of `size` bytes, the next number's.
    pub fn allocated(&mut self, size: u64) {
        let number = self.allocs.next;
        self.allocs.next += 1;
        let Some(node) = self.stack.last().map(|f| f.node) else {
            return;
        };
        let f = self.allocs.figures.entry(node).or_default();
        f.bytes += size;
        f.objects += 1;
        self.allocs.live.insert(number, (node, size));
    }

    /// Time mode: the block of number `number` was taken back.
    pub fn freed(&mut self, number: u64) {
        self.allocs.live.remove(&number);
    }

    /// The inline modes: `figures` belong to the context of the frame on top.
    pub fn add_allocs(&mut self, figures: &AllocFigures) {
        if let Some(top) = self.stack.last() {
            self.allocs
                .figures
                .entry(top.node)
                .or_default()
                .add(figures);
        }
    }

    /// Time mode, when the program has ended: the blocks still live count as such in
    /// their contexts.
    pub fn settle_allocs(&mut self) {
        for (_, (node, size)) in self.allocs.live.drain() {
            let f = self.allocs.figures.entry(node).or_default();
            f.live_bytes += size;
            f.live_objects += 1;
        }
    }

    /// The blocks of context `node`, if it handed out any.
    pub fn allocs_at(&self, node: u32) -> Option<AllocFigures> {
        self.allocs.figures.get(&node).copied()
    }
}
