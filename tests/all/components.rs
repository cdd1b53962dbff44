//! WASI 0.2 command components through the binary: `samples/component.wasm` (the
//! `component.c` module and the WASI preview 1 adapter, made by the `componentize`
//! example) calls `middle` ROUNDS times and `leaf` 100 times per call, so profiles are
//! checked exactly; it runs as the wasmtime CLI runs it (stdout, exit code, `--env`,
//! `--dir`), profiled or not.

use crate::support::{calls, nested_in, sample, stderr, stdout, wasmtime_cli, Scratch};

fn component() -> String {
    sample("component.wasm").to_str().unwrap().to_string()
}

#[test]
fn a_component_runs_as_under_wasmtime_profiled_or_not() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("data")).unwrap();
    std::fs::write(s.path("data/note.txt"), "from the host\nsecond\n").unwrap();
    let program = component();
    let args = ["7", "0", "/data/note.txt"];
    let expected = "hi: 7 rounds, checksum 3216989998\nfirst line: from the host\n";
    for (label, profiling) in [("off", "0"), ("time", "1")] {
        let out = s
            .wprof(
                &[
                    &["run", "-q", "--mode", "time", "-o", "c.wprof"][..],
                    &[
                        "--env",
                        "GREETING=hi",
                        "--dir",
                        "data::/data",
                        &program,
                        "--",
                    ],
                    &args,
                ]
                .concat(),
            )
            .env("WPROF", profiling)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{label}: {}", stderr(&out));
        assert_eq!(stdout(&out), expected, "{label}");
    }
    // A failing `main` exits with 1, as the component model's `wasi:cli/exit` says.
    for profiling in ["0", "1"] {
        let out = s
            .wprof(&["run", "-q", "--mode", "time", &program, "--", "1", "3"])
            .env("WPROF", profiling)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "WPROF={profiling}: {}",
            stderr(&out)
        );
    }
    if let Some(cli) = wasmtime_cli() {
        let out = std::process::Command::new(cli)
            .current_dir(s.path(""))
            .args([
                "run",
                "--env",
                "GREETING=hi",
                "--dir",
                "data::/data",
                &program,
            ])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), expected, "the wasmtime CLI");
        let out = std::process::Command::new(wasmtime_cli().unwrap())
            .args(["run", &program, "1", "3"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "the wasmtime CLI's exit code");
    }
}

