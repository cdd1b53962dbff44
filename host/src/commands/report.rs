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
    /// The profile; with a coverage format, several profiles of one module, whose counts
    /// add up (a test suite's runs).
    #[arg(value_name = "PROFILE", required = true, num_args = 1..)]
    profiles: Vec<PathBuf>,

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

    /// Directories to look for source files in (the HTML report's source views, lcov's
    /// paths), after the path the line table recorded and the module's directory: in each,
    /// at the longest tail of the recorded path found there. Repeat it, or separate
    /// directories with `:`.
    #[arg(long, value_name = "DIR", value_delimiter = ':')]
    source_path: Vec<PathBuf>,
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
  coverage    (profiles of `wprof run --coverage`) basic blocks and source lines that ran, per
              function and file, least covered first, and the functions never called
  lcov        the same as an lcov tracefile: `genhtml app.info -o coverage-html`

Names: Rust and C++ names are shown demangled (except in json), with the source file:line
of each function when the module has DWARF (see --module); Go modules (GOOS=wasip1) with
Go's own names and files, from the symbol table Go keeps in the module.

Examples:
  wprof report app.wprof
  wprof report app.wprof --top 20 --sort inclusive --filter '^compress'
  wprof report app.wprof --format json -o app.json
  wprof report app.wprof --format flamegraph -o app.svg
  wprof report app.wprof --format pprof -o app.pb.gz
  wprof report --format lcov -o app.info test1.wprof test2.wprof test3.wprof

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
    /// The profile, or (coverage formats) the first of several with every one's coverage
    /// added up.
    fn read_merged(&self) -> Result<Profile, Failure> {
        let mut profile = Profile::read(&self.profiles[0])?;
        if self.profiles.len() == 1 {
            return Ok(profile);
        }
        if !self.format.is_coverage() {
            return Err(Failure::input(format!(
                "several profiles add up in the coverage formats only (--format coverage or \
                 lcov), not in {}",
                self.format.name()
            )));
        }
        let no_coverage = |path: &std::path::Path| {
            Failure::input(format!(
                "{} holds no coverage: make it with `wprof run --coverage`",
                path.display()
            ))
        };
        if profile.coverage.is_none() {
            return Err(no_coverage(&self.profiles[0]));
        }
        for path in &self.profiles[1..] {
            let other = Profile::read(path)?;
            if other.module.blake3 != profile.module.blake3 {
                return Err(Failure::input(format!(
                    "{} is a profile of another module than {} (its blake3 differs)",
                    path.display(),
                    self.profiles[0].display()
                )));
            }
            let (Some(mine), Some(theirs)) = (&mut profile.coverage, &other.coverage) else {
                return Err(no_coverage(path));
            };
            mine.merge(theirs)
                .map_err(|e| Failure::input(format!("cannot add {} up: {e}", path.display())))?;
        }
        Ok(profile)
    }

    /// Renders the report; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let first = &self.profiles[0];
        let mut profile = self.read_merged()?;
        // JSON is the profile itself; every other format shows demangled names and sources.
        let (mut symbols, found) = if self.format == Format::Json {
            Default::default()
        } else {
            let digest = profile.module.blake3.clone();
            let cached = move || crate::commands::cache::module_by_digest(&digest);
            source::symbolize(&mut profile, first, self.module.as_deref(), &cached)?
        };
        // Per-line costs (a cost-mode profile with block counts), for the formats that carry
        // them.
        let carries_lines = matches!(
            self.format,
            Format::Callgrind | Format::Pprof | Format::Html
        );
        // No longer on disk: the cache keeps the original by its digest.
        let found = found.or_else(|| {
            let bytes = carries_lines
                .then(|| crate::commands::cache::module_by_digest(&profile.module.blake3))??;
            Some((source::recorded_path(&profile), bytes))
        });
        if let Some((path, bytes)) = found.as_ref().filter(|_| carries_lines) {
            let dirs = source::source_dirs(path.parent(), &self.source_path);
            symbols.lines = report::annotate::line_costs(&profile, bytes, &dirs)?;
        }
        // Sampled time per line (stack mode): in the profile, the module not needed.
        if carries_lines && symbols.lines.is_empty() {
            let recorded = source::recorded_path(&profile);
            let beside = found
                .as_ref()
                .map_or(recorded.parent(), |(p, _)| p.parent());
            let dirs = source::source_dirs(beside, &self.source_path);
            symbols.lines = report::line_times::line_costs(&profile, &dirs);
        }
        let lines = if self.format.is_coverage() {
            report::coverage::profile_lines(
                &profile,
                first,
                self.module.as_deref(),
                &self.source_path,
            )?
        } else {
            None
        };
        let options = Options {
            top: crate::report::Top::from_flag(self.top),
            filter: self.filter.clone(),
            sort: self.sort,
            symbols,
            lines,
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
