//! Hot-path walking: on the sampler's thread, every tick, find the context where samples
//! see the most self time, time its activations for a step, then its caller's, one level
//! at a time up to the root, with at most a few contexts timed at once.
//!
//! A step arms a fifth of its budget of timed activations at a time, the next fifth at the
//! first tick after the stopwatch disarmed the last one, so that a step's activations come
//! from a few moments rather than one. A step ends when its budget is spent, when its
//! context stops being entered (its count has not moved for a few ticks: an activation
//! that started untimed, such as `main`'s, is never timed), or after a longest wait. When no hot context is left to walk, timing stops; a while later the
//! samples of that while choose the hot spots again, so that a program's later phases are
//! walked too.

use std::collections::{HashMap, HashSet};
use wprof_agent::ContextArena as A;

use crate::run::inline::sampler::Watch;
use crate::run::inline::tree::{InlineTree, TreeBytes};

use super::live_tree::LiveTree;
use super::timers::Timers;
use super::AdaptiveSettings;

/// Picoseconds between two ticks.
const TICK_PS: u64 = 10_000_000_000;
/// Ticks a step's timed activations are spread over, at least: each tick arms a portion.
const SPREAD_TICKS: u32 = 5;
/// Ticks a step waits at most.
const STEP_TICKS: u64 = 50;
/// Ticks without a new activation of the step's context after which it gives up.
const STILL_TICKS: u64 = 3;
/// Ticks with nothing to walk before the hot spots are chosen again.
const ROUND_TICKS: u64 = 100;
/// Ticks between two readings of the tree for the samples' sake (steps read it when they
/// need a parent they do not know).
const REREAD_TICKS: u64 = 10;
/// The least share of the sampled self time that makes a context a hot spot, in parts per
/// thousand, and the least self time, in picoseconds (a few early samples make no spot).
const HOT_PERMILLE: u64 = 10;
const HOT_LEAST_PS: u64 = 2_000_000_000;

/// A step under way: a walk's current context, timed.
#[derive(Debug, Clone, Copy)]
struct Step {
    walk: usize,
    node: u32,
    started: u64,
    /// Activations still to time after the portion armed now.
    left: u32,
    /// The context's activations when last seen, and the tick they last moved.
    calls: u64,
    moved: u64,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Its budget of timed activations is spent.
    Spent,
    /// Its context was not entered for a while.
    Still,
    /// It waited as long as a step may.
    Waited,
}

/// The walker's state.
#[derive(Debug)]
pub struct Walker {
    timers: Timers,
    tree: LiveTree,
    functions: u32,
    settings: AdaptiveSettings,
    /// Sampled self time per context (node address) in this round, picoseconds.
    hot: HashMap<u32, u64>,
    /// All sampled time in this round.
    sampled_ps: u64,
    next_tick: Option<u64>,
    ticks: u64,
    /// Node address -> its parent's, as of the last reading of the tree.
    parents: HashMap<u32, u32>,
    /// Every node read, the root's too, as (address, end of its slots), by address.
    spans: Vec<(u32, u32)>,
    /// (node address, function) -> the node's child running that function.
    children: HashMap<(u32, u32), u32>,
    parents_read: Option<u64>,
    active: Vec<Step>,
    /// Contexts walked in this round.
    walked: HashSet<u32>,
    /// Every walk: node addresses, the hot spot first.
    walks: Vec<Vec<u32>>,
    steps: u64,
    idle: u64,
}

/// What the walks did.
#[derive(Debug, Clone, Default)]
pub struct Walks {
    /// Node addresses, the hot spot first, then its callers upward.
    pub paths: Vec<Vec<u32>>,
    /// Steps taken.
    pub steps: u64,
}

impl Walker {
    /// A walker arming the timers of the tree of a module with `functions` functions.
    pub fn new(tree: LiveTree, functions: u32, settings: AdaptiveSettings) -> Self {
        Walker {
            timers: Timers::new(tree),
            tree,
            functions,
            settings,
            hot: HashMap::new(),
            sampled_ps: 0,
            next_tick: None,
            ticks: 0,
            parents: HashMap::new(),
            spans: Vec::new(),
            children: HashMap::new(),
            parents_read: None,
            active: Vec::new(),
            walked: HashSet::new(),
            walks: Vec::new(),
            steps: 0,
            idle: 0,
        }
    }

