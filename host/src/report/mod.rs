//! Reports: a profile rendered for people (`text`, `html`, `flamegraph`) or for the tools
//! people already use (`json`, `folded`, `pprof`, `callgrind`, `speedscope`, `firefox`).
//! One file per format; what several formats share (names, stacks of the calling-context
//! tree, sorting and filtering) lives here.
//!
//! May use: `profile` only. A report is a function of the profile (and, for source lines,
//! the module's own bytes): nothing here runs, prepares or caches anything.

pub mod allocations;
pub mod annotate;
pub mod callgrind;
pub mod coverage;
pub mod firefox;
pub mod flamegraph;
pub mod folded;
pub mod go_lines;
pub mod host_time;
pub mod hot_paths;
pub mod html;
pub mod json;
pub mod line_times;
pub mod lines;
pub mod pprof;
pub mod source;
pub mod speedscope;
pub mod text;

use std::collections::HashMap;

use crate::profile::{FunctionRecord, Profile};

/// The report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Flat profile, then callers and callees of each function (for people).
    Text,
    /// The profile's stable JSON schema.
    Json,
    /// Folded stacks, `a;b;c value` per line (inferno, flamegraph.pl, speedscope).
    Folded,
    /// A flame graph as an interactive SVG (inferno).
    Flamegraph,
    /// gzip'd protobuf `profile.proto` for `go tool pprof` (binary: use -o FILE).
    Pprof,
    /// Callgrind's format, for `callgrind_annotate` and KCachegrind.
    Callgrind,
    /// speedscope's file format (https://www.speedscope.app).
    Speedscope,
    /// The Firefox Profiler's processed format (https://profiler.firefox.com).
    Firefox,
    /// One self-contained HTML file: sortable table, a page per function, call graph, icicle
    /// (use -o FILE.html).
    Html,
    /// Coverage (`wprof run --coverage`): blocks and source lines that ran, functions never
    /// called.
    Coverage,
    /// Coverage as an lcov tracefile, for `genhtml` (source lines from the module's DWARF).
    Lcov,
}

impl Format {
    /// The format's name on the command line.
    pub fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// Whether the output is binary (not for a terminal).
    pub fn is_binary(self) -> bool {
        matches!(self, Format::Pprof)
    }

    /// Whether the format shows coverage, which several runs' profiles add up to.
    pub fn is_coverage(self) -> bool {
        matches!(self, Format::Coverage | Format::Lcov)
    }
}

/// How the flat profile is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SortKey {
    /// Self time (or cost), largest first.
    #[default]
    #[value(name = "self")]
    SelfTime,
    /// Inclusive time (or cost), largest first.
    Inclusive,
    /// Number of calls, most first.
    Calls,
    /// Function name, A to Z.
    Name,
}

impl SortKey {
    /// What the key sorts by, for headings.
    pub fn describe(self) -> &'static str {
        match self {
            SortKey::SelfTime => "self time",
            SortKey::Inclusive => "inclusive time",
            SortKey::Calls => "calls",
            SortKey::Name => "name",
        }
    }
}

/// How many functions the text report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Top {
    /// What fits a screen: by self time, the fewest functions that make up
    /// [`Top::FIT_SHARE`] of the total, at least [`Top::FIT_MIN`] and at most
    /// [`Top::FIT_MAX`]; in any other order, the first [`Top::FIT_MAX`].
    #[default]
    Fit,
    /// Every function.
    All,
    /// The first N.
    First(usize),
}

impl Top {
    /// The part of the total self time the default report covers.
    pub const FIT_SHARE: f64 = 0.95;
    /// The fewest functions the default report shows (when there are that many).
    pub const FIT_MIN: usize = 10;
    /// The most functions the default report shows.
    pub const FIT_MAX: usize = 30;

    /// `--top N`: 0 for every function; absent for what fits.
    pub fn from_flag(n: Option<usize>) -> Self {
        match n {
            None => Top::Fit,
            Some(0) => Top::All,
            Some(n) => Top::First(n),
        }
    }

    /// How many of `functions` (in `sort` order) to show.
    pub fn count(self, functions: &[&FunctionRecord], sort: SortKey) -> usize {
        match self {
            Top::All => functions.len(),
            Top::First(n) => n.min(functions.len()),
            Top::Fit if sort != SortKey::SelfTime => Self::FIT_MAX.min(functions.len()),
            Top::Fit => {
                let total: u64 = functions.iter().map(|f| f.self_time).sum();
                let goal = (total as f64 * Self::FIT_SHARE).ceil() as u64;
                let mut covered = 0u64;
                let reached = functions
                    .iter()
                    .position(|f| {
                        covered += f.self_time;
                        covered >= goal
                    })
                    .map_or(functions.len(), |at| at + 1);
                reached
                    .clamp(Self::FIT_MIN, Self::FIT_MAX)
                    .min(functions.len())
            }
        }
    }
}

