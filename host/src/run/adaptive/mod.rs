//! Adaptive mode (`--mode adaptive`, see [`wprof_agent::ContextArena::TIMER`]): sample
//! mode's exact counts and sampled times, and timers that the [`walker`] sets along the
//! paths to the hot spots while the program runs, which the [`stopwatch`] reads, less what
//! [`calibrate`] measured they cost. [`timers`] is the contexts' timers; [`live_tree`] the
//! tree memory read while the program runs. [`record`] turns what was timed into the
//! profile's record.

pub mod calibrate;
pub mod live_tree;
pub mod stopwatch;
pub mod timers;
pub mod walker;

use std::collections::HashMap;

use crate::profile::{AdaptiveRecord, TimedContext};
use crate::run::collector::PS_PER_NS;
use crate::run::inline::tree::InlineTree;

use stopwatch::{NodeTimes, TimerCost};
use walker::Walks;

pub use crate::settings::AdaptiveSettings;

/// The profile's record of the walks and the timed activations, in terms of `tree` (read
/// when the program ended), whose sampled self time per node is `sampled_ps`.
pub fn record(
    settings: AdaptiveSettings,
    cost: TimerCost,
    walks: &Walks,
    times: &HashMap<u32, NodeTimes>,
    unfinished: u64,
    tree: &InlineTree,
    sampled_ps: impl Fn(u32) -> u64,
) -> AdaptiveRecord {
    let index = tree.index_by_address();
    // Inclusive sampled time per node: children come after their parents.
    let mut inclusive: Vec<u64> = tree.nodes.iter().map(|n| sampled_ps(n.address)).collect();
    for i in (1..tree.nodes.len()).rev() {
        let parent = tree.nodes[i].parent;
        if parent != i {
            inclusive[parent] += inclusive[i];
        }
    }
    let stack = |mut i: usize| {
        let mut functions = Vec::new();
        while i != 0 {
            functions.push(tree.nodes[i].function);
            let parent = tree.nodes[i].parent;
            if parent == i {
                break;
            }
            i = parent;
        }
        functions.reverse();
        functions
    };
    let mut out = AdaptiveRecord {
        calls_per_step: u64::from(settings.calls),
        max_timers: settings.timers,
        steps: walks.steps,
        unfinished,
        timer_cost_ns: (cost.inside_ps + cost.outside_ps) / PS_PER_NS,
        contexts: Vec::new(),
        paths: Vec::new(),
    };
    let mut placed: HashMap<u32, u32> = HashMap::new();
    let mut place = |address: u32, out: &mut AdaptiveRecord| -> Option<u32> {
        if let Some(&at) = placed.get(&address) {
            return Some(at);
        }
        let &i = index.get(&address)?;
        let node = &tree.nodes[i];
        let t = times.get(&address).copied().unwrap_or_default();
        let resolved = t.timed > 0
            && t.total_ps / t.timed
                >= AdaptiveRecord::RESOLUTION * (cost.inside_ps + cost.outside_ps);
        out.contexts.push(TimedContext {
            inclusive_ns: resolved.then(|| {
                (u128::from(t.total_ps) * u128::from(node.calls)
                    / u128::from(t.timed)
                    / u128::from(PS_PER_NS)) as u64
            }),
            stack: stack(i),
            calls: node.calls,
            sampled_ns: inclusive[i] / PS_PER_NS,
            timed: t.timed,
            timed_ns: t.total_ps / PS_PER_NS,
            min_ns: (t.timed > 0).then_some(t.min_ps / PS_PER_NS),
            max_ns: (t.timed > 0).then_some(t.max_ps / PS_PER_NS),
        });
        let at = out.contexts.len() as u32 - 1;
        placed.insert(address, at);
        Some(at)
    };
    // A walk that found a hot spot again in a later round: one path, the longest.
    let mut by_spot: Vec<&Vec<u32>> = Vec::new();
    for path in &walks.paths {
        match by_spot.iter_mut().find(|p| p.first() == path.first()) {
            Some(p) if p.len() < path.len() => *p = path,
            Some(_) => {}
            None => by_spot.push(path),
        }
    }
    for path in by_spot {
        let placed_path: Vec<u32> = path.iter().filter_map(|&a| place(a, &mut out)).collect();
        if !placed_path.is_empty() {
            out.paths.push(placed_path);
        }
    }
    // Other contexts of the functions timed.
    let mut others: Vec<u32> = times.keys().copied().collect();
    others.sort_unstable();
    for address in others {
        place(address, &mut out);
    }
    out
}
/// A component's record so far (`None` before its first module) with `record`, one
/// module's, whose function ids start at `offset` in the component: contexts and walks
/// side by side, steps and unfinished activations added up.
pub fn merged(
    so_far: Option<AdaptiveRecord>,
    mut record: AdaptiveRecord,
    offset: u32,
) -> AdaptiveRecord {
    for context in &mut record.contexts {
        for id in &mut context.stack {
            *id += offset;
        }
    }
    let Some(mut out) = so_far else {
        return record;
    };
    let first = out.contexts.len() as u32;
    out.steps += record.steps;
    out.unfinished += record.unfinished;
    out.contexts.extend(record.contexts);
    out.paths.extend(
        record
            .paths
            .into_iter()
            .map(|path| path.into_iter().map(|i| i + first).collect()),
    );
    out
}
