//! The inline modes (sample and cost) against time mode: the module's own counting must
//! find exactly the calls, edges and contexts that time mode's host probes see, on real
//! programs and on the constructs that stress the context tree (a start function, indirect
//! calls reaching several callees from one site, tail calls through a table).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::*;

/// Start function, one `call_indirect` site reaching three functions, a
/// `return_call_indirect`, recursion through two direct sites, an import.
const TANGLE: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (type $unary (func (param i32) (result i32)))
  (table 3 funcref)
  (elem (i32.const 0) $inc $dbl $sq)
  (global $g (mut i32) (i32.const 0))
  (func $init (global.set $g (call $inc (i32.const 1))))
  (start $init)
  (func $inc (type $unary) (i32.add (local.get 0) (i32.const 1)))
  (func $dbl (type $unary) (i32.mul (local.get 0) (i32.const 2)))
  (func $sq (type $unary) (i32.mul (local.get 0) (local.get 0)))
  (func $apply (param $f i32) (param $x i32) (result i32)
    (call_indirect (type $unary) (local.get $x) (local.get $f)))
  (func $tail (param $f i32) (param $x i32) (result i32)
    (return_call_indirect (type $unary) (local.get $x) (local.get $f)))
  (func $walk (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (call $apply (i32.rem_u (local.get $n) (i32.const 3)) (local.get $n)))
      (else
        (i32.add
          (call $walk (i32.sub (local.get $n) (i32.const 1)))
          (call $walk (i32.sub (local.get $n) (i32.const 2)))))))
  (func (export "_start")
    (local $i i32)
    (loop $l
      (global.set $g (i32.add (global.get $g)
        (call $apply (i32.rem_u (local.get $i) (i32.const 3)) (local.get $i))))
      (global.set $g (i32.add (global.get $g)
        (call $tail (i32.rem_u (local.get $i) (i32.const 2)) (local.get $i))))
      (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 30))))
    (global.set $g (i32.add (global.get $g) (call $walk (i32.const 12))))
    (call $exit (i32.and (global.get $g) (i32.const 0x7f)))))
"#;

/// What must be the same in every mode: calls per function, calls per edge (by name),
/// and the calling contexts as paths of names with their calls.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    functions: BTreeMap<String, u64>,
    edges: BTreeMap<(String, String), u64>,
    contexts: BTreeMap<Vec<String>, u64>,
}

fn counts(p: &Value) -> Counts {
    let name_of = |id: &Value| -> String {
        p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == *id)
            .map(|f| f["name"].as_str().unwrap().to_string())
            .unwrap_or_else(|| "<root>".to_string())
    };
    let functions = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut edges = BTreeMap::new();
    for e in p["edges"].as_array().unwrap() {
        *edges
            .entry((name_of(&e["caller"]), name_of(&e["callee"])))
            .or_default() += e["calls"].as_u64().unwrap();
    }
    let nodes = p["contexts"].as_array().unwrap();
    let path = |node: &Value| -> Vec<String> {
        let mut names = vec![name_of(&node["function"])];
        let mut parent = node["parent"].as_u64();
        while let Some(id) = parent {
            let up = nodes.iter().find(|n| n["id"] == id).unwrap();
            names.push(name_of(&up["function"]));
            parent = up["parent"].as_u64();
        }
        names.reverse();
        names
    };
    let contexts = nodes
        .iter()
        .map(|n| (path(n), n["calls"].as_u64().unwrap()))
        .collect();
    Counts {
        functions,
        edges,
        contexts,
    }
}

fn run_in(s: &Scratch, module: &std::path::Path, mode: &str) -> (Value, std::process::Output) {
    let name = format!(
        "{}.{mode}.wprof",
        module.file_stem().unwrap().to_str().unwrap()
    );
    let out = s
        .wprof(&["run", "-q", "-o", &name, module.to_str().unwrap()])
        .env("WPROF_MODE", mode)
        .output()
        .unwrap();
    (s.profile(&name), out)
}

