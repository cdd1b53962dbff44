//! The end of a thread's run in the inline modes: the module's calling-context tree, read
//! from its memory, replayed into the thread's collector with each context's cost or
//! sampled time.

use wasmtime::Store;
use wprof_agent::ContextArena;

use crate::languages::Interpreter;
use crate::run::host_state::HostState;
use crate::run::inline::attribution::Attribution;
use crate::run::inline::sampler::Samples;
use crate::run::inline::scripts;
use crate::run::inline::tree::InlineTree;
use crate::run::stacks::languages::LanguageSamples;

/// What replaying a thread's tree gives besides the collector's totals.
pub(crate) struct Replayed {
    pub tree: InlineTree,
    /// Sample and adaptive mode: where the samples' time went.
    pub attribution: Option<Attribution>,
    /// In an interpreter whose frames the ticks walked (`interpreter`): what was learnt of
    /// its language (see [`crate::run::inline::scripts`]).
    pub languages: Option<LanguageSamples>,
}

/// Inline modes: replays the module's tree into the collector, with each context's self
/// cost (cost mode) or sampled time (sample and adaptive mode, where the samples'
/// attribution is returned, and the language frames the ticks walked in `interpreter`
/// are put in the contexts); and the tree.
pub(crate) fn replay_tree(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    samples: Option<&Samples>,
    interpreter: Option<&Interpreter>,
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
    let mut languages = None;
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
                Some(_) => scripts::scripted_by_node(&attribution),
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
            if let Some((stacks, interpreter)) = scripts {
                languages = Some(scripts::replay(
                    &tree,
                    &attribution,
                    stacks,
                    interpreter,
                    collector,
                ));
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
    Some(Replayed {
        tree,
        attribution,
        languages,
    })
}
