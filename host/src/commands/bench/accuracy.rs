//! `wprof bench --accuracy`: how close each mode's self-time distribution is to the truth.
//!
//! The truth is Linux `perf` sampling the uninstrumented program (`perf record -e cpu-clock
//! -g` of `WPROF=0 wprof run` with the engine's perf map, so perf names the wasm functions).
//! Each sample is charged to the innermost wasm function on its stack (time in libcalls
//! such as `memory.fill` is that function's own, as in wprof); samples inside a WASI call
//! and samples outside wasm are left out, as are wprof's import nodes: both distributions
//! are over the module's own functions. The distance between two distributions is their
//! total variation, ½·Σ|share_a − share_b|: 0 for identical profiles, 1 for disjoint ones.
//! perf against itself on a second run gives the noise floor.
//!
//! Each program is also timed as a whole process in every mode against `WPROF=0`, caches
//! warm, in the same run.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use wprof_agent::ProbeMode;

use crate::exit::{Failure, MISSING_TOOL, PROGRAM_FAILED};
use crate::profile::Profile;
use crate::stats::median;

/// One program of the benchmark set, as `programs.json` describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct Program {
    /// A short name.
    pub name: String,
    /// The module, relative to the list's folder.
    pub wasm: PathBuf,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// A folder preopened as `/data`, relative to the list's folder.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Folders preopened, as `HOST::GUEST` (host relative to the list's folder).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// The program exits at once (a start-up measurement): too short to sample, skipped.
    #[serde(default)]
    pub startup_only: bool,
}

impl Program {
    /// The `--dir` values of a `wprof run` of this program.
    fn dir_args(&self) -> Vec<String> {
        let mut out: Vec<String> = self.dirs.clone();
        if let Some(dir) = &self.dir {
            let data = format!("{}::/data", dir.display());
            if !out.iter().any(|d| d.ends_with("::/data")) {
                out.push(data);
            }
        }
        out
    }
}

/// Reads a program list; paths become relative to the list's folder.
pub fn read_programs(path: &Path) -> Result<Vec<Program>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
    let mut programs: Vec<Program> = serde_json::from_str(&text)
        .map_err(|e| Failure::input(format!("{} is not a program list: {e}", path.display())))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base)
        .map_err(|e| Failure::input(format!("cannot resolve {}: {e}", base.display())))?;
    for p in &mut programs {
        p.wasm = base.join(&p.wasm);
        p.dir = p.dir.as_ref().map(|d| base.join(d));
        for d in &mut p.dirs {
            let (host, guest) = d.split_once("::").unwrap_or((d.as_str(), d.as_str()));
            *d = format!("{}::{guest}", base.join(host).display());
        }
    }
    programs.retain(|p| !p.startup_only);
    Ok(programs)
}

/// Self time (or samples) per function id.
type Distribution = HashMap<u32, f64>;

/// The total variation distance between two distributions, each normalized to 1.
pub fn distance(a: &Distribution, b: &Distribution) -> f64 {
    let (ta, tb): (f64, f64) = (a.values().sum(), b.values().sum());
    if ta <= 0.0 || tb <= 0.0 {
        return 1.0;
    }
    let mut ids: Vec<u32> = a.keys().chain(b.keys()).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    0.5 * ids
        .iter()
        .map(|id| {
            (a.get(id).copied().unwrap_or(0.0) / ta - b.get(id).copied().unwrap_or(0.0) / tb).abs()
        })
        .sum::<f64>()
}

/// The name wasmtime's perf map gives a function with name-section name `raw`.
fn perf_name(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return d.to_string();
    }
    if let Ok(symbol) = cpp_demangle::Symbol::new(raw) {
        if let Ok(text) = symbol.demangle() {
            return text;
        }
    }
    raw.to_string()
}

