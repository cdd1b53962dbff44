//! Threads that share one WASI context, as wasi-threads prescribes, through the binary:
//! `samples/shared_wasi.wasm` opens a file in its first thread and writes to it from a
//! spawned one, opens a file in a spawned thread and writes to it from the first, and ends
//! while a spawned thread sleeps 30 s, saying whether its own calls waited for the sleeper.
//! Its output is the same with profiling off, in every mode, and under wasi-threads' own
//! implementation (the wasmtime CLI 45 with `-S threads`).

use crate::support::{sample, stderr, stdout, Scratch};

const OUTPUT: &str = "thread write: 0\n\
                      thread open: 0\n\
                      shared.txt: written by a thread\n\
                      opened.txt: opened by a thread|and written by the first\n\
                      not held up\n";

/// `wprof run` in `mode`, its profile written to `MODE.wprof` (`None`: `WPROF=0`).
fn wprof_run(s: &Scratch, mode: Option<&str>) -> std::process::Command {
    match mode {
        Some(mode) => s.wprof(&["run", "-q", "--mode", mode, "-o", &format!("{mode}.wprof")]),
        None => {
            let mut cmd = s.wprof(&["run"]);
            cmd.env("WPROF", "0");
            cmd
        }
    }
}

/// Runs the sample under wprof in `mode` (`None`: `WPROF=0`), in a fresh directory of
/// `s` it writes its files into.
fn run(s: &Scratch, mode: Option<&str>) -> std::process::Output {
    let dir = s.path(mode.unwrap_or("off"));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let module = sample("shared_wasi.wasm");
    let mut cmd = wprof_run(s, mode);
    cmd.args(["--dir", dir, module.to_str().unwrap(), dir]);
    cmd.output().unwrap()
}

#[test]
fn every_thread_reaches_the_descriptors_of_every_other_in_every_mode() {
    let s = Scratch::new();
    let mut counted = std::collections::BTreeMap::new();
    for mode in [
        None,
        Some("stack"),
        Some("sample"),
        Some("time"),
        Some("cost"),
        Some("adaptive"),
    ] {
        let out = run(&s, mode);
        assert_eq!(out.status.code(), Some(0), "{mode:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), OUTPUT, "{mode:?}");
        if let Some(mode) = mode {
            let profile = s.profile(&format!("{mode}.wprof"));
            // The first thread, the two that finished; the sleeper is left running.
            assert_eq!(
                profile["threads"]["threads"].as_array().unwrap().len(),
                3,
                "{mode}"
            );
            assert_eq!(profile["threads"]["unfinished"], 1, "{mode}");
            // Every thread's WASI calls are counted, by the functions' figures and by the
            // host's, the same in every mode.
            for name in ["fd_write", "path_open"] {
                let name = format!("wasi_snapshot_preview1::{name}");
                let calls = crate::support::calls(&profile, &name);
                let host = profile["host_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|h| h["name"] == name.as_str())
                    .map_or(0, |h| h["calls"].as_u64().unwrap());
                assert_eq!(host, calls, "{mode} {name}");
                let first = *counted.entry(name.clone()).or_insert(calls);
                assert_eq!(calls, first, "{mode} {name}");
            }
        }
    }
    // Both spawned threads wrote once and the first thread opened 4 files; the program's
    // own count of its calls is the same with and without wprof.
    assert!(
        counted["wasi_snapshot_preview1::fd_write"] >= 3,
        "{counted:?}"
    );
    assert_eq!(
        counted["wasi_snapshot_preview1::path_open"], 5,
        "{counted:?}"
    );
}

#[test]
fn threaded_programs_end_as_under_the_wasmtime_cli_45() {
    let Some(cli) = crate::support::wasmtime_threads_cli() else {
        crate::tools::skip("WASMTIME_THREADS_CLI (the wasmtime CLI 45) is not set");
        return;
    };
    let s = Scratch::new();
    let dir = s.path("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(&cli)
        .args([
            "run",
            "-W",
            "threads=y,shared-memory=y",
            "-S",
            "threads=y",
            "--dir",
        ])
        .arg(&dir)
        .arg(sample("shared_wasi.wasm"))
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), OUTPUT);
    let ours = run(&s, Some("stack"));
    assert_eq!(stdout(&ours), stdout(&out));
    for name in ["shared.txt", "opened.txt"] {
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            std::fs::read(s.path("stack").join(name)).unwrap(),
            "{name}"
        );
    }
    // A thread that traps or exits ends the program with the code the CLI gives it.
    for how in ["", "trap", "exit"] {
        let threads = sample("threads.wasm");
        let reference = std::process::Command::new(&cli)
            .args(["run", "-W", "threads=y,shared-memory=y", "-S", "threads=y"])
            .arg(&threads)
            .args((!how.is_empty()).then_some(how))
            .output()
            .unwrap();
        let mut args = vec!["run", "-q", "-o", "t.wprof", threads.to_str().unwrap()];
        args.extend((!how.is_empty()).then_some(how));
        let ours = s.run(&args);
        assert_eq!(ours.status.code(), reference.status.code(), "threads {how}");
        assert_eq!(stdout(&ours), stdout(&reference), "threads {how}");
    }
}

