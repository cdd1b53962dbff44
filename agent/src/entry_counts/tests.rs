//! Tests of the entry counters: the counted module validates, each function counts its
//! calls (a Go function its calls, not its resumptions), and its offsets map back.

use super::*;
use wasmparser::{Operator, Parser, Payload};

/// Marks `wasm` as Go marks its modules: with a build id.
pub(super) fn as_go(wasm: &mut Vec<u8>) {
    use wasm_encoder::Section;
    wasm_encoder::CustomSection {
        name: "go:buildid".into(),
        data: b"x".into(),
    }
    .append_to(wasm);
}

/// Each body's operators, named, with their offsets in the module.
fn bodies(bytes: &[u8]) -> Vec<Vec<(String, usize)>> {
    Parser::new(0)
        .parse_all(bytes)
        .filter_map(|p| match p.unwrap() {
            Payload::CodeSectionEntry(body) => Some(
                body.get_operators_reader()
                    .unwrap()
                    .into_iter_with_offsets()
                    .map(|op| {
                        let (op, at) = op.unwrap();
                        (named(op), at)
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// Each body's operators, named.
pub(super) fn operators(bytes: &[u8]) -> Vec<Vec<String>> {
    bodies(bytes)
        .into_iter()
        .map(|ops| ops.into_iter().map(|(name, _)| name).collect())
        .collect()
}

fn named(op: Operator<'_>) -> String {
    match op {
        Operator::GlobalGet { global_index } => format!("get {global_index}"),
        Operator::GlobalSet { global_index } => format!("set {global_index}"),
        Operator::I64Const { value } => format!("i64 {value}"),
        Operator::LocalGet { local_index } => format!("local {local_index}"),
        Operator::Call { function_index } => format!("call {function_index}"),
        other => format!("{other:?}"),
    }
}

/// The module's exports, by name, and each body's first operators, after validating it.
fn read(bytes: &[u8]) -> (Vec<(String, u32)>, Vec<Vec<String>>) {
    wasmparser::Validator::new()
        .validate_all(bytes)
        .expect("the counted module validates");
    let mut exports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        if let Payload::ExportSection(reader) = payload.unwrap() {
            for e in reader {
                let e = e.unwrap();
                exports.push((e.name.to_string(), e.index));
            }
        }
    }
    let starts = operators(bytes)
        .into_iter()
        .map(|mut ops| {
            ops.truncate(6);
            ops
        })
        .collect();
    (exports, starts)
}

#[test]
fn each_function_entered_from_outside_counts_its_entries_in_a_global_exported_under_its_id() {
    // Two imports, a global and an export of the module's own, locals in a body.
    let wasm = wat::parse_str(
        r#"(module
                 (import "a" "f" (func))
                 (import "a" "g" (func))
                 (global $g (mut i32) (i32.const 7))
                 (func $one (export "one") (result i32) (local i32 i64)
                   global.get $g)
                 (func $two (call $one) drop))"#,
    )
    .unwrap();
    let (exports, starts) = read(&count_entries(&wasm).unwrap().bytes);
    // $two, which only its callers could call, has none: its calls are its edges'.
    assert_eq!(
        exports,
        [
            ("one".to_string(), 2),
            ("wprof:calls:2".to_string(), 1),
            (EDGES_MEMORY.to_string(), 0),
            ("wprof:functions=4".to_string(), 0)
        ]
    );
    assert_eq!(
        starts[0][..5],
        ["get 1", "i64 1", "I64Add", "set 1", "get 0"]
    );
    assert_eq!(starts[1][0], "I32Const { value: 0 }");
}

#[test]
fn a_module_without_globals_or_exports_gets_both_sections_in_their_places() {
    // A start function and a data segment: the new sections go between the others.
    let wasm = wat::parse_str(
        r#"(module
                 (memory 1)
                 (func $main)
                 (start $main)
                 (data (i32.const 0) "x"))"#,
    )
    .unwrap();
    let (exports, starts) = read(&count_entries(&wasm).unwrap().bytes);
    assert_eq!(
        exports,
        [
            ("wprof:calls:0".to_string(), 0),
            (EDGES_MEMORY.to_string(), 1),
            ("wprof:functions=1".to_string(), 1)
        ]
    );
    assert_eq!(starts[0][..4], ["get 0", "i64 1", "I64Add", "set 0"]);
    // No defined function: nothing to count but its (empty) edges, still valid.
    let empty = wat::parse_str("(module)").unwrap();
    let (exports, starts) = read(&count_entries(&empty).unwrap().bytes);
    assert_eq!(
        exports,
        [
            (EDGES_MEMORY.to_string(), 0),
            ("wprof:functions=0".to_string(), 0)
        ]
    );
    assert!(starts.is_empty());
}

#[test]
fn a_go_function_counts_calls_and_not_resumptions() {
    let mut wasm = wat::parse_str(
        r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $go (param i32) (result i32)
                   i32.const 0
                   call $runtime.morestack_noctxt
                   drop
                   i32.const 1)
                 (func $other (param i64))
                 (func $runtime.morestack_noctxt (param i32) (result i32) i32.const 1))"#,
    )
    .unwrap();
    as_go(&mut wasm);
    let counted = count_entries(&wasm).unwrap();
    let (_, starts) = read(&counted.bytes);
    assert_eq!(
        starts[0][..6],
        [
            "get 3",
            "local 0",
            "I32Eqz",
            "I64ExtendI32U",
            "I64Add",
            "set 3"
        ]
    );
    // It starts over after `morestack`: that call takes its count back, then counts its
    // edge.
    let after: Vec<String> = operators(&counted.bytes)[0]
        .iter()
        .skip(7)
        .take(11)
        .cloned()
        .collect();
    assert_eq!(after[..4], ["get 3", "i64 1", "I64Sub", "set 3"]);
    assert!(after[6].starts_with("I64Load") && after[9].starts_with("I64Store"));
    assert_eq!(after[10], "call 2");
    assert_eq!(starts[1][..4], ["get 4", "i64 1", "I64Add", "set 4"]);
}

#[test]
fn a_module_using_the_counters_names_is_refused() {
    let wasm = wat::parse_str(r#"(module (func (export "wprof:calls:0")))"#).unwrap();
    let e = count_entries(&wasm).unwrap_err();
    assert!(e.to_string().contains("a name wprof uses"), "{e}");
    assert!(
        count_entries(b"\0asm\x01\0\0\0\x01").is_err(),
        "a cut section"
    );
}

/// Every instruction of `counted` maps back to its offset in `wasm`: the original's to
/// their own, in order, and the added ones to the instruction they precede.
fn assert_maps_back(wasm: &[u8], counted: &CountedModule) {
    let offsets = &counted.offsets;
    for (old, new) in bodies(wasm).iter().zip(&bodies(&counted.bytes)) {
        let kept: Vec<usize> = new
            .iter()
            .filter(|(_, at)| !offsets.is_added(*at))
            .map(|(_, at)| offsets.original_offset(*at).unwrap())
            .collect();
        let old: Vec<usize> = old.iter().map(|(_, at)| *at).collect();
        assert_eq!(kept, old);
        let mut next = None;
        for (name, at) in new.iter().rev() {
            let mapped = offsets.original_offset(*at);
            match offsets.is_added(*at) {
                true => assert_eq!(mapped, next, "{name} at {at}"),
                false => next = mapped,
            }
        }
    }
    assert_eq!(offsets.original_offset(3), None, "before the code");
    assert_eq!(offsets.original_offset(counted.bytes.len()), None);
}

#[test]
fn every_instruction_maps_back_to_its_offset_in_the_original() {
    let wasm = wat::parse_str(
        r#"(module
                 (type $v (sub (func)))
                 (global $g (mut i32) (i32.const 0))
                 (table 1 funcref)
                 (elem (i32.const 0) $a)
                 (func $a (type $v) (local i32) i32.const 1 local.set 0)
                 (func $b (call $a) (call $a) (call_indirect (type $v) (i32.const 0))))"#,
    )
    .unwrap();
    let counted = count_entries(&wasm).unwrap();
    assert_maps_back(&wasm, &counted);
    // Bodies with no entry counter (nothing outside the module enters them), one of them
    // long enough that its size takes another byte once its call is counted.
    let long = "(drop (i32.const 1)) ".repeat(40);
    let uncounted = wat::parse_str(format!(
        r#"(module
                 (func $a (local i32) i32.const 1 local.set 0)
                 (func $b (local i64) {long} (call $a))
                 (func $c nop (call $b)))"#
    ))
    .unwrap();
    assert_maps_back(&uncounted, &count_entries(&uncounted).unwrap());
    // `arc` after the module's bodies: none of its code is the original's.
    let arc = bodies(&counted.bytes).pop().unwrap();
    assert_eq!(bodies(&counted.bytes).len(), 3);
    assert!(arc
        .iter()
        .all(|(_, at)| counted.offsets.original_offset(*at).is_none()));
}

