//! What the reports add to the profile's names: demangled Rust and C++ names
//! (rustc-demangle, cpp_demangle), and each function's source file and line from the DWARF
//! of the original module (gimli and addr2line), when the module is still where it was
//! profiled (`profile.module.path`, or beside the profile, or `--module`) and is the same
//! module (its blake3 matches the profile's).
//!
//! In a wasm module DWARF addresses are offsets from the start of the code section's
//! contents; a function's line is the first line-table row inside its body.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use addr2line::gimli;

use crate::profile::{FunctionRecord, Profile};

/// Where source `file` (a path as a compiler recorded it) is on this machine: at that path,
/// else under each of `dirs` in turn, at the longest tail of the path found there
/// (`/build/app/src/main.c` is looked for as `DIR/build/app/src/main.c`, then
/// `DIR/app/src/main.c`, `DIR/src/main.c` and `DIR/main.c`), as pprof's `-source_path`
/// finds sources built elsewhere.
pub fn find_source(file: &str, dirs: &[&Path]) -> Option<PathBuf> {
    let path = Path::new(file);
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let parts: Vec<_> = path
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect();
    for dir in dirs {
        for skip in 0..parts.len() {
            let candidate: PathBuf = parts[skip..]
                .iter()
                .fold(dir.to_path_buf(), |p, c| p.join(c));
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Where source files are looked for ([`find_source`]): the module's directory, then the
/// user's `--source-path` directories.
pub fn source_dirs<'a>(module_dir: Option<&'a Path>, search: &'a [PathBuf]) -> Vec<&'a Path> {
    module_dir
        .into_iter()
        .chain(search.iter().map(PathBuf::as_path))
        .collect()
}

/// Where a function is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The source file, as the compiler recorded it.
    pub file: String,
    /// The first line of the function's code.
    pub line: u32,
}

impl Source {
    /// `file.c:12`, with the file's last component only.
    pub fn short(&self) -> String {
        let name = Path::new(&self.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.file.clone());
        format!("{name}:{}", self.line)
    }
}

/// Per function id: the name in the module (when demangling changed it) and the source.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    /// The module's own (mangled) name of each function whose shown name was demangled.
    pub raw_names: HashMap<u32, String>,
    /// Source locations found in the DWARF.
    pub sources: HashMap<u32, Source>,
    /// Cost-mode profiles with block counts (`--coverage`): each function's instructions
    /// by source line (made by `report::annotate`), for the formats that carry lines.
    pub lines: HashMap<u32, LineCosts>,
}

/// A function's instructions that ran, by source line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineCosts {
    /// By file and line, in that order; lines where nothing ran are left out.
    pub lines: Vec<((String, u32), u64)>,
    /// Instructions of no line.
    pub unlined: u64,
    /// The file most of its instructions are in.
    pub main_file: String,
    /// That file's text from the function's first line to its last, by line number, when
    /// the file was found.
    pub source: Vec<(u32, String)>,
}

pub use crate::demangle::demangle;

/// Replaces mangled names in `profile` by their demangled form; returns the originals.
pub fn demangle_names(profile: &mut Profile) -> HashMap<u32, String> {
    demangle_functions(&mut profile.functions)
}

/// Replaces mangled names in `functions` by their demangled form; returns the originals.
fn demangle_functions(functions: &mut [FunctionRecord]) -> HashMap<u32, String> {
    let mut raw = HashMap::new();
    for f in functions {
        if let Some(d) = demangle(&f.name) {
            raw.insert(f.id, std::mem::replace(&mut f.name, d));
        }
    }
    raw
}

/// The module file to read DWARF from: `explicit`, else where the module was when it was
/// profiled (its absolute path, then the path as given), else a file of that name beside
/// the profile. Only a file whose blake3 matches the profile's is used.
fn find_module(
    profile: &Profile,
    profile_path: &Path,
    explicit: Option<&Path>,
) -> Result<Option<FoundModule>, String> {
    let recorded = Path::new(&profile.module.path);
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let absolute = profile
                .symbols
                .as_ref()
                .and_then(|s| s.module_path.as_ref());
            let mut c: Vec<PathBuf> = absolute.into_iter().map(PathBuf::from).collect();
            c.push(recorded.to_path_buf());
            if let (Some(dir), Some(name)) = (profile_path.parent(), recorded.file_name()) {
                c.push(dir.join(name));
            }
            c
        }
    };
    for path in candidates {
        let Ok(bytes) = std::fs::read(&path) else {
            if explicit.is_some() {
                return Err(format!("cannot read {}", path.display()));
            }
            continue;
        };
        if blake3::hash(&bytes).to_hex().as_str() == profile.module.blake3 {
            return Ok(Some((path, bytes)));
        }
        if explicit.is_some() {
            return Err(format!(
                "{} is not the module that was profiled (its blake3 differs)",
                path.display()
            ));
        }
    }
    Ok(None)
}

