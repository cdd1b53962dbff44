//! The host's side of a profile (what WASI's functions did during the program's calls to
//! them: wall time, the program thread's on-CPU time, bytes moved), as the text report, the
//! HTML report and the run's summary show it.

use std::fmt::Write;

use crate::display::{format_ns, format_size};
use crate::profile::{HostCallRecord, HostFigures, Profile};

/// The figures of every host call of the profile, added up.
pub fn total(profile: &Profile) -> HostFigures {
    let mut total = HostFigures::default();
    for h in &profile.host_calls {
        total.add(&h.figures);
    }
    total
}

/// The imports by wall time, largest first.
pub fn by_wall_time(profile: &Profile) -> Vec<&HostCallRecord> {
    let mut calls: Vec<&HostCallRecord> = profile.host_calls.iter().collect();
    calls.sort_by_key(|h| std::cmp::Reverse(h.figures.wall_ns));
    calls
}

/// Whether the profile's host calls were timed (every mode but cost, whose profiles hold
/// no time).
fn timed(profile: &Profile) -> bool {
    profile.unit == "ns"
}

/// The summary's line: `host: 16 calls to WASI, 51.84 ms in them (412.30 µs on CPU,
/// 51.43 ms off CPU), 21.8 KiB moved; most in poll_oneoff (51.22 ms)`; `None` without
/// host calls.
pub fn summary_line(profile: &Profile) -> Option<String> {
    if profile.host_calls.is_empty() {
        return None;
    }
    let t = total(profile);
    let mut line = format!("host: {} calls to WASI", t.calls);
    if timed(profile) {
        let _ = write!(
            line,
            ", {} in them{} ({} on CPU, {} off CPU)",
            format_ns(t.wall_ns),
            if profile.samples_host_time() {
                " by the samples"
            } else {
                ""
            },
            format_ns(t.cpu_ns),
            format_ns(t.off_cpu_ns())
        );
    }
    if let Some(bytes) = t.bytes {
        let _ = write!(line, ", {} moved", format_size(bytes));
    }
    if !timed(profile) {
        line.push_str(" (cost mode times nothing)");
    } else if let Some(first) = by_wall_time(profile).first() {
        let _ = write!(
            line,
            "; most in {} ({})",
            short_name(&first.name),
            format_ns(first.figures.wall_ns)
        );
    }
    Some(line)
}

/// `fd_write` for `wasi_snapshot_preview1::fd_write`.
fn short_name(name: &str) -> &str {
    name.rsplit_once("::").map_or(name, |(_, n)| n)
}

/// The text report's table, one row per import by wall time; `None` without host calls.
pub fn table(profile: &Profile) -> Option<String> {
    if profile.host_calls.is_empty() {
        return None;
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Host calls (time in WASI's functions{}; off CPU = the program's thread blocked or \
         waiting):",
        if profile.samples_host_time() {
            ", sampled"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:>11} {:>11} {:>11} {:>12} {:>10} {:>12}  function",
        "wall", "on CPU", "off CPU", "calls", "bytes", "per call"
    );
    let time = |ns: u64| {
        if timed(profile) {
            format_ns(ns)
        } else {
            "-".to_string()
        }
    };
    for h in by_wall_time(profile) {
        let f = &h.figures;
        let _ = writeln!(
            out,
            "{:>11} {:>11} {:>11} {:>12} {:>10} {:>12}  {}",
            time(f.wall_ns),
            time(f.cpu_ns),
            time(f.off_cpu_ns()),
            f.calls,
            f.bytes.map_or_else(|| "-".to_string(), format_size),
            time(f.wall_ns / f.calls.max(1)),
            h.name
        );
    }
    Some(out)
}

/// One line of an import's host figures in one context, for the callers section.
pub fn context_line(profile: &Profile, f: &HostFigures) -> String {
    let mut parts = vec![format!("{} calls", f.calls)];
    if timed(profile) {
        parts.push(format!(
            "{} in the host ({} on CPU, {} off CPU)",
            format_ns(f.wall_ns),
            format_ns(f.cpu_ns),
            format_ns(f.off_cpu_ns())
        ));
    }
    if let Some(bytes) = f.bytes {
        parts.push(format!("{} moved", format_size(bytes)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_profile;

    fn with_host() -> Profile {
        let mut p = sample_profile();
        p.unit = "ns".into();
        p.host_calls = vec![
            HostCallRecord {
                function: 0,
                name: "wasi_snapshot_preview1::fd_write".into(),
                figures: HostFigures {
                    calls: 10,
                    wall_ns: 20_000,
                    cpu_ns: 15_000,
                    bytes: Some(10_000),
                },
            },
            HostCallRecord {
                function: 1,
                name: "wasi_snapshot_preview1::poll_oneoff".into(),
                figures: HostFigures {
                    calls: 1,
                    wall_ns: 50_000_000,
                    cpu_ns: 100_000,
                    bytes: None,
                },
            },
        ];
        p
    }

    #[test]
    fn the_table_puts_the_longest_first_with_off_cpu_time() {
        let text = table(&with_host()).unwrap();
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert!(rows[0].ends_with("poll_oneoff"), "{text}");
        assert!(rows[0].contains("49.90 ms"), "{text}");
        assert!(
            rows[1].contains("9.8 KiB") && rows[1].contains("2.00 µs"),
            "{text}"
        );
        assert!(table(&sample_profile()).is_none());
        // Cost mode times nothing.
        let mut cost = with_host();
        cost.unit = "instructions".into();
        let text = table(&cost).unwrap();
        assert!(
            text.lines().nth(2).unwrap().trim_start().starts_with("- "),
            "{text}"
        );
        assert_eq!(
            summary_line(&cost).unwrap(),
            "host: 11 calls to WASI, 9.8 KiB moved (cost mode times nothing)"
        );
    }

    #[test]
    fn a_stack_profile_says_its_host_times_are_sampled() {
        let mut p = with_host();
        p.mode = "stack".into();
        let line = summary_line(&p).unwrap();
        assert!(
            line.contains("50.02 ms in them by the samples (115.00 µs on CPU"),
            "{line}"
        );
        assert!(table(&p)
            .unwrap()
            .starts_with("Host calls (time in WASI's functions, sampled;"));
    }

    #[test]
    fn the_summary_adds_every_import_up() {
        let line = summary_line(&with_host()).unwrap();
        assert_eq!(
            line,
            "host: 11 calls to WASI, 50.02 ms in them (115.00 µs on CPU, 49.91 ms off CPU), \
             9.8 KiB moved; most in poll_oneoff (50.00 ms)"
        );
    }
}
