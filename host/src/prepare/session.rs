//! A cache session: the cache as one run (or one `wprof instrument`) uses it, turning the
//! cache's own failure into one warning and "no cache" from then on, keeping the size cap
//! after runs that stored something, and finishing the stores that a thread of their own
//! writes while the program already runs.

use std::path::Path;
use std::sync::Arc;

use wprof_cache::{Cache, CacheError, Kind};

use crate::prepare::secret::SecretKey;

/// The size cap applied after runs that stored something, by default: 5 GiB, which holds
/// twenty 70 MB modules (about 230 MB each once instrumented, compiled and cached) or
/// hundreds of small ones.
pub const DEFAULT_MAX_SIZE: u64 = 5 << 30;

/// Prints one warning line on stderr.
pub fn warn(message: impl std::fmt::Display) {
    crate::say!("wprof: warning: {message}");
}

/// The size cap kept automatically: `WPROF_CACHE_MAX_SIZE` (a size such as `500M`; `0`
/// or `off` for none), else the configuration file's `[cache] max_size`, else
/// [`DEFAULT_MAX_SIZE`]. `Err` for a value that is not a size.
pub fn auto_max_size() -> Result<Option<u64>, String> {
    match std::env::var("WPROF_CACHE_MAX_SIZE") {
        Err(_) => {
            Ok(crate::settings::configured_cache_max_size().unwrap_or(Some(DEFAULT_MAX_SIZE)))
        }
        Ok(v) if matches!(v.trim(), "0" | "off" | "none") => Ok(None),
        Ok(v) => crate::display::parse_size(&v)
            .map(Some)
            .map_err(|e| format!("WPROF_CACHE_MAX_SIZE: {e}")),
    }
}

/// A cache that turns its own failure into one warning and "no cache" from then on.
#[derive(Debug)]
pub struct CacheSession {
    cache: Option<Arc<Cache>>,
    failed: bool,
    wrote: bool,
    secret: Option<Option<SecretKey>>,
    /// Stores a thread of their own writes, not yet waited for (see
    /// [`CacheSession::store_in_background`]).
    background: Vec<std::thread::JoinHandle<Result<(), CacheError>>>,
}

impl CacheSession {
    /// Opens the cache in `dir`; if that fails, warns once and goes on without one.
    pub fn open(dir: Option<&Path>) -> Self {
        let mut session = Self {
            cache: None,
            failed: dir.is_none(),
            wrote: false,
            secret: None,
            background: Vec::new(),
        };
        if let Some(dir) = dir {
            match Cache::open(dir) {
                Ok(cache) => {
                    tracing::debug!(dir = %dir.display(), "cache opened");
                    if let Some(format) = cache.emptied_older_format() {
                        warn(format_args!(
                            "the cache in {} was an earlier wprof's ({format}) and has been \
                             emptied; this run rebuilds what it needs",
                            dir.display()
                        ));
                    }
                    session.cache = Some(Arc::new(cache));
                }
                Err(e) => session.fail(format_args!("{e}; running without the cache")),
            }
        }
        session
    }

