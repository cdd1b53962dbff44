//! Sample mode: which node of the module's calling-context tree each reading's time belongs
//! to, from the current-node cell and what the program counter says ran.
//!
//! The cell names the context the probes entered last; the program counter names the
//! function running. They disagree after a call returns (the module stores the cell at
//! entry, not after each return, which would cost a store per call): the reading belongs to
//! the nearest ancestor of the cell's node running that function. They also disagree at a
//! function's start, before its entry probe stores its node (in a function of a few
//! instructions, most of its time): the reading belongs to the child for that function of
//! the cell's node or, when the caller had called others since it last stored the cell, of
//! the nearest ancestor.
//! Time in wprof's own code (the node finder, and the probes' instructions inside the
//! module's functions, told apart by the module's `wprof.probe-code` section; see
//! [`crate::run::inline::sampler::Samples::resolve`]) is left out: the uninstrumented program
//! never spends it. Time outside the module (the engine, a host function) stays with the
//! cell, which names the import while the host runs one.

use std::collections::HashMap;

use crate::run::code::map::Running;
use crate::run::inline::sampler::Samples;
use crate::run::inline::scripts::Scripted;
use crate::run::inline::tree::InlineTree;

/// The readings' time by node, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Picoseconds per node address.
    pub time: HashMap<u32, u64>,
    /// Picoseconds in wprof's own code, charged to no node.
    pub probe_ps: u64,
    /// Picoseconds the program counter moved to another node than the cell's.
    pub moved_ps: u64,
    /// Picoseconds whose function has no node near the cell's (charged to the cell's).
    pub unmatched_ps: u64,
    /// Picoseconds in functions whose switch was off (live probes), charged to the node
    /// they were called from.
    pub switched_off_ps: u64,
    /// The part of `time` whose ticks walked an interpreted language's frames, per node
    /// (its index in the tree) and language stack (see [`crate::run::inline::scripts`]).
    pub scripted: HashMap<(usize, u32), Scripted>,
}

/// Where a reading's time goes.
enum Charge {
    /// To the node (an index), found as the field of [`Attribution`] says.
    Node(usize, How),
    /// To wprof's own code.
    Probe,
}

/// How a reading's node was found.
enum How {
    /// The cell's.
    Cell,
    /// A function switched off: its caller's.
    SwitchedOff,
    /// Moved to where the program counter was.
    Moved,
    /// The program counter's function was nowhere near: the cell's.
    Unmatched,
}

/// Charges `samples` to the nodes of `tree`.
pub fn attribute(tree: &InlineTree, samples: &Samples) -> Attribution {
    let by_address = tree.index_by_address();
    // A function left without probes stores the slot it was reached through, inside its
    // caller's node: the node with the nearest address below.
    let mut starts: Vec<(u32, usize)> = by_address.iter().map(|(&a, &i)| (a, i)).collect();
    starts.sort_unstable();
    let containing = |cell: u32| {
        let at = starts.partition_point(|&(a, _)| a <= cell);
        at.checked_sub(1).map(|at| starts[at].1)
    };
    let charge = |cell: u32, running: Option<Running>| {
        if cell & 1 == 1 && running != Some(Running::Probe) {
            // A function whose switch is off: its caller's, wherever the counter is.
            return Charge::Node(containing(cell & !1).unwrap_or(0), How::SwitchedOff);
        }
        let node = by_address
            .get(&cell)
            .copied()
            .or_else(|| containing(cell))
            .unwrap_or(0);
        match running {
            None | Some(Running::Outside) => Charge::Node(node, How::Cell),
            Some(Running::Probe) => Charge::Probe,
            Some(Running::Function(f)) if tree.nodes[node].function == f => {
                Charge::Node(node, How::Cell)
            }
            Some(Running::Function(f)) => match nearest(tree, node, f) {
                Some(found) => Charge::Node(found, How::Moved),
                None => Charge::Node(node, How::Unmatched),
            },
        }
    };
    let mut out = Attribution::default();
    for (&(cell, running), &ps) in &samples.time {
        let (node, how) = match charge(cell, running) {
            Charge::Node(node, how) => (node, how),
            Charge::Probe => {
                out.probe_ps += ps;
                continue;
            }
        };
        match how {
            How::Cell => {}
            How::SwitchedOff => out.switched_off_ps += ps,
            How::Moved => out.moved_ps += ps,
            How::Unmatched => out.unmatched_ps += ps,
        }
        *out.time.entry(tree.nodes[node].address).or_default() += ps;
    }
    for (&((cell, running), stack), &figures) in &samples.scripted {
        if let Charge::Node(node, _) = charge(cell, running) {
            out.scripted.entry((node, stack)).or_default().add(figures);
        }
    }
    out
}

