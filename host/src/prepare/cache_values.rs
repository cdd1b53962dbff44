//! What wprof stores in the cache and how each value is encoded.
//!
//! - [`FunctionEntry`] (kind `functions`): one instrumented body and its offset map, in a
//!   compact binary form (it is read for every function of a changed module).
//!   Stored in packs, one per lineage (see [`crate::prepare::instrument::function_lookups`]).
//! - [`Manifest`] (kind `manifests`): what an instrumented module is made of: its
//!   functions, their names and keys, and the digest of the assembled module, in postcard
//!   (serde's compact binary form) compressed with [`zstd_frames`].
//! - the assembled instrumented module itself, and the original module it was made from
//!   (kind `modules`, each keyed by its own blake3), compressed with [`zstd_frames`]
//!   ([`encode_module`]; the instrumented one against the original, [`encode_module_against`]):
//!   support can print, diff and export both without the user's files.
//! - [`ArtifactEntry`] (kind `artifacts`): wasmtime's compiled form of an instrumented
//!   module for one engine, in a file beside the store; the record holds what the file is
//!   and its MAC under this user's secret key (see [`crate::prepare::artifacts`]).
//! - a module's facts (kind `facts`, keyed by [`facts_key`]): what was learnt of it by
//!   reading it, in postcard (see [`crate::prepare::facts`]).

use serde::{Deserialize, Serialize};

use crate::prepare::{referenced, zstd_frames};

/// The key of the facts of the module whose digest is `digest`, as this build learns them
/// (the digest of its code that does, `WPROF_FACTS_CODE`: see `build.rs`); the cache's
/// eviction keeps them with the module's manifest.
pub fn facts_key(digest: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof module facts\0");
    h.update(env!("WPROF_FACTS_CODE").as_bytes());
    h.update(digest);
    *h.finalize().as_bytes()
}

/// A module as the `modules` kind stores it: compressed.
pub fn encode_module(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd_frames::compress(bytes)
}

/// An instrumented module as the `modules` kind stores it: compressed against the original
/// module it was made from (of blake3 `original_digest`, stored under it), whose bytes are
/// most of its own (nextpnr's: 0.73 MB alone, 0.35 MB against its original).
pub fn encode_module_against(
    bytes: &[u8],
    original_digest: [u8; 32],
    original: &[u8],
) -> std::io::Result<Vec<u8>> {
    referenced::encode(bytes, original_digest, original)
}

/// The module stored as `stored` under `key`, its blake3; `None` if it does not expand or
/// is not the module of that digest, or is stored against another (see [`decode_module_with`]).
pub fn decode_module(stored: &[u8], key: &[u8; 32]) -> Option<Vec<u8>> {
    decode_module_with(stored, key, |_| None)
}

/// Like [`decode_module`], for a module stored whole or against another: `reference` gives
/// the other's bytes by its digest.
pub fn decode_module_with<'r>(
    stored: &[u8],
    key: &[u8; 32],
    reference: impl FnOnce(&[u8; 32]) -> Option<std::borrow::Cow<'r, [u8]>>,
) -> Option<Vec<u8>> {
    let bytes = match referenced::reference(stored) {
        None => zstd_frames::expand(stored).ok()?,
        Some(named) => referenced::decode(stored, &reference(&named.locator)?)?,
    };
    (blake3::hash(&bytes).as_bytes() == key).then_some(bytes)
}

/// The module stored in `cache` under `key`, checked against it, without counting a read;
/// one stored against its original is expanded with the original stored beside it.
pub fn module_in(cache: &wprof_cache::Cache, key: &[u8; 32]) -> Option<Vec<u8>> {
    let peek = |key: &[u8; 32]| match cache.peek(wprof_cache::Kind::Module, key) {
        Ok(wprof_cache::Lookup::Valid(stored)) => Some(stored),
        _ => None,
    };
    decode_module_with(&peek(key)?, key, |original| {
        decode_module(&peek(original)?, original).map(std::borrow::Cow::Owned)
    })
}