/// perf's samples per function: each sample of `perf script -F ip,sym` output charged to
/// the innermost frame that names a function of the module (`names`: perf name → id, or a
/// `function[N]` symbol), unless a WASI host function is inside it.
pub fn perf_distribution(script: &str, names: &HashMap<String, u32>) -> Distribution {
    let mut counts = Distribution::new();
    for sample in script.split("\n\n") {
        for frame in sample.lines().skip(1) {
            let Some((_, symbol)) = frame.trim_start().split_once(' ') else {
                continue;
            };
            let symbol = symbol.trim();
            if symbol.contains("wasmtime_wasi::") || symbol.contains("wasi_snapshot_preview1") {
                break;
            }
            let id = names
                .get(symbol)
                .copied()
                .or_else(|| function_index(symbol));
            if let Some(id) = id {
                *counts.entry(id).or_default() += 1.0;
                break;
            }
        }
    }
    counts
}

/// `N` of a `wasm[0]::function[N]...` symbol.
fn function_index(symbol: &str) -> Option<u32> {
    let rest = symbol.strip_prefix("wasm[0]::function[")?;
    rest[..rest.find(']')?].parse().ok()
}

/// One mode's figures on one program.
#[derive(Debug, Serialize)]
pub struct ModeAccuracy {
    /// The mode.
    pub mode: &'static str,
    /// Total variation distance to perf's distribution.
    pub distance: f64,
    /// Median whole-process wall time / `WPROF=0`'s, caches warm.
    pub overhead: f64,
    /// Promises the profiles broke (see `Profile::violations`), over every run.
    pub violations: usize,
    /// The first of them.
    pub first_violation: Option<String>,
}

/// One program's figures.
#[derive(Debug, Serialize)]
pub struct ProgramAccuracy {
    /// The program.
    pub name: String,
    /// perf against itself (a second run): the noise floor.
    pub perf_noise: f64,
    /// perf's samples charged to the module's functions.
    pub perf_samples: u64,
    /// Median whole-process wall time with `WPROF=0`, in nanoseconds.
    pub wprof_off: u64,
    /// Per mode.
    pub modes: Vec<ModeAccuracy>,
    /// The functions of largest share in perf: name, perf's share, each mode's share.
    pub top: Vec<(String, f64, Vec<f64>)>,
}

/// `perf` on the PATH, able to sample.
pub fn find_perf() -> Result<PathBuf, Failure> {
    let perf = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("perf"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| Failure {
            code: MISSING_TOOL,
            message: "perf is not installed (Debian: apt-get install linux-perf); \
                      `wprof bench --accuracy` compares with its samples"
                .into(),
        })?;
    let ok = Command::new(&perf)
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(Failure {
            code: MISSING_TOOL,
            message: format!(
                "{} cannot record cpu-clock samples here (see /proc/sys/kernel/perf_event_paranoid)",
                perf.display()
            ),
        });
    }
    Ok(perf)
}

/// A `wprof run` of `program` in `scratch`, with `envs`, and `extra` flags.
fn wprof_run(program: &Program, scratch: &Path, envs: &[(&str, &str)], extra: &[&str]) -> Command {
    let exe = std::env::current_exe().expect("the running binary has a path");
    let mut cmd = Command::new(exe);
    cmd.current_dir(scratch)
        .env_remove("WPROF")
        .env_remove("WPROF_MODE")
        .env("WPROF_CACHE_DIR", scratch.join("cache"))
        .arg("run")
        .args(extra);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    for dir in program.dir_args() {
        cmd.arg("--dir").arg(dir);
    }
    cmd.arg(&program.wasm).arg("--").args(&program.args);
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd
}

/// Runs `cmd` to its end: its wall time; a failure names the program.
fn timed(mut cmd: Command, program: &Program) -> Result<u64, Failure> {
    cmd.stderr(Stdio::piped());
    let started = Instant::now();
    let out = cmd.output().context("cannot start a benchmark process")?;
    let took = started.elapsed().as_nanos() as u64;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Failure {
            code: PROGRAM_FAILED,
            message: format!(
                "{} failed ({}): {}",
                program.name,
                out.status,
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
            ),
        });
    }
    Ok(took)
}

