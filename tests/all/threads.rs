//! Threaded programs (wasi-threads) through the binary: `samples/threads.wasm` spawns three
//! threads whose calls are known by construction (thread k calls `leaf` 1000·k times, the
//! first thread 500 times), so every mode's profile is checked exactly, thread by thread;
//! a thread that traps or exits ends the program with its code; the reports that know
//! threads (pprof's `thread` label, Firefox's threads, speedscope's profiles) are read back.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{edge_calls, function, sample, self_sum, stderr, stdout, Scratch};

const OUTPUT: &str = "total 21371750\n";

/// Per thread, the calls of the function named `name` (from the contexts).
fn calls_by_thread(profile: &Value, name: &str) -> BTreeMap<u64, u64> {
    let id = profile["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no function {name}"))["id"]
        .clone();
    let mut out = BTreeMap::new();
    for c in profile["contexts"].as_array().unwrap() {
        if c["function"] == id {
            let thread = c["thread"].as_u64().expect("every context has its thread");
            *out.entry(thread).or_default() += c["calls"].as_u64().unwrap();
        }
    }
    out
}

/// The ids of the profile's threads, in its order.
fn thread_ids(profile: &Value) -> Vec<u64> {
    profile["threads"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect()
}

fn run(s: &Scratch, mode: &str, out: &str, args: &[&str]) -> std::process::Output {
    let path = sample("threads.wasm");
    let mut all = vec![
        "run",
        "-q",
        "--mode",
        mode,
        "-o",
        out,
        path.to_str().unwrap(),
    ];
    if !args.is_empty() {
        all.push("--");
        all.extend(args);
    }
    s.run(&all)
}

#[test]
fn every_mode_counts_each_thread_exactly() {
    let s = Scratch::new();
    for mode in ["sample", "time", "cost", "adaptive"] {
        let name = format!("{mode}.wprof");
        let out = run(&s, mode, &name, &[]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), OUTPUT, "{mode}");
        let p = s.profile(&name);
        let threads = thread_ids(&p);
        assert_eq!(threads, [0, 1, 2, 3], "{mode}");
        assert_eq!(p["threads"]["unfinished"], 0, "{mode}");
        let expected = |pairs: &[(u64, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        assert_eq!(
            calls_by_thread(&p, "leaf"),
            expected(&[(0, 500), (1, 1000), (2, 2000), (3, 3000)]),
            "{mode}"
        );
        assert_eq!(
            calls_by_thread(&p, "work"),
            expected(&[(0, 1), (1, 1), (2, 1), (3, 1)]),
            "{mode}"
        );
        assert_eq!(
            calls_by_thread(&p, "thread_main"),
            expected(&[(1, 1), (2, 1), (3, 1)]),
            "{mode}"
        );
        assert_eq!(crate::support::calls(&p, "leaf"), 6500, "{mode}");
        assert_eq!(crate::support::calls(&p, "wasi::thread-spawn"), 3, "{mode}");
        // The threads add up to the profile.
        let total: u64 = p["threads"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["total"].as_u64().unwrap())
            .sum();
        assert_eq!(total, p["total"].as_u64().unwrap(), "{mode}");
        let profile = wprof::profile::Profile::read(&s.path(&name)).unwrap();
        assert_eq!(profile.violations(), Vec::<String>::new(), "{mode}");
    }
    // Stack mode counts each thread's calls with its entry counters (its contexts are
    // sampled stacks): the same functions' calls, thread by thread, as sample mode's.
    let calls_of_threads = |p: &Value| -> Vec<(u64, u64)> {
        p["threads"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_u64().unwrap(), t["calls"].as_u64().unwrap()))
            .collect()
    };
    let out = run(&s, "stack", "stack.wprof", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), OUTPUT);
    let stack = s.profile("stack.wprof");
    assert_eq!(stack["threads"]["unfinished"], 0);
    assert_eq!(crate::support::calls(&stack, "leaf"), 6500);
    assert_eq!(crate::support::calls(&stack, "work"), 4);
    assert_eq!(crate::support::calls(&stack, "thread_main"), 3);
    assert_eq!(crate::support::calls(&stack, "wasi::thread-spawn"), 3);
    let sampled = s.profile("sample.wprof");
    assert_eq!(calls_of_threads(&stack), calls_of_threads(&sampled));
    assert_eq!(
        calls_of_threads(&stack)
            .iter()
            .map(|t| t.0)
            .collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
}

#[test]
fn profiling_off_runs_threads_too() {
    let s = Scratch::new();
    let out = s
        .wprof(&["run", sample("threads.wasm").to_str().unwrap()])
        .env("WPROF", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), OUTPUT);
    assert!(!s.path("threads.wprof").exists());
}

