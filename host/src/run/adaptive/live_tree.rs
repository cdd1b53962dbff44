//! The module's tree memory read while the program runs (the walker's and the stopwatch's
//! view): atomic loads through a pointer to a memory that never moves.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use wprof_agent::ContextArena as A;

use crate::run::inline::tree::TreeBytes;

/// The tree memory of a running module.
#[derive(Debug, Clone, Copy)]
pub struct LiveTree {
    base: *const u8,
}

// SAFETY: only read, with atomic loads, while the store owning the memory is alive (see
// `LiveTree::new`).
unsafe impl Send for LiveTree {}
unsafe impl Sync for LiveTree {}

/// Reads stop at the tree's size limit (and the nodes past it, which never exceed it by
/// more than one node's slots).
const READABLE: u64 = A::LIMIT as u64 + (64 << 20);

impl LiveTree {
    /// The tree memory whose data starts at `base`.
    ///
    /// # Safety
    ///
    /// `base` must be the data of the module's tree memory, a memory that never moves, and
    /// stay so while this view is used. Only addresses the module wrote in the tree (links
    /// to the nodes it allocated, and the tables before the first node) are read, so every
    /// read lies in memory the module has grown.
    pub unsafe fn new(base: *const u8) -> Self {
        LiveTree { base }
    }

    /// The function id of the node at `node`, if it names one.
    pub fn function_of(&self, node: u32) -> Option<u32> {
        if node < A::ROOT + 32 || !node.is_multiple_of(8) {
            return None;
        }
        (self.u32_at(node + A::FUNCTION)? & !A::TIMED).checked_sub(1)
    }
}

impl LiveTree {
    /// The `u32` at `at` (a field of a node read from the tree), to read or write
    /// atomically.
    pub fn u32_cell(&self, at: u32) -> Option<&AtomicU32> {
        if !at.is_multiple_of(4) || u64::from(at) + 4 > READABLE {
            return None;
        }
        // SAFETY: aligned, and in memory the module has grown (see `new`), alive while
        // this view is; the module reads and writes with plain aligned accesses, which
        // atomic ones never tear.
        Some(unsafe { AtomicU32::from_ptr(self.base.add(at as usize).cast_mut().cast()) })
    }
}

impl TreeBytes for LiveTree {
    fn u32_at(&self, at: u32) -> Option<u32> {
        self.u32_cell(at).map(|c| c.load(Ordering::Relaxed))
    }

    fn u64_at(&self, at: u32) -> Option<u64> {
        if !at.is_multiple_of(8) || u64::from(at) + 8 > READABLE {
            return None;
        }
        // SAFETY: as in `u32_at`.
        Some(unsafe {
            AtomicU64::from_ptr(self.base.add(at as usize).cast_mut().cast())
                .load(Ordering::Relaxed)
        })
    }

    fn readable(&self) -> u64 {
        READABLE
    }
}
