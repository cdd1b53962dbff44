//! The command line: the top-level parser, one module per `wprof` subcommand, and turning
//! errors into one line and an exit code. Each subcommand has a clap `Args` struct that turns
//! into plain settings, and an `execute` that returns the process exit code.
//!
//! This room may use every other room: it is where flags become settings and the rooms
//! below are called in order (prepare → run → profile → report).

pub mod annotate;
pub mod bench;
pub mod cache;
pub mod config;
pub mod ctl;
pub mod diff;
pub mod instrument;
pub mod reference;
pub mod report;
pub mod run;
pub mod serve;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use self::annotate::AnnotateCommand;
use self::bench::BenchCommand;
use self::cache::CacheCommand;
use self::config::ConfigCommand;
use self::ctl::CtlCommand;
use self::diff::DiffCommand;
use self::instrument::InstrumentCommand;
use self::report::ReportCommand;
use self::run::RunCommand;
use crate::exit::USAGE_OR_INPUT;

/// wprof: an exact profiler for WebAssembly programs (WASI modules and components).
///
/// `wprof run app.wasm` runs the program under an embedded wasmtime, then writes its
/// profile: by default its call stacks sampled as perf samples them and each function's
/// calls counted; with `--mode sample|time|cost|adaptive`, probes inserted into every
/// function give exact calls per caller and calling context with sampled, measured or
/// counted time. Instrumented and compiled code is cached, so each function is
/// instrumented once; the original .wasm file is only ever read.
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
  `wprof cache verify` exits with 1 when it found bad entries.
  `wprof ctl` exits with 1 when the run refused (no function with probes matched).
  `wprof bench --accuracy` exits with 3 when perf is missing or may not sample, 4 when a
  program fails.
  Every other command exits with 0, or 2 for wprof's own errors.",
        environment_help()
    )
}

/// The environment variables' help, filled from the definitions the code uses: the modes
/// and the default one from [`run::settings::Mode`], the sample period from the sampler, the cache's
/// default cap.
pub(crate) fn environment_help() -> String {
    use clap::ValueEnum;
    let modes: Vec<String> = run::settings::Mode::value_variants()
        .iter()
        .filter_map(|m| m.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect();
    let default_mode = run::settings::Mode::default()
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    crate::settings::environment::help(&[
        ("modes", modes.join("|")),
        ("default_mode", default_mode),
        (
            "period_us",
            crate::run::inline::sampler::DEFAULT_PERIOD
                .as_micros()
                .to_string(),
        ),
        (
            "default_cap",
            format!("{}G", crate::prepare::session::DEFAULT_MAX_SIZE >> 30),
        ),
        (
            "short_max",
            run::probe_settings::DEFAULT_SHORT_MAX.to_string(),
        ),
    ])
}

#[derive(Debug, Subcommand)]
enum Command {
    Run(RunCommand),
    Report(ReportCommand),
    Annotate(AnnotateCommand),
    Diff(DiffCommand),
    Bench(BenchCommand),
    Cache(CacheCommand),
    Instrument(InstrumentCommand),
    Config(ConfigCommand),
    Ctl(CtlCommand),
}

/// Runs wprof with this process's arguments; returns the exit code.
pub fn main() -> i32 {
    crate::logging::init();
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { USAGE_OR_INPUT } else { 0 };
        }
    };
    // The configuration file, for the commands that read settings from it: a bad one
    // stops them here, before anything runs.
    if matches!(
        cli.command,
        Command::Run(_)
            | Command::Instrument(_)
            | Command::Cache(_)
            | Command::Config(_)
            | Command::Ctl(_)
    ) {
        if let Err(failure) = crate::config::install() {
            crate::say!("wprof: error: {failure}");
            return failure.code;
        }
    }
    if let (Command::Run(cmd), Some(sub)) = (&mut cli.command, matches.subcommand_matches("run")) {
        cmd.settings.given = given(sub);
    }
    if let (Command::Config(cmd), Some(sub)) =
        (&mut cli.command, matches.subcommand_matches("config"))
    {
        cmd.settings.given = given(sub);
    }
    if let (Command::Instrument(cmd), Some(sub)) =
        (&mut cli.command, matches.subcommand_matches("instrument"))
    {
        cmd.given = given(sub);
    }
    let result = match &cli.command {
        Command::Run(cmd) => cmd.execute(),
        Command::Report(cmd) => cmd.execute(),
        Command::Annotate(cmd) => cmd.execute(),
        Command::Diff(cmd) => cmd.execute(),
        Command::Bench(cmd) => cmd.execute(),
        Command::Cache(cmd) => cmd.execute(),
        Command::Instrument(cmd) => cmd.execute(),
        Command::Config(cmd) => cmd.execute(),
        Command::Ctl(cmd) => cmd.execute(),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            crate::say!("wprof: error: {failure}");
            failure.code
        }
    }
}

/// Which of a subcommand's arguments the command line or their variables gave, by id:
/// the rest may come from the configuration file.
fn given(matches: &clap::ArgMatches) -> GivenArgs {
    let mut given = GivenArgs::default();
    for id in matches.ids() {
        let how = match matches.value_source(id.as_str()) {
            Some(clap::parser::ValueSource::CommandLine) => crate::config::Given::Flag,
            Some(clap::parser::ValueSource::EnvVariable) => crate::config::Given::Variable,
            _ => continue,
        };
        given.0.insert(id.to_string(), how);
    }
    given
}

/// How each argument given explicitly was given (see [`given`]); empty when a command is
/// built some other way than from the command line (then every default may be the file's).
#[derive(Debug, Clone, Default)]
pub struct GivenArgs(std::collections::HashMap<String, crate::config::Given>);

impl GivenArgs {
    /// How argument `id` was given, if it was.
    pub fn get(&self, id: &str) -> Option<crate::config::Given> {
        self.0.get(id).copied()
    }

    /// `value` with how it was given, if it was.
    pub fn with<T>(&self, id: &str, value: T) -> Option<(T, crate::config::Given)> {
        self.get(id).map(|how| (value, how))
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
