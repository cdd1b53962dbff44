//! `wprof bench --scale`: what a large program costs before it starts, in whole processes
//! side by side with the wasmtime CLI in one run: a cold start (empty cache) against
//! `wasmtime compile` of the original, with peak memory; what the cache then holds (bytes,
//! files, as a multiple of the module); warm starts with profiling off and on against
//! `wasmtime run` with its compilation cache warm. Profiled runs in sample mode (every
//! function instrumented: the cache's heaviest use) and in stack mode (the default: the
//! module compiled with its entry counters).
//!
//! The programs are the list's start-up programs (they exit at once: `yosys -V`, `nextpnr
//! --version`), so that every figure is start-up and nothing else.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use super::process::{phase_ns, timings_in, WasmtimeCli};
use super::programs::{self, Program};
use crate::display::{format_ns, format_size};
use crate::exit::Failure;
use crate::stats::median;

/// The phases of `wprof run --timings` before the program's `_start`.
const BEFORE_START: [&str; 6] = [
    "engine",
    "load",
    "open cache",
    "instrument",
    "compile",
    "instantiate",
];

/// One program's figures: medians of the runs (nanoseconds, bytes).
#[derive(Debug, Serialize)]
pub struct ScaleBench {
    /// The program's name in the list.
    pub program: String,
    /// The module's size.
    pub module_bytes: u64,
    /// Runs per figure.
    pub runs: u32,
    /// `wasmtime compile` of the original, no cache: wall time and peak memory.
    pub wasmtime_compile: Option<Measured>,
    /// `wprof run --mode sample` on an empty cache: wall time and peak memory.
    pub cold: Measured,
    /// The part of `cold` before the program's `_start` (wprof's phases up to it).
    pub cold_before_start: u64,
    /// `cold_before_start / wasmtime_compile.wall`.
    pub cold_ratio: Option<f64>,
    /// `cold.peak_rss / wasmtime_compile.peak_rss`.
    pub cold_memory_ratio: Option<f64>,
    /// What the cold run left in its cache.
    pub cache_bytes: u64,
    /// In how many files.
    pub cache_files: u64,
    /// `cache_bytes / module_bytes`.
    pub cache_ratio: f64,
    /// `wprof run --no-incremental` on an empty cache: the part before `_start`.
    pub lean_before_start: u64,
    /// `lean_before_start / wasmtime_compile.wall`.
    pub lean_ratio: Option<f64>,
    /// What that run left in its cache.
    pub lean_cache_bytes: u64,
    /// `lean_cache_bytes / module_bytes`.
    pub lean_cache_ratio: f64,
    /// `wasmtime run`, its compilation cache warm.
    pub wasmtime_run_warm: Option<u64>,
    /// `WPROF=0 wprof run`, its cache warm.
    pub off_warm: u64,
    /// `wprof run --mode sample`, its cache warm.
    pub on_warm: u64,
    /// `wprof run --mode stack` on an empty cache: the part before `_start`.
    pub stack_before_start: u64,
    /// `stack_before_start / wasmtime_compile.wall`.
    pub stack_ratio: Option<f64>,
    /// That run's peak memory (the whole process).
    pub stack_peak_rss: u64,
    /// `stack_peak_rss / wasmtime_compile.peak_rss`.
    pub stack_memory_ratio: Option<f64>,
    /// What that run left in its cache.
    pub stack_cache_bytes: u64,
    /// In how many files.
    pub stack_cache_files: u64,
    /// `stack_cache_bytes / module_bytes`.
    pub stack_cache_ratio: f64,
    /// `wprof run --mode stack`, its cache warm.
    pub stack_warm: u64,
    /// `stack_warm / wasmtime_run_warm`.
    pub stack_on_ratio: Option<f64>,
    /// `off_warm / wasmtime_run_warm`.
    pub off_ratio: Option<f64>,
    /// `on_warm / wasmtime_run_warm`.
    pub on_ratio: Option<f64>,
}

/// A whole process: its wall time and peak resident memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Measured {
    /// Spawn to exit, nanoseconds.
    pub wall: u64,
    /// The largest resident set it had, bytes.
    pub peak_rss: u64,
}

