//! `wprof report`: render a profile for people or tools, in the format asked for.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;

use crate::exit::Failure;
use crate::profile::Profile;
use crate::report::{self, source, Format, Options, SortKey};

/// Show a profile written by `wprof run`, as text or in a format other tools read.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
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

    /// Show the N first functions of the flat profile, in `--sort` order; 0 for all of
    /// them (text) [default: what fits a screen: the fewest functions that make up 95% of the
    /// self time, 10 to 30 of them, and the five largest callers and callees of each]
    #[arg(long, value_name = "N")]
    top: Option<usize>,

    /// Show only the functions whose name matches this regular expression (text), e.g.
    /// `^wasi_` or `compress|crc`.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    filter: Option<regex::Regex>,

    /// Order of the flat profile (text).
    #[arg(long, value_enum, default_value_t = SortKey::SelfTime)]
    sort: SortKey,

    /// The profiled module, for source file:line from its DWARF. By default wprof looks at
    /// the path recorded in the profile, then beside the profile; a module whose blake3
    /// differs from the profile's is not used.
    #[arg(long, value_name = "MODULE.wasm")]
    module: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Formats:
  text        flat profile, then callers and callees of each function (default)
  json        the profile's stable JSON schema
  folded      `a;b;c value` per stack of the calling-context tree, value = self time or cost;
              recursion is collapsed (a function appears once per stack)
  flamegraph  an interactive SVG flame graph (inferno)
  pprof       gzip'd profile.proto: `go tool pprof -top app.pb.gz`, `go tool pprof -http=: app.pb.gz`
  callgrind   `callgrind_annotate --inclusive=yes callgrind.out.app`, or open it in KCachegrind
  speedscope  open in https://www.speedscope.app (or `speedscope app.speedscope.json`)
  firefox     load in https://profiler.firefox.com
  html        one self-contained page (table, function pages, call graph, icicle) for a browser

Names: Rust and C++ names are shown demangled (except in json), with the source file:line
of each function when the module has DWARF (see --module).

Examples:
  wprof report app.wprof
  wprof report app.wprof --top 20 --sort inclusive --filter '^compress'
  wprof report app.wprof --format json -o app.json
  wprof report app.wprof --format flamegraph -o app.svg
  wprof report app.wprof --format pprof -o app.pb.gz

Exit status:
  0 on success; 2 if the profile cannot be read or the output cannot be written";

fn parse_regex(s: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(s).map_err(|e| {
        e.to_string()
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string()
    })
}

impl ReportCommand {
    /// Renders the report; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let mut profile = Profile::read(&self.profile)?;
        // JSON is the profile itself; every other format shows demangled names and sources.
        let symbols = if self.format == Format::Json {
            Default::default()
        } else {
            source::symbolize(&mut profile, &self.profile, self.module.as_deref())?
        };
        let options = Options {
            top: crate::report::Top::from_flag(self.top),
            filter: self.filter.clone(),
            sort: self.sort,
            symbols,
        };
        let rendered = report::render(&profile, self.format, &options)?;
        match &self.output {
            Some(path) => std::fs::write(path, rendered)
                .with_context(|| format!("failed to write {}", path.display()))?,
            None => {
                let mut stdout = std::io::stdout().lock();
                if self.format.is_binary() && stdout.is_terminal() {
                    return Err(Failure::input(format!(
                        "the {} format is binary: write it to a file with -o FILE",
                        self.format.name()
                    )));
                }
                // A closed pipe (`wprof report x | head`) is not an error.
                if let Err(e) = stdout.write_all(&rendered).and_then(|_| stdout.flush()) {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(Failure::input(format!("failed to write the report: {e}")));
                    }
                }
            }
        }
        Ok(0)
    }
}
