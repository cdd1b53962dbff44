//! Stack mode's calls: the entry counters of a counted module (see
//! [`wprof_agent::entry_counts`]), read from an instance when its thread is done.

use wasmtime::{AsContextMut, Instance};
use wprof_agent::entry_counts::EXPORT_PREFIX;

/// Calls per function id, the functions called at least once, by id.
pub type EntryCounts = Vec<(u32, u64)>;

/// The counters of `instance`, or `None` when its module has none.
pub fn read(mut store: impl AsContextMut, instance: &Instance) -> Option<EntryCounts> {
    let counters: Vec<(u32, wasmtime::Global)> = instance
        .exports(&mut store)
        .filter_map(|export| {
            let id = export.name().strip_prefix(EXPORT_PREFIX)?.parse().ok()?;
            Some((id, export.into_global()?))
        })
        .collect();
    if counters.is_empty() {
        return None;
    }
    let mut counts: EntryCounts = counters
        .into_iter()
        .filter_map(|(id, global)| {
            let calls = global.get(&mut store).i64()? as u64;
            (calls > 0).then_some((id, calls))
        })
        .collect();
    counts.sort_unstable();
    Some(counts)
}
