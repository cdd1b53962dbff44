//! The settings a run takes from flags, `WPROF_*` variables, the configuration file and
//! defaults, in that order: `wprof run` resolves them, `wprof config` shows them and where
//! each came from.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::commands::GivenArgs;
use crate::config::{self, Source};
use crate::exit::Failure;
use crate::settings;

use super::probe_settings::{ProbeArgs, ResolvedProbes};
pub use crate::settings::Mode;

/// The flags of the settings the configuration file may also give.
#[derive(Debug, Clone, clap::Args)]
pub struct SettingsArgs {
    /// Where to write the profile [default: ./<module stem>.wprof].
    #[arg(
        short = 'o',
        long = "output",
        value_name = "PROFILE",
        env = "WPROF_OUT"
    )]
    pub output: Option<PathBuf>,

    /// The cache directory [default: $XDG_CACHE_HOME/wprof, else ~/.cache/wprof].
    #[arg(long, value_name = "DIR", env = "WPROF_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Keep no compiled function for the module's next version (`WPROF_INCREMENTAL=0`, or
    /// the configuration file's `[cache] incremental = false`). By default a first run in
    /// a probed mode (sample, time, cost, adaptive) also stores each function's machine
    /// code apart, so that a rebuilt module compiles only the functions that changed; that
    /// costs a first run of a large module about a tenth of its compile time and half of
    /// its cache. Stack mode, the default, never does: it compiles its module whole, and
    /// this flag changes nothing there. For a module profiled once in a probed mode (a
    /// release build, a CI job): the compiled module is still cached whole, and runs of
    /// this very module start as fast; a changed module compiles whole.
    #[arg(long)]
    pub no_incremental: bool,

    #[command(flatten)]
    pub probes: ProbeArgs,

    /// Stack, sample and adaptive mode: microseconds between two ticks of the program
    /// thread's timer, each a sample of where it is (shorter: finer estimates, and each
    /// tick interrupts the program). A period given here, by its variable or by the
    /// configuration file stays for the whole run; in stack and sample mode the default,
    /// 200, stretches after the first second in proportion to the time run, up to 2000 at
    /// ten seconds (5,000 samples in the first second, 500 a second from the tenth), so
    /// that a long run is not slowed by ticks it does not need (adaptive mode keeps 200:
    /// its walks follow the ticks).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = crate::run::inline::sampler::DEFAULT_PERIOD.as_micros() as u64, env = "WPROF_SAMPLE_PERIOD_US", value_parser = clap::value_parser!(u64).range(config::file::SAMPLE_PERIOD_US.start as u64..config::file::SAMPLE_PERIOD_US.end as u64))]
    pub sample_period_us: u64,

    /// Adaptive mode: activations a step of a walk times before it moves to the caller.
    #[arg(long, value_name = "N", default_value_t = crate::run::adaptive::AdaptiveSettings::default().calls.into(), env = "WPROF_ADAPTIVE_CALLS", value_parser = clap::value_parser!(u64).range(config::file::ADAPTIVE_CALLS.start as u64..config::file::ADAPTIVE_CALLS.end as u64))]
    pub adaptive_calls: u64,

    /// Adaptive mode: the most functions timed at once.
    #[arg(long, value_name = "K", default_value_t = crate::run::adaptive::AdaptiveSettings::default().timers.into(), env = "WPROF_ADAPTIVE_TIMERS", value_parser = clap::value_parser!(u64).range(config::file::ADAPTIVE_TIMERS.start as u64..config::file::ADAPTIVE_TIMERS.end as u64))]
    pub adaptive_timers: u64,

    /// Make a function fail, to test the program's error paths (repeatable):
    /// `TARGET=ACTION[@N]`, TARGET `wasi:NAME` (a WASI preview 1 function), `MODULE::NAME`
    /// (an import) or the name of one of the module's own functions (`malloc`, demangled
    /// names too), ACTION `trap`, `errno:NAME` (`errno:EIO`, `errno:29`) or `return:VALUE`,
    /// `@N` the Nth call only (else every call). Other calls run as usual; the profile and
    /// the summary say how often it was injected. Into imports, applies with `WPROF=0` too.
    /// In a component every target is a core module's own function (`wasi:NAME`: the
    /// preview 1 adapter's; `MODULE!NAME`: one module's)
    #[arg(
        long = "inject",
        value_name = "TARGET=ACTION[@N]",
        env = "WPROF_INJECT",
        value_delimiter = ','
    )]
    pub inject: Vec<String>,

    /// How the command line gave each of these (filled after parsing).
    #[arg(skip)]
    pub given: GivenArgs,
}

/// A setting's value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved<T> {
    /// The value.
    pub value: T,
    /// Where it came from (`flag`, a variable's name, `FILE:LINE`, `default`).
    pub source: String,
}