#[test]
fn a_thread_that_traps_or_exits_ends_the_program() {
    let s = Scratch::new();
    std::fs::write(s.path("earlier.wprof"), "precious").unwrap();
    for (arg, code) in [("trap", 134), ("exit", 7)] {
        let out = run(&s, "sample", "earlier.wprof", &[arg]);
        assert_eq!(out.status.code(), Some(code), "{arg}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("thread 2"), "{arg}: {err}");
        assert!(err.contains("no profile written"), "{arg}: {err}");
        assert!(!err.contains("panicked"), "{arg}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(s.path("earlier.wprof")).unwrap(),
        "precious"
    );
}

#[test]
fn a_thread_blocked_at_the_end_is_left_out_and_counted() {
    let s = Scratch::new();
    // A fourth thread waits forever; the program ends without it.
    let out = run(&s, "sample", "b.wprof", &["block"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), OUTPUT);
    let p = s.profile("b.wprof");
    assert_eq!(p["threads"]["unfinished"], 1, "{}", p["threads"]);
    assert_eq!(p["threads"]["threads"].as_array().unwrap().len(), 4);
    assert_eq!(crate::support::calls(&p, "leaf"), 6500);
    let text = stdout(&s.run(&["report", "b.wprof"]));
    assert!(
        text.contains("1 still running when the program ended, not in the profile"),
        "{text}"
    );
}

#[test]
fn reports_show_each_thread() {
    let s = Scratch::new();
    let out = run(&s, "cost", "t.wprof", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&s.run(&["report", "t.wprof"]));
    assert!(
        text.contains("4 threads (#0 the first, the others spawned): #0 "),
        "{text}"
    );

    // Firefox: one thread per thread of the program, each with samples.
    let fx = s.run(&["report", "t.wprof", "--format", "firefox", "-o", "t.json"]);
    assert!(fx.status.success(), "{}", stderr(&fx));
    let v: Value = serde_json::from_slice(&std::fs::read(s.path("t.json")).unwrap()).unwrap();
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 4);
    for t in threads {
        assert!(
            t["samples"]["length"].as_u64().unwrap() > 0,
            "{}",
            t["name"]
        );
    }

    // speedscope: one profile per thread.
    let sp = s.run(&[
        "report",
        "t.wprof",
        "--format",
        "speedscope",
        "-o",
        "t.speedscope.json",
    ]);
    assert!(sp.status.success(), "{}", stderr(&sp));
    let v: Value =
        serde_json::from_slice(&std::fs::read(s.path("t.speedscope.json")).unwrap()).unwrap();
    assert_eq!(v["profiles"].as_array().unwrap().len(), 4);

    // pprof: the `thread` label, read by `go tool pprof`.
    let pb = s.run(&["report", "t.wprof", "--format", "pprof", "-o", "t.pb.gz"]);
    assert!(pb.status.success(), "{}", stderr(&pb));
    let Some(mut go) =
        crate::tools::go_pprof(&s, "reading pprof's thread labels", &["-tags", "t.pb.gz"])
    else {
        return;
    };
    let o = go.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let tags = stdout(&o);
    assert!(tags.contains("thread"), "{tags}");
    for t in ["0", "1", "2", "3"] {
        assert!(
            tags.lines()
                .any(|l| l.trim_end().ends_with(&format!(" {t}"))),
            "no thread {t}: {tags}"
        );
    }
    // One thread alone: thread 3's leaf calls, 3000 of them.
    let rows = crate::tools::pprof_top(
        &s,
        "t.pb.gz",
        &["-sample_index=calls", "-tagfocus=thread=^3$"],
    )
    .unwrap();
    assert_eq!(rows.get("leaf").map(|r| r.0), Some(3000), "{rows:?}");
}

/// `$n` rounds of a loop that calls nothing, folding them into `$acc`.
macro_rules! spin_rounds {
    () => {
        r#"(loop $again
      local.get $acc
      local.get $n
      i32.xor
      i32.const 7
      i32.mul
      local.set $acc
      local.get $n
      i32.const 1
      i32.sub
      local.tee $n
      br_if $again)"#
    };
}

