//! A profile's allocations (`wprof run --allocs`): the blocks the module's allocator handed
//! out, by the calling context that asked for them, as the text report, the HTML report
//! and the run's summary show them.

use std::fmt::Write;

use crate::display::format_size;
use crate::profile::{AllocFigures, Profile};

/// How many callers name a context (`make_table > c.malloc.calloc`, the allocator last).
const CALLERS: usize = 3;

/// One allocator context, as reports list them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AllocRow {
    /// The context's last frames, outermost first, the allocator last.
    pub path: Vec<String>,
    /// The function that called the allocator (its id), if any.
    pub caller: Option<u32>,
    /// Its blocks.
    pub figures: AllocFigures,
}

/// Every context that handed out blocks, most bytes first (ties: most objects).
pub fn rows(profile: &Profile) -> Vec<AllocRow> {
    let names: std::collections::HashMap<u32, &str> = profile
        .functions
        .iter()
        .map(|f| (f.id, f.name.as_str()))
        .collect();
    let name = |id: u32| names.get(&id).copied().unwrap_or("?").to_string();
    let mut rows: Vec<AllocRow> = super::stacks(profile)
        .into_iter()
        .filter_map(|s| {
            let figures = s.allocs?;
            let from = s.functions.len().saturating_sub(CALLERS + 1);
            Some(AllocRow {
                path: s.functions[from..].iter().map(|&id| name(id)).collect(),
                caller: s.functions.len().checked_sub(2).map(|i| s.functions[i]),
                figures,
            })
        })
        .collect();
    rows.sort_by_key(|r| {
        (
            std::cmp::Reverse(r.figures.bytes),
            std::cmp::Reverse(r.figures.objects),
        )
    });
    rows
}

/// The summary's line: `allocations: 120 blocks, 13.3 KiB (malloc, free, realloc);
/// 41 blocks, 1.2 KiB live at exit; most from make_table (10.0 KiB)`; `None` without
/// allocation profiling.
pub fn summary_line(profile: &Profile) -> Option<String> {
    let record = profile.allocations.as_ref()?;
    if record.allocators.is_empty() {
        return Some(
            "allocations: no allocator found by name (name yours in the configuration file's \
             `allocators`)"
                .to_string(),
        );
    }
    let t = &record.totals;
    let used: Vec<&str> = record
        .allocators
        .iter()
        .filter(|a| a.calls > 0)
        .map(|a| a.name.as_str())
        .collect();
    let mut line = format!(
        "allocations: {} blocks, {} ({}); {} blocks, {} live at exit",
        t.objects,
        format_size(t.bytes),
        if used.is_empty() {
            "the allocator was not called".to_string()
        } else {
            used.join(", ")
        },
        t.live_objects,
        format_size(t.live_bytes)
    );
    if let Some(top) = rows(profile).first() {
        let from = top.path.len().saturating_sub(2);
        let _ = write!(
            line,
            "; most from {} ({})",
            top.path[from],
            format_size(top.figures.bytes)
        );
    }
    if record.unknown_frees > 0 {
        let _ = write!(
            line,
            "; {} blocks freed that wprof did not see allocated",
            record.unknown_frees
        );
    }
    Some(line)
}

/// The text report's table, one row per context by bytes; `None` without allocation
/// profiling.
pub fn table(profile: &Profile) -> Option<String> {
    let record = profile.allocations.as_ref()?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Allocations (blocks handed out, by the context that asked; live = not freed at exit):"
    );
    if record.allocators.is_empty() {
        out.push_str("  no allocator found by name\n");
        return Some(out);
    }
    let t = &record.totals;
    let _ = writeln!(
        out,
        "{:>11} {:>10} {:>11} {:>10}  context (callers > allocator)",
        "bytes", "blocks", "live bytes", "live"
    );
    for r in rows(profile) {
        let f = &r.figures;
        let _ = writeln!(
            out,
            "{:>11} {:>10} {:>11} {:>10}  {}",
            format_size(f.bytes),
            f.objects,
            format_size(f.live_bytes),
            f.live_objects,
            r.path.join(" > ")
        );
    }
    let _ = writeln!(
        out,
        "{:>11} {:>10} {:>11} {:>10}  total",
        format_size(t.bytes),
        t.objects,
        format_size(t.live_bytes),
        t.live_objects
    );
    let allocators: Vec<String> = record
        .allocators
        .iter()
        .map(|a| format!("{} ({}, {} calls)", a.name, a.kind, a.calls))
        .collect();
    let _ = writeln!(out, "Allocator: {}", allocators.join(", "));
    if record.unknown_frees > 0 || record.failed > 0 {
        let _ = writeln!(
            out,
            "{} blocks freed that wprof did not see allocated; {} calls that handed out nothing",
            record.unknown_frees, record.failed
        );
    }
    Some(out)
}
