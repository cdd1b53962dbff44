//! The lines about a run as a whole that the text report prints above its tables, and that
//! `wprof run`'s summary and the HTML report print too: how time was sampled and what the
//! stack walks could not place, the threads, live probes' changes, the functions counted but
//! not timed, a wait for a processor, and the probe overhead subtracted.

use std::fmt::Write;

use crate::display::format_amount;
use crate::profile::Profile;

/// What stack mode's walks could not place (see [`crate::profile::StackWalkRecord`]), as
/// "; ..." parts of a line: empty when all of it is zero.
pub fn stack_walk_notes(sampling: &crate::profile::SamplingRecord) -> String {
    let Some(walks) = sampling.stacks else {
        return String::new();
    };
    let mut unplaced = Vec::new();
    if walks.outside_ns > 0 {
        unplaced.push(format!(
            "{} outside the module's code",
            crate::display::format_ns(walks.outside_ns)
        ));
    }
    if walks.interrupting_ns > 0 {
        unplaced.push(format!(
            "{} waking blocked threads for ticks",
            crate::display::format_ns(walks.interrupting_ns)
        ));
    }
    let mut notes = String::new();
    if !unplaced.is_empty() {
        notes += &format!("; {} charged to no function", unplaced.join(" and "));
    }
    if walks.counters_ns > 0 {
        notes += &format!(
            "; {} in the call counters' own instructions left out",
            crate::display::format_ns(walks.counters_ns)
        );
    }
    if walks.truncated > 0 {
        notes += &format!("; {} stacks too deep to walk to the entry", walks.truncated);
    }
    if walks.lost > 0 {
        notes += &format!(
            "; {} ticks read too late (their time went to the next)",
            walks.lost
        );
    }
    if walks.edge_calls_lost > 0 {
        notes += &format!(
            "; {} calls through tables found the module's table of callers full (their \
             callees counted them, no caller)",
            walks.edge_calls_lost
        );
    }
    notes
}

/// Fewer samples than this in the program make a note that its sampled times are rough.
const FEW_SAMPLES: u64 = 100;

/// A sampled profile (stack or sample mode) whose program took fewer than [`FEW_SAMPLES`]
/// samples: how many, how far a share may be off, and
/// what to run instead; `None` otherwise. A share `p` of `n` samples is off by
/// `sqrt(p (1 - p) / n)` (one standard deviation), said for `p` = 10%.
pub fn few_samples_note(profile: &Profile) -> Option<String> {
    let sampling = profile.sampling.as_ref()?;
    if profile.unit != "ns" || sampling.period_ns == 0 {
        return None;
    }
    // Stack mode's ticks include those outside the program (its instantiation, wprof's
    // own code): its samples are its sampled time over the period. Sample mode's readings
    // are its samples, when fewer.
    let mut samples = profile.total / sampling.period_ns;
    if profile.counts_context_calls() {
        samples = samples.min(sampling.readings);
    }
    if samples >= FEW_SAMPLES {
        return None;
    }
    let off = 100.0 * (0.1 * 0.9 / samples.max(1) as f64).sqrt();
    Some(format!(
        "only about {samples} samples fell in the program ({} of it, one every {}): its times \
         are rough, a 10% share within about ±{off:.0} points{}; `--mode time` times every call \
         of a short run",
        crate::display::format_ns(profile.total),
        crate::display::format_ns(sampling.period_ns),
        match profile.counts_calls() {
            true => ", the calls exact",
            false => "",
        }
    ))
}

/// How often a run was sampled: its period, and how far it stretched.
pub fn period_shown(s: &crate::profile::SamplingRecord) -> String {
    let period = crate::display::format_ns(s.period_ns);
    match s.longest_period_ns > s.period_ns {
        true => format!(
            "{period}, stretched to {} as it ran",
            crate::display::format_ns(s.longest_period_ns)
        ),
        false => period,
    }
}