fn same_counts_in_every_mode(s: &Scratch, module: &std::path::Path) {
    let (time, time_out) = run_in(s, module, "time");
    let expected = counts(&time);
    assert!(expected.functions.len() > 1, "{time}");
    for mode in ["sample", "cost"] {
        let (p, out) = run_in(s, module, mode);
        assert_eq!(p["mode"], mode);
        assert_eq!(out.status.code(), time_out.status.code(), "{mode}");
        assert_eq!(out.stdout, time_out.stdout, "{mode}");
        let got = counts(&p);
        assert_eq!(got.functions, expected.functions, "{mode}: {module:?}");
        assert_eq!(got.edges, expected.edges, "{mode}: {module:?}");
        assert_eq!(got.contexts, expected.contexts, "{mode}: {module:?}");
    }
}

#[test]
fn inline_counts_equal_time_mode_on_a_tangle_of_calls() {
    let s = Scratch::new();
    let m = s.wat_module("tangle.wasm", TANGLE);
    same_counts_in_every_mode(&s, &m);
    let (p, out) = run_in(&s, &m, "sample");
    assert!(out.status.code().is_some());
    // The start function ran at instantiation, yet `_start` is an outermost call.
    assert_eq!(edge_calls(&p, None, "_start"), 1);
    assert_eq!(edge_calls(&p, None, "init"), 1);
    assert_eq!(edge_calls(&p, Some("apply"), "sq"), 10);
    assert_eq!(edge_calls(&p, Some("init"), "inc"), 1);
    // The tail call keeps `tail` open: its callees are its children.
    assert_eq!(edge_calls(&p, Some("tail"), "inc"), 15);
}

#[test]
fn inline_counts_equal_time_mode_on_the_c_samples() {
    let s = Scratch::new();
    for name in ["fib", "wasi_loop", "interp", "compress", "matrix", "nbody"] {
        same_counts_in_every_mode(&s, &sample(&format!("{name}.wasm")));
    }
}

#[test]
fn sample_mode_reports_time_and_wall_time() {
    let s = Scratch::new();
    let (p, out) = run_in(&s, &sample("fib.wasm"), "sample");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    assert_eq!(p["unit"], "ns");
    assert!(p["wall_time"].as_u64().unwrap() > 0);
    assert!(p["total"].as_u64().unwrap() > 0);
    assert_eq!(calls(&p, "fib"), 242_785);
    // Per-activation extremes need every activation timed: time mode only.
    assert!(function(&p, "fib").get("min_self").is_none());
    let help = stdout(&s.run(&["run", "--help"]));
    assert!(help.contains("sample|time|cost"), "{help}");
}

/// `r` recurses through two call sites 23 deep: with call sites, every one of its 2^24 - 1
/// calls has a path of its own, about 640 MiB of nodes, past the tree's 256 MiB limit.
const CONTEXT_STORM: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (global $leaves (mut i32) (i32.const 0))
  (func $r (param $n i32)
    (if (local.get $n)
      (then
        (call $r (i32.sub (local.get $n) (i32.const 1)))
        (call $r (i32.sub (local.get $n) (i32.const 1))))
      (else (global.set $leaves (i32.add (global.get $leaves) (i32.const 1))))))
  (func (export "_start")
    (call $r (i32.const 23))
    (call $exit (i32.add (i32.const 40) (i32.eq (global.get $leaves) (i32.const 8388608))))))
"#;

#[test]
fn contexts_past_the_limit_keep_exact_calls_and_say_so() {
    let s = Scratch::new();
    let m = s.wat_module("storm.wasm", CONTEXT_STORM);
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        "--call-sites",
        "-o",
        "storm.wprof",
        m.to_str().unwrap(),
    ]);
    // The program ran to its end, unharmed: it checks its own work in its exit code.
    assert_eq!(out.status.code(), Some(41), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("more calling contexts than wprof keeps")
            && err.matches("warning").count() == 1,
        "{err}"
    );
    let p = s.profile("storm.wprof");
    assert_eq!(calls(&p, "r"), (1 << 24) - 1);
    assert_eq!(calls(&p, "_start"), 1);
}

