//! `wprof cache bench`: what the cache does for start-up. Medians of several runs of the
//! start-up to `_start` — cold (empty cache), warm, and with one function changed — against
//! plain wasmtime compiling the original module. It prints numbers; nothing is asserted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use wasmtime::{Engine, Module};
use wprof_agent::ProbePlan;

use super::print_json;
use crate::display::format_ns;
use crate::exit::Failure;
use crate::prepare::instrument;
use crate::prepare::session::CacheSession;
use crate::stats::median;

/// Measure start-up with the cache in time mode: cold, warm and one-function-changed,
/// against plain wasmtime compiling the original.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
For each module, medians of N runs of (in nanoseconds, and as ratios to `plain`), with
time mode's probes in every function (not the default stack mode, which adds only entry
counters and compiles its module whole):
  plain    read the original file and compile it with wasmtime, no cache (the baseline)
  cold     what `wprof run --mode time` does before `_start` on an empty cache: load and
           validate, instrument every function, compile, store everything (artifact
           included)
  warm     the same again: the instrumented module and its compiled code come from the
           cache (the code is authenticated, expanded in memory and mapped)
  changed  a copy of the module with one function changed (a `nop` added to its largest
           function), on a cache warm with the original: one function is instrumented
           again, the module is compiled again
The engine is built once, outside the timings. Each run has its own cache directory, in a
temporary folder; the secret key is the user's (created if needed).

