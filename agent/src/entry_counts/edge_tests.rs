//! Tests of the edge counters: where each call site counts, what the edges' memory says
//! about itself, and which functions look for an indirect caller.

use super::*;
use wasmparser::{Parser, Payload};

/// The edges' memory as the module's data leaves it before it runs.
fn initial_memory(bytes: &[u8]) -> Vec<u8> {
    let mut pages = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        if let Payload::MemorySection(reader) = payload.unwrap() {
            pages = reader.into_iter().last().unwrap().unwrap().initial;
        }
    }
    let data = initial_data(bytes);
    let mut memory = vec![0; pages as usize * 65536];
    memory[..data.len()].copy_from_slice(&data);
    memory
}

/// The bytes the module's data writes at the start of the edges' memory.
fn initial_data(bytes: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        if let Payload::DataSection(reader) = payload.unwrap() {
            data = reader.into_iter().last().unwrap().unwrap().data.to_vec();
        }
    }
    data
}

/// The counted module of `wat`, validated, and what its edges' memory's header says it
/// has: rows and columns of the matrix, kinds and blocks of calls by slot.
fn counted_header(wat: &str) -> (Vec<u8>, [u32; 4]) {
    let counted = count_entries(&wat::parse_str(wat).unwrap()).unwrap();
    validate(&counted.bytes);
    let data = initial_data(&counted.bytes);
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
    let header = [u32_at(16), u32_at(20), u32_at(28), u32_at(32)];
    (counted.bytes, header)
}

/// Each body's operators, named as `tests::operators` names them.
fn operators(bytes: &[u8]) -> Vec<Vec<String>> {
    super::tests::operators(bytes)
}

/// The module's exports' names.
fn exports(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        if let Payload::ExportSection(reader) = payload.unwrap() {
            out.extend(reader.into_iter().map(|e| e.unwrap().name.to_string()));
        }
    }
    out
}

fn validate(bytes: &[u8]) {
    wasmparser::Validator::new()
        .validate_all(bytes)
        .expect("the counted module validates");
}

#[test]
fn each_direct_edge_has_one_cell_its_sites_share() {
    let wasm = wat::parse_str(
        r#"(module
                 (import "a" "f" (func))
                 (memory 1)
                 (func $a (export "a") (call $b) (call $b) (call 0) (return_call $c))
                 (func $b (call $c))
                 (func $c))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    validate(&counted.bytes);
    // Only the export keeps an entry counter: the others' calls are their edges'.
    assert_eq!(
        exports(&counted.bytes),
        ["a", "wprof:calls:1", EDGES_MEMORY, "wprof:functions=4"]
    );
    let mut memory = initial_memory(&counted.bytes);
    assert_eq!(EdgeTable::read(&memory).unwrap(), EdgeCounts::default());
    // Four edges, in the order their first sites come: a->b, a->f, a->c, b->c.
    let table = EdgeTable::read_layout(&memory).unwrap();
    assert_eq!(
        table,
        EdgeTable {
            direct: 4,
            ..EdgeTable::default()
        }
    );
    for k in 0..4 {
        let at = table.count(k) as usize;
        memory[at..at + 8].copy_from_slice(&u64::from(k + 10).to_le_bytes());
    }
    let counts = EdgeTable::read(&memory).unwrap();
    assert_eq!(
        counts.edges,
        [(1, 2, 10), (1, 0, 11), (1, 3, 12), (2, 3, 13)]
    );
    // Counts in a stretch said to be blank are not read: the second and third cells here.
    let (second, fourth) = (table.count(1), table.count(3));
    let blank = |at: u64| (second..fourth).contains(&at).then_some(fourth);
    let skipped = EdgeTable::read_skipping(&memory, &blank).unwrap();
    assert_eq!(skipped.edges, [(1, 2, 10), (2, 3, 13)]);
    // Nothing said blank: the same as reading it all.
    assert_eq!(
        EdgeTable::read_skipping(&memory, &|_| None).unwrap(),
        counts
    );
    // Each site adds one to its cell just before it calls: $a's two calls of $b, the same.
    let a = &operators(&counted.bytes)[0];
    let stores: Vec<&String> = a.iter().filter(|o| o.starts_with("I64Store")).collect();
    assert_eq!(stores.len(), 4);
    assert_eq!(stores[0], stores[1]);
    assert_ne!(stores[1], stores[2]);
    let calls: Vec<usize> = (0..a.len()).filter(|&i| a[i].contains("all")).collect();
    for i in calls {
        assert!(a[i - 1].starts_with("I64Store"), "{a:?}");
    }
    // $b and $c count nothing at their entry.
    let ops = operators(&counted.bytes);
    assert!(ops[2] == ["End"], "{:?}", ops[2]);
}

