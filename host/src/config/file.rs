//! The configuration file as written: its TOML schema, and reading it into checked values
//! whose every problem is one line naming the file, the line and the key.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::exit::Failure;

/// The settings a file gives, at its top level or for the modules one section matches.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// `profiling`: instrument and profile (false: run the original, as `WPROF=0`).
    pub profiling: Option<At<bool>>,
    /// `mode`.
    pub mode: Option<At<crate::settings::Mode>>,
    /// `output`: the profile's path (relative to the file's directory).
    pub output: Option<At<PathBuf>>,
    /// `call_sites`.
    pub call_sites: Option<At<bool>>,
    /// `coverage`: basic blocks counted.
    pub coverage: Option<At<bool>>,
    /// `sample_period_us`.
    pub sample_period_us: Option<At<u64>>,
    /// `include` and `exclude`: which functions get probes (checked patterns; see
    /// [`crate::settings::FunctionPattern`]), on the line of the first of the two keys.
    pub filter: Option<At<crate::settings::FunctionFilter>>,
    /// `live`: the probes sit behind switches turned while the program runs.
    pub live: Option<At<bool>>,
    /// `off`: the functions whose switches are off (live probes; read again whenever the
    /// file changes during a run).
    pub off: Option<At<Vec<crate::settings::FunctionPattern>>>,
    /// `adaptive_calls`: adaptive mode's timed activations per step of a walk.
    pub adaptive_calls: Option<At<u64>>,
    /// `adaptive_timers`: adaptive mode's most functions timed at once.
    pub adaptive_timers: Option<At<u64>>,
    /// `short_max`: time mode's bound on short functions, counted but not timed.
    pub short_max: Option<At<u64>>,
    /// `inject`: faults to inject into imported functions (see [`crate::settings::injection`]).
    pub inject: Option<At<Vec<crate::settings::injection::Injection>>>,
    /// `allocs`: allocation profiling.
    pub allocs: Option<At<bool>>,
    /// `allocators`: the allocator functions, `ROLE=PATTERN` each (see
    /// [`crate::settings::allocators`]).
    pub allocators: Option<At<Vec<crate::settings::allocators::AllocatorSpec>>>,
}

/// A value and the line of the file it was written on.
#[derive(Debug, Clone, PartialEq)]
pub struct At<T> {
    /// The value.
    pub value: T,
    /// Its line, from 1.
    pub line: usize,
}

/// Which modules a `[[module]]` section is for.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Modules whose file name matches this glob (`*`, `?`, `[abc]`, `{a,b}`).
    Name(String, globset::GlobMatcher),
    /// Modules whose blake3 (of the file's bytes, as `wprof cache ls` shows) starts with
    /// these hex digits.
    Blake3(String),
    /// The module at this path (relative to the file's directory): `wprof instrument`
    /// without modules prepares these.
    Path(PathBuf),
}

/// One `[[module]]` section.
#[derive(Debug, Clone)]
pub struct ModuleSection {
    /// Which modules it is for.
    pub matcher: Matcher,
    /// What it sets for them.
    pub knobs: Knobs,
    /// The line of its `[[module]]` header.
    pub line: usize,
}

/// A configuration file, read and checked.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The top level's settings.
    pub knobs: Knobs,
    /// `[cache] dir` (relative to the file's directory).
    pub cache_dir: Option<At<PathBuf>>,
    /// `[cache] max_size`: `None` inside for `off`.
    pub cache_max_size: Option<At<Option<u64>>>,
    /// `[cache] incremental`: keep each compiled function for the module's next version.
    pub cache_incremental: Option<At<bool>>,
    /// The `[[module]]` sections, in file order (the first that matches a module applies).
    pub modules: Vec<ModuleSection>,
}

/// The fewest hex digits a `blake3 = "…"` prefix may have.
pub const MIN_BLAKE3_DIGITS: usize = 8;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    profiling: Option<Spanned<bool>>,
    mode: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    call_sites: Option<Spanned<bool>>,
    coverage: Option<Spanned<bool>>,
    sample_period_us: Option<Spanned<i64>>,
    include: Patterns,
    exclude: Patterns,
    live: Option<Spanned<bool>>,
    off: Patterns,
    adaptive_calls: Option<Spanned<i64>>,
    adaptive_timers: Option<Spanned<i64>>,
    short_max: Option<Spanned<i64>>,
    inject: Patterns,
    allocs: Option<Spanned<bool>>,
    allocators: Patterns,
    cache: Option<RawCache>,
    #[serde(default)]
    module: Vec<Spanned<RawModule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    dir: Option<Spanned<String>>,
    max_size: Option<Spanned<String>>,
    incremental: Option<Spanned<bool>>,
}

