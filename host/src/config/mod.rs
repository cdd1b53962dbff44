//! The configuration file, and where each setting comes from.
//!
//! wprof reads `wprof.toml` in the working directory, or the file `WPROF_CONFIG` names
//! (`WPROF_CONFIG=off`: none). A setting given as a flag wins over its `WPROF_*` variable,
//! which wins over the file, which wins over the default; in the file, the first
//! `[[module]]` section that matches the module (by file name glob, or by blake3) wins over
//! the top level. [`file`] reads and checks the file: every problem is one line naming the
//! file, the line and the key, before anything runs.
//!
//! The file is read once, when a command that uses it starts ([`install`]), and is
//! process-wide from then on, like the environment.
//!
//! May use: the shared helpers only (commands tell it how a flag's value was given).

pub mod file;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use file::{At, ConfigFile, Knobs, Matcher, ModuleSection};

use crate::exit::Failure;

/// The file read from the working directory when `WPROF_CONFIG` is unset.
pub const FILE_NAME: &str = "wprof.toml";

/// The variable naming another file (or `off`).
pub const VARIABLE: &str = "WPROF_CONFIG";

/// Finds and reads the configuration file: `WPROF_CONFIG`'s (which must exist; empty or
/// `off`: no file), else `./wprof.toml` if there is one.
pub fn load() -> Result<Option<ConfigFile>, Failure> {
    match std::env::var_os(VARIABLE) {
        Some(v) if v.is_empty() || v == "off" || v == "none" => Ok(None),
        Some(v) => file::read(Path::new(&v)).map(Some),
        None => {
            let here = Path::new(FILE_NAME);
            if here.is_file() {
                file::read(here).map(Some)
            } else {
                Ok(None)
            }
        }
    }
}

/// Where the configuration file is or would be: `WPROF_CONFIG`'s path, else
/// `./wprof.toml` (which may not exist yet); `None` when `WPROF_CONFIG` says off.
pub fn location() -> Option<PathBuf> {
    match std::env::var_os(VARIABLE) {
        Some(v) if v.is_empty() || v == "off" || v == "none" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(PathBuf::from(FILE_NAME)),
    }
}

static INSTALLED: OnceLock<Option<ConfigFile>> = OnceLock::new();

/// Reads the configuration file (see [`load`]) for the rest of the process, and hands its
/// cache settings to [`crate::settings`]. Once per process; later calls return the first
/// file.
pub fn install() -> Result<Option<&'static ConfigFile>, Failure> {
    if let Some(done) = INSTALLED.get() {
        return Ok(done.as_ref());
    }
    let loaded = load()?;
    if let Some(f) = &loaded {
        crate::settings::set_cache_defaults(crate::settings::CacheDefaults {
            dir: f.cache_dir.as_ref().map(|d| d.value.clone()),
            max_size: f.cache_max_size.as_ref().map(|s| s.value),
        });
    }
    Ok(INSTALLED.get_or_init(|| loaded).as_ref())
}

/// The file [`install`] read, if any.
pub fn installed() -> Option<&'static ConfigFile> {
    INSTALLED.get().and_then(Option::as_ref)
}

