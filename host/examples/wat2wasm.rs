//! Converts a WebAssembly text file (`.wat`) into a binary module (`.wasm`).
//!
//! Used by `samples/build.sh` to build the hand-written WAT samples, so that no
//! separate WABT install is needed:
//!
//! ```text
//! cargo run -q -p wprof --example wat2wasm -- IN.wat OUT.wasm
//! ```
//!
//! Identifiers such as `$fib` are kept in the module's name section. On error
//! it prints a single line to stderr and exits with code 1.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: wat2wasm IN.wat OUT.wasm");
        return ExitCode::FAILURE;
    };
    match convert(Path::new(input), Path::new(output)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("wat2wasm: {}", one_line(&message));
            ExitCode::FAILURE
        }
    }
}

/// Parses `input` (text or binary) and writes the binary module to `output`.
fn convert(input: &Path, output: &Path) -> Result<(), String> {
    let binary = wat::parse_file(input).map_err(|e| e.to_string())?;
    std::fs::write(output, binary).map_err(|e| format!("cannot write {}: {e}", output.display()))
}

/// Joins a multi-line message (the `wat` crate's errors quote the source
/// line) into one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "|")
        .collect::<Vec<_>>()
        .join(" ")
}