/// A `[[module]]` section as written: the top level's settings again (serde cannot flatten
/// them in with unknown keys refused), and what it matches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModule {
    name: Option<Spanned<String>>,
    blake3: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    profiling: Option<Spanned<bool>>,
    mode: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    call_sites: Option<Spanned<bool>>,
    coverage: Option<Spanned<bool>>,
    sample_period_us: Option<Spanned<i64>>,
    include: Patterns,
    exclude: Patterns,
    live: Option<Spanned<bool>>,
    off: Patterns,
    adaptive_calls: Option<Spanned<i64>>,
    adaptive_timers: Option<Spanned<i64>>,
    short_max: Option<Spanned<i64>>,
    inject: Patterns,
    allocs: Option<Spanned<bool>>,
    allocators: Patterns,
}

/// The settings of the top level or of a section, as written.
struct RawKnobs {
    profiling: Option<Spanned<bool>>,
    mode: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    call_sites: Option<Spanned<bool>>,
    coverage: Option<Spanned<bool>>,
    sample_period_us: Option<Spanned<i64>>,
    include: Patterns,
    exclude: Patterns,
    live: Option<Spanned<bool>>,
    off: Patterns,
    adaptive_calls: Option<Spanned<i64>>,
    adaptive_timers: Option<Spanned<i64>>,
    short_max: Option<Spanned<i64>>,
    inject: Patterns,
    allocs: Option<Spanned<bool>>,
    allocators: Patterns,
}

/// An `include`, `exclude` or `off` list as written.
type Patterns = Option<Spanned<Vec<String>>>;

/// The shortest and longest sample period `wprof run --sample-period-us` takes.
pub const SAMPLE_PERIOD_US: Range<i64> = 10..1_000_001;

/// The fewest and most timed activations per step adaptive mode takes.
pub const ADAPTIVE_CALLS: Range<i64> = 1..1_000_000_001;

/// The fewest and most functions adaptive mode may time at once.
pub const ADAPTIVE_TIMERS: Range<i64> = 1..257;
/// `short_max`'s values (0: time every function).
pub const SHORT_MAX: Range<i64> = 0..100_001;

/// Reads the file at `path`.
pub fn read(path: &Path) -> Result<ConfigFile, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::input(format!(
            "cannot read the configuration file {}: {e}",
            path.display()
        ))
    })?;
    parse(path, &text)
}