/// The lines `pipe` gives, as they come, read on a thread of their own.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    said
}

/// The lines `said` gives up to `wanted`, waiting 20 s at most for it; `Err` with those
/// that came if it did not.
fn until(
    said: &std::sync::mpsc::Receiver<String>,
    wanted: &str,
) -> Result<Vec<String>, Vec<String>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some(wanted) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match said.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => return Err(seen),
        }
    }
    Ok(seen)
}

/// Runs `samples/stdin_threads.wasm` through `command` with stdin and stdout piped: writes
/// `hello` to its stdin once its spawned thread said `thread: ready` (which that thread
/// writes while the first thread waits for stdin). Its stdout and exit code, or why not:
/// the line never came (the thread's write waited for the first thread's read).
fn feed_after_ready(mut command: std::process::Command) -> Result<(String, Option<i32>), String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = lines_of(child.stdout.take().unwrap());
    let mut seen = match until(&said, "thread: ready") {
        Ok(seen) => seen,
        Err(seen) => {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            return Err(format!(
                "no `thread: ready` while the first thread waited for stdin (said {seen:?}); \
                 stderr: {}",
                stderr(&out)
            ));
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    seen.extend(said.iter());
    Ok((format!("{}\n", seen.join("\n")), status.code()))
}

#[test]
fn a_thread_waiting_for_stdin_does_not_hold_up_the_others_in_every_mode() {
    // The first thread's lines in its order; the spawned thread's wherever it came.
    let check = |(out, code): (String, Option<i32>), what: &str| {
        assert_eq!(code, Some(0), "{what}");
        let first: Vec<&str> = out.lines().filter(|l| *l != "thread: ready").collect();
        assert_eq!(
            first,
            [
                "poll: 0, clock 1",
                "stdin poll: 0, readable",
                "first thread read: hello"
            ],
            "{what}"
        );
        assert_eq!(out.lines().count(), 4, "{what}: {out}");
    };
    let s = Scratch::new();
    let module = sample("stdin_threads.wasm");
    for mode in [
        None,
        Some("stack"),
        Some("sample"),
        Some("time"),
        Some("cost"),
    ] {
        let mut command = wprof_run(&s, mode);
        command.arg(&module);
        let ran = feed_after_ready(command).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        check(ran, &format!("{mode:?}"));
    }
    // wasi-threads' own implementation behaves so.
    if let Some(cli) = crate::support::wasmtime_threads_cli() {
        let mut command = std::process::Command::new(cli);
        command
            .args(["run", "-W", "threads=y,shared-memory=y", "-S", "threads=y"])
            .arg(&module);
        check(feed_after_ready(command).unwrap(), "the wasmtime CLI 45");
    }
}

/// Runs `samples/stdout_threads.wasm` through `command` with stdout and stderr piped: reads
/// nothing of stdout until the first thread said `first: ready` on stderr (which it says
/// while its spawned thread's megabyte waits for a reader), then all of it. Its stdout, its
/// stderr and exit code, or why not: the line never came (the first thread's write waited
/// for the spawned thread's).
fn drain_after_ready(
    mut command: std::process::Command,
) -> Result<(Vec<u8>, String, Option<i32>), String> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = lines_of(child.stderr.take().unwrap());
    let mut seen = until(&said, "first: ready").map_err(|seen| {
        let _ = child.kill();
        let _ = child.wait();
        format!("no `first: ready` while the spawned thread's write waited (said {seen:?})")
    })?;
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let status = child.wait().unwrap();
    seen.extend(said.iter());
    Ok((out, seen.join("\n"), status.code()))
}

#[test]
fn a_thread_whose_write_waits_for_the_reader_does_not_hold_up_the_others_in_every_mode() {
    let check = |(out, err, code): (Vec<u8>, String, Option<i32>), what: &str| {
        assert_eq!(code, Some(0), "{what}: {err}");
        assert_eq!(out.len(), 1 << 20, "{what}");
        assert!(
            out.chunks(16).all(|c| c == b"0123456789abcdef"),
            "{what}: stdout is not the pattern"
        );
        let first: Vec<&str> = err.lines().filter(|l| l.starts_with("first:")).collect();
        assert_eq!(
            first,
            ["first: ready", "first: done (wrote 1048576)"],
            "{what}: {err}"
        );
    };
    let s = Scratch::new();
    let module = sample("stdout_threads.wasm");
    for mode in [
        None,
        Some("stack"),
        Some("sample"),
        Some("time"),
        Some("cost"),
    ] {
        let mut command = wprof_run(&s, mode);
        command.arg(&module);
        let ran = drain_after_ready(command).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        check(ran, &format!("{mode:?}"));
    }
    // wasi-threads' own implementation behaves so.
    if let Some(cli) = crate::support::wasmtime_threads_cli() {
        let mut command = std::process::Command::new(cli);
        command
            .args(["run", "-W", "threads=y,shared-memory=y", "-S", "threads=y"])
            .arg(&module);
        check(drain_after_ready(command).unwrap(), "the wasmtime CLI 45");
    }
}
