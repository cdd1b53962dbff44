//! Many threads (wasi-threads) through the binary: every thread of a program that spawns a
//! hundred or two is in the profile, with its calls, in every mode; in stack mode (the
//! default) every one is sampled by its own timer, and one the system refuses a timer is
//! named in the profile, its calls counted all the same.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;

use serde_json::Value;

use crate::support::{calls, function, self_sum, stderr, Scratch};

/// A module whose first thread spawns `threads` threads and waits until all have done their
/// work. Each spawned thread calls `work` once, which spins `rounds` rounds; with
/// `together`, each first waits until every thread has started, so that all of them are
/// alive at once. Word 0 counts the threads that started, word 4 those done.
fn spawning(threads: u32, rounds: u32, together: bool) -> String {
    let meet = if together {
        format!(
            r#"i32.const 0
    i32.const 1
    i32.atomic.rmw.add
    i32.const 1
    i32.add
    i32.const {threads}
    i32.eq
    if
      i32.const 0
      i32.const -1
      memory.atomic.notify
      drop
    end
    (block $met
      (loop $wait
        i32.const 0
        i32.atomic.load
        local.tee $seen
        i32.const {threads}
        i32.eq
        br_if $met
        i32.const 0
        local.get $seen
        i64.const 10000000
        memory.atomic.wait32
        drop
        br $wait))"#
        )
    } else {
        String::new()
    };
    format!(
        r#"(module
  (import "env" "memory" (memory 1 1 shared))
  (import "wasi" "thread-spawn" (func $spawn (param i32) (result i32)))
  (func $work (param $n i32) (result i32)
    (local $acc i32)
    (loop $again
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
      br_if $again)
    local.get $acc)
  (func (export "wasi_thread_start") (param $tid i32) (param $arg i32)
    (local $seen i32)
    {meet}
    i32.const {rounds}
    call $work
    drop
    i32.const 4
    i32.const 1
    i32.atomic.rmw.add
    drop
    i32.const 4
    i32.const 1
    memory.atomic.notify
    drop)
  (func (export "_start")
    (local $i i32)
    (local $done i32)
    (loop $more
      local.get $i
      call $spawn
      i32.const 0
      i32.lt_s
      if
        unreachable
      end
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      i32.const {threads}
      i32.ne
      br_if $more)
    (block $all
      (loop $wait
        i32.const 4
        i32.atomic.load
        local.tee $done
        i32.const {threads}
        i32.eq
        br_if $all
        i32.const 4
        local.get $done
        i64.const -1
        memory.atomic.wait32
        drop
        br $wait))))"#
    )
}

/// The profile's threads: (id, record).
fn threads(profile: &Value) -> Vec<(u64, &Value)> {
    profile["threads"]["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("no threads in {}", profile["threads"]))
        .iter()
        .map(|t| (t["id"].as_u64().unwrap(), t))
        .collect()
}

/// Checks that every one of `spawned` threads is in profile `p` (thread 0 and ids 1 to
/// `spawned`), none still running, and that `work` was called once by each.
fn all_accounted_for(p: &Value, spawned: u64, what: &str) {
    let ids: BTreeSet<u64> = threads(p).iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (0..=spawned).collect(), "{what}");
    assert_eq!(p["threads"]["unfinished"], 0, "{what}");
    assert_eq!(calls(p, "work"), spawned, "{what}");
    assert_eq!(calls(p, "wasi::thread-spawn"), spawned, "{what}");
    assert_eq!(self_sum(p), p["total"].as_u64().unwrap(), "{what}");
}

