//! Exact attribution where plain entry/exit tracing goes wrong: the samples whose answers
//! are known by construction (see samples/README.md), in every mode: time (host probes),
//! cost and sample (calls and contexts counted inside the module).

use serde_json::Value;

use crate::support::*;

const MODES: [&str; 3] = ["time", "cost", "sample"];

fn profile(s: &Scratch, name: &str, mode: &str) -> (Value, std::process::Output) {
    let out_name = format!("{name}.{mode}.wprof");
    // Raw times (no overhead subtraction): the invariants below hold exactly.
    let out = s.run(&[
        "run",
        "-q",
        "--keep-overhead",
        "--mode",
        mode,
        "-o",
        &out_name,
        sample(&format!("{name}.wasm")).to_str().unwrap(),
    ]);
    (s.profile(&out_name), out)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Invariants of every profile: self times add up to the total, the root's function holds
/// it all, nothing is negative or inverted.
fn consistent(p: &Value) {
    let total = u(&p["total"]);
    let functions = p["functions"].as_array().unwrap();
    let self_sum: u64 = functions.iter().map(|f| u(&f["self"])).sum();
    // Exact in cost mode; in time mode each value is rounded down from picoseconds to
    // nanoseconds on its own, so the sum may fall short by under 1 ns per entry.
    let tolerance = |entries: usize| {
        if p["mode"] == "cost" {
            0
        } else {
            entries as u64
        }
    };
    assert!(
        self_sum <= total && total - self_sum <= tolerance(functions.len()),
        "self times add up to the total: {self_sum} vs {total}"
    );
    assert_eq!(u(&function(p, "_start")["inclusive"]), total);
    for f in functions {
        assert!(u(&f["self"]) <= u(&f["inclusive"]), "{f}");
    }
    let contexts = p["contexts"].as_array().unwrap();
    let context_self: u64 = contexts.iter().map(|c| u(&c["self"])).sum();
    assert!(
        context_self <= total && total - context_self <= tolerance(contexts.len()),
        "context self times add up to the total: {context_self} vs {total}"
    );
}

#[test]
fn gprof_averaging_case_is_exact() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "gprof_trap", mode);
        assert_eq!(out.status.code(), Some(0));
        consistent(&p);
        assert_eq!(calls(&p, "d"), 80);
        assert_eq!(edge_calls(&p, Some("b"), "d"), 40);
        assert_eq!(edge_calls(&p, Some("c"), "d"), 40);
        if mode == "cost" {
            // d(n) executes loop (1) + 17 per iteration + local.get (1): 17n + 2.
            let b_d = edge_inclusive(&p, "b", "d");
            let c_d = edge_inclusive(&p, "c", "d");
            assert_eq!(b_d, 40 * (17 * 900_000 + 2));
            assert_eq!(c_d, 40 * (17 * 300_000 + 2));
            // The loop work alone is exactly 3:1.
            assert_eq!(b_d - 40 * 2, 3 * (c_d - 40 * 2));
            // B's inclusive holds only its own share of D.
            let b = function(&p, "b");
            assert_eq!(u(&b["inclusive"]), u(&b["self"]) + b_d);
            let c = function(&p, "c");
            assert_eq!(u(&c["inclusive"]), u(&c["self"]) + c_d);
        }
    }
}

#[test]
fn tail_calls_keep_the_caller_open() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "tailcalls", mode);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), "tailcalls: chain=3 count=1000 leaf=14\n");
        consistent(&p);
        for (caller, callee, n) in [
            (Some("_start"), "a", 3),
            (Some("a"), "b", 3),
            (Some("b"), "c", 3),
            (Some("count"), "count", 1000),
            (Some("dispatch"), "leaf", 2),
            (Some("emit"), "wasi_snapshot_preview1::fd_write", 1),
        ] {
            assert_eq!(
                edge_calls(&p, caller, callee),
                n,
                "{caller:?} -> {callee} ({mode})"
            );
        }
        assert_eq!(calls(&p, "count"), 1001);
        // The callee's time is inside the caller's inclusive time.
        let incl = |n| u(&function(&p, n)["inclusive"]);
        let own = |n| u(&function(&p, n)["self"]);
        // Exact in cost mode; within the picosecond rounding (1 ns) in time mode.
        let slack = u64::from(mode != "cost");
        for (caller, callee) in [("a", "b"), ("b", "c")] {
            let (whole, parts) = (incl(caller), own(caller) + incl(callee));
            assert!(
                parts <= whole + slack && whole <= parts + slack,
                "{caller}: {whole} vs {parts} ({mode})"
            );
        }
    }
}

#[test]
fn exceptions_unwind_to_the_catching_activation() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "exceptions", mode);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), "exceptions: caught=3 cleanups=3 result=339\n");
        consistent(&p);
        assert_eq!(calls(&p, "rec"), 30);
        assert_eq!(calls(&p, "thrower"), 3);
        assert_eq!(edge_calls(&p, Some("_start"), "rec"), 3);
        assert_eq!(edge_calls(&p, Some("rec"), "rec"), 27);
        assert_eq!(edge_calls(&p, Some("rec"), "thrower"), 3);
        // After each catch the stack is right again: utoa is called by _start, never by a
        // frame the exception left behind.
        assert_eq!(edge_calls(&p, Some("_start"), "utoa"), 3);
        assert!(p["edges"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["callee"] != function(&p, "utoa")["id"]
                || e["caller"] == function(&p, "_start")["id"]));
    }
}