#[test]
fn the_sampling_period_is_a_setting_and_the_profile_says_how_time_was_sampled() {
    let s = Scratch::new();
    let ratio = sample("ratio.wasm");
    let (p, out) = run_in(&s, &ratio, "sample");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(p["sampling"]["period_ns"], 200_000);
    let fine = p["sampling"]["readings"].as_u64().unwrap();
    // A period of 2 ms over the same ~0.1 s program: far fewer readings (about one per
    // period, plus the last one; a parked thread may rarely wake early).
    let out = s
        .wprof(&["run", "-o", "coarse.wprof", ratio.to_str().unwrap()])
        .env("WPROF_MODE", "sample")
        .env("WPROF_SAMPLE_PERIOD_US", "2000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("time sampled every 2.00 ms"),
        "{}",
        stderr(&out)
    );
    let coarse = s.profile("coarse.wprof");
    assert_eq!(coarse["sampling"]["period_ns"], 2_000_000);
    let readings = coarse["sampling"]["readings"].as_u64().unwrap();
    let most = 2 * (coarse["wall_time"].as_u64().unwrap() / 2_000_000) + 4;
    assert!(readings >= 1 && readings <= most, "{readings} > {most}");
    assert!(readings < fine, "{readings} vs {fine}");
    // The program thread's timer ticks about once a period too, each tick one located
    // sample: each delay is drawn between half a period and one and a half, so at most
    // twice the wall time over the period, plus the tick in flight at the end.
    let fine_ticks = p["sampling"]["answered"].as_u64().unwrap();
    let ticks = coarse["sampling"]["answered"].as_u64().unwrap();
    let most_ticks = 2 * coarse["wall_time"].as_u64().unwrap() / 2_000_000 + 1;
    assert!(ticks <= most_ticks, "{ticks} ticks > {most_ticks}");
    assert!(ticks < fine_ticks, "{ticks} vs {fine_ticks}");
    // Other modes sample nothing.
    let (time, _) = run_in(&s, &ratio, "cost");
    assert!(time.get("sampling").is_none());
    // Out of range: wprof's own error, before anything runs.
    let bad = s.run(&["run", "--sample-period-us", "1", ratio.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn the_text_report_says_times_were_sampled() {
    let s = Scratch::new();
    let (_, out) = run_in(&s, &sample("fib.wasm"), "sample");
    assert_eq!(out.status.code(), Some(0));
    let report = stdout(&s.run(&["report", "fib.sample.wprof"]));
    assert!(
        report.contains("sample mode: times estimated from")
            && report.contains("one every 200.00 µs"),
        "{report}"
    );
}

/// A `try_table` whose catch clause branches to the enclosing loop (its head), three times,
/// then ~30M iterations of call-free work in `_start`.
const CATCH_TO_A_LOOP: &str = r#"(module
  (memory (export "memory") 1)
  (tag $e)
  (func $thrower (call $inner))
  (func $inner (throw $e))
  (func (export "_start")
    (local $i i32) (local $tries i32) (local $acc i32)
    (loop $l
      (if (i32.lt_u (local.get $tries) (i32.const 3))
        (then
          (local.set $tries (i32.add (local.get $tries) (i32.const 1)))
          (try_table (catch_all $l)
            (call $thrower)))))
    (loop $w
      (local.set $acc (i32.add (local.get $acc) (i32.mul (local.get $i) (local.get $i))))
      (br_if $w (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                          (i32.const 30000000))))
    (if (i32.eq (local.get $acc) (i32.const 12345)) (then unreachable))))
"#;

#[test]
fn a_catch_that_lands_at_a_loop_head_closes_the_skipped_frames() {
    let s = Scratch::new();
    let m = s.wat_module("catch_loop.wasm", CATCH_TO_A_LOOP);
    same_counts_in_every_mode(&s, &m);
    for mode in ["time", "sample"] {
        let (p, _) = run_in(&s, &m, mode);
        // Every throw was caught by `_start`: `thrower` is never anyone's caller but for
        // `inner`, and the work after the catches is `_start`'s own time.
        assert_eq!(edge_calls(&p, Some("_start"), "thrower"), 3, "{mode}");
        let own = |n| function(&p, n)["self"].as_u64().unwrap();
        assert!(own("_start") > 10 * own("inner"), "{mode}: {p}");
        assert!(own("_start") > 10 * own("thrower"), "{mode}: {p}");
    }
}

#[test]
fn a_call_site_that_reaches_an_import_through_a_table_is_not_given_to_the_next_call() {
    // The start function's last call goes to an import through a table: no probe runs
    // in the callee, so its call site must not stick to the host's call of `_start`.
    let s = Scratch::new();
    let m = s.wat_module(
        "yield.wasm",
        r#"(module
          (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
          (memory (export "memory") 1)
          (type $y (func (result i32)))
          (table 1 funcref)
          (elem (i32.const 0) $yield)
          (func $init (drop (call_indirect (type $y) (i32.const 0))))
          (start $init)
          (func (export "_start")))"#,
    );
    for mode in ["time", "cost", "sample"] {
        let out = s.run(&[
            "run",
            "-q",
            "--mode",
            mode,
            "-o",
            "y.wprof",
            // Takes no value unless given with `=`: the module may follow it.
            "--call-sites",
            m.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0));
        let p = s.profile("y.wprof");
        let start = function(&p, "_start")["id"].clone();
        let edge = p["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["callee"] == start)
            .unwrap();
        assert!(
            edge["caller"].is_null() && edge.get("site").is_none(),
            "{mode}: {edge}"
        );
    }
}

/// `$spin` tail-calls itself until its argument reaches 0.
const SPIN: &str = r#"
  (func $spin (param i32) (result i32)
    (if (result i32) (i32.eqz (local.get 0))
      (then (i32.const 0))
      (else (return_call $spin (i32.sub (local.get 0) (i32.const 1))))))"#;

#[test]
fn a_loop_of_tail_calls_is_counted_alike_in_every_mode() {
    // `spin` tail-calls itself 100 000 times, `ping` and `pong` each other 50 000 times.
    let s = Scratch::new();
    let m = s.wat_module(
        "tail_loop.wasm",
        &format!(
            r#"(module
          (memory (export "memory") 1)
          {SPIN}
          (func $ping (param i32) (result i32)
            (if (result i32) (i32.eqz (local.get 0))
              (then (i32.const 0))
              (else (return_call $pong (i32.sub (local.get 0) (i32.const 1))))))
          (func $pong (param i32) (result i32)
            (return_call $ping (local.get 0)))
          (func (export "_start")
            (drop (call $spin (i32.const 100000)))
            (drop (call $ping (i32.const 50000)))))"#
        ),
    );
    same_counts_in_every_mode(&s, &m);
    let (p, _) = run_in(&s, &m, "time");
    assert_eq!(edge_calls(&p, Some("spin"), "spin"), 100_000);
    assert_eq!(edge_calls(&p, Some("ping"), "pong"), 50_000);
    assert_eq!(edge_calls(&p, Some("pong"), "ping"), 50_000);
}

#[test]
fn a_long_loop_of_self_tail_calls_stays_two_contexts_in_the_inline_modes() {
    // 8M iterations: one node per iteration would pass the tree's 256 MiB limit.
    let s = Scratch::new();
    let m = s.wat_module(
        "spin.wasm",
        &format!(
            r#"(module
          (memory (export "memory") 1)
          {SPIN}
          (func (export "_start") (drop (call $spin (i32.const 8000000)))))"#
        ),
    );
    for mode in ["cost", "sample"] {
        let (p, out) = run_in(&s, &m, mode);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            !stderr(&out).contains("warning"),
            "{mode}: {}",
            stderr(&out)
        );
        assert_eq!(calls(&p, "spin"), 8_000_001, "{mode}");
        assert_eq!(edge_calls(&p, Some("spin"), "spin"), 8_000_000, "{mode}");
        assert_eq!(edge_calls(&p, Some("_start"), "spin"), 1, "{mode}");
    }
}

