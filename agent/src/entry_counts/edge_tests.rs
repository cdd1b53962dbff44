//! Tests of the edge counters: where each call site counts, what the edges' memory says
//! about itself, and which functions look for an indirect caller.

use super::*;
use wasmparser::{Parser, Payload};

/// The edges' memory as the module's data leaves it before it runs.
fn initial_memory(bytes: &[u8]) -> Vec<u8> {
    let mut pages = 0;
    let mut data = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.unwrap() {
            Payload::MemorySection(reader) => {
                pages = reader.into_iter().last().unwrap().unwrap().initial;
            }
            Payload::DataSection(reader) => {
                data = reader.into_iter().last().unwrap().unwrap().data.to_vec();
            }
            _ => {}
        }
    }
    let mut memory = vec![0; pages as usize * 65536];
    memory[..data.len()].copy_from_slice(&data);
    memory
}

/// Each body's operators, named as `tests::operators` names them.
fn operators(bytes: &[u8]) -> Vec<Vec<String>> {
    super::tests::operators(bytes)
}

#[test]
fn each_direct_edge_has_one_cell_its_sites_share() {
    let wasm = wat::parse_str(
        r#"(module
                 (import "a" "f" (func))
                 (memory 1)
                 (func $a (call $b) (call $b) (call 0) (return_call $c))
                 (func $b (call $c))
                 (func $c))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    wasmparser::Validator::new()
        .validate_all(&counted.bytes)
        .unwrap();
    let mut memory = initial_memory(&counted.bytes);
    assert_eq!(EdgeTable::read(&memory).unwrap(), EdgeCounts::default());
    // Four edges, in the order their first sites come: a->b, a->f, a->c, b->c.
    let table = EdgeTable::read_layout(&memory).unwrap();
    assert_eq!(
        table,
        EdgeTable {
            direct: 4,
            slots: 0
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
}

#[test]
fn indirect_calls_announce_their_caller_to_the_functions_a_table_reaches() {
    let wasm = wat::parse_str(
        r#"(module
                 (type $v (func))
                 (table 2 funcref)
                 (elem (i32.const 0) $in_table)
                 (global funcref (ref.func $referenced))
                 (func $in_table)
                 (func $referenced)
                 (func $plain)
                 (func $calls (call_indirect (type $v) (i32.const 0)) (call $plain))
                 (func $tail (return_call_indirect (type $v) (i32.const 0))))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    wasmparser::Validator::new()
        .validate_all(&counted.bytes)
        .unwrap();
    let ops = operators(&counted.bytes);
    // Five bodies and `arc`, function 5, with global 6 (after five counters and the
    // module's own) for the caller.
    assert_eq!(ops.len(), 6);
    let look = ["get 6", "If { blockty: Empty }", "get 6"];
    for (f, reached) in [(0, true), (1, true), (2, false), (3, false)] {
        assert_eq!(
            ops[f].get(4..7) == Some(&look.map(String::from)[..]),
            reached,
            "{f}: {:?}",
            ops[f]
        );
    }
    assert_eq!(ops[0][7..9], ["I32Const { value: 0 }", "call 5"]);
    let calls = &ops[3];
    let at = calls
        .iter()
        .position(|o| o.starts_with("CallIndirect"))
        .unwrap();
    assert_eq!(calls[at - 2..at], ["I32Const { value: 4 }", "set 6"]);
    assert_eq!(calls[at + 1..at + 3], ["I32Const { value: 0 }", "set 6"]);
    // A tail call leaves the global to its callee.
    let tail = &ops[4];
    let at = tail
        .iter()
        .position(|o| o.starts_with("ReturnCallIndirect"))
        .unwrap();
    assert_eq!(tail[at - 2..at], ["I32Const { value: 5 }", "set 6"]);
    assert_eq!(tail[at + 1], "End");
    let memory = initial_memory(&counted.bytes);
    let table = EdgeTable::read_layout(&memory).unwrap();
    assert_eq!(
        table,
        EdgeTable {
            direct: 1,
            slots: 256
        }
    );
}

#[test]
fn go_resuming_its_frames_is_not_an_indirect_call() {
    let mut wasm = wat::parse_str(
        r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (type $go (func (param i32) (result i32)))
                 (table 2 funcref)
                 (elem (i32.const 0) $main)
                 (func $main (param i32) (result i32)
                   (call_indirect (type $go) (i32.const 0) (i32.const 0)))
                 (func $wasm_pc_f_loop (param i32) (result i32)
                   (call_indirect (type $go) (local.get 0) (i32.const 0))))"#,
    )
    .unwrap();
    tests::as_go(&mut wasm);
    let counted = count_entries(&wasm).unwrap();
    let ops = operators(&counted.bytes);
    let announced = |body: &[String]| body.iter().any(|o| o == "set 5");
    assert!(announced(&ops[0]));
    assert!(!announced(&ops[1]), "{:?}", ops[1]);
}
