//! Caller -> callee calls in a counted module, as gprof's arcs: a counter per direct edge,
//! bumped at each call site, and a small table for calls through a table or a reference,
//! filled at the callee's entry.
//!
//! - **Direct calls** (`call`, `return_call`, to a defined function or an import): every
//!   call site of a caller to the same callee shares one `u64` cell of [`EDGES_MEMORY`],
//!   which the site adds one to just before it calls: a load, an add and a store, as an
//!   entry counter.
//! - **Indirect calls** (`call_indirect`, `call_ref` and their tail forms): the site puts its
//!   function's id + 1 in a global just before it calls, and (unless it is a tail call) 0
//!   just after. Every function a table or a reference can reach (named by an element
//!   segment or a `ref.func`) looks at that global at its entry: when it is not 0 it calls
//!   an added function, `arc(caller + 1, callee)`, which zeroes the global and counts the
//!   pair in an open-addressing table of [`EdgeTable`] slots; a pair that finds the table
//!   full is counted as lost, and said.
//!
//! Go resumes a goroutine's frames through `call_indirect` in `wasm_pc_f_loop`: those
//! re-entries are not calls, so that function's indirect sites set nothing (the probed
//! modes count a Go function's calls, not its resumptions, the same way).
//!
//! The memory is the module's own, per instance: each thread counts in its own. Its first
//! bytes say what it holds (see [`EdgeTable`]), so the host reads it with no other record.

use std::collections::HashMap;

use wasm_encoder::{BlockType, Instruction, MemArg};
use wasmparser::{BinaryReader, FunctionBody, Operator};

use crate::layout::ModuleLayout;
use crate::AgentError;

/// The name a counted module exports its edge counters' memory under.
pub const EDGES_MEMORY: &str = "wprof:edges";

/// The layout of [`EDGES_MEMORY`]:
///
/// | offset | holds |
/// |---|---|
/// | 0 | `u64` indirect calls the table had no room for |
/// | 8 | `u32` direct edges, `D` |
/// | 12 | `u32` slots of the indirect calls' table, `H` (0, or a power of two) |
/// | 16 | `D` pairs of `u32` (caller, callee), written by the module's data |
/// | 16 + 8D | `D` `u64` counts |
/// | 16 + 16D | `H` slots: `u32` caller + 1 (0: free), `u32` callee, `u64` count |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeTable {
    /// Direct edges.
    pub direct: u32,
    /// Slots of the indirect calls' table.
    pub slots: u32,
}

/// The counts an [`EDGES_MEMORY`] holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    /// `(caller, callee, calls)` of every edge called at least once; a pair called both
    /// directly and indirectly appears twice.
    pub edges: Vec<(u32, u32, u64)>,
    /// Indirect calls whose edge found no room in the table: counted by their callee only.
    pub lost: u64,
}

impl EdgeTable {
    const HEADER: u32 = 16;

    /// Where pair `k` is.
    fn pair(self, k: u32) -> u32 {
        Self::HEADER + 8 * k
    }

    /// Where count `k` is.
    pub(super) fn count(self, k: u32) -> u32 {
        Self::HEADER + 8 * self.direct + 8 * k
    }

    /// Where the indirect calls' table starts.
    fn slots_at(self) -> u32 {
        Self::HEADER + 16 * self.direct
    }

    /// Bytes the memory needs.
    fn bytes(self) -> u64 {
        u64::from(self.slots_at()) + 16 * u64::from(self.slots)
    }

    /// Pages of the memory (at least one).
    pub(super) fn pages(self) -> u64 {
        self.bytes().div_ceil(65536).max(1)
    }

