//! `wprof run --inject`: imported functions fail as asked, in every mode and with
//! `WPROF=0`; the module's own functions in every mode; and the profile and summary say
//! so.

use crate::support::*;

/// Writes `a`, `b` and `c` (one `fd_write` each), then exits with the errno of the first
/// write that failed (0 if none did).
const WRITER: &str = r#"
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "a\nb\nc\n")
  (func $write (param $at i32) (result i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (i32.const 2))
    (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
  (func (export "_start")
    (local $failed i32) (local $e i32) (local $i i32)
    (loop $l
      (local.set $e (call $write (i32.add (i32.const 100) (i32.mul (local.get $i) (i32.const 2)))))
      (if (i32.and (i32.ne (local.get $e) (i32.const 0)) (i32.eqz (local.get $failed)))
        (then (local.set $failed (local.get $e))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 3))))
    (call $proc_exit (local.get $failed)))
)"#;

#[test]
fn an_errno_on_the_nth_call_reaches_the_program_in_every_mode_and_unprofiled() {
    let s = Scratch::new();
    let module = s.wat_module("writer.wasm", WRITER);
    for mode in ["sample", "time", "cost", "adaptive", "off"] {
        let profile = format!("{mode}.wprof");
        let mut cmd = s.wprof(&[
            "run",
            "-o",
            &profile,
            "--inject",
            "wasi:fd_write=errno:EIO@2",
        ]);
        cmd.arg(&module);
        if mode == "off" {
            cmd.env("WPROF", "0");
        } else {
            cmd.env("WPROF_MODE", mode);
        }
        let out = cmd.output().unwrap();
        // The second write failed with EIO (29), and only it.
        assert_eq!(out.status.code(), Some(29), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "a\nc\n", "{mode}");
        assert!(
            stderr(&out).contains(
                "wprof: injected errno:EIO into wasi_snapshot_preview1::fd_write (call 2 only): \
                 1 of 3 calls"
            ),
            "{mode}: {}",
            stderr(&out)
        );
        if mode == "off" {
            assert!(!s.path(&profile).exists(), "WPROF=0 writes no profile");
            continue;
        }
        let p = s.profile(&profile);
        let injections = p["injections"].as_array().expect("the profile lists them");
        assert_eq!(injections.len(), 1);
        let i = &injections[0];
        assert_eq!(i["target"], "wasi_snapshot_preview1::fd_write");
        assert_eq!(i["action"], "errno:EIO");
        assert_eq!(i["call"], 2);
        assert_eq!(
            (i["calls"].as_u64(), i["injected"].as_u64()),
            (Some(3), Some(1))
        );
        // The import is still counted as the program called it.
        assert_eq!(calls(&p, "wasi_snapshot_preview1::fd_write"), 3, "{mode}");
    }
}

#[test]
fn a_returned_value_replaces_the_call_and_a_trap_ends_the_program_as_a_trap() {
    let s = Scratch::new();
    let module = s.wat_module("writer.wasm", WRITER);
    // `return:0` on every call: the program sees success, nothing is written.
    let out = s
        .wprof(&[
            "run",
            "--mode",
            "sample",
            "-q",
            "-o",
            "ret.wprof",
            "--inject",
            "wasi:fd_write=return:0",
        ])
        .arg(&module)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(s.profile("ret.wprof")["injections"][0]["injected"], 3);
    // From the environment, as a comma list: a trap on the first write.
    let out = s
        .wprof(&["run", "--mode", "sample", "-o", "trap.wprof"])
        .arg(&module)
        .env("WPROF_INJECT", "wasi:fd_write=trap@1,wasi:proc_exit=trap")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(134), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("wprof injected a trap into wasi_snapshot_preview1::fd_write (call 1)"),
        "{}",
        stderr(&out)
    );
    let p = s.profile("trap.wprof");
    assert_eq!(p["outcome"], "trap");
    assert_eq!(p["injections"].as_array().unwrap().len(), 2);
    assert_eq!(p["injections"][1]["calls"], 0);
}

