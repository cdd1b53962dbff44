//! `wprof bench --accuracy`: how close each mode's self-time distribution is to the truth.
//!
//! The truth is Linux `perf` sampling the uninstrumented program (`perf record -e cpu-clock
//! -g` of `WPROF=0 wprof run` with the engine's perf map, so perf names the wasm functions).
//! Each sample is charged to the innermost wasm function on its stack (time in libcalls
//! such as `memory.fill` is that function's own, as in wprof); samples inside an import
//! (a WASI call) and samples outside wasm are left out, as are wprof's import nodes: both
//! distributions are over the module's own functions. The distance between two
//! distributions is their total variation, ½·Σ|share_a − share_b|: 0 for identical
//! profiles, 1 for disjoint ones.
//! perf against itself on a second run gives the noise floor.
//!
//! Each program is also timed as a whole process in every mode against `WPROF=0`, caches
//! warm, in the same run. The text printed from the figures is [`super::accuracy_table`]'s.

use std::collections::HashMap;
use std::path::Path;

use crate::settings::Mode;
use anyhow::Context;
use serde::Serialize;

use super::perf::{
    perf_name, perf_of_counted, perf_of_probed, perf_truth, sample_mode_indices, Distribution,
};
use super::process::{write_wasmtime_cache_config, WasmtimeCli};
use super::programs::{timed, wasmtime_run, wprof_run, Program};
use crate::exit::Failure;
use crate::profile::Profile;
use crate::stats::median;

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

/// Whether a mode's `distance` to perf is as close as perf is to itself: within perf's
/// run-to-run distance (`noise`) plus 2 points, or within 5%, whichever is larger.
pub fn within_perf_noise(distance: f64, noise: f64) -> bool {
    distance <= (noise + 0.02).max(0.05)
}

/// One mode's figures on one program.
#[derive(Debug, Serialize)]
pub struct ModeAccuracy {
    /// The mode.
    pub mode: &'static str,
    /// Total variation distance to perf's distribution.
    pub distance: f64,
    /// Whether `distance` is within perf's noise plus 2 points, or 5% (see
    /// [`within_perf_noise`]).
    pub within_perf_noise: bool,
    /// Median whole-process wall time / `WPROF=0`'s, caches warm.
    pub overhead: f64,
    /// The profile's time in the module's functions (the sum of their self times) over
    /// perf's (its samples there times the sampling period), median over the runs: how
    /// far the mode's times are from the program's own in size, which the shares (the
    /// distance) leave out. `None` in cost mode (instructions, not time).
    pub time_over_perf: Option<f64>,
    /// Promises the profiles broke (see `Profile::violations`), over every run.
    pub violations: usize,
    /// The first of them.
    pub first_violation: Option<String>,
    /// The functions whose shares differ most from perf's, largest first (of the last
    /// run): name, perf's share, this mode's share. Where the distance comes from.
    pub largest_differences: Vec<(String, f64, f64)>,
}

/// One program's figures.
#[derive(Debug, Serialize)]
pub struct ProgramAccuracy {
    /// The program.
    pub name: String,
    /// The `--only`/`--exclude` flags every profiled run had, if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selection: Vec<String>,
    /// perf against itself (a second run): the noise floor.
    pub perf_noise: f64,
    /// perf's samples charged to the module's functions.
    pub perf_samples: u64,
    /// Median whole-process wall time with `WPROF=0`, in nanoseconds.
    pub wprof_off: u64,
    /// Median whole-process wall time of `wasmtime run`, its compilation cache warm, in
    /// nanoseconds; `None` without the wasmtime CLI.
    pub wasmtime_run: Option<u64>,
    /// Per mode.
    pub modes: Vec<ModeAccuracy>,
    /// Time mode's floor: the median whole process with time mode's probes doing nothing
    /// but reading the clock (see [`crate::run::time::probe_log::FLOOR_VARIABLE`]), over
    /// `WPROF=0`'s. Time mode's overhead over this is what its bookkeeping costs. `None`
    /// when time mode is not among the modes measured.
    pub time_floor: Option<f64>,
    /// perf of the program with sample mode's probes against perf of the program without
    /// (one run): how much the probes move the program's time between its functions,
    /// which no attribution of samples undoes (see [`perf_of_probed`]); `None` where the
    /// module does not parse.
    pub probed_perf: Option<f64>,
    /// perf of the program as stack mode runs it, its counters counting and its ticks
    /// nearly off (one a second), against perf of the program without (one run): how much
    /// the counters move the program's time between its functions, which stack mode's
    /// sampler cannot undo (see [`perf_of_counted`]); `None` when stack mode is not
    /// measured.
    pub counted_perf: Option<f64>,
    /// The functions of largest share in perf.
    pub top: Vec<TopFunction>,
}

/// One of a program's functions of largest share in perf, and its share elsewhere.
#[derive(Debug, Clone, Serialize)]
pub struct TopFunction {
    pub name: String,
    /// Its share in perf.
    pub perf: f64,
    /// In perf of the probed program.
    pub probed: Option<f64>,
    /// In perf of the counted program (stack mode's counters).
    pub counted: Option<f64>,
    /// In each mode's profile.
    pub modes: Vec<f64>,
}

