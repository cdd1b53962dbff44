//! Sample mode: the node running now, stored in the current-node cell the host's sampler
//! reads.

use wasm_encoder::Instruction;

use super::emitter::Emitter;
use crate::probe_map::InlineIndices;
use crate::ContextArena;

impl Emitter<'_> {
    /// Sample and adaptive mode, the captured function's entry: its parameter `param` in
    /// the tree memory's [`ContextArena::CAPTURED`] word (see [`crate::StateCapture`]).
    pub(super) fn capture(&mut self, arena: InlineIndices, param: u32) {
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::LocalGet(param),
            Instruction::I32Store(Self::tree_i32(arena, ContextArena::CAPTURED)),
        ]);
    }

    /// Sample mode: the current-node cell holds `local`.
    pub(super) fn set_current(&mut self, local: u32) {
        if self.inline.is_some_and(|(arena, _)| arena.sampled) {
            self.store_current(local);
        }
    }

    /// Every inline mode, before a call to an import: the current-node cell holds the
    /// import's node (in `local`), so that the host names the context of the call it
    /// measures (cost mode leaves the cell alone otherwise).
    pub(super) fn name_import(&mut self, local: u32) {
        if self.inline.is_some() {
            self.store_current(local);
        }
    }

    /// Cost mode, after a call to an import: the current-node cell is emptied, so that a
    /// call the probes do not bracket (through a table, or from a function without probes)
    /// is not taken for this one. (Sample mode puts the caller's node back instead.)
    pub(super) fn import_returned(&mut self) {
        let Some((arena, _)) = self.inline.filter(|(arena, _)| !arena.sampled) else {
            return;
        };
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::I32Const(0),
            Instruction::I32Store(Self::tree_i32(arena, ContextArena::CURRENT)),
        ]);
    }

    fn store_current(&mut self, local: u32) {
        let Some((arena, _)) = self.inline else {
            return;
        };
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::LocalGet(local),
            Instruction::I32Store(Self::tree_i32(arena, ContextArena::CURRENT)),
        ]);
    }

    /// Sample mode, before an instruction the engine carries out in its own code (a bulk
    /// memory or table operation, `memory.grow`, an atomic wait or notify): the cell names
    /// this function. After a call between the module's functions returns the cell still
    /// names the callee, and the program counter says who runs; in the engine's code it
    /// cannot, so a tick there is charged to the cell (perf's call chains charge it to this
    /// function too).
    pub(super) fn before_engine_code(&mut self) {
        self.resume();
    }

    /// Sample mode: this function runs again (an import returned, or a catch landed here).
    pub(super) fn resume(&mut self) {
        if let Some((_, locals)) = self.inline {
            self.set_current(locals.node);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{instrument, Instrumenter, ProbeMode, ProbePlan, StateCapture};

    #[test]
    fn a_captured_parameter_is_stored_at_each_entry_in_the_modes_that_sample() {
        let wasm = wat::parse_str(
            r#"(module
                 (import "a" "f" (func (param i32)))
                 (func $eval (param i64 i32) (result i32) local.get 1)
                 (func $other (param i32)))"#,
        )
        .unwrap();
        // `i32.const 0; local.get p; i32.store offset=0` in the tree memory (memory 0 here).
        let store = |p: u32| {
            format!(
                "I32Const {{ value: 0 }}\nLocalGet {{ local_index: {p} }}\nI32Store {{ memarg: \
                 MemArg {{ align: 2, max_align: 2, offset: 0, memory: 0 }} }}\n"
            )
        };
        let plan = |mode, param| ProbePlan {
            mode,
            capture: Some(StateCapture { function: 1, param }),
            ..ProbePlan::default()
        };
        for mode in [ProbeMode::Sample, ProbeMode::Adaptive] {
            let out = instrument(&wasm, &plan(mode, 1)).unwrap();
            crate::tests::validate(&out.bytes);
            // Once, in $eval (the only body with a parameter 1).
            let text = crate::tests::text(&out.bytes);
            assert_eq!(text.matches(&store(1)).count(), 1, "{mode:?}: {text}");
            assert!(!text.contains(&store(0)));
            // Only the captured body's key moves.
            let keys = |p: &ProbePlan| -> Vec<_> {
                let i = Instrumenter::new(&wasm, p).unwrap();
                i.functions().into_iter().map(|f| f.key).collect()
            };
            let (with, without) = (
                keys(&plan(mode, 1)),
                keys(&ProbePlan {
                    mode,
                    ..ProbePlan::default()
                }),
            );
            // (The import, id 0, has no key.)
            assert_ne!(with[1], without[1]);
            assert_eq!(with[2], without[2]);
            assert_ne!(plan(mode, 1).digest(), plan(mode, 0).digest());
            // At its exit the cell names its caller's slot again: one store of the cell more
            // than without the capture.
            let cell_stores = |p: &ProbePlan| {
                let text = crate::tests::text(&instrument(&wasm, p).unwrap().bytes);
                let cell = format!("offset: {}, memory: 0 }} }}", crate::ContextArena::CURRENT);
                text.lines()
                    .filter(|l| l.starts_with("I32Store") && l.contains(&cell))
                    .count()
            };
            let plain = ProbePlan {
                mode,
                ..ProbePlan::default()
            };
            assert_eq!(cell_stores(&plan(mode, 1)), cell_stores(&plain) + 1);
            // An `i64` parameter is not captured.
            let out = instrument(&wasm, &plan(mode, 0)).unwrap();
            assert!(!crate::tests::text(&out.bytes).contains(&store(0)));
        }
        // The modes that do not sample capture nothing, and their keys ignore it.
        for mode in [ProbeMode::Time, ProbeMode::Cost] {
            let out = instrument(&wasm, &plan(mode, 1)).unwrap();
            let text = crate::tests::text(&out.bytes);
            assert!(!text.contains(&store(1)), "{mode:?}");
            let plain = ProbePlan {
                mode,
                ..ProbePlan::default()
            };
            assert_eq!(plan(mode, 1).digest(), plain.digest());
        }
    }
}
