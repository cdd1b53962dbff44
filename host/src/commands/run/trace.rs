//! `wprof run --trace`: its flags, and the trace file written when the run ends (see
//! [`crate::profile::trace`] for what a trace holds, [`crate::run::collector::Tracer`] for
//! how time mode records it).

use std::path::{Path, PathBuf};

use crate::settings::Mode;

use crate::commands::run::settings::RunConfig;
use crate::commands::GivenArgs;
use crate::config::Given;
use crate::exit::Failure;
use crate::profile::trace::{CallTrace, TraceHeader};
use crate::profile::Profile;
use crate::settings::{FunctionPattern, TraceSettings};

/// The calls a trace keeps by default.
pub const DEFAULT_BUFFER: u64 = 1_000_000;

/// The most calls a trace may keep (24 bytes each while the program runs).
const MAX_BUFFER: u64 = 100_000_000;

/// The flags of `wprof run --trace`.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Record a trace of the calls: each call's start and end, written when the program ends
    /// as Chrome's trace-event JSON (open it in Perfetto, ui.perfetto.dev, in Chrome's
    /// DevTools Performance panel, chrome://tracing or speedscope). Needs time mode's clock
    /// at every call: without --mode, the run is in time mode; with another mode it is
    /// refused. Times have the probes' cost taken out, as the profile's. The trace keeps the
    /// latest calls to end (see --trace-buffer); functions counted, not timed (see
    /// --short-max) are not in it.
    #[arg(long, env = "WPROF_TRACE", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub trace: bool,

    /// Where to write the trace [default: the profile's path with `.trace.json` in place of
    /// `.wprof`]; a name ending in `.gz` is compressed with gzip (Perfetto, DevTools and
    /// chrome://tracing open it as it is).
    #[arg(long, value_name = "FILE", env = "WPROF_TRACE_OUT")]
    pub trace_out: Option<PathBuf>,

    /// The most calls the trace keeps (per thread): when more end, the oldest go, and the
    /// summary and the file say how many (24 bytes a call while the program runs; in the
    /// file about 70 bytes and the function's name).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BUFFER, env = "WPROF_TRACE_BUFFER", value_parser = clap::value_parser!(u64).range(1..=MAX_BUFFER))]
    pub trace_buffer: u64,

    /// Keep only the calls at most N frames deep (1: the calls the engine made, `_start`).
    #[arg(long, value_name = "N", env = "WPROF_TRACE_DEPTH", value_parser = clap::value_parser!(u64).range(1..=u64::from(u32::MAX)))]
    pub trace_depth: Option<u64>,

    /// Keep only the calls of functions matching PATTERN (repeatable; the patterns of
    /// --only: a glob, `/REGEX/`, `#N-M`); the others still run and are profiled.
    #[arg(long, value_name = "PATTERN")]
    pub trace_only: Vec<String>,
}