/// The current manifest schema, and what its names are made of: since 9, a function the
/// name section leaves unnamed is named from the module's DWARF (an earlier manifest's
/// `func[N]` must not be read as the name).
pub const MANIFEST_VERSION: u32 = 9;

/// One instrumented function body as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionEntry {
    /// The body as the agent produced it.
    pub body: wprof_agent::InstrumentedBody,
}

impl FunctionEntry {
    /// The entry's bytes: see [`FunctionEntry::encode_body`].
    pub fn encode(&self) -> Vec<u8> {
        Self::encode_body(&self.body)
    }

    /// An entry holding `body`, in LEB128 numbers: `len | body bytes | probed | pairs | (original,
    /// instrumented)* | ranges | (start, length)* | blocks | start*` (the offset map, the
    /// probe code, then coverage's block map and counter sites, `blocks | start* | sites |
    /// site* | kind*`, a kind a byte; `probed` is 0, or where a live function's probed
    /// copy starts in the bytes plus one), then `retry`: 0, or the retry site plus one.
    /// Offsets increase (original ones start again once in a live body, stored as a wrapped
    /// distance), so each is stored as its distance from the one before (from the
    /// previous range's end for a range's start): one or two bytes where a fixed `u32`
    /// took four, which made the offset maps most of a large module's bodies.
    pub fn encode_body(body: &wprof_agent::InstrumentedBody) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            8 + body.bytes.len() + body.offsets.len() * 3 + body.probe_code.len() * 3,
        );
        put(&mut out, body.bytes.len() as u32);
        out.extend_from_slice(&body.bytes);
        put(&mut out, body.probed_at.map_or(0, |at| at + 1));
        put(&mut out, body.offsets.len() as u32);
        let (mut old_at, mut new_at) = (0u32, 0u32);
        for &(old, new) in &body.offsets {
            put(&mut out, old.wrapping_sub(old_at));
            put(&mut out, new.wrapping_sub(new_at));
            (old_at, new_at) = (old, new);
        }
        put(&mut out, body.probe_code.len() as u32);
        let mut end_at = 0u32;
        for &(start, end) in &body.probe_code {
            put(&mut out, start.wrapping_sub(end_at));
            put(&mut out, end.wrapping_sub(start));
            end_at = end;
        }
        let starts: Vec<u32> = body.blocks.iter().map(|&(start, _)| start).collect();
        for list in [&starts, &body.counter_sites] {
            put(&mut out, list.len() as u32);
            let mut at = 0u32;
            for &next in list.iter() {
                put(&mut out, next.wrapping_sub(at));
                at = next;
            }
        }
        out.extend(body.blocks.iter().map(|&(_, how)| how.code()));
        put(&mut out, body.retry_site.map_or(0, |at| at + 1));
        out
    }

    /// The inverse of [`FunctionEntry::encode`]; `None` for anything malformed (numbers
    /// that overflow, offsets that go back, bytes missing or left over).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes;
        let number = |rest: &mut &[u8]| -> Option<u32> {
            u32::try_from(leb128::read::unsigned(rest).ok()?).ok()
        };
        let len = number(&mut rest)? as usize;
        let (body_bytes, after) = rest.split_at_checked(len)?;
        rest = after;
        let probed_at = match number(&mut rest)? {
            0 => None,
            at if (at - 1) as usize <= len => Some(at - 1),
            _ => return None,
        };
        let count = number(&mut rest)? as usize;
        let mut offsets = Vec::with_capacity(count.min(rest.len()));
        let (mut old_at, mut new_at) = (0u32, 0u32);
        for i in 0..count {
            let (old, new) = (number(&mut rest)?, number(&mut rest)?);
            if i > 0 && new == 0 {
                return None;
            }
            // Original offsets start again where a live body's probed copy follows its
            // original copy (stored as a wrapped distance); instrumented ones always grow.
            (old_at, new_at) = (old_at.wrapping_add(old), new_at.checked_add(new)?);
            offsets.push((old_at, new_at));
        }
        let count = number(&mut rest)? as usize;
        let mut probe_code = Vec::with_capacity(count.min(rest.len()));
        let mut end_at = 0u32;
        for _ in 0..count {
            let start = end_at.checked_add(number(&mut rest)?)?;
            end_at = start.checked_add(number(&mut rest)?)?;
            probe_code.push((start, end_at));
        }
        // Offsets that increase, each stored as its distance from the one before.
        let increasing = |rest: &mut &[u8]| -> Option<Vec<u32>> {
            let count = number(rest)? as usize;
            let mut list = Vec::with_capacity(count.min(rest.len()));
            let mut at = 0u32;
            for i in 0..count {
                let distance = number(rest)?;
                if i > 0 && distance == 0 {
                    return None;
                }
                at = at.checked_add(distance)?;
                list.push(at);
            }
            Some(list)
        };
        let starts = increasing(&mut rest)?;
        let counter_sites = increasing(&mut rest)?;
        let (kinds, after) = rest.split_at_checked(starts.len())?;
        rest = after;
        let blocks = starts
            .into_iter()
            .zip(kinds)
            .map(|(start, &code)| Some((start, wprof_agent::BlockCount::from_code(code)?)))
            .collect::<Option<Vec<_>>>()?;
        let counters = blocks
            .iter()
            .filter(|(_, how)| *how == wprof_agent::BlockCount::Counter)
            .count();
        let retry_site = match number(&mut rest)? {
            0 => None,
            at if (at - 1) as usize + 5 <= len => Some(at - 1),
            _ => return None,
        };
        if counter_sites.len() != counters || !rest.is_empty() {
            return None;
        }
        Some(Self {
            body: wprof_agent::InstrumentedBody {
                bytes: body_bytes.to_vec(),
                probed_at,
                offsets,
                probe_code,
                blocks,
                counter_sites,
                retry_site,
            },
        })
    }
}

