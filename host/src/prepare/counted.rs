//! Stack mode's module: the original with an entry counter in each function (see
//! [`wprof_agent::entry_counts`]), compiled, and cached as the original's compiled code is,
//! under a key derived from the original's digest, so that a warm run neither rewrites nor
//! hashes anything. A module the counters cannot be added to runs as it is, its calls not
//! counted, after one warning.
//!
//! Beside its compiled code, the cache keeps what `wprof cache ls/show/export` and the end
//! of a run need, as for the probed modes: the original, the counted module (against it),
//! and a manifest with the functions' names, their bodies in both modules and where the
//! counters are ([`record`], stored while the program runs; [`recorded`]).

use std::path::Path;

use wasmtime::{Engine, Module};
use wprof_agent::entry_counts::{self, CountedModule, CounterOffsets};
use wprof_cache::{hex, Cache, CacheError, Kind};

use crate::prepare::cache_values::{self, Manifest, ManifestFunction, MANIFEST_VERSION};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::{warn, CacheSession};
use crate::profile::FunctionInfo;

/// The mode a counted module's manifest names.
pub const MODE: &str = "stack";

/// The key of the counted module's compiled code: the original's digest, the version of
/// what the counters write, and the captures made (which depend on whether this wprof
/// reads the frames of the interpreter the module is: a module counted without them must
/// not stand in for one counted with them).
pub fn digest(loaded: &LoadedModule) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof entry counts\0");
    h.update(&entry_counts::VERSION.to_le_bytes());
    wprof_agent::key_agent(&mut h);
    h.update(&loaded.digest);
    for c in captures(loaded) {
        for word in [c.function, c.param, c.slot] {
            h.update(&word.to_le_bytes());
        }
    }
    *h.finalize().as_bytes()
}

/// The key of the counted module's manifest.
pub fn manifest_key(loaded: &LoadedModule) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof entry counts manifest\0");
    h.update(&digest(loaded));
    *h.finalize().as_bytes()
}

/// The compiled module stack mode runs, and whether it counts calls.
#[derive(Debug)]
pub struct CountedCode {
    pub module: Module,
    pub counted: bool,
    /// wasmtime's serialized form it was mapped from, when it came from the cache (`None`:
    /// compiled now): its address map is read from there (see [`crate::run::code::address_map`]).
    pub image: Option<std::fs::File>,
    /// Where its counters are, when they were added now (else the run reads it from the
    /// module's manifest: [`recorded_or_made`]).
    pub counters: Option<CounterOffsets>,
}

/// Compiles `loaded` with its entry counters (from the cache when it has them), or, when
/// they cannot be added, the original as it is (see `compile_original`).
pub fn compile(
    engine: &Engine,
    loaded: &LoadedModule,
    path: &Path,
    cache: &mut CacheSession,
    compile_original: impl FnOnce(&mut CacheSession) -> Result<Module, crate::exit::Failure>,
) -> Result<CountedCode, crate::exit::Failure> {
    let compiled = compile_counted(engine, loaded, path, cache);
    match compiled {
        Ok((compiled, counters)) => Ok(CountedCode {
            module: compiled.module,
            counted: true,
            image: compiled.image,
            counters,
        }),
        Err(e) => {
            // Whatever failed (the rewrite, or compiling what it wrote), the original runs;
            // if it cannot be compiled either (an invalid module), its error is the one line.
            let module = compile_original(cache)?;
            warn(format_args!(
                "stack mode cannot count calls in this module ({}); they are not counted",
                e.to_string().lines().next().unwrap_or_default()
            ));
            Ok(CountedCode {
                module,
                counted: false,
                image: None,
                counters: None,
            })
        }
    }
}