impl TraceArgs {
    /// The trace's settings (`None` without --trace) and the mode the run takes: time mode
    /// when no mode was given, refused when another was.
    pub fn resolve(
        &self,
        config: &RunConfig,
        given: &GivenArgs,
    ) -> Result<(Option<TraceSettings>, Mode), Failure> {
        let mode = config.mode();
        if !self.trace {
            // On the command line without --trace: a mistake. From their variables: set for
            // the runs that trace.
            let flag = |id: &str| given.get(id) == Some(Given::Flag);
            let stray = [
                ("--trace-depth", flag("trace_depth")),
                ("--trace-only", !self.trace_only.is_empty()),
                ("--trace-out", flag("trace_out")),
                ("--trace-buffer", flag("trace_buffer")),
            ];
            if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
                return Err(Failure::input(format!("{flag} applies with --trace")));
            }
            return Ok((None, mode));
        }
        let mode = match mode {
            Mode::Time => mode,
            _ if config.mode.source == crate::config::Source::Default.to_string() => Mode::Time,
            _ => {
                return Err(Failure::input(format!(
                    "--trace records every call with time mode's clock; it does not combine with {} mode ({})",
                    mode.name(),
                    config.mode.source
                )))
            }
        };
        let only = self
            .trace_only
            .iter()
            .map(|p| {
                FunctionPattern::parse(p).map_err(|e| Failure::input(format!("--trace-only: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let path = self
            .trace_out
            .clone()
            .unwrap_or_else(|| trace_path_beside(&config.output.value));
        Ok((
            Some(TraceSettings {
                path,
                buffer: usize::try_from(self.trace_buffer).unwrap_or(usize::MAX),
                max_depth: self
                    .trace_depth
                    .map_or(u32::MAX, |d| u32::try_from(d).unwrap_or(u32::MAX)),
                only,
            }),
            mode,
        ))
    }
}

/// `app.wprof` -> `app.trace.json`, in the same directory.
pub fn trace_path_beside(profile: &Path) -> PathBuf {
    let stem = profile
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "wprof".to_string());
    profile.with_file_name(format!("{stem}.trace.json"))
}

/// Per function id, whether `--trace-only` keeps its calls (`None`: every function's).
/// Names are matched as the module gives them, demangled, and as Go's table gives them
/// (read from `module` only when there are patterns to match).
pub fn selected(
    settings: &TraceSettings,
    functions: &[crate::profile::FunctionInfo],
    module: &[u8],
) -> Option<Vec<bool>> {
    if settings.only.is_empty() {
        return None;
    }
    let names: Vec<String> = functions.iter().map(|f| f.name.clone()).collect();
    let shown = crate::go_symbols::shown_names(module, &names);
    Some(select(settings, &names, &shown))
}

/// [`selected`] given the module's names and the names shown where they differ.
fn select(settings: &TraceSettings, names: &[String], shown: &[Option<String>]) -> Vec<bool> {
    names
        .iter()
        .enumerate()
        .map(|(id, name)| {
            let other = shown
                .get(id)
                .cloned()
                .flatten()
                .or_else(|| crate::demangle::demangle(name));
            settings
                .only
                .iter()
                .any(|p| p.matches(id as u32, name, other.as_deref()))
        })
        .collect()
}

/// Writes the run's trace beside its profile (aside, then renamed: an earlier trace is
/// never half overwritten); returns the summary's line.
pub fn write(
    trace: &CallTrace,
    settings: &TraceSettings,
    profile: &Profile,
    module: &[u8],
) -> Result<String, String> {
    let mut functions = profile.functions.clone();
    crate::report::source::rename(&mut functions, module);
    let names: std::collections::HashMap<u32, (&str, bool)> = functions
        .iter()
        .map(|f| (f.id, (f.name.as_str(), f.kind == "import")))
        .collect();
    let untimed = profile.untimed.len();
    let process = Path::new(&profile.module.path).file_name().map_or_else(
        || profile.module.path.clone(),
        |n| n.to_string_lossy().into_owned(),
    );
    let header = TraceHeader {
        process: &process,
        pid: std::process::id(),
        facts: vec![
            ("producer", format!("wprof {}", env!("CARGO_PKG_VERSION"))),
            ("module", profile.module.path.clone()),
            ("blake3", profile.module.blake3.clone()),
            ("calls kept", trace.len().to_string()),
            ("calls dropped", trace.dropped().to_string()),
            ("buffer", trace.capacity().to_string()),
            (
                "times",
                "the probes' calibrated cost taken out, as in the profile".to_string(),
            ),
            (
                "functions counted, not timed (not traced)",
                untimed.to_string(),
            ),
        ],
    };
    // A Go module's goroutines (each its `g`) are tracks of their own.
    let go = crate::go_symbols::is_go(module);
    let track = |g: u32| match g {
        _ if !go => "main".to_string(),
        g => format!("goroutine g={g:#x}"),
    };
    // Straight to the file (through a buffer): a million calls are ~100 MB of JSON, which
    // a name ending in `.gz` compresses (Perfetto and DevTools open it as it is).
    let gzip = settings
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    crate::profile::write_with(&settings.path, |out| {
        let name_of = |id| names.get(&id).copied().unwrap_or(("?", false));
        if gzip {
            let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            crate::profile::trace::write_chrome_json(&mut gz, &header, trace, track, name_of)?;
            gz.finish().map(drop)
        } else {
            crate::profile::trace::write_chrome_json(out, &header, trace, track, name_of)
        }
    })
    .map_err(|e| format!("{e:#}"))?;
    let mut line = format!(
        "wprof: trace: {} calls written to {} (open it in Perfetto or chrome://tracing)",
        trace.len(),
        settings.path.display()
    );
    if trace.dropped() > 0 {
        line.push_str(&format!(
            "; {} earlier calls dropped: it keeps the last {} (--trace-buffer)",
            trace.dropped(),
            trace.capacity()
        ));
    }
    if untimed > 0 {
        line.push_str(&format!(
            "; {untimed} short functions are counted, not timed, and not in it (--short-max 0 times them)"
        ));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_goes_beside_the_profile() {
        assert_eq!(
            trace_path_beside(Path::new("out/app.wprof")),
            PathBuf::from("out/app.trace.json")
        );
        assert_eq!(
            trace_path_beside(Path::new("app")),
            PathBuf::from("app.trace.json")
        );
    }

    #[test]
    fn only_selects_by_module_and_demangled_names() {
        let settings = TraceSettings {
            path: PathBuf::new(),
            buffer: 1,
            max_depth: u32::MAX,
            only: vec![FunctionPattern::parse("fib*").unwrap()],
        };
        let names = [
            "_start".to_string(),
            "fib".to_string(),
            "_ZN3fib2goE".to_string(),
        ];
        assert_eq!(
            Some(select(&settings, &names, &[None, None, None])),
            Some(vec![false, true, true])
        );
    }
}
