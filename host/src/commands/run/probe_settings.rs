//! The probe plan a run asks for (mode, call sites, coverage, allocations, live probes,
//! the functions chosen, time mode's short functions), from flags, `WPROF_*` variables,
//! the configuration file and defaults, each with where it came from: `wprof run` profiles
//! with it, `wprof instrument` prepares the cache for it. The run's other settings are
//! [`super::settings`]'s.

use wprof_agent::{ProbeMode, ProbePlan};

use crate::commands::GivenArgs;
use crate::config::{self, Source};
use crate::exit::Failure;
use crate::settings::{self, Mode};

/// The probe plan on the command line: `wprof run` profiles with it, `wprof instrument`
/// prepares the cache for runs with it.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// How time is measured. `stack` (the default): the module runs with a counter per
    /// caller -> callee edge and no other probe, and its call stacks are sampled every
    /// 200 µs (sparser after the first second) through the frame pointers, as `perf record
    /// --call-graph fp` samples them: within perf's own noise on most real programs at the
    /// least cost (1.2-1.5x the uninstrumented run, most of it the interrupts), each
    /// function's and each edge's calls counted exactly, but not each calling context's (a
    /// core module on Linux, x86-64 or AArch64). What needs probes (--coverage, --live, --allocs, --call-sites,
    /// --only/--exclude, --serve, --inject into the module's own functions, components)
    /// brings sample mode when no mode was chosen. The other modes count every call, edge
    /// and context exactly and keep the whole calling-context tree: `sample`: time sampled from the running thread's
    /// program counter and the context the module keeps (1.1-1.7x). `time`: a clock read
    /// at every entry and exit, the probes' cost subtracted: min/max self time per
    /// activation, at 2.7-12x on real programs (30x on a call storm); functions of a few
    /// straight-line instructions are counted, not timed (see --short-max). `cost`:
    /// executed wasm instructions (deterministic: the same program and input give the same
    /// profile on every run and machine). `adaptive`: sample mode, and while the program
    /// runs, timers walk up from the hottest contexts, a few functions at a time:
    /// nanoseconds per activation along the hot paths at sample mode's cost and up to a
    /// fifth more (`wprof report` shows the paths). Cost mode: 1.0-1.6x.
    #[arg(long, value_enum, default_value_t = Mode::default(), env = "WPROF_MODE")]
    pub mode: Mode,

    /// Split caller -> callee edges by call site (the call's offset in the caller, shown
    /// as `caller+0x1c`). In time mode this adds a probe before every call; the inline
    /// modes (sample, cost) know call sites anyway.
    #[arg(long, env = "WPROF_CALL_SITES", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub call_sites: bool,

    /// Count how often every basic block runs, for coverage: `wprof report --format lcov`
    /// (with the module's DWARF) or `--format coverage`, several runs' profiles merged.
    /// In the inline modes (sample, which it brings when no mode is chosen; cost; adaptive); each block that control
    /// can jump to adds one to a counter of its own (Lua: 1.86x instead of sample mode's
    /// 1.46x).
    #[arg(long, env = "WPROF_COVERAGE", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub coverage: bool,

    /// Profile allocations: every block the module's allocator hands out or takes back,
    /// with its size, in the calling context that asked for it: bytes and objects
    /// allocated, and still live at exit, per context (pprof `alloc_space`,
    /// `alloc_objects`, `inuse_space`, `inuse_objects`; the text and HTML reports). The
    /// allocator is found by name (C's `malloc` family, else C++'s `operator new` and
    /// `delete`, Rust's `__rust_alloc` family), or named by the configuration file's
    /// `allocators = ["malloc=my_alloc", "free=my_free"]`. In every probed mode: with no mode
    /// chosen it brings sample mode, and stack mode chosen refuses it (it has no probes).
    #[arg(long, env = "WPROF_ALLOCS", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allocs: bool,

    /// Probe only the functions matching PATTERN (repeatable): a glob on the name
    /// (`sqlite3_*`; mangled names match demangled too, Go's by Go's own names), `/REGEX/`, or `#N`/`#N-M` ids.
    /// The others are part of their nearest probed caller: their time is its self time,
    /// calls to them are not counted (cost mode: their instructions are not counted).
    #[arg(long, value_name = "PATTERN")]
    pub only: Vec<String>,

    /// Leave the functions matching PATTERN without probes (repeatable; same patterns as
    /// --only, applied after it).
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,

    /// Put each function's probes behind a switch that can be turned while the program
    /// runs: by `wprof ctl PID on|off PATTERN`, or by editing the configuration file's
    /// `off` list. A function whose switch is off is part of its caller, as with
    /// --exclude, and costs a load and a branch per call. The profile says when each
    /// function was on.
    #[arg(long, env = "WPROF_LIVE", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub live: bool,

    /// Start with the switches of the functions matching PATTERN off (repeatable; same
    /// patterns as --only; implies --live; `*` for all).
    #[arg(long, value_name = "PATTERN")]
    pub off: Vec<String>,

    /// Time mode: a function whose body is straight-line work of at most N instructions
    /// (no loop, no call, no exception handling, no bulk memory operation) is counted but
    /// not timed: two clock reads would cost more than its body. Its calls stay exact; its
    /// time comes out of its caller's exact self time, shared by where the program's
    /// thread was found at ticks of its own timer every 500 µs (caller or callee), and the
    /// report lists it. 0 times every function (and takes no ticks).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHORT_MAX, env = "WPROF_SHORT_MAX", value_parser = clap::value_parser!(u64).range(config::file::SHORT_MAX.start as u64..config::file::SHORT_MAX.end as u64))]
    pub short_max: u64,
}

