//! The instructions that count edges: a direct site's bump, an indirect site's
//! announcement, a reachable function's look at its entry, and `arc`, the table of pairs'
//! function.

use wasm_encoder::{BlockType, Instruction, MemArg};

use super::slots::{SlotBlock, SlotKind};
use super::{EdgeTable, Look};

/// Indices the counted module gives what counts its edges.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EdgeIndices {
    /// The edges' memory.
    pub memory: u32,
    /// The global an indirect site announces itself in (with indirect calls counted).
    pub from: u32,
    /// The `arc` function (with the table of pairs).
    pub arc: u32,
    /// A Go module counting indirect calls: the global a function about to start over
    /// puts its id in.
    pub restart: Option<u32>,
}

impl EdgeIndices {
    fn i64_at(self, offset: u64) -> MemArg {
        MemArg {
            offset,
            align: 3,
            memory_index: self.memory,
        }
    }

    fn i32_at(self, offset: u64) -> MemArg {
        MemArg {
            offset,
            align: 2,
            memory_index: self.memory,
        }
    }

    /// What a direct site adds before it calls: one to cell `cell`.
    pub fn bump(self, table: EdgeTable, cell: u32) -> [Instruction<'static>; 6] {
        let at = self.i64_at(table.count(cell));
        [
            Instruction::I32Const(0),
            Instruction::I32Const(0),
            Instruction::I64Load(at),
            Instruction::I64Const(1),
            Instruction::I64Add,
            Instruction::I64Store(at),
        ]
    }

    /// What a site calling through a table that never changes adds before it calls (the
    /// index on the stack, kept there): one to its block's cell of the slot called, an
    /// index past the table's end clamped to the cell after the last slot's. `local` holds
    /// the index, then the cell's offset in the block.
    pub fn count_slot(
        self,
        kind: &SlotKind,
        block: SlotBlock,
        local: u32,
    ) -> [Instruction<'static>; 15] {
        let len = kind.len() as i32;
        let at = self.i64_at(u64::from(block.cell));
        [
            Instruction::LocalTee(local),
            Instruction::LocalGet(local),
            Instruction::I32Const(len),
            Instruction::LocalGet(local),
            Instruction::I32Const(len),
            Instruction::I32LtU,
            Instruction::Select,
            Instruction::I32Const(3),
            Instruction::I32Shl,
            Instruction::LocalTee(local),
            Instruction::LocalGet(local),
            Instruction::I64Load(at),
            Instruction::I64Const(1),
            Instruction::I64Add,
            Instruction::I64Store(at),
        ]
    }

    /// What an indirect site adds before it calls: its number.
    pub fn announce(self, number: u32) -> [Instruction<'static>; 2] {
        [
            Instruction::I32Const(number as i32),
            Instruction::GlobalSet(self.from),
        ]
    }

    /// What an indirect site adds after its call returns.
    pub fn forget(self) -> [Instruction<'static>; 2] {
        [Instruction::I32Const(0), Instruction::GlobalSet(self.from)]
    }

