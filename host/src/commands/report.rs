//! `wprof report`: render a profile for people or tools.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::exit::Failure;
use crate::profile::Profile;
use crate::report::{self, Format, TextOptions};

/// Show a profile written by `wprof run`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  wprof report app.wprof\n  wprof report app.wprof --top 20\n  wprof report app.wprof --format json -o app.json\n\nExit status:\n  0 on success; 2 if the profile cannot be read or the output cannot be written"
)]
pub struct ReportCommand {
    /// The profile.
    #[arg(value_name = "PROFILE")]
    profile: PathBuf,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// Write to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,

    /// Show only the N most expensive functions (text).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
}

impl ReportCommand {
    /// Renders the report; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let profile = Profile::read(&self.profile)?;
        let rendered = report::render(&profile, self.format, &TextOptions { top: self.top });
        match &self.output {
            Some(path) => std::fs::write(path, rendered)
                .with_context(|| format!("failed to write {}", path.display()))?,
            None => {
                let mut stdout = std::io::stdout().lock();
                // A closed pipe (`wprof report x | head`) is not an error.
                if let Err(e) = stdout
                    .write_all(rendered.as_bytes())
                    .and_then(|_| stdout.flush())
                {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(Failure::input(format!("failed to write the report: {e}")));
                    }
                }
            }
        }
        Ok(0)
    }
}