#[test]
fn time_mode_counts_every_core_module_exactly_and_the_cache_keeps_them() {
    let s = Scratch::new();
    let program = component();
    let out = s.run(&["run", "--mode", "time", "-o", "c.wprof", &program, "25"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary = stderr(&out);
    assert!(
        summary.contains("a component: 4 core modules instrumented (main, wasi_snapshot_preview1,"),
        "{summary}"
    );
    let p = s.profile("c.wprof");
    assert_eq!(calls(&p, "main!middle"), 25);
    assert_eq!(calls(&p, "main!leaf"), 2500);
    assert_eq!(calls(&p, "main!main"), 1);
    // The adapter's functions are there, under its own name.
    assert!(p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "wasi_snapshot_preview1!fd_write" && f["calls"].as_u64() > Some(0)));
    // One tree: main's import of fd_write calls the shim (wit-component's way through the
    // cycle between main and the adapter), which calls the adapter's fd_write.
    let id = |name: &str| crate::support::function(&p, name)["id"].clone();
    let import = id("main!wasi_snapshot_preview1::fd_write");
    let fd_write = id("wasi_snapshot_preview1!fd_write");
    let edges = p["edges"].as_array().unwrap();
    let through = edges
        .iter()
        .filter(|e| e["caller"] == import)
        .map(|e| e["callee"].clone())
        .collect::<Vec<_>>();
    assert!(
        through.iter().any(|shim| edges
            .iter()
            .any(|e| &e["caller"] == shim && e["callee"] == fd_write)),
        "the adapter's fd_write is not reached from main's import of it"
    );
    // Again: every module's functions from the cache.
    let out = s.run(&["run", "--mode", "time", "-o", "c2.wprof", &program, "25"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(" 0 instrumented now"),
        "{}",
        stderr(&out)
    );
    assert_eq!(calls(&s.profile("c2.wprof"), "main!leaf"), 2500);
    // The reports read it.
    let out = s.run(&["report", "--top", "0", "c.wprof"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("main!middle"), "{}", stdout(&out));
    // The adapter's Rust names are shown demangled, their module kept: in every function
    // the report lists (which of them the summary's top lines show depends on their times).
    let out = s.run(&["run", "--mode", "time", "-o", "c3.wprof", &program, "1"]);
    assert!(!stderr(&out).contains("!_R"), "{}", stderr(&out));
    let report = stdout(&s.run(&["report", "--top", "0", "c3.wprof"]));
    assert!(report.contains("wasi_snapshot_preview1!<"), "{report}");
}

#[test]
fn time_mode_shares_a_components_short_functions_time_by_program_counter_ticks() {
    let s = Scratch::new();
    let program = component();
    let out = s.run(&["run", "--mode", "time", "-o", "c.wprof", &program, "100000"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("c.wprof");
    assert_eq!(calls(&p, "main!leaf"), 10_000_000);
    assert!(
        p["untimed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "main!leaf"),
        "{}",
        p["untimed"]
    );
    // The ticks found the program in `middle`'s and `leaf`'s own instructions: their
    // program counters were placed in the component's modules, under the right ids.
    let ticks = &p["ticks"];
    assert!(ticks["taken"].as_u64().unwrap() > 0, "{ticks}");
    assert!(ticks["placed"].as_u64().unwrap() > 0, "{ticks}");
    let leaf = crate::support::function(&p, "main!leaf");
    assert_eq!(leaf["self"], leaf["inclusive"], "{leaf}");
    let selfs: u64 = crate::support::self_sum(&p);
    assert_eq!(selfs, p["total"].as_u64().unwrap());
}

#[test]
fn a_component_that_is_not_a_command_is_one_line_and_exit_2() {
    let s = Scratch::new();
    let path = s.wat_module("lib.wasm", "(component (core module))");
    let out = s.run(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("not a WASI command"), "{err}");
}

#[test]
fn sample_mode_is_the_default() {
    let s = Scratch::new();
    let program = component();
    let out = s.run(&["run", "-o", "s.wprof", &program, "200"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello: 200 rounds, checksum 1205077780\n");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let p = s.profile("s.wprof");
    assert_eq!(p["mode"], "sample");
    assert_eq!(calls(&p, "main!middle"), 200);
    assert_eq!(calls(&p, "main!leaf"), 20000);
    assert!(calls(&p, "wasi_snapshot_preview1!fd_write") > 0);
    let total: u64 = crate::support::self_sum(&p);
    assert_eq!(total, p["total"].as_u64().unwrap(), "Σ self = total");
    assert!(
        p["sampling"]["readings"].as_u64() > Some(0),
        "{}",
        p["sampling"]
    );
}

#[test]
fn a_run_shorter_than_a_period_says_its_time_even_when_no_tick_came() {
    // One round: the program can end before its first tick, with no sample.
    let s = Scratch::new();
    let program = component();
    for _ in 0..5 {
        let out = s.run(&["run", "-o", "s.wprof", &program, "1"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let p = s.profile("s.wprof");
        let total = p["total"].as_u64().unwrap();
        assert_eq!(crate::support::self_sum(&p), total, "Σ self = total");
        let err = stderr(&out);
        let line = err
            .lines()
            .find(|l| l.contains("exited with code 0 in"))
            .unwrap();
        assert!(!line.contains(" in 0 ns"), "{line}");
        assert_eq!(
            total == 0,
            line.contains("(no sample fell in it: shorter than the sampling period)"),
            "{line}"
        );
    }
}

#[test]
fn adaptive_mode_walks_a_modules_hot_path_and_times_it() {
    let s = Scratch::new();
    let program = component();
    // `leaf`, called 100 times a round, is the hot spot; the walk goes up through `middle`.
    let rounds = 1_000_000u64;
    let out = s.run(&[
        "run",
        "--mode",
        "adaptive",
        "--adaptive-calls",
        "50",
        "-o",
        "a.wprof",
        &program,
        &rounds.to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("hello: 1000000 rounds"),
        "{}",
        stdout(&out)
    );
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    // The leaf's path, walked first; a slow machine may find `middle`'s own loop a hot
    // spot of its own later (a second path), which is no fault.
    let walked_paths = stderr(&out)
        .split("adaptive mode: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(walked_paths.is_some_and(|n| n >= 1), "{}", stderr(&out));
    let p = s.profile("a.wprof");
    assert_eq!(p["mode"], "adaptive");
    // Exact counts, as in sample mode.
    assert_eq!(calls(&p, "main!middle"), rounds);
    assert_eq!(calls(&p, "main!leaf"), 100 * rounds);
    let record = &p["adaptive"];
    assert!(record["timer_cost_ns"].as_u64() > Some(0), "{record}");
    let contexts = record["contexts"].as_array().unwrap();
    let name = |c: &serde_json::Value| {
        let id = c["stack"].as_array().unwrap().last().unwrap().clone();
        p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["name"].as_str().unwrap().to_string())
            .unwrap()
    };
    let paths = record["paths"].as_array().unwrap();
    assert_eq!(Some(paths.len()), walked_paths, "{record}");
    let walked: Vec<&serde_json::Value> = paths[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &contexts[i.as_u64().unwrap() as usize])
        .collect();
    let names: Vec<String> = walked.iter().map(|c| name(c)).collect();
    assert_eq!(names[..2], ["main!leaf", "main!middle"], "{record}");
    // Each context on the path is the module's own (ids in the component's space), with
    // its exact calls; the first two were timed, at most 50 activations a step. A slow
    // machine runs long enough for a later round to walk the path again (one step per
    // context a round), so the bound is the steps taken, not one step.
    let steps = record["steps"].as_u64().unwrap();
    assert!(steps >= 2, "{record}");
    for (c, calls) in walked.iter().zip([100 * rounds, rounds]) {
        assert_eq!(c["calls"], calls, "{c}");
        let timed = c["timed"].as_u64().unwrap();
        assert!((1..=50 * (steps - 1)).contains(&timed), "{c}");
        assert!(c["min_ns"].as_u64() <= c["max_ns"].as_u64(), "{c}");
    }
    // The report shows the path.
    let out = s.run(&["report", "a.wprof"]);
    assert!(
        stdout(&out).contains("main!main > main!middle > main!leaf"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn cost_mode_counts_every_core_module_exactly_and_the_same_on_every_run() {
    let s = Scratch::new();
    let program = component();
    let mut selves = Vec::new();
    for name in ["a.wprof", "b.wprof"] {
        let out = s.run(&["run", "--mode", "cost", "-o", name, &program, "25"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
        let p = s.profile(name);
        assert_eq!(p["mode"], "cost");
        assert_eq!(calls(&p, "main!middle"), 25);
        assert_eq!(calls(&p, "main!leaf"), 2500);
        // The adapter's calls are counted in its own tree.
        assert!(calls(&p, "wasi_snapshot_preview1!fd_write") > 0);
        let total: u64 = crate::support::self_sum(&p);
        assert_eq!(total, p["total"].as_u64().unwrap(), "Σ self = total");
        // leaf: the same instructions on each of its calls.
        assert_eq!(
            crate::support::function(&p, "main!leaf")["self"]
                .as_u64()
                .unwrap()
                % 2500,
            0
        );
        selves.push(
            p["functions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f["name"].clone(), f["self"].clone(), f["calls"].clone()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(selves[0], selves[1], "cost mode is deterministic");
}

#[test]
fn a_component_with_one_core_module_changed_prepares_that_module_only() {
    use wprof::components::rewrite::{rewrite, Replacement};
    let s = Scratch::new();
    let program = component();
    for (run, cached) in [(1, "0 of them"), (2, "4 of them")] {
        let out = s.run(&["run", "-o", "c.wprof", &program, "1"]);
        assert_eq!(out.status.code(), Some(0), "run {run}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{cached} whole from the cache")),
            "run {run}: {}",
            stderr(&out)
        );
    }
    // The same component with its main module changed (a custom section added: its blake3
    // changes, its functions do not).
    let bytes = std::fs::read(&program).unwrap();
    let layout = wprof::components::ComponentLayout::read(&bytes).unwrap();
    let main = &layout.modules[0];
    assert_eq!(main.name, "main");
    let mut changed_main = bytes[main.range.clone()].to_vec();
    changed_main.extend([0, 3, 1, b'x', 1]);
    let changed = rewrite(
        &bytes,
        &layout.components,
        &[Replacement {
            component: main.component,
            module_index: main.index,
            bytes: changed_main,
            probes: Vec::new(),
        }],
    )
    .unwrap();
    // Rebuilt where it was built: the same file name (a program's versions share the
    // cache's packs by name).
    std::fs::create_dir_all(s.path("rebuilt")).unwrap();
    let path = s.path("rebuilt/component.wasm");
    std::fs::write(&path, changed).unwrap();
    let out = s.run(&["run", "-o", "changed.wprof", path.to_str().unwrap(), "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary = stderr(&out);
    assert!(
        summary.contains("3 of them whole from the cache"),
        "{summary}"
    );
    assert!(summary.contains(": 0 instrumented now"), "{summary}");
    assert_eq!(calls(&s.profile("changed.wprof"), "main!leaf"), 100);
}

#[test]
fn a_trace_of_a_component_holds_every_modules_calls_as_the_profile_counts_them() {
    let s = Scratch::new();
    let program = component();
    // No mode given: --trace takes time mode; --short-max 0 times every function.
    let out = s.run(&[
        "run",
        "--trace",
        "--short-max",
        "0",
        "-o",
        "c.wprof",
        &program,
        "25",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello: 25 rounds, checksum 3115853238\n");
    assert!(
        stderr(&out).contains("calls written to c.trace.json"),
        "{}",
        stderr(&out)
    );
    let p = s.profile("c.wprof");
    assert_eq!(p["mode"], "time");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path("c.trace.json")).unwrap()).unwrap();
    let mut traced = std::collections::BTreeMap::<String, u64>::new();
    let mut spans: Vec<(String, f64, f64)> = Vec::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            let name = e["name"].as_str().unwrap().to_string();
            *traced.entry(name.clone()).or_default() += 1;
            spans.push((name, e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()));
        }
    }
    assert_eq!(traced.get("main!middle"), Some(&25), "{traced:?}");
    assert_eq!(traced.get("main!leaf"), Some(&2500));
    // Every traced function's calls are the profile's (names the trace shows demangled
    // aside), the adapter's among them.
    let profiled: std::collections::BTreeMap<&str, u64> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["calls"].as_u64().unwrap()))
        .collect();
    let mut compared = 0;
    for (name, n) in &traced {
        if let Some(&calls) = profiled.get(name.as_str()) {
            assert_eq!(calls, *n, "{name}");
            compared += usize::from(name.starts_with("wasi_snapshot_preview1!"));
        }
    }
    assert!(
        compared > 0,
        "no function of the adapter traced: {traced:?}"
    );
    // Each leaf call lies within a middle call.
    let middles: Vec<_> = spans.iter().filter(|c| c.0 == "main!middle").collect();
    for leaf in spans.iter().filter(|c| c.0 == "main!leaf") {
        assert!(
            middles
                .iter()
                .any(|m| m.1 <= leaf.1 && leaf.1 + leaf.2 <= m.1 + m.2 + 1e-9),
            "{leaf:?}"
        );
    }
}

#[test]
fn coverage_of_a_component_counts_every_modules_blocks_at_any_exit_or_trap() {
    let s = Scratch::new();
    let program = component();
    // Exit code 0 (`run` returns) and 1 (through `wasi:cli/exit`, after which wasmtime runs
    // nothing in the component: the counts are read from the modules' memories); sample and
    // cost mode.
    for (mode, rounds, exit) in [("sample", "7", 0), ("cost", "4", 1)] {
        let name = format!("{mode}.wprof");
        let out = s.run(&[
            "run",
            "--coverage",
            "--mode",
            mode,
            "-o",
            &name,
            &program,
            rounds,
            &exit.to_string(),
        ]);
        assert_eq!(out.status.code(), Some(exit), "{mode}: {}", stderr(&out));
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("basic blocks ran"),
            "{mode}: {}",
            stderr(&out)
        );
        let p = s.profile(&name);
        let rounds: u64 = rounds.parse().unwrap();
        let covered = |name: &str| {
            p["coverage"]["functions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == name)
                .unwrap_or_else(|| panic!("{name} has no coverage"))
                .clone()
        };
        // A block's count: leaf's first block runs at each of its calls.
        assert_eq!(covered("main!leaf")["counts"][0], 100 * rounds, "{mode}");
        assert_eq!(covered("main!middle")["calls"], rounds, "{mode}");
        // The adapter's blocks are counted too.
        let adapter_ran = p["coverage"]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("wasi_snapshot_preview1!")
            })
            .any(|f| {
                f["counts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c.as_u64() > Some(0))
            });
        assert!(adapter_ran, "{mode}");
        // lcov: component.c's lines from the main module's DWARF, with the counts.
        let out = s.run(&["report", "--format", "lcov", &name]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let info = stdout(&out);
        let record = info
            .split("end_of_record\n")
            .find(|r| r.contains("/component.c\n"))
            .unwrap_or_else(|| panic!("no record of component.c in\n{info}"));
        assert!(
            record.contains(&format!("FNDA:{},main!leaf\n", 100 * rounds)),
            "{record}"
        );
        assert!(
            record.contains(&format!("DA:15,{}\n", 100 * rounds)),
            "{record}"
        );
    }
    // A trap: the blocks that ran before it, in every inline mode. The third call to
    // `middle` traps before its first block: two rounds of `leaf` ran.
    for mode in ["sample", "cost"] {
        let out = s.run(&[
            "run",
            "--coverage",
            "--mode",
            mode,
            "--inject",
            "main!middle=trap@3",
            "-o",
            "trap.wprof",
            &program,
            "7",
        ]);
        assert_eq!(out.status.code(), Some(134), "{mode}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("coverage not recorded"),
            "{mode}: {}",
            stderr(&out)
        );
        let p = s.profile("trap.wprof");
        let first_block = |name: &str| {
            p["coverage"]["functions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == name)
                .unwrap_or_else(|| panic!("{mode}: {name} has no coverage"))["counts"][0]
                .clone()
        };
        assert_eq!(first_block("main!leaf"), 200, "{mode}");
        assert_eq!(first_block("main!middle"), 2, "{mode}");
    }
    // Time mode counts no blocks: refused, as for a module.
    let out = s.run(&["run", "--coverage", "--mode", "time", &program]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn inject_goes_into_the_core_modules_own_functions_wasi_into_the_adapters() {
    let s = Scratch::new();
    let program = component();
    let injected = |name: &str| -> Vec<serde_json::Value> {
        s.profile(name)["injections"].as_array().unwrap().clone()
    };
    // A function of main's returns what it is told, in every mode.
    for mode in ["sample", "cost", "time"] {
        let out = s.run(&[
            "run",
            "--mode",
            mode,
            "-o",
            "leaf.wprof",
            "--inject",
            "leaf=return:0",
            &program,
            "5",
        ]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "hello: 5 rounds, checksum 0\n", "{mode}");
        let records = injected("leaf.wprof");
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0]["target"], "main!leaf");
        assert_eq!(records[0]["calls"], 500);
        assert_eq!(records[0]["injected"], 500);
    }
    // `wasi:fd_write` is the adapter's own fd_write, which main's printf calls: EIO, and
    // nothing is written.
    let out = s.run(&[
        "run",
        "-o",
        "w.wprof",
        "--inject",
        "wasi:fd_write=errno:EIO",
        &program,
        "5",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let records = injected("w.wprof");
    assert_eq!(records[0]["target"], "wasi_snapshot_preview1!fd_write");
    assert_eq!(records[0]["injected"], 1);
    // A trap at the third call of middle: the program traps there, as under wasmtime.
    let out = s.run(&[
        "run",
        "-o",
        "t.wprof",
        "--inject",
        "main!middle=trap@3",
        &program,
        "5",
    ]);
    assert_eq!(out.status.code(), Some(134), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("wprof injected a trap into main!middle (call 3)"),
        "{}",
        stderr(&out)
    );
    // The trap is named as wprof's, under the backtrace, not as the `unreachable` it is
    // marked as (so that it exits as a trap).
    let err = stderr(&out);
    assert!(
        err.contains("backtrace") && err.contains("!middle") && !err.contains("unreachable"),
        "{err}"
    );
    assert_eq!(calls(&s.profile("t.wprof"), "main!middle"), 3);
    // A name no module has, and WPROF=0: one line, exit 2.
    for (profiling, spec, says) in [
        ("1", "nothing=trap", "the component has no function nothing"),
        ("0", "leaf=trap", "only a profiled run can inject"),
    ] {
        let out = s
            .wprof(&["run", "--inject", spec, &program])
            .env("WPROF", profiling)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn live_switches_of_a_component_turn_each_modules_functions() {
    let s = Scratch::new();
    let program = component();
    for mode in ["cost", "sample"] {
        let out = s.run(&[
            "run",
            "--mode",
            mode,
            "--off",
            "main!leaf",
            "-o",
            "l.wprof",
            &program,
            "30",
        ]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("off main!leaf (1 function, start)"),
            "{mode}: {}",
            stderr(&out)
        );
        let p = s.profile("l.wprof");
        // leaf's switch is off from the start: it is not counted; middle is.
        assert_eq!(calls(&p, "main!middle"), 30, "{mode}");
        let leaf_calls = p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "main!leaf")
            .map_or(0, |f| f["calls"].as_u64().unwrap());
        assert_eq!(leaf_calls, 0, "{mode}");
        let switched = p["live"]["switched"].as_array().unwrap();
        assert_eq!(switched.len(), 1, "{mode}: {switched:?}");
        assert_eq!(switched[0]["name"], "main!leaf");
        // A function of the adapter, in another module's table, stays on.
        assert!(calls(&p, "wasi_snapshot_preview1!fd_write") > 0, "{mode}");
    }
    // A function of another module, in its own table: off there, and only there.
    let out = s.run(&[
        "run",
        "--mode",
        "cost",
        "--off",
        "wasi_snapshot_preview1!fd_write",
        "-o",
        "a.wprof",
        &program,
        "30",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("a.wprof");
    let counted = |name: &str| {
        p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map_or(0, |f| f["calls"].as_u64().unwrap())
    };
    assert_eq!(counted("wasi_snapshot_preview1!fd_write"), 0);
    assert_eq!(counted("main!leaf"), 3000);
    // Time mode's probes in a component have no switches.
    let out = s.run(&["run", "--mode", "time", "--live", &program]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("needs sample or cost mode"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_composition_profiles_the_modules_of_its_nested_components_in_every_mode() {
    let s = Scratch::new();
    let inner = std::fs::read(component()).unwrap();
    std::fs::write(s.path("nested.wasm"), nested_in(&inner, "app", 1)).unwrap();
    for mode in ["sample", "time", "cost", "adaptive"] {
        let name = format!("{mode}.wprof");
        let out = s.run(&["run", "--mode", mode, "-o", &name, "nested.wasm", "3"]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert!(
            stdout(&out).starts_with("hello: 3 rounds"),
            "{mode}: {}",
            stdout(&out)
        );
        let summary = stderr(&out);
        assert!(
            summary.contains(
                "a component: 4 core modules instrumented (app/main, app/wasi_snapshot_preview1,"
            ),
            "{mode}: {summary}"
        );
        assert!(!summary.contains("without probes"), "{mode}: {summary}");
        let p = s.profile(&name);
        assert_eq!(calls(&p, "app/main!main"), 1, "{mode}");
        assert_eq!(calls(&p, "app/main!middle"), 3, "{mode}");
        assert_eq!(calls(&p, "app/main!leaf"), 300, "{mode}");
        assert!(
            calls(&p, "app/wasi_snapshot_preview1!fd_write") > 0,
            "{mode}"
        );
        let profile = wprof::profile::Profile::read(&s.path(&name)).unwrap();
        assert_eq!(profile.violations(), Vec::<String>::new(), "{mode}");
    }
    // As the wasmtime CLI runs it.
    if let Some(cli) = wasmtime_cli() {
        let out = std::process::Command::new(cli)
            .current_dir(s.path(""))
            .args(["run", "nested.wasm", "3"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stdout(&out).starts_with("hello: 3 rounds"),
            "{}",
            stdout(&out)
        );
    }
    // Profiling off says nothing.
    let out = s
        .wprof(&["run", "nested.wasm", "3"])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("hello: 3 rounds"));
    assert!(!stderr(&out).contains("nested"), "{}", stderr(&out));
}

#[test]
fn a_nested_component_instantiated_twice_runs_as_it_is_and_says_so() {
    let s = Scratch::new();
    let inner = std::fs::read(component()).unwrap();
    std::fs::write(s.path("twice.wasm"), nested_in(&inner, "app", 2)).unwrap();
    let out = s.run(&["run", "-o", "p.wprof", "twice.wasm", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("hello: 3 rounds"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains(
            "4 core modules instantiated more than once, or in nested components that are, \
             run without probes: their time goes to the calls into them"
        ),
        "{}",
        stderr(&out)
    );
}
