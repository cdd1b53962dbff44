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
    let leaf = function(&p, "leaf");
    assert_eq!(
        (leaf["self"].as_u64(), leaf["inclusive"].as_u64()),
        (Some(0), Some(0))
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