/// A module's DWARF, ready for lookups by address (an offset from the start of the code
/// section's contents), with where its function bodies are.
pub struct ModuleDwarf<'a> {
    /// Line tables and the rest, through addr2line.
    pub context: addr2line::Context<gimli::EndianSlice<'a, gimli::LittleEndian>>,
    /// The file offset DWARF addresses count from.
    pub code_start: usize,
    /// Imported functions (the first defined function's id).
    pub imported: u32,
    /// Each defined function's body, as file offsets.
    pub bodies: Vec<std::ops::Range<usize>>,
}

impl std::fmt::Debug for ModuleDwarf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleDwarf")
            .field("code_start", &self.code_start)
            .field("imported", &self.imported)
            .field("bodies", &self.bodies.len())
            .finish_non_exhaustive()
    }
}

impl ModuleDwarf<'_> {
    /// The source lines of the module's bytes `start..end` (file offsets), each
    /// `(file, line)` once, in address order. Rows of line 0 (code of no line) are left out.
    pub fn lines(&self, start: u32, end: u32) -> anyhow::Result<Vec<(String, u32)>> {
        let to_address = |offset: u32| (offset as usize).saturating_sub(self.code_start) as u64;
        let mut out: Vec<(String, u32)> = Vec::new();
        for (_, _, loc) in self
            .context
            .find_location_range(to_address(start), to_address(end))?
        {
            if let (Some(file), Some(line)) = (loc.file, loc.line.filter(|&l| l > 0)) {
                if !out.iter().any(|(f, l)| *l == line && f == file) {
                    out.push((file.to_string(), line));
                }
            }
        }
        Ok(out)
    }
}

/// The DWARF of the module `bytes`; `None` if it has none.
pub fn module_dwarf(bytes: &[u8]) -> anyhow::Result<Option<ModuleDwarf<'_>>> {
    let mut imported = 0u32;
    let mut code_start = None;
    let mut bodies = Vec::new();
    let mut sections: HashMap<String, &[u8]> = HashMap::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Func(_)) {
                        imported += 1;
                    }
                }
            }
            wasmparser::Payload::CodeSectionStart { range, .. } => code_start = Some(range.start),
            wasmparser::Payload::CodeSectionEntry(body) => bodies.push(body.range()),
            wasmparser::Payload::CustomSection(reader) if reader.name().starts_with(".debug_") => {
                sections.insert(reader.name().to_string(), reader.data());
            }
            _ => {}
        }
    }
    let (Some(code_start), true) = (code_start, sections.contains_key(".debug_info")) else {
        return Ok(None);
    };
    let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| {
        let data = sections.get(id.name()).copied().unwrap_or(&[]);
        Ok::<_, gimli::Error>(gimli::EndianSlice::new(data, gimli::LittleEndian))
    })?;
    Ok(Some(ModuleDwarf {
        context: addr2line::Context::from_dwarf(dwarf)?,
        code_start,
        imported,
        bodies,
    }))
}

/// The source of every defined function that has DWARF line information; in a component,
/// of every function of its core modules, in the ids of its profile (see
/// [`crate::components::function_count`]).
pub fn sources_from_module(bytes: &[u8]) -> anyhow::Result<HashMap<u32, Source>> {
    sources_of(bytes, None)
}

/// The sources of [`sources_from_module`], of the functions `wanted` only when given.
fn sources_of(bytes: &[u8], wanted: Option<&HashSet<u32>>) -> anyhow::Result<HashMap<u32, Source>> {
    if wasmparser::Parser::is_component(bytes) {
        let layout = crate::components::ComponentLayout::read(bytes).map_err(anyhow::Error::msg)?;
        let mut out = HashMap::new();
        let mut offset = 0;
        // Ids run over the modules that were instrumented, in order.
        for module in layout.modules.iter().filter(|m| m.probed) {
            let core = &bytes[module.range.clone()];
            for (id, source) in sources_from_module(core)? {
                if wanted.is_none_or(|w| w.contains(&(offset + id))) {
                    out.insert(offset + id, source);
                }
            }
            offset += crate::components::function_count(core).map_err(anyhow::Error::msg)?;
        }
        return Ok(out);
    }
    match module_dwarf(bytes)? {
        Some(dwarf) => sources_in(&dwarf, wanted),
        None => Ok(HashMap::new()),
    }
}

