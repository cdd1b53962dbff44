//! A busy machine: the program's thread shares its processor with another that never
//! sleeps. Time mode reads a wall clock, so it must say how long the thread waited.

use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::support::*;

/// The first processor this process may run on.
fn first_cpu() -> usize {
    // SAFETY: `sched_getaffinity` fills the zeroed set it is given.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        set
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `CPU_ISSET` reads the set within its size.
        .find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .expect("some processor is allowed")
}

/// Keeps the calling thread on `cpu` alone.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: the set is zeroed, then one bit is set; `sched_setaffinity` only reads it.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    match result {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Runs `wprof args` with every thread of it on one processor, which a thread of this
/// process spins on meanwhile.
fn run_beside_a_spinner(s: &Scratch, args: &[&str]) -> std::process::Output {
    let cpu = first_cpu();
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin_to(cpu).unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let mut cmd = s.wprof(args);
    // SAFETY: the hook only calls `sched_setaffinity`, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || pin_to(cpu));
    }
    let out = cmd.output().unwrap();
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    out
}

#[test]
fn time_mode_says_how_long_its_thread_waited_for_a_processor() {
    let s = Scratch::new();
    std::fs::copy(sample("nbody.wasm"), s.path("nbody.wasm")).unwrap();
    // Instrumented and compiled before, so that the run is the program's.
    let warm = s.run(&[
        "run",
        "-q",
        "--mode",
        "time",
        "-o",
        "warm.wprof",
        "nbody.wasm",
    ]);
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    let out = run_beside_a_spinner(
        &s,
        &["run", "--mode", "time", "-o", "busy.wprof", "nbody.wasm"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Three threads on one processor (the program's, the collector's, the spinner): the
    // program's waits for about half of the run, far above the line's 5%.
    let profile = s.profile("busy.wprof");
    let wait = profile["cpu_wait_ns"].as_u64().expect("a wait is recorded");
    let wall = profile["wall_time"].as_u64().unwrap();
    assert!(wait * 5 > wall, "waited {wait} ns of {wall} ns");
    assert!(wait < wall, "waited {wait} ns of {wall} ns");
    let warning = "for a processor (a busy machine): time mode reads a wall clock";
    assert!(stderr(&out).contains(warning), "{}", stderr(&out));
    assert!(stdout(&s.run(&["report", "busy.wprof"])).contains(warning));
}

#[test]
fn only_time_mode_records_a_wait_for_a_processor() {
    let s = Scratch::new();
    std::fs::copy(sample("fib.wasm"), s.path("fib.wasm")).unwrap();
    for mode in ["stack", "sample", "time"] {
        let file = format!("{mode}.wprof");
        let out = s.run(&["run", "-q", "--mode", mode, "-o", &file, "fib.wasm"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let profile = s.profile(&file);
        assert_eq!(
            profile.get("cpu_wait_ns").is_some(),
            mode == "time",
            "{mode}: {}",
            profile
                .get("cpu_wait_ns")
                .unwrap_or(&serde_json::Value::Null)
        );
    }
}
