//! `wprof cache export`: the instrumented module exactly as it was compiled (or the
//! original, or either as text), so support can reproduce a run.

use std::path::PathBuf;

use super::show::stored_module;
use super::CacheDirArg;
use crate::exit::Failure;
use crate::prepare::cache_model;

/// Write a cached module to a file: the instrumented module as compiled, or the original.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
MODULE is as for `wprof cache show`. The bytes written are the ones wprof compiled (their
blake3 is the `instrumented` digest of `wprof cache ls --json`); with --wat, the same module
as WebAssembly text.

Examples:
  wprof cache export 1 -o app.instrumented.wasm
  wprof cache export app.wasm --wat -o app.instrumented.wat
  wprof cache export 3f2a9c --original -o app.wasm

Exit status:
  0; 2 if the cache or the module cannot be found or read, or OUT cannot be written.")]
pub struct ExportCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// The module: number from `wprof cache ls`, path, file name, or digest prefix.
    #[arg(value_name = "MODULE")]
    module: String,

    /// Where to write it (`-` for standard output).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,

    /// Write WebAssembly text instead of the binary.
    #[arg(long)]
    wat: bool,

    /// Export the original module (as the user had it) instead of the instrumented one.
    #[arg(long)]
    original: bool,
}

impl ExportCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache = self.dir.open_existing()?;
        let modules = cache_model::modules(&cache).map_err(super::failed)?;
        let m = cache_model::resolve(&modules, &self.module).map_err(Failure::input)?;
        let (digest, what) = if self.original {
            (&m.manifest.module_digest, "original")
        } else {
            (&m.manifest.instrumented_digest, "instrumented")
        };
        let bytes = stored_module(&cache, digest)?.ok_or_else(|| {
            Failure::input(format!(
                "module #{}: the {what} module is not in the cache",
                m.index
            ))
        })?;
        drop(cache);
        let out = if self.wat {
            wasmprinter::print_bytes(&bytes)
                .map_err(|e| Failure::input(format!("cannot print the module: {e}")))?
                .into_bytes()
        } else {
            bytes
        };
        if self.output.as_os_str() == "-" {
            use std::io::Write;
            std::io::stdout()
                .write_all(&out)
                .map_err(|e| Failure::input(format!("cannot write to stdout: {e}")))?;
        } else {
            std::fs::write(&self.output, &out).map_err(|e| {
                Failure::input(format!("cannot write {}: {e}", self.output.display()))
            })?;
            crate::say!(
                "wprof: {what} module #{} ({}) written to {}",
                m.index,
                m.path(),
                self.output.display()
            );
        }
        Ok(0)
    }
}
