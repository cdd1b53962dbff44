//! Compiled artifacts: wasmtime's serialized form of an instrumented module, kept as a file
//! beside the cache's store (compressed; see [`crate::prepare::artifact_image`]) so that a
//! warm start maps machine code instead of compiling.
//!
//! - Key: blake3 over the instrumented module's digest and the engine fingerprint
//!   ([`engine_fingerprint`]: wasmtime's version, its compatibility hash of the engine
//!   configuration, and the target), so another engine or configuration never finds it.
//! - Trust: deserializing compiled code runs whatever it says, so every artifact carries a
//!   MAC (blake3 keyed with the user's [`SecretKey`]) over its key and its stored bytes.
//!   Before loading, the file is read into memory and the MAC recomputed; an artifact
//!   without a valid MAC (a copied cache, another user's, an edited file) is ignored and
//!   compiled anew, and the fresh artifact replaces it. What wasmtime maps is expanded from
//!   those very bytes, in memory this process alone holds.

use std::hash::Hasher;
use std::path::Path;

use wasmtime::{Engine, Module};
use wprof_cache::{Cache, Kind};

use crate::prepare::cache_values::ArtifactEntry;
use crate::prepare::secret::SecretKey;
use crate::prepare::{artifact_image, zstd_frames};
use wprof_cache::hex;

/// The wasmtime version wprof is built with.
pub const WASMTIME_VERSION: &str = "48.0.8";

struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn finish(&self) -> u64 {
        let d = self.0.finalize();
        u64::from_le_bytes(d.as_bytes()[..8].try_into().expect("8 bytes"))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// What a compiled artifact depends on besides the module: wasmtime's version, its
/// configuration as `Engine::precompile_compatibility_hash` sees it, and the target.
pub fn engine_fingerprint(engine: &Engine) -> [u8; 32] {
    let mut h = Blake3Hasher(blake3::Hasher::new());
    h.write(b"wprof engine v1\0");
    h.write(WASMTIME_VERSION.as_bytes());
    h.write(std::env::consts::ARCH.as_bytes());
    h.write(std::env::consts::OS.as_bytes());
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut h);
    *h.0.finalize().as_bytes()
}

/// The cache key of the artifact of an instrumented module for an engine.
pub fn artifact_key(instrumented_digest: &[u8; 32], fingerprint: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof artifact v2\0");
    h.update(instrumented_digest);
    h.update(fingerprint);
    *h.finalize().as_bytes()
}

/// zstd's level for artifacts: they are compressed while the program runs, where level 6
/// costs little more than level 3 and saves a tenth (nextpnr's 10.6 MB: 3.17 MB at level 3
/// in 0.05 s of one core, 2.97 MB at level 6 in 0.08 s); expanding is as fast.
const LEVEL: i32 = 6;

/// What an artifact's MAC covers first: this context, then its key, then the file.
const MAC_CONTEXT: &[u8] = b"wprof artifact mac v2\0";

fn mac(secret: &SecretKey, key: &[u8; 32], file: &[u8]) -> [u8; 32] {
    secret.mac(&[MAC_CONTEXT, key, file])
}

/// Where a usable artifact is, as found in the cache (the file is checked later, with the
/// store released).
#[derive(Debug, Clone)]
pub struct FoundArtifact {
    key: [u8; 32],
    path: std::path::PathBuf,
    mac: String,
}

/// Looks up the artifact of `instrumented_digest` for this engine (counts a hit or miss).
pub fn find(
    cache: &Cache,
    instrumented_digest: &[u8; 32],
    fingerprint: &[u8; 32],
) -> Result<Option<FoundArtifact>, wprof_cache::CacheError> {
    let key = artifact_key(instrumented_digest, fingerprint);
    let Some(found) = cache.get_file(Kind::Artifact, &key)? else {
        return Ok(None);
    };
    let Some(entry) = ArtifactEntry::decode(&found.value) else {
        return Ok(None);
    };
    if entry.instrumented_digest != hex(instrumented_digest) || entry.engine != hex(fingerprint) {
        return Ok(None);
    }
    Ok(Some(FoundArtifact {
        key,
        path: found.path,
        mac: entry.mac,
    }))
}