/// Compiles `loaded` (read from `path`) with its entry counters, from the cache when it
/// has them; else adds them, compiles them (which validates the module: nothing is stored
/// before), and stores the counted module with its manifest (see [`record`]) and its
/// compiled code while the caller goes on. Where the counters are comes back with it when
/// they were added now.
pub fn compile_counted(
    engine: &Engine,
    loaded: &LoadedModule,
    path: &Path,
    cache: &mut CacheSession,
) -> anyhow::Result<(crate::prepare::compile::Compiled, Option<CounterOffsets>)> {
    let mut made: Option<CountedModule> = None;
    let slot = &mut made;
    let compiled = crate::prepare::compile::compile_bytes(
        engine,
        move || {
            let counted = count(loaded)?;
            Ok(slot.insert(counted).bytes.as_slice())
        },
        &digest(loaded),
        cache,
        None,
    )?;
    let Some(counted) = made else {
        return Ok((compiled, None));
    };
    let offsets = counted.offsets.clone();
    if cache.is_enabled() {
        // While the program runs, as its compiled code is: on a 69 MB module, naming its
        // functions and compressing both modules take seconds of CPU that the compile
        // would have shared its cores with.
        let loaded = LoadedModule {
            bytes: loaded.bytes.clone(),
            digest: loaded.digest,
        };
        let path = path.to_path_buf();
        cache.store_in_background(
            "a counted module and its manifest",
            move |c| match manifest_of(&loaded, &counted, &path) {
                Some(manifest) => record(c, &loaded, &counted, &manifest),
                None => Ok(()),
            },
        );
    }
    Ok((compiled, Some(offsets)))
}

/// Stores in `cache` the original (unless there), `counted` against it, and then its
/// `manifest`: a process killed in between leaves values nothing points to yet, never a
/// manifest without its modules.
fn record(
    cache: &Cache,
    loaded: &LoadedModule,
    counted: &CountedModule,
    manifest: &Manifest,
) -> Result<(), CacheError> {
    let encoded = |what: &str, value: std::io::Result<Vec<u8>>| {
        value.map_err(|source| CacheError::Io {
            what: format!("encode {what}"),
            source,
        })
    };
    if !cache.contains(Kind::Module, &loaded.digest)? {
        let value = encoded("a module", cache_values::encode_module(&loaded.bytes))?;
        cache.put(Kind::Module, &loaded.digest, &value)?;
    }
    let value = encoded(
        "a module",
        cache_values::encode_module_against(&counted.bytes, loaded.digest, &loaded.bytes),
    )?;
    cache.put(
        Kind::Module,
        blake3::hash(&counted.bytes).as_bytes(),
        &value,
    )?;
    let key = manifest_key(loaded);
    cache.put(
        Kind::Manifest,
        &key,
        &encoded("a manifest", manifest.encode())?,
    )?;
    cache.set_note(Kind::Manifest, &key, manifest.path.as_bytes())
}

/// The manifest of `counted`, made from `loaded`; `None` if a module cannot be read.
fn manifest_of(loaded: &LoadedModule, counted: &CountedModule, path: &Path) -> Option<Manifest> {
    let functions = summaries(&loaded.bytes)?;
    let mut counted_bodies = body_ranges(&counted.bytes)?.into_iter();
    let range = |r: std::ops::Range<usize>| {
        Some((u32::try_from(r.start).ok()?, u32::try_from(r.end).ok()?))
    };
    let functions = functions
        .into_iter()
        .map(|f| {
            let instrumented_body = match f.body {
                Some(_) => counted_bodies.next().and_then(range),
                None => None,
            };
            ManifestFunction {
                id: f.id,
                name: f.name,
                kind: f.kind.name().to_string(),
                key: None,
                original_body: f.body.and_then(range),
                instrumented_body,
                probed_body: None,
                blocks: Vec::new(),
                allocator: None,
            }
        })
        .collect();
    Some(Manifest {
        manifest_version: MANIFEST_VERSION,
        module_digest: loaded.digest_hex(),
        instrumented_digest: hex(blake3::hash(&counted.bytes).as_bytes()),
        original_size: loaded.bytes.len() as u64,
        instrumented_size: counted.bytes.len() as u64,
        agent_version: wprof_agent::AGENT_FORMAT_VERSION,
        mode: MODE.to_string(),
        call_sites: false,
        short_max: 0,
        coverage: false,
        live: false,
        path: std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string(),
        functions,
        probe_code: None,
        compiled_digest: Some(hex(&digest(loaded))),
        counter_offsets: Some(counted.offsets.encode()),
    })
}

