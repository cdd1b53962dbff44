//! `wprof bench`: how much the probes cost and how fast a start is, measured side by side
//! in one process, medians of several runs. Never a pass/fail: it prints numbers.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use wasmtime::{Engine, Module};
use wprof_agent::{ProbeMode, ProbePlan};

use crate::collector::{Collector, ProbeOverhead};
use crate::exit::Failure;
use crate::instrument::{self, CacheSession};
use crate::loader::{self, LoadedModule};
use crate::report::format_ns;
use crate::runner::{self, Stdio};
use crate::settings::RunSettings;
use crate::stats::median;

/// Measure probe overhead and start-up times on modules (the bundled samples by default).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
For each module: the median wall time of `_start` for the original module and for it
instrumented in time mode and in cost mode (runs interleaved, output discarded, empty
stdin), the ratios, and the median
start-up (compile) times: original, cold (empty cache: instrument + compile) and warm
(cache hit + compile).

Examples:
  wprof bench                      # every .wasm in ./samples
  wprof bench --runs 9 app.wasm
  wprof bench --quick --json
  wprof bench samples/ratio.wasm --expect-ratio heavy/light=3")]
pub struct BenchCommand {
    /// Modules to measure [default: every .wasm in ./samples].
    #[arg(value_name = "MODULE")]
    modules: Vec<PathBuf>,

    /// Runs per measurement; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,

    /// One run per measurement (checks that the benchmark works; numbers are noisy).
    #[arg(long)]
    quick: bool,

    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,

    /// An accuracy check: functions F and G are known to do work in the ratio R, e.g.
    /// `heavy/light=3` on samples/ratio.wasm. Reports the measured ratio of their self
    /// times (median over the runs) and its error, with raw times and with the probe
    /// overhead subtracted. Repeatable.
    #[arg(long = "expect-ratio", value_name = "F/G=R", value_parser = parse_ratio)]
    expect_ratio: Vec<ExpectedRatio>,
}

/// `F/G=R`: functions F and G do work in the ratio R.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedRatio {
    numerator: String,
    denominator: String,
    ratio: f64,
}

fn parse_ratio(spec: &str) -> Result<ExpectedRatio, String> {
    let (names, ratio) = spec
        .split_once('=')
        .ok_or_else(|| format!("{spec:?} is not F/G=R"))?;
    let (numerator, denominator) = names
        .split_once('/')
        .ok_or_else(|| format!("{spec:?} is not F/G=R"))?;
    let ratio: f64 = ratio
        .parse()
        .map_err(|_| format!("{ratio:?} is not a number"))?;
    if !ratio.is_finite() || ratio <= 0.0 {
        return Err(format!("the ratio in {spec:?} must be positive"));
    }
    Ok(ExpectedRatio {
        numerator: numerator.to_string(),
        denominator: denominator.to_string(),
        ratio,
    })
}

/// The outcome of one accuracy check.
#[derive(Debug, Serialize)]
pub struct RatioCheck {
    /// `F/G`.
    pub functions: String,
    /// The known ratio.
    pub expected: f64,
    /// Median measured ratio of self times, raw.
    pub raw: f64,
    /// Its relative error.
    pub raw_error: f64,
    /// Median measured ratio with the probe overhead subtracted.
    pub subtracted: f64,
    /// Its relative error.
    pub subtracted_error: f64,
}

/// One module's numbers, in nanoseconds.
#[derive(Debug, Serialize)]
pub struct ModuleBench {
    /// The module.
    pub module: String,
    /// Median `_start` time of the original module.
    pub original: u64,
    /// Median `_start` time of the instrumented module.
    pub instrumented: u64,
    /// `instrumented / original`.
    pub ratio: f64,
    /// Median `_start` time instrumented for cost mode (deterministic instruction counts).
    pub cost_instrumented: u64,
    /// `cost_instrumented / original`.
    pub cost_ratio: f64,
    /// Median compile time of the original module.
    pub compile_original: u64,
    /// Median start-up with an empty cache: instrument and compile.
    pub start_cold: u64,
    /// Median start-up with a warm cache: look up and compile.
    pub start_warm: u64,
    /// Accuracy checks that apply to this module.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accuracy: Vec<RatioCheck>,
}

