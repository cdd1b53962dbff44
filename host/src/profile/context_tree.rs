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
    children: Vec<u32>,
    active: u32,
}

/// The tree, and which node each function has on the current path.
#[derive(Debug, Clone)]
pub struct ContextTree {
    nodes: Vec<ContextNode>,
    /// Per function: its node on the current path, or `NONE`.
    on_path: Vec<u32>,
}

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
                let found = self.nodes[parent as usize]
                    .children
                    .iter()
                    .copied()
                    .find(|&c| self.nodes[c as usize].function == function);
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
                    self.nodes[parent as usize].children.push(node);
                    node
                });
                self.on_path[function as usize] = node;
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
