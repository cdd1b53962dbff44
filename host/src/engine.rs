//! The wasmtime engine wprof compiles with: the same engine for the original and the
//! instrumented module, with the proposals a WASI program may use switched on.

use anyhow::Context;

/// Builds the engine.
pub fn new_engine() -> anyhow::Result<wasmtime::Engine> {
    let mut config = wasmtime::Config::new();
    config
        .wasm_tail_call(true)
        .wasm_multi_memory(true)
        .wasm_relaxed_simd(true)
        .wasm_function_references(true)
        .wasm_gc(true)
        .wasm_exceptions(true)
        .wasm_extended_const(true)
        .wasm_memory64(true)
        .wasm_wide_arithmetic(true);
    wasmtime::Engine::new(&config)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("failed to configure the wasm engine")
}
