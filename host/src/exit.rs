//! wprof's own exit codes. A program run under wprof exits with its own code; these are for
//! wprof's errors, before or instead of running anything.

use std::fmt;

/// wprof could not do what was asked: a bad flag, an unreadable or invalid input file, a
/// module it cannot run. Same code as clap's usage errors.
pub const USAGE_OR_INPUT: i32 = 2;

/// A tool a command needs is missing or not permitted (`perf` for `wprof bench --accuracy`).
pub const MISSING_TOOL: i32 = 3;

/// A benchmark program failed (exited non-zero or trapped) where it must succeed.
pub const PROGRAM_FAILED: i32 = 4;

/// A program that trapped exits with this code, as under `wasmtime run` on Unix
/// (128 + SIGABRT).
pub const TRAP: i32 = 134;

/// An error that ends wprof with a given exit code, printed as one line.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code.
    pub code: i32,
    /// The one-line message (without the `error:` prefix).
    pub message: String,
}

impl Failure {
    /// An input or usage error: exit code [`USAGE_OR_INPUT`].
    pub fn input(message: impl Into<String>) -> Self {
        Self {
            code: USAGE_OR_INPUT,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        // One line: the outermost context, then each cause.
        let message = e
            .chain()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(": ");
        Failure::input(message)
    }
}