/// A shared memory's `memory.atomic.wait32` that times out after 20 ms, five times, with
/// some work in between: what a thread blocked on a mutex or a condition variable does.
const WAITS: &str = concat!(
    r#"(module
  (memory 1 1 shared)
  (func $blocker (result i32)
    i32.const 0
    i32.const 0
    i64.const 20000000
    memory.atomic.wait32)
  (func $spin (param $n i32) (result i32)
    (local $acc i32)
"#,
    spin_rounds!(),
    r#"
    local.get $acc)
  (func (export "_start")
    (local $i i32)
    (loop $again
      call $blocker
      drop
      i32.const 100000
      call $spin
      drop
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      i32.const 5
      i32.ne
      br_if $again)))"#
);

#[test]
fn time_mode_charges_a_wait_to_the_wait_not_to_the_function_waiting() {
    let s = Scratch::new();
    let module = s.wat_module("waits.wasm", WAITS);
    let module = module.to_str().unwrap();
    let out = s.run(&["run", "--mode", "time", "-o", "time.wprof", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("memory.atomic.wait [waiting]"),
        "{}",
        stderr(&out)
    );
    // `_start`, `blocker` five times and `spin` five times; three functions.
    assert!(
        stderr(&out).contains("; 11 calls, 3 functions ran, 5 waits"),
        "{}",
        stderr(&out)
    );
    let p = s.profile("time.wprof");
    let wait = function(&p, "memory.atomic.wait");
    assert_eq!(wait["kind"], "wait");
    assert_eq!(wait["calls"], 5);
    let ms = 1_000_000;
    let waited = wait["self"].as_u64().unwrap();
    // Each wait times out after 20 ms at the earliest.
    assert!(waited >= 5 * 19 * ms, "{wait}");
    assert_eq!(wait["inclusive"], wait["self"]);
    let blocker = function(&p, "blocker");
    assert!(blocker["self"].as_u64().unwrap() < 20 * ms, "{blocker}");
    assert!(
        blocker["inclusive"].as_u64().unwrap() >= waited,
        "{blocker}"
    );
    assert_eq!(edge_calls(&p, Some("blocker"), "memory.atomic.wait"), 5);
    assert_eq!(self_sum(&p), p["total"].as_u64().unwrap());
    // The other modes leave waits inside the function (sample mode charges CPU time).
    let out = s.run(&["run", "-q", "--mode", "cost", "-o", "cost.wprof", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("cost.wprof");
    assert!(p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["name"] != "memory.atomic.wait"));
}

/// A module whose first thread spawns one thread, which runs `work` (instructions using the
/// `functions`), then sets word 0 and wakes the first thread, which waits for it.
fn one_spawned_thread(functions: &str, work: &str) -> String {
    format!(
        r#"(module
  (import "env" "memory" (memory 1 1 shared))
  (import "wasi" "thread-spawn" (func $spawn (param i32) (result i32)))
  {functions}
  (func (export "wasi_thread_start") (param $tid i32) (param $arg i32)
    {work}
    i32.const 0
    i32.const 1
    i32.atomic.store
    i32.const 0
    i32.const 1
    memory.atomic.notify
    drop)
  (func (export "_start")
    i32.const 0
    call $spawn
    drop
    (block $done
      (loop $wait
        i32.const 0
        i32.atomic.load
        br_if $done
        i32.const 0
        i32.const 0
        i64.const -1
        memory.atomic.wait32
        drop
        br $wait))))"#
    )
}

/// `$spin`: calls `first` once, then `$n` rounds of a loop that calls nothing.
fn spin_after(first: &str) -> String {
    format!(
        r#"(func $spin (param $n i32) (result i32)
    (local $acc i32)
    call {first}
    local.set $acc
    {rounds}
    local.get $acc)"#,
        rounds = spin_rounds!()
    )
}