/// Appends `v` in LEB128.
fn put(out: &mut Vec<u8>, v: u32) {
    leb128::write::unsigned(out, u64::from(v)).expect("writing to memory");
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
    /// Cache key of the instrumented body, for defined functions.
    pub key: Option<[u8; 32]>,
    /// Body byte range in the original module.
    pub original_body: Option<(u32, u32)>,
    /// Body byte range in the instrumented module (with live probes, the function's own).
    pub instrumented_body: Option<(u32, u32)>,
    /// Live probes: the byte range of the function's probed copy.
    pub probed_body: Option<(u32, u32)>,
    /// Coverage: where each basic block starts, from the start of the original body, and
    /// how its count is known ([`wprof_agent::BlockCount::code`]; see
    /// [`wprof_agent::InstrumentedBody::blocks`]); empty otherwise.
    pub blocks: Vec<(u32, u8)>,
    /// Allocation profiling: the function is an allocator of this role
    /// ([`wprof_agent::AllocRole::to_bytes`]).
    pub allocator: Option<[u8; 3]>,
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
    pub call_sites: bool,
    /// Time mode's bound on short functions, counted but not timed (see
    /// [`wprof_agent::ProbePlan::short_max`]).
    pub short_max: u32,
    /// Basic blocks are counted (see [`wprof_agent::ProbePlan::coverage`]).
    pub coverage: bool,
    /// Live probes: each function's probes behind its switch, in a probed copy (see
    /// [`wprof_agent::SwitchTable`]).
    pub live: bool,
    /// The path the module was loaded from when the manifest was written.
    pub path: String,
    /// Every function, in id order.
    pub functions: Vec<ManifestFunction>,
    /// Sample mode: the payload of the module's `wprof.probe-code` section (hex), so that a
    /// run from the cache knows where the probes are without reading the module.
    pub probe_code: Option<String>,
    /// The digest its compiled code is stored under (hex) when that is not
    /// `instrumented_digest`: stack mode's, derived from the original's so that a warm run
    /// finds it without reading this manifest (see [`crate::prepare::counted::digest`]).
    pub compiled_digest: Option<String>,
    /// Stack mode: where the entry counters are in the instrumented module, which turns
    /// its offsets into the original's
    /// ([`wprof_agent::entry_counts::CounterOffsets::encode`]).
    pub counter_offsets: Option<Vec<u8>>,
}

