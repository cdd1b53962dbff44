//! Go modules in the inline modes: telling a goroutine's re-entered frames from calls, so
//! that a call counts once however often its goroutine is switched out, and resumed work
//! stays under its real caller (see [`crate::ContextArena::go_table`] for the scheme).

use wasm_encoder::{BlockType, Instruction, MemArg};

use super::emitter::Emitter;
use super::locals::{GoLocals, GoTimeLocals};
use crate::probe_map::{GoIndices, InlineIndices};
use crate::ContextArena;

impl Emitter<'_> {
    /// Time mode: `enter(id | REENTRY if PC_B != 0 | SWITCHED if g changed)`.
    pub(super) fn go_time_enter(&mut self, t: GoTimeLocals, id: u32) {
        use crate::GoTimeFlags as F;
        let g = crate::probe_map::ProbeLayout::GO_G;
        self.instrs(&[
            Instruction::I32Const(id as i32),
            Instruction::LocalGet(0),
            Instruction::I32Const(0),
            Instruction::I32Ne,
            Instruction::I32Const(F::REENTRY.trailing_zeros() as i32),
            Instruction::I32Shl,
            Instruction::I32Or,
            Instruction::GlobalGet(g),
            Instruction::I32WrapI64,
            Instruction::GlobalGet(t.told),
            Instruction::I32Ne,
            Instruction::I32Const(F::SWITCHED.trailing_zeros() as i32),
            Instruction::I32Shl,
            Instruction::I32Or,
            Instruction::GlobalGet(g),
            Instruction::I32WrapI64,
            Instruction::GlobalSet(t.told),
            Instruction::Call(self.probes.enter()),
        ]);
    }

    /// Time mode, with the function's result on the stack (kept there):
    /// `exit(id | UNWINDING if it is 1)`.
    pub(super) fn go_time_exit(&mut self, t: GoTimeLocals, id: u32) {
        use crate::GoTimeFlags as F;
        self.instrs(&[
            Instruction::LocalTee(t.result),
            Instruction::I32Const(F::UNWINDING.trailing_zeros() as i32),
            Instruction::I32Shl,
            Instruction::I32Const(id as i32),
            Instruction::I32Or,
            Instruction::Call(self.probes.exit()),
            Instruction::LocalGet(t.result),
        ]);
    }

    fn go_table_i32(go: GoIndices, arena: InlineIndices, field: u32) -> MemArg {
        MemArg {
            offset: u64::from(go.table + field),
            align: 2,
            memory_index: arena.memory,
        }
    }

    /// `stack: [g] -> [offset of g's goroutine table entry]` (a multiplicative hash).
    fn go_slot_of(&mut self) {
        let bits = ContextArena::GO_SLOTS.trailing_zeros();
        self.instrs(&[
            Instruction::I32Const(0x9E37_79B1_u32 as i32),
            Instruction::I32Mul,
            Instruction::I32Const((32 - bits) as i32),
            Instruction::I32ShrU,
            Instruction::I32Const(3),
            Instruction::I32Shl,
        ]);
    }

    /// `stack: [node] -> [its function id + 1]` (the timing bit cleared).
    fn go_function_of(&mut self, arena: InlineIndices) {
        self.instrs(&[
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::FUNCTION)),
            Instruction::I32Const(!ContextArena::TIMED as i32),
            Instruction::I32And,
        ]);
    }

    /// A resumable Go function's entry, before the usual one: `node` = the node this
    /// activation re-enters (function `id`), or 0 for a call.
    pub(super) fn go_reentry(
        &mut self,
        arena: InlineIndices,
        go: GoIndices,
        l: GoLocals,
        node: u32,
        id: u32,
    ) {
        let id1 = id.wrapping_add(1) as i32;
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::LocalSet(node),
            // A call in the goroutine that ran last (PC_B 0, same g) is the fast path:
            // one test.
            Instruction::GlobalGet(go.running),
            Instruction::I32WrapI64,
            Instruction::GlobalGet(go.g),
            Instruction::I32Ne,
            Instruction::LocalTee(l.scratch),
            Instruction::LocalGet(0),
            Instruction::I32Or,
            Instruction::If(BlockType::Empty),
            // Another goroutine runs now?
            Instruction::LocalGet(l.scratch),
            Instruction::If(BlockType::Empty),
            // File where the last one stopped ...
            Instruction::GlobalGet(go.g),
        ]);
        self.go_slot_of();
        self.instrs(&[
            Instruction::LocalTee(l.scratch),
            Instruction::GlobalGet(go.g),
            Instruction::I32Store(Self::go_table_i32(go, arena, 0)),
            Instruction::LocalGet(l.scratch),
            Instruction::GlobalGet(go.last),
            Instruction::I32Store(Self::go_table_i32(go, arena, 4)),
            // ... and take where this one stopped, if the table still has it.
            Instruction::GlobalGet(go.running),
            Instruction::I32WrapI64,
            Instruction::GlobalSet(go.g),
            Instruction::GlobalGet(go.g),
        ]);
        self.go_slot_of();
        self.instrs(&[
            Instruction::LocalTee(l.scratch),
            Instruction::I32Load(Self::go_table_i32(go, arena, 0)),
            Instruction::GlobalGet(go.g),
            Instruction::I32Eq,
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(l.scratch),
            Instruction::I32Load(Self::go_table_i32(go, arena, 4)),
            Instruction::LocalSet(node),
            Instruction::End,
            // At PC_B 0 it starts over only if `morestack` stopped it; else it is a
            // goroutine's first function.
            Instruction::LocalGet(0),
            Instruction::I32Eqz,
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(node),
        ]);
        self.go_function_of(arena);
        self.instrs(&[
            Instruction::GlobalGet(go.morestack),
            Instruction::I32Ne,
            Instruction::GlobalGet(go.morestack),
            Instruction::I32Eqz,
            Instruction::I32Or,
            Instruction::If(BlockType::Empty),
            Instruction::I32Const(0),
            Instruction::LocalSet(node),
            Instruction::End,
            Instruction::End,
            Instruction::Else,
            // Same goroutine, PC_B != 0: a re-entry goes on in the frame its resumed
            // callee returned to.
            Instruction::GlobalGet(go.last),
            Instruction::LocalSet(node),
            Instruction::End,
            // The nearest of that node and its ancestors that is this function's, or 0.
            Instruction::Block(BlockType::Empty),
            Instruction::Loop(BlockType::Empty),
            Instruction::LocalGet(node),
            Instruction::I32Eqz,
            Instruction::BrIf(1),
            Instruction::LocalGet(node),
        ]);
        self.go_function_of(arena);
        self.instrs(&[
            Instruction::I32Const(id1),
            Instruction::I32Eq,
            Instruction::BrIf(1),
            Instruction::LocalGet(node),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::PARENT)),
            Instruction::LocalSet(node),
            Instruction::Br(0),
            Instruction::End,
            Instruction::End,
            Instruction::End,
        ]);
    }

    /// The goroutine is in `node` now.
    pub(super) fn go_now_in(&mut self, go: GoIndices, node: u32) {
        self.instrs(&[Instruction::LocalGet(node), Instruction::GlobalSet(go.last)]);
    }

    /// At an exit that returns (a resumable function's result, on the stack and kept
    /// there, is 0): the goroutine is back in the parent. An unwinding exit leaves the
    /// goroutine's node where it stopped, for the next probe that sees another goroutine
    /// run to file (its callees that switched may have no probes).
    pub(super) fn go_leave(&mut self, arena: InlineIndices, go: GoIndices, l: GoLocals, node: u32) {
        if l.resumable {
            self.instrs(&[
                Instruction::LocalTee(l.scratch),
                Instruction::I32Eqz,
                Instruction::If(BlockType::Empty),
            ]);
        }
        self.instrs(&[
            Instruction::LocalGet(node),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::PARENT)),
            Instruction::GlobalSet(go.last),
        ]);
        if l.resumable {
            self.instrs(&[Instruction::End, Instruction::LocalGet(l.scratch)]);
        }
    }
}
