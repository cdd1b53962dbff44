//! Host time: every profiled run measures the program's calls to WASI (wall time, the
//! thread's on-CPU time, bytes moved), per import and per calling context, in every mode;
//! the text report, the summary and pprof (read by `go tool pprof`) show it.

use serde_json::Value;

use crate::support::*;
use crate::tools::{annotate, pprof_top};

/// The input `host_io.wasm` reads: 12,345 bytes, so 4 reads with data and one at the end.
const INPUT: usize = 12_345;

fn run_host_io(s: &Scratch, mode: &str, profile: &str) -> std::process::Output {
    let input = s.path("input.bin");
    std::fs::write(&input, vec![b'x'; INPUT]).unwrap();
    s.wprof(&["run", "--mode", mode, "-o", profile])
        .arg(sample("host_io.wasm"))
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The profile's `host_calls` record of WASI function `name`.
fn host<'a>(p: &'a Value, name: &str) -> &'a Value {
    let full = format!("wasi_snapshot_preview1::{name}");
    p["host_calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == full.as_str())
        .unwrap_or_else(|| panic!("no host calls to {name}: {}", p["host_calls"]))
}

/// The host figures of `import`'s contexts, by the name of the function that called it
/// there's caller (`write` is called from `emit_a`, then calls the import through
/// `__wasi_fd_write`): the function `up` levels above the import.
fn contexts_of(p: &Value, import: &str, up: usize) -> Vec<(String, Value)> {
    let names: std::collections::HashMap<u64, &str> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (u(&f["id"]), f["name"].as_str().unwrap()))
        .collect();
    let contexts = p["contexts"].as_array().unwrap();
    let id = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == format!("wasi_snapshot_preview1::{import}").as_str())
        .map(|f| u(&f["id"]))
        .unwrap();
    contexts
        .iter()
        .filter(|c| u(&c["function"]) == id)
        .map(|c| {
            let mut at = c;
            for _ in 0..up {
                at = &contexts[u(&at["parent"]) as usize];
            }
            (names[&u(&at["function"])].to_string(), c["host"].clone())
        })
        .collect()
}

#[test]
fn every_mode_measures_the_host_calls_as_constructed() {
    let s = Scratch::new();
    for mode in ["time", "sample", "cost", "adaptive"] {
        let file = format!("{mode}.wprof");
        let out = run_host_io(&s, mode, &file);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let text = stdout(&out);
        assert_eq!(text.len(), 8000, "{mode}");
        assert!(text.starts_with(&"a".repeat(6000)) && text.ends_with(&"b".repeat(2000)));
        let p = s.profile(&file);

        let read = host(&p, "fd_read");
        assert_eq!(u(&read["calls"]), 5, "{mode}: {read}");
        assert_eq!(u(&read["bytes"]), INPUT as u64, "{mode}");
        let write = host(&p, "fd_write");
        assert_eq!(
            (u(&write["calls"]), u(&write["bytes"])),
            (10, 8000),
            "{mode}"
        );
        // Neither moves bytes nor is it an I/O function.
        let sleep = host(&p, "poll_oneoff");
        assert_eq!(u(&sleep["calls"]), 1, "{mode}");
        assert!(sleep.get("bytes").is_none(), "{mode}: {sleep}");
        if mode == "cost" {
            // Cost profiles hold no time, and stay the same from run to run.
            for h in p["host_calls"].as_array().unwrap() {
                assert!(
                    h.get("wall_ns").is_none() && h.get("cpu_ns").is_none(),
                    "{h}"
                );
            }
        } else {
            // 50 ms asleep: never less wall time, and the thread was off the CPU for most
            // of it, however busy the machine.
            assert!(u(&sleep["wall_ns"]) >= 50_000_000, "{mode}: {sleep}");
            assert!(u(&sleep["cpu_ns"]) < 25_000_000, "{mode}: {sleep}");
            for h in p["host_calls"].as_array().unwrap() {
                assert!(u(&h["cpu_ns"]) <= u(&h["wall_ns"]), "{mode}: {h}");
            }
        }

        // Per context: the writes from emit_a and from emit_b apart, and they add up.
        let mut writes = contexts_of(&p, "fd_write", 3);
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        let figures: Vec<(&str, u64, u64)> = writes
            .iter()
            .map(|(caller, h)| (caller.as_str(), u(&h["calls"]), u(&h["bytes"])))
            .collect();
        assert_eq!(
            figures,
            vec![("emit_a", 6, 6000), ("emit_b", 4, 2000)],
            "{mode}"
        );
        let naps = contexts_of(&p, "poll_oneoff", 0);
        assert_eq!(naps.len(), 1, "{mode}");
        if mode != "cost" {
            let wall: u64 = writes.iter().map(|(_, h)| u(&h["wall_ns"])).sum();
            assert_eq!(wall, u(&write["wall_ns"]), "{mode}");
            assert_eq!(naps[0].1["wall_ns"], sleep["wall_ns"], "{mode}");
        }
    }
}

