//! `--format text` (the default): a flat profile (sorted by self time unless `--sort` says
//! otherwise, cut by `--top`, selected by `--filter`), then, per function shown, who called
//! it and what it called, with calls and the share of its inclusive time.

use std::fmt::Write;

use super::{names, percent, select, Options};
use crate::display::format_amount;
use crate::profile::{FunctionRecord, Profile};

/// Functions sorted by self time, most expensive first (ties by name).
pub fn by_self_time(profile: &Profile) -> Vec<&FunctionRecord> {
    select(profile, &Options::default())
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
            f.calls,
            f.min_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.max_self
                .map_or("-".to_string(), |v| format_amount(v, &profile.unit)),
            f.name,
            if f.kind == "import" { " [import]" } else { "" },
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
        "outcome: {} (exit code {}){}; total {} in {} functions, {} calls",
        profile.outcome,
        profile.exit_code,
        profile
            .trap
            .as_deref()
            .map(|t| format!(", trap: {t}"))
            .unwrap_or_default(),
        format_amount(profile.total, &profile.unit),
        profile.functions.len(),
        profile.functions.iter().map(|f| f.calls).sum::<u64>(),
    );
    if let Some(s) = &profile.sampling {
        let _ = writeln!(
            out,
            "sample mode: times estimated from {} readings ({} located by program counter), \
             one every {}; {} in wprof's probes left out",
            s.readings,
            s.answered,
            crate::display::format_ns(s.period_ns),
            crate::display::format_ns(s.probe_ns)
        );
    }
    if let Some(o) = &profile.probe_overhead {
        let _ = writeln!(
            out,
            "probe overhead subtracted: {:.1} ns per activation, {:.1} ns per call in the caller",
            o.inside_ns, o.outside_ns
        );
    }
    let _ = writeln!(out);
    let functions = select(profile, options);
    let _ = writeln!(
        out,
        "Flat profile (sorted by {}{}{}):",
        options.sort.describe(),
        options
            .filter
            .as_ref()
            .map(|re| format!(", names matching /{re}/"))
            .unwrap_or_default(),
        match options.top {
            Some(n) if n < profile.functions.len() => format!(", top {n}"),
            _ => String::new(),
        }
    );
    if functions.is_empty() {
        let _ = writeln!(out, "(no function matches)");
        return out;
    }
    out.push_str(&flat_table(profile, &functions));

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
            f.calls,
            format_amount(f.inclusive, &profile.unit)
        );
        let mut callers: Vec<_> = profile.edges.iter().filter(|e| e.callee == f.id).collect();
        callers.sort_by_key(|e| std::cmp::Reverse(e.inclusive));
        for e in callers {
            let _ = writeln!(
                out,
                "    called by {:<40} {:>10} calls {:>11} {:>6.2}%",
                match e.site {
                    Some(site) => format!("{}+{site:#x}", name(e.caller)),
                    None => name(e.caller).to_string(),
                },
                e.calls,
                format_amount(e.inclusive, &profile.unit),
                percent(e.inclusive, f.inclusive)
            );
        }
        let mut callees: Vec<_> = profile
            .edges
            .iter()
            .filter(|e| e.caller == Some(f.id))
            .collect();
        callees.sort_by_key(|e| std::cmp::Reverse(e.inclusive));
        for e in callees {
            let _ = writeln!(
                out,
                "    calls     {:<40} {:>10} calls {:>11} {:>6.2}%",
                match e.site {
                    Some(site) => format!("{} (at +{site:#x})", name(Some(e.callee))),
                    None => name(Some(e.callee)).to_string(),
                },
                e.calls,
                format_amount(e.inclusive, &profile.unit),
                percent(e.inclusive, f.inclusive)
            );
        }
    }
    out
}