/// (An imported table may change: its calls are counted at the callee.)
#[test]
fn indirect_calls_announce_their_column_to_the_functions_a_table_reaches() {
    let wasm = wat::parse_str(
        r#"(module
                 (type $v (func))
                 (type $i (func (param i32)))
                 (import "env" "table" (table 2 funcref))
                 (elem (i32.const 0) $in_table $other_type)
                 (global funcref (ref.func $referenced))
                 (func $in_table)
                 (func $referenced)
                 (func $other_type (type $i))
                 (func $calls (call_indirect (type $v) (i32.const 0)) (call $referenced))
                 (func $tail (return_call_indirect (type $v) (i32.const 0))))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    validate(&counted.bytes);
    let ops = operators(&counted.bytes);
    // No `arc`; the global right after the module's own: no function keeps an entry
    // counter (nothing is exported, and no site's type can reach $other_type).
    assert_eq!(ops.len(), 5);
    assert_eq!(exports(&counted.bytes), [EDGES_MEMORY, "wprof:functions=5"]);
    let look = ["get 1", "If { blockty: Empty }", "get 1", "get 1"];
    for (f, reached) in [(0, true), (1, true), (2, false), (3, false)] {
        assert_eq!(
            ops[f].get(..4) == Some(&look.map(String::from)[..]),
            reached,
            "{f}: {:?}",
            ops[f]
        );
    }
    // $calls is column 0 of type $v's callers, $tail column 1: they announce 8 and 16.
    let calls = &ops[3];
    let at = calls
        .iter()
        .position(|o| o.starts_with("CallIndirect"))
        .unwrap();
    assert_eq!(calls[at - 2..at], ["I32Const { value: 8 }", "set 1"]);
    assert_eq!(calls[at + 1..at + 3], ["I32Const { value: 0 }", "set 1"]);
    // A tail call leaves the global to its callee.
    let tail = &ops[4];
    let at = tail
        .iter()
        .position(|o| o.starts_with("ReturnCallIndirect"))
        .unwrap();
    assert_eq!(tail[at - 2..at], ["I32Const { value: 16 }", "set 1"]);
    assert_eq!(tail[at + 1], "End");
    // Two rows of two cells: $in_table's and $referenced's.
    let mut memory = initial_memory(&counted.bytes);
    let table = EdgeTable::read_layout(&memory).unwrap();
    assert_eq!(
        (table.direct, table.rows, table.columns, table.cells),
        (1, 2, 2, 4)
    );
    let first = table.matrix_at() as usize;
    for (cell, calls) in [(0, 5u64), (3, 7)] {
        let at = first + 8 * cell;
        memory[at..at + 8].copy_from_slice(&calls.to_le_bytes());
    }
    assert_eq!(
        EdgeTable::read(&memory).unwrap().edges,
        [(3, 0, 5), (4, 1, 7)]
    );
}