#[test]
fn the_summary_and_the_text_report_show_the_host_time() {
    let s = Scratch::new();
    let out = run_host_io(&s, "sample", "h.wprof");
    let summary = stderr(&out);
    let line = summary
        .lines()
        .find(|l| l.starts_with("wprof: host: "))
        .unwrap_or_else(|| panic!("no host line: {summary}"));
    assert!(
        line.contains("calls to WASI") && line.contains("off CPU"),
        "{line}"
    );
    assert!(line.contains("most in poll_oneoff"), "{line}");

    let report = s.run(&["report", "h.wprof", "--top", "0"]);
    let text = stdout(&report);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Host calls"))
        .skip(2)
        .collect();
    assert!(
        table[0].ends_with("wasi_snapshot_preview1::poll_oneoff"),
        "{text}"
    );
    let read = table
        .iter()
        .find(|l| l.ends_with("::fd_read"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(read.contains("12.1 KiB"), "{read}");
    // The import's section names the host time by caller.
    let lines: Vec<&str> = text.lines().collect();
    let from_b = lines
        .iter()
        .position(|l| l.trim() == "host, from ... > emit_b > write > __wasi_fd_write")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(lines[from_b + 1].contains("2.0 KiB moved"), "{text}");
}

#[test]
fn pprof_carries_the_host_figures_as_sample_types() {
    let s = Scratch::new();
    run_host_io(&s, "sample", "h.wprof");
    let p = s.profile("h.wprof");
    let o = s.run(&["report", "h.wprof", "--format", "pprof", "-o", "h.pb.gz"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let Some(bytes) = pprof_top(&s, "h.pb.gz", &["-sample_index=host_bytes", "-unit=B"]) else {
        return;
    };
    assert_eq!(bytes["wasi_snapshot_preview1::fd_read"].0, INPUT as u64);
    assert_eq!(bytes["wasi_snapshot_preview1::fd_write"].0, 8000);
    // emit_a's cumulative bytes are its writes'.
    assert_eq!(bytes["emit_a"].1, 6000);
    let wall = pprof_top(&s, "h.pb.gz", &["-sample_index=host_wall", "-unit=ns"]).unwrap();
    assert_eq!(
        wall["wasi_snapshot_preview1::poll_oneoff"].0,
        u(&host(&p, "poll_oneoff")["wall_ns"])
    );
}

#[test]
fn an_injection_passes_the_other_calls_to_wasi_with_the_programs_memory() {
    // Every call but the one injected runs the real function, which reads the program's
    // memory: the output is whole.
    let s = Scratch::new();
    for off in [false, true] {
        let input = s.path("input.bin");
        std::fs::write(&input, vec![b'x'; INPUT]).unwrap();
        let mut cmd = s.wprof(&[
            "run",
            "-o",
            "i.wprof",
            "--inject",
            "wasi:fd_write=errno:EIO@10",
        ]);
        cmd.arg(sample("host_io.wasm"))
            .stdin(std::fs::File::open(&input).unwrap());
        if off {
            cmd.env("WPROF", "0");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        // The tenth write (emit_b's last 500 bytes) was not made.
        assert_eq!(stdout(&out).len(), 7500, "off: {off}");
    }
}

#[test]
fn callgrind_and_html_carry_the_host_figures() {
    let s = Scratch::new();
    run_host_io(&s, "time", "h.wprof");
    let p = s.profile("h.wprof");
    let o = s.run(&[
        "report",
        "h.wprof",
        "--format",
        "callgrind",
        "-o",
        "callgrind.out.h",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(s.path("callgrind.out.h")).unwrap();
    assert!(
        text.contains("events: ns HostWall HostCpu HostBytes\n"),
        "{text}"
    );
    if let Some(bytes) = annotate(&s, &["--show=HostBytes"], "callgrind.out.h", false) {
        assert_eq!(bytes["wasi_snapshot_preview1::fd_read"], INPUT as u64);
        assert_eq!(bytes["wasi_snapshot_preview1::fd_write"], 8000);
        // Inclusive: what a function's calls made the host move.
        let inclusive = annotate(&s, &["--show=HostBytes"], "callgrind.out.h", true).unwrap();
        assert_eq!(inclusive["emit_b"], 2000);
        assert_eq!(inclusive["slurp"], INPUT as u64);
        let wall = annotate(&s, &["--show=HostWall"], "callgrind.out.h", false).unwrap();
        assert_eq!(
            wall["wasi_snapshot_preview1::poll_oneoff"],
            u(&host(&p, "poll_oneoff")["wall_ns"])
        );
    }

    let o = s.run(&["report", "h.wprof", "--format", "html", "-o", "h.html"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(s.path("h.html")).unwrap();
    let table = &html[html.find(r#"<table id="host-calls">"#).expect("host table")..];
    let rows: Vec<&str> = table[..table.find("</table>").unwrap()]
        .split("<tr>")
        .skip(2)
        .collect();
    assert_eq!(rows.len(), p["host_calls"].as_array().unwrap().len());
    assert!(rows[0].contains("poll_oneoff"), "{}", rows[0]);
    assert!(
        rows.iter()
            .any(|r| r.contains("fd_read") && r.contains("<td>12.1 KiB</td>")),
        "{table}"
    );
}

#[test]
fn a_program_calling_the_host_often_is_counted_exactly() {
    let s = Scratch::new();
    let out = s
        .wprof(&["run", "-q", "--mode", "sample", "-o", "w.wprof"])
        .arg(sample("wasi_storm.wasm"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).len(), 320_000);
    let p = s.profile("w.wprof");
    assert_eq!(u(&host(&p, "clock_time_get")["calls"]), 200_000);
    let write = host(&p, "fd_write");
    assert_eq!((u(&write["calls"]), u(&write["bytes"])), (20_000, 320_000));
    let ticks = contexts_of(&p, "clock_time_get", 3);
    assert_eq!(ticks.len(), 1);
    assert_eq!(ticks[0].0, "tick");
    assert_eq!(u(&ticks[0].1["calls"]), 200_000);
}

/// Writes one byte directly from `$direct`, then one through a table from `$indirect`.
const DIRECT_AND_INDIRECT: &str = r#"
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table 1 funcref)
  (elem (i32.const 0) $fd_write)
  (type $write (func (param i32 i32 i32 i32) (result i32)))
  (data (i32.const 0) "\10\00\00\00\01\00\00\00")
  (data (i32.const 16) "x")
  (func $direct
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func $indirect
    (drop (call_indirect (type $write)
      (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 0))))
  (func (export "_start") (call $direct) (call $indirect)))"#;

#[test]
fn a_call_through_a_table_counts_for_the_import_and_no_context() {
    let s = Scratch::new();
    let module = s.wat_module("both.wasm", DIRECT_AND_INDIRECT);
    for mode in ["time", "sample", "cost", "adaptive"] {
        let file = format!("{mode}.wprof");
        let out = s
            .wprof(&["run", "-q", "--mode", mode, "-o", &file])
            .arg(&module)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "xx");
        let p = s.profile(&file);
        let write = host(&p, "fd_write");
        assert_eq!((u(&write["calls"]), u(&write["bytes"])), (2, 2), "{mode}");
        // The direct call's context has its one call; the other is in none.
        let placed: Vec<(String, u64)> = contexts_of(&p, "fd_write", 1)
            .into_iter()
            .map(|(caller, h)| (caller, u(&h["calls"])))
            .collect();
        assert_eq!(placed, vec![("direct".to_string(), 1)], "{mode}");
    }
}