/// Self time per local function of a profile, as perf sees the program: an interpreter's
/// script functions' time is its eval loop's. (An import's time is left out: perf's
/// `cpu-clock` sees neither the time a call waits nor the engine's helper threads, where
/// wasmtime-wasi does file I/O, so charging it to the callers as perf would measure that
/// instead.)
fn self_times(profile: &Profile) -> Distribution {
    let mut out: Distribution = profile
        .functions
        .iter()
        .filter(|f| f.kind == "local")
        .map(|f| (f.id, f.self_time as f64))
        .collect();
    let eval = profile
        .functions
        .iter()
        .find(|f| f.kind == "local" && crate::languages::EVAL_LOOPS.contains(&f.name.as_str()));
    if let Some(eval) = eval {
        let scripts: u64 = profile
            .functions
            .iter()
            .filter(|f| f.is_script())
            .map(|f| f.self_time)
            .sum();
        *out.entry(eval.id).or_default() += scripts as f64;
    }
    out
}

/// Measures one program: perf twice, then each of `modes`.
pub fn measure(
    perf: &Path,
    program: &Program,
    modes: &[Mode],
    runs: u32,
    wasmtime: Option<&WasmtimeCli>,
    selection: &[String],
    top: usize,
) -> Result<ProgramAccuracy, Failure> {
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let dir = scratch.path();
    let cache_config = dir.join("wasmtime-cache.toml");
    let wasmtime_run = match wasmtime {
        Some(cli) => {
            write_wasmtime_cache_config(&cache_config, &dir.join("wasmtime-cache"))?;
            let run = move || wasmtime_run(program, &cli.path, dir, &cache_config);
            // Its cache warmed first, as wprof's is below.
            timed(run(), program)?;
            Some(run)
        }
        None => None,
    };

    let profile_of = |mode: Mode| dir.join(format!("{}.wprof", mode.name()));
    let floor_profile = dir.join("floor.wprof").to_string_lossy().into_owned();
    let profiled_with = |mode: Mode, out: &str, env: &[(&str, &str)]| {
        let mut args = vec!["-q", "--mode", mode.name(), "-o", out];
        // A selection chooses probes: stack mode has none to choose.
        if !mode.walks_stacks() {
            args.extend(selection.iter().map(String::as_str));
        }
        wprof_run(program, dir, env, &args)
    };
    let profiled = |mode: Mode| profiled_with(mode, &profile_of(mode).to_string_lossy(), &[]);
    let floor = || {
        profiled_with(
            Mode::Time,
            &floor_profile,
            &[(crate::run::time::probe_log::FLOOR_VARIABLE, "1")],
        )
    };
    // Warm the cache in every mode measured; the cost profile (made if cost mode is not
    // measured) names every function that ran.
    for mode in modes
        .iter()
        .chain((!modes.contains(&Mode::Cost)).then_some(&Mode::Cost))
    {
        timed(profiled(*mode), program)?;
    }
    let cost = Profile::read(&profile_of(Mode::Cost))?;
    let names: HashMap<String, u32> = cost
        .functions
        .iter()
        .filter(|f| f.kind == "local")
        .map(|f| (perf_name(&f.name), f.id))
        .collect();

    let truth = perf_truth(perf, program, dir, 0, &names)?;
    let again = perf_truth(perf, program, dir, 1, &names)?;
    let indices = std::fs::read(&program.wasm)
        .ok()
        .and_then(|module| sample_mode_indices(&module));
    let probed = match indices {
        Some(indices) => {
            let out = dir.join("perf-probed.wprof");
            let probed = profiled_with(
                Mode::Sample,
                &out.to_string_lossy(),
                &[("WPROF_PERFMAP", "1")],
            );
            Some(perf_of_probed(perf, program, probed, dir, &names, indices)?)
        }
        None => None,
    };
    // Stack mode's counters alone: its ticks a second apart.
    let counted = match indices.filter(|_| modes.contains(&Mode::Stack)) {
        Some(indices) => {
            let out = dir.join("perf-counted.wprof");
            let counted = profiled_with(
                Mode::Stack,
                &out.to_string_lossy(),
                &[
                    ("WPROF_PERFMAP", "1"),
                    ("WPROF_SAMPLE_PERIOD_US", "1000000"),
                ],
            );
            let functions = indices.functions;
            Some(perf_of_counted(
                perf, program, counted, dir, &names, functions,
            )?)
        }
        None => None,
    };

    /// One mode's runs.
    #[derive(Default)]
    struct Runs {
        walls: Vec<u64>,
        distributions: Vec<Distribution>,
        /// Nanoseconds in the module's functions (modes that measure time).
        module_ns: Vec<u64>,
        violations: Vec<String>,
    }
    let mut off = Vec::new();
    let mut plain = Vec::new();
    let mut floors = Vec::new();
    let mut by_mode: Vec<Runs> = modes.iter().map(|_| Runs::default()).collect();
    for _ in 0..runs {
        off.push(timed(
            wprof_run(program, dir, &[("WPROF", "0")], &[]),
            program,
        )?);
        if let Some(run) = &wasmtime_run {
            plain.push(timed(run(), program)?);
        }
        for (&mode, runs) in modes.iter().zip(&mut by_mode) {
            runs.walls.push(timed(profiled(mode), program)?);
            let profile = Profile::read(&profile_of(mode))?;
            runs.violations.extend(profile.violations());
            let distribution = self_times(&profile);
            if profile.unit == "ns" {
                runs.module_ns
                    .push(distribution.values().sum::<f64>() as u64);
            }
            runs.distributions.push(distribution);
        }
        if modes.contains(&Mode::Time) {
            floors.push(timed(floor(), program)?);
        }
    }
    let wprof_off = median(off);
    let total: f64 = truth.values().sum();
    let perf_ns = total * 1e9 / f64::from(super::perf::SAMPLES_PER_SECOND);
    // Shown by the names the reports use: Go's own, or demangled.
    let mut shown = cost.functions.clone();
    if let Ok(module) = std::fs::read(&program.wasm) {
        crate::report::source::rename(&mut shown, &module);
    }
    let name_of: HashMap<u32, &str> = shown.iter().map(|f| (f.id, f.name.as_str())).collect();
    // Each function's share of its distribution.
    let shares = |d: &Distribution| -> Distribution {
        let t: f64 = d.values().sum::<f64>().max(1e-9);
        d.iter().map(|(id, v)| (*id, v / t)).collect()
    };
    let share = |d: &Distribution, id: u32| d.get(&id).copied().unwrap_or(0.0);
    let truth_shares = shares(&truth);
    let probed_shares = probed.as_ref().map(shares);
    let counted_shares = counted.as_ref().map(shares);
    let last_shares: Vec<Distribution> = by_mode
        .iter()
        .map(|runs| shares(runs.distributions.last().expect("at least one run")))
        .collect();
    let largest_differences = |d: &Distribution| {
        let mut ids: Vec<u32> = d.keys().chain(truth_shares.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut differences: Vec<(u32, f64, f64)> = ids
            .into_iter()
            .map(|id| (id, share(&truth_shares, id), share(d, id)))
            .collect();
        differences.sort_by(|a, b| (b.2 - b.1).abs().total_cmp(&(a.2 - a.1).abs()));
        differences
            .into_iter()
            .take(3)
            .map(|(id, perf, mode)| {
                let name = perf_name(name_of.get(&id).copied().unwrap_or("?"));
                (name, perf, mode)
            })
            .collect()
    };
    let perf_noise = distance(&truth, &again);
    let measured: Vec<ModeAccuracy> = modes
        .iter()
        .zip(&by_mode)
        .zip(&last_shares)
        .map(|((mode, runs), last)| {
            let to_perf = median(
                runs.distributions
                    .iter()
                    .map(|d| distance(d, &truth))
                    .collect(),
            );
            ModeAccuracy {
                mode: mode.name(),
                distance: to_perf,
                within_perf_noise: within_perf_noise(to_perf, perf_noise),
                overhead: median(runs.walls.clone()) as f64 / wprof_off.max(1) as f64,
                time_over_perf: (!runs.module_ns.is_empty() && perf_ns > 0.0)
                    .then(|| median(runs.module_ns.clone()) as f64 / perf_ns),
                violations: runs.violations.len(),
                first_violation: runs.violations.first().cloned(),
                largest_differences: largest_differences(last),
            }
        })
        .collect();

    let mut ranked: Vec<(u32, f64)> = truth.iter().map(|(id, n)| (*id, n / total)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let top = ranked
        .iter()
        .take(top)
        .map(|(id, perf_share)| TopFunction {
            name: perf_name(name_of.get(id).copied().unwrap_or("?")),
            perf: *perf_share,
            probed: probed_shares.as_ref().map(|p| share(p, *id)),
            counted: counted_shares.as_ref().map(|c| share(c, *id)),
            modes: last_shares.iter().map(|last| share(last, *id)).collect(),
        })
        .collect();
    Ok(ProgramAccuracy {
        name: program.name.clone(),
        selection: selection.to_vec(),
        perf_noise,
        probed_perf: probed.as_ref().map(|p| distance(p, &truth)),
        counted_perf: counted.as_ref().map(|c| distance(c, &truth)),
        perf_samples: total as u64,
        wprof_off,
        wasmtime_run: (!plain.is_empty()).then(|| median(plain)),
        modes: measured,
        time_floor: (!floors.is_empty()).then(|| median(floors) as f64 / wprof_off.max(1) as f64),
        top,
    })
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
    fn within_perf_noise_is_noise_plus_two_points_or_five_percent() {
        assert!(within_perf_noise(0.05, 0.0));
        assert!(!within_perf_noise(0.051, 0.02));
        assert!(within_perf_noise(0.12, 0.10));
        assert!(!within_perf_noise(0.121, 0.10));
    }
}