/// A loop of about 20 µs of arithmetic, then one store to a page of memory never touched
/// before (a page fault into the kernel), 15,000 times.
const FAULTING: &str = r#"
(module
  (memory 1)
  (func $work (param $n i32) (result i32)
    (local $x i32)
    (local.set $x (local.get $n))
    (loop $l
      (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1664525)) (i32.const 1013904223)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    (local.get $x))
  (func $touch (param $page i32)
    (i32.store (i32.mul (local.get $page) (i32.const 4096)) (i32.const 1)))
  (func (export "_start")
    (local $i i32)
    (drop (memory.grow (i32.const 15001)))
    (loop $l
      (drop (call $work (i32.const 20000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (call $touch (local.get $i))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 15000)))))
)"#;

#[test]
fn a_function_that_faults_on_fresh_memory_gets_its_time_and_no_more() {
    // A signal sent from another thread reaches a thread on another core late, and is taken
    // at its next entry into the kernel: a page fault, here always in `touch`. That way of
    // sampling gave such functions several times their time; the thread's own timer does not.
    let s = Scratch::new();
    let module = s.wat_module("faulting.wasm", FAULTING);
    let share = |mode: &str| {
        let name = format!("faulting.{mode}.wprof");
        // `touch` is short: time mode would count it, not time it, without --short-max 0.
        let out = s
            .wprof(&["run", "-q", "--short-max", "0", "-o", &name])
            .arg(&module)
            .env("WPROF_MODE", mode)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let p = s.profile(&name);
        let total: u64 = crate::support::self_sum(&p);
        function(&p, "touch")["self"].as_u64().unwrap() as f64 / total as f64
    };
    // Time mode's clock reads bracket each 20 µs activation: its share is the truth here.
    let truth = share("time");
    let sampled = share("sample");
    assert!(
        sampled < 2.0 * truth + 0.02,
        "touch: {:.1}% sampled, {:.1}% timed",
        100.0 * sampled,
        100.0 * truth
    );
}

