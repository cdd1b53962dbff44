//! Resolved settings: command-line flags over `WPROF_*` environment variables over the
//! configuration file over defaults. Commands turn their clap structs into these plain
//! structs before any work.

pub mod allocators;
pub mod environment;
pub mod injection;
pub mod patterns;
pub mod sample_period;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::exit::Failure;

/// Whether profiling is on, from `WPROF` (`0`, `off`, `false`, `no` switch it off; `1`,
/// `on`, `true`, `yes` or unset leave it on).
pub fn profiling_enabled(value: Option<&str>) -> Result<bool, Failure> {
    switch("WPROF", value, true)
}

/// An on/off environment variable `name`: `default` when unset.
pub fn switch(name: &str, value: Option<&str>, default: bool) -> Result<bool, Failure> {
    let Some(value) = value else {
        return Ok(default);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        other => Err(Failure::input(format!(
            "{name}={other:?} is not a switch: use 1/on/true/yes or 0/off/false/no"
        ))),
    }
}

/// What the configuration file says about the cache, for every command (see
/// [`crate::config::install`]).
#[derive(Debug, Clone, Default)]
pub struct CacheDefaults {
    /// `[cache] dir`.
    pub dir: Option<PathBuf>,
    /// `[cache] max_size` (`None` inside: no cap).
    pub max_size: Option<Option<u64>>,
}

static CACHE_DEFAULTS: OnceLock<CacheDefaults> = OnceLock::new();

/// Sets what the configuration file says about the cache; once per process.
pub fn set_cache_defaults(defaults: CacheDefaults) {
    let _ = CACHE_DEFAULTS.set(defaults);
}

/// The configuration file's cache size cap, if it sets one (`Some(None)`: no cap).
pub fn configured_cache_max_size() -> Option<Option<u64>> {
    CACHE_DEFAULTS.get().and_then(|d| d.max_size)
}

/// The cache directory when no flag or variable names one: the configuration file's, else
/// [`standard_cache_dir`].
pub fn default_cache_dir() -> Option<PathBuf> {
    CACHE_DEFAULTS
        .get()
        .and_then(|d| d.dir.clone())
        .or_else(standard_cache_dir)
}

/// The standard cache directory: `$XDG_CACHE_HOME/wprof`, else `~/.cache/wprof`.
pub fn standard_cache_dir() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("wprof"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("wprof"))
}

/// The default profile path for a module: `./<stem>.wprof`.
pub fn default_profile_path(module: &Path) -> PathBuf {
    let stem = module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".to_string());
    PathBuf::from(format!("{stem}.wprof"))
}

/// A directory the program may use: `HOST` or `HOST::GUEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirMapping {
    /// Path on this machine.
    pub host: PathBuf,
    /// Path the program sees.
    pub guest: String,
}

impl DirMapping {
    /// Parses `HOST[::GUEST]`; without a guest path the program sees the host path.
    pub fn parse(spec: &str) -> Self {
        match spec.split_once("::") {
            Some((host, guest)) => DirMapping {
                host: PathBuf::from(host),
                guest: guest.to_string(),
            },
            None => DirMapping {
                host: PathBuf::from(spec),
                guest: spec.to_string(),
            },
        }
    }
}

/// Parses `NAME=VALUE`, or `NAME` to pass this process's value of `NAME` through.
pub fn parse_env(spec: &str) -> Result<(String, String), Failure> {
    match spec.split_once('=') {
        Some(("", _)) => Err(Failure::input(format!(
            "--env {spec:?}: the variable name is empty"
        ))),
        Some((name, value)) => Ok((name.to_string(), value.to_string())),
        None => match std::env::var(spec) {
            Ok(value) => Ok((spec.to_string(), value)),
            Err(_) => Err(Failure::input(format!(
                "--env {spec}: no value given and {spec} is not set here"
            ))),
        },
    }
}

pub use crate::settings::patterns::{FunctionFilter, FunctionPattern};