/// perf's distribution of one uninstrumented run.
fn perf_truth(
    perf: &Path,
    program: &Program,
    scratch: &Path,
    run: usize,
    names: &HashMap<String, u32>,
) -> Result<Distribution, Failure> {
    let data = scratch.join(format!("perf-{run}.data"));
    let inner = wprof_run(
        program,
        scratch,
        &[("WPROF", "0"), ("WPROF_PERFMAP", "1")],
        &[],
    );
    let mut cmd = Command::new(perf);
    cmd.current_dir(scratch)
        .args(["record", "-q", "-e", "cpu-clock", "-F", "4000", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    timed(cmd, program)?;
    let script = Command::new(perf)
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .context("cannot run perf script")?;
    Ok(perf_distribution(
        &String::from_utf8_lossy(&script.stdout),
        names,
    ))
}

/// Self time per local function of a profile.
fn self_times(profile: &Profile) -> Distribution {
    profile
        .functions
        .iter()
        .filter(|f| f.kind == "local")
        .map(|f| (f.id, f.self_time as f64))
        .collect()
}

/// Measures one program: perf twice, then every mode.
pub fn measure(perf: &Path, program: &Program, runs: u32) -> Result<ProgramAccuracy, Failure> {
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let dir = scratch.path();

    // Warm the cache in every mode; the cost profile names every function that ran.
    let mut profiles = BTreeMap::new();
    for mode in ProbeMode::ALL {
        let out = dir.join(format!("{}.wprof", mode.name()));
        let out_arg = out.to_string_lossy().into_owned();
        timed(
            wprof_run(
                program,
                dir,
                &[],
                &["-q", "--mode", mode.name(), "-o", &out_arg],
            ),
            program,
        )?;
        profiles.insert(mode.name(), out);
    }
    let cost = Profile::read(&profiles["cost"])?;
    let names: HashMap<String, u32> = cost
        .functions
        .iter()
        .filter(|f| f.kind == "local")
        .map(|f| (perf_name(&f.name), f.id))
        .collect();

    let truth = perf_truth(perf, program, dir, 0, &names)?;
    let again = perf_truth(perf, program, dir, 1, &names)?;

    let mut off = Vec::new();
    let mut walls: Vec<Vec<u64>> = ProbeMode::ALL.iter().map(|_| Vec::new()).collect();
    let mut distributions: Vec<Vec<Distribution>> =
        ProbeMode::ALL.iter().map(|_| Vec::new()).collect();
    let mut violations: Vec<Vec<String>> = ProbeMode::ALL.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        off.push(timed(
            wprof_run(program, dir, &[("WPROF", "0")], &[]),
            program,
        )?);
        for (i, mode) in ProbeMode::ALL.iter().enumerate() {
            let out = &profiles[mode.name()];
            let out_arg = out.to_string_lossy().into_owned();
            walls[i].push(timed(
                wprof_run(
                    program,
                    dir,
                    &[],
                    &["-q", "--mode", mode.name(), "-o", &out_arg],
                ),
                program,
            )?);
            let profile = Profile::read(out)?;
            violations[i].extend(profile.violations());
            distributions[i].push(self_times(&profile));
        }
    }
    let wprof_off = median(off);
    let modes: Vec<ModeAccuracy> = ProbeMode::ALL
        .iter()
        .enumerate()
        .map(|(i, mode)| {
            let distance = median(
                distributions[i]
                    .iter()
                    .map(|d| distance(d, &truth))
                    .collect(),
            );
            ModeAccuracy {
                mode: mode.name(),
                distance,
                overhead: median(walls[i].clone()) as f64 / wprof_off.max(1) as f64,
                violations: violations[i].len(),
                first_violation: violations[i].first().cloned(),
            }
        })
        .collect();

    let total: f64 = truth.values().sum();
    let mut ranked: Vec<(u32, f64)> = truth.iter().map(|(id, n)| (*id, n / total)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let name_of: HashMap<u32, &str> = cost
        .functions
        .iter()
        .map(|f| (f.id, f.name.as_str()))
        .collect();
    let top = ranked
        .iter()
        .take(5)
        .map(|(id, share)| {
            let shares = distributions
                .iter()
                .map(|ds| {
                    let d = ds.last().expect("at least one run");
                    let t: f64 = d.values().sum();
                    d.get(id).copied().unwrap_or(0.0) / t.max(1e-9)
                })
                .collect();
            (
                perf_name(name_of.get(id).copied().unwrap_or("?")),
                *share,
                shares,
            )
        })
        .collect();
    Ok(ProgramAccuracy {
        name: program.name.clone(),
        perf_noise: distance(&truth, &again),
        perf_samples: total as u64,
        wprof_off,
        modes,
        top,
    })
}

/// The table `wprof bench --accuracy` prints.
pub fn table(results: &[ProgramAccuracy], runs: u32) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "distance to perf (total variation of self-time shares over the module's functions; \
         0% = the same profile), median of {runs} run(s);\nperf noise = perf against its own \
         second run; overhead = whole process / WPROF=0, caches warm"
    );
    let _ = write!(
        out,
        "{:<12} {:>8} {:>10}",
        "program", "samples", "perf noise"
    );
    for mode in ProbeMode::ALL {
        let _ = write!(
            out,
            " {:>12} {:>9}",
            format!("{} dist", mode.name()),
            "overhead"
        );
    }
    out.push('\n');
    for r in results {
        let _ = write!(
            out,
            "{:<12} {:>8} {:>9.1}%",
            r.name,
            r.perf_samples,
            r.perf_noise * 100.0
        );
        for m in &r.modes {
            let _ = write!(out, " {:>11.1}% {:>8.2}x", m.distance * 100.0, m.overhead);
        }
        out.push('\n');
    }
    for r in results {
        for m in r.modes.iter().filter(|m| m.violations > 0) {
            let _ = writeln!(
                out,
                "\n{} in {} mode: {} broken promises in the profiles, the first: {}",
                r.name,
                m.mode,
                m.violations,
                m.first_violation.as_deref().unwrap_or("")
            );
        }
    }
    for r in results {
        let _ = writeln!(
            out,
            "\n{}: largest shares in perf, and in each mode",
            r.name
        );
        let _ = write!(out, "  {:>7}", "perf");
        for mode in ProbeMode::ALL {
            let _ = write!(out, " {:>7}", mode.name());
        }
        out.push_str("  function\n");
        for (name, share, shares) in &r.top {
            let _ = write!(out, "  {:>6.1}%", share * 100.0);
            for s in shares {
                let _ = write!(out, " {:>6.1}%", s * 100.0);
            }
            let shown: String = name.chars().take(70).collect();
            let _ = writeln!(out, "  {shown}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_is_total_variation_of_shares() {
        let a: Distribution = [(1, 3.0), (2, 1.0)].into();
        let b: Distribution = [(1, 30.0), (2, 10.0)].into();
        assert_eq!(distance(&a, &b), 0.0);
        let c: Distribution = [(3, 5.0)].into();
        assert_eq!(distance(&a, &c), 1.0);
        let d: Distribution = [(1, 1.0), (2, 1.0)].into();
        assert!((distance(&a, &d) - 0.25).abs() < 1e-12);
        assert_eq!(distance(&a, &Distribution::new()), 1.0);
    }

    #[test]
    fn perf_samples_go_to_the_innermost_module_function() {
        let script = "\
wprof 1
\t    7f00 __memset_avx2_unaligned_erms
\t    1234 Rect::area()
\t    5678 main

wprof 2
\t    9999 wasm[0]::function[7]::anon
\t    5678 main

wprof 3
\t    aaaa wasmtime_wasi::p1::fd_write
\t    1234 Rect::area()

wprof 4
\t    bbbb regalloc2::ion::run
";
        let names: HashMap<String, u32> =
            [("Rect::area()".to_string(), 3), ("main".to_string(), 1)].into();
        let d = perf_distribution(script, &names);
        assert_eq!(d.get(&3), Some(&1.0), "memset is its caller's");
        assert_eq!(d.get(&7), Some(&1.0), "an unnamed function by index");
        assert_eq!(
            d.len(),
            2,
            "WASI calls and compile time are left out: {d:?}"
        );
    }

    #[test]
    fn perf_names_are_wasmtimes() {
        assert_eq!(perf_name("_ZN4Rect4areaEv"), "Rect::area()");
        assert_eq!(perf_name("main"), "main");
        assert_eq!(perf_name("regexp.(*Regexp).find"), "regexp.(*Regexp).find");
    }
}
