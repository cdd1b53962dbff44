//! The text `wprof bench --accuracy` prints from its figures ([`super::accuracy`]): the
//! table of distances and overheads, a summary per mode, broken promises, and each
//! program's largest functions side by side.

use super::accuracy::{ModeAccuracy, ProgramAccuracy};
use crate::settings::Mode;
use crate::stats::median;

/// The table `wprof bench --accuracy` prints.
pub fn table(results: &[ProgramAccuracy], runs: u32) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "distance to perf (total variation of self-time shares over the module's functions; \
         0% = the same profile), median of {runs} run(s);\nperf noise = perf against its own \
         second run; probed = perf of the program with sample mode's probes against perf \
         without (one run): what the probes themselves move, which no sampler undoes; \
         counted = the same with stack mode's counters (its ticks a second apart); overhead = \
         whole process / WPROF=0, caches warm; off/wasmtime = WPROF=0 / `wasmtime run` (its \
         cache warm), whole processes;\ntime floor = time mode's probes \
         doing nothing but reading the clock, / WPROF=0; time/floor = time mode's overhead \
         over it;\nbelow, times = the mode's time in the module's functions / perf's (its \
         samples there x the period): whether the times are the program's in size"
    );
    if let Some(r) = results.iter().find(|r| !r.selection.is_empty()) {
        let _ = writeln!(
            out,
            "every profiled run with `{}`: unprobed functions are their callers' (perf's \
             shares of them count against the distance)",
            r.selection.join(" ")
        );
    }
    let modes = measured_modes(results);
    let _ = write!(
        out,
        "{:<12} {:>8} {:>10} {:>7} {:>7} {:>13}",
        "program", "samples", "perf noise", "probed", "counted", "off/wasmtime"
    );
    for mode in &modes {
        let _ = write!(out, " {:>12} {:>9}", format!("{mode} dist"), "overhead");
    }
    let _ = write!(out, " {:>10} {:>10}", "time floor", "time/floor");
    out.push('\n');
    for r in results {
        let _ = write!(
            out,
            "{:<12} {:>8} {:>9.1}% {:>7} {:>7} {:>13}",
            r.name,
            r.perf_samples,
            r.perf_noise * 100.0,
            percent(r.probed_perf),
            percent(r.counted_perf),
            r.wasmtime_run.map_or("-".to_string(), |w| format!(
                "{:.2}x",
                r.wprof_off as f64 / w.max(1) as f64
            ))
        );
        for m in &r.modes {
            let _ = write!(out, " {:>11.1}% {:>8.2}x", m.distance * 100.0, m.overhead);
        }
        let time = r.modes.iter().find(|m| m.mode == Mode::Time.name());
        let (floor, over_floor) = match (r.time_floor, time) {
            (Some(floor), Some(time)) => (
                format!("{floor:.2}x"),
                format!("{:.2}x", time.overhead / floor.max(1e-9)),
            ),
            _ => ("-".to_string(), "-".to_string()),
        };
        let _ = write!(out, " {floor:>10} {over_floor:>10}");
        out.push('\n');
    }
    summary(&mut out, results, &modes);
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
            "\n{}: largest shares in perf, in perf of the probed and the counted program, and \
             in each mode",
            r.name
        );
        let _ = write!(out, "  {:>7} {:>7} {:>7}", "perf", "probed", "counted");
        for mode in &modes {
            let _ = write!(out, " {mode:>7}");
        }
        out.push_str("  function\n");
        for f in &r.top {
            let _ = write!(
                out,
                "  {:>6.1}% {:>7} {:>7}",
                f.perf * 100.0,
                percent(f.probed),
                percent(f.counted)
            );
            for s in &f.modes {
                let _ = write!(out, " {:>6.1}%", s * 100.0);
            }
            let shown: String = f.name.chars().take(70).collect();
            let _ = writeln!(out, "  {shown}");
        }
        let _ = writeln!(out, "  largest differences, perf's share -> the mode's:");
        for m in &r.modes {
            let shown: Vec<String> = m
                .largest_differences
                .iter()
                .map(|(name, perf, mode)| {
                    let name: String = name.chars().take(40).collect();
                    format!("{name} {:.1}% -> {:.1}%", perf * 100.0, mode * 100.0)
                })
                .collect();
            let size = m
                .time_over_perf
                .map_or(String::new(), |r| format!("times {r:.2}x perf's; "));
            let _ = writeln!(out, "  {:>8}: {size}{}", m.mode, shown.join("; "));
        }
    }
    out
}

