//! Modules that are no WASI command, run as `wasmtime run` runs them: a reactor (it exports
//! `_initialize` and no `_start`) or a library, called at the export `--invoke` names, its
//! results printed; imports from a host of its own linked to traps with
//! `--unknown-imports-trap`. In every mode, and with profiling off.

use crate::support::{calls, stderr, stdout, wasmtime_cli, Scratch};

/// A reactor: `_initialize` prints `init`, `run` prints `run` through a function of its
/// own and returns 7; `uses_host` calls its host's `host::call`.
const REACTOR: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "host" "call" (func $host (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "init\n")
  (data (i32.const 32) "run\n")
  (func $say (param $at i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_initialize") (call $say (i32.const 16) (i32.const 5)))
  (func $work (result i32) (call $say (i32.const 32) (i32.const 4)) (i32.const 7))
  (func (export "run") (result i32) (call $work))
  (func (export "uses_host") (result i32) (call $host (i32.const 1))))"#;

const FLAGS: [&str; 4] = ["--invoke", "run", "--unknown-imports-trap", "-o"];

#[test]
fn a_reactor_runs_at_the_export_invoked_in_every_mode_and_unprofiled() {
    let s = Scratch::new();
    let module = s.wat_module("reactor.wasm", REACTOR);
    let module = module.to_str().unwrap();
    for mode in ["stack", "sample", "time", "cost", "adaptive"] {
        let profile = format!("{mode}.wprof");
        let mut args = vec!["run", "-q", "--mode", mode];
        args.extend(FLAGS);
        args.extend([profile.as_str(), module]);
        let out = s.run(&args);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "init\nrun\n7\n", "{mode}");
        let p = s.profile(&profile);
        assert_eq!(calls(&p, "work"), 1, "{mode}");
        assert_eq!(calls(&p, "wasi_snapshot_preview1::fd_write"), 2, "{mode}");
    }
    let out = s
        .wprof(&["run", "--invoke", "run", "--unknown-imports-trap", module])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "init\nrun\n7\n");
    // The same output as the wasmtime CLI's.
    if let Some(cli) = wasmtime_cli() {
        let out = std::process::Command::new(cli)
            .args([
                "run",
                "-W",
                "unknown-imports-trap=y",
                "--invoke",
                "run",
                module,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), "init\nrun\n7\n");
    }
}

#[test]
fn without_the_flags_a_reactor_is_one_line_that_says_which() {
    let s = Scratch::new();
    let module = s.wat_module("reactor.wasm", REACTOR);
    let module = module.to_str().unwrap();
    let out = s.run(&["run", module]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("imports `host::call`") && err.contains("--unknown-imports-trap"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = s.run(&["run", "--unknown-imports-trap", module]);
    assert!(stderr(&out).contains("no `_start`") && stderr(&out).contains("--invoke"));
    let out = s.run(&[
        "run",
        "--unknown-imports-trap",
        "--invoke",
        "absent",
        module,
    ]);
    assert!(
        stderr(&out).contains("no function `absent`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_import_linked_to_a_trap_ends_the_program_when_called() {
    let s = Scratch::new();
    let module = s.wat_module("reactor.wasm", REACTOR);
    let out = s.run(&[
        "run",
        "-q",
        "--invoke",
        "uses_host",
        "--unknown-imports-trap",
        module.to_str().unwrap(),
    ]);
    // `_initialize` ran; the call into the trap failed the program, not wprof.
    assert_eq!(stdout(&out), "init\n");
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("host::call"), "{}", stderr(&out));
}
