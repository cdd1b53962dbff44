//! Polls: places where a counted module asks whether the host wants a sample, so that the
//! host can take one without interrupting the thread.
//!
//! A poll reads one word, the poll cell (the `u32` at [`POLL_OFFSET`] in the capture
//! memory, each thread's instance its own), and, when it is not 0, calls the host through
//! the table the module exports as [`POLL_TABLE`]: element [`AT_ENTRY`] from a function's
//! first instructions, element [`INSIDE`] from anywhere else in it. A thread on another
//! core sets the cell when a sample is due; the host function called clears it and walks
//! the stack from there.
//!
//! Where the polls are decides whose time a sample is. Each function polls at its entry
//! and before every way out of it (`return`, a tail call, a branch to the function's own
//! label, its final `end`), so the code between two polls the thread passes belongs to one
//! activation: between a function's entry and its next poll, its own; between a poll
//! before a way out and the next poll (an entry of a callee of the caller, or a way out of
//! the caller), the caller's, once the epilogue ran; and between a caller's poll and a
//! callee's entry, the caller's. So a sample due at any instant is taken at the end of the
//! stretch it fell in, on that stretch's stack: the stack at an inside poll, and at an
//! entry poll the stack without the function just entered, whose caller's code it was.
//!
//! The table's elements are null until the host sets them; the host sets the cell only
//! after it set them, so a poll never calls a null element. Without a host that polls, the
//! cell stays 0 and every poll is a load and a branch not taken.

use wasm_encoder::{BlockType, Instruction, MemArg};
use wasmparser::{FunctionBody, Operator};

use crate::AgentError;

/// The table a polling module exports: [`AT_ENTRY`] and [`INSIDE`], both `[] -> []`.
pub const POLL_TABLE: &str = "wprof:polls";

/// The element a function's entry poll calls.
pub const AT_ENTRY: u32 = 0;

/// The element every other poll calls.
pub const INSIDE: u32 = 1;

/// Where the poll cell is in the capture memory (its last word, which no capture uses).
pub const POLL_OFFSET: u64 = (super::CAPTURE_SLOTS as u64 - 1) * 4;

/// The type of the poll table's functions: no parameters, no results.
pub(super) const POLL_TYPE: [u8; 3] = [0x60, 0x00, 0x00];

/// The table: `funcref`, two elements, no more.
pub(super) const POLL_TABLE_TYPE: [u8; 4] = [0x70, 0x01, 0x02, 0x02];

/// Where a polling module keeps its polls' cell and table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PollIndices {
    /// The capture memory, whose word at [`POLL_OFFSET`] is the cell.
    pub memory: u32,
    /// The table the polls call through.
    pub table: u32,
    /// The type of its functions.
    pub type_index: u32,
}

impl PollIndices {
    /// A poll that calls `element` when the cell is set.
    pub fn poll(self, element: u32) -> [Instruction<'static>; 6] {
        [
            Instruction::I32Const(0),
            Instruction::I32Load(MemArg {
                offset: POLL_OFFSET,
                align: 2,
                memory_index: self.memory,
            }),
            Instruction::If(BlockType::Empty),
            Instruction::I32Const(element as i32),
            Instruction::CallIndirect {
                type_index: self.type_index,
                table_index: self.table,
            },
            Instruction::End,
        ]
    }
}

/// The offsets in `body` of every way out of it: before each `return` and tail call, each
/// branch to the function's own label, and its final `end`.
pub(super) fn ways_out(body: &FunctionBody<'_>) -> Result<Vec<usize>, AgentError> {
    let mut out = Vec::new();
    let mut operators = body.get_operators_reader()?;
    // Blocks open inside the function's own: a branch of this depth leaves the function.
    let mut depth = 0u32;
    while !operators.eof() {
        let (operator, at) = operators.read_with_offset()?;
        let leaves = match operator {
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Try { .. }
            | Operator::TryTable { .. } => {
                depth += 1;
                false
            }
            Operator::End | Operator::Delegate { .. } => match depth.checked_sub(1) {
                Some(d) => {
                    depth = d;
                    false
                }
                // The function's own end.
                None => true,
            },
            Operator::Return
            | Operator::ReturnCall { .. }
            | Operator::ReturnCallIndirect { .. }
            | Operator::ReturnCallRef { .. } => true,
            Operator::Br { relative_depth } | Operator::BrIf { relative_depth } => {
                relative_depth == depth
            }
            Operator::BrTable { targets } => {
                targets.default() == depth || targets.targets().any(|t| t.is_ok_and(|t| t == depth))
            }
            _ => false,
        };
        if leaves {
            out.push(at);
        }
    }
    Ok(out)
}