fn time<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_nanos() as u64)
}

fn compile(engine: &Engine, bytes: &[u8], what: &Path) -> Result<Module, Failure> {
    Module::new(engine, bytes)
        .map_err(|e| Failure::input(format!("cannot compile {}: {e}", what.display())))
}

fn bench_module(
    engine: &Engine,
    path: &Path,
    runs: u32,
    checks: &[ExpectedRatio],
    overhead: ProbeOverhead,
) -> Result<ModuleBench, Failure> {
    let loaded: LoadedModule = loader::load(path, engine)?;
    let settings = RunSettings {
        module: path.to_path_buf(),
        args: Vec::new(),
        dirs: Vec::new(),
        env: Vec::new(),
        profiling: true,
        profile_path: PathBuf::new(),
        cache_dir: None,
        quiet: true,
        mode: wprof_agent::ProbeMode::Time,
        subtract_overhead: false,
        call_sites: false,
    };
    let plan = ProbePlan::default();
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;

    let (mut compile_original, mut cold, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    let mut instrumented = None;
    for run in 0..runs {
        let (_, t) = time(|| compile(engine, &loaded.bytes, path));
        compile_original.push(t);
        // Cold: a cache directory of its own, empty.
        let dir = scratch.path().join(format!("cold-{run}"));
        let (prepared, t) = time(|| {
            let mut cache = CacheSession::open(Some(&dir));
            let p = instrument::prepare(&loaded, path, &plan, &mut cache);
            p.map(|p| {
                let m = compile(engine, &p.bytes, path);
                (p, m)
            })
        });
        cold.push(t);
        let (prepared, module) = prepared
            .map_err(|e| Failure::input(format!("cannot instrument {}: {e}", path.display())))?;
        let module = module?;
        // Warm: the same directory again.
        let (_, t) = time(|| {
            let mut cache = CacheSession::open(Some(&dir));
            let p = instrument::prepare(&loaded, path, &plan, &mut cache);
            p.map(|p| compile(engine, &p.bytes, path))
        });
        warm.push(t);
        instrumented = Some((prepared, module));
    }
    let (prepared, instrumented_module) = instrumented.expect("runs >= 1");
    let original_module = compile(engine, &loaded.bytes, path)?;

    let cost_plan = ProbePlan {
        mode: wprof_agent::ProbeMode::Cost,
        call_sites: false,
    };
    let cost_prepared =
        instrument::prepare(&loaded, path, &cost_plan, &mut CacheSession::none())
            .map_err(|e| Failure::input(format!("cannot instrument {}: {e}", path.display())))?;
    let cost_module = compile(engine, &cost_prepared.bytes, path)?;
    // `_start` wall time of an instrumented module with a fresh collector.
    let probed_run = |module: &Module, prepared: &instrument::Prepared, mode: ProbeMode| {
        let collector = Collector::new(prepared.functions.len());
        runner::run(
            engine,
            module,
            &settings,
            Stdio::Discard,
            Some((collector, mode)),
        )
        .map(|outcome| outcome.wall_time)
    };
    let (mut original, mut probed, mut cost) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let o = runner::run(engine, &original_module, &settings, Stdio::Discard, None)?;
        original.push(o.wall_time);
        probed.push(probed_run(
            &instrumented_module,
            &prepared,
            ProbeMode::Time,
        )?);
        cost.push(probed_run(&cost_module, &cost_prepared, ProbeMode::Cost)?);
    }
    let cost = median(cost);
    let (original, instrumented) = (median(original), median(probed));

    let id_of = |name: &str| {
        prepared
            .functions
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.id)
    };
    let mut accuracy = Vec::new();
    for check in checks {
        let (Some(num), Some(den)) = (id_of(&check.numerator), id_of(&check.denominator)) else {
            continue;
        };
        let mut measured = [Vec::new(), Vec::new()];
        for _ in 0..runs {
            for (i, o) in [ProbeOverhead::default(), overhead].into_iter().enumerate() {
                let collector = Collector::new(prepared.functions.len()).with_overhead(o);
                let run = runner::run(
                    engine,
                    &instrumented_module,
                    &settings,
                    Stdio::Discard,
                    Some((collector, wprof_agent::ProbeMode::Time)),
                )?;
                let f = run.collector.expect("instrumented runs have a collector");
                let t = |id: u32| f.functions()[id as usize].self_time.max(1) as f64;
                measured[i].push(t(num) / t(den));
            }
        }
        let [raw, subtracted] = measured.map(median);
        accuracy.push(RatioCheck {
            functions: format!("{}/{}", check.numerator, check.denominator),
            expected: check.ratio,
            raw,
            raw_error: (raw - check.ratio).abs() / check.ratio,
            subtracted,
            subtracted_error: (subtracted - check.ratio).abs() / check.ratio,
        });
    }
    Ok(ModuleBench {
        module: path.display().to_string(),
        original,
        instrumented,
        ratio: instrumented as f64 / original.max(1) as f64,
        cost_instrumented: cost,
        cost_ratio: cost as f64 / original.max(1) as f64,
        compile_original: median(compile_original),
        start_cold: median(cold),
        start_warm: median(warm),
        accuracy,
    })
}