    /// Another session over the same open cache (and the secret key as loaded), for a
    /// caller elsewhere that needs its own: no second opening of the directory.
    pub fn share(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            failed: self.failed,
            wrote: false,
            secret: self.secret.clone(),
            background: Vec::new(),
        }
    }

    /// No cache at all.
    pub fn none() -> Self {
        Self::open(None)
    }

    /// The open cache, if any.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_deref()
    }

    /// Whether this session still uses a cache.
    pub fn is_enabled(&self) -> bool {
        !self.failed
    }

    fn fail(&mut self, message: std::fmt::Arguments<'_>) {
        if !self.failed {
            warn(message);
        }
        self.failed = true;
        self.cache = None;
    }

    fn disable(&mut self, e: CacheError) {
        self.fail(format_args!("{e}; going on without the cache"));
    }

    /// Writes into the cache on a thread of its own, so that the caller goes on meanwhile
    /// (a cold start's compiled code is stored while the program already runs);
    /// [`CacheSession::release`], or dropping the session, waits for it. A failure is the
    /// session's one warning, as if it had been stored in place. Without a cache, nothing.
    pub(crate) fn store_in_background(
        &mut self,
        what: &'static str,
        store: impl FnOnce(&Cache) -> Result<(), CacheError> + Send + 'static,
    ) {
        let Some(cache) = self.cache.clone() else {
            return;
        };
        self.wrote = true;
        let spawned = std::thread::Builder::new()
            .name("wprof-store".into())
            .spawn(move || store(&cache));
        match spawned {
            Ok(handle) => self.background.push(handle),
            // Only a miss for the next run.
            Err(e) => tracing::debug!("{what} not stored: {e}"),
        }
    }

    /// Whether stores are still being written in the background.
    pub fn storing(&self) -> bool {
        !self.background.is_empty()
    }

    /// Waits for what is still stored in the background (a cold start's compiled code,
    /// written while the program ran), as the phase `store`.
    pub fn wait_for_stores(&mut self, timings: &mut crate::timings::Timings) {
        if self.storing() {
            timings.time("store", || self.release());
        }
    }

    /// Waits for the stores written in the background.
    fn join_background(&mut self) {
        for handle in std::mem::take(&mut self.background) {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.disable(e),
                Err(_) => self.fail(format_args!(
                    "storing in the cache failed; going on without the cache"
                )),
            }
        }
    }

    /// Ends a batch of work: waits for the stores written in the background, applies the
    /// size cap if this session wrote anything, and adds this session's counts to the
    /// cache's counters.
    pub fn release(&mut self) {
        self.join_background();
        let Some(cache) = self.cache.as_deref() else {
            return;
        };
        if self.wrote {
            self.wrote = false;
            match auto_max_size() {
                Ok(Some(cap)) => {
                    // A cheap bound first: most runs never read the whole cache.
                    if cache.size_on_disk().is_ok_and(|s| s > cap) {
                        if let Err(e) = crate::prepare::cache_model::gc(cache, cap) {
                            tracing::debug!("automatic gc failed: {e}");
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::debug!("{e}; no automatic size cap"),
            }
        }
        if let Err(e) = cache.flush() {
            self.disable(e);
        }
    }

    pub(crate) fn get(&mut self, kind: Kind, key: &[u8; 32]) -> Option<Vec<u8>> {
        let result = self.cache.as_deref()?.get(kind, key);
        match result {
            Ok(v) => v,
            Err(e) => {
                self.disable(e);
                None
            }
        }
    }

    /// Runs `f` on the cache, if there is one; a cache error disables the cache (one warning).
    pub(crate) fn with<T>(&mut self, f: impl FnOnce(&Cache) -> Result<T, CacheError>) -> Option<T> {
        let result = f(self.cache.as_deref()?);
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.disable(e);
                None
            }
        }
    }

    pub(crate) fn put(&mut self, kind: Kind, key: &[u8; 32], value: &[u8]) {
        self.wrote = true;
        self.with(|c| c.put(kind, key, value));
    }

    /// Puts a value that had to be encoded (compressed) first, unless encoding failed.
    pub(crate) fn put_encoded(
        &mut self,
        kind: Kind,
        key: &[u8; 32],
        value: std::io::Result<Vec<u8>>,
    ) {
        match value {
            Ok(value) => self.put(kind, key, &value),
            Err(e) => tracing::debug!("{} value not stored: {e}", kind.name()),
        }
    }

    /// The user's secret key, loaded (or created) once; `None` (after one warning) if it
    /// cannot be had, and then compiled code is not cached.
    pub(crate) fn secret(&mut self) -> Option<SecretKey> {
        if self.failed {
            return None;
        }
        if self.secret.is_none() {
            self.secret = Some(match SecretKey::load_or_create() {
                Ok(k) => Some(k),
                Err(e) => {
                    warn(format_args!("{e:#}; compiled code is not cached"));
                    None
                }
            });
        }
        self.secret.clone().flatten()
    }
}

impl Drop for CacheSession {
    /// What is still being stored is waited for: the process does not end before it.
    fn drop(&mut self) {
        if self.storing() {
            self.release();
        }
    }
}
