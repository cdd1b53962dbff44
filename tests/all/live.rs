//! Live probes through the binary: `wprof ctl` to another process, the configuration file
//! edited while the program runs, switches that start off, and what the profile records.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{sample, stderr, stdout, Scratch};

/// A `wprof run --live` of `on_demand.wasm`, fed one line per batch.
struct LiveRun {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
}

impl LiveRun {
    fn start(s: &Scratch, extra: &[&str], config: Option<&std::path::Path>) -> Self {
        match config {
            Some(path) => Self::start_with(s, extra, &[("WPROF_CONFIG", path.to_str().unwrap())]),
            None => Self::start_with(s, extra, &[]),
        }
    }

    /// [`LiveRun::start`] with variables `env` set.
    fn start_with(s: &Scratch, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let m = sample("on_demand.wasm");
        let mut args = vec!["run", "--live", "-q", "-o", "live.wprof"];
        args.extend_from_slice(extra);
        args.push(m.to_str().unwrap());
        let mut cmd = s.wprof(&args);
        cmd.envs(env.iter().copied());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().unwrap());
        LiveRun {
            child,
            input,
            output,
        }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Runs one batch (1000 calls of $work) and waits for it to finish.
    fn batch(&mut self) {
        let input = self.input.as_mut().unwrap();
        input.write_all(b"go\n").unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert_eq!(line, "ok\n");
    }

    /// Ends the input; the program's exit code and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.input.take());
        let out = self.child.wait_with_output().unwrap();
        (out.status.code(), stderr(&out))
    }
}

/// `wprof ctl` with the scratch's cache.
fn ctl(s: &Scratch, args: &[&str]) -> std::process::Output {
    let mut all = vec!["ctl"];
    all.extend_from_slice(args);
    s.run(&all)
}

