//! `wprof annotate`: source lines with their counts, from a profile with block counts, or
//! with the time samples found at them, from a default (stack mode) profile.

use std::path::PathBuf;

use crate::exit::Failure;
use crate::profile::{LinesRecord, Profile};
use crate::report::{annotate, source};

/// Show functions' source lines with the time samples found at each (a default profile), or
/// how often each ran and the wasm instructions it executed (`wprof run --coverage`).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct AnnotateCommand {
    /// The profile: of `wprof run` in stack mode (the default) of a module with DWARF or
    /// Go's line table, or of `wprof run --coverage` (sample, cost or adaptive mode).
    #[arg(value_name = "PROFILE")]
    profile: PathBuf,

    /// The functions to annotate: a name as the reports show it, or a regular expression
    /// matching names [default: the functions that executed the most instructions, see
    /// --top].
    #[arg(value_name = "FUNCTION")]
    function: Option<String>,

    /// Without FUNCTION: how many functions, those with the most time at their lines (or
    /// that executed the most instructions).
    #[arg(long, value_name = "N", default_value_t = 5)]
    top: usize,

    /// The profiled module, for its DWARF (block counts only: a default profile holds its
    /// lines). By default wprof looks at the path recorded in the profile, then beside the
    /// profile, then in the cache by the module's digest; a module whose blake3 differs
    /// from the profile's is not used.
    #[arg(long, value_name = "MODULE.wasm")]
    module: Option<PathBuf>,

    /// Directories to look for source files in, after the path the line table recorded and
    /// the module's directory: in each, at the longest tail of the recorded path found
    /// there (for sources built elsewhere, and Go's standard library: `--source-path
    /// "$(go env GOROOT)/src"`). Repeat it, or separate directories with `:`.
    #[arg(long, value_name = "DIR", value_delimiter = ':')]
    source_path: Vec<PathBuf>,
}

const AFTER_HELP: &str = "\
A default profile (stack mode) holds the CPU time samples found at each source line, as the
module's DWARF line table places the sampled instructions (an inlined function's are its own
lines; a call of an import has the import's time at the line of the call): each function is
shown by its sampled lines, a few lines of source around each, with their time and share of
the function's, as `perf annotate` shows them. In a Go module the lines come from Go's own
table, which places code only between two calls (docs/go.md says how its time is shared).

With block counts (`wprof run --coverage`), each line of a function's source file shows how
many times it ran (the count of the most frequent basic block holding code of it, as lcov
counts a line) and how many wasm instructions of it ran. The counts are exact: the module
counted every block.

The source is read from the path the line table gives, else beside the module or under a
--source-path directory, at the longest tail of that path found there; without it, the
lines are shown by number; without DWARF, a coverage profile shows
each basic block with its instructions.

Examples:
  wprof run app.wasm && wprof annotate app.wprof
  wprof run --coverage app.wasm && wprof annotate app.wprof
  wprof annotate app.wprof compress_block
  wprof annotate app.wprof '^lz_' --module build/app.wasm
  wprof annotate app.wprof main.parse --source-path ~/src/app:\"$(go env GOROOT)/src\"

Exit status:
  0 on success; 2 if the profile cannot be read, holds neither sampled lines nor block
  counts, or no function matches";

