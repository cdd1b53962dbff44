//! A component compiled through the cache: its compiled code is stored as an authenticated
//! artifact under the digest of the bytes compiled (the original for `WPROF=0`, the
//! rewritten component when profiled), as a module's is, so that a second run of the same
//! component compiles nothing.

use wasmtime::component::Component;
use wasmtime::Engine;

use crate::prepare::artifacts;
use crate::prepare::session::CacheSession;

/// `bytes` (a component) compiled, or loaded from the cache; whether it came from there.
pub fn compile(
    engine: &Engine,
    bytes: &[u8],
    cache: &mut CacheSession,
) -> anyhow::Result<(Component, bool)> {
    let digest = *blake3::hash(bytes).as_bytes();
    let fingerprint = artifacts::engine_fingerprint(engine);
    // None when the cache failed, or the key cannot be had.
    let secret = cache.secret();
    if let Some(secret) = &secret {
        let found = cache
            .with(|c| artifacts::find(c, &digest, &fingerprint))
            .flatten();
        if let Some(found) = found {
            match artifacts::load_component(engine, &found, secret) {
                Ok(component) => {
                    cache.release();
                    return Ok((component, true));
                }
                // Expected for a copied cache: compile, and replace it below.
                Err(e) => tracing::debug!("{e}; compiling"),
            }
        }
    }
    let component = Component::new(engine, bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Stored while the program runs: the run waits for it at its end.
    if let Some(secret) = secret {
        let stored = component.clone();
        cache.store_in_background("the compiled component", move |c| {
            let image = crate::run::code::image::component_image(&stored);
            artifacts::store_bytes(c, image, &digest, &fingerprint, &secret).map_err(|e| {
                wprof_cache::CacheError::Io {
                    what: "store a compiled component".into(),
                    source: std::io::Error::other(e.to_string()),
                }
            })
        });
    } else {
        cache.release();
    }
    Ok((component, false))
}
