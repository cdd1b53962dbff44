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

/// The counters of `instance`, or `None` when its module has none; `imports`, the functions
/// the module imports. A defined function without an entry counter (one that only the
/// module's own call sites enter) gets the calls of its edges.
pub fn read(
    mut store: impl AsContextMut,
    instance: &Instance,
    imports: u32,
) -> Option<EntryCounts> {
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
    let edges = instance
        .get_memory(&mut store, EDGES_MEMORY)
        .and_then(|memory| EdgeTable::read(memory.data(&store)));
    if let Some(edges) = &edges {
        let counted: std::collections::HashSet<u32> = functions.iter().map(|f| f.0).collect();
        let mut brought: std::collections::BTreeMap<u32, u64> = Default::default();
        for &(_, callee, calls) in &edges.edges {
            if callee >= imports && !counted.contains(&callee) {
                *brought.entry(callee).or_default() += calls;
            }
        }
        functions.extend(brought);
    }
    functions.sort_unstable();
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

#[cfg(test)]
mod tests {
    use super::*;
    use wprof_agent::entry_counts::count_entries;

    /// `wat` counted, instantiated and its `main` run; what its counters say.
    fn counts_of(wat: &str) -> EntryCounts {
        let counted = count_entries(&wat::parse_str(wat).unwrap()).unwrap();
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, &counted.bytes).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let main = instance
            .get_typed_func::<(), ()>(&mut store, "main")
            .unwrap();
        main.call(&mut store, ()).unwrap();
        read(&mut store, &instance, 0).unwrap()
    }

    /// `(caller, callee) -> calls`, pairs counted twice added up.
    fn edges(counts: &EntryCounts) -> std::collections::BTreeMap<(u32, u32), u64> {
        let mut out = std::collections::BTreeMap::new();
        for &(caller, callee, calls) in &counts.edges.as_ref().unwrap().edges {
            *out.entry((caller, callee)).or_default() += calls;
        }
        out
    }

    /// Functions 0 `main`, 1 `a`, 2 `b` (`a` calls it through the table), 3 `c` (reached
    /// by a tail call through the table from `b`), 4 `d` (a `call_ref`), 5 `loop` (a
    /// `return_call` of itself); `TYPE` is the type the table's functions have.
    const CALLS: &str = r#"(module
        TYPE
        (type $r (func (param i32) (result i32)))
        (table 4 funcref)
        (elem (i32.const 0) $b $c)
        (elem declare func $d)
        (func $main (export "main")
          (call $a) (call $a) (call $a)
          (drop (call $loop (i32.const 5)))
          (drop (call_ref $r (i32.const 1) (ref.func $d))))
        (func $a (type $v) (call_indirect (type $v) (i32.const 0)))
        (func $b (type $v) (return_call_indirect (type $v) (i32.const 1)))
        (func $c (type $v))
        (func $d (type $r) (local.get 0))
        (func $loop (type $r)
          (if (result i32) (local.get 0)
            (then (return_call $loop (i32.sub (local.get 0) (i32.const 1))))
            (else (i32.const 0)))))"#;

    fn expected() -> std::collections::BTreeMap<(u32, u32), u64> {
        [
            ((0, 1), 3),
            ((1, 2), 3),
            ((2, 3), 3),
            ((0, 5), 1),
            ((5, 5), 5),
            ((0, 4), 1),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn direct_indirect_tail_and_reference_calls_count_on_their_edges() {
        let counts = counts_of(&CALLS.replace("TYPE", "(type $v (func))"));
        assert_eq!(edges(&counts), expected());
        // Only `main` keeps an entry counter (it is exported); the others' calls are their
        // edges'.
        assert_eq!(
            counts.functions,
            [(0, 1), (1, 3), (2, 3), (3, 3), (4, 1), (5, 6)]
        );
        assert_eq!(counts.edges.unwrap().lost, 0);
    }

    #[test]
    fn with_subtypes_the_table_of_pairs_counts_the_same() {
        let counts = counts_of(&CALLS.replace("TYPE", "(type $v (sub (func)))"));
        assert_eq!(edges(&counts), expected());
        assert_eq!(
            counts.functions,
            [(0, 1), (1, 3), (2, 3), (3, 3), (4, 1), (5, 6)]
        );
    }
}