/// Why a found artifact was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {0}")]
    Unreadable(String),
    /// Its MAC does not verify under this user's key: not written by this user's wprof,
    /// or changed since.
    #[error("{0} is not authenticated by this user's key")]
    NotAuthentic(String),
    /// wasmtime refused it.
    #[error("wasmtime cannot load {0}: {1}")]
    Refused(String, String),
}

/// A loaded artifact: the module, and the expanded image it was mapped from (its address
/// map finds sampled program counters; see [`crate::run::code::address_map`]).
#[derive(Debug)]
pub struct Loaded {
    /// The compiled module.
    pub module: Module,
    /// wasmtime's serialized module, as mapped: an anonymous file of this process.
    pub image: std::fs::File,
}

/// Loads a found artifact if its MAC verifies under `secret`.
pub fn load(
    engine: &Engine,
    found: &FoundArtifact,
    secret: &SecretKey,
) -> Result<Loaded, LoadError> {
    let shown = found.path.display().to_string();
    let image = verified_image(found, secret)?;
    let mapped = image
        .try_clone()
        .map_err(|_| LoadError::Unreadable(shown.clone()))?;
    // SAFETY (both ways): `image` holds exactly the bytes whose MAC under this user's
    // secret key was just verified, so they are what this user's wprof serialized with
    // `Module::serialize` for an engine of this fingerprint (the key covers it); it is this
    // process's own anonymous file, sealed against change.
    let module = if crate::run::engine::perf_map() {
        // perf names code in a file mapping by that file's symbols, and this file is
        // gone from every directory: the code goes to anonymous memory instead, which
        // perf names by the engine's perf map.
        let read = |file: &std::fs::File| -> std::io::Result<Vec<u8>> {
            let mut bytes = vec![0; file.metadata()?.len() as usize];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, 0)?;
            Ok(bytes)
        };
        let bytes = read(&mapped).map_err(|_| LoadError::Unreadable(shown.clone()))?;
        unsafe { Module::deserialize(engine, &bytes) }
    } else {
        unsafe { Module::deserialize_open_file(engine, mapped) }
    }
    .map_err(|e| LoadError::Refused(shown, first_line(&e.to_string())))?;
    Ok(Loaded { module, image })
}

/// The image of a found artifact if its MAC verifies under `secret`: wasmtime's serialized
/// code, in an anonymous file of this process.
fn verified_image(found: &FoundArtifact, secret: &SecretKey) -> Result<std::fs::File, LoadError> {
    let stored = verified_file(found, secret)?;
    artifact_image::expand(&stored)
        .map_err(|e| LoadError::Refused(found.path.display().to_string(), e.to_string()))
}

/// The stored (compressed) file of a found artifact, if its MAC verifies under `secret`.
fn verified_file(found: &FoundArtifact, secret: &SecretKey) -> Result<Vec<u8>, LoadError> {
    let shown = || found.path.display().to_string();
    let stored = std::fs::read(&found.path).map_err(|_| LoadError::Unreadable(shown()))?;
    if hex(&mac(secret, &found.key, &stored)) != found.mac {
        return Err(LoadError::NotAuthentic(shown()));
    }
    Ok(stored)
}

/// The serialized module stored under the artifact key `key`, if its MAC verifies under
/// `secret`: what the compiled functions of its lineage are stored against (see
/// [`crate::prepare::compiled`]).
pub fn verified_bytes(cache: &Cache, key: &[u8; 32], secret: &SecretKey) -> Option<Vec<u8>> {
    let file = cache.get_file(Kind::Artifact, key).ok()??;
    let found = FoundArtifact {
        key: *key,
        path: file.path,
        mac: ArtifactEntry::decode(&file.value)?.mac,
    };
    zstd_frames::expand(&verified_file(&found, secret).ok()?).ok()
}

