//! The calling-context tree: every distinct path from the root to a function, with calls,
//! self and inclusive time per path.
//!
//! # Bounded for recursion
//!
//! Recursive cycles are collapsed: when a function is entered while it is already on the
//! current path, the new frame is charged to the node already on the path instead of a new,
//! deeper node. `fib` recursing 10 000 deep is one `fib` node under its caller; `even` and
//! `odd` calling each other are two nodes. A node's inclusive time counts its outermost
//! activation only, so self times still add up to the root's inclusive time.

/// Node index of the root (the engine calling the module).
pub const ROOT_NODE: u32 = 0;
const NONE: u32 = u32::MAX;

/// One context: a function reached along one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextNode {
    /// The function (`u32::MAX` for the root).
    pub function: u32,
    /// The parent node (`u32::MAX` for the root).
    pub parent: u32,
    /// Activations charged to this context.
    pub calls: u64,
    /// Self time of those activations.
    pub self_time: i64,
    /// Inclusive time, outermost activations only.
    pub inclusive: i64,
    /// Its children as (function, node), scanned for the callee at an entry while they
    /// are few (see [`ContextTree::wide`]).
    children: Vec<(u32, u32)>,
    active: u32,
}

/// The tree, and which node each function has on the current path.
#[derive(Debug, Clone)]
pub struct ContextTree {
    nodes: Vec<ContextNode>,
    /// Per function: its node on the current path, or `NONE`.
    on_path: Vec<u32>,
    /// The child of each node with more than [`WIDE`] children, by (node, function): a
    /// node that calls hundreds of functions (a C++ program's `main`) is looked up, not
    /// scanned, at each of their calls.
    wide: rustc_hash::FxHashMap<(u32, u32), u32>,
    /// The children found last, by (parent, function) hashed: a loop calling a few
    /// functions finds their nodes here without visiting each parent's list (a cache miss
    /// per call otherwise, on a C++ program of tiny functions in time mode). Nodes never
    /// move, so an entry stays true.
    recent: Box<[(u32, u32, u32)]>,
}

/// Entries in [`ContextTree::recent`] (a power of two).
const RECENT: usize = 4096;

/// Past this many children a node's are found through [`ContextTree::wide`].
const WIDE: usize = 8;

impl Default for ContextTree {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextTree {
    /// A tree holding only the root.
    pub fn new() -> Self {
        Self {
            nodes: vec![ContextNode {
                function: u32::MAX,
                parent: u32::MAX,
                calls: 0,
                self_time: 0,
                inclusive: 0,
                children: Vec::new(),
                active: 0,
            }],
            on_path: Vec::new(),
            wide: rustc_hash::FxHashMap::default(),
            recent: vec![(u32::MAX, u32::MAX, 0); RECENT].into_boxed_slice(),
        }
    }

    /// A frame of `function` opens under the frame whose node is `parent`; returns the node
    /// the new frame is charged to.
    pub fn enter(&mut self, parent: u32, function: u32) -> u32 {
        self.enter_counted(parent, function, 1)
    }

    /// [`ContextTree::enter`] for a frame that stands for `calls` activations (a context
    /// counted by the module itself, replayed once).
    pub fn enter_counted(&mut self, parent: u32, function: u32, calls: u64) -> u32 {
        if self.on_path.len() <= function as usize {
            self.on_path.resize(function as usize + 1, NONE);
        }
        let node = match self.on_path[function as usize] {
            NONE => {
                let slot = (parent.wrapping_mul(0x9e37_79b1) ^ function.wrapping_mul(0x85eb_ca6b))
                    as usize
                    & (RECENT - 1);
                let (p, f, known) = self.recent[slot];
                if p == parent && f == function {
                    self.on_path[function as usize] = known;
                    let n = &mut self.nodes[known as usize];
                    n.calls += calls;
                    n.active += 1;
                    return known;
                }
                let children = &self.nodes[parent as usize].children;
                let found = match children.len() > WIDE {
                    true => self.wide.get(&(parent, function)).copied(),
                    false => children
                        .iter()
                        .find(|&&(f, _)| f == function)
                        .map(|&(_, c)| c),
                };
                let node = found.unwrap_or_else(|| {
                    let node = self.nodes.len() as u32;
                    self.nodes.push(ContextNode {
                        function,
                        parent,
                        calls: 0,
                        self_time: 0,
                        inclusive: 0,
                        children: Vec::new(),
                        active: 0,
                    });
                    let children = &mut self.nodes[parent as usize].children;
                    children.push((function, node));
                    match children.len().cmp(&(WIDE + 1)) {
                        std::cmp::Ordering::Less => {}
                        // Just became wide: every child so far goes in the index.
                        std::cmp::Ordering::Equal => {
                            for &(f, c) in children.iter() {
                                self.wide.insert((parent, f), c);
                            }
                        }
                        std::cmp::Ordering::Greater => {
                            self.wide.insert((parent, function), node);
                        }
                    }
                    node
                });
                self.on_path[function as usize] = node;
                self.recent[slot] = (parent, function, node);
                node
            }
            // Recursion: charge the node already on the path.
            on_path => on_path,
        };
        let n = &mut self.nodes[node as usize];
        n.calls += calls;
        n.active += 1;
        node
    }