    /// The active data that writes the header and the direct edges' pairs.
    pub(super) fn data(self, pairs: &[(u32, u32)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pair(self.direct) as usize);
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&self.direct.to_le_bytes());
        out.extend_from_slice(&self.slots.to_le_bytes());
        for &(caller, callee) in pairs {
            out.extend_from_slice(&caller.to_le_bytes());
            out.extend_from_slice(&callee.to_le_bytes());
        }
        out
    }

    /// The layout `memory`, an [`EDGES_MEMORY`]'s bytes, says it has; `None` if they are
    /// not one.
    pub fn read_layout(memory: &[u8]) -> Option<EdgeTable> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(memory.get(at..at + 4)?.try_into().ok()?));
        let table = EdgeTable {
            direct: u32_at(8)?,
            slots: u32_at(12)?,
        };
        (table.bytes() <= memory.len() as u64).then_some(table)
    }

    /// The counts in `memory`, an [`EDGES_MEMORY`]'s bytes; `None` if they are not one.
    pub fn read(memory: &[u8]) -> Option<EdgeCounts> {
        let u32_at = |at: u64| -> Option<u32> {
            let at = usize::try_from(at).ok()?;
            Some(u32::from_le_bytes(memory.get(at..at + 4)?.try_into().ok()?))
        };
        let u64_at = |at: u64| -> Option<u64> {
            let at = usize::try_from(at).ok()?;
            Some(u64::from_le_bytes(memory.get(at..at + 8)?.try_into().ok()?))
        };
        let table = Self::read_layout(memory)?;
        let mut edges = Vec::new();
        for k in 0..table.direct {
            let calls = u64_at(u64::from(table.count(k)))?;
            if calls > 0 {
                let pair = u64::from(table.pair(k));
                edges.push((u32_at(pair)?, u32_at(pair + 4)?, calls));
            }
        }
        for s in 0..u64::from(table.slots) {
            let slot = u64::from(table.slots_at()) + 16 * s;
            let (caller, calls) = (u32_at(slot)?, u64_at(slot + 8)?);
            if caller > 0 && calls > 0 {
                edges.push((caller - 1, u32_at(slot + 4)?, calls));
            }
        }
        Some(EdgeCounts {
            edges,
            lost: u64_at(0)?,
        })
    }
}

/// A call instruction of a body: where it is, where the next instruction is, and what it
/// calls.
#[derive(Debug, Clone, Copy)]
pub(super) struct Site {
    pub at: usize,
    pub next: usize,
    pub kind: SiteKind,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum SiteKind {
    /// A direct call, counted in this cell.
    Direct(u32),
    /// A call through a table or a reference; `tail`: a tail call.
    Indirect { tail: bool },
}

/// Where a module's calls are counted: each body's call sites, the direct edges' cells,
/// and the functions that count their indirect callers.
#[derive(Debug, Default)]
pub(super) struct EdgePlan {
    /// Per defined function, its call sites in body order.
    pub sites: Vec<Vec<Site>>,
    /// The direct edges, `(caller, callee)` by cell.
    pub pairs: Vec<(u32, u32)>,
    /// Per defined function, whether a table or a reference may reach it.
    pub taken: Vec<bool>,
    /// The table's layout.
    pub table: EdgeTable,
}

impl EdgePlan {
    /// The plan of `layout`'s module.
    pub fn of(layout: &ModuleLayout<'_>) -> Result<Self, AgentError> {
        let imports = layout.imported_funcs.len() as u32;
        let mut taken = vec![false; layout.defined_funcs.len()];
        let mut take = |id: u32| {
            if let Some(t) = id
                .checked_sub(imports)
                .and_then(|d| taken.get_mut(d as usize))
            {
                *t = true;
            }
        };
        referenced_outside_code(layout.bytes, &mut take)?;
        let mut cells: HashMap<(u32, u32), u32> = HashMap::new();
        let mut pairs = Vec::new();
        let mut sites = Vec::with_capacity(layout.defined_funcs.len());
        let mut indirect_sites = 0usize;
        for (d, func) in layout.defined_funcs.iter().enumerate() {
            let caller = imports + d as u32;
            let resumes = layout.go
                && layout
                    .names
                    .get(&caller)
                    .is_some_and(|n| n.starts_with("wasm_pc_f_loop"));
            let body = FunctionBody::new(BinaryReader::new(
                &layout.bytes[func.body.clone()],
                func.body.start,
            ));
            let mut operators = body.get_operators_reader()?;
            let mut own = Vec::new();
            while !operators.eof() {
                let (operator, at) = operators.read_with_offset()?;
                let next = operators.original_position();
                let kind = match operator {
                    Operator::Call { function_index } | Operator::ReturnCall { function_index } => {
                        let fresh = pairs.len() as u32;
                        let cell = *cells.entry((caller, function_index)).or_insert(fresh);
                        if cell == fresh {
                            pairs.push((caller, function_index));
                        }
                        SiteKind::Direct(cell)
                    }
                    Operator::CallIndirect { .. } | Operator::CallRef { .. } if !resumes => {
                        SiteKind::Indirect { tail: false }
                    }
                    Operator::ReturnCallIndirect { .. } | Operator::ReturnCallRef { .. }
                        if !resumes =>
                    {
                        SiteKind::Indirect { tail: true }
                    }
                    Operator::RefFunc { function_index } => {
                        take(function_index);
                        continue;
                    }
                    _ => continue,
                };
                indirect_sites += usize::from(matches!(kind, SiteKind::Indirect { .. }));
                own.push(Site { at, next, kind });
            }
            sites.push(own);
        }
        let reachable = taken.iter().filter(|&&t| t).count();
        // Room for four pairs per function a table reaches, at least 256 slots, at most
        // 2^18 (4 MiB).
        let slots = match indirect_sites > 0 && reachable > 0 {
            true => (4 * reachable).next_power_of_two().clamp(256, 1 << 18) as u32,
            false => 0,
        };
        if slots == 0 {
            // Nothing reaches the entries' look: the sites need not set the global.
            for own in &mut sites {
                own.retain(|s| matches!(s.kind, SiteKind::Direct(_)));
            }
            taken.iter_mut().for_each(|t| *t = false);
        }
        Ok(EdgePlan {
            sites,
            table: EdgeTable {
                direct: pairs.len() as u32,
                slots,
            },
            pairs,
            taken,
        })
    }

