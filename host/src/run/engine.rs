//! The wasmtime engine programs run on: the same configuration for the original and the
//! instrumented module, with the proposals a WASI program may use switched on and the
//! memory reservation sample mode relies on. `prepare/` adds its compilation cache to it.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

/// Whether engines built from now on tell `perf` about compiled code (see [`set_perf_map`]).
static PERF_MAP: AtomicBool = AtomicBool::new(false);

/// Makes every engine built from now on write `/tmp/perf-PID.map` for the code it compiles
/// or loads (wasmtime's perf map profiler), so that `perf report` names wasm functions.
/// `wprof run` does it with `WPROF_PERFMAP=1`; `wprof bench --accuracy` for its reference
/// runs.
pub fn set_perf_map(on: bool) {
    PERF_MAP.store(on, Ordering::Relaxed);
}

/// Whether engines tell `perf` about compiled code (see [`set_perf_map`]).
pub fn perf_map() -> bool {
    PERF_MAP.load(Ordering::Relaxed)
}

/// Builds the engine.
pub fn new_engine() -> anyhow::Result<wasmtime::Engine> {
    engine(config())
}

/// Builds an engine from `config` (one made by [`config`], perhaps with more set).
pub fn engine(config: wasmtime::Config) -> anyhow::Result<wasmtime::Engine> {
    wasmtime::Engine::new(&config)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("failed to configure the wasm engine")
}

/// Address space reserved for each linear memory: all of a 32-bit memory's 4 GiB (wasmtime's
/// default on 64-bit hosts, set here because sample mode depends on it), so that such a
/// memory grows in place and its base never moves while the program runs: the sampler
/// thread reads the module's current-node cell through a pointer taken before `_start`.
pub const MEMORY_RESERVATION: u64 = 1 << 32;

/// The configuration every module is compiled and run with.
pub fn config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config
        .memory_reservation(MEMORY_RESERVATION)
        .wasm_tail_call(true)
        .wasm_multi_memory(true)
        .wasm_relaxed_simd(true)
        .wasm_function_references(true)
        .wasm_gc(true)
        .wasm_exceptions(true)
        .wasm_extended_const(true)
        .wasm_memory64(true)
        .wasm_wide_arithmetic(true)
        .shared_memory(true);
    if PERF_MAP.load(Ordering::Relaxed) {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}