impl BenchCommand {
    fn modules(&self) -> Result<Vec<PathBuf>, Failure> {
        if !self.modules.is_empty() {
            return Ok(self.modules.clone());
        }
        let dir = Path::new("samples");
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {} (give modules to measure)", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        found.sort();
        Ok(found)
    }

    /// Runs the benchmark; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let runs = if self.quick { 1 } else { self.runs };
        let engine = crate::engine::new_engine()?;
        let overhead = if self.expect_ratio.is_empty() {
            ProbeOverhead::default()
        } else {
            crate::calibrate::measure(&engine, false)?
        };
        let mut results = Vec::new();
        for path in self.modules()? {
            if !self.json {
                eprintln!("wprof bench: {} ...", path.display());
            }
            results.push(bench_module(
                &engine,
                &path,
                runs,
                &self.expect_ratio,
                overhead,
            )?);
        }
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&results).expect("serializes")
            );
        } else {
            print!("{}", table(&results, runs));
        }
        Ok(0)
    }
}

fn table(results: &[ModuleBench], runs: u32) -> String {
    let mut out = format!(
        "median of {runs} run(s); `_start` wall time, and start-up = instrument (if any) + compile\n\n\
         {:<28} {:>11} {:>11} {:>8} {:>11} {:>8}  {:>11} {:>11} {:>11} {:>9} {:>9}\n",
        "module", "original", "time mode", "ratio", "cost mode", "ratio", "compile", "cold start", "warm start", "cold/orig", "warm/orig"
    );
    for r in results {
        let name = Path::new(&r.module)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| r.module.clone());
        out.push_str(&format!(
            "{:<28} {:>11} {:>11} {:>7.2}x {:>11} {:>7.2}x  {:>11} {:>11} {:>11} {:>8.2}x {:>8.2}x\n",
            name,
            format_ns(r.original),
            format_ns(r.instrumented),
            r.ratio,
            format_ns(r.cost_instrumented),
            r.cost_ratio,
            format_ns(r.compile_original),
            format_ns(r.start_cold),
            format_ns(r.start_warm),
            r.start_cold as f64 / r.compile_original.max(1) as f64,
            r.start_warm as f64 / r.compile_original.max(1) as f64,
        ));
    }
    for r in results {
        for a in &r.accuracy {
            out.push_str(&format!(
                "\naccuracy on {}: self-time ratio {} expected {}: raw {:.3} (error {:.1}%), \
                 overhead subtracted {:.3} (error {:.1}%)\n",
                r.module,
                a.functions,
                a.expected,
                a.raw,
                a.raw_error * 100.0,
                a.subtracted,
                a.subtracted_error * 100.0
            ));
        }
    }
    out
}
