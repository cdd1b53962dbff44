//! Stack mode's calls: the entry and edge counters of a counted module (see
//! [`wprof_agent::entry_counts`]), read from an instance when its thread is done, and the
//! thread's calls to WASI beside them, which the host's wrappers counted.

use wasmtime::{AsContextMut, Instance};
use wprof_agent::entry_counts::{EdgeCounts, EdgeTable, EDGES_MEMORY, EXPORT_PREFIX};

/// A thread's calls, as its module counted them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryCounts {
    /// Calls per function id, the functions called at least once, by id.
    pub functions: Vec<(u32, u64)>,
    /// Calls per edge, when the module counted them.
    pub edges: Option<EdgeCounts>,
}

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
    let mut functions: Vec<(u32, u64)> = counters
        .into_iter()
        .filter_map(|(id, global)| {
            let calls = global.get(&mut store).i64()? as u64;
            (calls > 0).then_some((id, calls))
        })
        .collect();
    functions.sort_unstable();
    let edges = instance
        .get_memory(&mut store, EDGES_MEMORY)
        .and_then(|memory| EdgeTable::read(memory.data(&store)));
    Some(EntryCounts { functions, edges })
}

/// `counts` with the calls to WASI's functions that `host` (the thread's account, if it
/// has one) counted.
pub fn with_host_calls(
    mut counts: EntryCounts,
    host: Option<&crate::run::host_calls::meter::HostAccount>,
) -> EntryCounts {
    let totals = host.map(|h| h.totals()).unwrap_or_default();
    counts.functions.extend(
        (0u32..)
            .zip(totals)
            .filter(|(_, f)| f.calls > 0)
            .map(|(id, f)| (id, f.calls)),
    );
    counts
}
