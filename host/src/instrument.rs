//! The compile interception: from the original bytes to the instrumented module, taking
//! whatever it can from the cache (the whole module, or function by function) and having
//! the agent instrument only the rest.

use std::path::Path;

use wprof_agent::{Instrumenter, ProbePlan, AGENT_FORMAT_VERSION};
use wprof_cache::Kind;

use crate::cache_values::{
    digest_from_hex, FunctionEntry, Manifest, ManifestFunction, MANIFEST_VERSION,
};
use crate::loader::{hex, LoadedModule};

/// The import module name of the probes.
pub const PROBE_MODULE: &str = wprof_agent::ProbeImports::MODULE;

/// Prints one warning line on stderr.
pub fn warn(message: impl std::fmt::Display) {
    eprintln!("wprof: warning: {message}");
}

/// A cache that turns its own failure into one warning and "no cache" from then on.
#[derive(Debug)]
pub struct CacheSession {
    cache: Option<wprof_cache::Cache>,
}

impl CacheSession {
    /// Opens the cache in `dir`; if that fails, warns once and goes on without one.
    pub fn open(dir: Option<&Path>) -> Self {
        let Some(dir) = dir else {
            return Self { cache: None };
        };
        match wprof_cache::Cache::open(dir) {
            Ok(cache) => {
                tracing::debug!(dir = %dir.display(), "cache opened");
                Self { cache: Some(cache) }
            }
            Err(e) => {
                warn(format_args!("{e}; running without the cache"));
                Self { cache: None }
            }
        }
    }

    /// No cache at all.
    pub fn none() -> Self {
        Self { cache: None }
    }

    /// The open cache, if any.
    pub fn cache(&self) -> Option<&wprof_cache::Cache> {
        self.cache.as_ref()
    }

    fn disable(&mut self, e: wprof_cache::CacheError) {
        warn(format_args!("{e}; going on without the cache"));
        self.cache = None;
    }

    fn get(&mut self, kind: Kind, key: &[u8; 32]) -> Option<Vec<u8>> {
        let result = self.cache.as_ref()?.get(kind, key);
        match result {
            Ok(v) => v,
            Err(e) => {
                self.disable(e);
                None
            }
        }
    }

    fn put(&mut self, kind: Kind, key: &[u8; 32], value: &[u8]) {
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        if let Err(e) = cache.put(kind, key, value) {
            self.disable(e);
        }
    }

    fn flush(&mut self) {
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        if let Err(e) = cache.flush() {
            self.disable(e);
        }
    }
}

/// How the instrumented module came to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstrumentationStats {
    /// Functions defined in the module.
    pub functions_total: u32,
    /// Bodies the agent rewrote in this run.
    pub functions_instrumented: u32,
    /// Bodies taken from the cache.
    pub functions_from_cache: u32,
    /// The whole instrumented module came from the cache.
    pub module_from_cache: bool,
}

/// A function of the original module, as profiles name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Index in the original module.
    pub id: u32,
    /// Display name.
    pub name: String,
    /// `local` or `import`.
    pub kind: String,
}

/// The instrumented module, ready to compile.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Every function of the original module, in id order.
    pub functions: Vec<FunctionInfo>,
    /// Where it came from.
    pub stats: InstrumentationStats,
}

fn manifest_key(module_digest: &[u8; 32], plan: &ProbePlan) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof manifest v1\0");
    h.update(module_digest);
    h.update(&plan.digest());
    h.update(&AGENT_FORMAT_VERSION.to_le_bytes());
    *h.finalize().as_bytes()
}

/// Produces the instrumented module for `module`, using and filling `cache`.
pub fn prepare(
    module: &LoadedModule,
    path: &Path,
    plan: &ProbePlan,
    cache: &mut CacheSession,
) -> Result<Prepared, wprof_agent::AgentError> {
    let manifest_key = manifest_key(&module.digest, plan);
    if let Some(hit) = from_manifest(&manifest_key, cache) {
        tracing::debug!("instrumented module taken from the cache");
        return Ok(hit);
    }

    let instrumenter = Instrumenter::new(&module.bytes, plan)?;
    let summaries = instrumenter.functions();
    let mut stats = InstrumentationStats {
        functions_total: instrumenter.defined_function_count(),
        ..Default::default()
    };
    let mut bodies = Vec::with_capacity(stats.functions_total as usize);
    let first_defined = instrumenter.imported_function_count() as usize;
    for (defined, summary) in summaries[first_defined..].iter().enumerate() {
        let key = summary.key.expect("defined functions have keys");
        let cached = cache
            .get(Kind::Function, &key)
            .and_then(|bytes| FunctionEntry::decode(&bytes));
        let body = match cached {
            Some(entry) => {
                stats.functions_from_cache += 1;
                entry.body
            }
            None => {
                let body = instrumenter.instrument_function(defined as u32)?;
                stats.functions_instrumented += 1;
                cache.put(
                    Kind::Function,
                    &key,
                    &FunctionEntry { body: body.clone() }.encode(),
                );
                body
            }
        };
        bodies.push(body);
    }
    let out = instrumenter.assemble(&bodies)?;
    tracing::debug!(
        instrumented = stats.functions_instrumented,
        from_cache = stats.functions_from_cache,
        "module instrumented"
    );

    let instrumented_digest = *blake3::hash(&out.bytes).as_bytes();
    let manifest = Manifest {
        manifest_version: MANIFEST_VERSION,
        module_digest: module.digest_hex(),
        instrumented_digest: hex(&instrumented_digest),
        original_size: module.bytes.len() as u64,
        instrumented_size: out.bytes.len() as u64,
        agent_version: AGENT_FORMAT_VERSION,
        mode: plan.mode.name().to_string(),
        path: path.display().to_string(),
        functions: out
            .probe_map
            .functions
            .iter()
            .zip(&summaries)
            .map(|(f, s)| ManifestFunction {
                id: f.id,
                name: f.name.clone(),
                kind: f.kind.name().to_string(),
                key: s.key.map(|k| hex(&k)),
                original_body: f.original_body.as_ref().map(|r| (r.start, r.end)),
                instrumented_body: f.instrumented_body.as_ref().map(|r| (r.start, r.end)),
            })
            .collect(),
    };
    // The module first: a manifest is only ever written after what it points to.
    cache.put(Kind::Module, &instrumented_digest, &out.bytes);
    cache.put(Kind::Manifest, &manifest_key, &manifest.encode());
    cache.flush();

    Ok(Prepared {
        bytes: out.bytes,
        functions: functions_of(&manifest),
        stats,
    })
}

fn functions_of(manifest: &Manifest) -> Vec<FunctionInfo> {
    manifest
        .functions
        .iter()
        .map(|f| FunctionInfo {
            id: f.id,
            name: f.name.clone(),
            kind: f.kind.clone(),
        })
        .collect()
}

fn from_manifest(key: &[u8; 32], cache: &mut CacheSession) -> Option<Prepared> {
    let manifest = Manifest::decode(&cache.get(Kind::Manifest, key)?)?;
    let module_key = digest_from_hex(&manifest.instrumented_digest)?;
    let bytes = cache.get(Kind::Module, &module_key)?;
    if blake3::hash(&bytes).as_bytes() != &module_key {
        return None;
    }
    let defined = manifest
        .functions
        .iter()
        .filter(|f| f.kind == "local")
        .count() as u32;
    Some(Prepared {
        bytes,
        functions: functions_of(&manifest),
        stats: InstrumentationStats {
            functions_total: defined,
            functions_instrumented: 0,
            functions_from_cache: defined,
            module_from_cache: true,
        },
    })
}