/// Time mode's default bound on short functions (see [`ProbeArgs::short_max`]).
pub const DEFAULT_SHORT_MAX: u64 = 40;

/// The probe plan of a run, each part with where it came from (see [`ProbeArgs::resolve`]).
#[derive(Debug, Clone)]
pub struct ResolvedProbes {
    /// What the probes measure (or stack mode: no probes).
    pub mode: (Mode, Source),
    /// Call-site edges.
    pub call_sites: (bool, Source),
    /// Basic blocks counted.
    pub coverage: (bool, Source),
    /// Allocation profiling.
    pub allocs: (bool, Source),
    /// Which functions are the allocator.
    pub allocators: (crate::settings::allocators::AllocatorRules, Source),
    /// Which functions get probes.
    pub filter: (settings::FunctionFilter, Source),
    /// The probes sit behind switches.
    pub live: (bool, Source),
    /// Which switches start off.
    pub off: (Vec<settings::FunctionPattern>, Source),
    /// Time mode's bound on short functions.
    pub short_max: (u64, Source),
}

impl ResolvedProbes {
    /// The plan for the agent: its selection names the filter (the set is chosen when the
    /// module's names are known).
    pub fn plan(&self) -> ProbePlan {
        ProbePlan {
            mode: self.mode.0.into(),
            call_sites: self.call_sites.0,
            selection: self.filter.0.selection().map(std::sync::Arc::new),
            live: self.live.0,
            short_max: u32::try_from(self.short_max.0).unwrap_or(u32::MAX),
            coverage: self.coverage.0,
            allocators: self
                .allocs
                .0
                .then(|| std::sync::Arc::new(self.allocators.0.plan())),
            // A run's own: they name the module's functions (see `prepare::injections`).
            injections: None,
            capture: None,
        }
    }
}

