//! Compiled functions: wasmtime's incremental compilation cache, backed by wprof's cache,
//! so that a module changed in one function recompiles little more than that function.
//!
//! Cranelift keys each function's compiled code by a digest of its IR, the target and the
//! compiler flags, and asks a [`wasmtime::CacheStore`] for it before compiling. wprof keeps
//! these values in one pack per *lineage* (a module's file name and probe plan: the versions
//! of one program as it is rebuilt), a single cache value of kind `compiled` holding every
//! function the lineage's last compile used or made, zstd-compressed. A compile of a changed
//! module reads its lineage's pack, reuses what matches, and replaces the pack with what it
//! used and made: one file per lineage instead of one per function (a 69 MB module has 47k
//! functions), and a pack never grows beyond one version's functions. The next pack is
//! written and compressed while the compile runs ([`crate::prepare::pack_stream`]), so the
//! compile's functions are never held uncompressed.
//!
//! Since they are machine code, values are authenticated like compiled artifacts: each
//! carries a MAC under the user's secret key over its key and bytes, and one that does not
//! verify is a miss (Cranelift compiles the function again). A pack whose file is damaged
//! is a miss as a whole (the cache's own checksum), and is replaced by the next compile.
//!
//! The store is one per process and does nothing until [`attach`]ed to a cache: engines
//! always carry it, and only compiles that wprof wants cached (instrumented modules, with a
//! usable cache and key) use it. A run with `WPROF=0` never touches it.

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use wprof_cache::{Cache, Kind};

use crate::prepare::pack_stream::{self, Records, Writer};
use crate::prepare::secret::SecretKey;
use crate::prepare::{artifacts, referenced, zstd_frames};

/// The process's store for compiled functions.
#[derive(Debug, Default)]
pub struct CompiledFunctions {
    attached: Mutex<Option<Attached>>,
}

/// A compile's view of one lineage's pack.
#[derive(Debug)]
struct Attached {
    cache: Arc<Cache>,
    secret: SecretKey,
    /// The lineage's previous pack: sealed values (MAC, then code) by key.
    earlier: Records,
    /// What this compile used or made: the lineage's next pack, written into the cache as it
    /// comes (in place once the compile is over); `None` where the cache cannot be written
    /// (the earlier pack is still used).
    next: Option<Writer<Sink>>,
    counts: CompiledCounts,
}

/// How a compile's functions went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompiledCounts {
    /// Functions whose compiled code came from the lineage's pack.
    pub reused: u64,
    /// Functions Cranelift compiled (and the pack now holds).
    pub compiled: u64,
}

/// The store every engine of this process is configured with.
pub fn store() -> Arc<CompiledFunctions> {
    static STORE: OnceLock<Arc<CompiledFunctions>> = OnceLock::new();
    STORE.get_or_init(Default::default).clone()
}

/// Builds the engine with wasmtime's incremental compilation cache, backed by wprof's cache
/// while [`attach`]ed (and inert otherwise). Same fingerprint as
/// [`new_engine`](crate::run::engine::new_engine): compiled artifacts of one load in the other.
pub fn new_engine_caching() -> anyhow::Result<wasmtime::Engine> {
    let mut config = crate::run::engine::config();
    config
        .enable_incremental_compilation(store())
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("failed to configure the compilation cache")?;
    crate::run::engine::engine(config)
}

/// The lineage of the module at `path` instrumented for plans of body digest `plan` (see
/// [`wprof_agent::ProbePlan::body_digest`]: allocation profiling on or off share it): the key
/// of its packs (compiled functions, and instrumented bodies). The versions of one program
/// share its file name, wherever it is built (a CI job's fresh directory included); two
/// programs of one name share packs, which only costs reuse, never correctness, since
/// everything in a pack is found by its own content key.
pub fn lineage(path: &Path, plan: &[u8]) -> [u8; 32] {
    let name = path.file_name().unwrap_or(path.as_os_str());
    let mut h = blake3::Hasher::new();
    h.update(b"wprof lineage v2\0");
    h.update(name.as_encoded_bytes());
    h.update(b"\0");
    h.update(plan);
    *h.finalize().as_bytes()
}