/// Everything `wprof run` needs, resolved.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The module to run.
    pub module: PathBuf,
    /// Arguments after the module (argv[1..]).
    pub args: Vec<String>,
    /// Directories the program may use.
    pub dirs: Vec<DirMapping>,
    /// Environment of the program.
    pub env: Vec<(String, String)>,
    /// Instrument and profile (false: run the original module as plain wasmtime would).
    pub profiling: bool,
    /// Where the profile goes.
    pub profile_path: PathBuf,
    /// The cache directory, if any.
    pub cache_dir: Option<PathBuf>,
    /// Compiled functions kept in the cache for the module's next version.
    pub incremental: bool,
    /// No summary on stderr.
    pub quiet: bool,
    /// What the probes measure (sample mode's probes stand for stack mode, which has none).
    pub mode: wprof_agent::ProbeMode,
    /// Stack mode: the module runs as it is, its stacks sampled (see
    /// [`crate::run::stacks`]).
    pub stacks: bool,
    /// Stack mode came by default (no flag, variable or file chose a mode): what needs
    /// probes and is known only once the module is read (a component, `--inject` into its
    /// own functions) and `--serve` bring sample mode instead of an error.
    pub stack_by_default: bool,
    /// Subtract the probe overhead measured at start-up (time mode).
    pub subtract_overhead: bool,
    /// Split edges by call site.
    pub call_sites: bool,
    /// Count basic blocks (coverage).
    pub coverage: bool,
    /// Profile allocations.
    pub allocs: bool,
    /// Which functions are the allocator.
    pub allocators: crate::settings::allocators::AllocatorRules,
    /// Time mode: short functions (at most this many instructions of straight-line code)
    /// are counted, not timed (see [`wprof_agent::ProbePlan::short_max`]).
    pub short_max: u32,
    /// Sample mode: time between two readings of the running context.
    pub sample_period: crate::settings::sample_period::SamplePeriod,
    /// Print how long each of wprof's phases took (`--timings`), and how.
    pub timings: Option<crate::timings::Format>,
    /// Which functions get probes.
    pub filter: FunctionFilter,
    /// Live probes: each probed function's probes behind a switch.
    pub live: bool,
    /// Live probes: whose switches start off.
    pub off: Vec<FunctionPattern>,
    /// Adaptive mode: how the hot paths are walked.
    pub adaptive: AdaptiveSettings,
    /// Faults to inject into imported functions (`--inject`).
    pub injections: Vec<crate::settings::injection::Injection>,
    /// `--serve`: the address of the pprof endpoint served while the program runs.
    pub serve: Option<String>,
    /// `--trace`: what the call trace keeps, and where it goes.
    pub trace: Option<TraceSettings>,
    /// `--native`: an interpreter's native frames shown, not its script's.
    pub native: bool,
    /// The interpreter the module is, whose language's frames stack mode reads at each tick
    /// (found by stack mode's preparation; see [`crate::languages`]).
    pub interpreter: Option<std::sync::Arc<crate::languages::Interpreter>>,
    /// How the program is entered and linked (`--invoke`, `--unknown-imports-trap`).
    pub entry: EntryPoint,
}

/// How `wprof run` enters the program and links its imports, as `wasmtime run` does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryPoint {
    /// `--invoke NAME`: the export called instead of `_start` (after `_initialize`, if the
    /// module exports one: a reactor's), its results printed.
    pub invoke: Option<String>,
    /// `--unknown-imports-trap`: imports wprof does not provide are linked to functions
    /// that trap when called, instead of failing the run.
    pub unknown_imports_trap: bool,
}

impl RunSettings {
    /// These settings in sample mode (for what stack mode cannot profile).
    pub fn in_sample_mode(&self) -> RunSettings {
        RunSettings {
            mode: wprof_agent::ProbeMode::Sample,
            stacks: false,
            stack_by_default: false,
            ..self.clone()
        }
    }
}

