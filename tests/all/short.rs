//! Time mode's short functions through the binary: counted, not timed, by default; timed
//! with `--short-max 0`; the bound from a flag, `WPROF_SHORT_MAX` or the configuration file;
//! bad values refused before anything runs.

use serde_json::Value;

use crate::support::{calls, edge_calls, function, stderr, stdout, Scratch};

/// `$_start` calls `$work` 1000 times, `$work` calls `$leaf` once: `$leaf` is five
/// straight-line instructions, `$work` has a call and `$_start` a loop.
const MODULE: &str = r#"(module
  (global $sum (mut i32) (i32.const 0))
  (func $leaf (param $x i32) (result i32)
    (i32.add (i32.mul (local.get $x) (i32.const 31)) (i32.const 7)))
  (func $work (param $i i32)
    (global.set $sum (i32.add (global.get $sum) (call $leaf (local.get $i)))))
  (func $_start (export "_start")
    (local $i i32)
    (loop $again
      (call $work (local.get $i))
      (br_if $again (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                              (i32.const 1000))))))"#;

fn profiled(s: &Scratch, args: &[&str], envs: &[(&str, &str)]) -> (Value, String) {
    let m = s.wat_module("short.wasm", MODULE);
    let mut cmd = s.wprof(
        &[
            &["run", "--mode", "time", "-o", "p.wprof"],
            args,
            &[m.to_str().unwrap()],
        ]
        .concat(),
    );
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    (s.profile("p.wprof"), stderr(&out))
}

/// Calls exact, and every sum holds, whichever functions are timed.
fn exact_and_consistent(p: &Value) {
    assert_eq!(calls(p, "leaf"), 1000);
    assert_eq!(calls(p, "work"), 1000);
    assert_eq!(edge_calls(p, Some("work"), "leaf"), 1000);
    let functions = p["functions"].as_array().unwrap();
    let selfs: u64 = functions.iter().map(|f| f["self"].as_u64().unwrap()).sum();
    assert_eq!(selfs, p["total"].as_u64().unwrap());
    for f in functions {
        assert!(f["self"].as_u64() <= f["inclusive"].as_u64(), "{f}");
    }
}

#[test]
fn a_short_function_is_counted_not_timed_and_the_reports_say_so() {
    let s = Scratch::new();
    let (p, summary) = profiled(&s, &[], &[]);
    exact_and_consistent(&p);
    assert_eq!(p["untimed"], serde_json::json!(["leaf"]));
    // Its time is its caller's, or a share of it if a tick of the program's timer found it
    // running (a few microseconds: rarely).
    let leaf = function(&p, "leaf");
    assert_eq!(leaf["self"], leaf["inclusive"], "{leaf}");
    assert!(
        leaf["self"].as_u64().unwrap() <= function(&p, "work")["inclusive"].as_u64().unwrap(),
        "{p}"
    );
    assert!(leaf.get("min_self").is_none_or(Value::is_null), "{leaf}");
    assert!(function(&p, "work")["min_self"].is_u64());
    assert!(
        p["probe_overhead"]["called_ns"].as_f64().unwrap() > 0.0,
        "{p}"
    );
    assert!(
        summary.contains("1 short function counted, not timed") && summary.contains("leaf"),
        "{summary}"
    );
    let report = stdout(&s.run(&["report", "p.wprof"]));
    assert!(
        report.contains("1 short function counted, not timed"),
        "{report}"
    );
}

/// `$_start` calls `$slow` 400,000 times in a loop: `$slow` is straight-line but divides six
/// times by a divisor it is given (no multiply-and-shift for a constant), far more work than
/// the loop's own few instructions.
const SLOW_LEAF: &str = r#"(module
  (global $sum (mut i64) (i64.const 0))
  (func $slow (param $x i64) (param $d i64) (result i64)
    local.get $x
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u
    i64.const 0x9e3779b97f4a7c15 i64.mul i64.const 12345 i64.add local.get $d i64.div_u)
  (func $_start (export "_start")
    (local $i i64)
    (loop $again
      (global.set $sum (i64.add (global.get $sum)
        (call $slow (local.get $i) (i64.add (i64.and (local.get $i) (i64.const 7)) (i64.const 3)))))
      (br_if $again (i64.lt_u (local.tee $i (i64.add (local.get $i) (i64.const 1)))
                              (i64.const 400000))))))"#;

