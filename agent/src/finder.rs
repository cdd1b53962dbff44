//! The node finder: the one function the agent defines in the inline modes. An entry probe
//! calls it when the slot it follows does not lead straight to its own node (a first call
//! from that site, or an indirect call site reaching several callees); it finds the node
//! among the slot's chain or allocates it (see [`crate::ContextArena`] for the layout).

use wasm_encoder::{BlockType, Function, Instruction, MemArg, ValType};

use crate::ContextArena as A;

/// `(func (param $slot i32) (param $id1 i32) (param $slots i32) (result i32))`: the node
/// of function `$id1 - 1` reached through slot address `$slot`, whose function has
/// `$slots` call sites; with bit 0 set when the host times it (see
/// [`crate::ContextArena::TIMED`]). In a Go module a new node's parent is the node in the
/// global `go_last`.
pub(crate) fn node_finder(memory: u32, end_global: u32, go_last: Option<u32>) -> Function {
    const SLOT: u32 = 0;
    const ID1: u32 = 1;
    const SLOTS: u32 = 2;
    const NODE: u32 = 3;
    const SIZE: u32 = 4;
    const SCRATCH: u32 = 5;
    let i32_at = |offset: u32| MemArg {
        offset: u64::from(offset),
        align: 2,
        memory_index: memory,
    };
    let mut f = Function::new([(3, ValType::I32)]);
    let mut emit = |instrs: &[Instruction<'_>]| {
        for i in instrs {
            f.instruction(i);
        }
    };
    use Instruction::*;
    // Walk the slot's chain.
    emit(&[
        LocalGet(SLOT),
        I32Load(i32_at(0)),
        LocalSet(NODE),
        Block(BlockType::Empty),
        Loop(BlockType::Empty),
        LocalGet(NODE),
        I32Eqz,
        BrIf(1),
        LocalGet(NODE),
        I32Load(i32_at(A::FUNCTION)),
        I32Const(!A::TIMED as i32),
        I32And,
        LocalGet(ID1),
        I32Eq,
        If(BlockType::Empty),
        // Bit 0: the host times this context (adaptive mode).
        LocalGet(NODE),
        LocalGet(NODE),
        I32Load(i32_at(A::FUNCTION)),
        I32Const(31),
        I32ShrU,
        I32Or,
        Return,
        End,
        LocalGet(NODE),
        I32Load(i32_at(A::NEXT)),
        LocalSet(NODE),
        Br(0),
        End,
        End,
        // size = (32 + 4 * slots), rounded up to 8.
        LocalGet(SLOTS),
        I32Const(2),
        I32Shl,
        I32Const(A::SLOTS as i32 + 7),
        I32Add,
        I32Const(-8),
        I32And,
        LocalSet(SIZE),
    ]);
    // Allocates `SIZE` bytes at the end of the tree into `NODE`, growing the memory as
    // needed, and writes the node's function and slot count. Memory from `memory.grow`
    // is zeroed, so counts and slots start at 0.
    let allocate: Vec<Instruction<'_>> = vec![
        GlobalGet(end_global),
        LocalTee(NODE),
        LocalGet(SIZE),
        I32Add,
        LocalTee(SCRATCH),
        GlobalSet(end_global),
        // Pages missing: ceil(end / 64 KiB) - memory.size.
        LocalGet(SCRATCH),
        I32Const(65535),
        I32Add,
        I32Const(16),
        I32ShrU,
        MemorySize(memory),
        I32Sub,
        LocalTee(SCRATCH),
        I32Const(0),
        I32GtS,
        If(BlockType::Empty),
        LocalGet(SCRATCH),
        MemoryGrow(memory),
        I32Const(-1),
        I32Eq,
        If(BlockType::Empty),
        Unreachable,
        End,
        End,
        LocalGet(NODE),
        LocalGet(ID1),
        I32Store(i32_at(A::FUNCTION)),
        LocalGet(NODE),
        LocalGet(SLOTS),
        I32Store(i32_at(A::SLOT_COUNT)),
    ];
    // A Go module: the new node's parent is the node its goroutine is in (an older node:
    // walking up always ends; see `ContextArena::go_table`).
    let mut allocate = allocate;
    if let Some(last) = go_last {
        allocate.extend([LocalGet(NODE), GlobalGet(last), I32Store(i32_at(A::PARENT))]);
    }
    // Past the limit: the function's one overflow node, never linked into a chain.
    emit(&[
        GlobalGet(end_global),
        LocalGet(SIZE),
        I32Add,
        I32Const(A::LIMIT as i32),
        I32GtU,
        If(BlockType::Empty),
        LocalGet(ID1),
        I32Const(2),
        I32Shl,
        I32Load(i32_at(A::OVERFLOW_TABLE - 4)),
        LocalTee(NODE),
        If(BlockType::Empty),
        LocalGet(NODE),
        LocalGet(NODE),
        I32Load(i32_at(A::FUNCTION)),
        I32Const(31),
        I32ShrU,
        I32Or,
        Return,
        End,
    ]);
    emit(&allocate);
    emit(&[
        LocalGet(ID1),
        I32Const(2),
        I32Shl,
        LocalGet(NODE),
        I32Store(i32_at(A::OVERFLOW_TABLE - 4)),
        LocalGet(NODE),
        Return,
        End,
    ]);
    // A new context: first in its slot's chain.
    emit(&allocate);
    emit(&[
        LocalGet(NODE),
        LocalGet(SLOT),
        I32Load(i32_at(0)),
        I32Store(i32_at(A::NEXT)),
        LocalGet(SLOT),
        LocalGet(NODE),
        I32Store(i32_at(0)),
        LocalGet(NODE),
        End,
    ]);
    f
}
