//! The inline modes' calling-context tree (cost and sample, see [`crate::ContextArena`]):
//! finding and counting a function's node through the slot its caller set, and keeping a
//! loop of self tail calls in one node.

use wasm_encoder::{BlockType, Instruction};

use super::emitter::{Emitter, InlineLocals};
use crate::probe_map::InlineIndices;
use crate::ContextArena;

impl Emitter<'_> {
    /// Inline modes: `local = the node of function id` (through the slot global), counting
    /// one call in it. Adaptive mode, for a function's own node (`timed`): an armed node
    /// starts the activation's timer (see [`ContextArena::TIMED`]).
    ///
    /// The slot's first node, else the one after it, is looked at here; only past those
    /// the node finder is called. A call site reaching two callees by turns (a virtual
    /// call on objects of two classes) so never calls it: the finder's call cost tiny_calls
    /// 8.5% of its time in sample mode. The empty node at address 0 (an empty slot, and its
    /// successor) has function 0 and no successor, so neither look matches there.
    pub(super) fn find_and_count(
        &mut self,
        arena: InlineIndices,
        local: u32,
        id: u32,
        slots: u32,
        timed: bool,
    ) {
        let id1 = id.wrapping_add(1) as i32;
        self.two_looks(arena, local, id1);
        self.instrs(&[
            Instruction::GlobalGet(arena.slot),
            Instruction::I32Const(id1),
            Instruction::I32Const(slots as i32),
            Instruction::Call(arena.child),
            Instruction::LocalSet(local),
        ]);
        self.untag_node(local, timed);
        self.close_looks_and_count(arena, local);
    }

    /// Sample and cost mode, the entry of a function that calls nothing: as
    /// [`Emitter::find_and_count`], but past the two looks it tail-calls the function's
    /// retry function (the assembler appends one per such function, see
    /// [`crate::ContextArena::RETRY`]) with the function's own arguments, rather than call
    /// the node finder. A call, even one never taken, makes Cranelift give the function a
    /// frame that saves the registers live across it: on a three-instruction leaf, 14 of
    /// its 36 machine instructions, run on every call. The retry function finds the node,
    /// leaves it where the slot global then points, and tail-calls the function again,
    /// whose first look now finds it.
    pub(super) fn find_or_retry(&mut self, arena: InlineIndices, local: u32, id: u32) {
        let params = self.retry.expect("a retry needs the function's parameters");
        self.two_looks(arena, local, id.wrapping_add(1) as i32);
        for param in 0..params {
            self.instr(Instruction::LocalGet(param));
        }
        // `return_call` with a five-byte index the assembler writes.
        self.out.push(0x12);
        self.retry_site = Some(self.out.len() as u32);
        self.out.extend_from_slice(&super::coverage::padded_leb(0));
        self.close_looks_and_count(arena, local);
    }

    /// `local = the slot's first node`, and unless it is function `id1 - 1`'s, the next in
    /// its chain; unless that is either, two blocks are left open for the slow path.
    fn two_looks(&mut self, arena: InlineIndices, local: u32, id1: i32) {
        self.instrs(&[
            Instruction::GlobalGet(arena.slot),
            Instruction::I32Load(Self::tree_i32(arena, 0)),
            Instruction::LocalTee(local),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::FUNCTION)),
            Instruction::I32Const(id1),
            Instruction::I32Ne,
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(local),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::NEXT)),
            Instruction::LocalTee(local),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::FUNCTION)),
            Instruction::I32Const(id1),
            Instruction::I32Ne,
            Instruction::If(BlockType::Empty),
        ]);
    }

    /// Closes the blocks [`Emitter::two_looks`] left open and counts a call in `local`'s
    /// node.
    fn close_looks_and_count(&mut self, arena: InlineIndices, local: u32) {
        self.instrs(&[
            Instruction::End,
            Instruction::End,
            Instruction::LocalGet(local),
            Instruction::LocalGet(local),
            Instruction::I64Load(Self::tree_i64(arena, ContextArena::CALLS)),
            Instruction::I64Const(1),
            Instruction::I64Add,
            Instruction::I64Store(Self::tree_i64(arena, ContextArena::CALLS)),
        ]);
    }

    /// Inline modes, before this function's tail call to itself (its call site already
    /// announced): a call made by an activation that was itself entered that way follows
    /// the same slot again, so the whole loop counts in the node its first iteration
    /// reached; and the callee learns it was entered this way.
    pub(super) fn self_tail_call(&mut self) {
        let Some((
            arena,
            InlineLocals {
                self_tail: Some(t), ..
            },
        )) = self.inline
        else {
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(t.via_self_tail),
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(t.came_from),
            Instruction::GlobalSet(arena.slot),
            Instruction::End,
            Instruction::I32Const(1),
            Instruction::GlobalSet(arena.self_tail),
        ]);
    }
}