#[test]
fn a_short_functions_time_is_shared_out_of_its_callers_by_program_counter_samples() {
    let s = Scratch::new();
    let m = s.wat_module("slow.wasm", SLOW_LEAF);
    let out = s
        .wprof(&[
            "run",
            "--mode",
            "time",
            "-o",
            "p.wprof",
            m.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("p.wprof");
    assert_eq!(p["untimed"], serde_json::json!(["slow"]));
    assert_eq!(calls(&p, "slow"), 400_000);
    let (slow, start) = (function(&p, "slow"), function(&p, "_start"));
    let value = |f: &Value, k: &str| f[k].as_u64().unwrap();
    // Most of the loop's time is the divisions': the samples find the program in `slow`
    // far more often than in the loop's own instructions.
    assert!(value(slow, "self") > value(start, "self"), "{p}");
    assert_eq!(value(slow, "self"), value(slow, "inclusive"));
    assert_eq!(value(start, "inclusive"), p["total"].as_u64().unwrap());
    let selfs: u64 = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| value(f, "self"))
        .sum();
    assert_eq!(selfs, p["total"].as_u64().unwrap());
    let samples = p["untimed_samples"].as_u64().unwrap();
    assert!(samples > 0, "{p}");
    let ticks = &p["ticks"];
    assert_eq!(ticks["placed"].as_u64(), Some(samples), "{ticks}");
    assert!(ticks["taken"].as_u64().unwrap() >= samples, "{ticks}");
    assert!(ticks["cost_ns"].as_u64().unwrap() > 0, "{ticks}");
    // Its context holds its share too, and no activation of its own.
    let context = p["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["function"] == slow["id"])
        .unwrap();
    assert_eq!(context["self"], slow["self"], "{context}");
    assert!(slow.get("min_self").is_none_or(Value::is_null), "{slow}");
    let summary = stderr(&out);
    assert!(
        summary.contains(&format!(
            "shared out by where {samples} program-counter samples"
        )),
        "{summary}"
    );
    // Timing it instead: the share is gone, the samples too.
    let out = s
        .wprof(&[
            "run",
            "--mode",
            "time",
            "--short-max",
            "0",
            "-o",
            "q.wprof",
            m.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let q = s.profile("q.wprof");
    assert!(q.get("untimed_samples").is_none(), "{q}");
    assert!(q.get("ticks").is_none(), "{q}");
}

#[test]
fn the_ticks_stop_while_the_program_waits_in_the_host() {
    let s = Scratch::new();
    let p = crate::sample::run_sleeper(&s, &["--mode", "time"]);
    assert_eq!(calls(&p, "wasi_snapshot_preview1::poll_oneoff"), 3);
    // Every 500 µs for 300 ms of sleep would be 600 ticks; the timer stops once the thread
    // waits, and starts again when it runs.
    let ticks = &p["ticks"];
    assert!(ticks["pauses"].as_u64().unwrap() >= 1, "{ticks}");
    assert!(ticks["taken"].as_u64().unwrap() < 200, "{ticks}");
}

#[test]
fn a_bound_of_zero_times_every_function() {
    let s = Scratch::new();
    let (p, summary) = profiled(&s, &["--short-max", "0"], &[]);
    exact_and_consistent(&p);
    assert!(p.get("untimed").is_none(), "{p}");
    assert!(function(&p, "leaf")["min_self"].is_u64());
    assert!(!summary.contains("counted, not timed"), "{summary}");
}

#[test]
fn the_bound_comes_from_a_flag_a_variable_or_the_file() {
    let s = Scratch::new();
    let untimed = |p: &Value| p.get("untimed").cloned().unwrap_or(Value::Null);
    let (p, _) = profiled(&s, &[], &[("WPROF_SHORT_MAX", "0")]);
    assert_eq!(untimed(&p), Value::Null);
    let (p, _) = profiled(&s, &["--short-max", "40"], &[("WPROF_SHORT_MAX", "0")]);
    assert_eq!(untimed(&p), serde_json::json!(["leaf"]));
    std::fs::write(s.path("wprof.toml"), "short_max = 0\n").unwrap();
    let (p, _) = profiled(&s, &[], &[]);
    assert_eq!(untimed(&p), Value::Null);
    // A bound below the leaf's five instructions times it too.
    std::fs::write(s.path("wprof.toml"), "short_max = 4\n").unwrap();
    let (p, _) = profiled(&s, &[], &[]);
    assert_eq!(untimed(&p), Value::Null);
    let out = s.run(&["config", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["short_max"]["value"], 4);
    assert_eq!(v["short_max"]["source"], "wprof.toml:1");
}

#[test]
fn a_bad_bound_is_one_line_and_exit_2() {
    let s = Scratch::new();
    let m = s.wat_module("short.wasm", MODULE);
    let m = m.to_str().unwrap();
    let out = s.run(&["run", "--mode", "time", "--short-max", "many", m]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    std::fs::write(s.path("wprof.toml"), "short_max = -1\n").unwrap();
    let out = s.run(&["run", "--mode", "time", m]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("wprof: error: wprof.toml:1: short_max:"),
        "{err}"
    );
    assert!(!s.cache_dir().exists(), "the cache untouched");
    assert!(!s.path("short.wprof").exists(), "no profile");
}
