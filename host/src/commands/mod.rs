//! One module per `wprof` subcommand. Each has a clap `Args` struct that turns into plain
//! settings, and an `execute` that returns the process exit code.

pub mod bench;
pub mod cache;
pub mod diff;
pub mod instrument;
pub mod report;
pub mod run;
