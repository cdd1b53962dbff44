//! `wprof instrument` (ahead of time, and `--watch`) and `wprof cache bench`, through the
//! real binary.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

fn listed(s: &Scratch) -> Vec<Value> {
    let out = s.run(&["cache", "ls", "--json"]);
    if out.status.code() != Some(0) {
        return Vec::new();
    }
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn instrument_ahead_of_time_makes_the_first_run_warm() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let out = s.run(&["instrument", "--mode", "sample", fib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = stdout(&out);
    assert!(
        line.contains("4 functions, 4 instrumented now") && line.contains("compiled code stored"),
        "{line}"
    );
    assert!(!s.path("fib.wprof").exists(), "nothing ran");
    let run = s.run(&["run", "--mode", "sample", "-q", fib.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0));
    let i = &s.profile("fib.wprof")["instrumentation"];
    assert_eq!(i["module_from_cache"], true);
    assert_eq!(i["compiled_from_cache"], true);
    assert_eq!(i["functions_instrumented"], 0);
    // Prepared for one probe plan: a cost-mode run is cold until prepared for too.
    let out = s.run(&["instrument", "--mode", "cost", fib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    // Bodies depend on the plan: cost-mode bodies are instrumented anew.
    assert!(
        stdout(&out).contains("4 instrumented now"),
        "{}",
        stdout(&out)
    );
    let run = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        "-o",
        "c.wprof",
        fib.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0));
    assert_eq!(
        s.profile("c.wprof")["instrumentation"]["compiled_from_cache"],
        true
    );
}

#[test]
fn instrument_prepares_the_good_modules_and_fails_on_the_bad() {
    let s = Scratch::new();
    std::fs::write(s.path("bad.wasm"), b"not wasm").unwrap();
    let out = s.run(&[
        "instrument",
        "--mode",
        "sample",
        "bad.wasm",
        sample("wasi_loop.wasm").to_str().unwrap(),
        "missing.wasm",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err.lines().all(|l| l.starts_with("wprof: error:")), "{err}");
    assert_eq!(listed(&s).len(), 1, "wasi_loop was prepared");
    assert_eq!(
        s.run(&["instrument"]).status.code(),
        Some(2),
        "no module and no --watch"
    );
}

#[test]
fn instrument_watch_prepares_modules_as_they_appear_and_change() {
    let s = Scratch::new();
    let dir = s.path("build");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(sample("wasi_loop.wasm"), dir.join("loop.wasm")).unwrap();
    let mut child = s
        .wprof(&[
            "instrument",
            "--mode",
            "sample",
            "--watch",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first pass to end.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("watching"), "{line}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    assert_eq!(listed(&s).len(), 1, "what was there is prepared first");

    let wait_for = |n: usize| {
        let start = Instant::now();
        while listed(&s).len() < n {
            assert!(start.elapsed() < Duration::from_secs(60), "never prepared");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // A new module (written aside and renamed in, as build tools do).
    std::fs::copy(sample("fib.wasm"), s.path("fib.tmp")).unwrap();
    std::fs::rename(s.path("fib.tmp"), dir.join("fib.wasm")).unwrap();
    wait_for(2);
    // A rebuilt module, written in place.
    let v2 = wat::parse_str(
        r#"(module (func $a (result i32) i32.const 7) (func (export "_start") (drop (call $a))))"#,
    )
    .unwrap();
    std::fs::write(dir.join("loop.wasm"), v2).unwrap();
    wait_for(3);
    child.kill().unwrap();
    child.wait().unwrap();
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // The next run of the new module starts warm.
    let run = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        dir.join("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0));
    assert_eq!(
        s.profile("fib.wprof")["instrumentation"]["compiled_from_cache"],
        true
    );
}

#[test]
fn cache_bench_reports_every_start_up_figure() {
    let s = Scratch::new();
    let out = s.run(&[
        "cache",
        "bench",
        "--runs",
        "1",
        "--json",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v[0];
    for key in ["plain", "cold", "warm", "changed", "code_bytes"] {
        assert!(row[key].as_u64().unwrap() > 0, "{key}: {row}");
    }
    for key in [
        "cold_ratio",
        "warm_ratio",
        "changed_ratio",
        "changed_vs_cold",
    ] {
        assert!(row[key].as_f64().unwrap() > 0.0, "{key}: {row}");
    }
    // Its caches are its own: the user's cache is untouched.
    assert!(!s.cache_dir().exists());
}

#[test]
fn every_cache_command_documents_its_flags_examples_and_exit_status() {
    let s = Scratch::new();
    for sub in [
        "ls", "stats", "verify", "show", "export", "gc", "pack", "unpack", "bench",
    ] {
        let out = s.run(&["cache", sub, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{sub}");
        let help = stdout(&out);
        assert!(
            help.contains("Examples:") && help.contains("Exit status:"),
            "wprof cache {sub} --help:\n{help}"
        );
    }
    let help = stdout(&s.run(&["instrument", "--help"]));
    for flag in [
        "--watch",
        "--mode",
        "--call-sites",
        "--cache-dir",
        "Exit status:",
    ] {
        assert!(help.contains(flag), "instrument --help lacks {flag}");
    }
    let top = stdout(&s.run(&["--help"]));
    for word in ["cache", "instrument", "WPROF_CACHE_MAX_SIZE"] {
        assert!(top.contains(word), "wprof --help lacks {word}");
    }
    assert!(stdout(&s.run(&["run", "--help"])).contains("WPROF_CACHE_MAX_SIZE"));
}

fn module_with_constant(constant: i32) -> String {
    format!(
        r#"(module
          (func $a (result i32) i32.const 1)
          (func $b (result i32) i32.const {constant})
          (func $c (result i32) (i32.add (call $a) (call $b)))
          (func (export "_start") (drop (call $c))))"#
    )
}

fn compiled_counts(s: &Scratch) -> Value {
    let out = s.run(&["cache", "stats", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "compiled")
        .unwrap()
        .clone()
}

#[test]
fn a_changed_module_reuses_the_compiled_code_of_its_unchanged_functions() {
    let s = Scratch::new();
    // The program rebuilt in place: a new version at the same path.
    let app = s.wat_module("app.wasm", &module_with_constant(2));
    let out = s.run(&["run", "--mode", "sample", "-q", app.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let first = s.profile("app.wprof");
    assert!(
        first["instrumentation"]["compiled_functions"]
            .as_u64()
            .unwrap()
            >= 4,
        "{}",
        first["instrumentation"]
    );
    // One value for all of them: the lineage's pack.
    assert_eq!(compiled_counts(&s)["entries"], 1);
    s.wat_module("app.wasm", &module_with_constant(3));
    let out = s.run(&["run", "--mode", "sample", "-q", app.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let p = s.profile("app.wprof");
    assert_eq!(p["instrumentation"]["functions_instrumented"], 1);
    assert_eq!(p["instrumentation"]["compiled_from_cache"], false);
    assert_eq!(calls(&p, "b"), 1);
    let i = &p["instrumentation"];
    assert!(
        i["compiled_functions_reused"].as_u64().unwrap() >= 3,
        "a, c and _start compiled once: {i}"
    );
    assert!(
        i["compiled_functions"].as_u64().unwrap() >= 1,
        "b again: {i}"
    );
    // Machine code stays home: not in a bundle.
    let out = s.run(&["cache", "pack", "-o", "b.tar.zst"]);
    assert_eq!(out.status.code(), Some(0));
    let files = tar::Archive::new(
        zstd::Decoder::new(std::fs::File::open(s.path("b.tar.zst")).unwrap()).unwrap(),
    )
    .entries()
    .unwrap()
    .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
    .collect::<Vec<_>>();
    assert!(files.iter().any(|f| f.contains("/functions/")));
    assert!(!files
        .iter()
        .any(|f| f.contains("/compiled/") || f.contains("/artifacts/")));
}

#[test]
fn no_incremental_keeps_the_compiled_module_but_no_compiled_functions() {
    let s = Scratch::new();
    let app = s.wat_module("app.wasm", &module_with_constant(2));
    let app = app.to_str().unwrap();
    let instrumentation = |s: &Scratch| s.profile("app.wprof")["instrumentation"].clone();
    // The flag: the module is compiled and cached whole, its functions are not kept.
    let out = s.run(&["run", "--mode", "sample", "-q", "--no-incremental", app]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(compiled_counts(&s)["entries"], 0);
    let out = s.run(&["run", "--mode", "sample", "-q", "--no-incremental", app]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(instrumentation(&s)["compiled_from_cache"], true);
    // The variable, then the configuration file, the same; a changed module compiles whole.
    s.wat_module("app.wasm", &module_with_constant(3));
    let out = s
        .wprof(&["run", "--mode", "sample", "-q", app])
        .env("WPROF_INCREMENTAL", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let i = instrumentation(&s);
    assert_eq!(i["compiled_from_cache"], false);
    // Every function compiled, none reused: the finder and the module's four at least.
    assert!(i["compiled_functions"].as_u64().unwrap() >= 5, "{i}");
    assert_eq!(i["compiled_functions_reused"], 0, "{i}");
    assert_eq!(compiled_counts(&s)["entries"], 0);
    std::fs::write(s.path("wprof.toml"), "[cache]\nincremental = false\n").unwrap();
    let shown = stdout(&s.run(&["config", app]));
    assert!(
        shown.lines().any(|l| l.contains("cache.incremental")
            && l.contains("off")
            && l.contains("wprof.toml:2")),
        "{shown}"
    );
    s.wat_module("app.wasm", &module_with_constant(4));
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(compiled_counts(&s)["entries"], 0);
    // Without it again: the next version keeps its functions, and the one after reuses them.
    std::fs::remove_file(s.path("wprof.toml")).unwrap();
    s.wat_module("app.wasm", &module_with_constant(5));
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(compiled_counts(&s)["entries"], 1);
    s.wat_module("app.wasm", &module_with_constant(6));
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0));
    let i = instrumentation(&s);
    assert!(i["compiled_functions_reused"].as_u64().unwrap() >= 3, "{i}");
    // A value that is not a switch: one line, exit 2.
    let out = s
        .wprof(&["run", "--mode", "sample", "-q", app])
        .env("WPROF_INCREMENTAL", "maybe")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("WPROF_INCREMENTAL"));
    // `wprof instrument` the same: the compiled module alone, which a run then takes.
    let s = Scratch::new();
    let app = s.wat_module("app.wasm", &module_with_constant(7));
    let app = app.to_str().unwrap();
    let out = s.run(&[
        "instrument",
        "--mode",
        "sample",
        "-q",
        "--no-incremental",
        app,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(compiled_counts(&s)["entries"], 0);
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(instrumentation(&s)["compiled_from_cache"], true);
}

/// `$f`'s body bytes are the same in both modules; only its parameter count differs, and
/// the locals the probes add are numbered after the parameters.
fn one_param_more(params: &str) -> String {
    format!(
        r#"(module
          (func $f (param {params}) (result i32) i32.const 1)
          (func (export "_start")
            (drop (call $f {args}))))"#,
        args = params
            .split_whitespace()
            .map(|_| "(i32.const 0)")
            .collect::<Vec<_>>()
            .join(" ")
    )
}

#[test]
fn a_cached_body_is_never_reused_under_another_signature() {
    let s = Scratch::new();
    let a = s.wat_module("a.wasm", &one_param_more("i32"));
    let b = s.wat_module("b.wasm", &one_param_more("i32 i32 i32"));
    for mode in ["cost", "sample", "time"] {
        for m in [&a, &b] {
            let out = s.run(&[
                "run",
                "-q",
                "--mode",
                mode,
                "-o",
                "p.wprof",
                m.to_str().unwrap(),
            ]);
            assert_eq!(out.status.code(), Some(0));
            assert!(stderr(&out).is_empty(), "{mode} {m:?}: {}", stderr(&out));
            assert_eq!(calls(&s.profile("p.wprof"), "f"), 1, "{mode} {m:?}");
        }
    }
}

/// The phases `--timings=json` printed on stderr, by name, in order.
fn phases(out: &std::process::Output) -> Vec<String> {
    let line = stderr(out)
        .lines()
        .find(|l| l.starts_with('{') && l.contains("\"phases\""))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no timings line: {}", stderr(out)));
    let timings: Value = serde_json::from_str(&line).unwrap();
    timings["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_cold_start_stores_its_compiled_code_while_the_program_runs() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let fib = fib.to_str().unwrap();
    for profiling in ["1", "0"] {
        let run = |s: &Scratch| {
            let out = s
                .wprof(&["run", "--mode", "sample", "-q", "--timings=json", fib])
                .env("WPROF", profiling)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            phases(&out)
        };
        // Cold: the compiled code is written while the program runs, and waited for after.
        let cold = run(&s);
        let at = |name: &str, phases: &[String]| phases.iter().position(|p| p == name);
        assert!(
            at("store", &cold) > at("run", &cold) && at("run", &cold).is_some(),
            "WPROF={profiling}: {cold:?}"
        );
        // Warm: it was stored, and nothing is left to store.
        let warm = run(&s);
        assert!(
            at("compile", &warm).is_some() && at("store", &warm).is_none(),
            "{warm:?}"
        );
    }
    let i = &s.profile("fib.wprof")["instrumentation"];
    assert_eq!(i["compiled_from_cache"], true);
}

#[test]
fn what_is_stored_against_an_original_is_a_miss_without_it_and_runs_go_on() {
    let s = Scratch::new();
    let app = s.wat_module("app.wasm", &module_with_constant(2));
    let app = app.to_str().unwrap();
    let instrumentation = |s: &Scratch| s.profile("app.wprof")["instrumentation"].clone();
    assert_eq!(
        s.run(&["run", "--mode", "sample", "-q", app]).status.code(),
        Some(0)
    );
    // The next version reads the bodies against the first one's original, from the cache.
    let second = s.wat_module("app.wasm", &module_with_constant(3));
    assert_eq!(
        s.run(&["run", "--mode", "sample", "-q", app]).status.code(),
        Some(0)
    );
    assert_eq!(instrumentation(&s)["functions_instrumented"], 1);
    // Its original gone: the lineage's bodies and its instrumented module cannot be read.
    let original = *blake3::hash(&std::fs::read(&second).unwrap()).as_bytes();
    let cache = wprof_cache::Cache::open(&s.cache_dir()).unwrap();
    cache.remove(wprof_cache::Kind::Module, &original).unwrap();
    drop(cache);
    let out = s.run(&["cache", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems: Vec<(String, String)> = report["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let text = |k: &str| b[k].as_str().unwrap().to_string();
            (text("section"), text("problem"))
        })
        .collect();
    assert!(
        problems
            .iter()
            .any(|(section, problem)| section == "functions"
                && problem.contains("original module is missing")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|(section, problem)| section == "modules" && problem.contains("stored against")),
        "{problems:?}"
    );
    // The next version instruments every function anew, and profiles as before.
    s.wat_module("app.wasm", &module_with_constant(4));
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(instrumentation(&s)["functions_instrumented"], 4);
    assert_eq!(calls(&s.profile("app.wprof"), "b"), 1);
    // Repaired, the cache verifies clean; the latest version is whole.
    assert_eq!(
        s.run(&["cache", "verify", "--repair"]).status.code(),
        Some(1)
    );
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(instrumentation(&s)["compiled_from_cache"], true);
    // The compiled functions are stored against the compiled artifact: without it, verify
    // names it, and the next compile reuses nothing and stores both anew.
    let cache = wprof_cache::Cache::open(&s.cache_dir()).unwrap();
    for key in cache.keys(wprof_cache::Kind::Artifact).unwrap() {
        cache.remove(wprof_cache::Kind::Artifact, &key).unwrap();
    }
    drop(cache);
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("compiled artifact it is stored against"),
        "{}",
        stdout(&out)
    );
    let out = s.run(&["run", "--mode", "sample", "-q", app]);
    assert_eq!(out.status.code(), Some(0));
    let i = instrumentation(&s);
    assert_eq!(i["compiled_from_cache"], false, "{i}");
    assert_eq!(i["compiled_functions_reused"], 0, "{i}");
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
