//! `wprof bench` runs (its numbers are never asserted: machines are noisy).

use crate::support::*;

fn positive(v: &serde_json::Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"));
    assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {v}");
    x
}

#[test]
fn bench_runs_in_quick_mode_and_reports_every_figure() {
    let s = Scratch::new();
    // The wasmtime CLI, if installed, is what the bench compares with (panics when
    // WPROF_REQUIRE_WASMTIME_CLI is set and it is missing).
    let cli = wasmtime_cli();
    let mut cmd = s.wprof(&[
        "bench",
        "--quick",
        "--json",
        sample("fib.wasm").to_str().unwrap(),
        sample("wasi_loop.wasm").to_str().unwrap(),
    ]);
    match &cli {
        Some(cli) => cmd.env("WASMTIME_CLI", cli),
        None => cmd.env_remove("WASMTIME_CLI"),
    };
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["wasmtime_cli"].is_string(), cli.is_some(), "{v}");
    assert!(v["wasmtime_embedded"].is_string(), "{v}");
    let rows = v["modules"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row["runs"], 1);
        positive(row, "original");
        // One entry per mode the agent has, in its order.
        let modes: Vec<&str> = row["modes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                positive(m, "instrumented");
                positive(m, "ratio");
                m["mode"].as_str().unwrap()
            })
            .collect();
        // Then sample mode with every switch off, with block counters and with allocation
        // profiling, then time mode with a call trace.
        let all: Vec<&str> = wprof_agent::ProbeMode::ALL
            .iter()
            .map(|m| m.name())
            .chain(["live off", "coverage", "allocs", "trace"])
            .collect();
        assert_eq!(modes, all, "{row}");

        let p = &row["process"];
        positive(p, "wprof_off");
        positive(p, "wprof_off_warm");
        let profiled = p["profiled"].as_array().unwrap();
        // Every mode's whole process, stack mode's included (the original, its stacks
        // sampled).
        let shown: Vec<&str> = profiled
            .iter()
            .map(|m| m["mode"].as_str().unwrap())
            .collect();
        assert_eq!(
            shown,
            ["time", "cost", "sample", "adaptive", "stack"],
            "{p}"
        );
        for m in profiled {
            positive(m, "wall");
            positive(m, "own");
            positive(m, "own_phases");
            assert!(m["own"].as_u64() <= m["wall"].as_u64(), "{m}");
            assert_eq!(m["ratio"].is_null(), cli.is_none(), "{m}");
        }
        for key in [
            "wasmtime_run",
            "wasmtime_profile_guest",
            "profile_guest_ratio",
            "wprof_off_ratio",
            "wasmtime_run_warm",
            "wprof_off_warm_ratio",
        ] {
            if cli.is_some() {
                positive(p, key);
            } else {
                assert!(p[key].is_null(), "{key} without the CLI: {p}");
            }
        }

        let st = &row["startup"];
        for key in [
            "compile_original",
            "cold",
            "warm",
            "changed",
            "instrument",
            "walrus",
            "instrument_speed",
            "lookups",
            "lookup_keys",
            "lookup_share",
            "lookup_share_of_changed",
            "code_bytes",
            "functions",
        ] {
            positive(st, key);
        }
    }
    // The benchmark's programs print nothing: their output is discarded.
    assert!(!stdout(&out).contains("tick"));
    // Nothing is written where the bench runs (the guest profile goes to a temporary
    // directory).
    let left: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "cache" && n != "config")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bench_table_has_a_column_per_mode_and_the_reference() {
    let s = Scratch::new();
    let cli = wasmtime_cli();
    let mut cmd = s.wprof(&[
        "bench",
        "--quick",
        sample("wasi_loop.wasm").to_str().unwrap(),
    ]);
    match &cli {
        Some(cli) => cmd.env("WASMTIME_CLI", cli),
        None => cmd.env_remove("WASMTIME_CLI").env("PATH", ""),
    };
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    for mode in wprof_agent::ProbeMode::ALL {
        assert!(table.contains(&format!("{} mode", mode.name())), "{table}");
    }
    for column in [
        "--profile=guest",
        "wprof WPROF=0",
        "walrus",
        "lookups",
        "changed",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }
    assert_eq!(
        table.contains("the wasmtime CLI is not installed"),
        cli.is_none(),
        "{table}"
    );
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
    let ratio = &v["modules"][0]["accuracy"][0];
    assert_eq!(ratio["functions"], "heavy/light");
    assert_eq!(ratio["expected"], 3.0);
    for key in ["raw", "subtracted"] {
        assert!(ratio[key].as_f64().unwrap() > 0.0, "{key}: {ratio}");
    }
    // fib has no such functions: no check reported.
    assert!(v["modules"][1].get("accuracy").is_none());
    let bad = s.run(&["bench", "--expect-ratio", "heavy-light", "x.wasm"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// A program list with one bundled sample, for `--accuracy`.
fn one_program_list(s: &Scratch) -> std::path::PathBuf {
    let list = s.path("programs.json");
    let wasm = sample("interp.wasm");
    std::fs::write(
        &list,
        serde_json::json!([{"name": "interp", "wasm": wasm, "args": []}]).to_string(),
    )
    .unwrap();
    list
}

#[test]
fn accuracy_compares_every_mode_with_perf() {
    let Some(_) = crate::tools::tool("perf", "wprof bench --accuracy") else {
        return;
    };
    let s = Scratch::new();
    let list = one_program_list(&s);
    let bench = |extra: &[&str]| {
        let base = ["bench", "--accuracy", "--quick", "--json", "--programs"];
        s.wprof(&[&base[..], &[list.to_str().unwrap()], extra].concat())
            .output()
            .unwrap()
    };
    let out = bench(&[]);
    // A machine whose kernel forbids sampling (perf_event_paranoid, containers) says so.
    if out.status.code() == Some(3) && stderr(&out).contains("cannot record cpu-clock samples") {
        eprintln!("skipped: {}", stderr(&out).trim());
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let program = &v[0];
    assert_eq!(program["name"], "interp");
    assert!(program["perf_samples"].as_u64().unwrap() > 0, "{program}");
    positive(program, "wprof_off");
    // Profiling off against plain wasmtime, when the CLI is there.
    if std::env::var_os("WASMTIME_CLI").is_some() {
        positive(program, "wasmtime_run");
    }
    // perf's second run loads the compiled code the first one cached: it must name the
    // module's functions as well (a distance of 1 is two disjoint profiles: it read none).
    let noise = program["perf_noise"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&noise), "{program}");
    // perf of the probed program names the module's functions through the instrumented
    // module's perf map as well.
    let probed = program["probed_perf"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&probed), "{program}");
    // So does perf of the program with stack mode's counters (the counted module's).
    let counted = program["counted_perf"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&counted), "{program}");
    let top = program["top"].as_array().unwrap();
    assert!(
        top.iter().any(|f| f["counted"].as_f64().unwrap() > 0.0),
        "{program}"
    );
    // Time mode's floor: its probes doing nothing but reading the clock.
    positive(program, "time_floor");
    let modes: Vec<&str> = program["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["time", "cost", "sample", "adaptive", "stack"]);
    for m in program["modes"].as_array().unwrap() {
        let d = m["distance"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&d), "{m}");
        // Within perf's noise: its distance at most the noise plus 2 points, or 5%.
        assert_eq!(
            m["within_perf_noise"].as_bool().unwrap(),
            d <= (noise + 0.02).max(0.05),
            "{m}"
        );
        positive(m, "overhead");
        // The size of the times against perf's: none in cost mode (instructions).
        match m["mode"].as_str() {
            Some("cost") => assert!(m["time_over_perf"].is_null(), "{m}"),
            _ => {
                positive(m, "time_over_perf");
            }
        }
        let broken = m["violations"].as_u64().unwrap();
        assert_eq!(m["first_violation"].is_null(), broken == 0, "{m}");
        // Where the distance comes from: up to three functions, each share a fraction.
        let differences = m["largest_differences"].as_array().unwrap();
        assert!((1..=3).contains(&differences.len()), "{m}");
        for d in differences {
            for share in [d[1].as_f64().unwrap(), d[2].as_f64().unwrap()] {
                assert!((0.0..=1.0).contains(&share), "{m}");
            }
        }
    }
    // The top functions name the interpreter's own functions with perf's share first.
    let top = program["top"].as_array().unwrap();
    assert!((1..=5).contains(&top.len()), "{program}");
    assert!(top[0]["perf"].as_f64().unwrap() > 0.0, "{program}");
    for share in ["probed", "counted"] {
        let share = top[0][share].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{program}");
    }
    assert_eq!(top[0]["modes"].as_array().unwrap().len(), 5);

    // With a selection, every profiled run has it, and the report says so.
    // (And --top lists that many of perf's largest functions.)
    let out = bench(&["--exclude", "is_*", "--top", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["selection"], serde_json::json!(["--exclude", "is_*"]));
    assert_eq!(v[0]["modes"].as_array().unwrap().len(), 5);
    assert_eq!(v[0]["top"].as_array().unwrap().len(), 1, "{}", v[0]);

    // Some modes only, in the order given; no time mode, no time floor.
    let out = bench(&["--modes", "stack,sample", "--top", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes: Vec<&str> = v[0]["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["stack", "sample"], "{}", v[0]);
    assert!(v[0]["time_floor"].is_null(), "{}", v[0]);
    for top in v[0]["top"].as_array().unwrap() {
        assert_eq!(top["modes"].as_array().unwrap().len(), 2, "{top}");
    }
    // A mode that does not exist is a usage error naming the modes.
    let out = bench(&["--modes", "stack,fast"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("time, cost, sample, adaptive, stack"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn accuracy_without_perf_is_one_line_and_exit_3() {
    let s = Scratch::new();
    let list = one_program_list(&s);
    let empty = s.path("no-tools");
    std::fs::create_dir_all(&empty).unwrap();
    let out = s
        .wprof(&["bench", "--accuracy", "--programs", list.to_str().unwrap()])
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("perf is not installed"), "{err}");
}

#[test]
fn accuracy_with_a_bad_list_or_name_is_exit_2() {
    let s = Scratch::new();
    let list = one_program_list(&s);
    let out = s
        .wprof(&["bench", "--accuracy", "--programs", "missing.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = s
        .wprof(&[
            "bench",
            "--accuracy",
            "--programs",
            list.to_str().unwrap(),
            "--program",
            "nope",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no program \"nope\""));
}

#[test]
fn scale_reports_cold_warm_and_the_cache_against_wasmtime() {
    let s = Scratch::new();
    let list = s.path("programs.json");
    std::fs::write(
        &list,
        serde_json::json!([
            {"name": "interp", "wasm": sample("interp.wasm"), "args": []},
            {"name": "fib_start", "wasm": sample("fib.wasm"), "args": [], "startup_only": true},
        ])
        .to_string(),
    )
    .unwrap();
    let out = s
        .wprof(&[
            "bench",
            "--scale",
            "--quick",
            "--json",
            "--programs",
            list.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The start-up programs only.
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    let r = &v[0];
    assert_eq!(r["program"], "fib_start");
    assert_eq!(
        r["module_bytes"].as_u64().unwrap(),
        std::fs::metadata(sample("fib.wasm")).unwrap().len()
    );
    positive(&r["cold"], "wall");
    positive(&r["cold"], "peak_rss");
    positive(r, "cold_before_start");
    assert!(
        r["cold_before_start"].as_u64() < r["cold"]["wall"].as_u64(),
        "{r}"
    );
    // What a profiled cold run leaves: a handful of files, not one per function.
    let files = r["cache_files"].as_u64().unwrap();
    assert!((5..=20).contains(&files), "{r}");
    positive(r, "cache_bytes");
    // Without compiled functions kept: a smaller cache.
    positive(r, "lean_before_start");
    positive(r, "lean_cache_bytes");
    assert!(
        r["lean_cache_bytes"].as_u64() < r["cache_bytes"].as_u64(),
        "{r}"
    );
    positive(r, "off_warm");
    positive(r, "on_warm");
    // Stack mode (the default) keeps its manifest, both modules and its compiled code, no
    // packs: fewer files, and less than sample mode's.
    positive(r, "stack_before_start");
    positive(r, "stack_warm");
    positive(r, "stack_cache_bytes");
    positive(r, "stack_peak_rss");
    let stack_files = r["stack_cache_files"].as_u64().unwrap();
    assert!((4..files).contains(&stack_files), "{r}");
    assert!(
        r["stack_cache_bytes"].as_u64() < r["cache_bytes"].as_u64(),
        "{r}"
    );
    if std::env::var_os("WASMTIME_CLI").is_some() {
        positive(&r["wasmtime_compile"], "peak_rss");
        positive(r, "wasmtime_run_warm");
        positive(r, "on_ratio");
    }
    // --accuracy refuses a start-up program by name; --scale takes any by name.
    let out = s
        .wprof(&[
            "bench",
            "--accuracy",
            "--programs",
            list.to_str().unwrap(),
            "--program",
            "fib_start",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Creates `out.txt` in the folder preopened first (fd 3) and writes 2,000 short lines to
/// it, one `fd_write` each; exits 2 when it cannot create it, 3 when a write fails.
fn file_writer() -> Vec<u8> {
    wat::parse_str(
        r#"(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "out.txt")
  (data (i32.const 64) "a line of output\n")
  (func (export "_start")
    (local $fd i32) (local $left i32)
    (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 7)
                         (i32.const 9) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 40))
      (then (call $proc_exit (i32.const 2))))
    (local.set $fd (i32.load (i32.const 40)))
    (i32.store (i32.const 16) (i32.const 64))
    (i32.store (i32.const 20) (i32.const 17))
    (local.set $left (i32.const 2000))
    (loop $next
      (if (call $fd_write (local.get $fd) (i32.const 16) (i32.const 1) (i32.const 32))
        (then (call $proc_exit (i32.const 3))))
      (local.set $left (i32.sub (local.get $left) (i32.const 1)))
      (br_if $next (local.get $left)))))"#,
    )
    .unwrap()
}

#[test]
fn vs_wasmtime_times_whole_runs_beside_the_cli() {
    let s = Scratch::new();
    let writer = s.path("writer.wasm");
    std::fs::write(&writer, file_writer()).unwrap();
    let list = s.path("programs.json");
    std::fs::write(
        &list,
        serde_json::json!([
            // Writes files: a fresh folder as /scratch (the run fails without it).
            {"name": "writer", "kind": "io", "wasm": writer, "scratch": true},
            // Its stdout read through a pipe.
            {"name": "interp", "kind": "c", "wasm": sample("interp.wasm"), "stdout_pipe": true},
            {"name": "fib_start", "wasm": sample("fib.wasm"), "startup_only": true},
        ])
        .to_string(),
    )
    .unwrap();
    let bench = |extra: &[&str]| {
        let base = ["bench", "--vs-wasmtime", "--quick", "--programs"];
        s.wprof(&[&base[..], &[list.to_str().unwrap()], extra].concat())
            .output()
            .unwrap()
    };
    let out = bench(&["--json", "--modes", "stack,sample"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The start-up program is left out.
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["program"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["writer", "interp"], "{v}");
    // The benchmark finds the CLI as the tests do: WASMTIME_CLI, else wasmtime on PATH.
    let cli = wasmtime_cli().is_some();
    for r in v.as_array().unwrap() {
        let ways: Vec<&str> = r["figures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["what"].as_str().unwrap())
            .collect();
        let expected: &[&str] = match cli {
            true => &["wasmtime", "WPROF=0", "stack", "sample"],
            false => &["WPROF=0", "stack", "sample"],
        };
        assert_eq!(ways, expected, "{r}");
        for f in r["figures"].as_array().unwrap() {
            positive(f, "wall_ns");
            positive(f, "cpu_ns");
            if cli {
                positive(f, "ratio");
                positive(f, "cpu_ratio");
            } else {
                assert!(f["ratio"].is_null(), "{f}");
            }
        }
        assert_eq!(r["reference"].is_string(), cli, "{r}");
    }
    // The table ends with the goals, when there is a CLI to compare with.
    let out = bench(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("writer") && text.contains("interp"), "{text}");
    if cli {
        assert!(
            text.contains("WPROF=0 within 1.05x of wasmtime run on")
                && text.contains("stack within 1.15x of wasmtime run on"),
            "{text}"
        );
    }
    // --modes belongs to --accuracy and --vs-wasmtime.
    let out = s.run(&["bench", "--modes", "stack", "x.wasm"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
