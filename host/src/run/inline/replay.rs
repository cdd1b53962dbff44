//! The end of a thread's run in the inline modes: the module's calling-context tree, read
//! from its memory, replayed into the thread's collector with each context's cost or
//! sampled time; in an interpreter, the script's frames the ticks walked put in the
//! contexts (see [`crate::run::inline::scripts`]).

use std::collections::HashMap;

use wasmtime::Store;
use wprof_agent::ContextArena;

use crate::languages::Interpreter;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::host_state::HostState;
use crate::run::inline::attribution::Attribution;
use crate::run::inline::sampler::Samples;
use crate::run::inline::scripts::{ScriptStacks, Scripted, SharedScripts};
use crate::run::inline::tree::InlineTree;
use crate::run::stacks::languages::{place, LANGUAGE_FUNCTION};

/// What replaying a thread's tree gives besides the collector's totals.
pub(crate) struct Replayed {
    pub tree: InlineTree,
    /// Sample and adaptive mode: where the samples' time went.
    pub attribution: Option<Attribution>,
}

/// Inline modes: replays the module's tree into the collector, with each context's self
/// cost (cost mode) or sampled time (sample and adaptive mode, where the samples'
/// attribution is returned, and the language frames the ticks walked in the interpreter
/// are put in the contexts, their functions numbered in the run's `scripts`); and the
/// tree.
pub(crate) fn replay_tree(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    samples: Option<&Samples>,
    interpreter: Option<(&Interpreter, &SharedScripts)>,
) -> Option<Replayed> {
    let memory = instance.get_memory(&mut *store, ContextArena::MEMORY)?;
    let (data, state) = memory.data_and_store_mut(&mut *store);
    let host = state.host.as_ref().map(|h| h.by_node());
    let allocs = state.allocs.as_mut().map(|t| t.with(|t| t.by_node()));
    let collector = state.collector.as_mut()?;
    let tree = InlineTree::read(data, collector.functions().len() as u32);
    if tree.damaged > 0 {
        tracing::warn!(
            links = tree.damaged,
            "the module's context tree has bad links"
        );
    }
    if !tree.overflow.is_empty() {
        crate::say!(
            "wprof: warning: the program made more calling contexts than wprof keeps ({} MiB); \
             {} calls are counted without their context",
            ContextArena::LIMIT >> 20,
            tree.overflow_calls()
        );
    }
    let sites = collector.take_call_site_offsets();
    let attribution = match samples {
        Some(samples) => {
            let attribution = crate::run::inline::attribution::attribute(&tree, samples);
            tracing::info!(
                probe_ps = attribution.probe_ps,
                moved_ps = attribution.moved_ps,
                unmatched_ps = attribution.unmatched_ps,
                "samples attributed"
            );
            let scripts = samples.script_stacks.as_deref().zip(interpreter);
            let scripted = match scripts {
                Some(_) => scripted_by_node(&tree, &attribution),
                None => Default::default(),
            };
            tree.replay(
                collector,
                |n| {
                    let time = attribution.time.get(&n.address).copied().unwrap_or(0);
                    time.saturating_sub(scripted.get(&n.address).copied().unwrap_or(0))
                },
                sites.as_ref(),
                host,
                allocs.as_ref(),
            );
            if let Some((stacks, (interpreter, shared))) = scripts {
                replay_scripts(&tree, &attribution, stacks, interpreter, shared, collector);
            }
            Some(attribution)
        }
        None => {
            tree.replay(
                collector,
                |n| n.self_cost,
                sites.as_ref(),
                host,
                allocs.as_ref(),
            );
            None
        }
    };
    Some(Replayed { tree, attribution })
}

/// The time of each context of `tree` (by address) that [`replay_scripts`] replays with
/// language frames.
pub(crate) fn scripted_by_node(tree: &InlineTree, attribution: &Attribution) -> HashMap<u32, u64> {
    let mut by_node: HashMap<u32, u64> = HashMap::new();
    for (&(node, _), figures) in &attribution.scripted {
        *by_node.entry(tree.nodes[node].address).or_default() += figures.ps;
    }
    by_node
}