/// A threaded program's threads: each one's calls (when `calls_counted`) and total (the
/// first few), and the threads that were still running when it ended.
pub fn threads_summary(
    threads: &crate::profile::ThreadsRecord,
    unit: &str,
    calls_counted: bool,
) -> String {
    const SHOWN: usize = 8;
    let mut parts: Vec<String> = threads
        .threads
        .iter()
        .take(SHOWN)
        .map(|t| match calls_counted {
            true => format!(
                "#{} {} calls, {}",
                t.id,
                t.calls,
                format_amount(t.total, unit)
            ),
            false => format!("#{} {}", t.id, format_amount(t.total, unit)),
        })
        .collect();
    if threads.threads.len() > SHOWN {
        parts.push(format!("{} more", threads.threads.len() - SHOWN));
    }
    let mut line = format!(
        "{} threads (#0 the first, the others spawned): {}",
        threads.threads.len(),
        parts.join("; ")
    );
    if threads.unfinished > 0 {
        let _ = write!(
            line,
            "; {} still running when the program ended, not in the profile",
            threads.unfinished
        );
    }
    let unsampled: Vec<String> = threads
        .threads
        .iter()
        .filter(|t| t.unsampled)
        .map(|t| format!("#{}", t.id))
        .collect();
    if !unsampled.is_empty() {
        let _ = write!(
            line,
            "; {} unsampled (the system refused their timers: calls counted, time not): {}",
            unsampled.len(),
            unsampled.join(" ")
        );
    }
    line.push('\n');
    line
}

/// Live probes: the changes, and for each function that was ever off, how long it was on
/// (its counts and times cover only that).
pub fn live_summary(live: &crate::profile::LiveRecord) -> String {
    use crate::display::format_ns;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "live probes: {} change{}; {} function{} off part of the run (counted only while on)",
        live.changes.len(),
        if live.changes.len() == 1 { "" } else { "s" },
        live.switched.len(),
        if live.switched.len() == 1 { "" } else { "s" },
    );
    const SHOWN: usize = 12;
    for c in live.changes.iter().take(SHOWN) {
        let _ = writeln!(
            out,
            "  at {:>10}  {:<3} {} ({} function{}, {})",
            format_ns(c.at_ns),
            if c.on { "on" } else { "off" },
            c.what,
            c.functions,
            if c.functions == 1 { "" } else { "s" },
            c.source
        );
    }
    if live.changes.len() > SHOWN {
        let _ = writeln!(out, "  ... {} more changes", live.changes.len() - SHOWN);
    }
    for f in live.switched.iter().take(SHOWN) {
        let intervals: Vec<String> =
            f.on.iter()
                .take(4)
                .map(|[a, b]| format!("{}-{}", format_ns(*a), format_ns(*b)))
                .collect();
        let _ = writeln!(
            out,
            "  {} on for {}{}{}",
            f.name,
            format_ns(f.on_ns),
            if intervals.is_empty() {
                String::new()
            } else {
                format!(": {}", intervals.join(", "))
            },
            if f.on.len() > 4 { ", ..." } else { "" }
        );
    }
    if live.switched.len() > SHOWN {
        let _ = writeln!(out, "  ... {} more functions", live.switched.len() - SHOWN);
    }
    out
}

/// Time mode: one line naming the functions counted but not timed, if any.
pub fn untimed_summary(profile: &Profile) -> Option<String> {
    if profile.untimed.is_empty() {
        return None;
    }
    let n = profile.untimed.len();
    Some(format!(
        "{n} short function{} counted, not timed ({}; --short-max 0 times them): {}",
        if n == 1 { "" } else { "s" },
        untimed_time(profile),
        first_names(&profile.untimed)
    ))
}

/// Where the time of the functions counted, not timed, comes from.
pub fn untimed_time(profile: &Profile) -> String {
    match profile.untimed_samples {
        Some(n) => format!(
            "their time is their callers' self time shared out by where {n} program-counter \
             samples found it"
        ),
        None => "their time is their callers' self time".to_string(),
    }
}

/// The first eight of `names`, with `, ...` when there are more.
/// Shown demangled, as the function table shows them.
pub(super) fn first_names(names: &[String]) -> String {
    let mut shown = names
        .iter()
        .take(8)
        .map(|n| crate::demangle::demangle(n).unwrap_or_else(|| n.clone()))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 8 {
        shown.push_str(", ...");
    }
    shown
}

