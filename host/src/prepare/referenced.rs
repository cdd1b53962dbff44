//! Values stored against another value of the cache, their *reference*: what the two have
//! in common is stored once. A module's compiled functions hold the same machine code as its
//! compiled artifact; stored against it, nextpnr's (2.3 MB of wasm) take 3.7 MB instead of
//! 5.9 MB.
//!
//! `MAGIC (8) | locator (32) | blake3 of the reference (32) | frames`, the frames made by
//! [`zstd_frames::compress_after`] with the reference's bytes. The locator says where the
//! reference is (its cache key: what it means is the user's business); the digest says
//! which bytes it must be, so that a reference replaced since (another compile of the same
//! module) is never used to expand the value: the value is then a miss, as when the
//! reference is gone.

use crate::prepare::zstd_frames;

/// What a value stored against a reference starts with.
const MAGIC: &[u8; 8] = b"wpref\0v1";

/// Where a value's reference is, and which bytes it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference {
    /// Where to find it (a cache key).
    pub locator: [u8; 32],
    /// blake3 of its bytes.
    pub digest: [u8; 32],
}

/// `bytes` stored against `reference`, found at `locator`.
pub fn encode(bytes: &[u8], locator: [u8; 32], reference: &[u8]) -> std::io::Result<Vec<u8>> {
    let frames = zstd_frames::compress_after(bytes, reference)?;
    let mut stored = Vec::with_capacity(72 + frames.len());
    stored.extend_from_slice(MAGIC);
    stored.extend_from_slice(&locator);
    stored.extend_from_slice(blake3::hash(reference).as_bytes());
    stored.extend_from_slice(&frames);
    Ok(stored)
}

/// The reference of `stored`, if it is a value stored against one (`None` for anything
/// else, a plain value among them).
pub fn reference(stored: &[u8]) -> Option<Reference> {
    let rest = stored.strip_prefix(MAGIC)?;
    Some(Reference {
        locator: rest.get(..32)?.try_into().ok()?,
        digest: rest.get(32..64)?.try_into().ok()?,
    })
}

/// The bytes of `stored`, expanded with `reference` (the bytes its [`Reference`] names);
/// `None` if they are other bytes or `stored` is damaged.
pub fn decode(stored: &[u8], reference: &[u8]) -> Option<Vec<u8>> {
    let named = self::reference(stored)?;
    if blake3::hash(reference).as_bytes() != &named.digest {
        return None;
    }
    zstd_frames::expand_after(&stored[72..], reference).ok()
}

/// Whether `stored` is a well-formed value against a reference (its frames whole), without
/// expanding it.
pub fn is_well_formed(stored: &[u8]) -> bool {
    reference(stored).is_some() && zstd_frames::expanded_len(&stored[72..]).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_reference_expands_a_value() {
        let reference: Vec<u8> = (0..300_000u32)
            .flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes())
            .collect();
        let mut bytes = reference[4000..200_000].to_vec();
        bytes.extend_from_slice(b"and something of its own");
        let stored = encode(&bytes, [5; 32], &reference).unwrap();
        assert!(stored.len() < 1000, "{}", stored.len());
        assert_eq!(
            super::reference(&stored),
            Some(Reference {
                locator: [5; 32],
                digest: *blake3::hash(&reference).as_bytes()
            })
        );
        assert!(is_well_formed(&stored));
        assert_eq!(decode(&stored, &reference), Some(bytes));
        assert_eq!(decode(&stored, &reference[1..]), None);
        assert_eq!(decode(&stored[..stored.len() - 1], &reference), None);
        assert!(!is_well_formed(&stored[..stored.len() - 1]));
        // A plain value is not one, nor is a header alone.
        let plain = zstd_frames::compress(b"plain").unwrap();
        assert_eq!(super::reference(&plain), None);
        assert!(!is_well_formed(&plain));
        assert_eq!(super::reference(&stored[..40]), None);
    }
}
