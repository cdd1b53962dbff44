//! `wprof run --trace` through the binary: every call in the trace, nested as it ran, read
//! back by Chrome DevTools' own trace engine; the ring's bound with what it dropped counted;
//! the depth and function filters; time mode taken when no mode is given, other modes and
//! stray flags refused; `WPROF=0` writes none.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use crate::support::{calls as profile_calls, function, stderr, stdout, Scratch};
use crate::tools::node_modules;

/// `_start` calls `$outer` 3 times, each `$outer` calls `$inner` 4 times; `_start` then
/// writes "ok\n" through WASI's fd_write: 1 + 3 + 12 + 1 calls, at most 3 deep.
const MODULE: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "ok\n")
  (global $sum (mut i32) (i32.const 0))
  (func $inner (param $x i32)
    (local $i i32)
    (loop $spin
      (global.set $sum (i32.add (global.get $sum) (local.get $x)))
      (br_if $spin (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                             (i32.const 100)))))
  (func $outer
    (local $i i32)
    (loop $again
      (call $inner (local.get $i))
      (br_if $again (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                              (i32.const 4)))))
  (func $_start (export "_start")
    (call $outer) (call $outer) (call $outer)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 3))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// Runs the module with `args`; returns the run's output.
fn traced(s: &Scratch, args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let m = s.wat_module("nest.wasm", MODULE);
    let mut cmd = s.wprof(&[&["run", "-o", "p.wprof"], args, &[m.to_str().unwrap()]].concat());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn read_trace(s: &Scratch, name: &str) -> Value {
    let bytes = std::fs::read(s.path(name)).unwrap();
    if name.ends_with(".gz") {
        let mut json = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut json)
            .unwrap();
        return serde_json::from_slice(&json).unwrap();
    }
    serde_json::from_slice(&bytes).unwrap()
}