#[test]
fn mutual_recursion_is_counted_once_and_bounded() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "mutual", mode);
        assert_eq!(out.status.code(), Some(0));
        consistent(&p);
        assert_eq!(calls(&p, "even"), 33);
        assert_eq!(calls(&p, "odd"), 30);
        assert_eq!(edge_calls(&p, Some("even"), "odd"), 30);
        assert_eq!(edge_calls(&p, Some("odd"), "even"), 30);
        assert_eq!(edge_calls(&p, Some("_start"), "even"), 3);
        // Inclusive counts outermost activations once: never more than the total.
        assert!(u(&function(&p, "even")["inclusive"]) <= u(&p["total"]));
        // The context tree collapses the cycle: _start, even, odd, and fd_write.
        assert!(
            p["contexts"].as_array().unwrap().len() <= 5,
            "{}",
            p["contexts"]
        );
    }
}

#[test]
fn traps_at_depth_close_every_frame() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "deep_trap", mode);
        assert_eq!(out.status.code(), Some(134));
        assert_eq!(p["outcome"], "trap");
        consistent(&p);
        assert_eq!(calls(&p, "down"), 50);
        assert_eq!(edge_calls(&p, Some("down"), "down"), 49);
    }
}

#[test]
fn an_uncaught_exception_ends_like_under_wasmtime() {
    let s = Scratch::new();
    for mode in MODES {
        let (p, out) = profile(&s, "uncaught", mode);
        assert_eq!(out.status.code(), Some(1), "the wasmtime CLI exits 1 here");
        assert_eq!(stdout(&out), "uncaught: throwing 5 deep\n");
        assert!(
            p["trap"].as_str().unwrap().contains("exception"),
            "{}",
            p["trap"]
        );
        consistent(&p);
        assert_eq!(calls(&p, "r"), 5);
    }
}

/// The recursive edges of fib split by call site: (site, calls), sorted.
fn fib_sites(p: &Value) -> Vec<(u64, u64)> {
    let fib = function(p, "fib")["id"].clone();
    let mut recursive: Vec<(u64, u64)> = p["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == fib && e["callee"] == fib)
        .map(|e| (u(&e["site"]), u(&e["calls"])))
        .collect();
    recursive.sort();
    recursive
}

#[test]
fn call_sites_split_edges_by_caller_offset() {
    let s = Scratch::new();
    let m = sample("fib.wasm");
    let run_with_sites = |mode: &str| {
        let name = format!("sites.{mode}.wprof");
        let out = s.run(&[
            "run",
            "-q",
            "--call-sites",
            "--mode",
            mode,
            "-o",
            &name,
            m.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0));
        s.profile(&name)
    };
    // The inline modes number call sites themselves: the same sites, the same counts.
    let time_sites = fib_sites(&run_with_sites("time"));
    for mode in ["cost", "sample"] {
        assert_eq!(fib_sites(&run_with_sites(mode)), time_sites, "{mode}");
    }
    let p = s.profile("sites.time.wprof");
    let recursive = time_sites;
    // fib(n-1) and fib(n-2): two call sites in fib's body, 121392 calls each.
    assert_eq!(recursive.len(), 2, "{recursive:?}");
    assert!(recursive[0].0 < recursive[1].0);
    assert!(recursive.iter().all(|&(_, calls)| calls == 121_392));
    assert_eq!(calls(&p, "fib"), 242_785);
    let report = stdout(&s.run(&["report", "sites.time.wprof"]));
    assert!(
        report.contains(&format!("called by fib+{:#x}", recursive[0].0)),
        "{report}"
    );
    // Without the flag, one edge; with the variable, split again.
    let plain = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        "-o",
        "plain.wprof",
        m.to_str().unwrap(),
    ]);
    assert_eq!(plain.status.code(), Some(0));
    assert_eq!(
        edge_calls(&s.profile("plain.wprof"), Some("fib"), "fib"),
        242_784
    );
    let has_sites = |p: &Value| {
        p["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.get("site").is_some())
    };
    assert!(!has_sites(&s.profile("plain.wprof")));
    let env = s
        .wprof(&[
            "run",
            "--mode",
            "sample",
            "-q",
            "-o",
            "env.wprof",
            m.to_str().unwrap(),
        ])
        .env("WPROF_CALL_SITES", "1")
        .output()
        .unwrap();
    assert_eq!(env.status.code(), Some(0));
    assert!(has_sites(&s.profile("env.wprof")));
}

#[test]
fn sample_mode_charges_time_where_it_is_spent() {
    // ratio.wasm: `heavy` does three times the work of `light` (samples/README.md), and
    // runs long enough for about a thousand readings.
    let s = Scratch::new();
    let (p, out) = profile(&s, "ratio", "sample");
    assert_eq!(out.status.code(), Some(0));
    consistent(&p);
    assert_eq!(p["unit"], "ns");
    assert!(p.get("probe_overhead").is_none(), "nothing to subtract");
    assert_eq!(calls(&p, "heavy"), calls(&p, "light"));
    let own = |n| u(&function(&p, n)["self"]) as f64;
    let ratio = own("heavy") / own("light");
    // A sampling estimate on a shared machine, where the sampling thread can miss its
    // period for milliseconds: loose bounds (a quiet machine gives 2.7-3.2), but a sampler
    // that charged the wrong node, or nothing, lands far outside them.
    assert!((1.5..=6.0).contains(&ratio), "heavy/light = {ratio:.2}");
    let busy = own("heavy") + own("light");
    assert!(busy > 0.8 * u(&p["total"]) as f64, "{p}");
}
