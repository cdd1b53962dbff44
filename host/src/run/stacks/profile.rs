//! From stack mode's samples to a [`Profile`]: the sampled stacks become a tree of calling
//! contexts, each with the time of the ticks that ended there, replayed into a collector
//! (each context entered once, its own time passing before its callees') so that functions,
//! edges and contexts get their self and inclusive times by the same rules as every mode,
//! recursion included. Calls are the functions' and the edges' own, when the module counted
//! them (see [`crate::run::stacks::entry_counts`]); contexts have none (their `calls` are
//! 0). An edge no tick saw is in the profile with its calls and no time.

use std::collections::{BTreeMap, HashMap};

use crate::profile::{Ending, FunctionInfo, InstrumentationStats, ModuleRef, Profile};
use crate::run::collector::{Collector, PS_PER_NS, ROOT};
use crate::run::stacks::entry_counts::EntryCounts;
use crate::run::stacks::StackSamples;

/// The name profiles give stack mode.
pub const MODE: &str = crate::settings::Mode::STACK_NAME;

/// A node of the tree of sampled stacks.
#[derive(Default)]
struct Node {
    function: u32,
    self_ns: u64,
    children: BTreeMap<u32, usize>,
}

/// The profile of a run sampled in stack mode: `functions` name the module's functions;
/// `calls`, each function's and edge's calls, when they were counted.
pub fn profile_of_stacks(
    module: ModuleRef,
    functions: &[FunctionInfo],
    samples: &StackSamples,
    calls: Option<&EntryCounts>,
    ending: Ending,
) -> Profile {
    let mut nodes = vec![Node::default()];
    for ((path, _), &ns) in &samples.time {
        let mut at = 0;
        for &function in path {
            let next = nodes.len();
            at = *nodes[at].children.entry(function).or_insert(next);
            if at == next {
                nodes.push(Node {
                    function,
                    ..Node::default()
                });
            }
        }
        nodes[at].self_ns += ns;
    }
    let known = functions.len().max(1 + max_function(&nodes));
    let mut collector = Collector::new(known);
    let mut now = 0u64;
    replay(&nodes, 0, &mut collector, &mut now);
    collector.finish_at(now);
    if let Some(calls) = calls {
        add_calls(&mut collector, calls);
    }
    let mut profile = crate::run::profile_of_run(
        module,
        functions,
        InstrumentationStats::default(),
        wprof_agent::ProbeMode::Sample,
        &collector,
        ending,
    );
    profile.mode = MODE.to_string();
    profile
}

/// Each function's calls, and each edge's when they were counted: the calls of a function
/// that no counted edge brings came from outside the module (the engine calling an export,
/// a thread's entry), along the root's edge.
fn add_calls(collector: &mut Collector, calls: &EntryCounts) {
    for &(id, n) in &calls.functions {
        collector.add_function_calls(id, n);
    }
    let Some(edges) = &calls.edges else {
        return;
    };
    let mut brought: HashMap<u32, u64> = HashMap::new();
    for &(caller, callee, n) in &edges.edges {
        collector.add_edge_calls(caller, callee, n);
        *brought.entry(callee).or_default() += n;
    }
    for &(id, n) in &calls.functions {
        let from_outside = n.saturating_sub(brought.get(&id).copied().unwrap_or(0));
        if from_outside > 0 {
            collector.add_edge_calls(ROOT, id, from_outside);
        }
    }
}

fn max_function(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .skip(1)
        .map(|n| n.function as usize)
        .max()
        .unwrap_or(0)
}

/// Enters node `at`'s function (not the root's), lets its own time pass, its children's,
/// and leaves it, in picoseconds from `now`.
fn replay(nodes: &[Node], at: usize, collector: &mut Collector, now: &mut u64) {
    let node = &nodes[at];
    if at != 0 {
        collector.enter_counted_at(node.function, 0, *now);
    }
    *now += node.self_ns * PS_PER_NS;
    for &child in node.children.values() {
        replay(nodes, child, collector, now);
    }
    if at != 0 {
        collector.exit_at(node.function, *now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn functions() -> Vec<FunctionInfo> {
        ["fd_write", "_start", "main", "work"]
            .iter()
            .enumerate()
            .map(|(id, name)| FunctionInfo {
                id: id as u32,
                name: name.to_string(),
                kind: if id == 0 { "import" } else { "local" }.to_string(),
            })
            .collect()
    }

    #[test]
    fn stacks_become_self_and_inclusive_times_without_calls() {
        let mut samples = StackSamples::default();
        samples.time.insert((vec![1, 2, 3], None), 600);
        samples.time.insert((vec![1, 2], None), 300);
        samples.time.insert((vec![1, 2, 0], None), 100);
        // Recursion: work calling work counts once in work's inclusive time.
        samples.time.insert((vec![1, 2, 3, 3], None), 50);
        let profile = profile_of_stacks(
            ModuleRef {
                path: "m.wasm".to_string(),
                blake3: String::new(),
            },
            &functions(),
            &samples,
            None,
            Ending {
                exit_code: 0,
                trap: None,
                wall_time: 2000,
                sampling: None,
            },
        );
        assert_eq!(profile.mode, MODE);
        assert_eq!(profile.total, 1050);
        let f = |name: &str| profile.functions.iter().find(|f| f.name == name).unwrap();
        assert_eq!((f("work").self_time, f("work").inclusive), (650, 650));
        assert_eq!((f("main").self_time, f("main").inclusive), (300, 1050));
        assert_eq!(
            (f("fd_write").self_time, f("fd_write").inclusive),
            (100, 100)
        );
        assert_eq!(f("_start").inclusive, 1050);
        assert!(profile.functions.iter().all(|f| f.calls == 0));
        assert!(profile.edges.iter().all(|e| e.calls == 0));
        let problems = profile.violations();
        assert!(problems.is_empty(), "{problems:?}");
    }
}
