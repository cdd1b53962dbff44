//! Stack mode's calls per caller -> callee edge: each function's and each edge's calls are
//! sample mode's exact ones, in every thread, through tables and tail calls; calls through
//! tables counted in the table of pairs (whose own function is no frame of the program)
//! and in a matrix of millions of cells.

use serde_json::Value;

use crate::stacks::{consistent, stack_run, u};
use crate::support::*;

/// A callee reached through a table whose type may have subtypes (it is not final): its
/// calls are counted in the table of pairs, through a function the counted module adds,
/// which a tick often finds running.
const CALLS_THROUGH_PAIRS: &str = r#"(module
  (type $leaf (sub (func (param i32) (result i32))))
  (table 1 funcref)
  (elem (i32.const 0) $double)
  (func $double (type $leaf) (i32.add (local.get 0) (local.get 0)))
  (func $caller (param $n i32) (result i32)
    (local $sum i32)
    (loop $again
      (local.set $sum (call_indirect (type $leaf) (local.get $sum) (i32.const 0)))
      (br_if $again (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (local.get $sum))
  (func (export "_start") (drop (call $caller (i32.const 30000000)))))"#;

#[test]
fn the_function_that_counts_pairs_is_no_frame_of_the_program() {
    // Its ticks were a function of its own, past the module's, that the profile named
    // after time mode's waits (or, in an interpreter, after the script's first function).
    let s = Scratch::new();
    let m = s.wat_module("pairs.wasm", CALLS_THROUGH_PAIRS);
    let out = s.run(&[
        "run",
        "-q",
        "--sample-period-us",
        "100",
        "-o",
        "p.wprof",
        m.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("p.wprof");
    consistent(&p);
    let names: Vec<&str> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| ["_start", "caller", "double"].contains(n)),
        "{names:?}"
    );
    assert_eq!(
        edge_calls(&p)[&("caller".to_string(), "double".to_string())],
        30_000_000
    );
    assert!(
        u(&p["sampling"]["stacks"]["counters_ns"]) > 0,
        "{}",
        p["sampling"]
    );
}

/// 2,100 functions, each calling its own of 2,100 others through a table the module exports
/// (so no site counts by slot): a matrix of 4.41 M cells, past the 4 M it was once held to
/// (the table of pairs then). Caller `k` calls `k % 7 + 1` times.
fn wide_matrix_module() -> String {
    const N: usize = 2_100;
    let mut wat = String::from(
        "(module (type $leaf (func (param i32) (result i32)))\n(table (export \"t\") 2100 funcref)\n(elem (i32.const 0)",
    );
    for k in 0..N {
        wat.push_str(&format!(" $leaf{k}"));
    }
    wat.push_str(")\n");
    for k in 0..N {
        wat.push_str(&format!(
            "(func $leaf{k} (type $leaf) (i32.add (local.get 0) (i32.const {k})))\n\
             (func $caller{k} (param $n i32) (result i32) (local $sum i32)\n\
               (loop $again\n\
                 (local.set $sum (call_indirect (type $leaf) (local.get $sum) (i32.const {k})))\n\
                 (br_if $again (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))\n\
               (local.get $sum))\n",
        ));
    }
    wat.push_str("(func (export \"_start\")\n");
    for k in 0..N {
        wat.push_str(&format!(
            "(drop (call $caller{k} (i32.const {})))\n",
            k % 7 + 1
        ));
    }
    wat.push_str("))");
    wat
}

#[test]
fn a_matrix_of_millions_of_cells_counts_every_edge_exactly() {
    let s = Scratch::new();
    let m = s.wat_module("wide.wasm", &wide_matrix_module());
    let out = s.run(&["run", "-q", "-o", "w.wprof", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("w.wprof");
    consistent(&p);
    let edges = edge_calls(&p);
    for k in 0..2_100u64 {
        let edge = (format!("caller{k}"), format!("leaf{k}"));
        assert_eq!(edges.get(&edge), Some(&(k % 7 + 1)), "{edge:?}");
    }
    assert!(
        p["sampling"]["stacks"]["edge_calls_lost"].is_null()
            || u(&p["sampling"]["stacks"]["edge_calls_lost"]) == 0,
        "{}",
        p["sampling"]
    );
}

/// Each edge's calls in profile `p`, by (caller name or `(root)`, callee name).
pub(crate) fn edge_calls(p: &Value) -> std::collections::BTreeMap<(String, String), u64> {
    let name = |id: &Value| match id.as_u64() {
        Some(id) => p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| u(&f["id"]) == id)
            .map_or(format!("#{id}"), |f| {
                f["name"].as_str().unwrap().to_string()
            }),
        None => "(root)".to_string(),
    };
    let mut out = std::collections::BTreeMap::new();
    for e in p["edges"].as_array().unwrap() {
        *out.entry((name(&e["caller"]), name(&e["callee"])))
            .or_default() += u(&e["calls"]);
    }
    out
}

/// `module` in sample mode, whose probes count every call: its profile.
fn exact_run(s: &Scratch, module: &str, out_name: &str) -> Value {
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "sample",
        "-o",
        out_name,
        sample(module).to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    s.profile(out_name)
}

#[test]
fn each_functions_and_edges_calls_are_sample_modes_exact_ones() {
    let s = Scratch::new();
    let (_, p) = stack_run(&s, "gprof_trap.wasm", "g.wprof");
    let exact = exact_run(&s, "gprof_trap.wasm", "exact.wprof");
    let mut called = 0;
    for f in exact["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        assert_eq!(calls(&p, name), u(&f["calls"]), "{name}");
        called += u(&f["calls"]);
    }
    assert!(calls(&p, "d") > 1 && called > 10, "{exact}");
    assert_eq!(edge_calls(&p), edge_calls(&exact));
    // The report shows the functions' calls and the edges'.
    let out = s.run(&["report", "g.wprof"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("{called} calls")) && !text.contains("calls not counted"),
        "{text}"
    );
    assert!(
        text.contains("stack mode: times estimated from")
            && text.contains("each function's and each caller's calls counted"),
        "{text}"
    );
    let d_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("d ") || l.starts_with("d  ("))
        .unwrap_or_else(|| panic!("no section for d in {text}"));
    assert!(
        d_line.contains(&format!("({} calls", calls(&p, "d"))),
        "{d_line}"
    );
    let b_d = edge_calls(&p)[&("b".to_string(), "d".to_string())];
    assert!(
        text.lines()
            .any(|l| l.contains("called by b") && l.contains(&format!(" {b_d} calls"))),
        "{text}"
    );
}

#[test]
fn calls_through_tables_tail_calls_and_threads_count_on_their_edges() {
    // interp: an interpreter's handlers called through a table; tailcalls: `return_call`
    // loops and mutual recursion; threads: four threads calling the same functions.
    let s = Scratch::new();
    for module in ["interp.wasm", "tailcalls.wasm", "threads.wasm"] {
        let (out, p) = stack_run(&s, module, "stack.wprof");
        assert_eq!(out.status.code(), Some(0), "{module}: {}", stderr(&out));
        consistent(&p);
        let exact = exact_run(&s, module, "exact.wprof");
        let (stack, exact) = (edge_calls(&p), edge_calls(&exact));
        assert!(exact.values().sum::<u64>() > 10, "{module}: {exact:?}");
        assert_eq!(stack, exact, "{module}");
    }
}
