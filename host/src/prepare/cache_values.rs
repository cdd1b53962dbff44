//! What wprof stores in the cache and how each value is encoded.
//!
//! - [`FunctionEntry`] (kind `functions`): one instrumented body and its offset map, in a
//!   compact binary form (it is read for every function of a changed module).
//!   Stored in packs, one per lineage (see [`crate::prepare::instrument::function_lookups`]).
//! - [`Manifest`] (kind `manifests`): what an instrumented module is made of: its
//!   functions, their names and keys, and the digest of the assembled module, as JSON
//!   compressed with [`zstd_frames`].
//! - the assembled instrumented module itself, and the original module it was made from
//!   (kind `modules`, each keyed by its own blake3), compressed with [`zstd_frames`]
//!   ([`encode_module`]): support can print, diff and export both without the user's files.
//! - [`ArtifactEntry`] (kind `artifacts`): wasmtime's compiled form of an instrumented
//!   module for one engine, in a file beside the store; the record holds what the file is
//!   and its MAC under this user's secret key (see [`crate::prepare::artifacts`]).

use serde::{Deserialize, Serialize};

use crate::prepare::zstd_frames;

/// A module as the `modules` kind stores it: compressed.
pub fn encode_module(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd_frames::compress(bytes)
}

/// The module stored as `stored` under `key`, its blake3; `None` if it does not expand or
/// is not the module of that digest.
pub fn decode_module(stored: &[u8], key: &[u8; 32]) -> Option<Vec<u8>> {
    let bytes = zstd_frames::expand(stored).ok()?;
    (blake3::hash(&bytes).as_bytes() == key).then_some(bytes)
}

/// The current manifest schema.
pub const MANIFEST_VERSION: u32 = 1;

/// One instrumented function body as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionEntry {
    /// The body as the agent produced it.
    pub body: wprof_agent::InstrumentedBody,
}

impl FunctionEntry {
    /// `u32 len | body bytes | u32 pairs | (u32 original, u32 instrumented)* | u32 ranges |
    /// (u32 start, u32 end)*` (the probe code), little endian.
    pub fn encode(&self) -> Vec<u8> {
        Self::encode_body(&self.body)
    }

    /// [`FunctionEntry::encode`] of an entry holding `body`.
    pub fn encode_body(body: &wprof_agent::InstrumentedBody) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            12 + body.bytes.len() + body.offsets.len() * 8 + body.probe_code.len() * 8,
        );
        out.extend_from_slice(&(body.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&body.bytes);
        out.extend_from_slice(&(body.offsets.len() as u32).to_le_bytes());
        for &(old, new) in &body.offsets {
            out.extend_from_slice(&old.to_le_bytes());
            out.extend_from_slice(&new.to_le_bytes());
        }
        out.extend_from_slice(&(body.probe_code.len() as u32).to_le_bytes());
        for &(start, end) in &body.probe_code {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&end.to_le_bytes());
        }
        out
    }

    /// The inverse of [`FunctionEntry::encode`]; `None` for anything malformed.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut at = 0usize;
        let u32_at = |at: &mut usize| -> Option<u32> {
            let v = u32::from_le_bytes(bytes.get(*at..*at + 4)?.try_into().ok()?);
            *at += 4;
            Some(v)
        };
        let len = u32_at(&mut at)? as usize;
        let body_bytes = bytes.get(at..at.checked_add(len)?)?.to_vec();
        at += len;
        let offsets = Self::pairs(bytes, &mut at)?;
        let probe_code = Self::pairs(bytes, &mut at)?;
        if at != bytes.len() {
            return None;
        }
        Some(Self {
            body: wprof_agent::InstrumentedBody {
                bytes: body_bytes,
                offsets,
                probe_code,
            },
        })
    }

    /// `u32 count | (u32, u32)*` at `at`, which moves past it.
    fn pairs(bytes: &[u8], at: &mut usize) -> Option<Vec<(u32, u32)>> {
        let u32_at = |at: &mut usize| -> Option<u32> {
            let v = u32::from_le_bytes(bytes.get(*at..*at + 4)?.try_into().ok()?);
            *at += 4;
            Some(v)
        };
        let count = u32_at(at)? as usize;
        if bytes.len() < at.checked_add(count.checked_mul(8)?)? {
            return None;
        }
        let mut pairs = Vec::with_capacity(count);
        for _ in 0..count {
            let first = u32_at(at)?;
            let second = u32_at(at)?;
            pairs.push((first, second));
        }
        Some(pairs)
    }
}

/// One function as a manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFunction {
    /// Index in the original module (the probe id).
    pub id: u32,
    /// Display name.
    pub name: String,
    /// `local` or `import`.
    pub kind: String,
    /// Cache key of the instrumented body (hex), for defined functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Body byte range in the original module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_body: Option<(u32, u32)>,
    /// Body byte range in the instrumented module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instrumented_body: Option<(u32, u32)>,
}

/// What an instrumented module is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub manifest_version: u32,
    /// blake3 of the original module (hex).
    pub module_digest: String,
    /// blake3 of the instrumented module (hex): its key in the `modules` keyspace.
    pub instrumented_digest: String,
    /// Size of the original module in bytes.
    pub original_size: u64,
    /// Size of the instrumented module in bytes.
    pub instrumented_size: u64,
    /// The agent format version that produced it.
    pub agent_version: u32,
    /// The probe mode.
    pub mode: String,
    /// Whether calls carry call-site probes.
    #[serde(default)]
    pub call_sites: bool,
    /// The path the module was loaded from when the manifest was written.
    pub path: String,
    /// Every function, in id order.
    pub functions: Vec<ManifestFunction>,
}

impl Manifest {
    /// JSON bytes, compressed.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("a manifest always serializes");
        zstd_frames::compress(&json).unwrap_or(json)
    }

    /// Parses a manifest; `None` if malformed or of another version.
    pub fn decode(stored: &[u8]) -> Option<Self> {
        let bytes = zstd_frames::expand(stored).ok()?;
        let m: Manifest = serde_json::from_slice(&bytes).ok()?;
        (m.manifest_version == MANIFEST_VERSION).then_some(m)
    }
}

/// The record of a compiled artifact (its machine code is the companion file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactEntry {
    /// blake3 of the instrumented module it was compiled from (hex).
    pub instrumented_digest: String,
    /// The engine fingerprint it was compiled for (hex): wasmtime version, configuration
    /// and target.
    pub engine: String,
    /// wasmtime version, for people reading `wprof cache ls`.
    pub wasmtime: String,
    /// blake3 keyed with the user's secret key over the artifact key and the file (hex).
    pub mac: String,
}

impl ArtifactEntry {
    /// JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an artifact record always serializes")
    }

    /// Parses a record; `None` if malformed.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_entries_round_trip_and_reject_garbage() {
        let entry = FunctionEntry {
            body: wprof_agent::InstrumentedBody {
                bytes: vec![0, 0x41, 1, 0x0b],
                offsets: vec![(1, 5), (3, 9)],
                probe_code: vec![(2, 5), (7, 9)],
            },
        };
        let bytes = entry.encode();
        assert_eq!(FunctionEntry::decode(&bytes), Some(entry));
        for cut in 0..bytes.len() {
            assert_eq!(FunctionEntry::decode(&bytes[..cut]), None);
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(FunctionEntry::decode(&longer), None);
    }
}