/// Sleeps three times 100 ms (`poll_oneoff` on the monotonic clock), then copies one read of
/// stdin to stdout.
const SLEEPER: &str = r#"
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $sleep
    ;; One clock subscription at 0: monotonic (id 1), 100 ms, relative; its event at 64.
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 100000000))
    (i64.store (i32.const 32) (i64.const 0))
    (i32.store16 (i32.const 40) (i32.const 0))
    (if (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 96)) (then unreachable)))
  (func (export "_start")
    (call $sleep) (call $sleep) (call $sleep)
    ;; iovec at 128: buffer 256, 64 bytes; count at 136.
    (i32.store (i32.const 128) (i32.const 256))
    (i32.store (i32.const 132) (i32.const 64))
    (if (call $fd_read (i32.const 0) (i32.const 128) (i32.const 1) (i32.const 136)) (then unreachable))
    (i32.store (i32.const 132) (i32.load (i32.const 136)))
    (if (call $fd_write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 140)) (then unreachable)))
)"#;

/// Runs [`SLEEPER`] with `wprof run -q -o sleeper.wprof ARGS`, its input written 150 ms
/// in (while it sleeps, or later: a read that waits or not); checks its exit and output and
/// returns the profile.
pub(crate) fn run_sleeper(s: &Scratch, args: &[&str]) -> serde_json::Value {
    let module = s.wat_module("sleeper.wasm", SLEEPER);
    let mut child = s
        .wprof(&[&["run", "-q", "-o", "sleeper.wprof"], args].concat())
        .arg(&module)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    use std::io::Write;
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"late input\n").unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "late input\n");
    s.profile("sleeper.wprof")
}

#[test]
fn a_program_waiting_in_the_host_is_not_woken_by_ticks_and_its_wait_is_the_imports() {
    let s = Scratch::new();
    let p = run_sleeper(&s, &["--mode", "sample"]);
    let poll = function(&p, "wasi_snapshot_preview1::poll_oneoff");
    assert_eq!(poll["calls"], 3);
    // Its 300 ms of waiting are the import's (the sampler reads the context alone there).
    assert!(poll["self"].as_u64().unwrap() >= 250_000_000, "{poll}");
    // Every 200 µs for 300 ms would be 1,500 ticks; the timer sleeps while the host waits.
    let ticks = p["sampling"]["answered"].as_u64().unwrap();
    assert!(ticks < 300, "{ticks} ticks while the program slept");
}

