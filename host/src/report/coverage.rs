//! Coverage reports of a profile made with `wprof run --coverage`: a text table of every
//! probed function's blocks (`--format coverage`), and lcov's tracefile (`--format lcov`,
//! read by `genhtml`), whose lines come from the module's DWARF (a Go module's from Go's
//! own line table): a line ran as often as the most frequent block holding code of that
//! line.

use std::collections::BTreeMap;
use std::path::Path;

use crate::display::percent;
use crate::profile::coverage::{Coverage, FunctionCoverage};
use crate::profile::Profile;
use crate::report::source::{self, ModuleDwarf};
use crate::report::Options;

/// One line for a run's summary: blocks and functions that ran.
pub fn summary(coverage: &Coverage) -> String {
    let (blocks, ran) = coverage.blocks();
    let entered = coverage
        .functions
        .iter()
        .filter(|f| f.entries() > 0)
        .count();
    format!(
        "coverage: {} of {} basic blocks ran ({}), in {} of {} functions",
        ran,
        blocks,
        percent(ran as u64, blocks as u64),
        entered,
        coverage.functions.len(),
    )
}

/// Source lines and how often each ran, per file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineCoverage {
    /// By the file's name as DWARF gives it.
    pub files: BTreeMap<String, FileCoverage>,
}

/// One source file's lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileCoverage {
    /// Where the file is: DWARF's path, or a file of that name beside the module when
    /// DWARF's is not there (a module built on another machine).
    pub path: String,
    /// Every line holding code, with the count of the most frequent block on it.
    pub lines: BTreeMap<u32, u64>,
    /// The functions starting in this file: first line, name, entries.
    pub functions: Vec<(u32, String, u64)>,
}

impl LineCoverage {
    /// Lines with code, and lines that ran, in every file.
    pub fn totals(&self) -> (usize, usize) {
        self.files.values().fold((0, 0), |(all, ran), f| {
            (
                all + f.lines.len(),
                ran + f.lines.values().filter(|&&c| c > 0).count(),
            )
        })
    }
}

/// The source lines of `profile`'s coverage blocks, from the DWARF of the profiled module
/// (found as [`crate::report::source::symbolize`] finds it: `module`, else the recorded
/// path, else beside `profile_path`); `None` without coverage, module or DWARF.
/// Source files are looked for beside the module, then under `search` (see
/// [`source::find_source`]).
pub fn profile_lines(
    profile: &Profile,
    profile_path: &Path,
    module: Option<&Path>,
    search: &[std::path::PathBuf],
) -> anyhow::Result<Option<LineCoverage>> {
    let Some(coverage) = &profile.coverage else {
        return Ok(None);
    };
    let Some((path, bytes)) =
        source::profiled_module(profile, profile_path, module).map_err(anyhow::Error::msg)?
    else {
        return Ok(None);
    };
    let dirs = source::source_dirs(path.parent(), search);
    if wasmparser::Parser::is_component(&bytes) {
        return component_lines(coverage, &bytes, &dirs).map(Some);
    }
    // A Go module has no DWARF: its lines come from Go's own table.
    match super::go_lines::go_lines(&bytes) {
        Ok(Some(go)) => {
            let lines = |start, end| Ok(go.lines(start, end));
            return line_coverage_by(coverage, lines, &dirs).map(Some);
        }
        Ok(None) => {}
        Err(why) => {
            crate::say!("wprof: warning: a Go module, but {why}; no source lines");
            return Ok(None);
        }
    }
    let lines = source::module_dwarf(&bytes).and_then(|dwarf| match dwarf {
        Some(dwarf) => line_coverage(coverage, &dwarf, &dirs).map(Some),
        None => Ok(None),
    });
    match lines {
        Ok(lines) => Ok(lines),
        // A module found by itself only may have no usable DWARF; one asked for must.
        Err(e) if module.is_some() => {
            Err(e.context(format!("cannot read the DWARF of {}", path.display())))
        }
        Err(e) => {
            tracing::debug!("no source lines from {}: {e:#}", path.display());
            Ok(None)
        }
    }
}

