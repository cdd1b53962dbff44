//! The calling-context tree an inline-mode module keeps in its own memory (see
//! [`wprof_agent::ContextArena`]): read once the program has ended, and replayed into a
//! [`Collector`] so that every report is built from the same totals as in time mode.
//!
//! The module's tree is exact and uncollapsed: one node per distinct path, holding that
//! path's calls and (cost mode) self cost. Replaying it visits every node once, entering
//! it with all its calls at once and leaving it after its children, with the node's self
//! cost as the time spent in between; the collector then derives inclusive totals, edges
//! and the collapsed context tree exactly as it does from live probes.

use std::collections::{HashMap, HashSet};

use wprof_agent::ContextArena as A;

use crate::profile::HostFigures;
use crate::run::collector::Collector;

/// One calling context the module counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineNode {
    /// Its address in the module's tree memory.
    pub address: u32,
    /// The function id (`u32::MAX` for the root).
    pub function: u32,
    /// Activations along this path.
    pub calls: u64,
    /// Self cost counted by the module (cost mode: instructions).
    pub self_cost: u64,
    /// Its parent's index in [`InlineTree::nodes`] (the root's is 0, itself).
    pub parent: usize,
    /// Children as (call site number in this node's function, index in
    /// [`InlineTree::nodes`]).
    pub children: Vec<(u32, usize)>,
}

/// The tree, read from the module's memory.
#[derive(Debug, Clone)]
pub struct InlineTree {
    /// Root first; a parent before its children.
    pub nodes: Vec<InlineNode>,
    /// Overflow nodes (one per function at most, counted past the tree's size limit),
    /// listed as children of the root with no call site.
    pub overflow: Vec<usize>,
    /// Links that pointed outside the memory, at a node seen before or at no function:
    /// never expected, counted rather than trusted.
    pub damaged: u64,
}

/// A call site number that names no call: an overflow node's link from the root.
const NO_SITE: u32 = u32::MAX;

/// The bytes a tree is read from: a copy of the memory, or (adaptive mode's walker) the
/// live memory while the program runs.
pub trait TreeBytes {
    /// The little-endian `u32` at `at`, if in bounds.
    fn u32_at(&self, at: u32) -> Option<u32>;
    /// The little-endian `u64` at `at`, if in bounds.
    fn u64_at(&self, at: u32) -> Option<u64>;
    /// How many bytes may be read.
    fn readable(&self) -> u64;
}

impl TreeBytes for [u8] {
    fn u32_at(&self, at: u32) -> Option<u32> {
        let at = at as usize;
        let bytes = self.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    }