#[test]
fn a_go_functions_instructions_map_back_around_both_additions() {
    let mut wasm = wat::parse_str(
        r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $f (param i32) (result i32) (local i64)
                   local.get 0
                   call $runtime.morestack
                   i32.const 2
                   i32.add)
                 (func $runtime.morestack (param i32) (result i32) local.get 0))"#,
    )
    .unwrap();
    as_go(&mut wasm);
    let counted = count_entries(&wasm).unwrap();
    let names: Vec<String> = operators(&counted.bytes).swap_remove(0);
    assert_eq!(
        names[..11],
        [
            "get 3",
            "local 0",
            "I32Eqz",
            "I64ExtendI32U",
            "I64Add",
            "set 3",
            "local 0",
            "get 3",
            "i64 1",
            "I64Sub",
            "set 3",
        ]
    );
    assert_eq!(names[17], "call 1");
    assert_maps_back(&wasm, &counted);
}

#[test]
fn the_offset_map_survives_its_encoding_and_marks_the_added_bytes() {
    let mut wasm = wat::parse_str(
        r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $f (param i32) (result i32)
                   local.get 0
                   call $runtime.morestack)
                 (func $runtime.morestack (param i32) (result i32) local.get 0)
                 (func $g (local i32) i32.const 1 local.set 0))"#,
    )
    .unwrap();
    as_go(&mut wasm);
    let counted = count_entries(&wasm).unwrap();
    let encoded = counted.offsets.encode();
    let decoded = CounterOffsets::decode(&encoded).unwrap();
    assert_eq!(decoded, counted.offsets);
    // Every byte of every counted body: the same original offset, added where the
    // increments and take-backs are.
    let ops: Vec<(String, usize)> = bodies(&counted.bytes).into_iter().flatten().collect();
    let mut added = 0;
    for (name, at) in &ops {
        assert_eq!(
            decoded.original_offset(*at),
            counted.offsets.original_offset(*at)
        );
        let is_counter = name.starts_with("get ") || name.starts_with("set ");
        if is_counter {
            assert!(decoded.is_added(*at), "{name} at {at}");
            added += 1;
        }
    }
    assert_eq!(
        added,
        2 * 4,
        "three increments and a take-back, a get and a set each"
    );
    assert!(!decoded.is_added(ops.last().unwrap().1));
    // Not a map: cut, with bytes left over, or with a place past the code's end.
    assert_eq!(CounterOffsets::decode(&encoded[..encoded.len() - 1]), None);
    assert_eq!(
        CounterOffsets::decode(&[encoded.as_slice(), &[0]].concat()),
        None
    );
    assert_eq!(CounterOffsets::decode(&[1, 1, 5, 0, 3]), None);
    assert_eq!(CounterOffsets::decode(&[]), None);
}