impl ProbeArgs {
    /// The probe plan: each part from its flag (or `WPROF_*` variable, as `given` says),
    /// else the configuration file's `section` for the module (else its top level), else
    /// the default. Which functions get probes: `--only`/`--exclude`, else `WPROF_FILTER`,
    /// else the file's `include`/`exclude`, else all.
    pub fn resolve(
        &self,
        given: &GivenArgs,
        file: Option<&config::ConfigFile>,
        section: Option<&config::ModuleSection>,
    ) -> Result<ResolvedProbes, Failure> {
        let mut mode = config::resolve(
            given.with("mode", self.mode),
            "WPROF_MODE",
            file.and_then(|f| f.knob(section, |k| k.mode.as_ref())),
            self.mode,
        );
        let call_sites = config::resolve(
            given.with("call_sites", self.call_sites),
            "WPROF_CALL_SITES",
            file.and_then(|f| f.knob(section, |k| k.call_sites.as_ref())),
            self.call_sites,
        );
        let coverage = config::resolve(
            given.with("coverage", self.coverage),
            "WPROF_COVERAGE",
            file.and_then(|f| f.knob(section, |k| k.coverage.as_ref())),
            self.coverage,
        );
        let allocs = config::resolve(
            given.with("allocs", self.allocs),
            "WPROF_ALLOCS",
            file.and_then(|f| f.knob(section, |k| k.allocs.as_ref())),
            self.allocs,
        );
        let allocators = file
            .and_then(|f| f.knob(section, |k| k.allocators.as_ref()))
            .map(|(specs, source)| {
                (
                    crate::settings::allocators::AllocatorRules::Named(specs),
                    source,
                )
            })
            .unwrap_or((
                crate::settings::allocators::AllocatorRules::Known,
                Source::Default,
            ));
        let off = if !self.off.is_empty() {
            let patterns = self
                .off
                .iter()
                .map(|p| {
                    settings::FunctionPattern::parse(p)
                        .map_err(|e| Failure::input(format!("--off: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            (patterns, Source::Flag)
        } else {
            file.and_then(|f| f.knob(section, |k| k.off.as_ref()))
                .unwrap_or_else(|| (Vec::new(), Source::Default))
        };
        let mut live = config::resolve(
            given.with("live", self.live),
            "WPROF_LIVE",
            file.and_then(|f| f.knob(section, |k| k.live.as_ref())),
            self.live,
        );
        if !live.0 && !off.0.is_empty() {
            // Switches that start off need switches.
            live = (true, off.1.clone());
        }
        let filter = self.filter(file, section)?;
        if mode.0.walks_stacks() {
            // Each of these needs probes, and stack mode has none.
            let filtered = !filter.0.only.is_empty() || !filter.0.exclude.is_empty();
            let wanting = [
                ("a function filter", filtered, &filter.1),
                ("coverage", coverage.0, &coverage.1),
                ("live switches", live.0, &live.1),
                ("allocation profiling", allocs.0, &allocs.1),
                ("call sites", call_sites.0, &call_sites.1),
            ];
            if let Some((what, _, source)) = wanting.iter().find(|w| w.1) {
                if mode.1 != Source::Default {
                    return Err(Failure::input(format!(
                        "stack mode ({}) runs the module without probes but its entry counters, which {what} ({source}) needs; \
                         use sample mode",
                        mode.1
                    )));
                }
                // No mode was chosen: the default gives way to the probed mode closest to it.
                tracing::debug!("{what} needs probes: sample mode instead of stack mode");
                mode.0 = Mode::Sample;
            }
        }
        if coverage.0 && (mode.0.walks_stacks() || !ProbeMode::from(mode.0).counts_inline()) {
            return Err(Failure::input(format!(
                "coverage ({}) counts blocks in the inline modes (sample, cost, adaptive), not in {} mode ({})",
                coverage.1,
                mode.0.name(),
                mode.1
            )));
        }
        if live.0 && mode.0 == Mode::Adaptive {
            return Err(Failure::input(format!(
                "adaptive mode ({}) does not combine with live switches ({}) yet",
                mode.1, live.1
            )));
        }
        let short_max = config::resolve(
            given.with("short_max", self.short_max),
            "WPROF_SHORT_MAX",
            file.and_then(|f| f.knob(section, |k| k.short_max.as_ref())),
            self.short_max,
        );
        Ok(ResolvedProbes {
            mode,
            call_sites,
            coverage,
            allocs,
            allocators,
            filter,
            live,
            off,
            short_max,
        })
    }

    fn filter(
        &self,
        file: Option<&config::ConfigFile>,
        section: Option<&config::ModuleSection>,
    ) -> Result<(settings::FunctionFilter, Source), Failure> {
        if !self.only.is_empty() || !self.exclude.is_empty() {
            let parse = |list: &[String], flag: &str| {
                list.iter()
                    .map(|p| {
                        settings::FunctionPattern::parse(p)
                            .map_err(|e| Failure::input(format!("--{flag}: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()
            };
            let filter = settings::FunctionFilter {
                only: parse(&self.only, "only")?,
                exclude: parse(&self.exclude, "exclude")?,
            };
            return Ok((filter, Source::Flag));
        }
        if let Ok(list) = std::env::var("WPROF_FILTER") {
            let filter = settings::FunctionFilter::parse_list(&list)
                .map_err(|e| Failure::input(format!("WPROF_FILTER: {e}")))?;
            return Ok((filter, Source::Variable("WPROF_FILTER")));
        }
        Ok(file
            .and_then(|f| f.knob(section, |k| k.filter.as_ref()))
            .unwrap_or_else(|| (settings::FunctionFilter::default(), Source::Default)))
    }
}
