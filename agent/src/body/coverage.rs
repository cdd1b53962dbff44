//! Coverage (see [`crate::ProbePlan::coverage`]): before the first instruction of each
//! basic block, `counter += 1` on an `i64` global of its own.
//!
//! A body cannot know which globals its counters are (that depends on how many blocks the
//! functions before it have, and a body is cached alone), so it numbers them from 0 and
//! writes each index as a five-byte LEB128, which the assembler overwrites in place with
//! the real index (see [`crate::InstrumentedBody::counter_sites`]): offsets do not move.

use wasmparser::Operator;

use super::emitter::Emitter;

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

/// `global.get` and `global.set`.
const GLOBAL_GET: u8 = 0x23;
const GLOBAL_SET: u8 = 0x24;

/// A counter increment as the body holds it: `global.get K; i64.const 1; i64.add;
/// global.set K`, K a five-byte LEB128 at [`FIRST_INDEX`] and [`SECOND_INDEX`].
pub(crate) const INCREMENT_LEN: usize = 15;
/// Where the `global.get`'s index starts in an increment.
pub(crate) const FIRST_INDEX: usize = 1;
/// Where the `global.set`'s index starts in an increment.
pub(crate) const SECOND_INDEX: usize = 10;

/// `index` as a five-byte LEB128.
pub(crate) fn padded_leb(index: u32) -> [u8; 5] {
    let mut out = [0u8; 5];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = ((index >> (7 * i)) & 0x7f) as u8 | if i < 4 { 0x80 } else { 0 };
    }
    out
}

/// Writes global `index` into the increment at `site` of `body` (see
/// [`crate::InstrumentedBody::counter_sites`]); `false` if no increment is there.
pub(crate) fn patch(body: &mut [u8], site: usize, index: u32) -> bool {
    let Some(increment) = body.get_mut(site..site + INCREMENT_LEN) else {
        return false;
    };
    if increment[0] != GLOBAL_GET || increment[SECOND_INDEX - 1] != GLOBAL_SET {
        return false;
    }
    let leb = padded_leb(index);
    increment[FIRST_INDEX..FIRST_INDEX + 5].copy_from_slice(&leb);
    increment[SECOND_INDEX..SECOND_INDEX + 5].copy_from_slice(&leb);
    true
}

/// A body's block map as the rewriting loop builds it (see
/// [`crate::InstrumentedBody::blocks`] and [`crate::InstrumentedBody::counter_sites`]).
#[derive(Debug, Default)]
pub(super) struct BlockMap {
    pub(super) blocks: Vec<(u32, BlockCount)>,
    pub(super) counter_sites: Vec<u32>,
}

impl Emitter<'_> {
    /// A basic block starts at `start` (an offset in the original body), its count known
    /// as `how`: recorded, and before its first instruction its counter += 1 if it has one.
    /// Nothing without coverage.
    pub(super) fn begin_block(&mut self, start: u32, how: BlockCount) {
        let Some(map) = &mut self.blocks else {
            return;
        };
        map.blocks.push((start, how));
        if how != BlockCount::Counter {
            return;
        }
        let k = map.counter_sites.len() as u32;
        map.counter_sites.push(self.out.len() as u32);
        let leb = padded_leb(k);
        self.out.push(GLOBAL_GET);
        self.out.extend_from_slice(&leb);
        self.out.extend_from_slice(&[0x42, 0x01, 0x7c, GLOBAL_SET]);
        self.out.extend_from_slice(&leb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_indices_read_back_as_leb128() {
        for index in [0, 1, 127, 128, 70_000, 899_999, u32::MAX] {
            let bytes = padded_leb(index);
            let mut reader = wasmparser::BinaryReader::new(&bytes, 0);
            assert_eq!(reader.read_var_u32().unwrap(), index);
            assert!(reader.eof());
        }
    }

    #[test]
    fn a_patch_rewrites_both_indices_in_place() {
        let mut body = vec![0u8; 3];
        body.push(GLOBAL_GET);
        body.extend_from_slice(&padded_leb(2));
        body.extend_from_slice(&[0x42, 0x01, 0x7c, GLOBAL_SET]);
        body.extend_from_slice(&padded_leb(2));
        let len = body.len();
        assert!(patch(&mut body, 3, 300));
        assert_eq!(body.len(), len);
        assert_eq!(&body[4..9], &padded_leb(300));
        assert_eq!(&body[13..18], &padded_leb(300));
        assert!(!patch(&mut body, 2, 1));
        assert!(!patch(&mut body, 10, 1));
    }
}