#[test]
fn calls_through_a_table_that_never_changes_count_by_slot_at_the_site() {
    let module = |table: &str| {
        wat::parse_str(format!(
            r#"(module
                 (type $v (func))
                 (type $i (func (param i32)))
                 {table}
                 (elem (i32.const 1) $f $g $other)
                 (func $f)
                 (func $g (local i64))
                 (func $other (type $i))
                 (func $calls (export "calls") (param i32)
                   (call_indirect (type $v) (local.get 0))
                   (call_indirect (type $v) (i32.const 2))))"#
        ))
        .unwrap()
    };
    let counted = count_entries(&module("(table 5 funcref)")).unwrap();
    validate(&counted.bytes);
    let ops = operators(&counted.bytes);
    // Nobody looks at an entry, no global announces: $calls counts at its sites, and only
    // it (exported) keeps an entry counter.
    assert_eq!(
        exports(&counted.bytes),
        ["calls", "wprof:calls:3", EDGES_MEMORY, "wprof:functions=4"]
    );
    for (f, body) in ops.iter().enumerate().take(3) {
        assert!(
            body.iter()
                .all(|o| !o.starts_with("get ") && !o.starts_with("set ")),
            "{f}: {body:?}"
        );
    }
    // Both sites share one block; the index is kept in local 1, added after the parameter.
    let calls = &ops[3];
    let sites: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, o)| o.starts_with("CallIndirect"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(sites.len(), 2);
    for at in sites {
        assert_eq!(calls[at - 15], "LocalTee { local_index: 1 }", "{calls:?}");
        assert_eq!(calls[at - 13], "I32Const { value: 5 }");
    }
    // One kind (type $v through the table), whose callees are, slot by slot: nothing, $f,
    // $g, nothing ($other is of another type: a call there traps), nothing, and nothing
    // past the end. One block of six cells, $calls'.
    let mut memory = initial_memory(&counted.bytes);
    let table = EdgeTable::read_layout(&memory).unwrap();
    assert_eq!(
        table,
        EdgeTable {
            kinds: 1,
            blocks: 1,
            callees: 6,
            block_cells: 6,
            ..EdgeTable::default()
        }
    );
    for (cell, calls) in [(0, 1u64), (1, 5), (2, 7), (3, 1), (5, 2)] {
        let at = table.block_cells_at() as usize + 8 * cell;
        memory[at..at + 8].copy_from_slice(&calls.to_le_bytes());
    }
    assert_eq!(
        EdgeTable::read(&memory).unwrap().edges,
        [(3, 0, 5), (3, 1, 7)]
    );
    // Counts in a stretch said to be blank are not read: $f's cell here.
    let f = table.block_cells_at() + 8;
    let blank = |at: u64| (f..f + 8).contains(&at).then_some(f + 8);
    assert_eq!(
        EdgeTable::read_skipping(&memory, &blank).unwrap().edges,
        [(3, 1, 7)]
    );

    // A table the code writes, or exports, counts at the callee's entry.
    for table in [
        r#"(table 5 funcref) (func (table.set (i32.const 0) (ref.null func)))"#,
        r#"(table (export "t") 5 funcref)"#,
    ] {
        let counted = count_entries(&module(table)).unwrap();
        validate(&counted.bytes);
        let table = EdgeTable::read_layout(&initial_memory(&counted.bytes)).unwrap();
        assert_eq!(table.direct, 0, "{table:?}");
        assert!(table.rows > 0, "{table:?}");
    }
}

/// Past the cells all blocks may have, the sites left announce their calls to the callee.
#[test]
fn calls_by_slot_past_their_cells_count_at_the_callee() {
    // A full-size table holding one function: each caller's block is a cell per slot and
    // one, so only this many callers find room.
    let slots = edges::MAX_SLOTS as u64;
    let room = edges::MAX_CELLS / (slots + 1);
    let callers = room + 3;
    let mut wat =
        format!("(module (type $v (func)) (table {slots} funcref) (elem (i32.const 0) func");
    wat.push_str(&" $f".repeat(slots as usize));
    wat.push_str(") (func $f)");
    for _ in 0..callers {
        wat.push_str(" (func (call_indirect (type $v) (i32.const 0)))");
    }
    wat.push(')');
    let (counted, header) = counted_header(&wat);
    // $f's row holds the callers left.
    assert_eq!(header, [1, 3, 1, room as u32]);
    let ops = operators(&counted);
    // $f looks for an indirect caller; the first callers count by slot, the last announce.
    assert_eq!(ops[0][..2], ["get 0", "If { blockty: Empty }"]);
    let announces = |body: &Vec<String>| body.iter().any(|o| o == "set 0");
    assert!(!announces(&ops[1]), "{:?}", ops[1]);
    assert!(
        announces(&ops[callers as usize]),
        "{:?}",
        ops[callers as usize]
    );
    let slotted = ops[1..].iter().filter(|body| !announces(body)).count();
    assert_eq!(slotted as u64, room);
}

/// Past the callees all kinds may list, the sites of a kind left count at the callee.
#[test]
fn kinds_past_their_listed_callees_count_at_the_callee() {
    // A full-size table called through with many types, one caller each: a kind lists a
    // callee per slot and one, so only this many kinds find room.
    let slots = edges::MAX_SLOTS as u64;
    let room = edges::MAX_CALLEES / (slots + 1);
    let types = room + 2;
    let params = |t: u64| " i32".repeat(t as usize);
    // Slot t holds a function of the t-th type.
    let mut wat = format!("(module (table {slots} funcref) (elem (i32.const 0) func");
    for t in 0..types {
        wat.push_str(&format!(" $f{t}"));
    }
    wat.push(')');
    for t in 0..types {
        wat.push_str(&format!(" (func $f{t} (param{}))", params(t)));
    }
    for t in 0..types {
        let args = "(i32.const 0)".repeat(t as usize);
        wat.push_str(&format!(
            " (func (call_indirect (param{}) {args} (i32.const 0)))",
            params(t)
        ));
    }
    wat.push(')');
    let (counted, header) = counted_header(&wat);
    // A kind and a block per type that found room; each type left has its caller as the
    // one column of its function's row in the matrix.
    assert_eq!(header, [2, 2, room as u32, room as u32]);
    let ops = &operators(&counted)[types as usize..];
    let announces =
        |body: &Vec<String>| body.iter().any(|o| o.starts_with("I32Const { value: 8 }"));
    let left = ops.iter().filter(|body| announces(body)).count();
    assert_eq!(left as u64, types - room, "{:?}", ops.last());
}

