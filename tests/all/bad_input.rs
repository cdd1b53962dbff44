//! Bad input: one line naming the file and the problem, exit code 2, no panic, nothing
//! written to the cache or over earlier profiles.

use crate::support::*;

fn assert_refused(s: &Scratch, file: &str, expect: &str) {
    let out = s.run(&["run", file]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{file}: {err}");
    assert_eq!(err.lines().count(), 1, "{file}: one line: {err}");
    assert!(err.starts_with("wprof: error: "), "{err}");
    assert!(err.contains(file), "names the file: {err}");
    assert!(err.contains(expect), "{file}: expected {expect:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!s.cache_dir().exists(), "{file}: the cache was touched");
}

#[test]
fn each_bad_input_is_one_line_and_exit_code_2() {
    let s = Scratch::new();
    // An earlier profile must survive.
    std::fs::write(s.path("earlier.wprof"), "precious").unwrap();
    assert_refused(&s, "missing.wasm", "cannot read");
    std::fs::write(s.path("text.wasm"), "hello, not wasm").unwrap();
    assert_refused(&s, "text.wasm", "not a WebAssembly module");
    std::fs::write(s.path("invalid.wasm"), b"\0asm\x01\0\0\0\x01\x05\x01\x60").unwrap();
    assert_refused(&s, "invalid.wasm", "not a valid module");
    std::fs::write(
        s.path("component.wasm"),
        wat::parse_str("(component)").unwrap(),
    )
    .unwrap();
    assert_refused(&s, "component.wasm", "component");
    s.wat_module("lib.wasm", r#"(module (func (export "f")))"#);
    assert_refused(&s, "lib.wasm", "no `_start`");
    s.wat_module(
        "env.wasm",
        r#"(module (import "env" "g" (func)) (func (export "_start")))"#,
    );
    assert_refused(&s, "env.wasm", "env::g");
    std::fs::write(
        s.path("bad.wat"),
        "(module (func (export \"_start\") i32.add2))",
    )
    .unwrap();
    assert_refused(&s, "bad.wat", "not valid WebAssembly text");
    // Well formed, but not valid: found when it is compiled, in every mode, and nothing
    // of it is stored.
    s.wat_module(
        "unbalanced.wasm",
        r#"(module (func (export "_start") i32.const 1))"#,
    );
    for mode in ["stack", "sample"] {
        let out = s.run(&["run", "--mode", mode, "unbalanced.wasm"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{mode}: {err}");
        assert_eq!(err.lines().count(), 1, "{mode}: one line: {err}");
        assert!(err.contains("not a valid module"), "{mode}: {err}");
    }
    if s.cache_dir().exists() {
        let cache = wprof_cache::Cache::open(&s.cache_dir()).unwrap();
        for kind in wprof_cache::Kind::ALL {
            assert!(cache.keys(kind).unwrap().is_empty(), "{kind:?} stored");
        }
    }
    assert_eq!(
        std::fs::read_to_string(s.path("earlier.wprof")).unwrap(),
        "precious"
    );
}

#[test]
fn bad_flags_and_bad_switches() {
    let s = Scratch::new();
    let out = s.run(&["run", "--no-such-flag", "x.wasm"]);
    assert_eq!(out.status.code(), Some(2));
    let out = s
        .wprof(&["run", sample("fib.wasm").to_str().unwrap()])
        .env("WPROF", "maybe")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("WPROF"));
    let out = s.run(&["report", "missing.wprof"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1);
}

#[test]
fn text_input_runs_too() {
    let s = Scratch::new();
    let out = s.run(&["run", "-q", sample("fib.wat").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
}

#[test]
fn a_module_using_the_counters_names_runs_uncounted_with_one_warning() {
    // Stack mode's counters export names of their own: a module that already exports one
    // runs as it is, its exit code its own, after one warning.
    let s = Scratch::new();
    for name in ["wprof:edges", "wprof:functions=3", "wprof:calls:1"] {
        let wat = format!(
            r#"(module
                 (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
                 (memory (export "memory") 1)
                 (global (export "{name}") i32 (i32.const 0))
                 (func $f (result i32) (i32.const 3))
                 (func (export "_start") (call $exit (call $f))))"#
        );
        std::fs::write(s.path("clash.wat"), wat).unwrap();
        let out = s.run(&["run", "-q", "-o", "clash.wprof", "clash.wat"]);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains("cannot count calls") && err.contains(name),
            "{name}: {err}"
        );
    }
}
