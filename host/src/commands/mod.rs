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
#[command(name = "wprof", version, propagate_version = true, after_help = after_help())]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `wprof --help`'s closing sections.
fn after_help() -> String {
    format!(
        "{}\n\
Exit status:
  `wprof run` exits with the program's exit code; wprof's own errors exit with 2.
  `wprof diff --threshold PCT` exits with 1 when a function's cost grew past PCT.
  `wprof cache verify` exits with 1 when it found bad entries.",
        environment_help()
    )
}

/// The environment variables' help, filled from the definitions the code uses: the modes
/// and the default one from [`run::Mode`], the sample period from the sampler, the cache's
/// default cap.
pub(crate) fn environment_help() -> String {
    use clap::ValueEnum;
    let modes: Vec<String> = run::Mode::value_variants()
        .iter()
        .filter_map(|m| m.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect();
    let default_mode = run::Mode::default()
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    crate::environment::help(&[
        ("modes", modes.join("|")),
        ("default_mode", default_mode),
        (
            "period_us",
            crate::run::sampler::DEFAULT_PERIOD.as_micros().to_string(),
        ),
        (
            "default_cap",
            format!("{}G", crate::prepare::instrument::DEFAULT_MAX_SIZE >> 30),
        ),
    ])
}

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