    /// Stops timing; what the walks did.
    pub fn finish(self) -> Walks {
        for step in &self.active {
            self.timers.disarm(step.node);
        }
        Walks {
            paths: self.walks,
            steps: self.steps,
        }
    }

    /// Reads the tree again for parents, at most once a tick.
    fn read_parents(&mut self) {
        if self.parents_read == Some(self.ticks) {
            return;
        }
        self.parents_read = Some(self.ticks);
        let tree = InlineTree::read(&self.tree, self.functions);
        self.parents = tree
            .nodes
            .iter()
            .skip(1)
            .map(|n| (n.address, tree.nodes[n.parent].address))
            .collect();
        self.children = tree
            .nodes
            .iter()
            .skip(1)
            .map(|n| ((tree.nodes[n.parent].address, n.function), n.address))
            .collect();
        self.spans = tree
            .nodes
            .iter()
            .map(|n| {
                let slots = self.tree.u32_at(n.address + A::SLOT_COUNT).unwrap_or(0);
                (n.address, n.address + A::SLOTS + 4 * slots)
            })
            .collect();
        self.spans.sort_unstable();
    }

    /// The node whose slots hold address `cell`, if a node read holds it.
    fn slot_owner(&self, cell: u32) -> Option<u32> {
        let at = self.spans.partition_point(|&(start, _)| start <= cell);
        let (start, end) = *self.spans.get(at.checked_sub(1)?)?;
        (cell >= start + A::SLOTS && cell < end).then_some(start)
    }

    fn parent(&mut self, node: u32) -> Option<u32> {
        if !self.parents.contains_key(&node) {
            self.read_parents();
        }
        self.parents.get(&node).copied()
    }

    fn calls(&self, node: u32) -> u64 {
        self.tree.u64_at(node + A::CALLS).unwrap_or(0)
    }

    /// Times the context at `node` for a step of walk `walk`: only a node read from the
    /// tree (the timer is written in it).
    fn begin(&mut self, walk: usize, node: u32) -> bool {
        if self.parent(node).is_none() {
            return false;
        }
        let portion = self.portion();
        self.timers.arm(node, portion);
        self.steps += 1;
        self.active.push(Step {
            walk,
            node,
            started: self.ticks,
            left: self.settings.calls.saturating_sub(portion),
            calls: self.calls(node),
            moved: self.ticks,
        });
        true
    }

    /// How many activations a step times at once: its budget spread over [`SPREAD_TICKS`].
    fn portion(&self) -> u32 {
        self.settings.calls.div_ceil(SPREAD_TICKS).max(1)
    }

    /// Whether the step is over, and how, updating when its context last moved and arming
    /// its next portion.
    fn over(&self, step: &mut Step) -> Option<Ending> {
        let calls = self.calls(step.node);
        if calls != step.calls {
            step.calls = calls;
            step.moved = self.ticks;
        }
        if !self.timers.armed(step.node) {
            if step.left == 0 {
                return Some(Ending::Spent);
            }
            // The next portion, a tick after the last: a step's timed activations are
            // spread over a few ticks, not one stretch a busy moment could slow.
            let portion = self.portion().min(step.left);
            step.left -= portion;
            self.timers.arm(step.node, portion);
            None
        } else if self.ticks - step.moved >= STILL_TICKS {
            Some(Ending::Still)
        } else if self.ticks - step.started >= STEP_TICKS {
            Some(Ending::Waited)
        } else {
            None
        }
    }

    fn advance(&mut self) {
        let mut steps = std::mem::take(&mut self.active);
        let mut ended = Vec::new();
        steps.retain_mut(|step| match self.over(step) {
            Some(how) => {
                ended.push((*step, how));
                false
            }
            None => true,
        });
        self.active = steps;
        for (step, how) in ended {
            self.timers.disarm(step.node);
            if how == Ending::Still {
                // An activation that never ends while the walk waits: its callers' are
                // older still.
                continue;
            }
            // Up one level, unless the caller is the root or walked already.
            match self.parent(step.node) {
                Some(parent) if parent != A::ROOT && self.walked.insert(parent) => {
                    self.walks[step.walk].push(parent);
                    self.begin(step.walk, parent);
                }
                _ => {}
            }
        }
    }

    /// Whether a step under way will reach `node` going up (it is one of their callers).
    fn above_a_step(&self, node: u32) -> bool {
        self.active.iter().any(|step| {
            let mut at = step.node;
            for _ in 0..64 {
                match self.parents.get(&at) {
                    Some(&parent) if parent == node => return true,
                    Some(&parent) => at = parent,
                    None => return false,
                }
            }
            false
        })
    }