impl<T> Resolved<T> {
    /// Whether nothing chose it: the default.
    pub fn is_default(&self) -> bool {
        self.source == Source::Default.to_string()
    }
}

impl<T> From<(T, Source)> for Resolved<T> {
    fn from((value, source): (T, Source)) -> Self {
        Resolved {
            value,
            source: source.to_string(),
        }
    }
}

/// Every setting of a run that the configuration file may give, resolved.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    /// The configuration file read, if any.
    pub file: Option<PathBuf>,
    /// The `[[module]]` section that applies (its header's line), if any.
    pub module_section: Option<usize>,
    /// Instrument and profile.
    pub profiling: Resolved<bool>,
    /// The probe mode.
    pub mode: Resolved<&'static str>,
    /// The profile's path.
    pub output: Resolved<PathBuf>,
    /// Call-site edges.
    pub call_sites: Resolved<bool>,
    /// Basic blocks counted.
    pub coverage: Resolved<bool>,
    /// Allocation profiling.
    pub allocs: Resolved<bool>,
    /// Which functions are the allocator (`known`, or the configuration's specs).
    pub allocators: Resolved<String>,
    /// Time mode's bound on short functions, counted but not timed.
    pub short_max: Resolved<u64>,
    /// Sample mode's period.
    pub sample_period_us: Resolved<u64>,
    /// Adaptive mode's timed activations per step.
    pub adaptive_calls: Resolved<u64>,
    /// Adaptive mode's most functions timed at once.
    pub adaptive_timers: Resolved<u64>,
    /// The cache directory (`None`: no cache).
    pub cache_dir: Resolved<Option<PathBuf>>,
    /// The cache's size cap (`None`: no cap).
    pub cache_max_size: Resolved<Option<u64>>,
    /// Compiled functions kept for the module's next version (wasmtime's incremental
    /// compilation, backed by the cache).
    pub incremental: Resolved<bool>,
    /// Which functions get probes, as one line (`--only` patterns, then `!`-prefixed
    /// `--exclude` ones; empty: all).
    pub filter: Resolved<String>,
    /// The same, parsed.
    #[serde(skip)]
    pub function_filter: settings::FunctionFilter,
    /// Live probes.
    pub live: Resolved<bool>,
    /// Whose switches start off, as one line (empty: none).
    pub off: Resolved<String>,
    /// The same, parsed.
    #[serde(skip)]
    pub off_patterns: Vec<settings::FunctionPattern>,
    /// Faults to inject, as one line of specs (empty: none).
    pub inject: Resolved<String>,
    /// The same, parsed.
    #[serde(skip)]
    pub injections: Vec<crate::settings::injection::Injection>,
    /// [`RunConfig::allocators`], parsed.
    #[serde(skip)]
    pub allocator_rules: crate::settings::allocators::AllocatorRules,
}

impl RunConfig {
    /// Adaptive mode's settings.
    pub fn adaptive(&self) -> crate::run::adaptive::AdaptiveSettings {
        crate::run::adaptive::AdaptiveSettings {
            calls: u32::try_from(self.adaptive_calls.value).unwrap_or(u32::MAX),
            timers: u32::try_from(self.adaptive_timers.value).unwrap_or(u32::MAX),
        }
    }

    /// The mode, as the command line names it.
    pub fn mode(&self) -> Mode {
        Mode::named(self.mode.value).unwrap_or_default()
    }
}

