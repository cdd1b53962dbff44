//! Allocation profiling's host side: what an allocator's report means (a block handed out,
//! one taken back, or both), the blocks live now, and each context's figures.
//!
//! An allocator function calls `wprof.alloc(id, kind, a, b, result, node)` just before it
//! returns (see [`wprof_agent::Allocators`]). The tracker keeps every live block by its
//! address: in the inline modes with the node of the module's tree that asked for it
//! (the allocator's own node, which the probe passes), in time mode with its number in the
//! probe log, whose collector knows the frame (see `collector::allocs`). Blocks are exact:
//! each is counted once, at the size the program asked for.

use rustc_hash::FxHashMap;
use wprof_agent::AllocRole;

use crate::profile::{AllocFigures, AllocationsRecord, AllocatorRecord};

/// What one report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    /// The address of a block taken back.
    pub freed: Option<u64>,
    /// A block handed out: its address and size.
    pub allocated: Option<(u64, u64)>,
    /// The allocator handed out nothing when asked for a block.
    pub failed: bool,
}

impl Change {
    /// The meaning of a report of `kind` with arguments `a`, `b` and `result` (see
    /// [`AllocRole::arguments`]); `stored` reads the address an [`AllocRole::AllocAt`]
    /// stored at `a`.
    pub fn of(kind: u32, a: u64, b: u64, result: u64, stored: impl FnOnce(u64) -> u64) -> Self {
        let handed = |ptr: u64, size: u64| {
            if ptr == 0 {
                Change {
                    failed: true,
                    ..Change::default()
                }
            } else {
                Change {
                    allocated: Some((ptr, size)),
                    ..Change::default()
                }
            }
        };
        match AllocRole::from_code(kind) {
            Some(AllocRole::Alloc { .. }) => handed(result, b),
            Some(AllocRole::Calloc { .. }) => handed(result, a.saturating_mul(b)),
            Some(AllocRole::Realloc { .. }) => {
                let old = (a != 0).then_some(a);
                if result != 0 {
                    Change {
                        freed: old,
                        allocated: Some((result, b)),
                        failed: false,
                    }
                } else if b == 0 {
                    // `realloc(p, 0)` returning 0 took `p` back.
                    Change {
                        freed: old,
                        ..Change::default()
                    }
                } else {
                    // Failed: the old block stays.
                    Change {
                        failed: true,
                        ..Change::default()
                    }
                }
            }
            Some(AllocRole::Free { .. }) => Change {
                freed: (a != 0).then_some(a),
                ..Change::default()
            },
            Some(AllocRole::AllocAt { .. }) if result == 0 => handed(stored(a), b),
            Some(AllocRole::AllocAt { .. }) => Change {
                failed: true,
                ..Change::default()
            },
            None => Change::default(),
        }
    }
}

/// A run's tracker: its own, or shared with `--serve`'s thread (behind a lock, taken only
/// then).
#[derive(Debug)]
pub enum Allocs {
    /// The program thread's alone.
    Own(AllocTracker),
    /// Shared with whoever serves the running profile.
    Shared(std::sync::Arc<std::sync::Mutex<AllocTracker>>),
}

