//! Coverage's blocks: how a basic block's count is known, and the block map a body's
//! rewriting builds (named by the emitter, filled by [`super::coverage`]'s probes).

use wasmparser::Operator;

/// How a basic block's count is known (see [`crate::InstrumentedBody::blocks`]). Only
/// blocks that control can reach other than by falling into them have counters: a C
/// `switch` compiled to a `br_table` opens a hundred nested `block`s before it, each
/// starting a block of one instruction that runs exactly as often as the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockCount {
    /// The block has a counter of its own.
    Counter,
    /// Control reaches the block only from the block before it, which always falls into
    /// it: after a `block`, `try_table` or `try`, or after the `end` of a `loop`.
    AsPrevious,
    /// Nothing reaches the block: it follows a `br`, `br_table`, `return`, `unreachable`,
    /// a throw or a tail call, in the same enclosing block.
    Never,
}

impl BlockCount {
    /// The kind of the block that follows `op`, which ended the one before; `closed_loop`:
    /// `op` is the `end` of a `loop`.
    pub(super) fn after(op: &Operator<'_>, closed_loop: bool) -> Self {
        use Operator::*;
        match op {
            Block { .. } | TryTable { .. } | Try { .. } => BlockCount::AsPrevious,
            End if closed_loop => BlockCount::AsPrevious,
            Br { .. }
            | BrTable { .. }
            | Return
            | Unreachable
            | Throw { .. }
            | ThrowRef
            | Rethrow { .. }
            | ReturnCall { .. }
            | ReturnCallIndirect { .. }
            | ReturnCallRef { .. } => BlockCount::Never,
            _ => BlockCount::Counter,
        }
    }

    /// A number for the kind, for storage: 0, 1 or 2.
    pub fn code(self) -> u8 {
        match self {
            BlockCount::Counter => 0,
            BlockCount::AsPrevious => 1,
            BlockCount::Never => 2,
        }
    }

    /// The kind of [`BlockCount::code`] `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(BlockCount::Counter),
            1 => Some(BlockCount::AsPrevious),
            2 => Some(BlockCount::Never),
            _ => None,
        }
    }
}

/// A body's block map as the rewriting loop builds it (see
/// [`crate::InstrumentedBody::blocks`] and [`crate::InstrumentedBody::counter_sites`]).
#[derive(Debug, Default)]
pub(super) struct BlockMap {
    pub(super) blocks: Vec<(u32, BlockCount)>,
    pub(super) counter_sites: Vec<u32>,
}
