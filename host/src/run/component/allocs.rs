//! Allocation profiling of a component's core modules (`wprof run --allocs`): each
//! instrumented module's allocators report to the host through the module's probe
//! instance, as a module's do (see [`crate::run::allocs`]), into one tracker for the
//! component. Each module has its own linear memory and its own tree, so a block's address
//! and an allocator's node are told apart by module: addresses as `module << 48 | address`
//! (the component model's memories are 32-bit), nodes by [`module_node_key`], which the
//! grafted tree's nodes take too (see [`InlineTree::graft`](crate::run::inline::tree::InlineTree::graft)).

use crate::run::allocs::{Allocs, Change, Owner};
use crate::run::component::memory::MadeMemory;
use crate::run::inline::tree::module_node_key;

/// What a component's allocation reports go to.
#[derive(Debug)]
pub struct ComponentAllocs {
    /// Every module's blocks; allocators by component id (shared with `--serve`'s thread
    /// when it serves allocation profiles).
    pub tracker: Allocs,
    /// Per probe instance, the module's memory 0 when wprof made it (for an allocator that
    /// stores the block's address, `posix_memalign`).
    pub memories: Vec<Option<MadeMemory>>,
}

impl ComponentAllocs {
    /// Attaches the tracker of the allocators of `modules` to `store`, with each module's
    /// memory 0 among `mains` (as `(module, memory)`, when found): the tracker, when
    /// `served` by `--serve`'s thread too.
    pub fn attach(
        store: &mut wasmtime::Store<crate::run::component::ComponentState>,
        modules: &[crate::run::component::ModuleProbes],
        mains: Option<&[(usize, MadeMemory)]>,
        served: bool,
    ) -> Option<std::sync::Arc<std::sync::Mutex<crate::run::allocs::AllocTracker>>> {
        let tracker = crate::run::allocs::AllocTracker::new(
            modules.iter().flat_map(|m| m.allocators.clone()).collect(),
        );
        let (tracker, shared) = match served {
            true => {
                let shared = std::sync::Arc::new(std::sync::Mutex::new(tracker));
                (Allocs::Shared(shared.clone()), Some(shared))
            }
            false => (Allocs::Own(tracker), None),
        };
        let memories = (0..modules.len())
            .map(|k| {
                let (_, memory) = mains?.iter().find(|(of, _)| *of == k)?;
                Some(memory.clone())
            })
            .collect();
        store.data_mut().allocs = Some(ComponentAllocs { tracker, memories });
        shared
    }

    /// Allocator `id` of probe instance `k` (ids from `offset` in the component) reported
    /// `kind` with `a`, `b` and `result`, from `node` of its module's tree (inline modes) or
    /// numbered by time mode's log (`numbered`); returns what time mode logs.
    pub fn report(
        &mut self,
        k: usize,
        offset: u32,
        id: u32,
        (kind, a, b, result): (u32, u64, u64, u64),
        node: u32,
        numbered: bool,
    ) -> crate::run::allocs::Logged {
        let memory = self.memories.get(k).cloned().flatten();
        let stored = |at: u64| -> u64 {
            let Some(memory) = &memory else {
                return 0;
            };
            let size = memory.size.load(std::sync::atomic::Ordering::Acquire) as u64;
            if at.checked_add(4).is_none_or(|end| end > size) {
                return 0;
            }
            // SAFETY: in bounds (checked above) of a memory that stays where it is while the
            // store lives; the program is inside its allocator's call, not writing it.
            let bytes =
                unsafe { std::slice::from_raw_parts((memory.base + at as usize) as *const u8, 4) };
            u64::from(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
        };
        let change = Change::of(kind, a, b, result, stored);
        let module = (k as u64) << 48;
        let change = Change {
            freed: change.freed.map(|p| module | p),
            allocated: change.allocated.map(|(p, size)| (module | p, size)),
            failed: change.failed,
        };
        let owner = match (numbered, module_node_key(k, node & !7)) {
            (true, _) => Owner::Numbered,
            (false, Some(key)) => Owner::Node(key),
            // Past 127 modules nodes cannot be told apart: the root's.
            (false, None) => Owner::Node(0),
        };
        self.tracker.with(|t| t.record(offset + id, change, owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::AllocatorRecord;
    use crate::run::allocs::AllocTracker;
    use wprof_agent::AllocRole;

    #[test]
    fn blocks_and_nodes_of_two_modules_are_told_apart() {
        let alloc = AllocRole::Alloc { size: 0 }.code();
        let free = AllocRole::Free { ptr: 0 }.code();
        let records = |ids: &[u32]| {
            ids.iter()
                .map(|&function| AllocatorRecord {
                    function,
                    name: format!("f{function}"),
                    kind: "alloc".into(),
                    calls: 0,
                })
                .collect()
        };
        let mut allocs = ComponentAllocs {
            tracker: Allocs::Own(AllocTracker::new(records(&[3, 13]))),
            memories: vec![None, None],
        };
        // Both modules hand out address 64 from node 16 of their own trees.
        allocs.report(0, 0, 3, (alloc, 0, 10, 64), 16, false);
        allocs.report(1, 10, 3, (alloc, 0, 20, 64), 16, false);
        let nodes = allocs.tracker.with(|t| t.by_node());
        assert_eq!(nodes[&module_node_key(0, 16).unwrap()].live_bytes, 10);
        assert_eq!(nodes[&module_node_key(1, 16).unwrap()].live_bytes, 20);
        // Module 1 frees its block; module 0's stays live.
        allocs.report(1, 10, 3, (free, 64, 0, 0), 24, false);
        let record = allocs.tracker.with(|t| t.record_of_run());
        assert_eq!(record.totals.live_bytes, 10);
        assert_eq!(record.unknown_frees, 0);
        let calls: Vec<(u32, u64)> = record
            .allocators
            .iter()
            .map(|a| (a.function, a.calls))
            .collect();
        assert_eq!(calls, vec![(3, 1), (13, 2)]);
        assert_ne!(module_node_key(0, 16), module_node_key(1, 16));
        assert_eq!(module_node_key(128, 16), None);
    }
}
