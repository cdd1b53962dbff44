//! Where a counted module's added instructions are ([`CounterOffsets`]): the map from its
//! code offsets back to the original's, and the map's own encoding, kept where the module
//! itself is not at hand.

use wasm_encoder::Encode;
use wasmparser::BinaryReader;

/// Where a counted module's added instructions are: what turns its code offsets into the
/// original's. Small enough to keep (about 4 bytes a function, [`CounterOffsets::encode`])
/// where the module itself is not at hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterOffsets {
    /// The instructions added, in order: the original's code lies between them.
    pub(super) added: Vec<Added>,
    /// The end of the code section in the counted module.
    pub(super) code_end: usize,
}

/// Instructions the counters added: where in the counted module, how many bytes, and the
/// offset in the original of the instruction they precede.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Added {
    pub(super) at: usize,
    pub(super) len: usize,
    pub(super) before: usize,
}

impl CounterOffsets {
    /// The offset in the original module of the instruction at `offset` in the counted
    /// one (an added instruction has the offset of the one it precedes); `None` outside the
    /// code.
    pub fn original_offset(&self, offset: usize) -> Option<usize> {
        if offset >= self.code_end {
            return None;
        }
        let added = self.last_added_at_or_before(offset)?;
        Some(added.before + offset.saturating_sub(added.at + added.len))
    }

    /// Whether the byte at `offset` in the counted module belongs to a counter's
    /// instructions rather than to the original's code.
    pub fn is_added(&self, offset: usize) -> bool {
        self.last_added_at_or_before(offset)
            .is_some_and(|a| offset < a.at + a.len)
    }

    fn last_added_at_or_before(&self, offset: usize) -> Option<&Added> {
        let at = self.added.partition_point(|a| a.at <= offset);
        self.added.get(at.checked_sub(1)?)
    }

    /// The map in LEB128: the end of the code, the number of places, then each place as
    /// the distances from the previous one (in the counted module and in the original) and
    /// its length.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.added.len() * 4 + 10);
        self.code_end.encode(&mut out);
        self.added.len().encode(&mut out);
        let (mut at, mut before) = (0, 0);
        for a in &self.added {
            (a.at - at).encode(&mut out);
            (a.before - before).encode(&mut out);
            a.len.encode(&mut out);
            (at, before) = (a.at, a.before);
        }
        out
    }

    /// The map [`CounterOffsets::encode`] wrote; `None` if `bytes` is not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut reader = BinaryReader::new(bytes, 0);
        let mut read = || reader.read_var_u32().ok().map(|v| v as usize);
        let code_end = read()?;
        let count = read()?;
        let mut added = Vec::with_capacity(count.min(bytes.len()));
        let (mut at, mut before) = (0usize, 0usize);
        for _ in 0..count {
            at = at.checked_add(read()?)?;
            before = before.checked_add(read()?)?;
            added.push(Added {
                at,
                before,
                len: read()?,
            });
        }
        (reader.eof() && added.last().is_none_or(|a| a.at + a.len <= code_end))
            .then_some(Self { added, code_end })
    }
}