    /// The hottest context not walked in this round nor above a step under way, if hot
    /// enough.
    fn hottest(&self) -> Option<u32> {
        let floor = (self.sampled_ps * HOT_PERMILLE / 1000).max(HOT_LEAST_PS);
        self.hot
            .iter()
            .filter(|(node, ps)| {
                **ps > floor && !self.walked.contains(node) && !self.above_a_step(**node)
            })
            .max_by_key(|(node, ps)| (**ps, std::cmp::Reverse(**node)))
            .map(|(node, _)| *node)
    }

    fn start_walks(&mut self) {
        while self.active.len() < self.settings.timers as usize {
            let Some(node) = self.hottest() else { break };
            self.walked.insert(node);
            self.walks.push(vec![node]);
            let walk = self.walks.len() - 1;
            if !self.begin(walk, node) {
                self.walks.pop();
            }
        }
    }
}

impl Watch for Walker {
    fn ran(&mut self, cell: u32, function: u32, ps: u64) {
        self.sampled_ps += ps;
        let mut node = match self.slot_owner(cell) {
            // A slot: stored by a function leaving with live probes (its caller runs
            // again) or by one without probes, inside the caller's node; a tick in
            // `function` there is in the caller's child for it, if it has one, else in
            // the caller itself.
            Some(caller) => match self.children.get(&(caller, function)) {
                Some(&child) => {
                    *self.hot.entry(child).or_default() += ps;
                    return;
                }
                None if self.tree.function_of(caller) == Some(function) => caller,
                None => return,
            },
            // The cell names the context the probes entered last: the function running,
            // or one of its callees that has returned (see `crate::run::inline::attribution`).
            None => cell,
        };
        for _ in 0..64 {
            match self.tree.function_of(node) {
                Some(f) if f == function => {
                    *self.hot.entry(node).or_default() += ps;
                    return;
                }
                Some(_) => match self.parents.get(&node) {
                    Some(&parent) => node = parent,
                    None => return,
                },
                None => return,
            }
        }
    }

    fn tick(&mut self, now_ps: u64) {
        let next = *self.next_tick.get_or_insert(now_ps + TICK_PS);
        if now_ps < next {
            return;
        }
        self.next_tick = Some(now_ps + TICK_PS);
        self.ticks += 1;
        if self.ticks % REREAD_TICKS == 1 {
            // New contexts appear as the program runs: the samples' ancestors need them.
            self.read_parents();
        }
        self.advance();
        self.start_walks();
        if self.active.is_empty() {
            self.idle += 1;
            if self.idle >= ROUND_TICKS {
                // A new round: the hot spots of the time since.
                self.idle = 0;
                self.walked.clear();
                self.hot.clear();
                self.sampled_ps = 0;
            }
        } else {
            self.idle = 0;
        }
    }
}

