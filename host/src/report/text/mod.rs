//! `--format text` (the default): a flat profile (sorted by self time unless `--sort` says
//! otherwise, selected by `--filter`, cut by `--top`: by default to what fits a screen, see
//! [`Top::Fit`], with a line saying what was left out), then, per function shown, who called
//! it and what it called, with calls and the share of its inclusive time (the five largest
//! each way unless `--top 0`).

use std::fmt::Write;

use super::{matching, names, percent, Options, Top};
use crate::display::format_amount;
use crate::profile::{EdgeRecord, FunctionRecord, Profile};

mod summaries;

use summaries::first_names;
pub use summaries::{
    cpu_wait_summary, few_samples_note, live_summary, overhead_summary, period_shown,
    stack_walk_notes, threads_summary, untimed_summary, untimed_time,
};

/// Functions sorted by self time, most expensive first (ties by name).
pub fn by_self_time(profile: &Profile) -> Vec<&FunctionRecord> {
    matching(profile, &Options::default())
}

/// A function's count of calls as shown: `-` in a profile that counts none (stack mode
/// without entry counters), and for a script's function (never counted).
fn calls_shown(profile: &Profile, f: &FunctionRecord) -> String {
    match profile.counts_calls() && !f.is_script() {
        true => f.calls.to_string(),
        false => "-".to_string(),
    }
}

/// An edge's count of calls as shown: `-` in a profile that counts none (stack mode
/// without edge counters), and for an edge from or to a script's function (never counted).
fn edge_calls_shown(profile: &Profile, e: &crate::profile::EdgeRecord) -> String {
    let script = |id: u32| profile.function(id).is_some_and(|f| f.is_script());
    match profile.counts_edge_calls() && !e.caller.is_some_and(script) && !script(e.callee) {
        true => e.calls.to_string(),
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
            calls_shown(profile, f),
            f.min_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.max_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.name,
            match f.kind.as_str() {
                "import" => " [import]",
                "wait" => " [waiting]",
                "lua" => " [lua]",
                "js" => " [js]",
                "py" => " [py]",
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
        Some(s) if !profile.counts_context_calls() => {
            let _ = writeln!(
                out,
                "stack mode: times estimated from {} call stacks sampled one every {} \
                 ({}){}",
                s.answered,
                period_shown(s),
                match (profile.counts_calls(), profile.counts_edge_calls()) {
                    (true, true) =>
                        "each function's and each caller's calls counted, no other probe",
                    (true, false) => "each function's calls counted at its entry, no other probe",
                    _ => "the program ran without probes",
                },
                stack_walk_notes(s),
            );
            if let Some(note) = few_samples_note(profile) {
                let _ = writeln!(out, "note: {note}");
            }
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
            if let Some(note) = few_samples_note(profile) {
                let _ = writeln!(out, "note: {note}");
            }
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
            calls_shown(profile, f),
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
                edge_calls_shown(profile, e),
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
                edge_calls_shown(profile, e),
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