/// What to show, for the formats that select (text, html).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// How many functions the flat profile shows.
    pub top: Top,
    /// Show only the functions whose name matches.
    pub filter: Option<regex::Regex>,
    /// Order of the flat profile.
    pub sort: SortKey,
    /// Source locations and mangled names (see [`source::symbolize`]).
    pub symbols: source::Symbols,
    /// Coverage reports: the source lines of the profile's blocks (see
    /// [`coverage::profile_lines`]).
    pub lines: Option<coverage::LineCoverage>,
}

/// Renders `profile` in `format`. Text formats are UTF-8; `pprof` is binary.
pub fn render(profile: &Profile, format: Format, options: &Options) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        Format::Text => text::render(profile, options).into_bytes(),
        Format::Json => json::render(profile).into_bytes(),
        Format::Folded => folded::render(profile).into_bytes(),
        Format::Flamegraph => flamegraph::render(profile)?,
        Format::Pprof => pprof::render(profile, &options.symbols)?,
        Format::Callgrind => callgrind::render(profile, &options.symbols).into_bytes(),
        Format::Speedscope => speedscope::render(profile, &options.symbols)?.into_bytes(),
        Format::Firefox => firefox::render(profile)?.into_bytes(),
        Format::Html => html::render(profile, &options.symbols)?.into_bytes(),
        Format::Coverage => coverage::text(
            profile,
            profile.coverage.as_ref().ok_or_else(no_coverage)?,
            options,
        )
        .into_bytes(),
        Format::Lcov => {
            profile.coverage.as_ref().ok_or_else(no_coverage)?;
            let lines = options.lines.as_ref().ok_or_else(|| {
                anyhow::anyhow!(
                    "lcov needs source lines, and the module has no DWARF line tables (or was \
                     not found: see --module); `--format coverage` needs none"
                )
            })?;
            coverage::lcov(lines).into_bytes()
        }
    })
}

fn no_coverage() -> anyhow::Error {
    anyhow::anyhow!("the profile holds no coverage: make it with `wprof run --coverage`")
}

/// The functions to show, in `options.sort` order, filtered and cut to `options.top`.
pub fn select<'p>(profile: &'p Profile, options: &Options) -> Vec<&'p FunctionRecord> {
    let mut functions = matching(profile, options);
    functions.truncate(options.top.count(&functions, options.sort));
    functions
}

/// Every function `options.filter` lets through, in `options.sort` order.
pub fn matching<'p>(profile: &'p Profile, options: &Options) -> Vec<&'p FunctionRecord> {
    let mut functions: Vec<&FunctionRecord> = profile
        .functions
        .iter()
        .filter(|f| {
            options
                .filter
                .as_ref()
                .is_none_or(|re| re.is_match(&f.name))
        })
        .collect();
    let by_name =
        |a: &&FunctionRecord, b: &&FunctionRecord| a.name.cmp(&b.name).then(a.id.cmp(&b.id));
    match options.sort {
        SortKey::SelfTime => {
            functions.sort_by(|a, b| b.self_time.cmp(&a.self_time).then(by_name(a, b)))
        }
        SortKey::Inclusive => {
            functions.sort_by(|a, b| b.inclusive.cmp(&a.inclusive).then(by_name(a, b)))
        }
        SortKey::Calls => functions.sort_by(|a, b| b.calls.cmp(&a.calls).then(by_name(a, b))),
        SortKey::Name => functions.sort_by(by_name),
    }
    functions
}

/// Function names by id, as the reports show them.
pub fn names(profile: &Profile) -> HashMap<u32, &str> {
    profile
        .functions
        .iter()
        .map(|f| (f.id, f.name.as_str()))
        .collect()
}

/// One stack of the calling-context tree: a context node with its path from the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// The node's index in `profile.contexts`.
    pub node: u32,
    /// Function ids from the outermost frame to this node's function.
    pub functions: Vec<u32>,
    /// Activations in this context.
    pub calls: u64,
    /// Self time (or cost) in this context.
    pub self_time: u64,
    /// Inclusive time (or cost) in this context.
    pub inclusive: u64,
    /// An import's context: what the host did in its calls.
    pub host: Option<crate::profile::HostFigures>,
    /// An allocator's context: the blocks it handed out.
    pub allocs: Option<crate::profile::AllocFigures>,
    /// A threaded program: the thread the context ran on.
    pub thread: Option<u32>,
}