/// Replays into `collector` (its native tree replayed, the time of [`scripted_by_node`]
/// left out) each context's time with language frames (see [`script_paths`]). The
/// script's functions get ids after the module's (their index in the run's `shared`
/// numbering after the collector's functions), which
/// [`crate::run::stacks::languages::merge_one`] gives them in the profile.
fn replay_scripts(
    tree: &InlineTree,
    attribution: &Attribution,
    stacks: &ScriptStacks,
    interpreter: &Interpreter,
    shared: &SharedScripts,
    collector: &mut Collector,
) {
    let first_id = collector.functions().len() as u32;
    let paths = script_paths(tree, attribution, stacks, interpreter, shared);
    replay_paths(collector, paths, 0, first_id);
}

/// A calling context with language frames and its time in picoseconds: the path's native
/// functions by the module's ids, the script's as [`LANGUAGE_FUNCTION`] and their index in
/// the run's [`SharedScripts`].
pub(crate) type ScriptPath = (Vec<u32>, u64);

/// Each context's time with language frames, on the context's path with the frames of
/// `stacks` put in place of `interpreter`'s eval frames; what the thread learnt, with the
/// script's lines' time (in nanoseconds, by [`LANGUAGE_FUNCTION`] ids), is added to
/// `shared`, which numbers the script's functions.
pub(crate) fn script_paths(
    tree: &InlineTree,
    attribution: &Attribution,
    stacks: &ScriptStacks,
    interpreter: &Interpreter,
    shared: &SharedScripts,
) -> Vec<ScriptPath> {
    let mut learnt = stacks.samples.clone();
    // In a stable order: the collector's contexts are made in it.
    let mut scripted: Vec<(&(usize, u32), &Scripted)> = attribution.scripted.iter().collect();
    scripted.sort_unstable_by_key(|(&key, _)| key);
    // The paths first, by the thread's own indices: the functions are numbered in the
    // run's once the thread has learnt them all.
    let mut paths = Vec::with_capacity(scripted.len());
    for (&(node, stack), figures) in scripted {
        let Some(stack) = stacks.stacks.get(stack as usize - 1) else {
            continue;
        };
        let mut path: Vec<u32> =
            std::iter::successors(Some(node), |&at| (at != 0).then(|| tree.nodes[at].parent))
                .take_while(|&at| at != 0)
                .map(|at| tree.nodes[at].function)
                .collect();
        path.reverse();
        let on_script = place::place(
            interpreter,
            &mut learnt,
            &mut path,
            &stack.frames,
            stack.truncated,
            figures.ticks,
        );
        if let (true, Some(line), Some(&innermost)) = (on_script, stack.line, path.last()) {
            *learnt.lines.entry((innermost, line)).or_default() += figures.ps / PS_PER_NS;
        }
        paths.push((path, figures.ps));
    }
    let shared_index = shared.add(learnt);
    for (path, _) in &mut paths {
        for f in path.iter_mut().filter(|f| **f & LANGUAGE_FUNCTION != 0) {
            *f = LANGUAGE_FUNCTION | shared_index[(*f & !LANGUAGE_FUNCTION) as usize];
        }
    }
    paths
}

/// Replays `paths` (see [`script_paths`]) into `collector` after what it holds: each
/// native function as its id plus `offset`, each of the script's as `first_id` plus its
/// shared index. The script's functions get time and no calls (the module counts native
/// calls only).
pub(crate) fn replay_paths(
    collector: &mut Collector,
    paths: Vec<ScriptPath>,
    offset: u32,
    first_id: u32,
) {
    let mut now = collector.last();
    for (mut path, ps) in paths {
        for f in path.iter_mut() {
            *f = match *f & LANGUAGE_FUNCTION != 0 {
                true => first_id + (*f & !LANGUAGE_FUNCTION),
                false => *f + offset,
            };
        }
        for &f in &path {
            collector.enter_counted_at(f, 0, now);
        }
        now += ps;
        for &f in path.iter().rev() {
            collector.exit_at(f, now);
        }
    }
}