impl AnnotateCommand {
    /// Prints the annotation; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let mut profile = Profile::read(&self.profile)?;
        if profile.coverage.is_none() {
            if let Some(lines) = profile.lines.take() {
                return self.sampled(&profile, &lines);
            }
            return Err(Failure::input(format!(
                "{} holds no block counts nor sampled lines: make it with `wprof run` (stack \
                 mode, a module with DWARF or Go's line table) or `wprof run --coverage` \
                 (sample, cost or adaptive mode)",
                self.profile.display()
            )));
        }
        let found = source::profiled_module(&profile, &self.profile, self.module.as_deref())
            .map_err(Failure::input)?;
        // No longer on disk: the cache keeps the original by its digest.
        let found = found.or_else(|| {
            let bytes = crate::commands::cache::module_by_digest(&profile.module.blake3)?;
            Some((source::recorded_path(&profile), bytes))
        });
        let Some((path, bytes)) = found else {
            return Err(Failure::input(format!(
                "the module of {} is not found, nor in the cache (its blake3 {}): give it with \
                 --module",
                self.profile.display(),
                &profile.module.blake3[..16.min(profile.module.blake3.len())]
            )));
        };
        // The names the reports show.
        source::rename(&mut profile.functions, &bytes);
        let dwarf = source::module_dwarf(&bytes).map_err(|e| {
            Failure::input(format!("cannot read the DWARF of {}: {e}", path.display()))
        })?;
        let coverage = profile.coverage.as_ref().expect("checked above");
        let shown = |id: u32, raw: &str| {
            profile
                .function(id)
                .map_or_else(|| raw.to_string(), |f| f.name.clone())
        };
        let mut annotated = Vec::new();
        for f in &coverage.functions {
            let lines = annotate::function_lines(&bytes, f, dwarf.as_ref()).map_err(|e| {
                Failure::input(format!("cannot read {} in {}: {e}", f.name, path.display()))
            })?;
            annotated.push((shown(f.id, &f.name), f.entries(), lines));
        }
        let names: Vec<&str> = annotated.iter().map(|a| a.0.as_str()).collect();
        let weights: Vec<u64> = annotated.iter().map(|a| a.2.instructions).collect();
        let chosen = self.choose(&names, &weights, "")?;
        let total: u64 = annotated.iter().map(|a| a.2.instructions).sum();
        let mut out = format!(
            "wprof annotate: {} ({} wasm instructions ran in the functions with block counts)\n",
            profile.module.path, total
        );
        for i in chosen {
            let (name, calls, lines) = &annotated[i];
            out.push('\n');
            out.push_str(&annotate::render(
                name,
                *calls,
                lines,
                &source::source_dirs(path.parent(), &self.source_path),
            ));
        }
        write_out(&out)
    }

    /// The functions to annotate, as indices into `names`: FUNCTION as a name, else as a
    /// regex; without it, the `--top` heaviest by `weights` (none of weight 0). An error
    /// when none is chosen (`which` says among what).
    fn choose(&self, names: &[&str], weights: &[u64], which: &str) -> Result<Vec<usize>, Failure> {
        let chosen: Vec<usize> = match &self.function {
            Some(wanted) => {
                let exact: Vec<usize> = (0..names.len()).filter(|&i| names[i] == wanted).collect();
                if !exact.is_empty() {
                    exact
                } else {
                    let re = regex::Regex::new(wanted).map_err(|e| {
                        Failure::input(format!("`{wanted}` is no function and no regex: {e}"))
                    })?;
                    (0..names.len())
                        .filter(|&i| re.is_match(names[i]))
                        .collect()
                }
            }
            None => {
                let mut order: Vec<usize> = (0..names.len()).filter(|&i| weights[i] > 0).collect();
                order.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
                order.truncate(self.top.max(1));
                order
            }
        };
        if chosen.is_empty() {
            return Err(Failure::input(format!(
                "no function of {}{which} matches `{}`",
                self.profile.display(),
                self.function.as_deref().unwrap_or_default()
            )));
        }
        Ok(chosen)
    }

    /// Annotates a profile with sampled time per line (stack mode): the lines are in the
    /// profile, the source text read where DWARF says, else beside the module.
    fn sampled(&self, profile: &Profile, lines: &LinesRecord) -> Result<i32, Failure> {
        use crate::report::line_times;
        let mut by_function = line_times::by_function(lines);
        // The names the reports show (Go's, demangled).
        let shown = source::shown_names(profile);
        // The profile's functions that have sampled lines, with them.
        let functions: Vec<(&str, (_, u64))> = profile
            .functions
            .iter()
            .filter_map(|f| {
                let name = shown.get(&f.id).map_or(f.name.as_str(), String::as_str);
                Some((name, by_function.remove(&f.id)?))
            })
            .collect();
        let names: Vec<&str> = functions.iter().map(|f| f.0).collect();
        let weights: Vec<u64> = functions.iter().map(|f| f.1 .1).collect();
        let chosen = self.choose(&names, &weights, " with sampled lines")?;
        let module_dir = source::recorded_path(profile);
        let dirs = source::source_dirs(module_dir.parent(), &self.source_path);
        let mut out = format!(
            "wprof annotate: {} (sampled time per line; {} at instructions of no line, {} in \
             code the compiler added around them)\n",
            profile.module.path,
            crate::display::format_ns(lines.unlined_ns),
            crate::display::format_ns(lines.unmapped_ns)
        );
        if lines.dispatch_ns > 0 {
            out.push_str(&format!(
                "Go: {} of the lines' time was sampled where a function dispatches its jumps \
                 between blocks, and is shared among the lines jumped to, in proportion to \
                 their own\n",
                crate::display::format_ns(lines.dispatch_ns)
            ));
        }
        for (name, (by_line, ns)) in chosen.into_iter().map(|i| &functions[i]) {
            out.push('\n');
            out.push_str(&line_times::render(
                name,
                by_line,
                *ns,
                profile.total,
                &dirs,
            ));
        }
        write_out(&out)
    }
}

/// Prints `out`; a closed pipe (`wprof annotate x | head`) is not an error.
fn write_out(out: &str) -> Result<i32, Failure> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::input(format!(
            "failed to write the annotation: {e}"
        ))),
        _ => Ok(0),
    }
}
