//! Stack mode (`--mode stack`): the module runs with an entry counter per function and no
//! other probe, and its call stacks are sampled through the frame pointers. What must hold:
//! the program's output, exit code and trap are its own (the trap's offsets the
//! original's); every sample's stack reaches the program's entry (the walk crosses every
//! wasm frame); a callee shared by two callers is split by where its time was spent; time
//! in the host goes to the import called; each function's and each edge's calls are sample
//! mode's exact ones (see `edge_calls.rs`); and what needs probes is refused in one line.

use serde_json::Value;

use crate::edge_calls::edge_calls;
use crate::support::*;

pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Runs `module` in stack mode, sampling every 100 µs; the output and the profile.
pub(crate) fn stack_run(
    s: &Scratch,
    module: &str,
    out_name: &str,
) -> (std::process::Output, Value) {
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "stack",
        "--sample-period-us",
        "100",
        "-o",
        out_name,
        sample(module).to_str().unwrap(),
    ]);
    let profile = s.profile(out_name);
    (out, profile)
}

/// The promises of every profile, and stack mode's own: each function's and each edge's
/// calls counted (a function or an edge that was sampled was called).
pub(crate) fn consistent(p: &Value) {
    assert_eq!(p["mode"], "stack");
    assert_eq!(p["sampling"]["stacks"]["function_calls"], true);
    assert_eq!(p["sampling"]["stacks"]["edge_calls"], true);
    let total = u(&p["total"]);
    let functions = p["functions"].as_array().unwrap();
    assert_eq!(self_sum(p), total);
    for f in functions {
        assert!(u(&f["self"]) <= u(&f["inclusive"]), "{f}");
        assert!(u(&f["self"]) == 0 || u(&f["calls"]) > 0, "{f}");
    }
    for e in p["edges"].as_array().unwrap() {
        assert!(u(&e["inclusive"]) == 0 || u(&e["calls"]) > 0, "{e}");
    }
    let contexts = p["contexts"].as_array().unwrap();
    let context_self: u64 = contexts.iter().map(|c| u(&c["self"])).sum();
    assert_eq!(context_self, total);
}

#[test]
fn every_stack_reaches_the_entry_and_a_shared_callee_is_split_by_its_callers() {
    // gprof_trap: `$d` does 3x the work under `$b` that it does under `$c` (samples/README.md);
    // a profiler that splits a callee by its calls says 1:1.
    let s = Scratch::new();
    let (out, p) = stack_run(&s, "gprof_trap.wasm", "g.wprof");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("gprof_trap: checksum=80008ea8"));
    consistent(&p);
    let total = u(&p["total"]);
    assert!(total > 0);
    // Every sample's stack was walked down to `_start`: a walk that stopped early would
    // make its innermost frames roots of their own.
    assert_eq!(u(&function(&p, "_start")["inclusive"]), total);
    let roots: Vec<&Value> = p["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["parent"].is_null())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    let b_d = edge_inclusive(&p, "b", "d") as f64;
    let c_d = edge_inclusive(&p, "c", "d") as f64;
    assert!(c_d > 0.0, "d under c was never sampled");
    let ratio = b_d / c_d;
    assert!((2.0..4.5).contains(&ratio), "d under b / under c: {ratio}");
}

#[test]
fn time_in_the_host_goes_to_the_import_called() {
    // host_io sleeps 50 ms in `poll_oneoff`, reached through libc's `nanosleep`.
    let s = Scratch::new();
    let (out, p) = stack_run(&s, "host_io.wasm", "h.wprof");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    consistent(&p);
    let poll = function(&p, "wasi_snapshot_preview1::poll_oneoff");
    assert_eq!(poll["kind"], "import");
    assert!(
        u(&poll["self"]) * 2 > u(&p["total"]),
        "the sleep is most of the run: {poll} of {}",
        p["total"]
    );
    assert!(
        edge_inclusive(
            &p,
            "__wasi_poll_oneoff",
            "wasi_snapshot_preview1::poll_oneoff"
        ) > 0
    );
}