#[test]
fn sample_mode_locates_a_spawned_thread_by_its_program_counter() {
    // The calling-context cell still names `short` long after it returned: read alone, it
    // would give `short` the loop's time. The thread's own timer finds the loop in `spin`.
    let s = Scratch::new();
    // A spawned thread that calls `short` once, then loops in `spin` itself for about a
    // tenth of a second.
    let functions = format!(
        "(func $short (result i32) i32.const 3)\n  {}",
        spin_after("$short")
    );
    let wat = one_spawned_thread(&functions, "i32.const 100000000 call $spin drop");
    let module = s.wat_module("spins.wasm", &wat);
    let module = module.to_str().unwrap();
    let out = s.run(&["run", "--mode", "sample", "-o", "s.wprof", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("s.wprof");
    let self_of = |name: &str| function(&p, name)["self"].as_u64().unwrap();
    let (looping, short) = (self_of("spin"), self_of("short"));
    assert!(looping > 20 * short.max(1), "spin {looping}, short {short}");
    assert!(
        looping > p["total"].as_u64().unwrap() / 2,
        "{looping} of {}",
        p["total"]
    );
    // Most of the spawned thread's readings were answered by its ticks.
    let sampling = &p["sampling"];
    let answered = sampling["answered"].as_u64().unwrap();
    assert!(
        answered * 4 > sampling["readings"].as_u64().unwrap(),
        "{sampling}"
    );
}

#[test]
fn time_mode_shares_a_spawned_threads_time_out_to_its_short_functions() {
    // `tiny` has no clock probes: its time is `calls_tiny`'s until the spawned thread's own
    // ticks find it running (the first thread, waiting, takes none there).
    let s = Scratch::new();
    // A spawned thread whose loop calls `tiny`, a short function (counted, not timed),
    // thirty million times.
    let functions = r#"(func $tiny (param $x i32) (result i32)
    local.get $x
    i32.const 7
    i32.mul
    i32.const 13
    i32.xor
    i32.const 5
    i32.rotl
    local.get $x
    i32.add)
  (func $calls_tiny (param $n i32) (result i32)
    (local $acc i32)
    (loop $again
      local.get $acc
      call $tiny
      local.set $acc
      local.get $n
      i32.const 1
      i32.sub
      local.tee $n
      br_if $again)
    local.get $acc)"#;
    let wat = one_spawned_thread(functions, "i32.const 30000000 call $calls_tiny drop");
    let module = s.wat_module("short.wasm", &wat);
    let module = module.to_str().unwrap();
    // The probes' cost kept: subtracted, the start-up estimate of a counted call's cost
    // times thirty million took all of `calls_tiny`'s time on a noisy machine in about one
    // run in four (2026-11-28), leaving nothing to share.
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "time",
        "--keep-overhead",
        "-o",
        "t.wprof",
        module,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("t.wprof");
    assert_eq!(p["untimed"], serde_json::json!(["tiny"]));
    assert!(p["untimed_samples"].as_u64().unwrap() > 0, "{}", p["ticks"]);
    let tiny = function(&p, "tiny");
    assert_eq!(tiny["calls"], 30_000_000);
    assert!(tiny["self"].as_u64().unwrap() > 0, "{tiny}");
    assert_eq!(self_sum(&p), p["total"].as_u64().unwrap());
}

#[test]
fn stack_mode_walks_a_spawned_threads_stack_and_not_the_wait() {
    // The spawned thread loops in `spin` (called by `work`) for about a tenth of a second;
    // the first thread waits for it all that time in `memory.atomic.wait`, using no CPU:
    // its wait is not the program's time, as it is not in perf's.
    let s = Scratch::new();
    let functions = format!(
        "(func $short (result i32) i32.const 3)\n  {}\n  \
         (func $work (param $n i32) (result i32) local.get $n call $spin)",
        spin_after("$short")
    );
    let wat = one_spawned_thread(&functions, "i32.const 100000000 call $work drop");
    let module = s.wat_module("spins.wasm", &wat);
    let module = module.to_str().unwrap();
    let out = s.run(&["run", "-q", "--mode", "stack", "-o", "s.wprof", module]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("s.wprof");
    // `_start` may be absent: a function no tick charged has no record.
    let self_of = |name: &str| {
        p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map_or(0, |f| f["self"].as_u64().unwrap())
    };
    let (looping, waiting) = (self_of("spin"), self_of("_start"));
    assert!(
        looping > 4 * waiting.max(1),
        "spin {looping}, _start {waiting}"
    );
    assert!(
        looping > p["total"].as_u64().unwrap() / 2,
        "{looping} of {}",
        p["total"]
    );
    assert_eq!(self_sum(&p), p["total"].as_u64().unwrap());
    // Taking the waiting thread's ticks cost it some CPU time, charged to no function, and
    // the report says so.
    let walks = &p["sampling"]["stacks"];
    assert!(walks["interrupting_ns"].as_u64().unwrap() > 0, "{walks}");
    // The waiting thread's timer stopped soon after it blocked: about one thread's worth
    // of ticks in all, not two.
    let (ticks, period) = (
        p["sampling"]["answered"].as_u64().unwrap(),
        p["sampling"]["period_ns"].as_u64().unwrap(),
    );
    let wall = p["wall_time"].as_u64().unwrap();
    assert!(
        ticks * period * 2 < wall * 3,
        "{ticks} ticks of {period} ns in {wall} ns"
    );
    let text = stdout(&s.run(&["report", "s.wprof"]));
    assert!(text.contains("waking blocked threads for ticks"), "{text}");
    let threads_line = text
        .lines()
        .find(|l| l.contains("threads (#0 the first"))
        .unwrap_or_else(|| panic!("no threads line in {text}"));
    // Each thread's calls, counted by its own instance's counters.
    assert!(
        threads_line.contains("#1 ") && threads_line.contains(" calls"),
        "{threads_line}"
    );
    assert!(function(&p, "spin")["calls"].as_u64() > Some(0));
    // Two threads, each context marked with its own; the loop's stack is the spawned
    // thread's, from its entry down.
    let threads = thread_ids(&p);
    assert_eq!(threads, [0, 1]);
    let contexts = p["contexts"].as_array().unwrap();
    let spin = function(&p, "spin")["id"].clone();
    let spin_contexts: Vec<&Value> = contexts.iter().filter(|c| c["function"] == spin).collect();
    assert!(!spin_contexts.is_empty());
    for c in spin_contexts {
        assert_eq!(c["thread"], 1, "{c}");
        let mut stack = Vec::new();
        let mut at = c;
        loop {
            let name = p["functions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["id"] == at["function"])
                .unwrap()["name"]
                .as_str()
                .unwrap();
            stack.insert(0, name);
            match at["parent"].as_u64() {
                Some(parent) => at = &contexts[parent as usize],
                None => break,
            }
        }
        assert_eq!(stack, ["wasi_thread_start", "work", "spin"], "{c}");
    }
}