#[test]
fn a_capture_stores_its_parameter_in_a_page_of_its_own_at_each_entry() {
    // A memory of the module's own (so the page is memory 1), an import (ids from 1).
    let wasm = wat::parse_str(
        r#"(module
                 (import "a" "f" (func (param i32)))
                 (memory 1)
                 (func $eval (export "eval") (param i64 i32) (result i32) local.get 1)
                 (func $other (export "other") (param f64)))"#,
    )
    .unwrap();
    let captures = [
        Capture {
            function: 1,
            param: 1,
            slot: 1,
        },
        // Not kept: an i64 parameter, an import, a parameter past the last, a slot past
        // the page.
        Capture {
            function: 1,
            param: 0,
            slot: 0,
        },
        Capture {
            function: 0,
            param: 0,
            slot: 0,
        },
        Capture {
            function: 2,
            param: 1,
            slot: 0,
        },
        Capture {
            function: 1,
            param: 1,
            slot: CAPTURE_SLOTS,
        },
    ];
    let counted = count_entries_capturing(&wasm, &captures).unwrap();
    assert_eq!(counted.captured, [captures[0]]);
    let (exports, _) = read(&counted.bytes);
    assert!(
        exports.contains(&(CAPTURE_MEMORY.to_string(), 1)),
        "{exports:?}"
    );
    let ops = operators(&counted.bytes);
    assert_eq!(
        ops[0][..8],
        [
            "get 0",
            "i64 1",
            "I64Add",
            "set 0",
            "I32Const { value: 0 }",
            "local 1",
            "I32Store { memarg: MemArg { align: 2, max_align: 2, offset: 4, memory: 1 } }",
            "local 1",
        ]
    );
    // The function without a capture only counts.
    assert_eq!(ops[1][4], "End");
    // Offsets map back: the original `local.get 1` of $eval.
    let original = bodies(&wasm)[0][0].1;
    let now = bodies(&counted.bytes)[0][7].1;
    assert_eq!(counted.offsets.original_offset(now), Some(original));
    // Without a memory of its own (none at all), the page is memory 0; with no capture
    // that fits, no page.
    let bare = wat::parse_str("(module (func (param i32)))").unwrap();
    let counted = count_entries_capturing(
        &bare,
        &[Capture {
            function: 0,
            param: 0,
            slot: 0,
        }],
    )
    .unwrap();
    assert!(read(&counted.bytes)
        .0
        .contains(&(CAPTURE_MEMORY.to_string(), 0)));
    let counted = count_entries_capturing(
        &bare,
        &[Capture {
            function: 0,
            param: 1,
            slot: 0,
        }],
    )
    .unwrap();
    assert!(!read(&counted.bytes)
        .0
        .iter()
        .any(|(n, _)| n == CAPTURE_MEMORY));
}