/// Every context of the profile as a stack, in the profile's order (parents before
/// children). Recursion is collapsed in the contexts, so a function appears at most once
/// per stack.
pub fn stacks(profile: &Profile) -> Vec<Stack> {
    let mut paths: Vec<Vec<u32>> = Vec::with_capacity(profile.contexts.len());
    let mut out = Vec::with_capacity(profile.contexts.len());
    for (i, c) in profile.contexts.iter().enumerate() {
        // Parents come first; a parent that does not (a damaged file) starts a new stack.
        let mut path = match c.parent {
            Some(p) if (p as usize) < i => paths[p as usize].clone(),
            _ => Vec::new(),
        };
        path.push(c.function);
        out.push(Stack {
            node: c.id,
            functions: path.clone(),
            calls: c.calls,
            self_time: c.self_time,
            inclusive: c.inclusive,
            host: c.host,
            allocs: c.allocs,
            thread: c.thread,
        });
        paths.push(path);
    }
    out
}

/// A name safe for formats that split on `;` and lines (folded stacks).
pub fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// `part` as a percentage of `whole`.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::InstrumentationStats;
    use crate::profile::{ContextRecord, EdgeRecord, ModuleRef};

    /// A small profile: `_start` calls `a` twice and `b` once; `a` calls `b`; `b` recurses.
    /// Cost mode, so the numbers are plain counts.
    pub(crate) fn sample_profile() -> Profile {
        let f = |id, name: &str, calls, self_time, inclusive| FunctionRecord {
            id,
            name: name.to_string(),
            kind: "local".to_string(),
            calls,
            self_time,
            inclusive,
            min_self: Some(1),
            max_self: Some(self_time),
        };
        let e = |caller, callee, calls, inclusive| EdgeRecord {
            caller,
            callee,
            site: None,
            calls,
            inclusive,
        };
        let c = |id, parent, function, calls, self_time, inclusive| ContextRecord {
            id,
            parent,
            function,
            calls,
            self_time,
            inclusive,
            host: None,
            allocs: None,
            thread: None,
        };
        Profile {
            format_version: crate::profile::FORMAT_VERSION,
            tool: "wprof test".to_string(),
            module: ModuleRef {
                path: "t.wasm".to_string(),
                blake3: "0".repeat(64),
            },
            mode: "cost".to_string(),
            unit: "instructions".to_string(),
            exit_code: 0,
            outcome: "exit".to_string(),
            trap: None,
            wall_time: None,
            total: 100,
            instrumentation: InstrumentationStats::default(),
            probe_overhead: None,
            functions: vec![
                f(0, "_start", 1, 10, 100),
                f(1, "a", 2, 40, 70),
                f(2, "b;x", 4, 50, 50),
            ],
            edges: vec![
                e(None, 0, 1, 100),
                e(Some(0), 1, 2, 70),
                e(Some(1), 2, 2, 30),
                e(Some(0), 2, 1, 20),
                e(Some(2), 2, 1, 5),
            ],
            contexts: vec![
                c(0, None, 0, 1, 10, 100),
                c(1, Some(0), 1, 2, 40, 70),
                c(2, Some(1), 2, 2, 30, 30),
                c(3, Some(0), 2, 2, 20, 20),
            ],
            sampling: None,
            live: None,
            adaptive: None,
            injections: Vec::new(),
            coverage: None,
            host_calls: Vec::new(),
            allocations: None,
            threads: None,
            excluded_ns: None,
            cpu_wait_ns: None,
            unprobed: Vec::new(),
            untimed: Vec::new(),
            untimed_samples: None,
            ticks: None,
            symbols: None,
            lines: None,
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(1, 0), 0.0);
        assert_eq!(percent(1, 4), 25.0);
    }

    #[test]
    fn stacks_follow_parents() {
        let p = sample_profile();
        let s = stacks(&p);
        assert_eq!(s.len(), 4);
        assert_eq!(s[2].functions, vec![0, 1, 2]);
        assert_eq!(s[3].functions, vec![0, 2]);
    }

    #[test]
    fn select_sorts_filters_and_cuts() {
        let p = sample_profile();
        let ids = |o: &Options| select(&p, o).iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids(&Options::default()), vec![2, 1, 0]);
        let mut o = Options {
            sort: SortKey::Inclusive,
            ..Options::default()
        };
        assert_eq!(ids(&o), vec![0, 1, 2]);
        o.sort = SortKey::Calls;
        assert_eq!(ids(&o), vec![2, 1, 0]);
        o.sort = SortKey::Name;
        assert_eq!(ids(&o), vec![0, 1, 2]);
        o.filter = Some(regex::Regex::new("^[ab]").unwrap());
        o.top = Top::First(1);
        assert_eq!(ids(&o), vec![1]);
    }
}