/// The sources of [`sources_of`], from a module's DWARF read already.
pub(crate) fn sources_in(
    dwarf: &ModuleDwarf<'_>,
    wanted: Option<&HashSet<u32>>,
) -> anyhow::Result<HashMap<u32, Source>> {
    let mut out = HashMap::new();
    for (i, range) in dwarf.bodies.iter().enumerate() {
        let id = dwarf.imported + i as u32;
        if wanted.is_some_and(|w| !w.contains(&id)) {
            continue;
        }
        let (Some(start), Some(end)) = (
            range.start.checked_sub(dwarf.code_start),
            range.end.checked_sub(dwarf.code_start),
        ) else {
            continue;
        };
        let (start, end) = (start as u64, end as u64);
        let found = dwarf
            .context
            .find_location_range(start, end)?
            .find_map(|(_, _, loc)| Some((loc.file?, loc.line?)));
        if let Some((file, line)) = found {
            out.insert(
                id,
                Source {
                    file: file.to_string(),
                    line,
                },
            );
        }
    }
    Ok(out)
}

/// The profiled module's path and bytes, as [`symbolize`] finds it (`explicit`, else
/// the recorded path, else beside the profile; only the module of the profile's blake3).
pub fn profiled_module(
    profile: &Profile,
    profile_path: &Path,
    explicit: Option<&Path>,
) -> Result<Option<FoundModule>, String> {
    find_module(profile, profile_path, explicit)
}

/// A profiled module found on disk: its path and bytes.
pub type FoundModule = (PathBuf, Vec<u8>);

/// Gives `profile`'s functions the names the reports show and finds their sources: those
/// the profile keeps (see [`crate::profile::SymbolsRecord`]), else the module's. Returns
/// them with the module found on disk (its path and bytes), for whatever else needs it;
/// `cached` is the module as the cache keeps it by its digest, asked only where the profile
/// keeps no symbols and the module is not on disk. An explicit `module` that cannot be used
/// is an error; a module found nowhere, for a profile that keeps no symbols, one warning.
pub fn symbolize(
    profile: &mut Profile,
    profile_path: &Path,
    module: Option<&Path>,
    cached: &dyn Fn() -> Option<Vec<u8>>,
) -> anyhow::Result<(Symbols, Option<FoundModule>)> {
    let found = find_module(profile, profile_path, module).map_err(anyhow::Error::msg)?;
    if let Some(stored) = profile.symbols.take() {
        let symbols = kept_symbols(profile, &stored);
        profile.symbols = Some(stored);
        return Ok((symbols, found));
    }
    let found = found.or_else(|| Some((PathBuf::from("(the cache)"), cached()?)));
    let Some((path, bytes)) = found else {
        crate::say!(
            "wprof: warning: the profiled module is not at {} (nor beside the profile, nor in \
             the cache, by its digest): names are the name section's, without source lines; \
             give --module",
            profile.module.path
        );
        let symbols = Symbols {
            raw_names: demangle_names(profile),
            ..Default::default()
        };
        return Ok((symbols, None));
    };
    let symbols = match module_symbols(profile, &bytes) {
        Ok(symbols) => symbols,
        Err(e) if module.is_some() => {
            return Err(e.context(format!("cannot read the DWARF of {}", path.display())))
        }
        Err(e) => {
            tracing::debug!("no source lines from {}: {e:#}", path.display());
            Symbols {
                raw_names: demangle_names(profile),
                ..Default::default()
            }
        }
    };
    Ok((symbols, Some((path, bytes))))
}

/// The names and sources of `profile`'s functions from the profiled module's `bytes`:
/// for a Go module, Go's own names and files from its symbol table (the name section's
/// names kept as the raw names); else demangled names and the DWARF's sources. Coverage
/// records are renamed too. A Go table wprof cannot read is one warning, and the names
/// stay the name section's.
pub fn module_symbols(profile: &mut Profile, bytes: &[u8]) -> anyhow::Result<Symbols> {
    match crate::go_symbols::read(bytes) {
        crate::go_symbols::GoTable::Functions(go) => return Ok(go_symbols(profile, &go)),
        crate::go_symbols::GoTable::Unreadable(why) => {
            crate::say!("wprof: warning: a Go module, but {why}; names are the name section's")
        }
        crate::go_symbols::GoTable::NotGo => {}
    }
    let raw_names = demangle_names(profile);
    Ok(Symbols {
        raw_names,
        sources: sources_from_module(bytes)?,
        lines: HashMap::new(),
    })
}