/// A matrix past the 4 M cells it was once held to (CPython 3.15's has 152 M) is still made:
/// its memory is address space wasmtime reserves for every 32-bit memory, and a run touches
/// only the pages it counts in. 2,100 functions of one type in a table the module exports
/// (so no site counts by slot), each calling through it: 4.41 M cells.
#[test]
fn a_matrix_of_millions_of_cells_is_made_rather_than_a_table_of_pairs() {
    const N: usize = 2_100;
    let mut wat = String::from(
        "(module (type $t (func (param i32))) (table (export \"t\") 2100 funcref)\n(elem (i32.const 0)",
    );
    for f in 0..N {
        wat.push_str(&format!(" $f{f}"));
    }
    wat.push_str(")\n");
    for f in 0..N {
        wat.push_str(&format!(
            "(func $f{f} (type $t) (call_indirect (type $t) (local.get 0) (local.get 0)))\n"
        ));
    }
    wat.push(')');
    let counted = count_entries(&wat::parse_str(&wat).unwrap()).unwrap();
    validate(&counted.bytes);
    let table = EdgeTable::read_layout(&initial_memory(&counted.bytes)).unwrap();
    assert!(table.cells as u64 > 4 << 20, "{table:?}");
    assert_eq!(
        (table.rows, table.columns, table.slots),
        (N as u32, N as u32, 0)
    );
    assert_eq!(table.cells, (N * N) as u32);
}

#[test]
fn with_subtypes_indirect_calls_go_to_a_table_of_pairs() {
    let wasm = wat::parse_str(
        r#"(module
                 (type $v (sub (func)))
                 (table 1 funcref)
                 (elem (i32.const 0) $in_table)
                 (func $in_table (type $v))
                 (func $calls (call_indirect (type $v) (i32.const 0))))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    validate(&counted.bytes);
    let ops = operators(&counted.bytes);
    // `arc` after the two bodies; $in_table keeps its counter (a full table loses pairs).
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[0][..4], ["get 0", "i64 1", "I64Add", "set 0"]);
    assert_eq!(
        ops[0][4..9],
        [
            "get 1",
            "If { blockty: Empty }",
            "get 1",
            "I32Const { value: 0 }",
            "call 2"
        ]
    );
    let calls = &ops[1];
    let at = calls
        .iter()
        .position(|o| o.starts_with("CallIndirect"))
        .unwrap();
    assert_eq!(calls[at - 2..at], ["I32Const { value: 2 }", "set 1"]);
    let table = EdgeTable::read_layout(&initial_memory(&counted.bytes)).unwrap();
    assert_eq!((table.slots, table.rows), (256, 0));
}

#[test]
fn a_go_function_counts_an_indirect_caller_only_for_a_call() {
    let mut wasm = wat::parse_str(
        r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (type $go (func (param i32) (result i32)))
                 (table 2 funcref)
                 (elem (i32.const 0) $main)
                 (func $main (param i32) (result i32)
                   (drop (call $runtime.morestack (i32.const 0)))
                   (call_indirect (type $go) (i32.const 0) (i32.const 0)))
                 (func $runtime.morestack (param i32) (result i32) (i32.const 1)))"#,
    )
    .unwrap();
    tests::as_go(&mut wasm);
    let counted = count_entries(&wasm).unwrap();
    validate(&counted.bytes);
    let ops = operators(&counted.bytes);
    // Every Go function keeps its counter (3 and 4); the caller's global is 5, the restart
    // global 6. $main's look counts only with `PC_B` 0 and not its start over.
    assert_eq!(
        ops[0][6..15],
        [
            "get 5",
            "If { blockty: Empty }",
            "local 0",
            "I32Eqz",
            "get 6",
            "I32Const { value: 0 }",
            "I32Ne",
            "I32And",
            "If { blockty: Empty }"
        ]
    );
    // Before `morestack`: the take-back and its id in the restart global.
    let at = ops[0].iter().position(|o| o == "I64Sub").unwrap();
    assert_eq!(
        ops[0][at + 1..at + 4],
        ["set 3", "I32Const { value: 0 }", "set 6"]
    );
}
