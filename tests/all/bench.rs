//! `wprof bench` runs (its numbers are never asserted: machines are noisy).

use crate::support::*;

#[test]
fn bench_runs_in_quick_mode_and_reports_every_figure() {
    let s = Scratch::new();
    let out = s.run(&[
        "bench",
        "--quick",
        "--json",
        sample("fib.wasm").to_str().unwrap(),
        sample("wasi_loop.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        for key in [
            "original",
            "instrumented",
            "compile_original",
            "start_cold",
            "start_warm",
        ] {
            assert!(row[key].as_u64().unwrap() > 0, "{key} in {row}");
        }
        assert!(row["ratio"].as_f64().unwrap() > 0.0);
    }
    // The benchmark's programs print nothing: their output is discarded.
    assert!(!stdout(&out).contains("tick"));
}

#[test]
fn bench_reports_the_known_ratio_check() {
    let s = Scratch::new();
    let out = s.run(&[
        "bench",
        "--quick",
        "--json",
        "--expect-ratio",
        "heavy/light=3",
        sample("ratio.wasm").to_str().unwrap(),
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ratio = &v[0]["accuracy"][0];
    assert_eq!(ratio["functions"], "heavy/light");
    assert_eq!(ratio["expected"], 3.0);
    for key in ["raw", "subtracted"] {
        assert!(ratio[key].as_f64().unwrap() > 0.0, "{key}: {ratio}");
    }
    // fib has no such functions: no check reported.
    assert!(v[1].get("accuracy").is_none());
    let bad = s.run(&["bench", "--expect-ratio", "heavy-light", "x.wasm"]);
    assert_eq!(bad.status.code(), Some(2));
}
