//! The module's tree memory read while the program runs (the walker's and the stopwatch's
//! view): atomic loads through a pointer to a memory that never moves, each bounded by the
//! size the memory has (a read past it would touch the reservation's inaccessible pages).
//!
//! Another thread cannot ask wasmtime a memory's size while the program runs (that takes
//! the store), so a view carries a size it knows to be no more than the memory's: a
//! module's tree memory is grown by the host before the program runs to hold every node the
//! module can allocate ([`prepare`]), and the size it then has bounds every read (a memory
//! never shrinks); a component's tree memories are wprof's own, whose size is kept in a cell
//! as they grow (see [`crate::run::component::memory`]).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use wprof_agent::ContextArena as A;

use crate::run::inline::tree::TreeBytes;

/// The tree memory of a running module.
#[derive(Debug, Clone, Copy)]
pub struct LiveTree {
    base: *const u8,
    size: TreeSize,
}

/// How a view knows how much of its memory it may read.
#[derive(Debug, Clone, Copy)]
pub enum TreeSize {
    /// A size the memory had when the view was made.
    Fixed(u64),
    /// A cell holding the memory's size, updated once it has grown.
    Tracked(*const AtomicUsize),
}

// SAFETY: only read, with atomic loads, while the store owning the memory (and the size's
// cell) is alive (see `LiveTree::new`).
unsafe impl Send for LiveTree {}
unsafe impl Sync for LiveTree {}

/// How much of the tree memory a module's view may read: the tree's size limit and the
/// nodes past it (at most one overflow node per function).
const TREE_SPAN: u64 = A::LIMIT as u64 + (64 << 20);

impl TreeSize {
    /// The bytes that may be read now.
    fn now(self) -> u64 {
        match self {
            TreeSize::Fixed(size) => size,
            // SAFETY: the cell outlives the view (see `LiveTree::new`).
            TreeSize::Tracked(cell) => unsafe { (*cell).load(Ordering::Acquire) as u64 },
        }
    }
}

impl LiveTree {
    /// The tree memory whose data starts at `base`, of which `size` bytes may be read.
    ///
    /// # Safety
    ///
    /// `base` must be the data of the module's tree memory, a memory that never moves, and
    /// stay so while this view is used; the memory must hold at least the bytes `size`
    /// says (a tracked size's cell must outlive the view).
    pub unsafe fn new(base: *const u8, size: TreeSize) -> Self {
        LiveTree { base, size }
    }

    /// The function id of the node at `node`, if it names one.
    pub fn function_of(&self, node: u32) -> Option<u32> {
        if node < A::ROOT + 32 || !node.is_multiple_of(8) {
            return None;
        }
        (self.u32_at(node.checked_add(A::FUNCTION)?)? & !A::TIMED).checked_sub(1)
    }

    /// The `u32` at `at` (a field of a node read from the tree), to read or write
    /// atomically; `None` past the memory's size.
    pub fn u32_cell(&self, at: u32) -> Option<&AtomicU32> {
        if !at.is_multiple_of(4) || u64::from(at) + 4 > self.size.now() {
            return None;
        }
        // SAFETY: aligned, and inside the memory (see `new`), alive while this view is;
        // the module reads and writes with plain aligned accesses, which atomic ones never
        // tear.
        Some(unsafe { AtomicU32::from_ptr(self.base.add(at as usize).cast_mut().cast()) })
    }
}

impl TreeBytes for LiveTree {
    fn u32_at(&self, at: u32) -> Option<u32> {
        self.u32_cell(at).map(|c| c.load(Ordering::Relaxed))
    }

    fn u64_at(&self, at: u32) -> Option<u64> {
        if !at.is_multiple_of(8) || u64::from(at) + 8 > self.size.now() {
            return None;
        }
        // SAFETY: as in `u32_cell`.
        Some(unsafe {
            AtomicU64::from_ptr(self.base.add(at as usize).cast_mut().cast())
                .load(Ordering::Relaxed)
        })
    }

    fn readable(&self) -> u64 {
        self.size.now()
    }
}

/// A module's tree memory made ready to be read while the program runs: grown now, if it
/// is smaller, to hold every node the module can allocate (pages made accessible, none
/// touched); its base and the size it has then, which bounds the reads (if the system
/// refuses the growth, the size it had). The caller has checked that the memory never moves
/// as it grows (see `crate::run::host_state::never_moves`).
pub(crate) fn prepare(
    mut store: impl wasmtime::AsContextMut,
    memory: &wasmtime::Memory,
) -> (*const u8, u64) {
    let wanted = TREE_SPAN.div_ceil(memory.page_size(&store));
    let pages = memory.size(&store);
    if pages < wanted {
        let _ = memory.grow(&mut store, wanted - pages);
    }
    (
        memory.data_ptr(&store).cast_const(),
        memory.data_size(&store) as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_memorys_size() {
        // Two nodes' worth of memory: a field past its end is not read, however the
        // module's links point there.
        let memory: Box<[AtomicU64]> = (0..16).map(|_| AtomicU64::new(u64::MAX)).collect();
        let size = AtomicUsize::new(96);
        // SAFETY: the box and the cell outlive the views and are never moved.
        let (fixed, tracked) = unsafe {
            let base = memory.as_ptr().cast();
            (
                LiveTree::new(base, TreeSize::Fixed(128)),
                LiveTree::new(base, TreeSize::Tracked(&size)),
            )
        };
        assert_eq!(fixed.u32_at(124), Some(u32::MAX));
        assert_eq!(fixed.u32_at(128), None);
        assert_eq!(fixed.u64_at(120), Some(u64::MAX));
        assert_eq!(fixed.u64_at(128), None);
        assert_eq!(fixed.u32_at(u32::MAX - 3), None);
        assert_eq!(tracked.u32_at(92), Some(u32::MAX));
        assert_eq!(tracked.u32_at(96), None);
        // Grown: the cell says so.
        size.store(128, Ordering::Release);
        assert_eq!(tracked.u32_at(96), Some(u32::MAX));
        assert_eq!(tracked.readable(), 128);
        // A node whose function field lies past the end names nothing.
        assert_eq!(fixed.function_of(112), None);
    }
}
