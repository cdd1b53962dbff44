//! `--mode cost`: executed wasm instructions, exact by construction and identical on every
//! run.

use crate::support::*;

/// Instruction counts by construction (`end` does not count):
/// - `$leaf`: `i32.const 1` = 1 per call;
/// - `$spin(n)`: `loop` (1), then per iteration `local.get, i32.const, i32.sub, local.tee,
///   br_if` (5): 1 + 5n;
/// - `_start`: `i32.const 10, call $spin, call $leaf, drop, i32.const 3, call $spin` = 6.
const KNOWN: &str = r#"(module
  (func $leaf (result i32) i32.const 1)
  (func $spin (param $n i32)
    (loop $l
      local.get $n
      i32.const 1
      i32.sub
      local.tee $n
      br_if $l))
  (func (export "_start")
    i32.const 10
    call $spin
    call $leaf
    drop
    i32.const 3
    call $spin))"#;

#[test]
fn costs_are_exact_by_construction() {
    let s = Scratch::new();
    let m = s.wat_module("known.wasm", KNOWN);
    let out = s.run(&["run", "-q", "--mode", "cost", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("known.wprof");
    assert_eq!(p["mode"], "cost");
    assert_eq!(p["unit"], "instructions");
    assert!(p.get("wall_time").is_none(), "no time in a cost profile");
    let spin = function(&p, "spin");
    assert_eq!(spin["calls"], 2);
    assert_eq!(spin["self"], (1 + 5 * 10) + (1 + 5 * 3));
    // The module counts per calling context, not per activation: no min or max.
    assert!(spin.get("min_self").is_none() && spin.get("max_self").is_none());
    assert_eq!(function(&p, "leaf")["self"], 1);
    let start = function(&p, "_start");
    assert_eq!(start["self"], 6);
    assert_eq!(start["inclusive"], 6 + 51 + 16 + 1);
    assert_eq!(p["total"], 74);
}

#[test]
fn fib_costs_follow_the_recursion() {
    let s = Scratch::new();
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    let p = s.profile("fib.wprof");
    let fib = function(&p, "fib");
    assert_eq!(fib["calls"], 242_785);
    // fib(25) has F(26) = 121393 leaves (n < 2) and 121392 inner calls; in fib.wat a leaf
    // executes 6 instructions and an inner call 13.
    assert_eq!(fib["self"], 6 * 121_393 + 13 * 121_392);
    // Imports execute no wasm instructions.
    assert_eq!(function(&p, "wasi_snapshot_preview1::fd_write")["self"], 0);
}

#[test]
fn cost_profiles_are_identical_across_runs() {
    let s = Scratch::new();
    let m = sample("compress.wasm");
    let run = |out: &str| {
        let o = s.run(&[
            "run",
            "-q",
            "--mode",
            "cost",
            "-o",
            out,
            m.to_str().unwrap(),
            "--",
            "2",
        ]);
        assert_eq!(o.status.code(), Some(0));
        std::fs::read(s.path(out)).unwrap()
    };
    let cold = run("cold.wprof");
    let warm1 = run("warm1.wprof");
    let warm2 = run("warm2.wprof");
    assert_eq!(warm1, warm2, "byte for byte");
    // A cold run differs only in how it got its code.
    let strip = |file: &[u8]| {
        let json = zstd::decode_all(file).unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        v.as_object_mut().unwrap().remove("instrumentation");
        v
    };
    assert_eq!(strip(&cold), strip(&warm1));
    // And the mode can come from the environment.
    let o = s
        .wprof(&[
            "run",
            "-q",
            "-o",
            "env.wprof",
            m.to_str().unwrap(),
            "--",
            "2",
        ])
        .env("WPROF_MODE", "cost")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read(s.path("env.wprof")).unwrap(), warm1);
}

/// `main` counts to 1000 and calls `quit`, which ends the program with `proc_exit(3)`:
/// neither returns. `main` executes `loop` (1), 1000 iterations of 8 instructions, and the
/// `call` (1).
const EXIT_FROM_A_HELPER: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (func $quit (call $proc_exit (i32.const 3)))
  (func $main (local $i i32)
    (loop $l
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))
    (call $quit))
  (func (export "_start") (call $main)))
"#;

#[test]
fn frames_that_never_return_keep_their_counts_when_a_callee_exits() {
    let s = Scratch::new();
    let m = s.wat_module("exit.wasm", EXIT_FROM_A_HELPER);
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        "-o",
        "exit.wprof",
        m.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let p = s.profile("exit.wprof");
    assert_eq!(function(&p, "main")["self"], 1 + 8 * 1000 + 1);
    assert_eq!(function(&p, "_start")["self"], 1);
    assert_eq!(function(&p, "quit")["self"], 2);
    assert_eq!(p["total"], 8002 + 1 + 2);
}
