//! `--format text` (the default): a flat profile (sorted by self time unless `--sort` says
//! otherwise, selected by `--filter`, cut by `--top`: by default to what fits a screen, see
//! [`Top::Fit`], with a line saying what was left out), then, per function shown, who called
//! it and what it called, with calls and the share of its inclusive time (the five largest
//! each way unless `--top 0`).

use std::fmt::Write;

use super::{matching, names, percent, Options, Top};
use crate::display::format_amount;
use crate::profile::{EdgeRecord, FunctionRecord, Profile};

/// Functions sorted by self time, most expensive first (ties by name).
pub fn by_self_time(profile: &Profile) -> Vec<&FunctionRecord> {
    matching(profile, &Options::default())
}

/// A function's count of calls as shown: `-` in a profile that counts none (stack mode
/// without entry counters).
fn calls_shown(profile: &Profile, calls: u64) -> String {
    match profile.counts_calls() {
        true => calls.to_string(),
        false => "-".to_string(),
    }
}

/// An edge's count of calls as shown: `-` in a profile that counts none (stack mode).
fn edge_calls_shown(profile: &Profile, calls: u64) -> String {
    match profile.counts_edge_calls() {
        true => calls.to_string(),
        false => "-".to_string(),
    }
}

/// The flat profile table: header plus one line per function.
pub fn flat_table(profile: &Profile, functions: &[&FunctionRecord]) -> String {
    let total = profile.total;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>11} {:>7} {:>11} {:>7} {:>12} {:>11} {:>11}  function",
        "self", "self%", "inclusive", "incl%", "calls", "min self", "max self"
    );
    for f in functions {
        let _ = writeln!(
            out,
            "{:>11} {:>6.2}% {:>11} {:>6.2}% {:>12} {:>11} {:>11}  {}{}",
            format_amount(f.self_time, &profile.unit),
            percent(f.self_time, total),
            format_amount(f.inclusive, &profile.unit),
            percent(f.inclusive, total),
            calls_shown(profile, f.calls),
            f.min_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.max_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.name,
            match f.kind.as_str() {
                "import" => " [import]",
                "wait" => " [waiting]",
                _ => "",
            },
        );
    }
    out
}

