//! Cost and sample mode in a component: each module's probes count in its own tree, in a
//! memory found among those the instantiation made (see [`crate::run::component::memory`]);
//! sample mode's sampler says which module runs and charges the time to that module's
//! current node (see [`crate::run::component::sampler`]). Adaptive mode builds on this
//! (see [`super::adaptive`]).

use wprof_agent::ProbeMode;

use super::{ComponentMode, Entry, ModuleRead, ModuleReading, RunResult};
use crate::run::collector::Collector;
use crate::run::inline::sampler::Samples;

/// Cost or sample mode.
#[derive(Debug)]
pub struct Inline {
    mode: ProbeMode,
}

impl Inline {
    /// The inline `mode`.
    pub fn new(mode: ProbeMode) -> Self {
        Inline { mode }
    }

    /// Sample mode's call: the program with the sampler beside it, each module's walker
    /// (adaptive mode, by position) told of the ticks in its functions.
    pub(super) fn call_sampled(
        entry: Entry<'_>,
        walkers: &mut [Option<crate::run::adaptive::walker::Walker>],
    ) -> (RunResult, Option<Vec<Samples>>) {
        let Some(trees) = entry.trees else {
            return (entry.command.wasi_cli_run().call_run(entry.store), None);
        };
        let (result, samples) = crate::run::component::sampler::call_sampled(
            entry.store,
            entry.command,
            entry.component,
            (entry.modules, trees),
            entry.program,
            entry.switches,
            entry.desk,
            walkers,
            entry.settings,
        );
        (result, Some(samples))
    }

    /// Sample mode: each node of the module's tree takes its sampled time as its cost; in
    /// an interpreter, the time of the ticks that walked its language's frames is taken
    /// from the contexts and kept on their paths with the frames in place of the eval
    /// loop's (see [`crate::run::inline::replay::script_paths`]).
    pub(super) fn attribute(read: &mut ModuleRead<'_>) -> ModuleReading {
        let Some(samples) = read.samples else {
            return ModuleReading::default();
        };
        let samples = &samples[read.module.position];
        let attribution = crate::run::inline::attribution::attribute(read.tree, samples);
        let scripts = samples
            .script_stacks
            .as_deref()
            .zip(read.module.interpreter.as_deref());
        let (scripted, script_paths) = match scripts {
            Some((stacks, interpreter)) => (
                crate::run::inline::replay::scripted_by_node(read.tree, &attribution),
                crate::run::inline::replay::script_paths(
                    read.tree,
                    &attribution,
                    stacks,
                    interpreter,
                    read.scripts,
                ),
            ),
            None => Default::default(),
        };
        for node in &mut read.tree.nodes {
            let time = attribution.time.get(&node.address).copied().unwrap_or(0);
            node.self_cost = time.saturating_sub(scripted.get(&node.address).copied().unwrap_or(0));
        }
        ModuleReading {
            probe_ps: attribution.probe_ps,
            adaptive: None,
            script_paths,
        }
    }
}

impl ComponentMode for Inline {
    fn probes(&self) -> ProbeMode {
        self.mode
    }

    fn samples(&self) -> bool {
        self.mode.samples()
    }

    fn collector(&self, functions: usize) -> Collector {
        match self.mode {
            // Cost mode's figures are counts, not picoseconds.
            ProbeMode::Cost => Collector::new(functions),
            _ => Collector::new(functions).with_quantum(crate::run::collector::PS_PER_NS),
        }
    }

    fn enter(&self, entry: Entry<'_>) -> (RunResult, Option<Vec<Samples>>) {
        match self.mode.samples() {
            true => Self::call_sampled(entry, &mut []),
            false => (entry.command.wasi_cli_run().call_run(entry.store), None),
        }
    }

    fn read_module(&self, mut read: ModuleRead<'_>) -> ModuleReading {
        Self::attribute(&mut read)
    }
}