/// Compiles from now on reuse and fill the pack of `lineage` in the cache in `dir`,
/// authenticated with `secret`, until [`detach`].
pub fn attach(dir: &Path, secret: &SecretKey, lineage: [u8; 32]) {
    let cache = match Cache::open(dir) {
        Ok(cache) => cache,
        Err(e) => {
            tracing::debug!("compiled functions not cached: {e}");
            return;
        }
    };
    let earlier = match cache.get(Kind::Compiled, &lineage) {
        Ok(Some(stored)) => read_pack(&cache, secret, &stored).unwrap_or_else(|| {
            // An earlier version's format as well, or one whose artifact is gone: its next
            // pack replaces it.
            tracing::debug!("the compiled functions' pack is unusable: compiling anew");
            Records::default()
        }),
        _ => Records::default(),
    };
    let next = match cache.put_in_parts(Kind::Compiled, &lineage) {
        Ok(value) => Some(Writer::new(PACK_MAGIC, Sink(value))),
        Err(e) => {
            tracing::debug!("compiled functions not stored: {e}");
            None
        }
    };
    *store().lock() = Some(Attached {
        cache: Arc::new(cache),
        secret: secret.clone(),
        earlier,
        next,
        counts: CompiledCounts::default(),
    });
}

/// The pack `stored`: as written, or stored against its module's compiled artifact (see
/// [`refer_to_artifact`]), which must then be in the cache and authentic.
fn read_pack(cache: &Cache, secret: &SecretKey, stored: &[u8]) -> Option<Records> {
    match referenced::reference(stored) {
        None => Records::read(PACK_MAGIC, stored),
        Some(reference) => {
            let artifact = artifacts::verified_bytes(cache, &reference.locator, secret)?;
            Records::parse(PACK_MAGIC, referenced::decode(stored, &artifact)?)
        }
    }
}

/// The largest compiled artifact a pack is stored against: its bytes and the pack's are
/// held at once while it is, and the compressor's window spans both.
const MAX_REFERENCE: usize = 128 << 20;

/// Stores the pack of `lineage`, if it is as a compile wrote it, against `artifact` (the
/// serialized module that compile made, stored under `artifact_key`): the pack's machine
/// code is the artifact's, and costs a few bytes where it matches (nextpnr's pack: 5.9 MB
/// alone, 3.7 MB against its 10.6 MB artifact). Called once the artifact is stored. A pack
/// replaced since by another process's compile is stored against this artifact all the
/// same (the values are found by their keys, whichever artifact expands them); a reader
/// that cannot find this artifact (evicted, or compiled again into other bytes) compiles
/// anew, as for a damaged pack.
pub fn refer_to_artifact(
    cache: &Cache,
    lineage: &[u8; 32],
    artifact_key: [u8; 32],
    artifact: &[u8],
) -> Result<(), wprof_cache::CacheError> {
    if artifact.len() > MAX_REFERENCE {
        return Ok(());
    }
    // What the compile freed goes back first: the pack expanded and the compressor's tables
    // would otherwise come on top of it, at the process's peak (nextpnr: 177 MB instead of
    // the compile's 163 MB).
    crate::prepare::heap::give_back_freed();
    let Some(stored) = cache.get(Kind::Compiled, lineage)? else {
        return Ok(());
    };
    if referenced::reference(&stored).is_some() {
        return Ok(());
    }
    let failed = |e: std::io::Error| wprof_cache::CacheError::Io {
        what: "store compiled functions against their artifact".into(),
        source: e,
    };
    let Ok(plain) = zstd_frames::expand(&stored) else {
        return Ok(());
    };
    drop(stored);

    let against = referenced::encode(&plain, artifact_key, artifact).map_err(failed)?;

    cache.put(Kind::Compiled, lineage, &against)
}

/// The cache value a pack is written to, as it comes.
#[derive(Debug)]
struct Sink(wprof_cache::ValueWriter);