/// The whole text report.
pub fn render(profile: &Profile, options: &Options) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "wprof profile of {} ({})",
        profile.module.path,
        &profile.module.blake3[..16.min(profile.module.blake3.len())]
    );
    let _ = writeln!(
        out,
        "outcome: {} (exit code {}){}; total {} in {} functions, {}",
        profile.outcome,
        profile.exit_code,
        profile
            .trap
            .as_deref()
            .map(|t| format!(", trap: {t}"))
            .unwrap_or_default(),
        format_amount(profile.total, &profile.unit),
        profile.functions.len(),
        match profile.counts_calls() {
            true => format!(
                "{} calls",
                profile.functions.iter().map(|f| f.calls).sum::<u64>()
            ),
            false => "calls not counted".to_string(),
        },
    );
    if let Some(threads) = &profile.threads {
        out.push_str(&threads_summary(
            threads,
            &profile.unit,
            profile.counts_calls(),
        ));
    }
    match &profile.sampling {
        Some(s) if !profile.counts_edge_calls() => {
            let _ = writeln!(
                out,
                "stack mode: times estimated from {} call stacks sampled one every {} \
                 ({}){}",
                s.answered,
                period_shown(s),
                match profile.counts_calls() {
                    true => "each function's calls counted at its entry, no other probe",
                    false => "the program ran without probes",
                },
                stack_walk_notes(s),
            );
        }
        Some(s) => {
            let _ = writeln!(
                out,
                "sample mode: times estimated from {} ticks located by program counter, one every \
             {} ({} readings of the running context); {} in wprof's probes left out",
                s.answered,
                period_shown(s),
                s.readings,
                crate::display::format_ns(s.probe_ns)
            );
            if s.off_ns > 0 {
                let _ = writeln!(
                    out,
                    "live probes: every switch off for {}, not sampled",
                    crate::display::format_ns(s.off_ns)
                );
            }
        }
        None => {}
    }
    let excluded: Vec<&str> = profile.unprobed.iter().map(String::as_str).collect();
    if !excluded.is_empty() {
        let _ = writeln!(
            out,
            "{} function{} without probes (--only/--exclude): each is part of its nearest \
             probed caller, calls to it not counted{}: {}",
            excluded.len(),
            if excluded.len() == 1 { "" } else { "s" },
            if profile.unit == "instructions" {
                ", their instructions not counted"
            } else {
                ""
            },
            first_names(&profile.unprobed)
        );
    }
    if let Some(live) = &profile.live {
        out.push_str(&live_summary(live));
    }
    if let Some(adaptive) = &profile.adaptive {
        let _ = writeln!(out);
        out.push_str(&crate::report::hot_paths::render(profile, adaptive));
    }
    if let Some(line) = untimed_summary(profile) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(o) = &profile.probe_overhead {
        let _ = writeln!(out, "{}", overhead_summary(o));
    }
    if let Some(line) = cpu_wait_summary(profile) {
        let _ = writeln!(out, "note: {line}");
    }
    let _ = writeln!(out);
    let matching = matching(profile, options);
    let shown = options.top.count(&matching, options.sort);
    let (functions, left_out) = matching.split_at(shown);
    let _ = writeln!(
        out,
        "Flat profile (sorted by {}{}{}):",
        options.sort.describe(),
        options
            .filter
            .as_ref()
            .map(|re| format!(", names matching /{re}/"))
            .unwrap_or_default(),
        if left_out.is_empty() {
            String::new()
        } else {
            format!(", top {shown} of {}", matching.len())
        }
    );
    if functions.is_empty() {
        let _ = writeln!(out, "(no function matches)");
        return out;
    }
    out.push_str(&flat_table(profile, functions));
    if !left_out.is_empty() {
        let rest: u64 = left_out.iter().map(|f| f.self_time).sum();
        let _ = writeln!(
            out,
            "... {} more function{} with {:.2}% of the self {}: `--top 0` shows all, `--top N` \
             the first N",
            left_out.len(),
            if left_out.len() == 1 { "" } else { "s" },
            percent(rest, profile.total),
            if profile.unit == "ns" { "time" } else { "cost" }
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Callers and callees (share = part of the function's inclusive time):"
    );
    let names = names(profile);
    let name = |id: Option<u32>| match id {
        None => "<root>",
        Some(id) => names.get(&id).copied().unwrap_or("?"),
    };
    for f in functions {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{}{}  ({} calls, inclusive {})",
            f.name,
            options
                .symbols
                .sources
                .get(&f.id)
                .map(|s| format!("  [{}]", s.short()))
                .unwrap_or_default(),
            calls_shown(profile, f.calls),
            format_amount(f.inclusive, &profile.unit)
        );
        let mut callers: Vec<_> = profile.edges.iter().filter(|e| e.callee == f.id).collect();
        callers.sort_by_key(|e| std::cmp::Reverse(e.inclusive));
        let (callers, more_callers) = callers.split_at(edges_shown(callers.len(), options.top));
        for e in callers {
            let _ = writeln!(
                out,
                "    called by {:<40} {:>10} calls {:>11} {:>6.2}%",
                match e.site {
                    Some(site) => format!("{}+{site:#x}", name(e.caller)),
                    None => name(e.caller).to_string(),
                },
                edge_calls_shown(profile, e.calls),
                format_amount(e.inclusive, &profile.unit),
                percent(e.inclusive, f.inclusive)
            );
        }
        let mut callees: Vec<_> = profile
            .edges
            .iter()
            .filter(|e| e.caller == Some(f.id))
            .collect();
        more_edges(&mut out, "caller", more_callers, f.inclusive);
        callees.sort_by_key(|e| std::cmp::Reverse(e.inclusive));
        let (callees, more_callees) = callees.split_at(edges_shown(callees.len(), options.top));
        for e in callees {
            let _ = writeln!(
                out,
                "    calls     {:<40} {:>10} calls {:>11} {:>6.2}%",
                match e.site {
                    Some(site) => format!("{} (at +{site:#x})", name(Some(e.callee))),
                    None => name(Some(e.callee)).to_string(),
                },
                edge_calls_shown(profile, e.calls),
                format_amount(e.inclusive, &profile.unit),
                percent(e.inclusive, f.inclusive)
            );
        }
        more_edges(&mut out, "callee", more_callees, f.inclusive);
        if f.kind == "import" {
            host_by_caller(&mut out, profile, f.id, &name);
        }
    }
    if let Some(table) = crate::report::host_time::table(profile) {
        let _ = writeln!(out);
        out.push_str(&table);
    }
    if let Some(table) = crate::report::allocations::table(profile) {
        let _ = writeln!(out);
        out.push_str(&table);
    }
    out
}

