//! Adaptive mode's hot paths, for people: each walk from its hot spot up toward the root,
//! with the timed inclusive time of every context it reached beside the sampled one.

use std::fmt::Write as _;

use crate::display::format_ns;
use crate::profile::{AdaptiveRecord, Profile, TimedContext};

/// Walks shown, and contexts per walk.
const PATHS_SHOWN: usize = 8;
const ROWS_SHOWN: usize = 16;

fn name(profile: &Profile, id: u32) -> &str {
    profile.function(id).map_or("?", |f| f.name.as_str())
}

/// One line: how the walks went.
pub fn summary(record: &AdaptiveRecord) -> String {
    let timed = record.contexts.iter().filter(|c| c.timed > 0).count();
    format!(
        "adaptive mode: {} hot path{} walked in {} step{} of up to {} timed activations \
         (at most {} functions at once); {} context{} timed; {} per timer subtracted",
        record.paths.len(),
        plural(record.paths.len()),
        record.steps,
        plural(record.steps as usize),
        record.calls_per_step,
        record.max_timers,
        timed,
        plural(timed),
        format_ns(record.timer_cost_ns),
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The mean of a context's timed activations.
fn mean(c: &TimedContext) -> Option<u64> {
    (c.timed > 0).then(|| c.timed_ns / c.timed)
}

/// The section of the text report.
pub fn render(profile: &Profile, record: &AdaptiveRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", summary(record));
    let _ = writeln!(
        out,
        "Hot paths: from each hot spot up its callers. `timed` is the timed activations' \
         mean times the exact calls; `-` where none was timed, or where they were shorter \
         than {} timers (the sampled figure is then the better one).",
        AdaptiveRecord::RESOLUTION
    );
    for (n, path) in record.paths.iter().take(PATHS_SHOWN).enumerate() {
        let Some(spot) = path.first().and_then(|&i| record.contexts.get(i as usize)) else {
            continue;
        };
        let stack: Vec<&str> = spot.stack.iter().map(|&f| name(profile, f)).collect();
        let _ = writeln!(out, "  #{} {}", n + 1, stack.join(" > "));
        let _ = writeln!(
            out,
            "     {:<32} {:>10} {:>7} {:>10} {:>11} {:>11} {:>10} {:>10}",
            "function", "calls", "timed", "mean", "timed incl", "sampled", "min", "max"
        );
        for &i in path.iter().take(ROWS_SHOWN) {
            let Some(c) = record.contexts.get(i as usize) else {
                continue;
            };
            let dash = || "-".to_string();
            let function = c.stack.last().map_or("?", |&f| name(profile, f));
            let _ = writeln!(
                out,
                "     {:<32} {:>10} {:>7} {:>10} {:>11} {:>11} {:>10} {:>10}",
                truncate(function, 32),
                c.calls,
                c.timed,
                mean(c).map_or_else(dash, format_ns),
                c.inclusive_ns.map_or_else(dash, format_ns),
                format_ns(c.sampled_ns),
                c.min_ns.map_or_else(dash, format_ns),
                c.max_ns.map_or_else(dash, format_ns),
            );
        }
        if path.len() > ROWS_SHOWN {
            let _ = writeln!(out, "     ... {} more callers", path.len() - ROWS_SHOWN);
        }
    }
    if record.paths.len() > PATHS_SHOWN {
        let _ = writeln!(
            out,
            "  ... {} more paths (all in `wprof report --format json`)",
            record.paths.len() - PATHS_SHOWN
        );
    }
    out
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width - 1).collect();
        t.push('…');
        t
    }
}

/// The HTML header's lines: the summary, and each path's hot spot with its timed figure.
pub fn notes(profile: &Profile, record: &AdaptiveRecord) -> Vec<String> {
    let mut notes = vec![summary(record)];
    for path in record.paths.iter().take(PATHS_SHOWN) {
        let rows: Vec<String> = path
            .iter()
            .filter_map(|&i| record.contexts.get(i as usize))
            .map(|c| {
                let function = c.stack.last().map_or("?", |&f| name(profile, f));
                match c.inclusive_ns {
                    Some(ns) => format!("{function} {} timed", format_ns(ns)),
                    None => format!("{function} {} sampled", format_ns(c.sampled_ns)),
                }
            })
            .collect();
        notes.push(format!("hot path: {}", rows.join(" < ")));
    }
    notes
}
