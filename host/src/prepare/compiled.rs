//! Compiled functions: wasmtime's incremental compilation cache, backed by wprof's cache,
//! so that a module changed in one function recompiles little more than that function.
//!
//! Cranelift keys each function's compiled code by a digest of its IR, the target and the
//! compiler flags, and asks a [`wasmtime::CacheStore`] for it before compiling. wprof's
//! store keeps these values in the cache (kind `compiled`, under blake3 of Cranelift's key)
//! and, since they are machine code, authenticates them like compiled artifacts: each value
//! carries a MAC under the user's secret key over its key and bytes, and one that does not
//! verify is a miss (Cranelift compiles the function and the store replaces the value).
//!
//! The store is one per process and does nothing until [`attach`]ed to a cache: engines
//! always carry it, and only compiles that wprof wants cached (instrumented modules, with a
//! usable cache and key) use it. A run with `WPROF=0` never touches the cache.

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use wprof_cache::{Cache, Kind};

use crate::prepare::secret::SecretKey;

/// The process's store for compiled functions.
#[derive(Debug, Default)]
pub struct CompiledFunctions {
    attached: Mutex<Option<(Arc<Cache>, SecretKey)>>,
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

/// Compiles from now on reuse and fill the cache in `dir`, authenticated with `secret`.
pub fn attach(dir: &Path, secret: &SecretKey) {
    match Cache::open(dir) {
        Ok(cache) => {
            *store().lock() = Some((Arc::new(cache), secret.clone()));
        }
        Err(e) => tracing::debug!("compiled functions not cached: {e}"),
    }
}

/// Compiles from now on use no cache.
pub fn detach() {
    *store().lock() = None;
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
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Arc<Cache>, SecretKey)>> {
        self.attached.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attached(&self) -> Option<(Arc<Cache>, SecretKey)> {
        self.lock().clone()
    }
}

impl wasmtime::CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let (cache, secret) = self.attached()?;
        let key = key_of(key);
        let value = cache.get(Kind::Compiled, &key).ok()??;
        if value.len() < 32 {
            return None;
        }
        let (stored, code) = value.split_at(32);
        if stored != mac(&secret, &key, code) {
            tracing::debug!("a compiled function fails its MAC: compiling it");
            return None;
        }
        Some(Cow::Owned(code.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let Some((cache, secret)) = self.attached() else {
            return false;
        };
        let key = key_of(key);
        let mut sealed = mac(&secret, &key, &value).to_vec();
        sealed.extend_from_slice(&value);
        cache.put(Kind::Compiled, &key, &sealed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore;

    #[test]
    fn values_round_trip_only_under_the_key_that_wrote_them() {
        let dir = tempfile::tempdir().unwrap();
        let mine = SecretKey::load_or_create_at(&dir.path().join("k1")).unwrap();
        let theirs = SecretKey::load_or_create_at(&dir.path().join("k2")).unwrap();
        let store = CompiledFunctions::default();
        assert!(!store.insert(b"k", b"code".to_vec()), "detached: no cache");
        let cache = Arc::new(Cache::open(&dir.path().join("c")).unwrap());
        *store.lock() = Some((cache.clone(), mine.clone()));
        assert!(store.insert(b"k", b"code".to_vec()));
        assert_eq!(store.get(b"k").as_deref(), Some(&b"code"[..]));
        assert_eq!(store.get(b"other"), None);
        *store.lock() = Some((cache.clone(), theirs));
        assert_eq!(store.get(b"k"), None, "another user's key");
        // A changed byte of the code fails the MAC.
        *store.lock() = Some((cache.clone(), mine));
        let key = key_of(b"k");
        let mut sealed = cache.get(Kind::Compiled, &key).unwrap().unwrap();
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        cache.put(Kind::Compiled, &key, &sealed).unwrap();
        assert_eq!(store.get(b"k"), None);
    }
}