/// Adaptive mode: puts a stopwatch in the store that subtracts `cost`, and returns the
/// walker that arms its timers; `None` where the tree's memory could move while the
/// program runs.
pub(crate) fn start(
    store: &mut wasmtime::Store<crate::run::host_state::HostState>,
    instance: &wasmtime::Instance,
    settings: crate::run::adaptive::AdaptiveSettings,
    cost: crate::run::adaptive::stopwatch::TimerCost,
) -> Option<Walker> {
    let functions = store.data().collector.as_ref()?.functions().len() as u32;
    let tree = crate::run::host_state::attach_stopwatch(store, instance, cost)?;
    Some(Walker::new(tree, functions, settings))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A tree memory of three functions: the root's slot -> main (function 2) -> mid
    /// (function 1) -> leaf (function 0).
    struct Memory(Box<[AtomicU64]>);

    const MAIN: u32 = 96;
    const MID: u32 = 128;
    const LEAF: u32 = 168;

    impl Memory {
        fn new() -> Self {
            let m = Memory((0..64).map(|_| AtomicU64::new(0)).collect());
            // The nodes lie past the overflow table and the switches of three functions.
            assert_eq!(A::go_table(3), MAIN);
            m.put(A::ROOT + A::SLOT_COUNT, 1);
            m.put(A::ROOT_SLOT, MAIN);
            for (node, function, child) in [(MAIN, 2, MID), (MID, 1, LEAF), (LEAF, 0, 0)] {
                m.put(node + A::FUNCTION, function + 1);
                m.put(node + A::SLOT_COUNT, u32::from(child != 0));
                if child != 0 {
                    m.put(node + A::SLOTS, child);
                }
            }
            m
        }

        fn put(&self, at: u32, value: u32) {
            let word = &self.0[at as usize / 8];
            let shift = (at % 8) * 8;
            let old = word.load(Ordering::Relaxed);
            let new = (old & !(0xffff_ffffu64 << shift)) | (u64::from(value) << shift);
            word.store(new, Ordering::Relaxed);
        }

        fn count(&self, node: u32) {
            self.0[(node + A::CALLS) as usize / 8].fetch_add(1, Ordering::Relaxed);
        }

        fn tree(&self) -> LiveTree {
            // SAFETY: the box outlives every use in the test and is never moved.
            unsafe {
                LiveTree::new(
                    self.0.as_ptr().cast(),
                    super::super::live_tree::TreeSize::Fixed(self.0.len() as u64 * 8),
                )
            }
        }
    }

    #[test]
    fn a_walk_climbs_from_the_hot_spot_and_ends_at_a_frame_that_never_returns() {
        let memory = Memory::new();
        let tree = memory.tree();
        let timers = Timers::new(tree);
        let settings = AdaptiveSettings {
            calls: 2,
            timers: 1,
        };
        let mut walker = Walker::new(tree, 3, settings);
        // 5 ms in the leaf; the cell names it.
        walker.ran(LEAF, 0, 5_000_000_000);
        walker.tick(0);
        walker.tick(TICK_PS);
        assert!(timers.armed(LEAF) && !timers.armed(MID));
        // The leaf's budget of two comes in portions of one, a tick apart.
        memory.count(LEAF);
        timers.spend(LEAF);
        assert!(!timers.armed(LEAF));
        walker.tick(2 * TICK_PS);
        assert!(timers.armed(LEAF), "the second portion");
        timers.spend(LEAF);
        walker.tick(3 * TICK_PS);
        assert!(timers.armed(MID) && !timers.armed(LEAF), "up to mid");
        // Mid is entered again, then not: its walk waits, then ends without climbing to
        // main.
        memory.count(MID);
        walker.tick(4 * TICK_PS);
        for t in 5..=7 {
            assert!(timers.armed(MID), "tick {t}");
            walker.tick(t * TICK_PS);
        }
        assert!(!timers.armed(MID) && !timers.armed(MAIN));
        let walks = walker.finish();
        assert_eq!(walks.paths, [vec![LEAF, MID]]);
        assert_eq!(walks.steps, 2);
    }

    #[test]
    fn a_context_reached_through_a_returned_callee_is_charged_and_cold_ones_are_not_walked() {
        let memory = Memory::new();
        let timers = Timers::new(memory.tree());
        let mut walker = Walker::new(memory.tree(), 3, AdaptiveSettings::default());
        walker.tick(0);
        walker.tick(TICK_PS);
        // The cell still names the leaf while mid runs: charged to mid once the tree is known.
        walker.ran(LEAF, 1, 3_000_000_000);
        // Below the least self time: never a hot spot.
        walker.ran(MAIN, 2, 1_000_000_000);
        walker.tick(2 * TICK_PS);
        assert!(timers.armed(MID) && !timers.armed(LEAF) && !timers.armed(MAIN));
        assert_eq!(walker.finish().paths, [vec![MID]]);
        assert!(
            !timers.armed(MID),
            "a walker that finishes disarms its steps"
        );
    }

    #[test]
    fn a_tick_under_a_slot_is_the_callees_and_a_hot_caller_waits_for_the_walk_below() {
        let memory = Memory::new();
        let timers = Timers::new(memory.tree());
        let mut walker = Walker::new(memory.tree(), 3, AdaptiveSettings::default());
        walker.tick(0);
        walker.tick(TICK_PS);
        // A cell holding mid's slot (mid's callee left with live probes, or has none): a
        // tick in the leaf is the leaf's under mid, one in mid is mid's.
        walker.ran(MID + A::SLOTS, 0, 5_000_000_000);
        walker.ran(MID + A::SLOTS, 1, 3_000_000_000);
        walker.tick(2 * TICK_PS);
        // Both are hot; mid is the leaf's caller, which the leaf's walk reaches: one walk.
        assert!(timers.armed(LEAF) && !timers.armed(MID));
        assert_eq!(walker.finish().paths, [vec![LEAF]]);
    }
}
