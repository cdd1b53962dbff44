//! WASI calls are made on the program's own thread, as the wasmtime CLI makes them, in
//! every mode and with profiling off: a file read does not hop to another thread and back.
//! Counted by the kernel, not timed: a hop makes the program's thread wait for the other
//! one (a voluntary context switch) at every call, so a program of 50,000 one-byte reads
//! would switch at least 50,000 times; on its own thread it switches a few hundred times
//! at most (start-up, the compiler's threads, a profiler's reader).

use std::process::Stdio;

use crate::support::Scratch;

/// Bytes in the file the module reads, one `fd_read` each.
const READS: u32 = 50_000;

/// Opens `bytes` in the folder preopened first (fd 3) and reads it one byte per `fd_read`
/// until the end; exits 0 when it read `READS` bytes, else 2 (cannot open), 3 (a read
/// failed) or 4 (another count).
fn reader() -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "bytes")
  (func $read_all (param $fd i32) (result i32)
    (local $count i32)
    (i32.store (i32.const 16) (i32.const 64))
    (i32.store (i32.const 20) (i32.const 1))
    (block $done
      (loop $next
        (if (call $fd_read (local.get $fd) (i32.const 16) (i32.const 1) (i32.const 32))
          (then (call $proc_exit (i32.const 3))))
        (br_if $done (i32.eqz (i32.load (i32.const 32))))
        (local.set $count (i32.add (local.get $count) (i32.const 1)))
        (br $next)))
    (local.get $count))
  (func (export "_start")
    (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 5)
                         (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 40))
      (then (call $proc_exit (i32.const 2))))
    (if (i32.ne (call $read_all (i32.load (i32.const 40))) (i32.const {READS}))
      (then (call $proc_exit (i32.const 4))))))"#
    ))
    .unwrap()
}

/// Runs `wprof run` with `args` before the module, `envs` set; its exit code, stderr and
/// voluntary context switches (all its threads, from `wait4`).
fn run_counted(s: &Scratch, envs: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String, u64) {
    let data = s.path("data");
    let module = s.path("reader.wasm");
    let dir = format!("{}::/data", data.display());
    let mut all = vec!["run", "-q", "--dir", &dir];
    all.extend(args);
    let module_arg = module.to_string_lossy().into_owned();
    all.push(&module_arg);
    let mut cmd = s.wprof(&all);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let usage = wprof::commands::bench::usage::wait(child).unwrap();
    (usage.code, err, usage.voluntary_switches)
}

fn scratch_with_data() -> Scratch {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("data")).unwrap();
    std::fs::write(s.path("data/bytes"), vec![b'x'; READS as usize]).unwrap();
    std::fs::write(s.path("reader.wasm"), reader()).unwrap();
    s
}

#[test]
fn file_reads_stay_on_the_programs_thread_with_profiling_off() {
    let s = scratch_with_data();
    let (code, err, switches) = run_counted(&s, &[("WPROF", "0")], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        switches < u64::from(READS) / 10,
        "WPROF=0: {switches} voluntary context switches for {READS} reads: \
         the reads hop to another thread"
    );
}

#[test]
fn file_reads_stay_on_the_programs_thread_in_every_mode() {
    for mode in ["stack", "sample", "time", "cost", "adaptive"] {
        let s = scratch_with_data();
        let out = s.path("reader.wprof").to_string_lossy().into_owned();
        let (code, err, switches) = run_counted(&s, &[], &["--mode", mode, "-o", &out]);
        assert_eq!(code, Some(0), "{mode} mode: {err}");
        assert!(
            switches < u64::from(READS) / 10,
            "{mode} mode: {switches} voluntary context switches for {READS} reads: \
             the reads hop to another thread"
        );
    }
}

#[test]
fn a_default_profile_charges_the_reads_to_fd_read() {
    let s = scratch_with_data();
    let out = s.path("reader.wprof").to_string_lossy().into_owned();
    let (code, err, _) = run_counted(&s, &[], &["-o", &out]);
    assert_eq!(code, Some(0), "{err}");
    let profile = wprof::profile::Profile::read(&s.path("reader.wprof")).unwrap();
    let fd_read = profile
        .functions
        .iter()
        .find(|f| f.name.ends_with("fd_read"))
        .unwrap_or_else(|| panic!("no fd_read in {:?}", profile.functions));
    assert_eq!(fd_read.calls, u64::from(READS) + 1, "{fd_read:?}");
    // The program does nothing but read: its time is the reads' (made on its thread, their
    // CPU time is its own, which stack mode's ticks measure).
    assert!(
        fd_read.self_time * 2 > profile.total,
        "fd_read {} of {} ns: {:?}",
        fd_read.self_time,
        profile.total,
        profile.functions
    );
    // The host's figures: calls and bytes counted, the time sampled (the import's own, on
    // the CPU and waiting), not read from clocks around every call.
    let host = profile
        .host_calls
        .iter()
        .find(|h| h.function == fd_read.id)
        .expect("fd_read's host figures");
    assert_eq!(host.figures.calls, u64::from(READS) + 1, "{host:?}");
    assert_eq!(host.figures.bytes, Some(u64::from(READS)), "{host:?}");
    assert_eq!(host.figures.wall_ns, fd_read.self_time, "{host:?}");
    assert!(host.figures.cpu_ns <= host.figures.wall_ns, "{host:?}");
}

/// `samples/host_io.wasm` with its stdin fed through a pipe in pieces, 20 ms apart, and its
/// stdout read through a pipe: its reads of stdin wait for data, its sleep (`poll_oneoff`,
/// 50 ms) waits for the clock, while a tick every 100 µs interrupts the program's thread
/// (stack mode's timer is the wall clock's). A signal must never fail a WASI call: the
/// program reads every byte, writes its 8,000 and exits 0, in every mode.
#[test]
fn ticks_never_fail_a_waiting_wasi_call() {
    use std::io::{Read, Write};
    const INPUT: usize = 12_345;
    for mode in ["stack", "sample", "time", "adaptive"] {
        let s = Scratch::new();
        let out = s.path("io.wprof").to_string_lossy().into_owned();
        let sample = crate::support::sample("host_io.wasm");
        let mut child = s
            .wprof(&[
                "run",
                "--mode",
                mode,
                "--sample-period-us",
                "100",
                "-o",
                &out,
            ])
            .arg(&sample)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            for piece in [4000, 3000, 5000, INPUT - 12_000] {
                std::thread::sleep(std::time::Duration::from_millis(20));
                stdin.write_all(&vec![b'x'; piece]).unwrap();
            }
        });
        let mut shown = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut shown)
            .unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        feeder.join().unwrap();
        assert_eq!(status.code(), Some(0), "{mode} mode: {err}");
        assert_eq!(shown.len(), 8000, "{mode} mode: {err}");
        let profile = wprof::profile::Profile::read(&s.path("io.wprof")).unwrap();
        let host = |name: &str| {
            profile
                .host_calls
                .iter()
                .find(|h| h.name.ends_with(name))
                .unwrap_or_else(|| panic!("{mode} mode: no {name}"))
                .figures
        };
        assert_eq!(host("fd_read").bytes, Some(INPUT as u64), "{mode} mode");
        assert_eq!(host("fd_write").bytes, Some(8000), "{mode} mode");
        // The sleep is the import's, and off the CPU, sampled (stack mode) or measured.
        let sleep = host("poll_oneoff");
        assert!(
            sleep.wall_ns >= 40_000_000 && sleep.off_cpu_ns() >= 30_000_000,
            "{mode} mode: {sleep:?}"
        );
    }
}