/// Runs `cmd` (output discarded) to its end: wall time and peak memory; an error if it
/// cannot start, is killed, or fails.
fn measured(mut cmd: Command, what: &str) -> Result<(Measured, Vec<u8>), Failure> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot run {what}"))?;
    let mut stderr = Vec::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_end(&mut pipe, &mut stderr)
            .with_context(|| format!("cannot read the output of {what}"))?;
    }
    let usage = super::usage::wait(child)?;
    let (status, peak_rss) = (usage.code, usage.peak_rss);
    let wall = started.elapsed().as_nanos() as u64;
    if status != Some(0) {
        let last = String::from_utf8_lossy(&stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        return Err(Failure::input(format!(
            "{what} failed ({}): {last}",
            status.map_or("killed".to_string(), |c| format!("exit {c}"))
        )));
    }
    Ok((Measured { wall, peak_rss }, stderr))
}

/// Bytes and files under `dir`.
fn footprint(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => {
                    bytes += m.len();
                    files += 1;
                }
                Err(_) => {}
            }
        }
    }
    (bytes, files)
}

/// Measures `program`, `runs` times each figure.
pub fn measure(
    program: &Program,
    runs: u32,
    cli: Option<&WasmtimeCli>,
) -> Result<ScaleBench, Failure> {
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let scratch = scratch.path();
    let module_bytes = std::fs::metadata(&program.wasm)
        .with_context(|| format!("cannot read {}", program.wasm.display()))?
        .len();
    let name = &program.name;
    let wasmtime_config = scratch.join("wasmtime-cache.toml");
    super::process::write_wasmtime_cache_config(&wasmtime_config, &scratch.join("wasmtime"))?;

    let (mut compile, mut cold, mut before) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cache_bytes, mut cache_files) = (Vec::new(), Vec::new());
    let (mut lean_before, mut lean_bytes) = (Vec::new(), Vec::new());
    let (mut stack_before, mut stack_bytes) = (Vec::new(), Vec::new());
    let (mut stack_rss, mut stack_files) = (Vec::new(), Vec::new());
    let stack_cache = scratch.join("stack");
    let stack_env = stack_cache.display().to_string();
    for run in 0..runs {
        if let Some(cli) = cli {
            let mut cmd = Command::new(&cli.path);
            cmd.args(["compile", "-C", "cache=n", "-o"])
                .arg(scratch.join("original.cwasm"))
                .args(&program.wasmtime_flags)
                .arg(&program.wasm);
            compile.push(measured(cmd, &format!("wasmtime compile of {name}"))?.0);
        }
        let cache = scratch.join(format!("cold-{run}"));
        let cache_env = cache.display().to_string();
        let cmd = programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &cache_env)],
            &["-q", "--timings=json", "--mode", "sample"],
        );
        let (m, stderr) = measured(cmd, &format!("a cold `wprof run` of {name}"))?;
        cold.push(m);
        before.push(before_start(&stderr)?);
        let (bytes, files) = footprint(&cache);
        cache_bytes.push(bytes);
        cache_files.push(files);
        if run + 1 < runs {
            let _ = std::fs::remove_dir_all(&cache);
        }
        // The same without compiled functions kept for the module's next version.
        let lean = scratch.join("lean");
        let lean_env = lean.display().to_string();
        let cmd = programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &lean_env)],
            &[
                "-q",
                "--timings=json",
                "--mode",
                "sample",
                "--no-incremental",
            ],
        );
        let (_, stderr) = measured(
            cmd,
            &format!("a cold `wprof run --no-incremental` of {name}"),
        )?;
        lean_before.push(before_start(&stderr)?);
        lean_bytes.push(footprint(&lean).0);
        let _ = std::fs::remove_dir_all(&lean);
        // Stack mode (the default), its cache kept after the last run for the warm ones.
        let _ = std::fs::remove_dir_all(&stack_cache);
        let cmd = programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &stack_env)],
            &["-q", "--timings=json", "--mode", "stack"],
        );
        let (m, stderr) = measured(cmd, &format!("a cold `wprof run --mode stack` of {name}"))?;
        stack_before.push(before_start(&stderr)?);
        stack_rss.push(m.peak_rss);
        let (bytes, files) = footprint(&stack_cache);
        stack_bytes.push(bytes);
        stack_files.push(files);
    }
    // Warm: each cache primed once (the profiling one by the last cold run).
    let warm_cache = scratch
        .join(format!("cold-{}", runs - 1))
        .display()
        .to_string();
    let off_cache = scratch.join("off").display().to_string();
    let on = || {
        programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &warm_cache)],
            &["-q", "--mode", "sample"],
        )
    };
    let stack = || {
        programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &stack_env)],
            &["-q", "--mode", "stack"],
        )
    };
    let off = || {
        programs::wprof_run(
            program,
            scratch,
            &[("WPROF_CACHE_DIR", &off_cache), ("WPROF", "0")],
            &["-q"],
        )
    };
    let wasmtime =
        |cli: &WasmtimeCli| programs::wasmtime_run(program, &cli.path, scratch, &wasmtime_config);
    measured(off(), "a `WPROF=0 wprof run`")?;
    if let Some(cli) = cli {
        measured(wasmtime(cli), "`wasmtime run`")?;
    }
    let (mut w, mut o, mut p, mut k) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        if let Some(cli) = cli {
            w.push(measured(wasmtime(cli), "`wasmtime run`")?.0.wall);
        }
        o.push(measured(off(), "a `WPROF=0 wprof run`")?.0.wall);
        p.push(measured(on(), "a warm `wprof run --mode sample`")?.0.wall);
        k.push(measured(stack(), "a warm `wprof run --mode stack`")?.0.wall);
    }
    let median_of = |v: &[Measured]| Measured {
        wall: median(v.iter().map(|m| m.wall).collect()),
        peak_rss: median(v.iter().map(|m| m.peak_rss).collect()),
    };
    let wasmtime_compile = (!compile.is_empty()).then(|| median_of(&compile));
    let cold = median_of(&cold);
    let cold_before_start = median(before);
    let cache_bytes = median(cache_bytes);
    let (lean_before_start, lean_cache_bytes) = (median(lean_before), median(lean_bytes));
    let wasmtime_run_warm = (!w.is_empty()).then(|| median(w));
    let (off_warm, on_warm, stack_warm) = (median(o), median(p), median(k));
    let stack_before_start = median(stack_before);
    let (stack_peak_rss, stack_cache_bytes) = (median(stack_rss), median(stack_bytes));
    let ratio = |a: u64, b: Option<u64>| b.filter(|&b| b > 0).map(|b| a as f64 / b as f64);
    Ok(ScaleBench {
        program: name.clone(),
        module_bytes,
        runs,
        cold_ratio: ratio(cold_before_start, wasmtime_compile.map(|c| c.wall)),
        cold_memory_ratio: ratio(cold.peak_rss, wasmtime_compile.map(|c| c.peak_rss)),
        wasmtime_compile,
        cold,
        cold_before_start,
        cache_ratio: cache_bytes as f64 / module_bytes.max(1) as f64,
        lean_ratio: ratio(lean_before_start, wasmtime_compile.map(|c| c.wall)),
        lean_before_start,
        lean_cache_ratio: lean_cache_bytes as f64 / module_bytes.max(1) as f64,
        lean_cache_bytes,
        cache_bytes,
        cache_files: median(cache_files),
        off_ratio: ratio(off_warm, wasmtime_run_warm),
        on_ratio: ratio(on_warm, wasmtime_run_warm),
        stack_ratio: ratio(stack_before_start, wasmtime_compile.map(|c| c.wall)),
        stack_before_start,
        stack_memory_ratio: ratio(stack_peak_rss, wasmtime_compile.map(|c| c.peak_rss)),
        stack_peak_rss,
        stack_cache_ratio: stack_cache_bytes as f64 / module_bytes.max(1) as f64,
        stack_cache_bytes,
        stack_cache_files: median(stack_files),
        stack_on_ratio: ratio(stack_warm, wasmtime_run_warm),
        stack_warm,
        wasmtime_run_warm,
        off_warm,
        on_warm,
    })
}