    fn u64_at(&self, at: u32) -> Option<u64> {
        let at = at as usize;
        let bytes = self.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    fn readable(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
}

/// The node at `at` (no children yet), its next sibling and its number of slots, if the
/// node lies inside `memory` and names one of `functions` functions.
fn node_at<M: TreeBytes + ?Sized>(
    memory: &M,
    at: u32,
    functions: u32,
) -> Option<(InlineNode, u32, u32)> {
    // Without adaptive mode's timer bit (see `ContextArena::TIMED`).
    let id1 = memory.u32_at(at.checked_add(A::FUNCTION)?)? & !A::TIMED;
    let slots = memory.u32_at(at.checked_add(A::SLOT_COUNT)?)?;
    let end = u64::from(at) + u64::from(A::SLOTS) + 4 * u64::from(slots);
    if id1 == 0 || id1 > functions || end > memory.readable() {
        return None;
    }
    let node = InlineNode {
        address: at,
        function: id1 - 1,
        calls: memory.u64_at(at + A::CALLS)?,
        self_cost: memory.u64_at(at + A::SELF_COST)?,
        parent: 0,
        children: Vec::new(),
    };
    Some((node, memory.u32_at(at + A::NEXT)?, slots))
}

impl InlineTree {
    /// Each node's index in [`InlineTree::nodes`], by its address.
    pub fn index_by_address(&self) -> std::collections::HashMap<u32, usize> {
        (self.nodes.iter().enumerate())
            .map(|(i, n)| (n.address, i))
            .collect()
    }

    /// Reads the tree of a module with `functions` functions from its tree memory.
    pub fn read<M: TreeBytes + ?Sized>(memory: &M, functions: u32) -> Self {
        let mut tree = InlineTree::empty();
        let mut seen = HashSet::new();
        let mut pending = vec![(0usize, A::ROOT, 1u32)];
        while let Some((parent, address, slots)) = pending.pop() {
            for site in 0..slots {
                let mut link = memory.u32_at(address + A::SLOTS + 4 * site).unwrap_or(0);
                while link != 0 {
                    let Some((mut node, next, child_slots)) =
                        node_at(memory, link, functions).filter(|_| seen.insert(link))
                    else {
                        tree.damaged += 1;
                        break;
                    };
                    let index = tree.nodes.len();
                    node.parent = parent;
                    tree.nodes.push(node);
                    tree.nodes[parent].children.push((site, index));
                    pending.push((index, link, child_slots));
                    link = next;
                }
            }
        }
        for function in 0..functions {
            let link = memory.u32_at(A::OVERFLOW_TABLE + 4 * function).unwrap_or(0);
            if link == 0 {
                continue;
            }
            match node_at(memory, link, functions).filter(|(n, _, _)| n.function == function) {
                Some((node, _, _)) => {
                    let index = tree.nodes.len();
                    tree.nodes.push(node);
                    tree.nodes[0].children.push((NO_SITE, index));
                    tree.overflow.push(index);
                }
                None => tree.damaged += 1,
            }
        }
        tree
    }

    /// Replays the tree into `collector`: each node entered once with all its calls, its
    /// self time given by `self_time` (in the collector's unit). With `sites` (function
    /// id -> the offsets of its call instructions), edges are split by call site. With
    /// `host` (node address -> what the host did in the calls to an import from that
    /// node), each import's context gets its figures; with `allocs` (node address -> the
    /// blocks an allocator handed out from that node), each allocator's context.
    pub fn replay(
        &self,
        collector: &mut Collector,
        self_time: impl Fn(&InlineNode) -> u64,
        sites: Option<&HashMap<u32, Vec<u32>>>,
        host: Option<&rustc_hash::FxHashMap<u32, HostFigures>>,
        allocs: Option<&rustc_hash::FxHashMap<u32, crate::profile::AllocFigures>>,
    ) {
        enum Step {
            Enter { node: usize, caller: u32, site: u32 },
            Exit(usize),
        }
        let mut now = 0u64;
        let root = &self.nodes[0];
        let mut steps: Vec<Step> = root
            .children
            .iter()
            .rev()
            .map(|&(site, node)| Step::Enter {
                node,
                caller: root.function,
                site,
            })
            .collect();
        while let Some(step) = steps.pop() {
            match step {
                Step::Enter { node, caller, site } => {
                    let n = &self.nodes[node];
                    // A node without calls that has children is on the way to them (a
                    // window's tree, see `keep_active`).
                    if n.calls == 0 && n.children.is_empty() {
                        continue;
                    }
                    let offset = sites
                        .and_then(|s| s.get(&caller))
                        .and_then(|offsets| offsets.get(site as usize));
                    if let Some(&offset) = offset {
                        collector.site(offset);
                    }
                    collector.enter_counted_at(n.function, n.calls, now);
                    if let Some(figures) = host.and_then(|h| h.get(&n.address)) {
                        collector.add_host(n.function, figures);
                    }
                    if let Some(figures) = allocs.and_then(|a| a.get(&n.address)) {
                        collector.add_allocs(figures);
                    }
                    steps.push(Step::Exit(node));
                    steps.extend(n.children.iter().rev().map(|&(site, child)| Step::Enter {
                        node: child,
                        caller: n.function,
                        site,
                    }));
                }
                Step::Exit(node) => {
                    let n = &self.nodes[node];
                    now += self_time(n);
                    collector.exit_at(n.function, now);
                }
            }
        }
    }

    /// Adds `other`'s contexts under this tree's root: the tree of a component's core
    /// module `module`, whose ids start at `id_offset` in the component's profile. Its
    /// function ids move up by `id_offset`, its node addresses become
    /// [`module_node_key`]s, so that every module's nodes are told apart.
    pub fn graft(&mut self, other: InlineTree, module: usize, id_offset: u32) {
        let base = self.nodes.len() - 1;
        let moved = |index: usize| if index == 0 { 0 } else { index + base };
        for (site, child) in &other.nodes[0].children {
            self.nodes[0].children.push((*site, moved(*child)));
        }
        self.overflow
            .extend(other.overflow.iter().map(|&i| moved(i)));
        self.damaged += other.damaged;
        for node in other.nodes.into_iter().skip(1) {
            self.nodes.push(InlineNode {
                address: module_node_key(module, node.address).unwrap_or(0),
                function: node.function + id_offset,
                parent: moved(node.parent),
                children: node
                    .children
                    .into_iter()
                    .map(|(site, child)| (site, moved(child)))
                    .collect(),
                ..node
            });
        }
    }

    /// An empty tree: the root alone.
    pub fn empty() -> Self {
        InlineTree {
            nodes: vec![InlineNode {
                address: A::ROOT,
                function: u32::MAX,
                calls: 0,
                self_cost: 0,
                parent: 0,
                children: Vec::new(),
            }],
            overflow: Vec::new(),
            damaged: 0,
        }
    }

    /// Leaves out the subtrees where nothing happened: no calls and no `self_time` in any
    /// of their nodes (a window of a running program, whose long-running outer frames made
    /// no calls in it but lead to those that did).
    pub fn keep_active(&mut self, self_time: &impl Fn(&InlineNode) -> u64) {
        // Children come after their parents.
        let mut active = vec![false; self.nodes.len()];
        for i in (0..self.nodes.len()).rev() {
            let n = &self.nodes[i];
            active[i] =
                n.calls > 0 || self_time(n) > 0 || n.children.iter().any(|&(_, c)| active[c]);
        }
        for n in &mut self.nodes {
            n.children.retain(|&(_, c)| active[c]);
        }
        self.overflow.retain(|&i| active[i]);
    }

    /// Calls counted in overflow nodes (their contexts were not kept).
    pub fn overflow_calls(&self) -> u64 {
        self.overflow.iter().map(|&i| self.nodes[i].calls).sum()
    }
}

/// The node at `address` (8-aligned, under 256 MiB) of a component's core module `module`,
/// as one key among every module's nodes; `None` past 127 modules.
pub fn module_node_key(module: usize, address: u32) -> Option<u32> {
    (module < 128).then_some((address >> 3) | ((module as u32) << 25))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree memory built by hand: nodes as (address, function, calls, self, next,
    /// slots).
    struct Memory(Vec<u8>);

    impl Memory {
        fn new() -> Self {
            Memory(vec![0; 4096])
        }
        fn put32(&mut self, at: u32, v: u32) {
            self.0[at as usize..at as usize + 4].copy_from_slice(&v.to_le_bytes());
        }
        fn put64(&mut self, at: u32, v: u64) {
            self.0[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        }
        fn node(&mut self, at: u32, function: u32, calls: u64, self_cost: u64, slots: u32) {
            self.put64(at + A::CALLS, calls);
            self.put64(at + A::SELF_COST, self_cost);
            self.put32(at + A::FUNCTION, function + 1);
            self.put32(at + A::SLOT_COUNT, slots);
        }
        fn link(&mut self, parent: u32, site: u32, child: u32) {
            self.put32(parent + A::SLOTS + 4 * site, child);
        }
    }

    #[test]
    fn grafted_trees_replay_as_one_with_their_ids_moved() {
        // Module A: _start(0) -> f(1); module B (ids from 2 in the merged tree): g(0) -> h(1).
        let mut a = Memory::new();
        a.link(A::ROOT, 0, 1024);
        a.node(1024, 0, 1, 5, 1);
        a.link(1024, 0, 1100);
        a.node(1100, 1, 3, 30, 0);
        let mut b = Memory::new();
        b.link(A::ROOT, 0, 1024);
        b.node(1024, 0, 2, 7, 1);
        b.link(1024, 0, 1100);
        b.node(1100, 1, 4, 40, 0);
        let mut tree = InlineTree::empty();
        tree.graft(InlineTree::read(&a.0[..], 2), 0, 0);
        tree.graft(InlineTree::read(&b.0[..], 2), 1, 2);
        assert_eq!(tree.nodes.len(), 5);
        let mut c = Collector::new(4);
        tree.replay(&mut c, |n| n.self_cost, None, None, None);
        c.finish_at(c.last());
        let f = c.functions();
        let calls: Vec<u64> = f.iter().map(|f| f.calls).collect();
        assert_eq!(calls, [1, 3, 2, 4]);
        assert_eq!((f[0].inclusive, f[2].inclusive), (35, 47));
        assert_eq!(c.root_inclusive(), 82);
        assert!(c
            .edges()
            .iter()
            .any(|e| e.caller == 2 && e.callee == 3 && e.calls == 4));
    }

    #[test]
    fn recursion_and_shared_slots_replay_exactly() {
        // _start(0) -> f(1) [site 0]; f -> f [site 0] (recursion, two levels);
        // f -> g(2) and f -> h(3) through one indirect site 1 (a chain).
        let mut m = Memory::new();
        m.link(A::ROOT, 0, 1024);
        m.node(1024, 0, 1, 5, 1);
        m.link(1024, 0, 1100);
        m.node(1100, 1, 1, 10, 2);
        m.link(1100, 0, 1200);
        m.node(1200, 1, 2, 20, 2);
        m.link(1100, 1, 1300);
        m.node(1300, 2, 3, 30, 0);
        m.put32(1300 + A::NEXT, 1400);
        m.node(1400, 3, 4, 40, 0);
        let tree = InlineTree::read(&m.0[..], 4);
        assert_eq!(tree.nodes.len(), 6);
        assert_eq!(tree.damaged, 0);
        let mut c = Collector::new(4);
        tree.replay(&mut c, |n| n.self_cost, None, None, None);
        c.finish_at(c.last());
        let f = c.functions();
        assert_eq!(f[1].calls, 3);
        assert_eq!(f[1].self_time, 30);
        // Outermost activation of f: its self, the inner f's, g's and h's.
        assert_eq!(f[1].inclusive, 100);
        assert_eq!((f[2].calls, f[3].calls), (3, 4));
        assert_eq!(f[0].inclusive, 105);
        assert_eq!(c.root_inclusive(), 105);
        let recursive = c
            .edges()
            .iter()
            .find(|e| e.caller == 1 && e.callee == 1)
            .unwrap();
        assert_eq!((recursive.calls, recursive.inclusive), (2, 20));
    }

    #[test]
    fn sites_split_edges_and_overflow_nodes_count() {
        let mut m = Memory::new();
        m.link(A::ROOT, 0, 1024);
        m.node(1024, 0, 1, 1, 2);
        m.link(1024, 0, 1100);
        m.node(1100, 1, 2, 2, 0);
        m.link(1024, 1, 1200);
        m.node(1200, 1, 5, 5, 0);
        // Function 1 overflowed too: 7 more calls with no context.
        m.put32(A::OVERFLOW_TABLE + 4, 1300);
        m.node(1300, 1, 7, 7, 0);
        let tree = InlineTree::read(&m.0[..], 2);
        assert_eq!(tree.overflow_calls(), 7);
        let sites = HashMap::from([(0, vec![0x10, 0x1c])]);
        let mut c = Collector::new(2);
        tree.replay(&mut c, |n| n.self_cost, Some(&sites), None, None);
        assert_eq!(c.functions()[1].calls, 14);
        let by_site: Vec<_> = c
            .edges()
            .iter()
            .filter(|e| e.caller == 0)
            .map(|e| (e.site, e.calls))
            .collect();
        assert_eq!(by_site, [(Some(0x10), 2), (Some(0x1c), 5)]);
    }

    #[test]
    fn bad_links_are_counted_not_followed() {
        let mut m = Memory::new();
        m.link(A::ROOT, 0, 1024);
        m.node(1024, 0, 1, 1, 1);
        m.link(1024, 0, 1024); // a cycle
        m.put32(A::OVERFLOW_TABLE, 9000); // outside the memory
        let tree = InlineTree::read(&m.0[..], 1);
        assert_eq!(tree.nodes.len(), 2);
        assert_eq!(tree.damaged, 2);
    }
}