#[test]
fn the_default_period_stretches_after_the_first_second_and_a_chosen_one_stays() {
    let s = Scratch::new();
    let nbody = sample("nbody.wasm");
    // Over 1.5 s of n-body steps on any machine (3.3 s on a fast one): the default period
    // stretches from the first second.
    let run = |name: &str, period: Option<&str>| {
        let mut command = s.wprof(&["run", "-o", name, nbody.to_str().unwrap(), "1000000"]);
        command.env("WPROF_MODE", "sample");
        if let Some(period) = period {
            command.env("WPROF_SAMPLE_PERIOD_US", period);
        }
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let p = s.profile(name);
        let seconds = p["wall_time"].as_u64().unwrap() as f64 / 1e9;
        let rate = p["sampling"]["answered"].as_u64().unwrap() as f64 / seconds;
        (p, stderr(&out), seconds, rate)
    };
    let (p, err, seconds, rate) = run("default.wprof", None);
    let sampling = &p["sampling"];
    assert_eq!(sampling["period_ns"], 200_000);
    assert!(
        seconds > 1.5,
        "the run is too short to stretch: {seconds} s"
    );
    // At t seconds past the first the period is 200 µs × t, so at the end 200 µs × wall.
    let longest = sampling["longest_period_ns"].as_u64().unwrap() as f64;
    let expected = (200_000.0 * seconds).min(2_000_000.0);
    assert!(
        (longest - expected).abs() < 2_000.0,
        "{longest} vs {expected}"
    );
    assert!(err.contains("stretched to"), "{err}");
    // Fewer ticks than a period of 200 µs all along would give: the first second's 5,000
    // and then sparser ones, 5,000 × (1 + ln T) in T seconds (about 9,600 at 2.5 s, where
    // 200 µs gives 12,500). A busy machine only takes ticks away (and stretches the run,
    // so the period more).
    let fixed = 5000.0 * seconds;
    assert!(
        rate * seconds < 0.85 * fixed,
        "{:.0} ticks in {seconds:.2} s: the period did not stretch (expected about {:.0})",
        rate * seconds,
        5000.0 * (1.0 + seconds.ln())
    );
    // The same period chosen stays for the whole run.
    let (p, err, _, _) = run("chosen.wprof", Some("200"));
    assert_eq!(p["sampling"]["period_ns"], 200_000);
    assert!(p["sampling"].get("longest_period_ns").is_none(), "{p}");
    assert!(!err.contains("stretched"), "{err}");
}

/// A function that calls a tiny callee, then fills 16 MiB of memory (which wasmtime does in
/// its own code), thirty times.
const FILLER: &str = r#"(module
  (memory 300)
  (func $tiny (result i32) i32.const 1)
  (func $filler
    (local $i i32)
    (loop $again
      call $tiny
      drop
      i32.const 0
      i32.const 7
      i32.const 16777216
      memory.fill
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      i32.const 30
      i32.ne
      br_if $again))
  (func (export "_start") call $filler))"#;

#[test]
fn a_tick_in_the_engines_code_goes_to_the_function_that_asked_for_it() {
    let s = Scratch::new();
    let module = s.wat_module("filler.wasm", FILLER);
    let out = s.run(&["run", "-q", "-o", "fill.wprof", module.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("fill.wprof");
    let own = |name: &str| function(&p, name)["self"].as_u64().unwrap();
    // The fills' time is `filler`'s, not that of `tiny`, which returned just before each
    // (before the cell was stored ahead of the fill, `tiny` had all of it).
    assert!(own("filler") > 4 * own("tiny"), "{}", p["functions"]);
    assert_eq!(function(&p, "tiny")["calls"], 30);
    assert_eq!(self_sum(&p), p["total"].as_u64().unwrap());
}
