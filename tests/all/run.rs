//! `wprof run` through the real binary: exact counts, the program's own behaviour, the
//! cache, the environment switches.

use std::io::Write;
use std::process::Stdio;

use crate::support::*;

#[test]
fn fib_call_counts_are_exact() {
    let s = Scratch::new();
    std::fs::copy(sample("fib.wasm"), s.path("fib.wasm")).unwrap();
    let out = s.run(&["run", "fib.wasm"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    // The summary went to stderr.
    assert!(stderr(&out).contains("profile written to fib.wprof"));
    // The default (stack mode) counts each function's calls; sample mode each edge's too.
    let default = s.profile("fib.wprof");
    assert_eq!(default["mode"], "stack");
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "sample",
        "-o",
        "sample.wprof",
        "fib.wasm",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sampled = s.profile("sample.wprof");
    for p in [&default, &sampled] {
        // fib(n) makes 2·F(n+1) − 1 calls: 2·121393 − 1.
        assert_eq!(calls(p, "fib"), 242_785);
        assert_eq!(calls(p, "_start"), 1);
        assert_eq!(calls(p, "wasi_snapshot_preview1::fd_write"), 1);
        assert_eq!(
            function(p, "wasi_snapshot_preview1::fd_write")["kind"],
            "import"
        );
        assert_eq!(function(p, "fib")["kind"], "local");
    }
    assert_eq!(edge_calls(&sampled, Some("_start"), "fib"), 1);
    assert_eq!(edge_calls(&sampled, Some("fib"), "fib"), 242_784);
    assert_eq!(edge_calls(&sampled, None, "_start"), 1);
}

#[test]
fn import_calls_are_their_own_nodes() {
    let s = Scratch::new();
    let out = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        "--keep-overhead",
        sample("wasi_loop.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "tick\n".repeat(100));
    assert!(
        stderr(&out).is_empty(),
        "-q prints nothing: {}",
        stderr(&out)
    );
    let p = s.profile("wasi_loop.wprof");
    assert_eq!(calls(&p, "emit"), 100);
    assert_eq!(calls(&p, "wasi_snapshot_preview1::fd_write"), 100);
    assert_eq!(
        edge_calls(&p, Some("emit"), "wasi_snapshot_preview1::fd_write"),
        100
    );
    // Time in the import is not the caller's self time: emit's self time is its inclusive
    // time minus the import's (raw times: `--keep-overhead` below).
    let emit = function(&p, "emit");
    let write = function(&p, "wasi_snapshot_preview1::fd_write");
    // (Each value is rounded down from picoseconds on its own: within 2 ns.)
    let parts = emit["self"].as_u64().unwrap() + write["inclusive"].as_u64().unwrap();
    let whole = emit["inclusive"].as_u64().unwrap();
    assert!(parts <= whole && whole - parts <= 2, "{parts} vs {whole}");
}

#[test]
fn profile_times_are_consistent() {
    let s = Scratch::new();
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "time",
        "--keep-overhead",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let p = s.profile("fib.wprof");
    let total = p["total"].as_u64().unwrap();
    let self_sum: u64 = crate::support::self_sum(&p);
    // Each value is rounded down from picoseconds on its own: under 1 ns per function.
    let functions = p["functions"].as_array().unwrap().len() as u64;
    assert!(
        self_sum <= total && total - self_sum <= functions,
        "self times add up to the root's inclusive time: {self_sum} vs {total}"
    );
    for f in p["functions"].as_array().unwrap() {
        let (s_, i) = (
            f["self"].as_u64().unwrap(),
            f["inclusive"].as_u64().unwrap(),
        );
        assert!(s_ <= i, "{f}");
        assert!(f["min_self"].as_u64().unwrap() <= f["max_self"].as_u64().unwrap());
    }
    assert_eq!(p["unit"], "ns");
    assert_eq!(p["mode"], "time");
    assert_eq!(p["format_version"], 1);
    assert!(
        p.get("probe_overhead").is_none(),
        "--keep-overhead subtracts nothing"
    );
}

#[test]
fn probe_overhead_is_measured_and_subtracted() {
    let s = Scratch::new();
    // Enough calls that the overhead is a fifth of the run, few enough that the subtracted
    // total stays far from zero.
    let m = sample("compress.wasm");
    let net = s.run(&[
        "run",
        "--mode",
        "time",
        "-o",
        "net.wprof",
        m.to_str().unwrap(),
        "--",
        "1",
    ]);
    assert_eq!(net.status.code(), Some(0));
    assert!(
        stderr(&net).contains("probe overhead subtracted"),
        "{}",
        stderr(&net)
    );
    let net = s.profile("net.wprof");
    let o = &net["probe_overhead"];
    let per_call = o["inside_ns"].as_f64().unwrap() + o["outside_ns"].as_f64().unwrap();
    assert!(per_call > 0.0, "{o}");
    // Within one run: the subtracted total plus what was subtracted (per activation) is
    // the raw time of `_start`, which is its wall time give or take the first and last
    // probe. A run that subtracted nothing, or something else, is off by the whole amount
    // (here ~20% of the run, against a 2% tolerance).
    let calls: u64 = net["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["calls"].as_u64().unwrap())
        .sum();
    let total = net["total"].as_u64().unwrap() as f64;
    let wall = net["wall_time"].as_u64().unwrap() as f64;
    let subtracted = calls as f64 * per_call;
    assert!(subtracted > 0.0);
    // wprof's own work during the run (handing events over) is excluded from all times.
    let excluded = net["excluded_ns"].as_u64().unwrap() as f64;
    let rebuilt = total + subtracted + excluded;
    assert!(
        (rebuilt - wall).abs() <= wall * 0.02 + 50_000.0,
        "total {total} + subtracted {subtracted} + excluded {excluded} vs wall time {wall}"
    );
    for f in net["functions"].as_array().unwrap() {
        assert!(
            f["self"].as_u64().unwrap() <= f["inclusive"].as_u64().unwrap(),
            "{f}"
        );
    }
    assert!(stdout(&s.run(&["report", "net.wprof"])).contains("probe overhead subtracted"));
}

#[test]
fn exit_codes_pass_through() {
    let s = Scratch::new();
    let out = s.run(&["run", "-q", sample("exit_code.wasm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "exiting with code 3\n");
    let p = s.profile("exit_code.wprof");
    assert_eq!(p["exit_code"], 3);
    assert_eq!(p["outcome"], "exit");
    // proc_exit never returns; every frame was still closed.
    assert_eq!(calls(&p, "wasi_snapshot_preview1::proc_exit"), 1);
    assert_eq!(calls(&p, "b"), 1);
    let start = function(&p, "_start");
    assert_eq!(
        start["inclusive"].as_u64().unwrap(),
        p["total"].as_u64().unwrap()
    );
}

#[test]
fn a_trap_writes_the_profile_and_exits_like_wasmtime() {
    let s = Scratch::new();
    let out = s.run(&["run", "-q", sample("trap.wasm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(134));
    assert_eq!(stdout(&out), "about to trap\n");
    assert!(stderr(&out).contains("unreachable"), "{}", stderr(&out));
    let p = s.profile("trap.wprof");
    assert_eq!(p["outcome"], "trap");
    assert_eq!(p["exit_code"], 134);
    assert!(p["trap"].as_str().unwrap().contains("unreachable"));
    for name in ["outer", "middle", "inner"] {
        assert_eq!(calls(&p, name), 1, "{name}");
    }
    // Frames closed at the trap: inclusive times nest — exactly in raw times; with the
    // probe overhead subtracted, within the estimate's error (a few ns per frame).
    let raw = s.run(&[
        "run",
        "-q",
        "--keep-overhead",
        "-o",
        "raw.wprof",
        sample("trap.wasm").to_str().unwrap(),
    ]);
    assert_eq!(raw.status.code(), Some(134));
    let raw = s.profile("raw.wprof");
    let incl = |p: &serde_json::Value, n| function(p, n)["inclusive"].as_u64().unwrap();
    assert!(incl(&raw, "outer") >= incl(&raw, "middle"));
    assert!(incl(&raw, "middle") >= incl(&raw, "inner"));
    assert!(incl(&p, "outer") + 100 >= incl(&p, "middle"));
    assert!(incl(&p, "middle") + 100 >= incl(&p, "inner"));
}

#[test]
fn stdin_stdout_stderr_pass_through() {
    let s = Scratch::new();
    let mut child = s
        .wprof(&["run", "-q", sample("echo_stdin.wasm").to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc xyz\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "ABC XYZ\n");
    assert_eq!(stderr(&out), "bytes: 8\n");
}

#[test]
fn args_env_and_return_code() {
    let s = Scratch::new();
    let module = sample("args_env.wasm");
    let out = s.run(&[
        "run",
        "-q",
        "--env",
        "GREETING=hello",
        module.to_str().unwrap(),
        "--",
        "one",
        "two",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let text = stdout(&out);
    assert!(text.contains("argc=3"), "{text}");
    assert!(text.contains("argv[1]=one\nargv[2]=two"), "{text}");
    assert!(text.contains("GREETING=hello"), "{text}");
    assert_eq!(calls(&s.profile("args_env.wprof"), "print_args"), 1);
    // A program's own `--version` and unknown flags after the module are its arguments,
    // with or without `--` (`wprof --version` is wprof's).
    let out = s.run(&["run", "-q", module.to_str().unwrap(), "--version", "-x"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("argv[1]=--version\nargv[2]=-x"), "{text}");
    let out = s.run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("wprof "), "{}", stdout(&out));
}

#[test]
fn dir_grants_files() {
    let s = Scratch::new();
    std::fs::create_dir(s.path("data")).unwrap();
    // A module that opens data/in.txt through the preopen and copies it to stdout.
    let module = s.wat_module(
        "cat.wasm",
        r#"(module
          (import "wasi_snapshot_preview1" "path_open"
            (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (data (i32.const 0) "in.txt")
          (func (export "_start")
            (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 6)
                  (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 16))
              (then unreachable))
            ;; iovec at 32: buffer 100, length 64
            (i32.store (i32.const 32) (i32.const 100))
            (i32.store (i32.const 36) (i32.const 64))
            (drop (call $fd_read (i32.load (i32.const 16)) (i32.const 32) (i32.const 1) (i32.const 40)))
            (i32.store (i32.const 36) (i32.load (i32.const 40)))
            (drop (call $fd_write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 44)))))"#,
    );
    std::fs::write(s.path("data/in.txt"), "from a file\n").unwrap();
    let out = s.run(&["run", "-q", "--dir", "data::/", module.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "from a file\n");
}

#[test]
fn warm_run_instruments_nothing() {
    let s = Scratch::new();
    let m = sample("fib.wasm");
    let cold = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        "-o",
        "cold.wprof",
        m.to_str().unwrap(),
    ]);
    let warm = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        "-o",
        "warm.wprof",
        m.to_str().unwrap(),
    ]);
    assert_eq!(cold.status.code(), Some(0));
    assert_eq!(warm.status.code(), Some(0));
    let cold = s.profile("cold.wprof");
    let warm = s.profile("warm.wprof");
    assert_eq!(cold["instrumentation"]["functions_instrumented"], 4);
    assert_eq!(cold["instrumentation"]["module_from_cache"], false);
    assert_eq!(warm["instrumentation"]["functions_instrumented"], 0);
    assert_eq!(warm["instrumentation"]["functions_from_cache"], 4);
    assert_eq!(warm["instrumentation"]["module_from_cache"], true);
    assert_eq!(calls(&warm, "fib"), 242_785);
}

fn three_function_module(constant: i32) -> String {
    format!(
        r#"(module
          (func $a (result i32) i32.const 1)
          (func $b (result i32) i32.const {constant})
          (func $c (result i32) (i32.add (call $a) (call $b)))
          (func (export "_start") (drop (call $c))))"#
    )
}

#[test]
fn a_one_function_change_instruments_one_function() {
    let s = Scratch::new();
    // The program rebuilt in another directory (a CI job's, say) under its own name.
    for dir in ["v1", "v2"] {
        std::fs::create_dir(s.path(dir)).unwrap();
    }
    let v1 = s.wat_module("v1/app.wasm", &three_function_module(2));
    let v2 = s.wat_module("v2/app.wasm", &three_function_module(3));
    assert_eq!(
        s.run(&["run", "--mode", "sample", "-q", v1.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        s.run(&["run", "--mode", "sample", "-q", v2.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let p = s.profile("app.wprof");
    assert_eq!(p["instrumentation"]["functions_total"], 4);
    assert_eq!(p["instrumentation"]["functions_instrumented"], 1);
    assert_eq!(p["instrumentation"]["functions_from_cache"], 3);
    assert_eq!(p["instrumentation"]["module_from_cache"], false);
    assert_eq!(calls(&p, "b"), 1);
}

#[test]
fn the_original_module_is_only_read() {
    let s = Scratch::new();
    let module = s.path("fib.wasm");
    std::fs::copy(sample("fib.wasm"), &module).unwrap();
    let before = std::fs::read(&module).unwrap();
    let mtime = std::fs::metadata(&module).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(s.run(&["run", "-q", "fib.wasm"]).status.code(), Some(0));
    assert_eq!(std::fs::read(&module).unwrap(), before);
    assert_eq!(
        std::fs::metadata(&module).unwrap().modified().unwrap(),
        mtime
    );
}

/// Entries and hits per kind, from `wprof cache stats --json`.
fn kind_counts(s: &Scratch) -> std::collections::HashMap<String, (u64, u64)> {
    let out = s.run(&["cache", "stats", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kind"].as_str().unwrap().to_string(),
                (k["entries"].as_u64().unwrap(), k["hits"].as_u64().unwrap()),
            )
        })
        .collect()
}

#[test]
fn wprof_off_runs_the_original_and_caches_only_its_compiled_code() {
    for value in ["0", "off", "false"] {
        let s = Scratch::new();
        let run = || {
            s.wprof(&["run", sample("wasi_loop.wasm").to_str().unwrap()])
                .env("WPROF", value)
                .output()
                .unwrap()
        };
        for round in 0..2 {
            let out = run();
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(stdout(&out), "tick\n".repeat(100));
            assert_eq!(stderr(&out), "", "no summary, no warning");
            assert!(
                !s.path("wasi_loop.wprof").exists(),
                "WPROF={value} wrote a profile"
            );
            let counts = kind_counts(&s);
            // The compiled original, and nothing instrumented.
            assert_eq!(counts["artifacts"].0, 1, "{counts:?}");
            assert_eq!(
                counts["artifacts"].1, round,
                "the second run loads it: {counts:?}"
            );
            for kind in ["functions", "manifests", "modules"] {
                assert_eq!(counts[kind].0, 0, "WPROF={value} instrumented: {counts:?}");
            }
        }
    }
    // With --no-cache, nothing is written anywhere.
    let s = Scratch::new();
    let out = s
        .wprof(&[
            "run",
            "--no-cache",
            sample("wasi_loop.wasm").to_str().unwrap(),
        ])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!s.cache_dir().exists(), "--no-cache created the cache");
    let s = Scratch::new();
    let out = s
        .wprof(&["run", sample("exit_code.wasm").to_str().unwrap()])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn output_path_from_flag_and_environment() {
    let s = Scratch::new();
    let m = sample("fib.wasm");
    s.run(&["run", "-q", "-o", "flag.wprof", m.to_str().unwrap()]);
    assert!(s.path("flag.wprof").exists());
    let out = s
        .wprof(&["run", "-q", m.to_str().unwrap()])
        .env("WPROF_OUT", s.path("env.wprof"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(s.path("env.wprof").exists());
    assert!(!s.path("fib.wprof").exists());
}

#[test]
fn a_cache_open_in_another_process_is_shared() {
    let s = Scratch::new();
    let _held = wprof_cache::Cache::open(&s.cache_dir()).unwrap();
    let out = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    assert_eq!(stderr(&out), "", "no lock, no warning");
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
    assert_eq!(
        s.profile("fib.wprof")["instrumentation"]["functions_instrumented"],
        4
    );
}

#[test]
fn an_unusable_cache_directory_is_a_warning() {
    let s = Scratch::new();
    std::fs::write(s.path("not-a-dir"), "x").unwrap();
    let out = s
        .wprof(&["run", sample("fib.wasm").to_str().unwrap(), "-q"])
        .env("WPROF_CACHE_DIR", s.path("not-a-dir"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("warning"));
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
}

#[test]
fn an_unwritable_profile_path_still_runs_the_program() {
    let s = Scratch::new();
    // A missing directory is made; one under a plain file cannot be.
    let out = s.run(&[
        "run",
        "-q",
        "-o",
        "new/dir/x.wprof",
        sample("exit_code.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(s.path("new/dir/x.wprof").is_file(), "{}", stderr(&out));
    std::fs::write(s.path("plain"), "").unwrap();
    let out = s.run(&[
        "run",
        "-q",
        "-o",
        "plain/x.wprof",
        sample("exit_code.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("no profile written"),
        "{}",
        stderr(&out)
    );
}

/// Output and exit code equal to the original run as plain wasmtime (the CLI if installed,
/// and always `WPROF=0`).
#[test]
fn behaves_like_the_original_on_every_sample() {
    let cli = wasmtime_cli();
    let cases: &[(&str, &[&str])] = &[
        ("fib.wasm", &[]),
        ("wasi_loop.wasm", &[]),
        ("exit_code.wasm", &[]),
        ("trap.wasm", &[]),
        ("interp.wasm", &["20000"]),
        ("compress.wasm", &["2"]),
        ("nbody.wasm", &["4000"]),
        ("matrix.wasm", &["120"]),
        ("args_env.wasm", &["x"]),
    ];
    for (name, args) in cases {
        let s = Scratch::new();
        std::fs::copy(sample(name), s.path(name)).unwrap();
        let mut run_args = vec!["run", "-q", name, "--"];
        run_args.extend_from_slice(args);
        let profiled = s.run(&run_args);
        let original = s.wprof(&run_args).env("WPROF", "0").output().unwrap();
        assert_eq!(profiled.status.code(), original.status.code(), "{name}");
        assert_eq!(stdout(&profiled), stdout(&original), "{name}");
        assert!(!stdout(&profiled).is_empty(), "{name}");
        if let Some(cli) = &cli {
            let reference = std::process::Command::new(cli)
                .current_dir(s.dir.path())
                .arg("run")
                .arg(name)
                .args(*args)
                .output()
                .unwrap();
            assert_eq!(
                profiled.status.code(),
                reference.status.code(),
                "{name} vs wasmtime CLI"
            );
            assert_eq!(
                stdout(&profiled),
                stdout(&reference),
                "{name} vs wasmtime CLI"
            );
        }
    }
}

#[test]
fn c_samples_have_their_known_counts() {
    let s = Scratch::new();
    let run = |name: &str, arg: &str| {
        let out = s.run(&[
            "run",
            "--mode",
            "sample",
            "-q",
            sample(name).to_str().unwrap(),
            "--",
            arg,
        ]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        s.profile(&name.replace(".wasm", ".wprof"))
    };
    let p = run("nbody.wasm", "300");
    assert_eq!(calls(&p, "advance"), 300);
    assert_eq!(calls(&p, "kick"), 600);
    assert_eq!(calls(&p, "compute_accelerations"), 301);
    assert_eq!(edge_calls(&p, Some("advance"), "kick"), 600);
    let p = run("compress.wasm", "3");
    assert_eq!(calls(&p, "crc32"), 7);
    assert_eq!(calls(&p, "lz_compress"), 3);
    let p = run("interp.wasm", "5000");
    assert_eq!(calls(&p, "builtin_mix"), 5000);
    assert_eq!(calls(&p, "builtin_print"), 3);
}

#[test]
fn wprof_log_turns_on_wprofs_own_logs() {
    let s = Scratch::new();
    let m = sample("fib.wasm");
    let quiet = s.run(&["run", "-q", m.to_str().unwrap()]);
    assert_eq!(stderr(&quiet), "", "logs are off by default");
    let logged = s
        .wprof(&["run", "-q", m.to_str().unwrap()])
        .env("WPROF_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(logged.status.code(), Some(0));
    assert_eq!(stdout(&logged), "fib(25) = 75025\n");
    let err = stderr(&logged);
    assert!(err.contains("resolved settings"), "{err}");
    assert!(err.contains("DEBUG"), "{err}");
}

#[test]
fn help_documents_the_environment() {
    let s = Scratch::new();
    let top = stdout(&s.run(&["--help"]));
    let run = stdout(&s.run(&["run", "--help"]));
    for var in [
        "WPROF",
        "WPROF_OUT",
        "WPROF_CACHE_DIR",
        "WPROF_MODE",
        "WPROF_LOG",
    ] {
        assert!(top.contains(var), "wprof --help lacks {var}");
    }
    for var in [
        "WPROF_OUT",
        "WPROF_CACHE_DIR",
        "WPROF_MODE",
        "WPROF_CALL_SITES",
        "WPROF_LOG",
    ] {
        assert!(run.contains(var), "wprof run --help lacks {var}");
    }
    // Both list every variable the code reads (one list: wprof::settings::environment), and the
    // modes as `--mode` takes them, with the same default.
    for v in wprof::settings::environment::VARIABLES {
        assert!(top.contains(v.name), "wprof --help lacks {}", v.name);
        assert!(run.contains(v.name), "wprof run --help lacks {}", v.name);
    }
    for help in [&top, &run] {
        assert!(
            help.contains(&format!(
                "WPROF_MODE               sample|time|cost|adaptive|stack: what `wprof run` measures\n{}\
                 (like --mode; default stack)",
                " ".repeat(27)
            )),
            "{help}"
        );
    }
    assert!(run.contains("[default: stack]"), "{run}");
    for flag in [
        "--dir",
        "--env",
        "--output",
        "--mode",
        "--call-sites",
        "--keep-overhead",
        "--no-cache",
        "--quiet",
    ] {
        assert!(run.contains(flag), "wprof run --help lacks {flag}");
    }
}

/// The report of a trap names the original functions and offsets, as `wasmtime run` does.
#[test]
fn trap_backtraces_match_wasmtime() {
    let s = Scratch::new();
    std::fs::copy(sample("deep_trap.wasm"), s.path("deep_trap.wasm")).unwrap();
    let out = s.run(&["run", "-q", "deep_trap.wasm"]);
    assert_eq!(out.status.code(), Some(134));
    let err = stderr(&out);
    // The innermost frame is the original `unreachable` in $down.
    assert!(err.contains("    0:     0x68 - <unknown>!down"), "{err}");
    assert!(
        err.contains("wasm trap: wasm `unreachable` instruction executed"),
        "{err}"
    );
    // Up to the trap line, word for word what the wasmtime CLI prints.
    let until_trap = |text: &str| -> Vec<String> {
        text.lines()
            .take_while(|l| !l.contains("wasm trap:"))
            .filter(|l| !l.starts_with("deep_trap:"))
            .map(str::to_string)
            .collect()
    };
    if let Some(cli) = wasmtime_cli() {
        let reference = std::process::Command::new(cli)
            .current_dir(s.dir.path())
            .args(["run", "deep_trap.wasm"])
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        assert_eq!(until_trap(&err), until_trap(&stderr(&reference)));
    }
}

/// The start function prints, then ends the program before `_start` runs: with
/// `proc_exit(7)`, or (with `trap` in its name) with `unreachable`.
fn ends_in_start(trap: bool) -> String {
    let end = if trap {
        "unreachable"
    } else {
        "(call $proc_exit (i32.const 7))"
    };
    format!(
        r#"(module
          (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
          (import "wasi_snapshot_preview1" "fd_write"
            (func $fd_write (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (data (i32.const 0) "\10\00\00\00\06\00\00\00")
          (data (i32.const 16) "start\n")
          (func $init
            (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
            {end})
          (start $init)
          (func (export "_start") unreachable))"#
    )
}

#[test]
fn a_start_function_that_ends_the_program_ends_it_as_under_wasmtime() {
    let s = Scratch::new();
    for (name, trap, code) in [("exits.wasm", false, 7), ("traps.wasm", true, 134)] {
        let m = s.wat_module(name, &ends_in_start(trap));
        let plain = s
            .wprof(&["run", "-q", m.to_str().unwrap()])
            .env("WPROF", "0")
            .output()
            .unwrap();
        assert_eq!(plain.status.code(), Some(code), "{}", stderr(&plain));
        for mode in ["time", "cost", "sample"] {
            let out = s.run(&["run", "-q", "--mode", mode, m.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(code), "{mode}: {}", stderr(&out));
            assert_eq!(stdout(&out), "start\n");
            if trap {
                assert!(stderr(&out).contains("unreachable"), "{}", stderr(&out));
            }
        }
        if let Some(cli) = wasmtime_cli() {
            let reference = std::process::Command::new(cli)
                .args(["run", m.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(reference.status.code(), Some(code));
        }
    }
}

#[test]
fn run_help_lists_every_variable_of_the_readme() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    // The rows of the user guide's table of environment variables (docs/configuration.md):
    // "| `WPROF_...` | ... |".
    let variables: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `WPROF"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    assert!(variables.len() >= 8, "{variables:?}");
    let s = Scratch::new();
    let help = stdout(&s.run(&["run", "--help"]));
    for v in variables {
        let name = format!("WPROF{v}");
        assert!(
            help.contains(&name),
            "`wprof run --help` does not mention {name}"
        );
    }
}

/// A panic inside the agent while it instruments a function (forced by the test hook) is
/// caught: one warning naming the function, the program runs unprofiled with its own output
/// and exit code, and the cache stays whole for the next run.
#[test]
fn a_panic_in_the_agent_is_one_warning_and_an_unprofiled_run() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let out = s
        .wprof(&["run", "--mode", "sample", "-q", fib.to_str().unwrap()])
        .env("WPROF_TEST_PANIC_IN", "fib")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("wprof: warning: cannot instrument")
            && err.contains("the agent failed on function fib: test panic in fib")
            && err.contains("running it without profiling"),
        "{err}"
    );
    assert!(!s.path("fib.wprof").exists());
    let verify = s.run(&["cache", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", stdout(&verify));
    let out = s.run(&["run", "--mode", "sample", "-q", fib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
}

/// A module of 400 functions, each called once by `_start`: instrumented on several
/// threads.
fn many_functions() -> String {
    let mut wat = String::from("(module\n");
    for i in 0..400 {
        wat.push_str(&format!(
            "  (func $f{i} (result i32) (i32.add (i32.const {i}) (i32.const 1)))\n"
        ));
    }
    wat.push_str("  (func (export \"_start\")\n");
    for i in 0..400 {
        wat.push_str(&format!("    (drop (call $f{i}))\n"));
    }
    wat.push_str("  ))\n");
    wat
}

/// Functions are instrumented on every core: each one exactly once, in its place, and a
/// panic on any thread is the same one warning and an unprofiled run.
#[test]
fn many_functions_are_instrumented_in_parallel_and_a_panic_in_any_is_caught() {
    let s = Scratch::new();
    let module = s.wat_module("many.wasm", &many_functions());
    let out = s
        .wprof(&["run", "--mode", "sample", "-q"])
        .arg(&module)
        .env("WPROF_TEST_PANIC_IN", "f251")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the agent failed on function f251: test panic in f251"),
        "{err}"
    );
    for mode in ["sample", "time", "cost"] {
        let profile = format!("{mode}.wprof");
        let out = s
            .wprof(&["run", "--mode", mode, "-o", &profile])
            .arg(&module)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let p = s.profile(&profile);
        for i in [0, 1, 199, 250, 251, 399] {
            assert_eq!(calls(&p, &format!("f{i}")), 1, "{mode}: f{i}");
        }
        assert_eq!(p["instrumentation"]["functions_total"], 401);
    }
}

#[test]
fn a_stderr_whose_reader_has_gone_keeps_the_programs_exit_code() {
    // wprof's summary goes to a pipe nobody reads any more: it is lost, the program's exit
    // code is not (a panic would exit 101).
    let s = Scratch::new();
    for (module, code) in [("exit_code.wasm", 3), ("trap.wasm", 134)] {
        let mut child = s
            .wprof(&["run", "-o", "p.wprof"])
            .arg(sample(module))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        assert_eq!(child.wait().unwrap().code(), Some(code), "{module}");
    }
}

/// `-o /dev/null` and other files that are not regular files (here a FIFO, so that the test
/// never risks the machine's /dev/null): written as they are, never replaced by a regular
/// file (a temporary file renamed over `/dev/null` used to do that when run as root).
#[test]
fn a_profile_or_trace_to_a_pipe_is_written_into_it_not_over_it() {
    use std::os::unix::fs::FileTypeExt;
    let s = Scratch::new();
    for (what, args) in [
        ("profile", &["-o", "fifo"][..]),
        (
            "trace",
            &["-o", "p.wprof", "--trace", "--trace-out", "fifo"][..],
        ),
    ] {
        let fifo = s.path("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|st| st.success()) {
            eprintln!("skipped: mkfifo failed");
            return;
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        let fib = sample("fib.wasm");
        let out = s.run(&[&["run"], args, &[fib.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("warning"),
            "{what}: {}",
            stderr(&out)
        );
        // Checked first: a pipe replaced leaves its reader waiting for ever.
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "{what}: the pipe was replaced: {kind:?}");
        let bytes = reader.join().unwrap();
        assert!(!bytes.is_empty(), "{what}: nothing came through the pipe");
        std::fs::remove_file(&fifo).unwrap();
    }
}