Examples:
  wprof cache bench                 # the largest module in ./samples
  wprof cache bench --runs 9 app.wasm
  wprof cache bench --json samples/*.wasm

Exit status:
  0; 2 if a module cannot be read or instrumented.")]
pub struct BenchCommand {
    /// Modules to measure [default: the largest .wasm in ./samples].
    #[arg(value_name = "MODULE")]
    modules: Vec<PathBuf>,

    /// Runs per measurement; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,

    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One module's start-up figures (nanoseconds, medians).
#[derive(Debug, Serialize)]
pub struct StartupBench {
    /// The module.
    pub module: String,
    /// Bytes of its code section (what the compiler works on).
    pub code_bytes: u64,
    /// Runs per figure.
    pub runs: u32,
    /// Plain wasmtime: read and compile the original.
    pub plain: u64,
    /// Empty cache.
    pub cold: u64,
    /// Warm cache.
    pub warm: u64,
    /// One function changed, cache warm with the original.
    pub changed: u64,
    /// `cold / plain`.
    pub cold_ratio: f64,
    /// `warm / plain`.
    pub warm_ratio: f64,
    /// `changed / plain`.
    pub changed_ratio: f64,
    /// `changed / cold`.
    pub changed_vs_cold: f64,
}

/// A copy of `wasm` with a `nop` added at the start of its largest function's code: one
/// function changed, everything else byte for byte the same.
pub fn one_function_changed(wasm: &[u8]) -> anyhow::Result<Vec<u8>> {
    use wasmparser::{Parser, Payload};
    let mut bodies = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload? {
            bodies.push(body.range().len());
        }
    }
    let largest = (0..bodies.len())
        .max_by_key(|&i| bodies[i])
        .context("the module defines no function")?;
    let mut module = wasm_encoder::Module::new();
    let mut code: Option<wasm_encoder::CodeSection> = None;
    let mut index = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        match &payload {
            Payload::Version { .. } => {}
            Payload::CodeSectionStart { .. } => code = Some(wasm_encoder::CodeSection::new()),
            Payload::CodeSectionEntry(body) => {
                let range = body.range();
                let ops = body.get_binary_reader_for_operators()?.original_position();
                let mut bytes = wasm[range.start..ops].to_vec();
                if index == largest {
                    bytes.push(0x01); // nop
                }
                bytes.extend_from_slice(&wasm[ops..range.end]);
                index += 1;
                let section = code.as_mut().context("a body outside the code section")?;
                section.raw(&bytes);
                if index == bodies.len() {
                    module.section(&code.take().expect("just used"));
                }
            }
            Payload::End(_) => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    module.section(&wasm_encoder::RawSection {
                        id,
                        data: &wasm[range],
                    });
                }
            }
        }
    }
    Ok(module.finish())
}

/// Bytes of the code section of `wasm` (0 without one).
pub(crate) fn code_bytes(wasm: &[u8]) -> u64 {
    wasmparser::Parser::new(0)
        .parse_all(wasm)
        .filter_map(Result::ok)
        .find_map(|p| match p {
            wasmparser::Payload::CodeSectionStart { range, .. } => Some(range.len() as u64),
            _ => None,
        })
        .unwrap_or(0)
}

/// Start-up of `path` as `wprof run` does it, up to `_start`, against the cache in `dir`
/// (nanoseconds).
pub(crate) fn start(engine: &Engine, path: &Path, dir: &Path) -> Result<u64, Failure> {
    let t = Instant::now();
    let loaded = crate::prepare::loader::load(path, engine)?;
    let mut cache = CacheSession::open(Some(dir));
    let mut prepared = instrument::prepare(
        &loaded,
        path,
        &ProbePlan::default(),
        &crate::prepare::instrument::FunctionRules::all(),
        &mut cache,
        &crate::progress::Progress::none(),
    )
    .map_err(|e| Failure::input(format!("cannot instrument {}: {e}", path.display())))?;
    let module = crate::prepare::compile::compile(engine, &mut prepared, &loaded, &mut cache, true)
        .map_err(|e| Failure::input(format!("cannot compile {}: {e}", path.display())))?;
    drop(cache);
    let elapsed = t.elapsed().as_nanos() as u64;
    drop(module);
    Ok(elapsed)
}

fn bench_module(engine: &Engine, path: &Path, runs: u32) -> Result<StartupBench, Failure> {
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let original = std::fs::read(path)
        .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
    let changed_path = scratch.path().join(
        path.file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "module.wasm".into()),
    );
    let changed = one_function_changed(&original)
        .map_err(|e| Failure::input(format!("cannot change {}: {e}", path.display())))?;
    std::fs::write(&changed_path, changed).context("failed to write the changed module")?;
    let (mut plain, mut cold, mut warm, mut one) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        let t = Instant::now();
        let bytes = std::fs::read(path).context("failed to read the module")?;
        let m = Module::new(engine, &bytes)
            .map_err(|e| Failure::input(format!("cannot compile {}: {e}", path.display())))?;
        plain.push(t.elapsed().as_nanos() as u64);
        drop(m);
        let dir = scratch.path().join(format!("cache-{run}"));
        cold.push(start(engine, path, &dir)?);
        warm.push(start(engine, path, &dir)?);
        one.push(start(engine, &changed_path, &dir)?);
    }
    let (plain, cold, warm, changed) = (median(plain), median(cold), median(warm), median(one));
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    Ok(StartupBench {
        module: path.display().to_string(),
        code_bytes: code_bytes(&original),
        runs,
        plain,
        cold,
        warm,
        changed,
        cold_ratio: ratio(cold, plain),
        warm_ratio: ratio(warm, plain),
        changed_ratio: ratio(changed, plain),
        changed_vs_cold: ratio(changed, cold),
    })
}

impl BenchCommand {
    fn modules(&self) -> Result<Vec<PathBuf>, Failure> {
        if !self.modules.is_empty() {
            return Ok(self.modules.clone());
        }
        let dir = Path::new("samples");
        let largest = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {} (give modules to measure)", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .ok_or_else(|| Failure::input("no .wasm in ./samples (give modules to measure)"))?;
        Ok(vec![largest])
    }

    /// Runs the benchmark; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let engine = crate::prepare::compiled::new_engine_caching()?;
        let mut results = Vec::new();
        for path in self.modules()? {
            if !self.json {
                crate::say!("wprof cache bench: {} ...", path.display());
            }
            results.push(bench_module(&engine, &path, self.runs)?);
        }
        if self.json {
            print_json(&results);
            return Ok(0);
        }
        println!(
            "start-up to _start, median of {} run(s); ratios to plain wasmtime compiling the original\n",
            self.runs
        );
        println!(
            "{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7} {:>8} {:>13}",
            "module",
            "code",
            "plain",
            "cold",
            "warm",
            "changed",
            "cold/",
            "warm/",
            "changed/",
            "changed/cold"
        );
        for r in &results {
            let name = Path::new(&r.module)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| r.module.clone());
            println!(
                "{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6.2}x {:>6.2}x {:>7.2}x {:>12.2}x",
                name,
                crate::display::format_size(r.code_bytes),
                format_ns(r.plain),
                format_ns(r.cold),
                format_ns(r.warm),
                format_ns(r.changed),
                r.cold_ratio,
                r.warm_ratio,
                r.changed_ratio,
                r.changed_vs_cold
            );
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_function_changes_and_the_module_stays_valid() {
        let wasm = wat::parse_str(
            r#"(module
                 (func $small)
                 (func $large (result i32) (local i32) i32.const 1 i32.const 2 i32.add)
                 (data "x")
                 (@custom "note" "kept"))"#,
        )
        .unwrap();
        let changed = one_function_changed(&wasm).unwrap();
        assert_eq!(changed.len(), wasm.len() + 1);
        wasmparser::Validator::new().validate_all(&changed).unwrap();
        let text = wasmprinter::print_bytes(&changed).unwrap();
        assert!(text.contains("nop"), "{text}");
        assert_eq!(
            wasmprinter::print_bytes(&wasm)
                .unwrap()
                .matches("nop")
                .count(),
            0
        );
    }
}
