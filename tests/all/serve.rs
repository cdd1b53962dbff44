//! `wprof run --serve`: a running program's profile over HTTP, read by `go tool pprof` as
//! it reads a Go program's; the program and its profile file are as without it.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;

/// A GET of `path` from `address` (`HOST:PORT`): the status code and the body.
fn get(address: &str, path: &str) -> (u16, Vec<u8>) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..head_end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    (status, answer[head_end + 4..].to_vec())
}

#[test]
fn a_running_program_serves_windows_of_its_profile() {
    let s = Scratch::new();
    // The program runs a batch per read of its input, as long as lines come.
    let stop = Arc::new(AtomicBool::new(false));
    let (mut child, address, feeder, output) =
        serving(&s, "on_demand.wasm", &["-o", "served.wprof"], stop.clone());
    std::thread::sleep(Duration::from_millis(300));

    let (status, index) = get(&address, "/debug/pprof/");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&index).contains("/debug/pprof/profile?seconds=N"));
    assert_eq!(get(&address, "/debug/pprof/heap").0, 404);
    assert_eq!(get(&address, "/debug/pprof/profile?seconds=0").0, 400);
    let (status, window) = get(&address, "/debug/pprof/profile?seconds=1");
    assert_eq!(status, 200);
    assert_eq!(&window[..2], [0x1f, 0x8b], "gzip'd profile.proto");

    // As a Go program's endpoint is read: the tool asks for a window of N seconds.
    let url = format!("http://{address}/debug/pprof/profile");
    if let Some(mut go) = crate::tools::go_pprof(
        &s,
        "reading --serve's endpoint with `go tool pprof`",
        &["-top", "-sample_index=calls", "-seconds=1", &url],
    ) {
        let o = go.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        let calls = |name: &str| -> u64 {
            text.lines()
                .find(|l| l.split_whitespace().last() == Some(name))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        // In the window, every batch calls `work` 1000 times, each once `leaf` (a batch
        // cut by the window's ends counts its part). The tree is read node by node while
        // the program runs, about a million calls a second: a reader the machine pauses
        // between `work`'s node and `leaf`'s sees leaf a few hundred calls on (seen: 378 on
        // a busy CI machine), so the two agree within two batches' worth, as the batches do.
        let (batches, work, leaf) = (calls("batch"), calls("work"), calls("leaf"));
        assert!(batches > 10, "{text}");
        assert!(work.abs_diff(1000 * batches) <= 2000, "{text}");
        assert!(work.abs_diff(leaf) <= 2000, "{text}");
    }

    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    let out = output.join().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // One batch, and one `ok`, per read of the input.
    let batches = out.lines().count() as u64;
    assert!(batches > 10 && out.lines().all(|l| l == "ok"));
    // The profile file is the whole run's, as without --serve.
    let p = s.profile("served.wprof");
    assert_eq!(calls(&p, "batch"), batches);
    assert_eq!(calls(&p, "work"), 1000 * batches);
}

#[test]
fn a_bad_address_or_mode_is_one_line_and_exit_2() {
    let s = Scratch::new();
    for (args, says) in [
        (
            &["--serve", "nowhere"][..],
            "--serve nowhere: not an address",
        ),
        (
            &["--serve", "6060", "--mode", "time"][..],
            "needs an inline mode",
        ),
    ] {
        let out = s
            .wprof(&["run", "-o", "x.wprof"])
            .args(args)
            .arg(sample("on_demand.wasm"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.lines().count() == 1 && err.contains(says), "{err}");
        assert!(!s.path("x.wprof").exists());
    }
}

/// A `wprof run --serve` of `module` with `extra` flags, fed a line every millisecond
/// from a thread until `stop`: the child, the address it serves at, the feeder (which also
/// reads the child's stderr to its end, so that its summary has somewhere to go) and a
/// thread reading its stdout (so that the program never waits on a full pipe), which
/// returns it.
fn serving(
    s: &Scratch,
    module: &str,
    extra: &[&str],
    stop: Arc<AtomicBool>,
) -> (
    std::process::Child,
    String,
    std::thread::JoinHandle<()>,
    std::thread::JoinHandle<String>,
) {
    serving_path(s, &sample(module), extra, stop)
}

/// [`serving`] of the program at `path`.
fn serving_path(
    s: &Scratch,
    path: &std::path::Path,
    extra: &[&str],
    stop: Arc<AtomicBool>,
) -> (
    std::process::Child,
    String,
    std::thread::JoinHandle<()>,
    std::thread::JoinHandle<String>,
) {
    let mut child = s
        .wprof(&["run", "--serve", "127.0.0.1:0"])
        .args(extra)
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let address = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if stdin.write_all(b"x\n").and_then(|_| stdin.flush()).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(stdin);
        for _ in lines {}
    });
    let mut stdout = child.stdout.take().unwrap();
    let output = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    (child, address, feeder, output)
}