impl SettingsArgs {
    /// Resolves every setting for the module at `module` (its `[[module]]` section of the
    /// configuration file applies; `None`: the file's top level only). `no_cache` is
    /// `--no-cache`.
    pub fn resolve(&self, module: Option<&Path>, no_cache: bool) -> Result<RunConfig, Failure> {
        let file = config::installed();
        let section = file.zip(module).and_then(|(f, m)| f.section_for(m));
        let given = &self.given;

        let wprof = std::env::var("WPROF").ok();
        let profiling = match wprof.as_deref() {
            Some(v) => (
                settings::profiling_enabled(Some(v))?,
                Source::Variable("WPROF"),
            ),
            None => file
                .and_then(|f| f.knob(section, |k| k.profiling.as_ref()))
                .unwrap_or((true, Source::Default)),
        };
        let ResolvedProbes {
            mode,
            call_sites,
            coverage,
            allocs,
            allocators,
            filter: (function_filter, filter_source),
            live,
            off: (off_patterns, off_source),
            short_max,
        } = self.probes.resolve(given, file, section)?;
        let sample_period_us = config::resolve(
            given.with("sample_period_us", self.sample_period_us),
            "WPROF_SAMPLE_PERIOD_US",
            file.and_then(|f| f.knob(section, |k| k.sample_period_us.as_ref())),
            self.sample_period_us,
        );
        let adaptive_calls = config::resolve(
            given.with("adaptive_calls", self.adaptive_calls),
            "WPROF_ADAPTIVE_CALLS",
            file.and_then(|f| f.knob(section, |k| k.adaptive_calls.as_ref())),
            self.adaptive_calls,
        );
        let adaptive_timers = config::resolve(
            given.with("adaptive_timers", self.adaptive_timers),
            "WPROF_ADAPTIVE_TIMERS",
            file.and_then(|f| f.knob(section, |k| k.adaptive_timers.as_ref())),
            self.adaptive_timers,
        );
        let given_injections = self
            .inject
            .iter()
            .map(|spec| {
                crate::settings::injection::Injection::parse(spec)
                    .map_err(|why| Failure::input(format!("--inject {spec}: {why}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inject = config::resolve(
            given.with("inject", given_injections),
            "WPROF_INJECT",
            file.and_then(|f| f.knob(section, |k| k.inject.as_ref())),
            Vec::new(),
        );
        let default_output = module.map_or_else(
            || PathBuf::from("<module stem>.wprof"),
            settings::default_profile_path,
        );
        let output = config::resolve(
            self.output.clone().and_then(|o| given.with("output", o)),
            "WPROF_OUT",
            file.and_then(|f| f.knob(section, |k| k.output.as_ref())),
            default_output,
        );
        let cache_dir = if no_cache {
            (None, Source::Flag)
        } else {
            let (dir, source) = config::resolve(
                self.cache_dir
                    .clone()
                    .and_then(|d| given.with("cache_dir", d)),
                "WPROF_CACHE_DIR",
                file.and_then(|f| f.cache_setting(|f| f.cache_dir.as_ref())),
                settings::standard_cache_dir().unwrap_or_default(),
            );
            ((!dir.as_os_str().is_empty()).then_some(dir), source)
        };
        let cache_max_size = match std::env::var("WPROF_CACHE_MAX_SIZE") {
            Ok(_) => (
                crate::prepare::session::auto_max_size().map_err(Failure::input)?,
                Source::Variable("WPROF_CACHE_MAX_SIZE"),
            ),
            Err(_) => file
                .and_then(|f| f.cache_setting(|f| f.cache_max_size.as_ref()))
                .unwrap_or((
                    Some(crate::prepare::session::DEFAULT_MAX_SIZE),
                    Source::Default,
                )),
        };
        let incremental = incremental(self.no_incremental)?;
        Ok(RunConfig {
            incremental: incremental.into(),
            filter: Resolved {
                value: function_filter.describe(),
                source: filter_source.to_string(),
            },
            function_filter,
            live: live.into(),
            off: Resolved {
                value: off_patterns
                    .iter()
                    .map(settings::FunctionPattern::text)
                    .collect::<Vec<_>>()
                    .join(","),
                source: off_source.to_string(),
            },
            off_patterns,
            inject: Resolved {
                value: inject
                    .0
                    .iter()
                    .map(|i| i.spec.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                source: inject.1.to_string(),
            },
            injections: inject.0,
            file: file.map(|f| f.path.clone()),
            module_section: section.map(|s| s.line),
            profiling: profiling.into(),
            mode: (mode.0.name(), mode.1).into(),
            output: output.into(),
            call_sites: call_sites.into(),
            coverage: coverage.into(),
            allocs: allocs.into(),
            allocators: Resolved {
                value: allocators.0.describe(),
                source: allocators.1.to_string(),
            },
            allocator_rules: allocators.0,
            short_max: short_max.into(),
            sample_period_us: sample_period_us.into(),
            adaptive_calls: adaptive_calls.into(),
            adaptive_timers: adaptive_timers.into(),
            cache_dir: cache_dir.into(),
            cache_max_size: cache_max_size.into(),
        })
    }
}

/// Whether compiled functions are kept for the module's next version: not with
/// `--no-incremental` (`no_incremental`), else as `WPROF_INCREMENTAL` says, else the
/// configuration file's `[cache] incremental`, else yes.
pub fn incremental(no_incremental: bool) -> Result<(bool, Source), Failure> {
    if no_incremental {
        return Ok((false, Source::Flag));
    }
    Ok(match std::env::var("WPROF_INCREMENTAL") {
        Ok(v) => (
            settings::switch("WPROF_INCREMENTAL", Some(&v), true)?,
            Source::Variable("WPROF_INCREMENTAL"),
        ),
        Err(_) => config::installed()
            .and_then(|f| f.cache_setting(|f| f.cache_incremental.as_ref()))
            .unwrap_or((true, Source::Default)),
    })
}
