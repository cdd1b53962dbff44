//! Usage records: when an entry was first stored and last used, how often it was read, how
//! many bytes it takes, and a short note the host may attach (wprof keeps the path a module
//! was last loaded from). They drive `ls` and the least-recently-used eviction.
//!
//! A record lives in its own tree under `kind tag | key` and is sealed like any value; a
//! damaged record reads as absent (the entry then looks never used, and is evicted first).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How an entry has been used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// When the entry was first written (ms since the Unix epoch).
    pub first_use: u64,
    /// When the entry was last written or read (ms since the Unix epoch).
    pub last_use: u64,
    /// Reads that found it valid.
    pub hits: u64,
    /// Bytes it takes in the store (envelope included) plus its file, if it has one.
    pub size: u64,
    /// What the host attached (wprof: the path the module was last loaded from).
    pub note: Vec<u8>,
}

impl Usage {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.note.len());
        for v in [self.first_use, self.last_use, self.hits, self.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.note.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.note);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let note_len = u32::from_le_bytes(bytes.get(32..36)?.try_into().ok()?) as usize;
        if bytes.len() != 36usize.checked_add(note_len)? {
            return None;
        }
        Some(Self {
            first_use: u64_at(0)?,
            last_use: u64_at(1)?,
            hits: u64_at(2)?,
            size: u64_at(3)?,
            note: bytes[36..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let u = Usage {
            first_use: 1,
            last_use: 2,
            hits: 3,
            size: 4,
            note: b"app.wasm".to_vec(),
        };
        let bytes = u.encode();
        assert_eq!(Usage::decode(&bytes), Some(u));
        for cut in 0..bytes.len() {
            assert_eq!(Usage::decode(&bytes[..cut]), None);
        }
    }
}