#[test]
fn with_allocs_the_blocks_so_far_are_served_as_gos_allocs_profile() {
    let s = Scratch::new();
    let stop = Arc::new(AtomicBool::new(false));
    let (mut child, address, feeder, output) = serving(
        &s,
        "alloc_loop.wasm",
        &["--allocs", "--mode", "cost", "-o", "a.wprof"],
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = get(&address, "/debug/pprof/allocs");
    assert_eq!(status, 200);
    std::fs::write(s.path("allocs.pb.gz"), &body).unwrap();
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    let out = output.join().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let reads = out.lines().count() as u64;
    // The whole run's file: a block per read, every tenth still live.
    let p = s.profile("a.wprof");
    let a = &p["allocations"];
    let objects = a["objects"].as_u64().unwrap();
    assert!(objects >= reads, "{a}");
    let Some(served) =
        crate::tools::pprof_top(&s, "allocs.pb.gz", &["-sample_index=alloc_objects"])
    else {
        return;
    };
    // So far, when asked: `store`'s blocks, a part of the run's; live ones one in ten.
    let so_far = served["store"].1;
    assert!(so_far > 10 && so_far <= reads, "{so_far} of {reads}");
    let live =
        crate::tools::pprof_top(&s, "allocs.pb.gz", &["-sample_index=inuse_objects"]).unwrap();
    assert_eq!(
        live["store"].1,
        so_far.div_ceil(10),
        "{so_far} blocks so far"
    );
    // Without --allocs there is no such endpoint.
    let stop = Arc::new(AtomicBool::new(false));
    let (mut child, address, feeder, output) =
        serving(&s, "alloc_loop.wasm", &["-o", "b.wprof"], stop.clone());
    assert_eq!(get(&address, "/debug/pprof/allocs").0, 404);
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    output.join().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_component_serves_windows_of_its_modules_profile() {
    let s = Scratch::new();
    let path = s.path("on_demand_component.wasm");
    std::fs::write(&path, componentize(&sample("on_demand.wasm"))).unwrap();
    for mode in ["sample", "cost", "adaptive"] {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut child, address, feeder, output) =
            serving_path(&s, &path, &["--mode", mode, "-o", "c.wprof"], stop.clone());
        std::thread::sleep(Duration::from_millis(300));
        let (status, window) = get(&address, "/debug/pprof/profile?seconds=1");
        assert_eq!(status, 200, "{mode}");
        assert_eq!(&window[..2], [0x1f, 0x8b], "gzip'd profile.proto");
        let mut proto = Vec::new();
        flate2::read::GzDecoder::new(&window[..])
            .read_to_end(&mut proto)
            .unwrap();
        // The window names the main module's functions as the profile does.
        let text = String::from_utf8_lossy(&proto);
        assert!(
            text.contains("main!work") && text.contains("main!batch"),
            "{mode}"
        );
        if let Some(mut go) = crate::tools::go_pprof(
            &s,
            "reading --serve's endpoint with `go tool pprof`",
            &["-top", "-sample_index=calls", "window.pb.gz"],
        ) {
            std::fs::write(s.path("window.pb.gz"), &window).unwrap();
            let o = go.output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            let text = stdout(&o);
            let calls = |name: &str| -> u64 {
                text.lines()
                    .find(|l| l.split_whitespace().last() == Some(name))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            };
            let (batches, work) = (calls("main!batch"), calls("main!work"));
            assert!(batches > 10, "{mode}: {text}");
            assert!(work.abs_diff(1000 * batches) <= 2000, "{mode}: {text}");
        }
        stop.store(true, Ordering::Relaxed);
        feeder.join().unwrap();
        let out = output.join().unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0), "{mode}");
        // The profile file is the whole run's, as without --serve.
        let batches = out.lines().count() as u64;
        assert_eq!(
            calls(&s.profile("c.wprof"), "main!batch"),
            batches,
            "{mode}"
        );
    }
}

#[test]
fn a_component_with_allocs_serves_its_modules_blocks_so_far() {
    let s = Scratch::new();
    let path = s.path("alloc_loop_component.wasm");
    std::fs::write(&path, componentize(&sample("alloc_loop.wasm"))).unwrap();
    for mode in ["sample", "cost"] {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut child, address, feeder, output) = serving_path(
            &s,
            &path,
            &["--allocs", "--mode", mode, "-o", "a.wprof"],
            stop.clone(),
        );
        std::thread::sleep(Duration::from_millis(500));
        let (status, body) = get(&address, "/debug/pprof/allocs");
        assert_eq!(status, 200, "{mode}: {}", String::from_utf8_lossy(&body));
        let mut proto = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut proto)
            .unwrap();
        assert!(
            String::from_utf8_lossy(&proto).contains("main!store"),
            "{mode}"
        );
        std::fs::write(s.path("allocs.pb.gz"), &body).unwrap();
        stop.store(true, Ordering::Relaxed);
        feeder.join().unwrap();
        let reads = output.join().unwrap().lines().count() as u64;
        assert_eq!(child.wait().unwrap().code(), Some(0), "{mode}");
        let Some(served) =
            crate::tools::pprof_top(&s, "allocs.pb.gz", &["-sample_index=alloc_objects"])
        else {
            continue;
        };
        // So far, when asked: `store`'s blocks, a part of the run's; live ones one in ten.
        let so_far = served["main!store"].1;
        assert!(
            so_far > 10 && so_far <= reads,
            "{mode}: {so_far} of {reads}"
        );
        let live =
            crate::tools::pprof_top(&s, "allocs.pb.gz", &["-sample_index=inuse_objects"]).unwrap();
        assert_eq!(live["main!store"].1, so_far.div_ceil(10), "{mode}");
    }
}
