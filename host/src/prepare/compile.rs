//! Compiling a prepared module: taken whole from an authenticated artifact in the cache when
//! there is one, else compiled by Cranelift (reusing, for the module's lineage, the functions
//! [`crate::prepare::compiled`] kept from its previous version), the artifact then stored in
//! the background while the program runs.

use wasmtime::{Engine, Module};
use wprof_cache::CacheError;

use crate::prepare::artifacts;
use crate::prepare::instrument::Prepared;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;

/// Compiles the instrumented module: from an authenticated artifact in the cache if there
/// is one, else with Cranelift, storing the artifact for next time, and with `incremental`
/// (and an engine from [`crate::prepare::compiled::new_engine_caching`]) each compiled
/// function in its lineage's pack, for the module's next version.
pub fn compile(
    engine: &Engine,
    prepared: &mut Prepared,
    original: &LoadedModule,
    cache: &mut CacheSession,
    incremental: bool,
) -> anyhow::Result<Compiled> {
    let compiled = compile_bytes(
        engine,
        || {
            prepared.bytes(original).ok_or_else(|| {
                anyhow::anyhow!("the cached instrumented module is not the module of its digest")
            })
        },
        &prepared.digest,
        cache,
        incremental.then_some(prepared.lineage),
    )?;
    prepared.stats.compiled_from_cache = compiled.functions.is_none();
    if let Some(counts) = compiled.functions {
        prepared.stats.compiled_functions_reused = counts.reused;
        // Without the incremental cache nothing counted them: Cranelift compiled them all.
        prepared.stats.compiled_functions = match incremental {
            true => counts.compiled,
            false => compiled.module.functions().len() as u64,
        };
    }
    Ok(compiled)
}

/// A compiled module and how it was obtained.
#[derive(Debug)]
pub struct Compiled {
    /// The module.
    pub module: Module,
    /// `None` when it came whole from the cache, else how many functions were compiled
    /// and reused.
    pub functions: Option<crate::prepare::compiled::CompiledCounts>,
    /// wasmtime's serialized form it was mapped from, when it came from the cache (see
    /// [`artifacts::Loaded`]).
    pub image: Option<std::fs::File>,
}

/// Compiles the module of `bytes` (whose blake3 is `digest`; asked for only when there is no
/// compiled artifact): from an authenticated artifact in the cache if there is one, else with
/// Cranelift, storing the artifact for next time.
/// Any module: the instrumented one, or with profiling off the original. With `lineage`
/// (and an engine from [`crate::prepare::compiled::new_engine_caching`]), functions compiled
/// before for that lineage are reused.
pub fn compile_bytes<'b>(
    engine: &Engine,
    bytes: impl FnOnce() -> anyhow::Result<&'b [u8]>,
    digest: &[u8; 32],
    cache: &mut CacheSession,
    lineage: Option<[u8; 32]>,
) -> anyhow::Result<Compiled> {
    let fingerprint = artifacts::engine_fingerprint(engine);
    // None when the cache failed, or the key cannot be had.
    let secret = cache.secret();
    if let Some(secret) = &secret {
        let found = cache
            .with(|c| artifacts::find(c, digest, &fingerprint))
            .flatten();
        if let Some(found) = found {
            match artifacts::load(engine, &found, secret) {
                Ok(loaded) => {
                    tracing::debug!("compiled module taken from the cache");
                    cache.release();
                    return Ok(Compiled {
                        module: loaded.module,
                        functions: None,
                        image: Some(loaded.image),
                    });
                }
                // Expected for a copied cache: compile, and replace it below.
                Err(e) => tracing::debug!("{e}; compiling"),
            }
        }
    }
    let bytes = bytes()?;
    // Functions compiled before (this module's previous version) come from the cache.
    if let (Some(secret), Some(c), Some(lineage)) = (&secret, cache.cache(), lineage) {
        crate::prepare::compiled::attach(c.dir(), secret, lineage);
    }
    tracing::debug!("compiling");
    let compiled = Module::new(engine, bytes);
    let counts = crate::prepare::compiled::detach();
    let module = compiled.map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing::debug!("compiled");
    // Stored while the program runs: the run waits for it at its end.
    if let Some(secret) = secret {
        let (module, digest) = (module.clone(), *digest);
        cache.store_in_background("the compiled module", move |c| {
            artifacts::store(c, &module, &digest, &fingerprint, &secret).map_err(|e| {
                match e.downcast::<CacheError>() {
                    Ok(e) => e,
                    Err(e) => CacheError::Io {
                        what: "store a compiled module".into(),
                        source: std::io::Error::other(e.to_string()),
                    },
                }
            })?;
            // The functions it compiled, against it (they are its code).
            match lineage {
                Some(lineage) => crate::prepare::compiled::refer_to_artifact(
                    c,
                    &lineage,
                    artifacts::artifact_key(&digest, &fingerprint),
                    crate::run::code::image::module_image(&module),
                ),
                None => Ok(()),
            }
        });
    } else {
        cache.release();
    }
    Ok(Compiled {
        module,
        functions: Some(counts),
        image: None,
    })
}