/// The body (locals and code) of each function the module defines, in order.
fn body_ranges(bytes: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload.ok()? {
            out.push(body.range());
        }
    }
    Some(out)
}

/// Every function of the module, as a profiled run names them (from DWARF too, where the
/// name section leaves some unnamed).
fn summaries(bytes: &[u8]) -> Option<Vec<wprof_agent::FunctionSummary>> {
    let plan = wprof_agent::ProbePlan::default();
    let mut instrumenter = wprof_agent::Instrumenter::new(bytes, &plan).ok()?;
    crate::prepare::instrument::dwarf_names::name_unnamed(&mut instrumenter, bytes);
    Some(instrumenter.unkeyed_functions())
}

/// The module's functions, named as a profiled run names them (none if it cannot be
/// read).
pub fn functions(bytes: &[u8]) -> Vec<FunctionInfo> {
    summaries(bytes)
        .unwrap_or_default()
        .into_iter()
        .map(|f| FunctionInfo {
            id: f.id,
            name: f.name,
            kind: f.kind.name().to_string(),
        })
        .collect()
}

/// What the cache recorded of `loaded`'s counted module (a use of its manifest): its
/// functions, and where its counters are; `None` if it has no manifest of it.
pub fn recorded(cache: &mut CacheSession, loaded: &LoadedModule) -> Option<Recorded> {
    let stored = cache.get(Kind::Manifest, &manifest_key(loaded))?;
    let manifest = Manifest::decode(&stored)?;
    if manifest.module_digest != loaded.digest_hex() || manifest.mode != MODE {
        return None;
    }
    Recorded::of(manifest)
}

/// [`recorded`]; else, with a cache that lacks it (one filled by a wprof before counted
/// modules had manifests), what it records made again from `loaded` (read from `path`)
/// and stored while the caller goes on. `None` without a cache, or if the module cannot
/// be counted.
pub fn recorded_or_made(
    cache: &mut CacheSession,
    loaded: &LoadedModule,
    path: &Path,
) -> Option<Recorded> {
    if !cache.is_enabled() {
        return None;
    }
    if let Some(recorded) = recorded(cache, loaded) {
        return Some(recorded);
    }
    let counted = count(loaded).ok()?;
    let manifest = manifest_of(loaded, &counted, path)?;
    let made = Recorded::of(manifest.clone());
    let loaded = LoadedModule {
        bytes: loaded.bytes.clone(),
        digest: loaded.digest,
    };
    cache.store_in_background("a counted module's manifest", move |c| {
        record(c, &loaded, &counted, &manifest)
    });
    made
}

/// A counted module's functions and counters, as its manifest records them.
#[derive(Debug)]
pub struct Recorded {
    /// Every function, in id order.
    pub functions: Vec<FunctionInfo>,
    /// Where the counters are.
    pub offsets: CounterOffsets,
}

impl Recorded {
    fn of(manifest: Manifest) -> Option<Self> {
        Some(Self {
            offsets: CounterOffsets::decode(manifest.counter_offsets.as_deref()?)?,
            functions: crate::prepare::instrument::functions_of(&manifest),
        })
    }
}

/// The counted module again (it is deterministic), to tell its offsets in the original's
/// terms; `None` if it cannot be made.
pub fn offsets_of(loaded: &LoadedModule) -> Option<CounterOffsets> {
    count(loaded).ok().map(|c| c.offsets)
}

/// The counted module of `loaded`: its entry counters, and in an interpreter the capture
/// of its eval loop's state (see [`crate::languages`]). Deterministic, as the cache needs.
fn count(loaded: &LoadedModule) -> Result<CountedModule, wprof_agent::AgentError> {
    entry_counts::count_entries_capturing(&loaded.bytes, &captures(loaded))
}

/// The captures `loaded`'s counted module makes: its eval loop's state, in an interpreter
/// whose frames are read.
fn captures(loaded: &LoadedModule) -> Vec<wprof_agent::entry_counts::Capture> {
    match crate::prepare::facts::interpreter(loaded) {
        Some(Ok(interpreter)) => interpreter.captures(),
        _ => Vec::new(),
    }
}