#[test]
fn stack_mode_samples_each_of_a_hundred_threads_alive_at_once() {
    // A hundred threads at once, each spinning tens of milliseconds: each has its own
    // timer (there is no fixed number of them), so each has sampled time of its own. (With
    // a few milliseconds each, on two cores busy with other tests, a thread can wait for a
    // lock until the others are done, then run its whole loop before any tick finds it in
    // the module: its time is then outside, counted as such, not its own.)
    let s = Scratch::new();
    let module = s.wat_module("hundred.wasm", &spawning(100, 20_000_000, true));
    let out = s.run(&["run", "-q", "-o", "s.wprof", module.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let p = s.profile("s.wprof");
    assert_eq!(p["mode"], "stack");
    all_accounted_for(&p, 100, "stack");
    for (id, t) in threads(&p).into_iter().filter(|(id, _)| *id > 0) {
        assert!(
            t["total"].as_u64().unwrap() > 0,
            "thread {id} unsampled: {t}"
        );
        assert!(t.get("unsampled").is_none(), "{t}");
    }
    // The loop's time is the threads' `work`.
    let work = function(&p, "work")["self"].as_u64().unwrap();
    assert!(
        work > p["total"].as_u64().unwrap() / 2,
        "{work} of {}",
        p["total"]
    );
}

#[test]
fn two_hundred_short_lived_threads_are_all_accounted_for_in_every_mode() {
    let s = Scratch::new();
    let module = s.wat_module("short.wasm", &spawning(200, 20_000, false));
    let module = module.to_str().unwrap();
    for mode in ["stack", "sample", "time", "cost", "adaptive"] {
        let name = format!("{mode}.wprof");
        let out = s.run(&["run", "-q", "--mode", mode, "-o", &name, module]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let p = s.profile(&name);
        all_accounted_for(&p, 200, mode);
        if mode == "stack" {
            continue;
        }
        // The probed modes count each thread's calls in its own tree.
        for (id, t) in threads(&p).into_iter().filter(|(id, _)| *id > 0) {
            assert_eq!(t["calls"], 2, "{mode}: thread {id}: {t}");
        }
    }
}

#[test]
fn threads_the_system_refuses_a_timer_are_named_and_their_calls_counted() {
    // Few timers allowed (timer_create counts against RLIMIT_SIGPENDING, per user: other
    // processes' timers count too), a hundred threads alive at once: most get none.
    let s = Scratch::new();
    let module = s.wat_module("hundred.wasm", &spawning(100, 200_000, true));
    let module = module.to_str().unwrap();
    for mode in ["stack", "sample"] {
        let name = format!("{mode}.wprof");
        // The first thread may itself be refused while other tests hold timers: then stack
        // mode profiles nothing, sample mode names it unsampled, and the run is tried again.
        let mut tries = 0;
        let (out, p) = loop {
            tries += 1;
            let mut cmd = s.wprof(&["run", "-q", "--mode", mode, "-o", &name, module]);
            // SAFETY: only setrlimit between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    let limit = libc::rlimit {
                        rlim_cur: 24,
                        rlim_max: 24,
                    };
                    if libc::setrlimit(libc::RLIMIT_SIGPENDING, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
            if s.path(&name).exists() {
                let p = s.profile(&name);
                let first_sampled = threads(&p)
                    .iter()
                    .any(|(id, t)| *id == 0 && t["unsampled"] != true);
                if first_sampled {
                    break (out, p);
                }
            }
            assert!(
                tries < 10,
                "never a timer for the first thread: {}",
                stderr(&out)
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        all_accounted_for(&p, 100, mode);
        let unsampled: Vec<u64> = threads(&p)
            .iter()
            .filter(|(_, t)| t["unsampled"] == true)
            .map(|(id, _)| *id)
            .collect();
        assert!(unsampled.len() >= 50, "{mode}: {unsampled:?}");
        assert!(!unsampled.contains(&0), "{mode}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{} of ", unsampled.len()))
                && err.contains("could not be interrupted"),
            "{mode}: {err}"
        );
        // The report names them.
        let text = crate::support::stdout(&s.run(&["report", &name]));
        assert!(
            text.contains(&format!("{} unsampled", unsampled.len())),
            "{mode}: {text}"
        );
    }
}