    /// What function `callee`, which counts its indirect callers as `look` says, adds at
    /// its entry. A Go function (`resumable`, its local 0 `PC_B`) counts only a call: `PC_B`
    /// 0, and not its start over after `runtime.morestack` (whose call put its id in the
    /// restart global), which it takes out of that global.
    pub fn look(self, callee: u32, look: Look, resumable: bool) -> Vec<Instruction<'static>> {
        use Instruction as I;
        let count = match look {
            Look::None => return Vec::new(),
            // The cell at the row's first + (column + 1) * 8 - 8.
            Look::Matrix(cell) => {
                let at = self.i64_at(u64::from(cell) - 8);
                vec![
                    I::GlobalGet(self.from),
                    I::GlobalGet(self.from),
                    I::I64Load(at),
                    I::I64Const(1),
                    I::I64Add,
                    I::I64Store(at),
                ]
            }
            Look::Pairs => vec![
                I::GlobalGet(self.from),
                I::I32Const(callee as i32),
                I::Call(self.arc),
            ],
        };
        let mut out = vec![I::GlobalGet(self.from), I::If(BlockType::Empty)];
        match self.restart.filter(|_| resumable) {
            Some(restart) => {
                out.extend([
                    I::LocalGet(0),
                    I::I32Eqz,
                    I::GlobalGet(restart),
                    I::I32Const(callee as i32),
                    I::I32Ne,
                    I::I32And,
                    I::If(BlockType::Empty),
                ]);
                out.extend(count);
                out.extend([
                    I::End,
                    I::GlobalGet(restart),
                    I::I32Const(callee as i32),
                    I::I32Eq,
                    I::If(BlockType::Empty),
                    I::I32Const(0),
                    I::GlobalSet(restart),
                    I::End,
                ]);
            }
            None => out.extend(count),
        }
        out.extend([I::I32Const(0), I::GlobalSet(self.from), I::End]);
        out
    }

    /// What a Go function adds before it calls `runtime.morestack`: its id in the restart
    /// global, so that its start over is not counted as a call (see [`EdgeIndices::look`]).
    pub fn restarting(self, callee: u32) -> Vec<Instruction<'static>> {
        match self.restart {
            Some(restart) => vec![
                Instruction::I32Const(callee as i32),
                Instruction::GlobalSet(restart),
            ],
            None => Vec::new(),
        }
    }

    /// The body of `arc(caller + 1, callee)` (locals and code, without its size): zeroes
    /// the global, then counts the pair in its slot of the table, found from its hash by
    /// linear probing, or as lost when every slot holds another pair.
    pub fn arc_body(self, table: EdgeTable) -> Vec<u8> {
        use Instruction as I;
        let (from, callee, slot, left) = (0, 1, 2, 3);
        let base = table.slots_at();
        let shift = 32 - table.slots.trailing_zeros() as i32;
        let code = [
            I::I32Const(0),
            I::GlobalSet(self.from),
            // slot = ((caller + 1) * golden ^ callee) * mix >> shift
            I::LocalGet(from),
            I::I32Const(0x9E37_79B1_u32 as i32),
            I::I32Mul,
            I::LocalGet(callee),
            I::I32Xor,
            I::I32Const(0x85EB_CA6B_u32 as i32),
            I::I32Mul,
            I::I32Const(shift),
            I::I32ShrU,
            I::LocalSet(slot),
            I::I32Const(table.slots as i32),
            I::LocalSet(left),
            I::Block(BlockType::Empty),
            I::Loop(BlockType::Empty),
            // The slot's address, from its number.
            I::LocalGet(slot),
            I::I32Const(4),
            I::I32Shl,
            I::LocalTee(slot),
            I::I32Load(self.i32_at(base)),
            I::LocalGet(from),
            I::I32Eq,
            I::LocalGet(slot),
            I::I32Load(self.i32_at(base + 4)),
            I::LocalGet(callee),
            I::I32Eq,
            I::I32And,
            I::If(BlockType::Empty),
            I::LocalGet(slot),
            I::LocalGet(slot),
            I::I64Load(self.i64_at(base + 8)),
            I::I64Const(1),
            I::I64Add,
            I::I64Store(self.i64_at(base + 8)),
            I::Return,
            I::End,
            I::LocalGet(slot),
            I::I32Load(self.i32_at(base)),
            I::I32Eqz,
            I::If(BlockType::Empty),
            I::LocalGet(slot),
            I::LocalGet(from),
            I::I32Store(self.i32_at(base)),
            I::LocalGet(slot),
            I::LocalGet(callee),
            I::I32Store(self.i32_at(base + 4)),
            I::LocalGet(slot),
            I::I64Const(1),
            I::I64Store(self.i64_at(base + 8)),
            I::Return,
            I::End,
            // The next slot's number.
            I::LocalGet(slot),
            I::I32Const(4),
            I::I32ShrU,
            I::I32Const(1),
            I::I32Add,
            I::I32Const(table.slots as i32 - 1),
            I::I32And,
            I::LocalSet(slot),
            I::LocalGet(left),
            I::I32Const(1),
            I::I32Sub,
            I::LocalTee(left),
            I::BrIf(0),
            I::End,
            I::End,
            // Every slot holds another pair.
            I::I32Const(0),
            I::I32Const(0),
            I::I64Load(self.i64_at(0)),
            I::I64Const(1),
            I::I64Add,
            I::I64Store(self.i64_at(0)),
            I::End,
        ];
        let mut out = Vec::with_capacity(code.len() * 3 + 4);
        // Two locals, i32: the slot and the slots left to look at.
        out.extend_from_slice(&[0x01, 0x02, 0x7F]);
        for i in &code {
            wasm_encoder::Encode::encode(i, &mut out);
        }
        out
    }
}

/// The type of `arc`, as a type section entry: `(i32, i32) -> ()`.
pub(crate) const ARC_TYPE: [u8; 5] = [0x60, 0x02, 0x7F, 0x7F, 0x00];