impl Allocs {
    /// `f` with the tracker.
    pub fn with<R>(&mut self, f: impl FnOnce(&mut AllocTracker) -> R) -> R {
        match self {
            Allocs::Own(t) => f(t),
            Allocs::Shared(t) => f(&mut t.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

/// The blocks of one run.
#[derive(Debug)]
pub struct AllocTracker {
    /// The module's allocator functions (their calls counted here).
    allocators: Vec<AllocatorRecord>,
    /// Reports per allocator id.
    calls: FxHashMap<u32, u64>,
    /// Live blocks by address: their owner (a node address in the inline modes, a
    /// number in time mode) and size.
    live: FxHashMap<u64, (u64, u64)>,
    /// Inline modes: the figures per node address (live blocks not yet counted as such).
    by_node: FxHashMap<u32, AllocFigures>,
    /// Time mode: the next block's number.
    next_number: u64,
    totals: AllocFigures,
    unknown_frees: u64,
    failed: u64,
}

/// Where a change goes besides the tracker: in time mode, to the probe log.
#[derive(Debug, Clone, Copy)]
pub enum Owner {
    /// The inline modes: the allocator's node in the module's tree.
    Node(u32),
    /// Time mode: the collector numbers the blocks; `freed` gets the number of a block
    /// taken back, `allocated` the size of one handed out.
    Numbered,
}

/// What time mode must log of a change, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Logged {
    /// The number of the block taken back.
    pub freed: Option<u64>,
    /// The size of the block handed out (it takes the next number).
    pub allocated: Option<u64>,
}

impl AllocTracker {
    /// A tracker for a module whose allocators are `allocators`.
    pub fn new(allocators: Vec<AllocatorRecord>) -> Self {
        Self {
            allocators,
            calls: FxHashMap::default(),
            live: FxHashMap::default(),
            by_node: FxHashMap::default(),
            next_number: 0,
            totals: AllocFigures::default(),
            unknown_frees: 0,
            failed: 0,
        }
    }

    /// Allocator `id` reported `change`; returns what time mode logs.
    pub fn record(&mut self, id: u32, change: Change, owner: Owner) -> Logged {
        *self.calls.entry(id).or_default() += 1;
        let mut logged = Logged::default();
        if change.failed {
            self.failed += 1;
        }
        if let Some(ptr) = change.freed {
            match self.live.remove(&ptr) {
                Some((number, _)) => {
                    if matches!(owner, Owner::Numbered) {
                        logged.freed = Some(number);
                    }
                }
                None => self.unknown_frees += 1,
            }
        }
        if let Some((ptr, size)) = change.allocated {
            self.totals.bytes += size;
            self.totals.objects += 1;
            let key = match owner {
                Owner::Node(node) => {
                    let f = self.by_node.entry(node).or_default();
                    f.bytes += size;
                    f.objects += 1;
                    u64::from(node)
                }
                Owner::Numbered => {
                    logged.allocated = Some(size);
                    self.next_number += 1;
                    self.next_number - 1
                }
            };
            // An address handed out again without being taken back: the earlier block's
            // release was not seen; the new one replaces it.
            self.live.insert(ptr, (key, size));
        }
        logged
    }

    /// Inline modes, when the program has ended: the figures per node address, live
    /// blocks counted as such.
    pub fn by_node(&self) -> FxHashMap<u32, AllocFigures> {
        let mut out = self.by_node.clone();
        for &(node, size) in self.live.values() {
            let f = out.entry(node as u32).or_default();
            f.live_bytes += size;
            f.live_objects += 1;
        }
        out
    }

    /// The run's record.
    pub fn record_of_run(&self) -> AllocationsRecord {
        let mut totals = self.totals;
        totals.live_objects = self.live.len() as u64;
        totals.live_bytes = self.live.values().map(|&(_, size)| size).sum();
        AllocationsRecord {
            allocators: self
                .allocators
                .iter()
                .map(|a| AllocatorRecord {
                    calls: self.calls.get(&a.function).copied().unwrap_or(0),
                    ..a.clone()
                })
                .collect(),
            totals,
            unknown_frees: self.unknown_frees,
            failed: self.failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(role: AllocRole) -> u32 {
        role.code()
    }

    #[test]
    fn reports_mean_what_their_roles_say() {
        let never = |_| panic!("not an AllocAt");
        let alloc = code(AllocRole::Alloc { size: 0 });
        assert_eq!(
            Change::of(alloc, 0, 24, 4096, never).allocated,
            Some((4096, 24))
        );
        assert!(Change::of(alloc, 0, 24, 0, never).failed);
        let calloc = code(AllocRole::Calloc { count: 0, size: 1 });
        assert_eq!(
            Change::of(calloc, 3, 8, 64, never).allocated,
            Some((64, 24))
        );
        let realloc = code(AllocRole::Realloc { ptr: 0, size: 1 });
        let moved = Change::of(realloc, 64, 100, 128, never);
        assert_eq!((moved.freed, moved.allocated), (Some(64), Some((128, 100))));
        // realloc(NULL, n) only allocates; realloc(p, 0) returning 0 frees; a failure
        // keeps the old block.
        assert_eq!(Change::of(realloc, 0, 8, 32, never).freed, None);
        assert_eq!(Change::of(realloc, 64, 0, 0, never).freed, Some(64));
        let failed = Change::of(realloc, 64, 8, 0, never);
        assert!(failed.failed && failed.freed.is_none());
        let free = code(AllocRole::Free { ptr: 0 });
        assert_eq!(Change::of(free, 64, 0, 0, never).freed, Some(64));
        assert_eq!(Change::of(free, 0, 0, 0, never), Change::default());
        let at = code(AllocRole::AllocAt { out: 0, size: 2 });
        assert_eq!(
            Change::of(at, 16, 40, 0, |out| out * 100).allocated,
            Some((1600, 40))
        );
        assert!(Change::of(at, 16, 40, 12, never).failed);
    }

    #[test]
    fn live_blocks_stay_with_the_node_that_asked() {
        let mut t = AllocTracker::new(vec![AllocatorRecord {
            function: 3,
            name: "malloc".into(),
            kind: "alloc".into(),
            calls: 0,
        }]);
        let alloc = |ptr, size| Change {
            allocated: Some((ptr, size)),
            ..Change::default()
        };
        let free = |ptr| Change {
            freed: Some(ptr),
            ..Change::default()
        };
        t.record(3, alloc(100, 10), Owner::Node(40));
        t.record(3, alloc(200, 20), Owner::Node(80));
        t.record(3, alloc(300, 30), Owner::Node(40));
        t.record(4, free(100), Owner::Node(96));
        t.record(4, free(999), Owner::Node(96));
        let nodes = t.by_node();
        assert_eq!(
            nodes[&40],
            AllocFigures {
                bytes: 40,
                objects: 2,
                live_bytes: 30,
                live_objects: 1
            }
        );
        assert_eq!(nodes[&80].live_bytes, 20);
        let r = t.record_of_run();
        assert_eq!((r.totals.bytes, r.totals.live_bytes), (60, 50));
        assert_eq!((r.unknown_frees, r.allocators[0].calls), (1, 3));
    }

    #[test]
    fn time_mode_numbers_the_blocks_for_the_log() {
        let mut t = AllocTracker::new(Vec::new());
        let a = |ptr, size| Change {
            allocated: Some((ptr, size)),
            ..Change::default()
        };
        assert_eq!(t.record(1, a(8, 5), Owner::Numbered).allocated, Some(5));
        t.record(1, a(16, 6), Owner::Numbered);
        let moved = Change {
            freed: Some(8),
            allocated: Some((24, 9)),
            failed: false,
        };
        assert_eq!(
            t.record(2, moved, Owner::Numbered),
            Logged {
                freed: Some(0),
                allocated: Some(9)
            }
        );
    }
}