#[test]
fn a_bad_injection_is_one_line_and_exit_2_before_anything_runs() {
    let s = Scratch::new();
    let module = s.wat_module("writer.wasm", WRITER);
    for (spec, says) in [
        (
            "main=trap",
            "the module has no function main (neither an import nor its own)",
        ),
        ("env::main=trap", "the module has no function env::main"),
        (
            "write=return:1.5",
            "`1.5` is not a value of write's result type",
        ),
        ("wasi:fd_write=errno:EWHAT", "not a WASI errno"),
        (
            "wasi:fd_read=trap",
            "imports no function wasi_snapshot_preview1::fd_read",
        ),
        (
            "wasi:fd_write=return:x",
            "not a value of fd_write's result type",
        ),
        ("wasi:proc_exit=errno:EIO", "does not return an errno"),
    ] {
        let out = s
            .wprof(&["run", "-o", "bad.wprof", "--inject", spec])
            .arg(&module)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{spec}: {err}");
        assert!(err.contains(says), "{spec}: {err}");
        assert_eq!(stdout(&out), "", "{spec}: the program did not run");
        assert!(!s.path("bad.wprof").exists(), "{spec}");
    }
}

#[test]
fn injections_come_from_flags_the_variable_or_the_configuration_file() {
    let s = Scratch::new();
    let module = s.wat_module("writer.wasm", WRITER);
    let m = module.to_str().unwrap();
    std::fs::write(
        s.path("wprof.toml"),
        "mode = \"cost\"\n\n[[module]]\nname = \"writer.wasm\"\ninject = [\"wasi:fd_write=errno:ENOSPC@3\"]\n",
    )
    .unwrap();
    let shown = |args: &[&str], envs: &[(&str, &str)]| {
        let mut cmd = s.wprof(&[&["config", "--json"], args, &[m]].concat());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        (
            v["inject"]["value"].as_str().unwrap().to_owned(),
            v["inject"]["source"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(
        shown(&[], &[]),
        (
            "wasi:fd_write=errno:ENOSPC@3".into(),
            "wprof.toml:5 ([[module]] of line 3)".into()
        )
    );
    assert_eq!(
        shown(&[], &[("WPROF_INJECT", "wasi:fd_write=trap")]),
        ("wasi:fd_write=trap".into(), "WPROF_INJECT".into())
    );
    assert_eq!(
        shown(
            &["--inject", "wasi:fd_write=errno:EIO"],
            &[("WPROF_INJECT", "wasi:fd_write=trap")]
        ),
        ("wasi:fd_write=errno:EIO".into(), "flag".into())
    );
    // The file's injection applies to a run: the third write fails with ENOSPC (51).
    let out = s.run(&["run", "-q", "-o", "file.wprof", m]);
    assert_eq!(out.status.code(), Some(51), "{}", stderr(&out));
    assert_eq!(stdout(&out), "a\nb\n");
    assert_eq!(s.profile("file.wprof")["injections"][0]["call"], 3);
}

#[test]
fn the_modules_own_functions_return_what_is_injected_or_trap_in_every_mode() {
    let s = Scratch::new();
    let module = s.wat_module("writer.wasm", WRITER);
    for mode in ["time", "sample", "cost", "adaptive"] {
        // `$write` returns 28 (EINVAL) on its second call without writing: the program
        // writes `a` and `c` and exits with the errno it saw.
        let file = format!("{mode}.wprof");
        let out = s
            .wprof(&[
                "run",
                "--mode",
                mode,
                "-o",
                &file,
                "--inject",
                "write=errno:EINVAL@2",
            ])
            .arg(&module)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(28), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "a\nc\n", "{mode}");
        assert!(
            stderr(&out)
                .contains("wprof: injected errno:EINVAL into write (call 2 only): 1 of 3 calls"),
            "{mode}: {}",
            stderr(&out)
        );
        let p = s.profile(&file);
        let record = &p["injections"][0];
        assert_eq!(record["target"], "write", "{mode}");
        assert_eq!(
            (record["calls"].as_u64(), record["injected"].as_u64()),
            (Some(3), Some(1))
        );
        // Every call is counted; the injected one never reached fd_write.
        assert_eq!(calls(&p, "write"), 3, "{mode}");
        assert_eq!(calls(&p, "wasi_snapshot_preview1::fd_write"), 2, "{mode}");
    }
    // A trap on the first call, with an import's injection beside it, in the order given.
    let out = s
        .wprof(&[
            "run",
            "-o",
            "trap.wprof",
            "--inject",
            "wasi:proc_exit=trap",
            "--inject",
            "write=trap",
        ])
        .arg(&module)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(134), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("wprof injected a trap into write (call 1)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
    let p = s.profile("trap.wprof");
    let targets: Vec<&str> = p["injections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["wasi_snapshot_preview1::proc_exit", "write"]);
    // Unprofiled, the original runs as it is: no function of its own can be injected into.
    let out = s
        .wprof(&["run", "--inject", "write=trap"])
        .arg(&module)
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("only a profiled run can inject into"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
}
