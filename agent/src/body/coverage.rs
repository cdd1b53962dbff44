//! Coverage (see [`crate::ProbePlan::coverage`]): before the first instruction of each
//! basic block, `counter += 1` on an `i64` of its own in the tree's memory (see
//! [`crate::ContextArena::counters`]).
//!
//! A body cannot know where its counters are (that depends on how many blocks the
//! functions before it have, and a body is cached alone), so it numbers them from 0 and
//! writes each address as a five-byte LEB128 offset, which the assembler overwrites in
//! place with the real address (see [`crate::InstrumentedBody::counter_sites`]): offsets
//! do not move.

use super::blocks::BlockCount;
use super::emitter::Emitter;

/// `i32.const 0`.
const ZERO: [u8; 2] = [0x41, 0x00];
/// `i64.load` and `i64.store`.
const I64_LOAD: u8 = 0x29;
const I64_STORE: u8 = 0x37;
/// A memarg's flags: 8-byte alignment, with a memory index (multi-memory).
const ALIGN_8_WITH_MEMORY: u8 = 0x03 | 0x40;
/// `i64.const 1; i64.add`.
const PLUS_ONE: [u8; 3] = [0x42, 0x01, 0x7c];

/// A counter increment as the body holds it: `i32.const 0; i32.const 0; i64.load M
/// offset=A; i64.const 1; i64.add; i64.store M offset=A`, M the tree's memory, A a
/// five-byte LEB128.
fn increment(memory: u32, address: u32) -> Vec<u8> {
    let memarg = |op: u8, out: &mut Vec<u8>| {
        out.push(op);
        out.push(ALIGN_8_WITH_MEMORY);
        leb128_u32(memory, out);
        out.extend_from_slice(&padded_leb(address));
    };
    let mut out = Vec::with_capacity(25);
    out.extend_from_slice(&ZERO);
    out.extend_from_slice(&ZERO);
    memarg(I64_LOAD, &mut out);
    out.extend_from_slice(&PLUS_ONE);
    memarg(I64_STORE, &mut out);
    out
}

fn leb128_u32(mut value: u32, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `index` as a five-byte LEB128.
pub(crate) fn padded_leb(index: u32) -> [u8; 5] {
    let mut out = [0u8; 5];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = ((index >> (7 * i)) & 0x7f) as u8 | if i < 4 { 0x80 } else { 0 };
    }
    out
}

/// Writes `address` into the increment at `site` of `body` (see
/// [`crate::InstrumentedBody::counter_sites`]), an increment on memory `memory`; `false` if
/// no such increment is there.
pub(crate) fn patch(body: &mut [u8], site: usize, memory: u32, address: u32) -> bool {
    let placeholder = increment(memory, 0);
    let Some(at) = body.get_mut(site..site + placeholder.len()) else {
        return false;
    };
    // Everything but the two addresses, which the body may hold any value in.
    let addresses = address_ranges(memory);
    let same_shape = at
        .iter()
        .zip(&placeholder)
        .enumerate()
        .all(|(i, (a, b))| a == b || addresses.iter().any(|r| r.contains(&i)));
    if !same_shape {
        return false;
    }
    let leb = padded_leb(address);
    for r in addresses {
        at[r].copy_from_slice(&leb);
    }
    true
}

/// Where an increment on memory `memory` holds its two addresses.
fn address_ranges(memory: u32) -> [std::ops::Range<usize>; 2] {
    let mut index = Vec::new();
    leb128_u32(memory, &mut index);
    // Two `i32.const 0`, the load's opcode and flags, the memory index.
    let first = ZERO.len() * 2 + 2 + index.len();
    // The first address, `i64.const 1; i64.add`, the store's opcode and flags, the index.
    let second = first + 5 + PLUS_ONE.len() + 2 + index.len();
    [first..first + 5, second..second + 5]
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
        let Some((arena, _)) = self.inline else {
            return;
        };
        map.counter_sites.push(self.out.len() as u32);
        // The body's `k`-th counter, until the assembler places it.
        let k = map.counter_sites.len() as u32 - 1;
        self.out.extend_from_slice(&increment(arena.memory, 8 * k));
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
    fn a_patch_rewrites_both_addresses_in_place() {
        for memory in [0, 1, 200] {
            let mut body = vec![0u8; 3];
            body.extend_from_slice(&increment(memory, 16));
            let len = body.len();
            assert!(patch(&mut body, 3, memory, 300_000));
            assert_eq!(body.len(), len);
            assert_eq!(&body[3..], &increment(memory, 300_000)[..]);
            // The increment reads and writes the same address, as wasmparser reads it.
            let mut reader =
                wasmparser::OperatorsReader::new(wasmparser::BinaryReader::new(&body[3..], 0));
            let mut offsets = Vec::new();
            while !reader.eof() {
                match reader.read().unwrap() {
                    wasmparser::Operator::I64Load { memarg }
                    | wasmparser::Operator::I64Store { memarg } => {
                        assert_eq!(memarg.memory, memory);
                        offsets.push(memarg.offset);
                    }
                    _ => {}
                }
            }
            assert_eq!(offsets, [300_000, 300_000]);
            // Not an increment, or one on another memory: left alone.
            assert!(!patch(&mut body, 2, memory, 1));
            assert!(!patch(&mut body, 3, memory + 1, 1));
        }
    }
}
