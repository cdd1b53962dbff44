//! The `wprof.probe-code` custom section of a sample- or time-mode module: which bytes of its
//! code are wprof's probes rather than the original's instructions.
//!
//! Sample mode reads the program counter; the engine's address map turns it into a byte
//! offset of the instrumented module, and this section says whether that byte is a probe.
//! A sample in a probe is time the uninstrumented program never spends, so the host leaves
//! it out, as it does the node finder's. The section sits inside the module it describes,
//! so a compiled module and its map can never disagree.
//!
//! Payload: a version byte (1), the number of ranges, then per range, as unsigned LEB128,
//! its distance from the end of the previous range (from 0 for the first) and its length.
//! Ranges are absolute offsets in the module, sorted, not overlapping.

use wasm_encoder::Encode;
use wasmparser::{Parser, Payload};

/// The custom section's name.
pub const SECTION: &str = "wprof.probe-code";

const VERSION: u8 = 1;

/// The byte ranges of a module's code that are probes, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeCode {
    ranges: Vec<(u32, u32)>,
}

impl ProbeCode {
    /// The map of `ranges` (absolute, sorted, not overlapping).
    pub(crate) fn new(ranges: Vec<(u32, u32)>) -> Self {
        ProbeCode { ranges }
    }

    /// The section's payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        (self.ranges.len() as u32).encode(&mut out);
        let mut at = 0u32;
        for &(start, end) in &self.ranges {
            (start - at).encode(&mut out);
            (end - start).encode(&mut out);
            at = end;
        }
        out
    }

    /// The map in `module`'s `wprof.probe-code` section; `None` when the module has none or
    /// it is malformed.
    pub fn of_module(module: &[u8]) -> Option<Self> {
        let mut parser = Parser::new(0);
        let mut at = 0usize;
        loop {
            let (payload, consumed) = match parser.parse(&module[at..], true).ok()? {
                wasmparser::Chunk::NeedMoreData(_) => return None,
                wasmparser::Chunk::Parsed { payload, consumed } => (payload, consumed),
            };
            at += consumed;
            match payload {
                Payload::CustomSection(section) if section.name() == SECTION => {
                    return Self::decode(section.data());
                }
                Payload::CodeSectionStart { size, .. } => {
                    // The bodies are not needed: step over them.
                    at += size as usize;
                    parser.skip_section();
                }
                Payload::End(_) => return None,
                _ => {}
            }
        }
    }

    /// The map in a section's payload (see [`ProbeCode::encode`]); `None` if malformed.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let mut reader = wasmparser::BinaryReader::new(data, 0);
        if reader.read_u8().ok()? != VERSION {
            return None;
        }
        let count = reader.read_var_u32().ok()?;
        let mut ranges = Vec::with_capacity(count.min(1 << 20) as usize);
        let mut at = 0u32;
        for _ in 0..count {
            let start = at.checked_add(reader.read_var_u32().ok()?)?;
            let end = start.checked_add(reader.read_var_u32().ok()?)?;
            ranges.push((start, end));
            at = end;
        }
        reader.eof().then_some(ProbeCode { ranges })
    }

    /// Whether the byte at `offset` of the module belongs to a probe.
    pub fn contains(&self, offset: u32) -> bool {
        let after = self.ranges.partition_point(|&(start, _)| start <= offset);
        after
            .checked_sub(1)
            .is_some_and(|i| offset < self.ranges[i].1)
    }

    /// The ranges, absolute, sorted.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_survive_encoding_and_answer_membership() {
        let code = ProbeCode::new(vec![(10, 14), (14, 20), (300, 301), (70_000, 70_400)]);
        let decoded = ProbeCode::decode(&code.encode()).unwrap();
        assert_eq!(decoded, code);
        assert!(!decoded.contains(9));
        assert!(decoded.contains(10));
        assert!(decoded.contains(19));
        assert!(!decoded.contains(20));
        assert!(decoded.contains(300));
        assert!(!decoded.contains(301));
        assert!(decoded.contains(70_399));
        assert!(!decoded.contains(u32::MAX));
    }

    #[test]
    fn malformed_payloads_are_refused() {
        let good = ProbeCode::new(vec![(1, 2)]).encode();
        assert!(ProbeCode::decode(&good[..good.len() - 1]).is_none());
        let mut extra = good.clone();
        extra.push(0);
        assert!(ProbeCode::decode(&extra).is_none());
        let mut other_version = good;
        other_version[0] = 9;
        assert!(ProbeCode::decode(&other_version).is_none());
    }
}