#[test]
fn the_moments_after_a_long_system_call_get_their_time() {
    // after_syscalls: each round writes 2 MiB to a file, then runs the same short work in
    // `after_write` and, after twenty times as much other work, in `far_from_it`. A tick
    // that came due during the write is taken as the write returns; were the next one drawn
    // from there, `after_write` would get 0.36-0.50 of `far_from_it`'s time (before the
    // ticks kept a schedule of their own). perf says 1.02.
    let s = Scratch::new();
    std::fs::create_dir(s.path("files")).unwrap();
    let out = s.run(&[
        "run",
        "-q",
        "-o",
        "a.wprof",
        "--dir",
        "files::/files",
        sample("after_syscalls.wasm").to_str().unwrap(),
        "/files",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("wrote 1500 blocks"),
        "{}",
        stdout(&out)
    );
    let p = s.profile("a.wprof");
    consistent(&p);
    let after = u(&function(&p, "after_write")["self"]) as f64;
    let far = u(&function(&p, "far_from_it")["self"]) as f64;
    let ratio = after / far;
    assert!(
        (0.7..1.43).contains(&ratio),
        "after_write {after} ns, far_from_it {far} ns: {ratio:.2}"
    );
}

/// A function of eight `i64` parameters, called in a loop: with the two context pointers,
/// four of its arguments go on the stack, which its `ret 0x20` pops.
const MANY_ARGUMENTS: &str = r#"(module
  (func $many (param i64 i64 i64 i64 i64 i64 i64 i64) (result i64)
    (i64.add (i64.add (local.get 0) (local.get 7)) (local.get 3)))
  (func $caller (param $n i32) (result i64)
    (local $sum i64)
    (loop $again
      (local.set $sum (call $many (local.get $sum) (i64.const 1) (i64.const 2) (i64.const 3)
        (i64.const 4) (i64.const 5) (i64.const 6) (i64.const 7)))
      (br_if $again (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (local.get $sum))
  (func (export "_start") (drop (call $caller (i32.const 40000000)))))"#;

/// Runs [`MANY_ARGUMENTS`] in the default mode with `flags`, sampling every 100 µs: the
/// output and the profile, which keeps every promise.
fn many_arguments_run(s: &Scratch, flags: &[&str]) -> (std::process::Output, Value) {
    let m = s.wat_module("many.wasm", MANY_ARGUMENTS);
    let mut args = vec!["run", "--sample-period-us", "100", "-o", "m.wprof"];
    args.extend(flags);
    args.push(m.to_str().unwrap());
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("m.wprof");
    consistent(&p);
    (out, p)
}

#[test]
fn a_tick_at_a_return_that_pops_arguments_keeps_the_caller() {
    // A tick at `$many`'s last instruction finds the frame pointer already its caller's;
    // were that `ret 0x20` not known for a return, the walk would skip `$caller` and hand
    // `_start` an edge to `$many` it never called.
    let s = Scratch::new();
    let (_, p) = many_arguments_run(&s, &["-q"]);
    assert_eq!(
        edge_calls(&p)[&("caller".to_string(), "many".to_string())],
        40_000_000
    );
    let many = function(&p, "many");
    assert!(u(&many["self"]) > 0, "{many}");
    assert_eq!(edge_inclusive(&p, "caller", "many"), u(&many["inclusive"]));
}

#[test]
fn the_counters_own_time_is_left_out_and_said() {
    // `$many`'s entry counter and `$caller`'s counter of its call are a large part of the
    // loop: ticks there are wprof's time, not the program's.
    let s = Scratch::new();
    let (out, p) = many_arguments_run(&s, &[]);
    assert!(
        stderr(&out).contains("in the call counters' own instructions left out"),
        "{}",
        stderr(&out)
    );
    let left_out = u(&p["sampling"]["stacks"]["counters_ns"]);
    assert!(
        left_out > 0 && left_out < u(&p["total"]),
        "{}",
        p["sampling"]
    );
    let report = stdout(&s.run(&["report", "m.wprof"]));
    assert!(
        report.contains("in the call counters' own instructions left out"),
        "{report}"
    );
}

#[test]
fn the_programs_exit_code_and_trap_are_its_own() {
    let s = Scratch::new();
    let (out, p) = stack_run(&s, "exit_code.wasm", "e.wprof");
    assert_eq!(out.status.code(), Some(3));
    assert!(stdout(&out).contains("exiting with code 3"));
    assert_eq!(u(&p["exit_code"]), 3);

    // Fifty frames deep when it traps: the backtrace is the one the original gives, though
    // the counters moved the code.
    let (out, p) = stack_run(&s, "deep_trap.wasm", "t.wprof");
    assert_eq!(out.status.code(), Some(134));
    assert!(stderr(&out).contains("unreachable"), "{}", stderr(&out));
    assert_eq!(p["outcome"], "trap");
    consistent(&p);
    let off = s
        .wprof(&["run", sample("deep_trap.wasm").to_str().unwrap()])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(off.status.code(), Some(134));
    assert_eq!(stderr(&out), stderr(&off));
    assert!(stderr(&off).contains("0x"), "{}", stderr(&off));
}

#[test]
fn what_needs_probes_is_refused_in_one_line() {
    let s = Scratch::new();
    let module = sample("ratio.wasm");
    let module = module.to_str().unwrap();
    let needing_probes = [
        &["--coverage"][..],
        &["--live"],
        &["--allocs"],
        &["--call-sites"],
        &["--only", "spin"],
    ];
    for extra in needing_probes {
        let mut args = vec!["run", "--mode", "stack"];
        args.extend_from_slice(extra);
        args.push(module);
        let out = s.run(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("stack mode"), "{err}");
    }
    // Stack mode is only the default: without a mode, they bring sample mode, quietly.
    for extra in needing_probes {
        let mut args = vec!["run", "-q", "-o", "p.wprof"];
        args.extend_from_slice(extra);
        args.push(module);
        let out = s.run(&args);
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{extra:?}");
        assert_eq!(s.profile("p.wprof")["mode"], "sample", "{extra:?}");
    }
    let out = s.run(&["run", "--mode", "stack", "--trace", module]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn instrument_compiles_the_counted_module_for_the_first_run() {
    let s = Scratch::new();
    let module = sample("ratio.wasm");
    let module = module.to_str().unwrap();
    let out = s.run(&["instrument", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("stack mode"), "{}", stdout(&out));
    let out = s.run(&["run", "-q", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("ratio.wprof");
    assert_eq!(p["mode"], "stack");
    assert_eq!(p["instrumentation"]["compiled_from_cache"], true);
    assert!(p["instrumentation"]["functions_total"].as_u64().unwrap() > 0);
    // A module that is not one is refused, as in the other modes.
    std::fs::write(s.path("bad.wasm"), b"not wasm").unwrap();
    let out = s.run(&["instrument", "bad.wasm"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
fn wprof_mode_and_the_configuration_file_choose_stack_mode() {
    let s = Scratch::new();
    let module = sample("ratio.wasm");
    let out = s
        .wprof(&["run", "-q", "-o", "v.wprof", module.to_str().unwrap()])
        .env("WPROF_MODE", "stack")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.profile("v.wprof")["mode"], "stack");

    let config = s.path("wprof.toml");
    std::fs::write(&config, "mode = \"stack\"\n").unwrap();
    let out = s
        .wprof(&["run", "-q", "-o", "f.wprof", module.to_str().unwrap()])
        .env("WPROF_CONFIG", &config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.profile("f.wprof")["mode"], "stack");
}

#[test]
fn a_component_in_stack_mode_is_profiled_in_sample_mode_with_a_warning() {
    let s = Scratch::new();
    let out = s.run(&[
        "run",
        "--mode",
        "stack",
        "-o",
        "c.wprof",
        sample("component.wasm").to_str().unwrap(),
        "--",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("profiled in sample mode"),
        "{}",
        stderr(&out)
    );
    assert_eq!(s.profile("c.wprof")["mode"], "sample");
}

#[test]
fn a_run_of_few_samples_says_its_times_are_rough() {
    let s = Scratch::new();
    // fib(25) runs a few milliseconds: a few dozen samples at most.
    let out = s.run(&[
        "run",
        "-o",
        "fib.wprof",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stderr(&out);
    let note = said
        .lines()
        .find(|l| l.starts_with("wprof: note: only about"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        note.contains("samples fell in the program")
            && note.contains("the calls exact")
            && note.contains("`--mode time`"),
        "{note}"
    );
    let report = stdout(&s.run(&["report", "fib.wprof"]));
    assert!(report.contains("\nnote: only about"), "{report}");
    // About 0.1 s of work: hundreds of samples, no note.
    let out = s.run(&[
        "run",
        "-o",
        "ratio.wprof",
        sample("ratio.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("only about"), "{}", stderr(&out));
    assert!(!stdout(&s.run(&["report", "ratio.wprof"])).contains("only about"));
}