/// Waits shorter than this, or than [`CPU_WAIT_SHARE`] of the run, are not worth a line.
const CPU_WAIT_SHOWN_NS: u64 = 10_000_000;
/// The share of the run's wall time from which a wait for a processor is shown.
const CPU_WAIT_SHARE: f64 = 0.05;

/// Time mode: the line saying the program's thread waited for a processor for much of the
/// run (see [`Profile::cpu_wait_ns`]), if it did.
pub fn cpu_wait_summary(profile: &Profile) -> Option<String> {
    let (wait, wall) = (profile.cpu_wait_ns?, profile.wall_time?);
    if wait < CPU_WAIT_SHOWN_NS || (wait as f64) < CPU_WAIT_SHARE * wall as f64 {
        return None;
    }
    Some(format!(
        "the program's thread waited {} of its {} for a processor (a busy machine): time \
         mode reads a wall clock, so the wait is in the times of whatever ran then; stack and \
         sample modes charge CPU time",
        crate::display::format_ns(wait),
        crate::display::format_ns(wall)
    ))
}

/// Time mode: the probe overhead subtracted, as one line.
pub fn overhead_summary(o: &crate::profile::OverheadRecord) -> String {
    let mut line = format!(
        "probe overhead subtracted: {:.1} ns per activation, {:.1} ns per call in the caller",
        o.inside_ns, o.outside_ns
    );
    if o.called_ns > 0.0 {
        line.push_str(&format!(
            ", {:.1} ns per call to a function counted, not timed",
            o.called_ns
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_profile;

    #[test]
    fn a_long_wait_for_a_processor_is_shown() {
        let mut p = sample_profile();
        p.wall_time = Some(1_000_000_000);
        p.cpu_wait_ns = Some(150_000_000);
        let line = cpu_wait_summary(&p).unwrap();
        assert!(line.contains("waited 150.00 ms of its 1.00 s"), "{line}");
        // Under 5% of the run, or under 10 ms: not worth a line.
        p.cpu_wait_ns = Some(40_000_000);
        assert_eq!(cpu_wait_summary(&p), None);
        p.wall_time = Some(100_000_000);
        p.cpu_wait_ns = Some(9_000_000);
        assert_eq!(cpu_wait_summary(&p), None);
        p.cpu_wait_ns = None;
        assert_eq!(cpu_wait_summary(&p), None);
    }

    #[test]
    fn the_lists_of_untimed_and_unprobed_functions_show_names_demangled() {
        let mut p = sample_profile();
        p.untimed = vec!["_ZN4core3fmt5write17h0123456789abcdefE".into(), "b".into()];
        p.unprobed = vec!["_Z4leafi".into()];
        let untimed = untimed_summary(&p).unwrap();
        assert!(untimed.ends_with(": core::fmt::write, b"), "{untimed}");
        assert_eq!(first_names(&p.unprobed), "leaf(int)");
    }

    #[test]
    fn stack_walks_say_only_what_they_could_not_place() {
        let mut sampling = crate::profile::SamplingRecord {
            period_ns: 200_000,
            longest_period_ns: 0,
            readings: 10,
            answered: 10,
            probe_ns: 0,
            off_ns: 0,
            stacks: None,
        };
        assert_eq!(stack_walk_notes(&sampling), "");
        sampling.stacks = Some(crate::profile::StackWalkRecord::default());
        assert_eq!(stack_walk_notes(&sampling), "");
        sampling.stacks = Some(crate::profile::StackWalkRecord {
            outside_ns: 1_500_000,
            interrupting_ns: 0,
            lost: 2,
            truncated: 3,
            counters_ns: 700_000,
            function_calls: true,
            ..Default::default()
        });
        assert_eq!(
            stack_walk_notes(&sampling),
            "; 1.50 ms outside the module's code charged to no function; 700.00 µs in the \
             call counters' own instructions left out; 3 stacks too deep to walk to the \
             entry; 2 ticks read too late (their time went to the next)"
        );
    }
}
