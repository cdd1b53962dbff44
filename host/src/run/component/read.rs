//! What a component's run measured, read once `wasi:cli/run` returned: how the program
//! ended, and the collector: time mode's probe log finished, or the inline modes' trees,
//! one per instrumented module, each read as its mode reads it (see
//! [`crate::run::component::modes`]) and grafted into one tree over the component's ids.

use wasmtime::Store;

use crate::profile::coverage::Coverage;
use crate::profile::{AdaptiveRecord, SamplingRecord};
use crate::run::collector::Collector;
use crate::run::component::memory::MadeMemory;
use crate::run::component::modes::{ComponentMode, ModuleRead, RunResult};
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::inline::sampler::Samples;
use crate::run::inline::scripts::SharedScripts;
use crate::run::inline::tree::InlineTree;
use crate::run::stacks::languages::LanguageSamples;
use crate::run::time::probe_log::ProbeLog;
use crate::settings::RunSettings;

/// How the program ended: its exit code and, for a trap, its one-line message and the
/// report to print.
pub fn ending_of(result: RunResult) -> (i32, Option<(String, String)>) {
    let e = match result {
        Ok(Ok(())) => return (0, None),
        Ok(Err(())) => return (1, None),
        Err(e) => e,
    };
    match crate::run::outcome::exit_of(&e) {
        (code, None) => (code, None),
        (code, Some(message)) => {
            // An injected trap is wprof's, not the `unreachable` it is marked as (so that
            // it exits as a trap): the report names it alone, under the backtrace.
            let injected = e
                .downcast_ref::<crate::run::host_calls::InjectedTrap>()
                .is_some();
            let report = match (injected, e.downcast_ref::<wasmtime::WasmBacktrace>()) {
                (true, Some(backtrace)) => format!(
                    "{}\n\nCaused by:\n    0: {message}",
                    backtrace.to_string().trim_end()
                ),
                (true, None) => message.clone(),
                (false, _) => format!("{e:?}"),
            };
            (code, Some((message, report)))
        }
    }
}

/// What the probes measured.
#[derive(Debug, Default)]
pub struct Read {
    /// Every frame closed; `None` where nothing could be read.
    pub collector: Option<Collector>,
    /// Sample mode: the time the probes' own instructions took, in picoseconds.
    pub probe_ps: u64,
    /// With `--coverage`: every module's blocks, in the component's ids.
    pub coverage: Option<Coverage>,
    /// Adaptive mode: every module's walks and timed activations, in the component's ids.
    pub adaptive: Option<AdaptiveRecord>,
    /// In an interpreter: its script's functions, whose ids follow the component's.
    pub languages: Option<LanguageSamples>,
}

impl Read {
    /// Time mode: the log's collector.
    pub fn of_log(log: ProbeLog) -> Self {
        let mut collector = log.finish().0;
        collector.settle_allocs();
        Read {
            collector: Some(collector),
            ..Read::default()
        }
    }
}

/// The inline modes: each module's tree read from its memory (`trees`, as `(module,
/// memory)`) as `mode` reads it, grafted into one, each module's a root of its own, and
/// replayed into `collector`.
pub fn read_trees(
    store: &mut Store<ComponentState>,
    mode: &dyn ComponentMode,
    mut collector: Collector,
    (modules, trees): (&[ModuleProbes], &[(usize, MadeMemory)]),
    samples: Option<&[Samples]>,
    settings: &RunSettings,
) -> Read {
    let mut read = Read::default();
    let mut tree = InlineTree::empty();
    let scripts = SharedScripts::default();
    let mut script_paths = Vec::new();
    for (k, memory) in trees {
        let size = memory.size.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: the memory lives as long as the store, which is alive here, and nothing
        // runs in it any more; `size` bytes from its base are accessible.
        let bytes = unsafe { std::slice::from_raw_parts(memory.base as *const u8, size) };
        let module = &modules[*k];
        let mut own = InlineTree::read(bytes, module.indices.functions);
        let reading = mode.read_module(ModuleRead {
            store,
            k: *k,
            module,
            tree: &mut own,
            samples,
            scripts: &scripts,
            settings,
        });
        read.probe_ps += reading.probe_ps;
        script_paths.push((module.offset, reading.script_paths));
        if let Some(record) = reading.adaptive {
            read.adaptive = Some(crate::run::adaptive::merged(
                read.adaptive.take(),
                record,
                module.offset,
            ));
        }
        tree.graft(own, *k, module.offset);
    }
    read.coverage = crate::run::component::coverage::at_end(
        trees
            .iter()
            .filter_map(|(k, memory)| Some((modules[*k].coverage.as_ref()?, memory))),
    );
    let by_node = store
        .data_mut()
        .allocs
        .as_mut()
        .map(|a| a.tracker.with(|t| t.by_node()));
    tree.replay(
        &mut collector,
        |n| n.self_cost,
        None,
        None,
        by_node.as_ref(),
    );
    // The script's functions follow the component's.
    let first_id = collector.functions().len() as u32;
    for (offset, paths) in script_paths {
        crate::run::inline::replay::replay_paths(&mut collector, paths, offset, first_id);
    }
    read.languages = scripts.take();
    collector.finish_at(collector.last());
    read.collector = Some(collector);
    read
}

/// Sample mode: how the time was sampled, from each module's `samples`.
pub fn sampling_of(
    samples: &[Samples],
    probe_ps: u64,
    wall_time: u64,
    settings: &RunSettings,
) -> SamplingRecord {
    SamplingRecord {
        period_ns: settings.sample_period.base.as_nanos() as u64,
        longest_period_ns: crate::settings::sample_period::longest_reached(
            settings.sample_period,
            std::time::Duration::from_nanos(wall_time),
        ),
        readings: samples.iter().map(|s| s.readings).sum(),
        answered: samples.iter().map(|s| s.answered).sum(),
        probe_ns: probe_ps / crate::run::collector::PS_PER_NS,
        off_ns: 0,
        stacks: None,
    }
}
