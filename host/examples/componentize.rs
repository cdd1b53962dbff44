//! Turns a WASI preview 1 command module into a WASI 0.2 command component, the way
//! `wasm-tools component new --adapt` does: the module and the preview 1 adapter (from the
//! `wasi-preview1-component-adapter-provider` crate, the adapter of the wasmtime release
//! wprof embeds) wrapped in a component that exports `wasi:cli/run`.
//!
//! Used by `samples/build.sh` for the component sample and by the tests:
//!
//! ```text
//! cargo run -q -p wprof --example componentize -- IN.wasm OUT.wasm
//! ```
//!
//! On error it prints a single line to stderr and exits with code 1.

use std::process::ExitCode;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: componentize IN.wasm OUT.wasm");
        return ExitCode::FAILURE;
    };
    match componentize(input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("componentize: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn componentize(input: &str, output: &str) -> anyhow::Result<()> {
    let module = std::fs::read(input)?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        )?
        .validate(true)
        .encode()?;
    std::fs::write(output, component)?;
    Ok(())
}