/// Each function's name as the reports show it: the profile's kept shown name, else the
/// recorded one demangled.
pub fn shown_names(profile: &Profile) -> HashMap<u32, String> {
    let kept: HashMap<u32, &str> = profile
        .symbols
        .iter()
        .flat_map(|s| &s.functions)
        .filter_map(|f| Some((f.id, f.shown.as_deref()?)))
        .collect();
    profile
        .functions
        .iter()
        .map(|f| {
            let shown = match kept.get(&f.id) {
                Some(shown) => shown.to_string(),
                None => crate::demangle::demangle(&f.name).unwrap_or_else(|| f.name.clone()),
            };
            (f.id, shown)
        })
        .collect()
}

/// Where the profiled module was: its absolute path when the profile keeps it, else the
/// path as given (for the source files found beside it).
pub fn recorded_path(profile: &Profile) -> PathBuf {
    let absolute = profile.symbols.as_ref().and_then(|s| s.module_path.clone());
    PathBuf::from(absolute.unwrap_or_else(|| profile.module.path.clone()))
}

/// The shown names and sources `profile` keeps, applied: its functions (and coverage
/// records) renamed, the module's names kept as the raw names.
fn kept_symbols(profile: &mut Profile, stored: &crate::profile::SymbolsRecord) -> Symbols {
    let by_id: HashMap<u32, &crate::profile::FunctionSymbol> =
        stored.functions.iter().map(|f| (f.id, f)).collect();
    let mut raw_names = HashMap::new();
    for f in &mut profile.functions {
        if let Some(shown) = by_id.get(&f.id).and_then(|s| s.shown.clone()) {
            raw_names.insert(f.id, std::mem::replace(&mut f.name, shown));
        }
    }
    if let Some(coverage) = &mut profile.coverage {
        for f in &mut coverage.functions {
            if let Some(shown) = by_id.get(&f.id).and_then(|s| s.shown.clone()) {
                f.name = shown;
            }
        }
    }
    let sources = stored
        .functions
        .iter()
        .filter_map(|f| {
            let source = Source {
                file: f.file.clone()?,
                line: f.line?,
            };
            Some((f.id, source))
        })
        .collect();
    Symbols {
        raw_names,
        sources,
        lines: HashMap::new(),
    }
}

/// Keeps in `profile` what the reports show of its functions, from the profiled module's
/// `bytes` (found at `path` when profiled): each function's shown name (Go's own, or
/// demangled) where it is not the module's, and its source file and line (Go's table, or
/// the DWARF). Only the profile's functions are looked up; what the mode kept already (a
/// script's functions, see `crate::languages`) stays.
pub fn record_symbols(profile: &mut Profile, bytes: &[u8], path: &Path) {
    record_symbols_with(profile, bytes, path, &|wanted| {
        sources_of(bytes, Some(wanted))
    })
}

/// The sources of the functions asked for, by id.
pub type SourcesOf<'a> = dyn Fn(&HashSet<u32>) -> anyhow::Result<HashMap<u32, Source>> + 'a;