/// `wprof run --trace` (time mode): a trace of the calls, written when the program ends
/// (see `crate::commands::run::trace`).
#[derive(Debug, Clone)]
pub struct TraceSettings {
    /// The trace file.
    pub path: PathBuf,
    /// The most calls kept: the latest to end.
    pub buffer: usize,
    /// Calls at most this many frames deep are kept (1: the outermost).
    pub max_depth: u32,
    /// When not empty, only the calls of functions matching one of these are kept.
    pub only: Vec<FunctionPattern>,
}

/// Adaptive mode: how the hot paths are walked (see `crate::run::adaptive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSettings {
    /// Timed activations a step waits for before moving to the caller.
    pub calls: u32,
    /// The most functions timed at once.
    pub timers: u32,
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        AdaptiveSettings {
            calls: 1000,
            timers: 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_values() {
        assert!(profiling_enabled(None).unwrap());
        for on in ["1", "on", "TRUE", "yes", ""] {
            assert!(profiling_enabled(Some(on)).unwrap(), "{on}");
        }
        for off in ["0", "off", "False", "no"] {
            assert!(!profiling_enabled(Some(off)).unwrap(), "{off}");
        }
        assert!(profiling_enabled(Some("maybe")).is_err());
    }

    #[test]
    fn dir_mappings() {
        assert_eq!(
            DirMapping::parse("/data::/in"),
            DirMapping {
                host: "/data".into(),
                guest: "/in".into()
            }
        );
        assert_eq!(DirMapping::parse(".").guest, ".");
    }

    #[test]
    fn env_specs() {
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("WPROF_SURELY_UNSET_VARIABLE").is_err());
    }

    #[test]
    fn profile_path_from_stem() {
        assert_eq!(
            default_profile_path(Path::new("dir/app.wasm")),
            PathBuf::from("app.wprof")
        );
    }
}

/// The profiling modes, as the command line, `WPROF_MODE` and the configuration file name
/// them: the agent's probe modes, and stack mode, which runs the module with an entry
/// counter per function and no other probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Exact calls and contexts, sampled time.
    Sample,
    /// Exact calls and nanoseconds per activation.
    Time,
    /// Exact calls and executed instructions, deterministic.
    Cost,
    /// Sample mode, and exact times along the paths to the hot spots (timers walk up
    /// from the hottest contexts while the program runs).
    Adaptive,
    /// Time sampled from the program's call stack (frame pointers), as perf samples it;
    /// each function's calls counted by a counter at its entry, no other probe (the
    /// default: perf's view at the least cost).
    #[default]
    Stack,
}

impl Mode {
    /// Stack mode's name, on the command line and in profiles.
    pub const STACK_NAME: &'static str = "stack";

    /// Every mode, in the order help texts list them.
    pub const ALL: [Mode; 5] = [
        Mode::Time,
        Mode::Cost,
        Mode::Sample,
        Mode::Adaptive,
        Mode::Stack,
    ];

    /// The name used on the command line and in profiles.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Stack => Mode::STACK_NAME,
            probed => wprof_agent::ProbeMode::from(probed).name(),
        }
    }

    /// The mode called `name`.
    pub fn named(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mode called `name`, or a line naming the modes there are.
    pub fn parse(name: &str) -> Result<Mode, String> {
        Mode::named(name).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("{name:?} is not a mode ({})", names.join(", "))
        })
    }

    /// Whether the module runs with entry counters only, its stacks sampled.
    pub fn walks_stacks(self) -> bool {
        self == Mode::Stack
    }
}

impl From<Mode> for wprof_agent::ProbeMode {
    /// The agent's mode: stack mode instruments nothing, and stands as sample mode wherever
    /// a probe mode is asked for.
    fn from(m: Mode) -> Self {
        match m {
            Mode::Time => wprof_agent::ProbeMode::Time,
            Mode::Cost => wprof_agent::ProbeMode::Cost,
            Mode::Sample | Mode::Stack => wprof_agent::ProbeMode::Sample,
            Mode::Adaptive => wprof_agent::ProbeMode::Adaptive,
        }
    }
}