/// An import's host figures by calling context, each named by its last callers
/// (`... > emit_a > write > __wasi_fd_write`).
fn host_by_caller<'a>(
    out: &mut String,
    profile: &'a Profile,
    import: u32,
    name: &dyn Fn(Option<u32>) -> &'a str,
) {
    const CALLERS: usize = 3;
    let mut contexts: Vec<_> = profile
        .contexts
        .iter()
        .filter(|c| c.function == import)
        .filter_map(|c| Some((c, c.host?)))
        .collect();
    contexts.sort_by_key(|(_, h)| std::cmp::Reverse(h.wall_ns));
    for (c, h) in contexts.iter().take(MAX_EDGES) {
        let mut callers = Vec::new();
        let mut at = c.parent.and_then(|p| profile.contexts.get(p as usize));
        while let Some(caller) = at {
            if callers.len() == CALLERS {
                callers.push("...");
                break;
            }
            callers.push(name(Some(caller.function)));
            at = caller.parent.and_then(|p| profile.contexts.get(p as usize));
        }
        if callers.is_empty() {
            callers.push(name(None));
        }
        callers.reverse();
        let _ = writeln!(out, "    host, from {}", callers.join(" > "));
        let _ = writeln!(
            out,
            "        {}",
            crate::report::host_time::context_line(profile, h)
        );
    }
}

/// Callers (and callees) shown per function: all with `--top 0`, else the
/// [`MAX_EDGES`] of largest inclusive time.
fn edges_shown(edges: usize, top: Top) -> usize {
    match top {
        Top::All => edges,
        _ => edges.min(MAX_EDGES),
    }
}

/// Callers (and callees) shown per function by default.
const MAX_EDGES: usize = 5;

/// The line that says how many callers (or callees) were left out.
fn more_edges(out: &mut String, what: &str, left_out: &[&EdgeRecord], inclusive: u64) {
    if left_out.is_empty() {
        return;
    }
    let rest: u64 = left_out.iter().map(|e| e.inclusive).sum();
    let _ = writeln!(
        out,
        "    ... {} more {what}s with {:.2}% (`--top 0` shows all)",
        left_out.len(),
        percent(rest, inclusive)
    );
}

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
    if walks.truncated > 0 {
        notes += &format!("; {} stacks too deep to walk to the entry", walks.truncated);
    }
    if walks.lost > 0 {
        notes += &format!(
            "; {} ticks read too late (their time went to the next)",
            walks.lost
        );
    }
    notes
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
fn first_names(names: &[String]) -> String {
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
            function_calls: true,
        });
        let notes = stack_walk_notes(&sampling);
        assert!(
            notes.starts_with(
                "; 1.50 ms outside the module's code charged to no function; 3 stacks"
            ),
            "{notes}"
        );
        assert!(notes.ends_with("; 2 ticks read too late (their time went to the next)"));
    }
}