/// [`line_coverage`] of a component's coverage, whose blocks are byte ranges of the
/// component file: each through the DWARF of the core module holding it (none: no lines).
fn component_lines(
    coverage: &Coverage,
    component: &[u8],
    dirs: &[&Path],
) -> anyhow::Result<LineCoverage> {
    let layout = crate::components::ComponentLayout::read(component).map_err(anyhow::Error::msg)?;
    let mut modules = Vec::new();
    for module in &layout.modules {
        let dwarf = source::module_dwarf(&component[module.range.clone()])?;
        modules.push((module.range.clone(), dwarf));
    }
    let lines = |start: u32, end: u32| {
        let within = modules
            .iter()
            .find(|(range, _)| range.contains(&(start as usize)));
        match within {
            Some((range, Some(dwarf))) => {
                let from = range.start as u32;
                dwarf.lines(start - from, end - from)
            }
            _ => Ok(Vec::new()),
        }
    };
    line_coverage_by(coverage, lines, dirs)
}

/// Maps `coverage`'s blocks to source lines through `dwarf`; a file DWARF names that
/// does not exist is looked for under `dirs` ([`source::find_source`]).
pub fn line_coverage(
    coverage: &Coverage,
    dwarf: &ModuleDwarf<'_>,
    dirs: &[&Path],
) -> anyhow::Result<LineCoverage> {
    line_coverage_by(coverage, |start, end| dwarf.lines(start, end), dirs)
}

/// [`line_coverage`] with the lines of the module's bytes `start..end` from `lines`.
fn line_coverage_by(
    coverage: &Coverage,
    lines: impl Fn(u32, u32) -> anyhow::Result<Vec<(String, u32)>>,
    dirs: &[&Path],
) -> anyhow::Result<LineCoverage> {
    let mut out = LineCoverage::default();
    for f in &coverage.functions {
        let mut first: Option<(String, u32)> = None;
        for ((start, end), count) in f.ranges() {
            for (file, line) in lines(start, end)? {
                if first.is_none() {
                    first = Some((file.clone(), line));
                }
                let entry = out
                    .files
                    .entry(file.clone())
                    .or_insert_with(|| FileCoverage {
                        path: resolve(&file, dirs),
                        ..Default::default()
                    });
                let ran = entry.lines.entry(line).or_insert(0);
                *ran = (*ran).max(count);
            }
        }
        if let Some((file, line)) = first {
            if let Some(entry) = out.files.get_mut(&file) {
                entry.functions.push((line, f.name.clone(), f.entries()));
            }
        }
    }
    Ok(out)
}

/// `file` where it is found, looking in `dirs` too ([`super::source::find_source`]), else
/// `file`.
pub(crate) fn resolve(file: &str, dirs: &[&Path]) -> String {
    super::source::find_source(file, dirs)
        .map_or_else(|| file.to_string(), |p| p.display().to_string())
}

/// `--format lcov`: one record per source file, with its functions (`FN`, `FNDA`) and
/// lines (`DA`). Functions without DWARF lines have no file and are left out.
pub fn lcov(lines: &LineCoverage) -> String {
    let mut out = String::new();
    for file in lines.files.values() {
        out.push_str("TN:\n");
        out.push_str(&format!("SF:{}\n", file.path));
        let mut functions = file.functions.clone();
        functions.sort();
        for (line, name, _) in &functions {
            out.push_str(&format!("FN:{line},{}\n", lcov_name(name)));
        }
        for (_, name, entries) in &functions {
            out.push_str(&format!("FNDA:{entries},{}\n", lcov_name(name)));
        }
        out.push_str(&format!("FNF:{}\n", functions.len()));
        out.push_str(&format!(
            "FNH:{}\n",
            functions.iter().filter(|(_, _, e)| *e > 0).count()
        ));
        for (line, count) in &file.lines {
            out.push_str(&format!("DA:{line},{count}\n"));
        }
        out.push_str(&format!("LF:{}\n", file.lines.len()));
        out.push_str(&format!(
            "LH:{}\n",
            file.lines.values().filter(|&&c| c > 0).count()
        ));
        out.push_str("end_of_record\n");
    }
    out
}

/// A name as lcov's `FN` lines take it: no comma (lcov ends the name there).
fn lcov_name(name: &str) -> String {
    name.replace(',', ";")
}