/// Loads a found artifact of a component if its MAC verifies under `secret`.
pub fn load_component(
    engine: &Engine,
    found: &FoundArtifact,
    secret: &SecretKey,
) -> Result<wasmtime::component::Component, LoadError> {
    let shown = found.path.display().to_string();
    let image = verified_image(found, secret)?;
    let mut bytes = vec![
        0;
        image
            .metadata()
            .map_err(|_| LoadError::Unreadable(shown.clone()))?
            .len() as usize
    ];
    std::os::unix::fs::FileExt::read_exact_at(&image, &mut bytes, 0)
        .map_err(|_| LoadError::Unreadable(shown.clone()))?;
    // SAFETY: `bytes` are exactly those whose MAC under this user's secret key was just
    // verified: what this user's wprof serialized with `Component::serialize` for an engine
    // of this fingerprint (the key covers it).
    unsafe { wasmtime::component::Component::deserialize(engine, &bytes) }
        .map_err(|e| LoadError::Refused(shown, first_line(&e.to_string())))
}

/// Stores `module` as the artifact of `instrumented_digest`.
pub fn store(
    cache: &Cache,
    module: &Module,
    instrumented_digest: &[u8; 32],
    fingerprint: &[u8; 32],
    secret: &SecretKey,
) -> anyhow::Result<()> {
    store_bytes(
        cache,
        crate::run::code::image::module_image(module),
        instrumented_digest,
        fingerprint,
        secret,
    )
}

/// Stores already serialized bytes as the artifact of `instrumented_digest`.
pub fn store_bytes(
    cache: &Cache,
    bytes: &[u8],
    instrumented_digest: &[u8; 32],
    fingerprint: &[u8; 32],
    secret: &SecretKey,
) -> anyhow::Result<()> {
    let key = artifact_key(instrumented_digest, fingerprint);
    let bytes = &zstd_frames::compress_at(bytes, LEVEL)?;
    let entry = ArtifactEntry {
        instrumented_digest: hex(instrumented_digest),
        engine: hex(fingerprint),
        wasmtime: WASMTIME_VERSION.to_string(),
        mac: hex(&mac(secret, &key, bytes)),
    };
    cache.put_file(Kind::Artifact, &key, &entry.encode(), bytes)?;
    Ok(())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// Whether `path` looks like a compiled artifact file name (64 hex digits).
pub fn is_artifact_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| wprof_cache::key_from_hex(n).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_with_other_settings_have_other_fingerprints() {
        let a = crate::run::engine::new_engine().unwrap();
        let b = crate::run::engine::new_engine().unwrap();
        assert_eq!(engine_fingerprint(&a), engine_fingerprint(&b));
        // The compilation cache changes how code is produced, not what: same fingerprint.
        let caching = crate::prepare::compiled::new_engine_caching().unwrap();
        assert_eq!(engine_fingerprint(&a), engine_fingerprint(&caching));
        let mut config = wasmtime::Config::new();
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        let c = Engine::new(&config).unwrap();
        assert_ne!(engine_fingerprint(&a), engine_fingerprint(&c));
    }

    #[test]
    fn only_authentic_artifacts_load() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("cache")).unwrap();
        let engine = crate::run::engine::new_engine().unwrap();
        let wasm =
            wat::parse_str(r#"(module (func (export "f") (result i32) i32.const 7))"#).unwrap();
        let module = Module::new(&engine, &wasm).unwrap();
        let digest = *blake3::hash(&wasm).as_bytes();
        let fp = engine_fingerprint(&engine);
        let mine = SecretKey::load_or_create_at(&dir.path().join("k1")).unwrap();
        let theirs = SecretKey::load_or_create_at(&dir.path().join("k2")).unwrap();
        store(&cache, &module, &digest, &fp, &mine).unwrap();
        let found = find(&cache, &digest, &fp).unwrap().unwrap();
        assert!(load(&engine, &found, &mine).is_ok());
        assert!(matches!(
            load(&engine, &found, &theirs),
            Err(LoadError::NotAuthentic(_))
        ));
        // A changed byte of the file: refused before wasmtime sees it.
        let mut bytes = std::fs::read(&found.path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&found.path, &bytes).unwrap();
        assert!(matches!(
            load(&engine, &found, &mine),
            Err(LoadError::NotAuthentic(_))
        ));
        // Another engine fingerprint finds nothing.
        assert!(find(&cache, &digest, &[0; 32]).unwrap().is_none());
    }
}
