//! Stack mode's module: the original with an entry counter in each function (see
//! [`wprof_agent::entry_counts`]), compiled, and cached as the original's compiled code is,
//! under a key derived from the original's digest, so that a warm run neither rewrites nor
//! hashes anything. A module the counters cannot be added to runs as it is, its calls not
//! counted, after one warning.

use wasmtime::{Engine, Module};
use wprof_agent::entry_counts::{self, CountedModule};

use crate::prepare::loader::LoadedModule;
use crate::prepare::session::{warn, CacheSession};

/// The key of the counted module's compiled code: the original's digest and the version
/// of what the counters write.
pub fn digest(original: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof entry counts\0");
    h.update(&entry_counts::VERSION.to_le_bytes());
    h.update(wprof_agent::AGENT_FORMAT_VERSION.to_le_bytes().as_slice());
    h.update(original);
    *h.finalize().as_bytes()
}

/// The compiled module stack mode runs, and whether it counts calls.
#[derive(Debug)]
pub struct CountedCode {
    pub module: Module,
    pub counted: bool,
    /// wasmtime's serialized form it was mapped from, when it came from the cache (`None`:
    /// compiled now): its address map is read from there (see [`crate::run::address_map`]).
    pub image: Option<std::fs::File>,
}

/// Compiles `loaded` with its entry counters (from the cache when it has them), or, when
/// they cannot be added, the original as it is (see `compile_original`).
pub fn compile(
    engine: &Engine,
    loaded: &LoadedModule,
    cache: &mut CacheSession,
    compile_original: impl FnOnce(&mut CacheSession) -> Result<Module, crate::exit::Failure>,
) -> Result<CountedCode, crate::exit::Failure> {
    let compiled = compile_counted(engine, loaded, cache);
    match compiled {
        Ok(compiled) => Ok(CountedCode {
            module: compiled.module,
            counted: true,
            image: compiled.image,
        }),
        Err(e) => {
            // Whatever failed (the rewrite, or compiling what it wrote), the original runs.
            warn(format_args!(
                "stack mode cannot count calls in this module ({}); they are not counted",
                e.to_string().lines().next().unwrap_or_default()
            ));
            Ok(CountedCode {
                module: compile_original(cache)?,
                counted: false,
                image: None,
            })
        }
    }
}

/// Compiles `loaded` with its entry counters, from the cache when it has them (else
/// storing them while the caller goes on).
pub fn compile_counted(
    engine: &Engine,
    loaded: &LoadedModule,
    cache: &mut CacheSession,
) -> anyhow::Result<crate::prepare::compile::Compiled> {
    let mut rewritten: Option<CountedModule> = None;
    let slot = &mut rewritten;
    crate::prepare::compile::compile_bytes(
        engine,
        move || {
            let counted = entry_counts::count_entries(&loaded.bytes)?;
            Ok(slot.insert(counted).bytes.as_slice())
        },
        &digest(&loaded.digest),
        cache,
        None,
    )
}

/// The counted module again (it is deterministic), to tell its offsets in the original's
/// terms; `None` if it cannot be made.
pub fn offsets_of(loaded: &LoadedModule) -> Option<CountedModule> {
    entry_counts::count_entries(&loaded.bytes).ok()
}