impl std::io::Write for Sink {
    fn write(&mut self, part: &[u8]) -> std::io::Result<usize> {
        self.0.write(part).map_err(std::io::Error::other)?;
        Ok(part.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compiles from now on use no cache; the lineage's pack becomes what the compile since
/// [`attach`] used and made. What the compile's functions did.
pub fn detach() -> CompiledCounts {
    let Some(attached) = store().lock().take() else {
        return CompiledCounts::default();
    };
    let Some(next) = attached.next else {
        return attached.counts;
    };
    // Else the pack is the one stored already: the one written is dropped unfinished.
    if attached.counts.compiled > 0 || next.len() != attached.earlier.len() {
        let stored = next
            .finish()
            .map_err(|e| e.to_string())
            .and_then(|Sink(value)| value.finish(&attached.cache).map_err(|e| e.to_string()));
        if let Err(e) = stored {
            tracing::debug!("compiled functions not stored: {e}");
        }
    }
    attached.counts
}

/// What a pack of compiled functions starts with (see [`crate::prepare::pack_stream`]; 2 was
/// a [`crate::prepare::pack`]).
const PACK_MAGIC: &[u8; 8] = b"wpcpack3";

/// Whether `stored` is a pack of compiled functions, each long enough to carry its MAC; one
/// stored against its artifact is checked as far as it can be without the artifact (and the
/// user's key): that its frames are whole.
pub fn is_pack(stored: &[u8]) -> bool {
    if referenced::reference(stored).is_some() {
        return referenced::is_well_formed(stored);
    }
    Records::read(PACK_MAGIC, stored).is_some_and(|records| records.values().all(|v| v.len() >= 32))
}

fn key_of(cranelift_key: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof compiled function v1\0");
    h.update(cranelift_key);
    *h.finalize().as_bytes()
}

fn mac(secret: &SecretKey, key: &[u8; 32], code: &[u8]) -> [u8; 32] {
    secret.mac(&[b"wprof compiled function mac v1\0", key, code])
}

impl CompiledFunctions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Attached>> {
        self.attached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Compresses a chunk the next pack filled, on the compiling thread that filled it and
    /// outside the lock, so the other compiling threads go on meanwhile.
    fn frame(&self, full: Option<Vec<u8>>) {
        let Some(chunk) = full else {
            return;
        };
        let frame = pack_stream::frame(&chunk);
        drop(chunk);
        if let Some(attached) = self.lock().as_mut() {
            if let Some(next) = attached.next.as_mut() {
                next.push_frame(frame);
            }
        }
    }
}

impl wasmtime::CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let key = key_of(key);
        let mut guard = self.lock();
        let attached = guard.as_mut()?;
        // A function this compile made is asked for again (two functions of one body):
        // compiled again, since the pack holds it compressed; the pack keeps one.
        if attached.next.as_ref().is_some_and(|n| n.contains(&key)) {
            return None;
        }
        let sealed = attached.earlier.get(&key)?;
        if sealed.len() < 32 {
            return None;
        }
        let (stored, code) = sealed.split_at(32);
        if stored != mac(&attached.secret, &key, code) {
            tracing::debug!("a compiled function fails its MAC: compiling it");
            return None;
        }
        let code = code.to_vec();
        let full = attached.next.as_mut().and_then(|n| n.add(key, sealed).1);
        attached.counts.reused += 1;
        drop(guard);
        self.frame(full);
        Some(Cow::Owned(code))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let key = key_of(key);
        let mut guard = self.lock();
        let Some(attached) = guard.as_mut() else {
            return false;
        };
        attached.counts.compiled += 1;
        let Some(next) = attached.next.as_mut() else {
            return false;
        };
        let mut sealed = mac(&attached.secret, &key, &value).to_vec();
        sealed.extend_from_slice(&value);
        let (_, full) = next.add(key, &sealed);
        drop(guard);
        self.frame(full);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore;

    fn unpack(stored: &[u8]) -> Option<Records> {
        Records::read(PACK_MAGIC, stored)
    }

    fn attached(cache: &Arc<Cache>, secret: &SecretKey, lineage: [u8; 32]) -> Attached {
        let earlier = cache
            .get(Kind::Compiled, &lineage)
            .unwrap()
            .and_then(|p| unpack(&p))
            .unwrap_or_default();
        Attached {
            cache: cache.clone(),
            secret: secret.clone(),
            earlier,
            next: Some(Writer::new(
                PACK_MAGIC,
                Sink(cache.put_in_parts(Kind::Compiled, &lineage).unwrap()),
            )),
            counts: CompiledCounts::default(),
        }
    }

    /// Detaches `store` as [`detach`] does for the process's store.
    fn detach_from(store: &CompiledFunctions) -> CompiledCounts {
        let attached = store.lock().take().unwrap();
        let Sink(value) = attached.next.unwrap().finish().unwrap();
        value.finish(&attached.cache).unwrap();
        attached.counts
    }

    #[test]
    fn values_round_trip_only_under_the_key_that_wrote_them() {
        let dir = tempfile::tempdir().unwrap();
        let mine = SecretKey::load_or_create_at(&dir.path().join("k1")).unwrap();
        let theirs = SecretKey::load_or_create_at(&dir.path().join("k2")).unwrap();
        let store = CompiledFunctions::default();
        assert!(!store.insert(b"k", b"code".to_vec()), "detached: no cache");
        let cache = Arc::new(Cache::open(&dir.path().join("c")).unwrap());
        let lineage = [7; 32];
        *store.lock() = Some(attached(&cache, &mine, lineage));
        assert!(store.insert(b"k", b"code".to_vec()));
        assert!(store.insert(b"j", b"more".to_vec()));
        // Made by this compile: held compressed, so compiled again if asked for.
        assert_eq!(store.get(b"k"), None);
        assert_eq!(store.get(b"other"), None);
        assert_eq!(
            detach_from(&store),
            CompiledCounts {
                reused: 0,
                compiled: 2
            }
        );
        // The next compile of the lineage finds them; what it does not ask for is dropped.
        *store.lock() = Some(attached(&cache, &mine, lineage));
        assert_eq!(store.get(b"k").as_deref(), Some(&b"code"[..]));
        assert_eq!(
            detach_from(&store),
            CompiledCounts {
                reused: 1,
                compiled: 0
            }
        );
        let pack = unpack(&cache.get(Kind::Compiled, &lineage).unwrap().unwrap()).unwrap();
        assert_eq!(pack.len(), 1);
        // Another user's key: a miss.
        *store.lock() = Some(attached(&cache, &theirs, lineage));
        assert_eq!(store.get(b"k"), None, "another user's key");
        store.lock().take();
        // A changed byte of the code fails the MAC.
        let mut damaged = Writer::new(PACK_MAGIC, Vec::new());
        let sealed = pack.get(&key_of(b"k")).unwrap();
        let mut changed = sealed.to_vec();
        *changed.last_mut().unwrap() ^= 1;
        damaged.add(key_of(b"k"), &changed);
        cache
            .put(Kind::Compiled, &lineage, &damaged.finish().unwrap())
            .unwrap();
        *store.lock() = Some(attached(&cache, &mine, lineage));
        assert_eq!(store.get(b"k"), None);
    }

    #[test]
    fn a_cache_that_cannot_be_written_still_gives_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let secret = SecretKey::load_or_create_at(&dir.path().join("k")).unwrap();
        let cache = Arc::new(Cache::open(&dir.path().join("c")).unwrap());
        let lineage = [9; 32];
        let store = CompiledFunctions::default();
        *store.lock() = Some(attached(&cache, &secret, lineage));
        assert!(store.insert(b"k", b"code".to_vec()));
        detach_from(&store);
        // As `attach` leaves it when the next pack cannot be started.
        let mut reading = attached(&cache, &secret, lineage);
        reading.next = None;
        *store.lock() = Some(reading);
        assert_eq!(store.get(b"k").as_deref(), Some(&b"code"[..]));
        assert!(!store.insert(b"new", b"more".to_vec()), "not stored");
        let counts = store.lock().as_ref().unwrap().counts;
        assert_eq!(
            counts,
            CompiledCounts {
                reused: 1,
                compiled: 1
            }
        );
        store.lock().take();
        // The pack is as it was.
        let pack = unpack(&cache.get(Kind::Compiled, &lineage).unwrap().unwrap()).unwrap();
        assert_eq!(pack.len(), 1);
    }

    #[test]
    fn a_pack_of_the_earlier_format_is_never_read_as_one() {
        let values: crate::prepare::pack::Values = [([3; 32], vec![0; 64])].into();
        let old = crate::prepare::pack::pack(b"wpcpack2", &values).unwrap();
        assert!(unpack(&old).is_none());
        assert!(!is_pack(&old));
        let mut new = Writer::new(PACK_MAGIC, Vec::new());
        new.add([3; 32], &[0; 64]);
        assert!(is_pack(&new.finish().unwrap()));
    }

    #[test]
    fn a_pack_stored_against_its_artifact_reads_only_with_that_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let secret = SecretKey::load_or_create_at(&dir.path().join("k")).unwrap();
        let theirs = SecretKey::load_or_create_at(&dir.path().join("k2")).unwrap();
        let cache = Arc::new(Cache::open(&dir.path().join("c")).unwrap());
        let lineage = [4; 32];
        // Compiled functions whose code is the artifact's, cut in pieces.
        let artifact: Vec<u8> = (0..400_000u32)
            .flat_map(|i| (i.wrapping_mul(2654435761) >> 7).to_le_bytes())
            .collect();
        let store = CompiledFunctions::default();
        *store.lock() = Some(attached(&cache, &secret, lineage));
        for (i, piece) in artifact.chunks(50_000).enumerate() {
            assert!(store.insert(&[i as u8], piece.to_vec()));
        }
        detach_from(&store);
        let plain = cache.get(Kind::Compiled, &lineage).unwrap().unwrap();
        let (digest, fingerprint) = ([1; 32], [2; 32]);
        artifacts::store_bytes(&cache, &artifact, &digest, &fingerprint, &secret).unwrap();
        let key = artifacts::artifact_key(&digest, &fingerprint);
        refer_to_artifact(&cache, &lineage, key, &artifact).unwrap();
        let against = cache.get(Kind::Compiled, &lineage).unwrap().unwrap();
        assert_eq!(referenced::reference(&against).unwrap().locator, key);
        assert!(
            against.len() < plain.len() / 4,
            "{} of {}",
            against.len(),
            plain.len()
        );
        assert!(is_pack(&against));
        // Read back whole, and used by the next compile.
        let read = read_pack(&cache, &secret, &against).unwrap();
        assert_eq!(read.len(), artifact.chunks(50_000).len());
        *store.lock() = Some(attached_reading(&cache, &secret, lineage));
        assert_eq!(
            store.get(&[3]).as_deref(),
            Some(&artifact[150_000..200_000])
        );
        store.lock().take();
        // Stored once: a second call leaves it as it is.
        refer_to_artifact(&cache, &lineage, key, &artifact).unwrap();
        assert_eq!(
            cache.get(Kind::Compiled, &lineage).unwrap().unwrap(),
            against
        );
        // Another user's artifact, or none: the pack is a miss.
        assert!(read_pack(&cache, &theirs, &against).is_none());
        cache.remove(Kind::Artifact, &key).unwrap();
        assert!(read_pack(&cache, &secret, &against).is_none());
    }

    /// As [`attach`] reads a lineage's pack.
    fn attached_reading(cache: &Arc<Cache>, secret: &SecretKey, lineage: [u8; 32]) -> Attached {
        let stored = cache.get(Kind::Compiled, &lineage).unwrap().unwrap();
        Attached {
            cache: cache.clone(),
            secret: secret.clone(),
            earlier: read_pack(cache, secret, &stored).unwrap(),
            next: None,
            counts: CompiledCounts::default(),
        }
    }

    #[test]
    fn lineages_differ_by_file_name_and_plan() {
        let a = lineage(Path::new("/x/app.wasm"), b"sample");
        assert_eq!(a, lineage(Path::new("/x/app.wasm"), b"sample"));
        assert_eq!(a, lineage(Path::new("/ci/job-2/app.wasm"), b"sample"));
        assert_eq!(a, lineage(Path::new("app.wasm"), b"sample"));
        assert_ne!(a, lineage(Path::new("/x/other.wasm"), b"sample"));
        assert_ne!(a, lineage(Path::new("/x/app.wasm"), b"cost"));
    }
}
