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
    // Only the pages the module wrote: most of a large matrix never is.
    let edges = instance
        .get_memory(&mut store, EDGES_MEMORY)
        .and_then(|memory| {
            let data = memory.data(&store);
            let pages = super::written_pages::WrittenPages::of(data.as_ptr(), data.len());
            EdgeTable::read_skipping(data, &|at| pages.as_ref()?.blank_until(at))
        });
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
        counts_of_module(wat::parse_str(wat).unwrap())
    }

    fn counts_of_module(wasm: Vec<u8>) -> EntryCounts {
        let (counts, ended) = counts_after_main(&wasm);
        ended.unwrap();
        counts
    }

    /// `wasm` counted, instantiated and its `main` run; what its counters say, and how
    /// `main` ended.
    fn counts_after_main(wasm: &[u8]) -> (EntryCounts, wasmtime::Result<()>) {
        let counted = count_entries(wasm).unwrap();
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, &counted.bytes).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let main = instance
            .get_typed_func::<(), ()>(&mut store, "main")
            .unwrap();
        let ended = main.call(&mut store, ());
        (read(&mut store, &instance, 0).unwrap(), ended)
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
    fn calls_by_slot_add_up_per_callee_and_a_call_that_traps_is_none() {
        let wat = |index: u32| {
            format!(
                r#"(module
                    (type $v (func))
                    (type $i (func (param i32)))
                    (table 4 funcref)
                    (elem (i32.const 0) $b $b $c $other)
                    (func $main (export "main")
                      (call_indirect (type $v) (i32.const 0))
                      (call_indirect (type $v) (i32.const 1))
                      (call_indirect (type $v) (i32.const 2))
                      (call_indirect (type $v) (i32.const {index})))
                    (func $b)
                    (func $c)
                    (func $other (type $i)))"#
            )
        };
        let counts = counts_of(&wat(1));
        assert_eq!(
            edges(&counts),
            [((0, 1), 3), ((0, 2), 1)].into_iter().collect()
        );
        assert_eq!(counts.functions, [(0, 1), (1, 3), (2, 1)]);
        // The last call traps: past the table's end, or to a function of another type.
        for index in [4, 3, u32::MAX] {
            let (counts, ended) = counts_after_main(&wat::parse_str(wat(index)).unwrap());
            let trap = ended.unwrap_err();
            assert!(trap.downcast_ref::<wasmtime::Trap>().is_some(), "{trap:?}");
            assert_eq!(
                edges(&counts),
                [((0, 1), 2), ((0, 2), 1)].into_iter().collect(),
                "index {index}"
            );
        }
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

    /// Go's calling convention (`PC_B` in, 1 out when unwinding): a call through the table
    /// is an edge's when `PC_B` is 0 and it is not a function starting over after
    /// `runtime.morestack`. Functions: 0 `main`, 1 `f`, 2 `g` (which calls `morestack` the
    /// first time), 3 `wasm_pc_f_loop` (calls table slot `$slot` with `PC_B` 0, as a goroutine's
    /// start and a start over come), 4 `resume` (calls `f` with `PC_B` 7, a resumption),
    /// 5 `runtime.morestack`.
    #[test]
    fn a_go_function_counts_calls_through_the_table_and_not_resumptions() {
        let mut wasm = wat::parse_str(
            r#"(module
                (global (mut i32) (i32.const 0))
                (global (mut i64) (i64.const 0))
                (global (mut i64) (i64.const 0))
                (global $slot (mut i32) (i32.const 0))
                (type $go (func (param i32) (result i32)))
                (table 2 funcref)
                (elem (i32.const 0) $f $g)
                (func $main (export "main")
                  (drop (call_indirect (type $go) (i32.const 0) (i32.const 0)))
                  (drop (call $g (i32.const 0)))
                  (global.set $slot (i32.const 1))
                  (drop (call $wasm_pc_f_loop (i32.const 0)))
                  (global.set $slot (i32.const 0))
                  (drop (call $wasm_pc_f_loop (i32.const 0)))
                  (drop (call $resume (i32.const 0))))
                (func $f (type $go) (i32.const 0))
                (func $g (type $go)
                  (if (i32.eqz (global.get 0))
                    (then
                      (global.set 0 (i32.const 1))
                      (drop (call $runtime.morestack (i32.const 0)))))
                  (i32.const 0))
                (func $wasm_pc_f_loop (type $go)
                  (call_indirect (type $go) (i32.const 0) (global.get $slot)))
                (func $resume (type $go)
                  (call_indirect (type $go) (i32.const 7) (i32.const 0)))
                (func $runtime.morestack (type $go) (i32.const 1)))"#,
        )
        .unwrap();
        use wasm_encoder::Section;
        wasm_encoder::CustomSection {
            name: "go:buildid".into(),
            data: b"x".into(),
        }
        .append_to(&mut wasm);
        let counts = counts_of_module(wasm);
        let expected: std::collections::BTreeMap<(u32, u32), u64> = [
            ((0, 1), 1),
            ((0, 2), 1),
            ((2, 5), 1),
            ((0, 3), 2),
            ((3, 1), 1),
            ((0, 4), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(edges(&counts), expected);
        // `g`: called once (its start over taken back); `f`: by `main` and the loop.
        assert_eq!(
            counts.functions,
            [(0, 1), (1, 2), (2, 1), (3, 2), (4, 1), (5, 1)]
        );
    }
}