/// What a manifest's bytes start with, before they are compressed.
const MANIFEST_MAGIC: &[u8; 8] = b"wpman5\0\0";

impl Manifest {
    /// The digest (hex) the module's compiled artifacts name: the one they were compiled
    /// under.
    pub fn compiled_digest(&self) -> &str {
        self.compiled_digest
            .as_deref()
            .unwrap_or(&self.instrumented_digest)
    }

    /// [`MANIFEST_MAGIC`] and the manifest in postcard, compressed. Binary rather than
    /// JSON: a run from the cache reads every function's name and key, and a
    /// 12k-function manifest took 4.5 ms to parse as JSON (hex keys were most of it).
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        let bytes =
            postcard::to_extend(self, MANIFEST_MAGIC.to_vec()).map_err(std::io::Error::other)?;
        zstd_frames::compress(&bytes)
    }

    /// Parses a manifest; `None` if malformed, of another version, or with bytes left over.
    pub fn decode(stored: &[u8]) -> Option<Self> {
        let bytes = zstd_frames::expand(stored).ok()?;
        let rest = bytes.strip_prefix(MANIFEST_MAGIC)?;
        let (m, left): (Manifest, _) = postcard::take_from_bytes(rest).ok()?;
        (left.is_empty() && m.manifest_version == MANIFEST_VERSION).then_some(m)
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

    fn manifest() -> Manifest {
        Manifest {
            manifest_version: MANIFEST_VERSION,
            module_digest: "ab".repeat(32),
            instrumented_digest: "cd".repeat(32),
            original_size: 100,
            instrumented_size: 180,
            agent_version: 7,
            mode: "sample".into(),
            call_sites: false,
            short_max: 0,
            coverage: true,
            live: true,
            path: "/tmp/app.wasm".into(),
            functions: vec![
                ManifestFunction {
                    id: 0,
                    name: "fd_write".into(),
                    kind: "import".into(),
                    key: None,
                    original_body: None,
                    instrumented_body: None,
                    probed_body: None,
                    blocks: vec![],
                    allocator: None,
                },
                ManifestFunction {
                    id: 1,
                    name: "main".into(),
                    kind: "local".into(),
                    key: Some([9; 32]),
                    original_body: Some((40, 60)),
                    instrumented_body: Some((40, 95)),
                    probed_body: Some((200, 260)),
                    blocks: vec![(2, 0), (7, 1), (11, 2)],
                    allocator: Some([0, 0xff, 0]),
                },
            ],
            probe_code: Some("00ff".into()),
            compiled_digest: Some("ef".repeat(32)),
            counter_offsets: Some(vec![1, 2, 3]),
        }
    }

    #[test]
    fn manifests_round_trip_and_reject_other_versions_and_garbage() {
        let m = manifest();
        let stored = m.encode().unwrap();
        assert_eq!(Manifest::decode(&stored), Some(m.clone()));

        let older = Manifest {
            manifest_version: MANIFEST_VERSION - 1,
            ..m.clone()
        };
        assert_eq!(Manifest::decode(&older.encode().unwrap()), None);
        // The JSON form of earlier versions is a miss, never misread.
        let json = zstd_frames::compress(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(Manifest::decode(&json), None);
        // Bytes left over, a cut, and no compression at all.
        let mut raw = zstd_frames::expand(&stored).unwrap();
        raw.push(0);
        assert_eq!(
            Manifest::decode(&zstd_frames::compress(&raw).unwrap()),
            None
        );
        raw.truncate(raw.len() - 10);
        assert_eq!(
            Manifest::decode(&zstd_frames::compress(&raw).unwrap()),
            None
        );
        assert_eq!(Manifest::decode(b"wpman4\0\0"), None);
        assert_eq!(Manifest::decode(b"wpman5\0\0"), None);
    }

    #[test]
    fn function_entries_round_trip_and_reject_garbage() {
        let entry = FunctionEntry {
            body: wprof_agent::InstrumentedBody {
                bytes: vec![0, 0x41, 1, 0x0b],
                probed_at: Some(2),
                offsets: vec![(1, 5), (3, 9)],
                probe_code: vec![(2, 5), (7, 9)],
                blocks: vec![
                    (1, wprof_agent::BlockCount::Counter),
                    (2, wprof_agent::BlockCount::AsPrevious),
                    (3, wprof_agent::BlockCount::Counter),
                ],
                counter_sites: vec![10, 40],
                retry_site: None,
            },
        };
        let bytes = entry.encode();
        assert_eq!(FunctionEntry::decode(&bytes).as_ref(), Some(&entry));
        for cut in 0..bytes.len() {
            assert_eq!(FunctionEntry::decode(&bytes[..cut]), None);
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(FunctionEntry::decode(&longer), None);
        // A leaf's retry site round-trips; one whose index would end past the body does not.
        let mut retrying = entry.body.clone();
        retrying.bytes = vec![0; 12];
        retrying.retry_site = Some(3);
        let bytes = FunctionEntry::encode_body(&retrying);
        assert_eq!(
            FunctionEntry::decode(&bytes).map(|e| e.body),
            Some(retrying.clone())
        );
        retrying.retry_site = Some(8);
        assert_eq!(
            FunctionEntry::decode(&FunctionEntry::encode_body(&retrying)),
            None
        );
        // Offsets that go back are not an offset map.
        let mut backwards = entry.body.clone();
        backwards.offsets = vec![(3, 9), (1, 5)];
        assert_eq!(
            FunctionEntry::decode(&FunctionEntry::encode_body(&backwards)),
            None
        );
        // Nor are blocks that do not move forward a block map.
        let mut repeated = entry.body.clone();
        repeated.blocks = vec![
            (1, wprof_agent::BlockCount::Counter),
            (1, wprof_agent::BlockCount::Counter),
        ];
        assert_eq!(
            FunctionEntry::decode(&FunctionEntry::encode_body(&repeated)),
            None
        );
    }

    #[test]
    fn every_body_of_a_real_module_round_trips_in_far_fewer_bytes() {
        let wasm = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../samples/interp.wasm"
        ))
        .unwrap();
        let plan = wprof_agent::ProbePlan {
            mode: wprof_agent::ProbeMode::Sample,
            call_sites: true,
            selection: None,
            live: false,
            short_max: 0,
            coverage: false,
            allocators: None,
            injections: None,
            capture: None,
        };
        let instrumenter = wprof_agent::Instrumenter::new(&wasm, &plan).unwrap();
        let (mut encoded, mut fixed) = (0, 0);
        for defined in 0..instrumenter.defined_function_count() {
            let body = instrumenter.instrument_function(defined).unwrap();
            let bytes = FunctionEntry::encode_body(&body);
            assert_eq!(FunctionEntry::decode(&bytes).unwrap().body, body);
            encoded += bytes.len();
            fixed += 12
                + body.bytes.len()
                + 8 * (body.offsets.len() + body.probe_code.len())
                + 4 * (body.blocks.len() + body.counter_sites.len());
        }
        assert!(encoded * 2 < fixed, "{encoded} of {fixed}");
    }
}