/// Waits until the run's control socket answers (the program has started). If it never
/// does, the run is stopped and what it said goes in the failure, with the last answer of
/// `wprof ctl` and what the control directory holds.
fn wait_ready(s: &Scratch, run: &mut LiveRun) {
    let until = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < until {
        let out = ctl(s, &[&run.pid(), "status"]);
        if out.status.success() {
            return;
        }
        last = format!("{}{}", stdout(&out), stderr(&out));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = run.child.kill();
    let mut said = String::new();
    if let Some(mut err) = run.child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut said);
    }
    let control: Vec<String> = std::fs::read_dir(s.cache_dir().join("control"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    panic!(
        "the live run never answered; its stderr: {said:?}; the last `wprof ctl`: {last:?}; \
         control directory: {control:?}"
    );
}

fn calls_of(profile: &Value, name: &str) -> u64 {
    profile["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .map_or(0, |f| f["calls"].as_u64().unwrap())
}

#[test]
fn ctl_turns_another_process_probes_off_and_on_in_every_mode() {
    for mode in ["sample", "time", "cost"] {
        let s = Scratch::new();
        let mut run = LiveRun::start(&s, &["--mode", mode], None);
        wait_ready(&s, &mut run);
        run.batch();
        let off = ctl(&s, &[&run.pid(), "off", "work"]);
        assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
        assert!(stdout(&off).contains("1 turned off"), "{}", stdout(&off));
        let status = ctl(&s, &[&run.pid()]);
        assert!(
            stdout(&status).contains("1 of 4 functions off: work"),
            "{}",
            stdout(&status)
        );
        // Listed among the live runs.
        assert!(stdout(&ctl(&s, &[])).contains(&format!("{}: ", run.pid())));
        run.batch();
        let on = ctl(&s, &[&run.pid(), "on", "/^wo/"]);
        assert_eq!(on.status.code(), Some(0), "{}", stderr(&on));
        // A pattern that matches nothing is refused, and logged nowhere.
        let none = ctl(&s, &[&run.pid(), "off", "nothing_matches_this"]);
        assert_eq!(none.status.code(), Some(1));
        run.batch();
        let pid = run.pid();
        let (code, err) = run.finish();
        assert_eq!(code, Some(0), "{err}");
        let p = s.profile("live.wprof");
        // Counted in the first and third batches only; $leaf all along.
        assert_eq!(calls_of(&p, "work"), 2000, "{mode}");
        assert_eq!(calls_of(&p, "leaf"), 3000, "{mode}");
        assert_eq!(calls_of(&p, "batch"), 3, "{mode}");
        let live = &p["live"];
        let changes = live["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 2, "{live}");
        assert_eq!(changes[0]["on"], false);
        assert_eq!(changes[0]["source"], "ctl");
        assert_eq!(changes[1]["what"], "/^wo/");
        let switched = live["switched"].as_array().unwrap();
        assert_eq!(switched.len(), 1);
        assert_eq!(switched[0]["name"], "work");
        let on = switched[0]["on"].as_array().unwrap();
        // On from the start to the first change, and from the second to the end.
        assert_eq!(on.len(), 2, "{live}");
        assert_eq!(on[0][0], 0);
        assert_eq!(on[0][1], changes[0]["at_ns"]);
        assert_eq!(on[1][0], changes[1]["at_ns"]);
        // The text report says what was switched when.
        let report = stdout(&s.run(&["report", "live.wprof"]));
        assert!(
            report.contains("live probes: 2 changes; 1 function off part of the run"),
            "{report}"
        );
        assert!(report.contains("off work (1 function, ctl)"), "{report}");
        assert!(report.contains("  work on for "), "{report}");
        // The socket went with the run.
        let socket = s.cache_dir().join("control").join(format!("{pid}.sock"));
        assert!(!socket.exists());
    }
}

#[test]
fn editing_the_configuration_file_turns_switches_while_the_program_runs() {
    let s = Scratch::new();
    // Not in the working directory, where `wprof ctl` would read it too.
    std::fs::create_dir(s.path("etc")).unwrap();
    let config = s.path("etc/wprof.toml");
    std::fs::write(&config, "mode = \"cost\"\n").unwrap();
    let mut run = LiveRun::start(&s, &[], Some(&config));
    wait_ready(&s, &mut run);
    run.batch();
    // As an editor saves: a new file renamed over the old one.
    let replace = |text: &str| {
        let aside = s.path("etc/wprof.toml.new");
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, &config).unwrap();
    };
    let pid = run.pid();
    let wait_for = |want: &str| {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let out = ctl(&s, &[&pid, "status"]);
            let status = format!("{}{}", stdout(&out), stderr(&out));
            if status.contains(want) {
                return;
            }
            assert!(Instant::now() < until, "never {want:?}: {status}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    replace("mode = \"cost\"\n[[module]]\nname = \"on_demand*\"\noff = [\"work\", \"leaf\"]\n");
    wait_for("2 of 4 functions off");
    run.batch();
    // A file that no longer reads: one warning, nothing changes.
    replace("off = [\"[\"]\n");
    std::thread::sleep(Duration::from_millis(300));
    wait_for("2 of 4 functions off");
    replace("mode = \"cost\"\n[[module]]\nname = \"on_demand*\"\noff = [\"leaf\"]\n");
    wait_for("1 of 4 functions off: leaf");
    run.batch();
    let (code, err) = run.finish();
    assert_eq!(code, Some(0));
    assert_eq!(
        err.matches("the switches stay as they are").count(),
        1,
        "{err}"
    );
    let p = s.profile("live.wprof");
    assert_eq!(p["mode"], "cost");
    assert_eq!(calls_of(&p, "work"), 2000);
    assert_eq!(calls_of(&p, "leaf"), 1000);
    let changes = p["live"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(changes
        .iter()
        .all(|c| c["source"].as_str().unwrap().ends_with("wprof.toml")));
}

#[test]
fn switches_can_start_off_and_ctl_refuses_what_it_cannot_do() {
    let s = Scratch::new();
    let mut run = LiveRun::start(&s, &["--off", "*"], None);
    wait_ready(&s, &mut run);
    run.batch();
    assert_eq!(ctl(&s, &[&run.pid(), "on", "batch"]).status.code(), Some(0));
    run.batch();
    let (code, _) = run.finish();
    assert_eq!(code, Some(0));
    let p = s.profile("live.wprof");
    assert_eq!(calls_of(&p, "work"), 0);
    assert_eq!(calls_of(&p, "_start"), 0);
    assert_eq!(calls_of(&p, "batch"), 1);
    let changes = p["live"]["changes"].as_array().unwrap();
    assert_eq!(changes[0]["source"], "start");
    assert_eq!(changes[0]["functions"], 4);
    // No such run; a bad pattern: one line, exit 2.
    let gone = ctl(&s, &["1", "status"]);
    assert_eq!(gone.status.code(), Some(2));
    assert!(
        stderr(&gone).starts_with("wprof: error: no live run 1"),
        "{}",
        stderr(&gone)
    );
    let bad = ctl(&s, &["1", "off", "/(/"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr(&bad).lines().count(), 1, "{}", stderr(&bad));
}

#[test]
fn traps_in_either_copy_of_a_live_function_name_the_original_offsets() {
    // The same backtrace with every switch on (the probed copy traps), every switch off (the
    // original copy traps) and without --live.
    let s = Scratch::new();
    std::fs::copy(sample("deep_trap.wasm"), s.path("deep_trap.wasm")).unwrap();
    let backtrace = |args: &[&str]| {
        let out = s.run(&[&["run", "-q"], args, &["deep_trap.wasm"]].concat());
        assert_eq!(out.status.code(), Some(134));
        let err = stderr(&out);
        assert!(err.contains("    0:     0x68 - <unknown>!down"), "{err}");
        err
    };
    let plain = backtrace(&[]);
    for mode in ["sample", "time", "cost"] {
        assert_eq!(backtrace(&["--live", "--mode", mode]), plain, "{mode}");
        assert_eq!(backtrace(&["--off", "*", "--mode", mode]), plain, "{mode}");
    }
}

#[test]
fn with_every_switch_off_sample_mode_stops_ticking() {
    let s = Scratch::new();
    let m = sample("interp.wasm");
    let m = m.to_str().unwrap();
    let on = s.run(&["run", "-q", "--live", "-o", "on.wprof", m]);
    assert_eq!(on.status.code(), Some(0), "{}", stderr(&on));
    let off = s.run(&["run", "--live", "--off", "*", "-o", "off.wprof", m]);
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    // The program's output is the same.
    assert_eq!(stdout(&on), stdout(&off));
    let on = s.profile("on.wprof");
    let off_profile = s.profile("off.wprof");
    let ticks = |p: &Value| p["sampling"]["answered"].as_u64().unwrap();
    // With switches on the timer interrupts the program every 200 µs; with every switch off
    // it sleeps from the sampler's first reading on (a few ticks may come before it, more
    // if the machine keeps the sampler from running).
    assert!(ticks(&on) >= 100, "{}", on["sampling"]);
    assert!(
        ticks(&off_profile) * 10 <= ticks(&on),
        "off: {}, on: {}",
        off_profile["sampling"],
        on["sampling"]
    );
    // The time with every switch off is said, and charged to nothing.
    let off_ns = off_profile["sampling"]["off_ns"].as_u64().unwrap();
    let wall = off_profile["wall_time"].as_u64().unwrap();
    assert!(off_ns * 2 >= wall, "off {off_ns} of {wall} ns");
    // Meanwhile the sampler reads every 5 ms, not every period: a reading per
    // millisecond would be 5 times as many.
    let readings = off_profile["sampling"]["readings"].as_u64().unwrap();
    assert!(
        readings * 1_000_000 <= wall + 20_000_000,
        "{readings} readings in {wall} ns"
    );
    assert!(off_profile["total"].as_u64().unwrap() < wall - off_ns / 2);
    assert!(
        stderr(&off).contains("more with every live switch off, not sampled"),
        "{}",
        stderr(&off)
    );
}

#[test]
fn ctl_called_as_the_run_starts_waits_for_its_program() {
    let s = Scratch::new();
    // Preparing takes a second and a half longer, as a large module's would.
    let mut run = LiveRun::start_with(
        &s,
        &["--mode", "cost"],
        &[("WPROF_TEST_SLOW_PREPARE_MS", "1500")],
    );
    // Its control socket comes first thing; a loaded machine may start the process late.
    let socket = s
        .cache_dir()
        .join("control")
        .join(format!("{}.sock", run.pid()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Without waiting: the run answers that it is preparing.
    let early = ctl(&s, &[&run.pid(), "--wait", "0", "status"]);
    assert_eq!(early.status.code(), Some(1), "{}", stderr(&early));
    assert!(
        stderr(&early).contains("still preparing"),
        "{}",
        stderr(&early)
    );
    // Waiting (the default): done once the program starts.
    let out = ctl(&s, &[&run.pid(), "off", "work"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 turned off"), "{}", stdout(&out));
    run.batch();
    let (code, err) = run.finish();
    assert_eq!(code, Some(0), "{err}");
    let p = s.profile("live.wprof");
    // Off before the program started: never counted.
    assert_eq!(calls_of(&p, "work"), 0);
    assert_eq!(calls_of(&p, "batch"), 1);
}