/// `--format coverage`: the totals, then each function that ran with its blocks, then
/// the functions never called.
pub fn text(profile: &Profile, coverage: &Coverage, options: &Options) -> String {
    let lines = options.lines.as_ref();
    let mut out = format!("wprof {} of {}", summary(coverage), profile.module.path);
    if let Some(lines) = lines {
        let (all, ran) = lines.totals();
        out.push_str(&format!(
            "; {} of {} source lines ran ({})",
            ran,
            all,
            percent(ran as u64, all as u64)
        ));
    }
    out.push('\n');
    // Each function shown once, by the name the other reports show (demangled).
    let shown: Vec<(String, &FunctionCoverage)> = coverage
        .functions
        .iter()
        .map(|f| (display_name(f), f))
        .filter(|(name, _)| options.filter.as_ref().is_none_or(|re| re.is_match(name)))
        .collect();
    let (mut entered, mut never): (Vec<_>, Vec<_>) =
        shown.into_iter().partition(|(_, f)| f.entries() > 0);
    // Least covered first: where tests are missing.
    let share = |f: &FunctionCoverage| f.blocks_hit() as f64 / f.starts.len().max(1) as f64;
    entered.sort_by(|(a_name, a), (b_name, b)| {
        share(a)
            .total_cmp(&share(b))
            .then_with(|| a_name.cmp(b_name))
    });
    if !entered.is_empty() {
        out.push_str(&format!(
            "\n{:>8} {:>8} {:>7} {:>12}  function\n",
            "blocks", "ran", "ran%", "entries"
        ));
    }
    for (name, f) in &entered {
        let location = options
            .symbols
            .sources
            .get(&f.id)
            .map(|s| format!("  [{}]", s.short()))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:>8} {:>8} {:>7} {:>12}  {}{}\n",
            f.starts.len(),
            f.blocks_hit(),
            percent(f.blocks_hit() as u64, f.starts.len() as u64),
            f.entries(),
            name,
            location
        ));
    }
    if let Some(lines) = lines {
        out.push_str(&format!(
            "\n{:>8} {:>8} {:>7}  file\n",
            "lines", "ran", "ran%"
        ));
        for file in lines.files.values() {
            let ran = file.lines.values().filter(|&&c| c > 0).count() as u64;
            let all = file.lines.len() as u64;
            out.push_str(&format!(
                "{:>8} {:>8} {:>7}  {}\n",
                all,
                ran,
                percent(ran, all),
                file.path
            ));
        }
    }
    never.sort_by(|(a, _), (b, _)| a.cmp(b));
    if !never.is_empty() {
        out.push_str(&format!("\nNever called ({}):\n", never.len()));
        for (name, _) in never {
            out.push_str(&format!("  {name}\n"));
        }
    }
    out
}

/// The function's name as the other reports show it (demangled).
fn display_name(f: &FunctionCoverage) -> String {
    source::demangle(&f.name).unwrap_or_else(|| f.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coverage() -> Coverage {
        Coverage {
            functions: vec![
                FunctionCoverage {
                    id: 1,
                    name: "main".into(),
                    body: (100, 130),
                    starts: vec![1, 10, 20],
                    counts: vec![1, 0, 1],
                    kinds: Vec::new(),
                    calls: None,
                },
                FunctionCoverage {
                    id: 2,
                    name: "unused, really".into(),
                    body: (130, 140),
                    starts: vec![1],
                    counts: vec![0],
                    kinds: Vec::new(),
                    calls: None,
                },
            ],
        }
    }

    #[test]
    fn summary_counts_blocks_and_functions() {
        assert_eq!(
            summary(&coverage()),
            "coverage: 2 of 4 basic blocks ran (50.0%), in 1 of 2 functions"
        );
    }

    #[test]
    fn lcov_records_functions_and_lines() {
        let mut lines = LineCoverage::default();
        lines.files.insert(
            "a.c".into(),
            FileCoverage {
                path: "/src/a.c".into(),
                lines: [(3, 1), (4, 0), (5, 7)].into(),
                functions: vec![(3, "main".into(), 1), (9, "unused, really".into(), 0)],
            },
        );
        let text = lcov(&lines);
        assert_eq!(
            text,
            "TN:\nSF:/src/a.c\nFN:3,main\nFN:9,unused; really\nFNDA:1,main\n\
             FNDA:0,unused; really\nFNF:2\nFNH:1\nDA:3,1\nDA:4,0\nDA:5,7\nLF:3\nLH:2\n\
             end_of_record\n"
        );
        assert_eq!(lines.totals(), (3, 2));
    }
}