/// Where a resolved setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// A `WPROF_*` variable.
    Variable(&'static str),
    /// The configuration file, at a line (in a `[[module]]` section if `section` names its
    /// header's line).
    File {
        /// The file.
        path: PathBuf,
        /// The line of the value.
        line: usize,
        /// The line of the `[[module]]` header the value is in, if it is in one.
        section: Option<usize>,
    },
    /// wprof's default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Variable(name) => f.write_str(name),
            Source::File {
                path,
                line,
                section: None,
            } => write!(f, "{}:{line}", path.display()),
            Source::File {
                path,
                line,
                section: Some(header),
            } => write!(f, "{}:{line} ([[module]] of line {header})", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// How the command line gave a flag's value, as the parser tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// On the command line.
    Flag,
    /// Through the flag's `WPROF_*` variable.
    Variable,
}

/// One setting resolved: the value given on the command line or by its variable `variable`,
/// else the file's, else `default`.
pub fn resolve<T>(
    given: Option<(T, Given)>,
    variable: &'static str,
    from_file: Option<(T, Source)>,
    default: T,
) -> (T, Source) {
    match (given, from_file) {
        (Some((v, Given::Flag)), _) => (v, Source::Flag),
        (Some((v, Given::Variable)), _) => (v, Source::Variable(variable)),
        (None, Some(found)) => found,
        (None, None) => (default, Source::Default),
    }
}

impl ConfigFile {
    /// The first `[[module]]` section for the module at `path`: by its file name, or by the
    /// blake3 of its bytes (read only if a section matches that way).
    pub fn section_for(&self, path: &Path) -> Option<&ModuleSection> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let mut digest: Option<Option<String>> = None;
        self.modules.iter().find(|s| match &s.matcher {
            Matcher::Name(_, glob) => name.as_deref().is_some_and(|n| glob.is_match(n)),
            Matcher::Blake3(prefix) => digest
                .get_or_insert_with(|| {
                    std::fs::read(path)
                        .ok()
                        .map(|b| wprof_cache::hex(blake3::hash(&b).as_bytes()))
                })
                .as_deref()
                .is_some_and(|d| d.starts_with(prefix.as_str())),
            Matcher::Path(p) => same_file(p, path),
        })
    }

    /// The modules the file names by `path`, in file order.
    pub fn module_paths(&self) -> Vec<PathBuf> {
        self.modules
            .iter()
            .filter_map(|s| match &s.matcher {
                Matcher::Path(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// A setting for the modules of `section` (none: any module): the section's value,
    /// else the top level's, with where it was written.
    pub fn knob<T: Clone>(
        &self,
        section: Option<&ModuleSection>,
        pick: impl Fn(&Knobs) -> Option<&At<T>>,
    ) -> Option<(T, Source)> {
        let in_section = section.and_then(|s| pick(&s.knobs).map(|at| (at, Some(s.line))));
        let (at, section) = in_section.or_else(|| pick(&self.knobs).map(|at| (at, None)))?;
        Some(self.sourced(at, section))
    }

    /// A cache setting (`[cache] dir`, `max_size`) with where it was written.
    pub fn cache_setting<T: Clone>(
        &self,
        pick: impl Fn(&ConfigFile) -> Option<&At<T>>,
    ) -> Option<(T, Source)> {
        pick(self).map(|at| self.sourced(at, None))
    }

    /// `at`'s value, written in this file (in the `[[module]]` of line `section`, if any).
    fn sourced<T: Clone>(&self, at: &At<T>, section: Option<usize>) -> (T, Source) {
        (
            at.value.clone(),
            Source::File {
                path: self.path.clone(),
                line: at.line,
                section,
            },
        )
    }
}

/// Whether `a` and `b` name one file (as written when either cannot be resolved).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Mode;

    fn parse(text: &str) -> Result<ConfigFile, String> {
        file::parse(Path::new("cfg/wprof.toml"), text).map_err(|f| f.message)
    }

    #[test]
    fn a_full_file_reads_with_lines_and_paths_beside_it() {
        let c = parse(
            "mode = \"cost\"\n\
             output = \"out/p.wprof\"\n\
             sample_period_us = 250\n\
             [cache]\n\
             dir = \"/var/cache/wprof\"\n\
             max_size = \"2G\"\n\
             [[module]]\n\
             name = \"sql*.wasm\"\n\
             mode = \"time\"\n\
             call_sites = true\n\
             [[module]]\n\
             blake3 = \"ABCDEF0123\"\n\
             profiling = false\n",
        )
        .unwrap();
        let mode = c.knobs.mode.as_ref().unwrap();
        assert_eq!((mode.value, mode.line), (Mode::Cost, 1));
        assert_eq!(
            c.knobs.output.as_ref().unwrap().value,
            Path::new("cfg/out/p.wprof")
        );
        assert_eq!(c.knobs.sample_period_us.as_ref().unwrap().value, 250);
        assert_eq!(
            c.cache_dir.as_ref().unwrap().value,
            Path::new("/var/cache/wprof")
        );
        assert_eq!(c.cache_max_size.as_ref().unwrap().value, Some(2 << 30));
        assert_eq!(c.modules.len(), 2);
        assert_eq!(c.modules[0].line, 7);
        assert!(matches!(&c.modules[1].matcher, Matcher::Blake3(p) if p == "abcdef0123"));

        let sql = c.section_for(Path::new("/x/sqlite.wasm"));
        assert_eq!(sql.map(|s| s.line), Some(7));
        let (mode, source) = c.knob(sql, |k| k.mode.as_ref()).unwrap();
        assert_eq!(mode, Mode::Time);
        assert_eq!(
            source.to_string(),
            "cfg/wprof.toml:9 ([[module]] of line 7)"
        );
        // Not in the section: the top level's.
        let (period, source) = c.knob(sql, |k| k.sample_period_us.as_ref()).unwrap();
        assert_eq!(
            (period, source.to_string()),
            (250, "cfg/wprof.toml:3".into())
        );
        assert!(c.knob(sql, |k| k.profiling.as_ref()).is_none());
        assert!(c.section_for(Path::new("lua.wasm")).is_none());
    }

    #[test]
    fn every_problem_names_the_file_the_line_and_the_key() {
        for (text, want) in [
            (
                "mode = \"fast\"",
                "cfg/wprof.toml:1: mode: \"fast\" is not a mode",
            ),
            (
                "\nmodes = \"cost\"",
                "cfg/wprof.toml:2: modes: unknown field `modes`",
            ),
            (
                "call_sites = \"yes\"",
                "cfg/wprof.toml:1: call_sites: invalid type",
            ),
            (
                "sample_period_us = 5",
                "cfg/wprof.toml:1: sample_period_us: 5 is not between",
            ),
            ("mode = ", "cfg/wprof.toml:1: mode: "),
            (
                "[cache]\nmax_size = \"lots\"",
                "cfg/wprof.toml:2: cache.max_size: \"lots\" is not a size",
            ),
            (
                "[cache]\nsize = 1",
                "cfg/wprof.toml:2: size: unknown field `size`",
            ),
            (
                "[[module]]\nmode = \"cost\"",
                "cfg/wprof.toml:1: module: a section needs",
            ),
            (
                "[[module]]\nname = \"a[\"",
                "cfg/wprof.toml:2: module.name: ",
            ),
            (
                "[[module]]\nblake3 = \"abc\"",
                "cfg/wprof.toml:2: module.blake3: \"abc\" is not 8 to 64",
            ),
            (
                "[[module]]\nname = \"a\"\nblake3 = \"abcdef01\"",
                "cfg/wprof.toml:3: module: a section matches by one of `name`, `blake3` or `path`",
            ),
            ("output = \"\"", "cfg/wprof.toml:1: output: an empty path"),
        ] {
            let got = parse(text).unwrap_err();
            assert!(got.starts_with(want), "{text:?}: {got}");
            assert!(!got.contains('\n'), "one line: {got}");
        }
    }

    #[test]
    fn a_given_value_wins_over_the_file_which_wins_over_the_default() {
        let file = (
            2,
            Source::File {
                path: "w.toml".into(),
                line: 1,
                section: None,
            },
        );
        assert_eq!(
            resolve(Some((1, Given::Flag)), "V", Some(file.clone()), 3),
            (1, Source::Flag)
        );
        assert_eq!(
            resolve(Some((1, Given::Variable)), "V", Some(file.clone()), 3),
            (1, Source::Variable("V"))
        );
        assert_eq!(resolve(None, "V", Some(file.clone()), 3), file);
        assert_eq!(resolve(None, "V", None, 3), (3, Source::Default));
    }
}
