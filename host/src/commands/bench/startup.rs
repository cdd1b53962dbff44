//! Start-up figures: what `wprof run` does before `_start` (cold, warm, one function
//! changed) against plain wasmtime compiling the original; how fast the agent instruments
//! a cold module against a plain walrus parse + emit of it (walrus is the baseline only:
//! wprof does not rewrite with it); and what the per-function cache lookups cost.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use wasmtime::Engine;
use wprof_agent::{Instrumenter, ProbePlan};

use crate::commands::cache::bench::{code_bytes, one_function_changed, start};
use crate::exit::Failure;
use crate::prepare::instrument;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::stats::median;

/// One module's start-up figures (nanoseconds, medians; time mode, the default plan).
#[derive(Debug, Serialize)]
pub struct Startup {
    /// Functions the module defines.
    pub functions: u32,
    /// Bytes of its code section.
    pub code_bytes: u64,
    /// Plain wasmtime: read the original and compile it, no cache.
    pub compile_original: u64,
    /// `wprof run` up to `_start` on an empty cache: load, instrument every function,
    /// compile, store.
    pub cold: u64,
    /// The same on the cache the cold start filled: module and compiled code from the cache.
    pub warm: u64,
    /// A copy with one function changed, on a cache warm with the original.
    pub changed: u64,
    /// `wprof_agent::instrument` of the whole module: every function, no cache, in memory.
    pub instrument: u64,
    /// `walrus::Module::from_buffer` + `emit_wasm` of the same bytes (default
    /// configuration); `null` if walrus cannot read the module.
    pub walrus: Option<u64>,
    /// `walrus / instrument`: the agent's speed as a multiple of walrus's (goal ≥ 0.8).
    pub instrument_speed: Option<f64>,
    /// Every defined function's key computed and looked up in a warm cache (all hits):
    /// what a start whose module manifest missed does per function. A warm start of an
    /// unchanged module does none of it (its manifest hits).
    pub lookups: u64,
    /// Of `lookups`, computing the keys (blake3 over each body and its context).
    pub lookup_keys: u64,
    /// `lookups / warm`: what the lookups would add to a warm start (goal < 0.05).
    pub lookup_share: f64,
    /// `lookups / changed`: their share of the one-function-changed start, where they run.
    pub lookup_share_of_changed: f64,
}

/// The walrus baseline: parse and emit, `None` if walrus refuses or panics on the module.
fn walrus_round_trip(bytes: &[u8]) -> Option<usize> {
    let result = catch_unwind(AssertUnwindSafe(|| {
        walrus::Module::from_buffer(bytes).map(|mut m| m.emit_wasm().len())
    }));
    match result {
        Ok(Ok(len)) => Some(len),
        Ok(Err(e)) => {
            tracing::debug!("walrus cannot read the module: {e}");
            None
        }
        Err(_) => {
            tracing::debug!("walrus panicked on the module");
            None
        }
    }
}

fn nanos(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// Measures the start-up figures of `path`, `runs` times each. `engine` is the caching
/// engine `wprof run` uses.
pub fn measure(
    engine: &Engine,
    loaded: &LoadedModule,
    path: &Path,
    runs: u32,
) -> Result<Startup, Failure> {
    let shown = path.display();
    let plan = ProbePlan::default();
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    // The program rebuilt elsewhere under its own name: one lineage (see
    // `crate::prepare::compiled::lineage`).
    let changed_path = scratch
        .path()
        .join("changed")
        .join(path.file_name().unwrap_or("changed.wasm".as_ref()));
    std::fs::create_dir_all(changed_path.parent().expect("a folder"))
        .context("failed to create a scratch directory")?;
    let changed = one_function_changed(&loaded.bytes)
        .map_err(|e| Failure::input(format!("cannot change a function of {shown}: {e}")))?;
    std::fs::write(&changed_path, changed).context("failed to write the changed module")?;
    let instrumenter = Instrumenter::new(&loaded.bytes, &plan)
        .map_err(|e| Failure::input(format!("cannot instrument {shown}: {e}")))?;

    // Whether walrus reads the module at all (once, untimed: a refusal is not a time).
    let walrus_reads = walrus_round_trip(&loaded.bytes).is_some();
    let mut figures: [Vec<u64>; 8] = Default::default();
    let [plain, cold, warm, one, agent, walrus, lookups, keys] = &mut figures;
    for run in 0..runs {
        let t = Instant::now();
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {shown}"))?;
        let m = super::overhead::compile(engine, &bytes, path)?;
        plain.push(nanos(t));
        drop(m);

        let dir = scratch.path().join(format!("cache-{run}"));
        cold.push(start(engine, path, &dir)?);
        warm.push(start(engine, path, &dir)?);
        // The cache the cold start filled holds every function: all lookups hit.
        let mut cache = CacheSession::open(Some(&dir));
        let lineage = crate::prepare::compiled::lineage(path, &plan.body_digest());
        let t = Instant::now();
        let found = instrument::function_lookups(&instrumenter, loaded, &mut cache, &lineage);
        lookups.push(nanos(t));
        if found.cached.iter().any(Option::is_none) {
            return Err(Failure::input(format!(
                "{shown}: the warm cache misses function bodies the cold start stored"
            )));
        }
        drop(cache);
        one.push(start(engine, &changed_path, &dir)?);

        let t = Instant::now();
        let out = wprof_agent::instrument(&loaded.bytes, &plan)
            .map_err(|e| Failure::input(format!("cannot instrument {shown}: {e}")))?;
        agent.push(nanos(t));
        drop(out);
        if walrus_reads {
            let t = Instant::now();
            let emitted = walrus_round_trip(&loaded.bytes);
            walrus.push(nanos(t));
            std::hint::black_box(emitted);
        }

        let t = Instant::now();
        std::hint::black_box(instrumenter.functions());
        keys.push(nanos(t));
    }
    let [plain, cold, warm, changed, agent, walrus, lookups, keys] =
        figures.map(|v| if v.is_empty() { None } else { Some(median(v)) });
    let some = |v: Option<u64>| v.expect("measured on every run");
    let (instrument, warm, changed, lookups) =
        (some(agent), some(warm), some(changed), some(lookups));
    Ok(Startup {
        functions: instrumenter.defined_function_count(),
        code_bytes: code_bytes(&loaded.bytes),
        compile_original: some(plain),
        cold: some(cold),
        warm,
        changed,
        instrument,
        walrus,
        instrument_speed: walrus.map(|w| w as f64 / instrument.max(1) as f64),
        lookups,
        lookup_keys: some(keys),
        lookup_share: lookups as f64 / warm.max(1) as f64,
        lookup_share_of_changed: lookups as f64 / changed.max(1) as f64,
    })
}
