//! The command line: the top-level parser, one module per `wprof` subcommand, and turning
//! errors into one line and an exit code. Each subcommand has a clap `Args` struct that turns
//! into plain settings, and an `execute` that returns the process exit code.
//!
//! This room may use every other room: it is where flags become settings and the rooms
//! below are called in order (prepare → run → profile → report).

pub mod bench;
pub mod cache;
pub mod diff;
pub mod instrument;
pub mod report;
pub mod run;

use clap::{Parser, Subcommand};

use self::bench::BenchCommand;
use self::cache::CacheCommand;
use self::diff::DiffCommand;
use self::instrument::InstrumentCommand;
use self::report::ReportCommand;
use self::run::RunCommand;
use crate::exit::USAGE_OR_INPUT;

/// wprof: an exact profiler for WebAssembly (WASI preview 1) programs.
///
/// `wprof run app.wasm` runs the program under an embedded wasmtime with probes inserted
/// into every function, then writes an exact profile (calls, self and inclusive time, who
/// called whom). Instrumented code is cached, so each function is instrumented once; the
/// original .wasm file is only ever read.
#[derive(Debug, Parser)]
#[command(name = "wprof", version, propagate_version = true, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

const AFTER_HELP: &str = "\
Environment:
  WPROF            0/off/false: run programs unprofiled, exactly as plain wasmtime would
  WPROF_OUT        profile path for `wprof run` (default ./<module stem>.wprof)
  WPROF_CACHE_DIR  cache directory (default $XDG_CACHE_HOME/wprof, else ~/.cache/wprof)
  WPROF_CACHE_MAX_SIZE  size cap kept after runs that store something (default 1G; off)
  WPROF_MODE       time|sample|cost: what `wprof run` measures (default time)
  WPROF_SAMPLE_PERIOD_US  sample mode's period in µs (default 100)
  WPROF_CALL_SITES 1/true: split caller -> callee edges by call site
  WPROF_LOG        filter for wprof's own logs on stderr, e.g. `debug` (default: off)

Exit status:
  `wprof run` exits with the program's exit code; wprof's own errors exit with 2.
  `wprof diff --threshold PCT` exits with 1 when a function's cost grew past PCT.
  `wprof cache verify` exits with 1 when it found bad entries.";

#[derive(Debug, Subcommand)]
enum Command {
    Run(RunCommand),
    Report(ReportCommand),
    Diff(DiffCommand),
    Bench(BenchCommand),
    Cache(CacheCommand),
    Instrument(InstrumentCommand),
}

/// Runs wprof with this process's arguments; returns the exit code.
pub fn main() -> i32 {
    crate::logging::init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { USAGE_OR_INPUT } else { 0 };
        }
    };
    let result = match &cli.command {
        Command::Run(cmd) => cmd.execute(),
        Command::Report(cmd) => cmd.execute(),
        Command::Diff(cmd) => cmd.execute(),
        Command::Bench(cmd) => cmd.execute(),
        Command::Cache(cmd) => cmd.execute(),
        Command::Instrument(cmd) => cmd.execute(),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("wprof: error: {failure}");
            failure.code
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn verify_cli() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