/// [`record_symbols`], with the sources of the functions asked for (by id) from `sources`
/// (a module's DWARF read once for its lines too, or its sources kept in the cache) where
/// the module is not Go's.
pub fn record_symbols_with(
    profile: &mut Profile,
    bytes: &[u8],
    path: &Path,
    sources: &SourcesOf<'_>,
) {
    let mut functions = profile.functions.clone();
    let (raw_names, sources) = match crate::go_symbols::read(bytes) {
        crate::go_symbols::GoTable::Functions(go) => {
            let raw = go_names(&mut functions, &go);
            let sources = go_sources(&go);
            (raw, sources)
        }
        other => {
            if let crate::go_symbols::GoTable::Unreadable(why) = other {
                tracing::debug!("a Go module, but {why}");
            }
            let raw = demangle_functions(&mut functions);
            let wanted: HashSet<u32> = functions.iter().map(|f| f.id).collect();
            let sources = sources(&wanted).unwrap_or_else(|e| {
                tracing::debug!("no source lines from {}: {e:#}", path.display());
                HashMap::new()
            });
            (raw, sources)
        }
    };
    // What the mode kept already (a script's functions, which the module does not know).
    let kept = profile
        .symbols
        .take()
        .map(|s| s.functions)
        .unwrap_or_default();
    let functions = functions
        .iter()
        .filter_map(|f| {
            let shown = raw_names.contains_key(&f.id).then(|| f.name.clone());
            let source = sources.get(&f.id);
            (shown.is_some() || source.is_some()).then(|| crate::profile::FunctionSymbol {
                id: f.id,
                shown,
                file: source.map(|s| s.file.clone()),
                line: source.map(|s| s.line),
            })
        })
        .chain(kept)
        .collect();
    profile.symbols = Some(crate::profile::SymbolsRecord {
        module_path: std::path::absolute(path)
            .ok()
            .map(|p| p.display().to_string()),
        functions,
    });
}

/// The names `profile`'s functions are shown by, in place of the module's: Go's own for a
/// Go module (`bytes`), else demangled. For the run's summary, which needs no sources.
pub fn rename(functions: &mut [FunctionRecord], bytes: &[u8]) {
    let go = match crate::go_symbols::read(bytes) {
        crate::go_symbols::GoTable::Functions(go) => go,
        _ => HashMap::new(),
    };
    go_names(functions, &go);
}

/// Go's names (`go`) in place of the module's, else demangled names; returns the module's
/// names of the functions renamed.
fn go_names(
    functions: &mut [FunctionRecord],
    go: &HashMap<u32, crate::go_symbols::GoFunction>,
) -> HashMap<u32, String> {
    let mut raw_names = HashMap::new();
    for f in functions {
        if let Some(shown) = crate::go_symbols::shown_name(go, f.id, &f.name) {
            raw_names.insert(f.id, std::mem::replace(&mut f.name, shown));
        }
    }
    raw_names
}

/// Go's names in place of the name section's, and Go's files and lines.
fn go_symbols(profile: &mut Profile, go: &HashMap<u32, crate::go_symbols::GoFunction>) -> Symbols {
    let raw_names = go_names(&mut profile.functions, go);
    if let Some(coverage) = &mut profile.coverage {
        for f in &mut coverage.functions {
            if let Some(g) = go.get(&f.id) {
                f.name = g.name.clone();
            }
        }
    }
    Symbols {
        raw_names,
        sources: go_sources(go),
        lines: HashMap::new(),
    }
}

/// Go's files and lines of its functions.
fn go_sources(go: &HashMap<u32, crate::go_symbols::GoFunction>) -> HashMap<u32, Source> {
    go.iter()
        .filter_map(|(&id, g)| {
            let file = g.file.clone()?;
            Some((id, Source { file, line: g.line }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_found_at_the_longest_tail_of_its_path_under_each_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        std::fs::create_dir_all(two.join("app/src")).unwrap();
        std::fs::create_dir_all(&one).unwrap();
        std::fs::write(two.join("app/src/main.c"), "x").unwrap();
        std::fs::write(two.join("main.c"), "y").unwrap();
        std::fs::write(one.join("other.c"), "z").unwrap();
        let found = |file: &str| find_source(file, &[&one, &two]);
        assert_eq!(
            found("/build/app/src/main.c"),
            Some(two.join("app/src/main.c"))
        );
        assert_eq!(found("src/other.c"), Some(one.join("other.c")));
        assert_eq!(found("/build/lib/main.c"), Some(two.join("main.c")));
        assert_eq!(found("/build/none.c"), None);
        assert_eq!(find_source("/build/app/src/main.c", &[]), None);
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE").as_deref(),
            Some("core::fmt::write")
        );
        assert_eq!(demangle("_Z3fooi").as_deref(), Some("foo(int)"));
        assert_eq!(demangle("find_match"), None);
        assert_eq!(demangle("wasi_snapshot_preview1::fd_write"), None);
        // A component's functions keep their module.
        assert_eq!(demangle("main!_Z3fooi").as_deref(), Some("main!foo(int)"));
        assert_eq!(demangle("main!leaf"), None);
    }

    #[test]
    fn no_dwarf_no_sources() {
        let wasm = wat::parse_str("(module (func (export \"_start\")))").unwrap();
        assert!(sources_from_module(&wasm).unwrap().is_empty());
    }
}