/// The node running `function` nearest to `node`, the node entered last: its nearest
/// ancestor running `function` (a callee returned into it), else the child for `function`
/// of `node` or of its nearest ancestor that has one (entered, its entry probe not yet run:
/// the node's own call, or a later call of an ancestor whose other callees returned). Of
/// several children for `function` (several call sites), the one with the most calls.
fn nearest(tree: &InlineTree, node: usize, function: u32) -> Option<usize> {
    let ancestors =
        || std::iter::successors(Some(node), |&at| (at != 0).then(|| tree.nodes[at].parent));
    if let Some(found) = ancestors()
        .skip(1)
        .find(|&at| tree.nodes[at].function == function)
    {
        return Some(found);
    }
    ancestors().find_map(|at| {
        tree.nodes[at]
            .children
            .iter()
            .map(|&(_, c)| c)
            .filter(|&c| tree.nodes[c].function == function)
            .max_by_key(|&c| tree.nodes[c].calls)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::inline::tree::InlineNode;

    fn node(address: u32, function: u32, calls: u64, parent: usize) -> InlineNode {
        InlineNode {
            address,
            function,
            calls,
            self_cost: 0,
            parent,
            children: Vec::new(),
        }
    }

    /// root -> main(0) @100 -> f(1) @200 -> g(2) @300; main -> g @400 (another site).
    fn tree() -> InlineTree {
        let mut nodes = vec![
            node(32, u32::MAX, 0, 0),
            node(100, 0, 1, 0),
            node(200, 1, 5, 1),
            node(300, 2, 50, 2),
            node(400, 2, 7, 1),
        ];
        nodes[0].children = vec![(0, 1)];
        nodes[1].children = vec![(0, 2), (1, 4)];
        nodes[2].children = vec![(0, 3)];
        InlineTree {
            nodes,
            overflow: Vec::new(),
            damaged: 0,
        }
    }

    #[test]
    fn the_program_counter_moves_time_to_the_child_or_ancestor_running() {
        let samples = Samples {
            time: HashMap::from([
                // The cell and the code agree.
                ((200, Some(Running::Function(1))), 10),
                // g started, its entry probe not yet run: f's child for g.
                ((200, Some(Running::Function(2))), 20),
                // g returned into main (or main caught g's exception) before main stored.
                ((300, Some(Running::Function(0))), 30),
                // The node finder: left out.
                ((100, Some(Running::Probe)), 40),
                // The engine, or no answer: the cell.
                ((300, Some(Running::Outside)), 50),
                ((400, None), 60),
                // A function nowhere near: stays with the cell, counted.
                ((300, Some(Running::Function(9))), 70),
                // g returned into f, which runs on; g's own call to f (a child) is not it.
                ((300, Some(Running::Function(1))), 80),
                // g (@400) returned into main, which has entered f since.
                ((400, Some(Running::Function(1))), 90),
            ]),
            readings: 9,
            answered: 8,
            ..Samples::default()
        };
        let mut t = tree();
        t.nodes.push(node(600, 1, 1, 3));
        t.nodes[3].children.push((0, 5));
        let a = attribute(&t, &samples);
        assert_eq!(a.probe_ps, 40);
        assert_eq!(a.moved_ps, 20 + 30 + 80 + 90);
        assert_eq!(a.unmatched_ps, 70);
        assert_eq!(a.time[&200], 10 + 80 + 90);
        assert!(!a.time.contains_key(&600));
        assert_eq!(a.time[&300], 20 + 50 + 70);
        assert_eq!(a.time[&100], 30);
        assert_eq!(a.time[&400], 60);
        let charged: u64 = a.time.values().sum();
        assert_eq!(charged + a.probe_ps, samples.time.values().sum::<u64>());
    }

    #[test]
    fn a_tagged_slot_is_its_node_whatever_runs() {
        // A function whose switch is off, called from f (@200) through slot 0, and which has
        // a node of its own (g @300, from when it was on): the time is f's.
        let samples = Samples {
            time: HashMap::from([
                ((233, Some(Running::Function(2))), 5),
                ((233, Some(Running::Outside)), 7),
                ((233, Some(Running::Probe)), 1),
            ]),
            readings: 3,
            answered: 3,
            ..Samples::default()
        };
        let a = attribute(&tree(), &samples);
        assert_eq!(a.time[&200], 12);
        assert_eq!(a.switched_off_ps, 12);
        assert_eq!(a.probe_ps, 1);
    }

    #[test]
    fn a_slot_address_in_the_cell_is_its_node() {
        // An excluded function called from f (@200) stored f's slot 1 (@200 + 32 + 4).
        let samples = Samples {
            time: HashMap::from([((236, Some(Running::Function(7))), 5)]),
            readings: 1,
            answered: 1,
            ..Samples::default()
        };
        let a = attribute(&tree(), &samples);
        assert_eq!(a.time[&200], 5);
    }

    #[test]
    fn of_several_children_the_busiest_gets_the_time() {
        let mut t = tree();
        // main's site 1 also reaches f (an indirect call), more often than site 0.
        t.nodes.push(node(500, 1, 9, 1));
        t.nodes[1].children.push((1, 5));
        let samples = Samples {
            time: HashMap::from([((100, Some(Running::Function(1))), 5)]),
            readings: 1,
            answered: 1,
            ..Samples::default()
        };
        assert_eq!(attribute(&t, &samples).time[&500], 5);
    }
}
