//! Sample and cost mode, the inline modes: the probes count in a calling-context tree in
//! the module's memory (see [`crate::run::inline`]), which is replayed into the thread's
//! collector once its entry returned; sample mode's sampler reads where the thread is
//! meanwhile (see [`crate::run::inline::sampler`]). Adaptive mode builds on this (see
//! [`super::adaptive`]).

use std::sync::Arc;

use wasmtime::{Instance, Linker, Store};
use wprof_agent::{ContextArena, ProbeMode};

use super::{Entered, EntryCall, HostFigures, ReadCall, Readings, ThreadMode};
use crate::exit::Failure;
use crate::languages::Interpreter;
use crate::run::host_state::HostState;
use crate::run::inline::attribution::Attribution;
use crate::run::inline::scripts::SharedScripts;
use crate::run::inline::tree::InlineTree;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::start::ProbeBytes;

/// An inline mode.
#[derive(Debug)]
pub struct Inline {
    /// Sample, cost or adaptive mode.
    mode: ProbeMode,
    /// Sample mode: where the probes' own instructions are, to leave out their time.
    probe_bytes: Option<ProbeBytes>,
    /// Sample and adaptive mode: the interpreter the module is, whose eval loop's state its
    /// probes keep (see [`crate::run::inline::scripts`]).
    interpreter: Option<Arc<Interpreter>>,
    /// The script's functions as every thread's ticks found them, in one numbering.
    scripts: SharedScripts,
}

impl Inline {
    /// The inline `mode`, over a module whose probes are at `probe_bytes` (`interpreter`:
    /// the one it is, whose eval loop's state its probes keep).
    pub fn new(
        mode: ProbeMode,
        probe_bytes: Option<ProbeBytes>,
        interpreter: Option<Arc<Interpreter>>,
    ) -> Self {
        Inline {
            mode,
            probe_bytes,
            interpreter,
            scripts: SharedScripts::default(),
        }
    }

    /// How the ticks of a thread running `instance` walk the interpreter's language: from
    /// the eval loop's state its probes keep in the tree memory. `None` for a module that
    /// is no interpreter.
    fn language_walk(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Option<&'static LanguageWalk> {
        let state = (ContextArena::MEMORY, ContextArena::CAPTURED as usize);
        super::language_walk(store, instance, self.interpreter.as_ref()?, state)
    }

    /// Replays the thread's tree into its collector (timed as `collect`) and reads its
    /// block counts: the readings and the tree.
    pub(super) fn replay(&self, read: &mut ReadCall<'_>) -> (Readings, Option<InlineTree>) {
        let samples = read.entered.samples.as_ref();
        let interpreter = self.interpreter.as_deref().map(|i| (i, &self.scripts));
        let replayed = read.timings.time("collect", || {
            crate::run::inline::replay::replay_tree(read.store, read.instance, samples, interpreter)
        });
        let coverage = read.blocks.take().and_then(|map| match read.first {
            true => crate::run::inline::coverage::read_counts(read.store, read.instance, map),
            // A spawned thread's counters were made as the first's: said once, there.
            false => {
                let functions = read.store.data().collector.as_ref();
                let functions = functions.map_or(0, |c| c.functions().len() as u32);
                crate::run::inline::coverage::read(read.store, read.instance, functions, map).ok()
            }
        });
        let (tree, attribution): (_, Option<Attribution>) = match replayed {
            Some(r) => (Some(r.tree), r.attribution),
            None => (None, None),
        };
        let readings = Readings {
            attribution,
            coverage,
            ..Readings::default()
        };
        (readings, tree)
    }
}

impl ThreadMode for Inline {
    fn probes(&self) -> Option<ProbeMode> {
        Some(self.mode)
    }

    fn link(&self, linker: &mut Linker<HostState>) -> Result<(), Failure> {
        crate::run::host_state::define_probes(linker, self.mode)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))
    }

    fn host_figures(&self) -> HostFigures {
        // Cost mode times nothing.
        match self.mode {
            ProbeMode::Cost => HostFigures::Counted,
            _ => HostFigures::Timed,
        }
    }

    fn samples(&self) -> bool {
        self.mode.samples()
    }

    fn serves_windows(&self) -> bool {
        true
    }

    fn probe_bytes(&self) -> Option<&ProbeBytes> {
        self.probe_bytes.as_ref()
    }

    fn enter(&self, mut call: EntryCall<'_>) -> Result<Entered, Failure> {
        crate::run::host_state::reset_slot(call.store, call.instance);
        if !self.mode.samples() {
            return crate::run::start::call_plain(&mut call);
        }
        // Every thread's ticks walk the interpreter's language.
        let language = self.language_walk(call.store, call.instance);
        crate::run::start::call_sampled(call, self.mode, self.probe_bytes.as_ref(), language)
    }

    fn scripts(&self) -> Option<crate::run::stacks::languages::LanguageSamples> {
        self.scripts.take()
    }

    fn read(&self, mut read: ReadCall<'_>) -> Readings {
        self.replay(&mut read).0
    }
}