/// Parses `text`, the contents of the file at `path`.
pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, Failure> {
    let problem = |span: Range<usize>, key: &str, what: &str| {
        let line = line_of(text, span.start);
        Failure::input(format!("{}:{line}: {key}: {what}", path.display()))
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().lines().next().unwrap_or_default().to_string();
        problem(span.clone(), &key_at(text, span.start), &message)
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let knobs = |raw: RawKnobs| -> Result<Knobs, Failure> {
        let at = |span: Range<usize>| line_of(text, span.start);
        let patterns = |key: &str, list: &Spanned<Vec<String>>| {
            list.get_ref()
                .iter()
                .map(|p| {
                    crate::settings::FunctionPattern::parse(p)
                        .map_err(|e| problem(list.span(), key, &e))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let flag = |b: Option<Spanned<bool>>| {
            b.map(|b| At {
                value: *b.get_ref(),
                line: at(b.span()),
            })
        };
        let RawKnobs {
            profiling,
            mode,
            output,
            call_sites,
            coverage,
            sample_period_us: period,
            include,
            exclude,
            live,
            off,
            adaptive_calls,
            adaptive_timers,
            short_max,
            inject,
            allocs,
            allocators,
        } = raw;
        let bounded = |value: Option<Spanned<i64>>, key: &str, range: Range<i64>| match value {
            None => Ok(None),
            Some(v) if !range.contains(v.get_ref()) => Err(problem(
                v.span(),
                key,
                &format!(
                    "{} is not between {} and {}",
                    v.get_ref(),
                    range.start,
                    range.end - 1
                ),
            )),
            Some(v) => Ok(Some(At {
                value: *v.get_ref() as u64,
                line: at(v.span()),
            })),
        };
        let adaptive_calls = bounded(adaptive_calls, "adaptive_calls", ADAPTIVE_CALLS)?;
        let adaptive_timers = bounded(adaptive_timers, "adaptive_timers", ADAPTIVE_TIMERS)?;
        let short_max = bounded(short_max, "short_max", SHORT_MAX)?;
        let mode = match mode {
            None => None,
            Some(m) => {
                let value = crate::settings::Mode::parse(m.get_ref())
                    .map_err(|why| problem(m.span(), "mode", &why))?;
                Some(At {
                    value,
                    line: at(m.span()),
                })
            }
        };
        let sample_period_us = match period {
            None => None,
            Some(p) if !SAMPLE_PERIOD_US.contains(p.get_ref()) => {
                return Err(problem(
                    p.span(),
                    "sample_period_us",
                    &format!(
                        "{} is not between {} and {} microseconds",
                        p.get_ref(),
                        SAMPLE_PERIOD_US.start,
                        SAMPLE_PERIOD_US.end - 1
                    ),
                ))
            }
            Some(p) => Some(At {
                value: *p.get_ref() as u64,
                line: at(p.span()),
            }),
        };
        let mut filter = crate::settings::FunctionFilter::default();
        let mut filter_line = None;
        for (key, list, into) in [
            ("include", include, &mut filter.only),
            ("exclude", exclude, &mut filter.exclude),
        ] {
            let Some(list) = list else { continue };
            filter_line.get_or_insert(at(list.span()));
            into.extend(patterns(key, &list)?);
        }
        let off = match off {
            None => None,
            Some(list) => Some(At {
                value: patterns("off", &list)?,
                line: at(list.span()),
            }),
        };
        let inject = parsed_list(inject, "inject", text, &problem, |spec| {
            crate::settings::injection::Injection::parse(spec).map_err(|e| format!("{spec}: {e}"))
        })?;
        let allocators = parsed_list(
            allocators,
            "allocators",
            text,
            &problem,
            crate::settings::allocators::AllocatorSpec::parse,
        )?;
        Ok(Knobs {
            allocs: flag(allocs),
            allocators,
            adaptive_calls,
            adaptive_timers,
            short_max,
            inject,
            live: flag(live),
            off,
            filter: filter_line.map(|line| At {
                value: filter,
                line,
            }),
            profiling: flag(profiling),
            mode,
            output: output
                .map(|o| non_empty_path(o, "output", base, text, &problem))
                .transpose()?,
            call_sites: flag(call_sites),
            coverage: flag(coverage),
            sample_period_us,
        })
    };
    let top = knobs(RawKnobs {
        profiling: raw.profiling,
        mode: raw.mode,
        output: raw.output,
        call_sites: raw.call_sites,
        coverage: raw.coverage,
        sample_period_us: raw.sample_period_us,
        include: raw.include,
        exclude: raw.exclude,
        live: raw.live,
        off: raw.off,
        adaptive_calls: raw.adaptive_calls,
        adaptive_timers: raw.adaptive_timers,
        short_max: raw.short_max,
        inject: raw.inject,
        allocs: raw.allocs,
        allocators: raw.allocators,
    })?;
    let (mut cache_dir, mut cache_max_size, mut cache_incremental) = (None, None, None);
    if let Some(cache) = raw.cache {
        cache_incremental = cache.incremental.map(|b| At {
            value: *b.get_ref(),
            line: line_of(text, b.span().start),
        });
        cache_dir = cache
            .dir
            .map(|d| non_empty_path(d, "cache.dir", base, text, &problem))
            .transpose()?;
        if let Some(size) = cache.max_size {
            let value = match size.get_ref().trim() {
                "0" | "off" | "none" => None,
                s => Some(
                    crate::display::parse_size(s)
                        .map_err(|e| problem(size.span(), "cache.max_size", &e))?,
                ),
            };
            cache_max_size = Some(At {
                value,
                line: line_of(text, size.span().start),
            });
        }
    }
    let mut modules = Vec::with_capacity(raw.module.len());
    for section in raw.module {
        let header = section.span();
        let m = section.into_inner();
        let given = [&m.name, &m.blake3, &m.path]
            .iter()
            .filter(|k| k.is_some())
            .count();
        if given != 1 {
            let why = if given == 0 {
                "a section needs `name = \"GLOB\"`, `blake3 = \"HEX\"` or `path = \"FILE\"`"
            } else {
                "a section matches by one of `name`, `blake3` or `path`"
            };
            let at = [&m.path, &m.blake3, &m.name]
                .into_iter()
                .flatten()
                .next()
                .map_or(header.clone(), |k| k.span());
            return Err(problem(if given == 0 { header } else { at }, "module", why));
        }
        let matcher = if let Some(name) = m.name {
            let glob = globset::Glob::new(name.get_ref())
                .map_err(|e| problem(name.span(), "module.name", &e.kind().to_string()))?;
            Matcher::Name(name.get_ref().clone(), glob.compile_matcher())
        } else if let Some(hex) = m.blake3 {
            let digits = hex.get_ref().to_ascii_lowercase();
            if digits.len() < MIN_BLAKE3_DIGITS
                || digits.len() > 64
                || !digits.chars().all(|c| c.is_ascii_hexdigit())
            {
                return Err(problem(
                    hex.span(),
                    "module.blake3",
                    &format!(
                        "{:?} is not {MIN_BLAKE3_DIGITS} to 64 hex digits of a blake3",
                        hex.get_ref()
                    ),
                ));
            }
            Matcher::Blake3(digits)
        } else {
            let path = m.path.expect("one of the three");
            Matcher::Path(non_empty_path(path, "module.path", base, text, &problem)?.value)
        };
        modules.push(ModuleSection {
            matcher,
            knobs: knobs(RawKnobs {
                profiling: m.profiling,
                mode: m.mode,
                output: m.output,
                call_sites: m.call_sites,
                coverage: m.coverage,
                sample_period_us: m.sample_period_us,
                include: m.include,
                exclude: m.exclude,
                live: m.live,
                off: m.off,
                adaptive_calls: m.adaptive_calls,
                adaptive_timers: m.adaptive_timers,
                short_max: m.short_max,
                inject: m.inject,
                allocs: m.allocs,
                allocators: m.allocators,
            })?,
            line: line_of(text, header.start),
        });
    }
    Ok(ConfigFile {
        path: path.to_path_buf(),
        knobs: top,
        cache_dir,
        cache_max_size,
        cache_incremental,
        modules,
    })
}

/// A list of specs (`inject`, `allocators`), each parsed by `parse`, whose error names the
/// spec; a bad one is a problem at the list's line.
fn parsed_list<T>(
    list: Option<Spanned<Vec<String>>>,
    key: &str,
    text: &str,
    problem: &impl Fn(Range<usize>, &str, &str) -> Failure,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<At<Vec<T>>>, Failure> {
    let Some(list) = list else {
        return Ok(None);
    };
    let value = list
        .get_ref()
        .iter()
        .map(|spec| parse(spec).map_err(|e| problem(list.span(), key, &e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(At {
        value,
        line: line_of(text, list.span().start),
    }))
}

fn non_empty_path(
    value: Spanned<String>,
    key: &str,
    base: &Path,
    text: &str,
    problem: &impl Fn(Range<usize>, &str, &str) -> Failure,
) -> Result<At<PathBuf>, Failure> {
    if value.get_ref().is_empty() {
        return Err(problem(value.span(), key, "an empty path"));
    }
    Ok(At {
        value: base.join(value.get_ref()),
        line: line_of(text, value.span().start),
    })
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key written on the line of byte `offset`: what precedes `=`, or a table's header.
fn key_at(text: &str, offset: usize) -> String {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or_default().trim();
    if let Some((key, _)) = line.split_once('=') {
        return key.trim().to_string();
    }
    let header = line.trim_start_matches('[').trim_end_matches(']').trim();
    if header.is_empty() {
        "the file".to_string()
    } else {
        header.to_string()
    }
}