/// The modes measured, in the order they ran: every program measured the same.
fn measured_modes(results: &[ProgramAccuracy]) -> Vec<&'static str> {
    results
        .first()
        .map(|r| r.modes.iter().map(|m| m.mode).collect())
        .unwrap_or_default()
}

/// Per mode, over every program: on how many its distance is within perf's noise (and
/// which not), and the range and median of its overheads.
fn summary(out: &mut String, results: &[ProgramAccuracy], modes: &[&str]) {
    use std::fmt::Write;
    if results.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "per mode, over the {} program(s): within perf's noise plus 2 points (or 5%), and \
         overhead (lowest-highest, median)",
        results.len()
    );
    for (i, mode) in modes.iter().enumerate() {
        let of_mode: Vec<(&str, &ModeAccuracy)> = results
            .iter()
            .map(|r| (r.name.as_str(), &r.modes[i]))
            .collect();
        let not: Vec<&str> = of_mode
            .iter()
            .filter(|(_, m)| !m.within_perf_noise)
            .map(|(name, _)| *name)
            .collect();
        let overheads: Vec<f64> = of_mode.iter().map(|(_, m)| m.overhead).collect();
        let lowest = overheads.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = overheads.iter().copied().fold(0.0, f64::max);
        let middle = median(overheads);
        let within = format!("{} of {}", of_mode.len() - not.len(), of_mode.len());
        let not = match not.is_empty() {
            true => String::new(),
            false => format!(" (not: {})", not.join(", ")),
        };
        let _ = writeln!(
            out,
            "  {mode:<9} {within}{not}; overhead {lowest:.2}-{highest:.2}x, median {middle:.2}x"
        );
    }
}

/// `12.3%`, or `-` for a figure not measured.
fn percent(share: Option<f64>) -> String {
    share.map_or("-".to_string(), |s| format!("{:.1}%", s * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::bench::accuracy::within_perf_noise;

    fn program(name: &str, noise: f64, modes: &[(&'static str, f64, f64)]) -> ProgramAccuracy {
        ProgramAccuracy {
            name: name.into(),
            selection: Vec::new(),
            perf_noise: noise,
            perf_samples: 1000,
            wprof_off: 1_000_000,
            wasmtime_run: None,
            modes: modes
                .iter()
                .map(|&(mode, distance, overhead)| ModeAccuracy {
                    mode,
                    distance,
                    within_perf_noise: within_perf_noise(distance, noise),
                    overhead,
                    time_over_perf: None,
                    violations: 0,
                    first_violation: None,
                    largest_differences: Vec::new(),
                })
                .collect(),
            time_floor: None,
            probed_perf: None,
            counted_perf: None,
            top: Vec::new(),
        }
    }

    #[test]
    fn the_table_counts_each_modes_programs_within_perfs_noise() {
        let results = [
            program(
                "lua",
                0.07,
                &[("stack", 0.085, 1.26), ("sample", 0.076, 1.43)],
            ),
            program(
                "sqlite",
                0.057,
                &[("stack", 0.080, 1.06), ("sample", 0.103, 1.17)],
            ),
            program(
                "tiny",
                0.062,
                &[("stack", 0.076, 1.24), ("sample", 0.152, 1.14)],
            ),
        ];
        let text = table(&results, 3);
        let line = |mode: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(mode) && l.contains(" of "))
                .unwrap_or_else(|| panic!("no summary line for {mode} in\n{text}"))
                .to_string()
        };
        assert!(text.contains("over the 3 program(s)"), "{text}");
        assert_eq!(
            line("stack").trim(),
            "stack     2 of 3 (not: sqlite); overhead 1.06-1.26x, median 1.24x"
        );
        assert_eq!(
            line("sample").trim(),
            "sample    1 of 3 (not: sqlite, tiny); overhead 1.14-1.43x, median 1.17x"
        );
        // A mode no program ran is not listed.
        assert!(
            !text
                .lines()
                .any(|l| l.trim_start().starts_with("cost") && l.contains(" of ")),
            "{text}"
        );
    }
}