/// The trace's calls: (name, category, start µs, duration µs), in the file's order.
fn calls_of(trace: &Value) -> Vec<(String, String, f64, f64)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                // Only imports carry a category.
                e["cat"].as_str().unwrap_or("function").to_string(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn counts(calls: &[(String, String, f64, f64)]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for c in calls {
        *out.entry(c.0.clone()).or_insert(0) += 1;
    }
    out
}

fn fact(trace: &Value, key: &str) -> u64 {
    trace["otherData"][key].as_str().unwrap().parse().unwrap()
}

#[test]
fn a_trace_holds_every_call_nested_as_it_ran() {
    let s = Scratch::new();
    // No mode given: --trace takes time mode; --short-max 0 times every function.
    let out = traced(&s, &["--trace", "--short-max", "0"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "ok\n");
    let summary = stderr(&out);
    assert!(
        summary.contains("wprof: trace: 17 calls written to p.trace.json"),
        "{summary}"
    );
    let p = s.profile("p.wprof");
    assert_eq!(p["mode"], "time");
    let trace = read_trace(&s, "p.trace.json");
    let calls = calls_of(&trace);
    let expected: BTreeMap<String, u64> = [
        ("_start", 1),
        ("inner", 12),
        ("outer", 3),
        ("wasi_snapshot_preview1::fd_write", 1),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_string(), c))
    .collect();
    assert_eq!(counts(&calls), expected);
    for (name, n) in &expected {
        assert_eq!(profile_calls(&p, name), *n, "{name}");
    }
    assert_eq!(fact(&trace, "calls dropped"), 0);
    let import = calls.iter().find(|c| c.0.ends_with("fd_write")).unwrap();
    assert_eq!(import.1, "import");
    // Nesting: every inner call lies within an outer call, every outer within _start; the
    // three outer calls do not overlap.
    let within = |inner: &(String, String, f64, f64), outer: &str| {
        calls
            .iter()
            .filter(|c| c.0 == outer)
            .any(|o| o.2 <= inner.2 && inner.2 + inner.3 <= o.2 + o.3 + 1e-9)
    };
    for c in &calls {
        match c.0.as_str() {
            "inner" => assert!(within(c, "outer"), "{c:?} in {calls:?}"),
            "outer" => assert!(within(c, "_start"), "{c:?} in {calls:?}"),
            _ => {}
        }
    }
    let mut outers: Vec<_> = calls.iter().filter(|c| c.0 == "outer").collect();
    outers.sort_by(|a, b| a.2.total_cmp(&b.2));
    for w in outers.windows(2) {
        assert!(w[0].2 + w[0].3 <= w[1].2 + 1e-9, "{outers:?}");
    }
    // Durations are the profile's inclusive times, but where the probes' estimated cost
    // exceeds what the clock measured: the profile then clamps a self time at zero, the
    // trace takes out less to keep times in order. Either way the difference is within the
    // estimates of the calls made (17 here).
    let o = &p["probe_overhead"];
    let estimates = 17.0 * (o["inside_ns"].as_f64().unwrap() + o["outside_ns"].as_f64().unwrap());
    for name in ["_start", "outer", "inner"] {
        let traced_ns: f64 = calls
            .iter()
            .filter(|c| c.0 == name)
            .map(|c| c.3 * 1e3)
            .sum();
        let inclusive = function(&p, name)["inclusive"].as_f64().unwrap();
        assert!(
            (traced_ns - inclusive).abs() <= estimates + 2.0 * expected[name] as f64,
            "{name}: traced {traced_ns} ns, inclusive {inclusive} ns, estimates {estimates} ns"
        );
    }
    devtools_agrees(&s.path("p.trace.json"), &expected);
}

/// Chrome DevTools' trace engine (its Performance panel's model, as Lighthouse uses it)
/// reads the file: the thread's entries are the calls, each nested under its caller.
fn devtools_agrees(file: &std::path::Path, expected: &BTreeMap<String, u64>) {
    let Some(modules) = node_modules(
        "@paulirish/trace_engine",
        "reading --trace's file with Chrome DevTools' trace engine",
    ) else {
        return;
    };
    let script = r#"
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const dir = process.env.NODE_MODULES_DIR;
const Trace = await import(pathToFileURL(path.join(dir, '@paulirish/trace_engine/models/trace/trace.js')));
globalThis.DOMRect ??= class { constructor(x = 0, y = 0, w = 0, h = 0) { this.x = x; this.y = y; this.width = w; this.height = h; } };
const events = JSON.parse(fs.readFileSync(process.argv[1], 'utf8')).traceEvents;
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const data = model.parsedTrace().data;
const out = [];
for (const [, proc] of data.Renderer.processes) {
  for (const [, thread] of proc.threads) {
    for (const e of thread.entries) {
      const node = data.Renderer.entryToNode.get(e);
      out.push({ thread: thread.name, name: e.name, parent: node?.parent?.entry?.name ?? null, depth: node?.depth ?? -1 });
    }
  }
}
console.log(JSON.stringify(out));
"#;
    let o = Command::new("node")
        .args(["--input-type=module", "-e", script])
        .arg(file)
        .env("NODE_MODULES_DIR", &modules)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let entries: Vec<Value> = serde_json::from_str(stdout(&o).trim()).unwrap();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for e in &entries {
        assert_eq!(e["thread"], "main", "{e}");
        let name = e["name"].as_str().unwrap();
        *seen.entry(name.to_string()).or_insert(0) += 1;
        let (parent, depth) = match name {
            "_start" => (Value::Null, 0),
            "outer" => (Value::from("_start"), 1),
            "inner" => (Value::from("outer"), 2),
            _ => (Value::from("_start"), 1),
        };
        assert_eq!(e["parent"], parent, "{e}");
        assert_eq!(e["depth"], depth, "{e}");
    }
    assert_eq!(&seen, expected, "DevTools read {entries:?}");
}

#[test]
fn a_full_ring_keeps_the_last_calls_and_says_how_many_it_dropped() {
    let s = Scratch::new();
    let out = traced(
        &s,
        &["--trace", "--trace-buffer", "5", "--trace-out", "t.json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary = stderr(&out);
    assert!(
        summary.contains("wprof: trace: 5 calls written to t.json")
            && summary.contains("earlier calls dropped: it keeps the last 5 (--trace-buffer)"),
        "{summary}"
    );
    let trace = read_trace(&s, "t.json");
    let calls = calls_of(&trace);
    assert_eq!(calls.len(), 5);
    // Calls are kept as they end: the last to end is `_start`, before it fd_write.
    assert_eq!(calls[4].0, "_start");
    assert_eq!(calls[3].0, "wasi_snapshot_preview1::fd_write");
    assert_eq!(fact(&trace, "calls kept"), 5);
    // 17 calls, all timed (no function here is short).
    assert_eq!(fact(&trace, "calls dropped"), 12);
    assert!(!s.path("p.trace.json").exists());
}

#[test]
fn depth_and_function_filters() {
    let s = Scratch::new();
    let out = traced(
        &s,
        &["--trace", "--short-max", "0", "--trace-depth", "2"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shallow = counts(&calls_of(&read_trace(&s, "p.trace.json")));
    assert_eq!(
        shallow.into_iter().collect::<Vec<_>>(),
        [
            ("_start".to_string(), 1),
            ("outer".to_string(), 3),
            ("wasi_snapshot_preview1::fd_write".to_string(), 1)
        ]
    );
    let out = traced(
        &s,
        &["--trace", "--short-max", "0", "--trace-only", "in*"],
        &[("WPROF_TRACE_OUT", "only.json")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let only = counts(&calls_of(&read_trace(&s, "only.json")));
    // A name ending in .gz: the same trace, gzipped.
    let out = traced(
        &s,
        &["--trace", "--short-max", "0", "--trace-out", "t.json.gz"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(counts(&calls_of(&read_trace(&s, "t.json.gz")))["inner"], 12);
    assert_eq!(
        only.into_iter().collect::<Vec<_>>(),
        [("inner".to_string(), 12)]
    );
    // The profile is whole whatever the trace keeps.
    assert_eq!(profile_calls(&s.profile("p.wprof"), "outer"), 3);
}

#[test]
fn a_trapping_program_still_gets_its_trace() {
    let s = Scratch::new();
    let out = s
        .wprof(&[
            "run",
            "--trace",
            "-o",
            "t.wprof",
            crate::support::sample("deep_trap.wasm").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(134), "{}", stderr(&out));
    let trace = read_trace(&s, "t.trace.json");
    let calls = calls_of(&trace);
    // Every frame the trap closed is in it, the outermost last: fd_write, 50 of $down,
    // _start.
    assert_eq!(calls.len(), 52, "{calls:?}");
    assert_eq!(counts(&calls)["down"], 50);
    assert_eq!(calls.last().unwrap().0, "_start", "{calls:?}");
}

#[test]
fn refusals_and_profiling_off() {
    let s = Scratch::new();
    for (args, envs, says) in [
        (
            &["--trace", "--mode", "sample"][..],
            &[][..],
            "--trace records every call with time mode's clock; it does not combine with sample mode (flag)",
        ),
        (
            &["--trace"],
            &[("WPROF_MODE", "cost")],
            "it does not combine with cost mode (WPROF_MODE)",
        ),
        (&["--trace-depth", "2"], &[], "--trace-depth applies with --trace"),
        (&["--trace", "--trace-only", "/(/"], &[], "--trace-only: \"/(/\""),
        (&["--trace", "--trace-buffer", "0"], &[], "--trace-buffer"),
    ] {
        let out = traced(&s, args, envs);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "the program did not run");
        assert!(!s.path("p.wprof").exists() && !s.path("p.trace.json").exists());
    }
    // A trace that cannot be written: one warning; the program's output, its exit code and
    // the profile are as without --trace.
    std::fs::write(s.path("blocker"), b"a file, not a directory").unwrap();
    let out = traced(&s, &["--trace", "--trace-out", "blocker/t.json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "ok\n");
    let said = stderr(&out);
    let warnings: Vec<&str> = said.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{}", stderr(&out));
    assert!(warnings[0].contains("no trace written"), "{warnings:?}");
    assert_eq!(profile_calls(&s.profile("p.wprof"), "inner"), 12);
    std::fs::remove_file(s.path("p.wprof")).unwrap();
    // Profiling off: the program runs, one warning, no trace.
    let out = traced(&s, &["--trace"], &[("WPROF", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "ok\n");
    assert!(
        stderr(&out).contains("--trace: profiling is off (WPROF=0); no trace is written"),
        "{}",
        stderr(&out)
    );
    assert!(!s.path("p.trace.json").exists());
}

#[test]
fn each_goroutine_is_a_track_of_its_own_on_which_calls_nest() {
    let Some(module) = crate::go::go_modules().into_iter().next() else {
        return;
    };
    let s = Scratch::new();
    let out = s
        .wprof(&[
            "run",
            "--trace",
            "--short-max",
            "0",
            "-o",
            "g.wprof",
            module.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trace = read_trace(&s, "g.trace.json");
    let events = trace["traceEvents"].as_array().unwrap();
    let mut tracks: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        tracks
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((ts, ts + dur));
    }
    assert!(tracks.len() > 1, "goroutines on one track: {tracks:?}");
    // On each track a call lies within every call open when it starts.
    for (tid, calls) in &mut tracks {
        calls.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for &(start, end) in calls.iter() {
            // (Float sums of microseconds: a picosecond of slack.)
            while open.last().is_some_and(|&e| e <= start + 1e-6) {
                open.pop();
            }
            if let Some(&outer) = open.last() {
                assert!(
                    end <= outer + 1e-6,
                    "track {tid}: ({start}, {end}) ends after {outer}"
                );
            }
            open.push(end);
        }
    }
    // Every call is in it (re-entries after a switch are not calls), under Go's names.
    let p = s.profile("g.wprof");
    let profiled: u64 = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["calls"].as_u64().unwrap())
        .sum();
    let calls = calls_of(&trace);
    assert_eq!(calls.len() as u64, profiled);
    let by_name = counts(&calls);
    assert_eq!(by_name["main.(*counter).add"], 200);
    assert_eq!(by_name["main.worker"], 8);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("goroutine g=0x")),
        "{names:?}"
    );
}
