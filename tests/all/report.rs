//! `wprof report` on a real profile.

use crate::support::*;

fn fib_profile(s: &Scratch) {
    // Raw times keep fib (the call storm) the most expensive function by far.
    let out = s.run(&[
        "run",
        "-q",
        "--keep-overhead",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn text_report_has_flat_profile_and_call_graph() {
    let s = Scratch::new();
    fib_profile(&s);
    let out = s.run(&["report", "fib.wprof"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let flat = text.split("Callers and callees").next().unwrap();
    // fib is the most expensive by self time: the first row of the flat profile.
    let first_row = flat
        .lines()
        .skip_while(|l| !l.contains("self%"))
        .nth(1)
        .unwrap();
    assert!(first_row.trim_end().ends_with(" fib"), "{first_row}");
    assert!(first_row.contains("242785"));
    assert!(text.contains("called by fib"));
    assert!(text.contains("calls     wasi_snapshot_preview1::fd_write"));
    let top = stdout(&s.run(&["report", "fib.wprof", "--top", "1"]));
    assert!(!top.split("Callers").next().unwrap().contains("_start"));
}

#[test]
fn json_report_has_the_stable_schema() {
    let s = Scratch::new();
    fib_profile(&s);
    let out = s.run(&["report", "fib.wprof", "--format", "json", "-o", "fib.json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("fib.json")).unwrap()).unwrap();
    for key in [
        "format_version",
        "module",
        "mode",
        "unit",
        "exit_code",
        "instrumentation",
        "functions",
        "edges",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert!(v["module"]["path"].as_str().unwrap().ends_with("fib.wasm"));
    assert_eq!(v["module"]["blake3"].as_str().unwrap().len(), 64);
    for key in [
        "functions_total",
        "functions_instrumented",
        "functions_from_cache",
        "module_from_cache",
    ] {
        assert!(v["instrumentation"].get(key).is_some(), "missing {key}");
    }
    let f = &v["functions"][0];
    for key in [
        "id",
        "name",
        "kind",
        "calls",
        "self",
        "inclusive",
        "min_self",
        "max_self",
    ] {
        assert!(f.get(key).is_some(), "missing functions[].{key}");
    }
    let root_edge = v["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["caller"].is_null())
        .unwrap();
    for key in ["caller", "callee", "calls", "inclusive"] {
        assert!(root_edge.get(key).is_some(), "missing edges[].{key}");
    }
}