/// The nanoseconds before `_start` in a `--timings=json` run's stderr (its last JSON line).
fn before_start(stderr: &[u8]) -> Result<u64, Failure> {
    let timings = timings_in(&String::from_utf8_lossy(stderr))
        .ok_or_else(|| Failure::input("a `wprof run --timings=json` printed no timings"))?;
    Ok(BEFORE_START.iter().map(|p| phase_ns(&timings, p)).sum())
}

/// The table of `results`.
pub fn table(results: &[ScaleBench], runs: u32) -> String {
    let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
    let time = |t: Option<u64>| t.map_or("-".to_string(), format_ns);
    let mut out = format!(
        "Start-up at scale, whole processes, medians of {runs} (ratios to the wasmtime CLI in the same run)\n\n"
    );
    out.push_str("sample mode (every function instrumented), cold: empty caches\n");
    out.push_str(&format!(
        "{:<18} {:>9} {:>11} {:>9} {:>11} {:>9} {:>7} {:>7}\n",
        "program", "module", "wt compile", "wt mem", "wprof start", "wprof mem", "time", "memory"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<18} {:>9} {:>11} {:>9} {:>11} {:>9} {:>7} {:>7}\n",
            r.program,
            format_size(r.module_bytes),
            time(r.wasmtime_compile.map(|c| c.wall)),
            r.wasmtime_compile
                .map_or("-".to_string(), |c| format_size(c.peak_rss)),
            format_ns(r.cold_before_start),
            format_size(r.cold.peak_rss),
            ratio(r.cold_ratio),
            ratio(r.cold_memory_ratio),
        ));
    }
    out.push_str("\nsample mode: cache after the cold run, and warm starts\n");
    out.push_str(&format!(
        "{:<18} {:>9} {:>6} {:>7} {:>10} {:>10} {:>10} {:>7} {:>7}\n",
        "program", "cache", "files", "x mod", "wt run", "WPROF=0", "profiled", "off", "on"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<18} {:>9} {:>6} {:>6.1}x {:>10} {:>10} {:>10} {:>7} {:>7}\n",
            r.program,
            format_size(r.cache_bytes),
            r.cache_files,
            r.cache_ratio,
            time(r.wasmtime_run_warm),
            format_ns(r.off_warm),
            format_ns(r.on_warm),
            ratio(r.off_ratio),
            ratio(r.on_ratio),
        ));
    }
    out.push_str("\nstack mode (the default): cold start, its cache, warm start\n");
    out.push_str(&format!(
        "{:<18} {:>11} {:>7} {:>9} {:>7} {:>9} {:>6} {:>7} {:>10} {:>7}\n",
        "program",
        "wprof start",
        "time",
        "wprof mem",
        "memory",
        "cache",
        "files",
        "x mod",
        "warm",
        "on"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<18} {:>11} {:>7} {:>9} {:>7} {:>9} {:>6} {:>6.1}x {:>10} {:>7}\n",
            r.program,
            format_ns(r.stack_before_start),
            ratio(r.stack_ratio),
            format_size(r.stack_peak_rss),
            ratio(r.stack_memory_ratio),
            format_size(r.stack_cache_bytes),
            r.stack_cache_files,
            r.stack_cache_ratio,
            format_ns(r.stack_warm),
            ratio(r.stack_on_ratio),
        ));
    }
    out.push_str("\nsample mode, cold with --no-incremental: no compiled function kept for the next version\n");
    out.push_str(&format!(
        "{:<18} {:>11} {:>7} {:>9} {:>7}\n",
        "program", "wprof start", "time", "cache", "x mod"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<18} {:>11} {:>7} {:>9} {:>6.1}x\n",
            r.program,
            format_ns(r.lean_before_start),
            ratio(r.lean_ratio),
            format_size(r.lean_cache_bytes),
            r.lean_cache_ratio,
        ));
    }
    out
}