    /// Whether the module counts indirect calls (and so has `arc` and its global).
    pub fn counts_indirect(&self) -> bool {
        self.table.slots > 0
    }
}

/// Calls `take` with each function an element segment or a global's initializer names.
fn referenced_outside_code(bytes: &[u8], take: &mut impl FnMut(u32)) -> Result<(), AgentError> {
    fn in_expression(
        expr: &wasmparser::ConstExpr<'_>,
        take: &mut impl FnMut(u32),
    ) -> Result<(), AgentError> {
        for operator in expr.get_operators_reader() {
            if let Operator::RefFunc { function_index } = operator? {
                take(function_index);
            }
        }
        Ok(())
    }
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            wasmparser::Payload::ElementSection(reader) => {
                for element in reader {
                    match element?.items {
                        wasmparser::ElementItems::Functions(functions) => {
                            for f in functions {
                                take(f?);
                            }
                        }
                        wasmparser::ElementItems::Expressions(_, expressions) => {
                            for e in expressions {
                                in_expression(&e?, take)?;
                            }
                        }
                    }
                }
            }
            wasmparser::Payload::GlobalSection(reader) => {
                for global in reader {
                    in_expression(&global?.init_expr, take)?;
                }
            }
            wasmparser::Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(())
}

/// Indices the counted module gives what counts its edges.
#[derive(Debug, Clone, Copy)]
pub(super) struct EdgeIndices {
    /// The edges' memory.
    pub memory: u32,
    /// The global an indirect site puts its caller + 1 in (with indirect calls counted).
    pub from: u32,
    /// The `arc` function (with indirect calls counted).
    pub arc: u32,
}

impl EdgeIndices {
    fn i64_at(self, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
            align: 3,
            memory_index: self.memory,
        }
    }

    fn i32_at(self, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
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

    /// What an indirect site in function `caller` adds before it calls.
    pub fn announce(self, caller: u32) -> [Instruction<'static>; 2] {
        [
            Instruction::I32Const(caller.wrapping_add(1) as i32),
            Instruction::GlobalSet(self.from),
        ]
    }

    /// What an indirect site adds after its call returns.
    pub fn forget(self) -> [Instruction<'static>; 2] {
        [Instruction::I32Const(0), Instruction::GlobalSet(self.from)]
    }

    /// What function `callee`, which a table or a reference may reach, adds at its entry.
    pub fn look(self, callee: u32) -> [Instruction<'static>; 6] {
        [
            Instruction::GlobalGet(self.from),
            Instruction::If(BlockType::Empty),
            Instruction::GlobalGet(self.from),
            Instruction::I32Const(callee as i32),
            Instruction::Call(self.arc),
            Instruction::End,
        ]
    }

    /// The body of `arc(caller + 1, callee)` (locals and code, without its size): zeroes
    /// the global, then counts the pair in its slot of the table, found from its hash by
    /// linear probing, or as lost when every slot holds another pair.
    pub fn arc_body(self, table: EdgeTable) -> Vec<u8> {
        use Instruction as I;
        let (from, callee, slot, left) = (0, 1, 2, 3);
        let base = table.slots_at();
        let shift = 32 - table.slots.trailing_zeros() as i32;
        let mut code = vec![
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
        for i in code.drain(..) {
            wasm_encoder::Encode::encode(&i, &mut out);
        }
        out
    }
}

/// The type of `arc`, as a type section entry: `(i32, i32) -> ()`.
pub(super) const ARC_TYPE: [u8; 5] = [0x60, 0x02, 0x7F, 0x7F, 0x00];
