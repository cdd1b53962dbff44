//! Sample mode: the node running now, stored in the current-node cell the host's sampler
//! reads.

use wasm_encoder::Instruction;

use super::emitter::Emitter;
use crate::ContextArena;

impl Emitter<'_> {
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