    /// The child of `parent` for `function`, if it was ever entered.
    pub fn child(&self, parent: u32, function: u32) -> Option<u32> {
        let children = &self.nodes.get(parent as usize)?.children;
        match children.len() > WIDE {
            true => self.wide.get(&(parent, function)).copied(),
            false => children
                .iter()
                .find(|&&(f, _)| f == function)
                .map(|&(_, c)| c),
        }
    }

    /// Moves `amount` of `parent`'s self time to its child `child` (a leaf, whose
    /// inclusive time grows by as much; every ancestor's stays as it is).
    pub fn move_self(&mut self, parent: u32, child: u32, amount: i64) {
        self.nodes[parent as usize].self_time -= amount;
        let c = &mut self.nodes[child as usize];
        c.self_time += amount;
        c.inclusive += amount;
    }

    /// `calls` more activations charged to `node`, whose frame is already open (a tail
    /// call re-entering it).
    pub fn count_again(&mut self, node: u32, calls: u64) {
        self.nodes[node as usize].calls += calls;
    }

    /// A frame charged to `node` closes.
    pub fn close(&mut self, node: u32, self_time: i64, inclusive: i64) {
        let n = &mut self.nodes[node as usize];
        n.self_time += self_time;
        n.active -= 1;
        if n.active == 0 {
            n.inclusive += inclusive;
            self.on_path[n.function as usize] = NONE;
        }
    }

    /// A frame charged to `node` leaves the stack without closing (a Go goroutine switched
    /// out): it no longer counts as on the path.
    pub fn park(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        n.active -= 1;
        if n.active == 0 && self.on_path[n.function as usize] == node {
            self.on_path[n.function as usize] = NONE;
        }
    }

    /// A parked frame charged to `node` comes back.
    pub fn unpark(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        n.active += 1;
        if self.on_path[n.function as usize] == NONE {
            self.on_path[n.function as usize] = node;
        }
    }

    /// [`ContextTree::close`] for a frame with an outer activation of the same node still
    /// parked: its inclusive time is that activation's.
    pub fn close_inner(&mut self, node: u32, self_time: i64) {
        let n = &mut self.nodes[node as usize];
        n.self_time += self_time;
        n.active -= 1;
        if n.active == 0 && self.on_path[n.function as usize] == node {
            self.on_path[n.function as usize] = NONE;
        }
    }

    /// Adds time to the root's inclusive time (an outermost frame closed).
    pub fn add_root(&mut self, inclusive: i64) {
        self.nodes[ROOT_NODE as usize].inclusive += inclusive;
    }

    /// All nodes, root first; a node's parent always comes before it.
    pub fn nodes(&self) -> &[ContextNode] {
        &self.nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_separate_and_recursion_collapses() {
        let mut t = ContextTree::new();
        let a = t.enter(ROOT_NODE, 0);
        let b_under_a = t.enter(a, 1);
        let b_again = t.enter(b_under_a, 1); // recursion
        assert_eq!(b_again, b_under_a);
        t.close(b_again, 5, 5);
        t.close(b_under_a, 5, 10);
        let c = t.enter(a, 2);
        let b_under_c = t.enter(c, 1);
        assert_ne!(b_under_c, b_under_a);
        t.close(b_under_c, 1, 1);
        t.close(c, 1, 2);
        t.close(a, 3, 15);
        t.add_root(15);
        let n = &t.nodes()[b_under_a as usize];
        assert_eq!((n.calls, n.self_time, n.inclusive), (2, 10, 10));
        let self_sum: i64 = t.nodes().iter().map(|n| n.self_time).sum();
        assert_eq!(self_sum, t.nodes()[0].inclusive);
    }

    #[test]
    fn a_node_with_many_children_finds_each_again() {
        let mut t = ContextTree::new();
        let main = t.enter(ROOT_NODE, 0);
        // Past WIDE children the lookup goes through the index; every one of them, those
        // from before it was built too, is found again, and under another parent apart.
        let first: Vec<u32> = (1..=40).map(|f| t.enter_counted(main, f, 1)).collect();
        for (f, node) in (1..=40).zip(&first) {
            t.close(*node, 0, 0);
            let again = t.enter_counted(main, f, 2);
            assert_eq!(again, *node, "function {f}");
            t.close(again, 0, 0);
        }
        let other = t.enter(ROOT_NODE, 99);
        let elsewhere = t.enter_counted(other, 5, 1);
        assert!(!first.contains(&elsewhere));
        assert!(first.iter().all(|&n| t.nodes()[n as usize].calls == 3));
        assert_eq!(t.nodes().len(), 1 + 1 + 40 + 1 + 1);
    }

    #[test]
    fn deep_recursion_uses_one_node() {
        let mut t = ContextTree::new();
        let mut parent = ROOT_NODE;
        let mut nodes = Vec::new();
        for _ in 0..100_000 {
            parent = t.enter(parent, 7);
            nodes.push(parent);
        }
        assert_eq!(t.nodes().len(), 2);
        for node in nodes.into_iter().rev() {
            t.close(node, 1, 1);
        }
        assert_eq!(t.nodes()[1].calls, 100_000);
    }
}
