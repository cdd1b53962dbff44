//! Packs: many small keyed values stored as one cache value, so that a 46k-function module
//! costs one file instead of 46k (instrumented bodies, and compiled functions, each per
//! lineage).
//!
//! `magic (8) | u32 count | (key (32) | u32 len | value)*` with keys in order, compressed
//! with [`zstd_frames`]. The cache's envelope checks the whole; [`unpack`] rejects anything
//! malformed rather than returning part of it.

use std::collections::HashMap;

use crate::prepare::zstd_frames;

/// Keyed values, as packed.
pub type Values = HashMap<[u8; 32], Vec<u8>>;

/// `values` packed under `magic` (what kind of pack this is, with its version).
pub fn pack(magic: &[u8; 8], values: &Values) -> std::io::Result<Vec<u8>> {
    zstd_frames::compress(&encode(magic, values))
}

/// `values` packed under `magic`, not yet compressed (for a pack stored against another
/// value: see [`crate::prepare::referenced`]).
pub fn encode(magic: &[u8; 8], values: &Values) -> Vec<u8> {
    let mut keys: Vec<&[u8; 32]> = values.keys().collect();
    keys.sort_unstable();
    let size = 12 + values.values().map(|v| 36 + v.len()).sum::<usize>();
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for key in keys {
        let value = &values[key];
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        bytes.extend_from_slice(value);
    }
    bytes
}

/// The inverse of [`pack`] for a pack of `magic`; `None` for anything malformed or of
/// another magic.
pub fn unpack(magic: &[u8; 8], stored: &[u8]) -> Option<Values> {
    decode(magic, &zstd_frames::expand(stored).ok()?)
}

/// The inverse of [`encode`] for a pack of `magic`; `None` for anything malformed or of
/// another magic.
pub fn decode(magic: &[u8; 8], bytes: &[u8]) -> Option<Values> {
    let rest = bytes.strip_prefix(magic)?;
    let (count, mut rest) = rest.split_at_checked(4)?;
    let count = u32::from_le_bytes(count.try_into().ok()?) as usize;
    let mut values = HashMap::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let (key, after) = rest.split_at_checked(32)?;
        let (len, after) = after.split_at_checked(4)?;
        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let (value, after) = after.split_at_checked(len)?;
        values.insert(key.try_into().ok()?, value.to_vec());
        rest = after;
    }
    rest.is_empty().then_some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let values: Values = (0..100u8).map(|i| ([i; 32], vec![i; i as usize])).collect();
        let stored = pack(b"testpak1", &values).unwrap();
        assert_eq!(unpack(b"testpak1", &stored), Some(values.clone()));
        assert_eq!(unpack(b"otherpk1", &stored), None);
        assert_eq!(unpack(b"testpak1", &stored[..stored.len() - 1]), None);
        // A pack that says it holds more than it does.
        let mut raw = zstd_frames::expand(&stored).unwrap();
        raw.truncate(raw.len() - 5);
        assert_eq!(
            unpack(b"testpak1", &zstd_frames::compress(&raw).unwrap()),
            None
        );
        assert_eq!(
            unpack(b"testpak1", &pack(b"testpak1", &Values::new()).unwrap()),
            Some(Values::new())
        );
        assert_eq!(unpack(b"testpak1", b"not zstd"), None);
        let plain = zstd_frames::expand(&stored).unwrap();
        for cut in [0, 8, 12, 40, plain.len() - 1] {
            let again = zstd_frames::compress(&plain[..cut]).unwrap();
            assert_eq!(unpack(b"testpak1", &again), None, "cut at {cut}");
        }
    }
}
