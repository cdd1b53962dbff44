//! Resolved settings: command-line flags over `WPROF_*` environment variables over the
//! configuration file over defaults. Commands turn their clap structs into these plain
//! structs before any work.

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

/// Which defined functions get probes (`--only`, `--exclude`, `WPROF_FILTER`, or the
/// configuration file's `include`/`exclude`): the others are part of their nearest probed
/// caller (see [`wprof_agent::Selection`]).
#[derive(Debug, Clone, Default)]
pub struct FunctionFilter {
    /// When not empty, only functions matching one of these get probes.
    pub only: Vec<FunctionPattern>,
    /// Functions matching one of these get none.
    pub exclude: Vec<FunctionPattern>,
}

/// One pattern of a [`FunctionFilter`].
#[derive(Debug, Clone)]
pub enum FunctionPattern {
    /// A glob matched against the whole name (`*`, `?`, `[abc]`, `{a,b}`).
    Glob(String, globset::GlobMatcher),
    /// `/REGEX/`: a regular expression found anywhere in the name.
    Regex(regex::Regex),
    /// `#N` or `#N-M`: function ids (indices in the module, imports counted).
    Ids(u32, u32),
}

impl FunctionPattern {
    /// Parses `#N`, `#N-M`, `/REGEX/` or a glob.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if let Some(ids) = spec.strip_prefix('#') {
            let (a, b) = ids.split_once('-').unwrap_or((ids, ids));
            let id = |t: &str| {
                t.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{spec:?}: `#N` or `#N-M` takes function ids"))
            };
            let (a, b) = (id(a)?, id(b)?);
            if a > b {
                return Err(format!("{spec:?}: an empty range of ids"));
            }
            return Ok(Self::Ids(a, b));
        }
        if let Some(re) = spec.strip_prefix('/').and_then(|r| r.strip_suffix('/')) {
            return regex::Regex::new(re).map(Self::Regex).map_err(|e| {
                format!(
                    "{spec:?}: {}",
                    e.to_string().lines().last().unwrap_or_default()
                )
            });
        }
        if spec.is_empty() {
            return Err("an empty function pattern".to_string());
        }
        globset::Glob::new(spec)
            .map(|g| Self::Glob(spec.to_string(), g.compile_matcher()))
            .map_err(|e| format!("{spec:?}: {}", e.kind()))
    }

    /// The pattern as written.
    pub fn text(&self) -> String {
        match self {
            Self::Glob(text, _) => text.clone(),
            Self::Regex(re) => format!("/{}/", re.as_str()),
            Self::Ids(a, b) if a == b => format!("#{a}"),
            Self::Ids(a, b) => format!("#{a}-{b}"),
        }
    }

    /// Whether function `id` matches, named `name` by the module and `demangled` when that
    /// is a mangled name.
    pub fn matches(&self, id: u32, name: &str, demangled: Option<&str>) -> bool {
        let test = |n: &str| match self {
            Self::Glob(_, glob) => glob.is_match(n),
            Self::Regex(re) => re.is_match(n),
            Self::Ids(a, b) => (*a..=*b).contains(&id),
        };
        test(name) || demangled.is_some_and(test)
    }
}

impl FunctionFilter {
    /// Parses `WPROF_FILTER`'s value: patterns separated by commas, those excluded
    /// written `!PATTERN`.
    pub fn parse_list(list: &str) -> Result<Self, String> {
        let mut filter = Self::default();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.strip_prefix('!') {
                Some(p) => filter.exclude.push(FunctionPattern::parse(p.trim())?),
                None => filter.only.push(FunctionPattern::parse(item)?),
            }
        }
        Ok(filter)
    }

    /// Whether every function gets probes.
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.exclude.is_empty()
    }

    /// The filter as one line (`--only` patterns, then `!`-prefixed `--exclude` ones).
    pub fn describe(&self) -> String {
        let only = self.only.iter().map(FunctionPattern::text);
        let exclude = self.exclude.iter().map(|p| format!("!{}", p.text()));
        only.chain(exclude).collect::<Vec<_>>().join(",")
    }

    /// The selection this filter names, its set yet to be computed (see
    /// [`FunctionFilter::excluded`]); `None` when every function gets probes.
    pub fn selection(&self) -> Option<wprof_agent::Selection> {
        (!self.is_empty()).then(|| {
            let mut h = blake3::Hasher::new();
            h.update(b"wprof function filter v1\0");
            h.update(self.describe().as_bytes());
            wprof_agent::Selection {
                spec: *h.finalize().as_bytes(),
                excluded: Default::default(),
            }
        })
    }

    /// The ids of the defined functions (ids from `first_defined` on, `names` holding every
    /// function's name in id order, `shown` the name wprof shows where it differs: see
    /// [`crate::go_symbols::shown_names`]) this filter leaves without probes.
    pub fn excluded(
        &self,
        names: &[String],
        shown: &[Option<String>],
        first_defined: u32,
    ) -> std::collections::BTreeSet<u32> {
        (first_defined..names.len() as u32)
            .filter(|&id| {
                let name = &names[id as usize];
                let other = shown.get(id as usize).and_then(Option::as_deref);
                let matches = |p: &FunctionPattern| p.matches(id, name, other);
                let kept = self.only.is_empty() || self.only.iter().any(matches);
                !kept || self.exclude.iter().any(matches)
            })
            .collect()
    }
}

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
    /// No summary on stderr.
    pub quiet: bool,
    /// What the probes measure.
    pub mode: wprof_agent::ProbeMode,
    /// Subtract the probe overhead measured at start-up (time mode).
    pub subtract_overhead: bool,
    /// Split edges by call site.
    pub call_sites: bool,
    /// Count basic blocks (coverage).
    pub coverage: bool,
    /// Time mode: short functions (at most this many instructions of straight-line code)
    /// are counted, not timed (see [`wprof_agent::ProbePlan::short_max`]).
    pub short_max: u32,
    /// Sample mode: time between two readings of the running context.
    pub sample_period: std::time::Duration,
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
    pub injections: Vec<crate::injection::Injection>,
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
    fn function_filters() {
        let names: Vec<String> = ["fd_write", "main", "_Z3fooi", "bar_fast", "bar_slow"]
            .map(String::from)
            .to_vec();
        let shown = |names: &[String]| -> Vec<Option<String>> {
            names.iter().map(|n| crate::demangle::demangle(n)).collect()
        };
        let f = FunctionFilter::parse_list("bar_*, foo*, !bar_slow").unwrap();
        assert_eq!(f.describe(), "bar_*,foo*,!bar_slow");
        // `foo*` matches `_Z3fooi` demangled (`foo(int)`); the import is never excluded.
        assert_eq!(f.excluded(&names, &shown(&names), 1), [1, 4].into());
        let f = FunctionFilter::parse_list("!/^bar/,!#1").unwrap();
        assert_eq!(f.excluded(&names, &shown(&names), 1), [1, 3, 4].into());
        assert!(FunctionFilter::parse_list("")
            .unwrap()
            .selection()
            .is_none());
        let a = FunctionFilter::parse_list("main")
            .unwrap()
            .selection()
            .unwrap();
        let b = FunctionFilter::parse_list("!main")
            .unwrap()
            .selection()
            .unwrap();
        assert_ne!(a.spec, b.spec);
        for bad in ["#x", "#5-2", "/(/", "a[", "!"] {
            assert!(FunctionFilter::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_path_from_stem() {
        assert_eq!(
            default_profile_path(Path::new("dir/app.wasm")),
            PathBuf::from("app.wprof")
        );
    }
}
