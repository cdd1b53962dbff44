//! Cost mode: executed instructions counted per basic block into a local (`delta`), and
//! added to the calling-context node's self cost wherever the frame may end.

use wasm_encoder::Instruction;

use super::emitter::{Emitter, InlineLocals};
use crate::ContextArena;

impl Emitter<'_> {
    /// Cost mode: `node.self += delta; delta = 0`.
    pub(super) fn flush(&mut self) {
        if self.excluded {
            return;
        }
        let Some((
            arena,
            InlineLocals {
                node,
                delta: Some(delta),
                ..
            },
        )) = self.inline
        else {
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(node),
            Instruction::LocalGet(node),
            Instruction::I64Load(Self::tree_i64(arena, ContextArena::SELF_COST)),
            Instruction::LocalGet(delta),
            Instruction::I64Add,
            Instruction::I64Store(Self::tree_i64(arena, ContextArena::SELF_COST)),
            Instruction::I64Const(0),
            Instruction::LocalSet(delta),
        ]);
    }

    /// Cost mode, in a module whose frames may end without returning (a throw unwinds
    /// them, or a callee exits the program): this frame's count goes in before each call.
    /// (Otherwise a frame always flushes at its own exit, and nothing is lost.)
    pub(super) fn flush_before_call(&mut self) {
        if self.probes.frames_may_vanish {
            self.flush();
        }
    }

    /// `delta += weight` (cost mode, non-zero weights only).
    pub(super) fn add_cost(&mut self, weight: u64) {
        let Some((
            _,
            InlineLocals {
                delta: Some(delta), ..
            },
        )) = self.inline
        else {
            return;
        };
        if weight == 0 {
            return;
        }
        self.instr(Instruction::LocalGet(delta));
        self.instr(Instruction::I64Const(weight as i64));
        self.instr(Instruction::I64Add);
        self.instr(Instruction::LocalSet(delta));
    }
}
