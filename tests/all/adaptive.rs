//! Adaptive mode through the binary: on a program with a known hot path, the walk finds
//! it, counts stay exact, and the timed times agree with time mode's.

use serde_json::Value;

use crate::support::{calls, function, sample, stderr, stdout, Scratch};

/// The function names along a path of the adaptive record, hot spot first.
fn path_names(profile: &Value, path: &Value) -> Vec<String> {
    let contexts = profile["adaptive"]["contexts"].as_array().unwrap();
    path.as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let c = &contexts[i.as_u64().unwrap() as usize];
            let id = c["stack"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .as_u64()
                .unwrap();
            name_of(profile, id)
        })
        .collect()
}

fn name_of(profile: &Value, id: u64) -> String {
    profile["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .map(|f| f["name"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn the_hot_path_is_walked_and_timed_as_time_mode_times_it() {
    let s = Scratch::new();
    let m = sample("hot_path.wasm");
    let m = m.to_str().unwrap();
    let (out, cpu_per_wall) = s.run_measured(&[
        "run",
        "--mode",
        "adaptive",
        "--adaptive-calls",
        "50",
        "-o",
        "adaptive.wprof",
        m,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hot_path: checksum=ec8637e1\n");
    assert!(
        stderr(&out).contains("adaptive mode: 1 hot path walked"),
        "{}",
        stderr(&out)
    );
    let a = s.profile("adaptive.wprof");
    assert_eq!(a["mode"], "adaptive");
    // Exact counts everywhere, as in sample mode.
    for (name, n) in [
        ("_start", 1),
        ("outer", 100),
        ("middle", 400),
        ("hot", 2000),
        ("cold", 100),
        ("spin", 2100),
    ] {
        assert_eq!(calls(&a, name), n, "{name}");
    }
    // One walk: from $spin under $hot (the cold path is far below a hot spot) up towards
    // the root. $outer runs once every 2 ms, so its step takes about as long as the rest of
    // the program: whether the walk still reaches $_start before the program ends depends
    // on the machine's speed. $_start's only activation began before any timer, so it is
    // never timed.
    let record = &a["adaptive"];
    assert_eq!(record["calls_per_step"], 50);
    let paths = record["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 1, "{record}");
    let walked = path_names(&a, &paths[0]);
    assert_eq!(walked[..4], ["spin", "hot", "middle", "outer"], "{record}");
    assert!(walked.len() == 4 || walked[4] == "_start", "{record}");
    let contexts = record["contexts"].as_array().unwrap();
    let on_path: Vec<&Value> = paths[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &contexts[i.as_u64().unwrap() as usize])
        .collect();
    for (c, calls) in on_path.iter().zip([2000, 2000, 400, 100, 1]) {
        assert_eq!(c["calls"], calls, "{c}");
    }
    for c in &on_path[..4] {
        let timed = c["timed"].as_u64().unwrap();
        assert!((1..=100).contains(&timed), "{c}");
        assert!(c["min_ns"].as_u64() <= c["max_ns"].as_u64(), "{c}");
    }
    if let Some(start) = on_path.get(4) {
        assert_eq!(start["timed"], 0);
        assert!(start["inclusive_ns"].is_null());
    }

    // Time mode on the same program: each timed context's share of the run within 35% of
    // the function's share there (shares, not nanoseconds: two runs on a shared machine
    // differ in speed as a whole). On an idle 2-core VM on 2026-11-28 the timed shares came
    // out 0.87-1.32 of time mode's in 20 runs (within 10% on the days before): spin's
    // activations all do the same work, so the spread is adaptive mode's own, not yet
    // explained (the timers arm at the walker's tick). A timer that measured the wrong
    // activations (a callee's, self time only) is off by far more. Only when both runs had a core to themselves: timers read the wall clock, and
    // on a machine with more runnable threads than cores the activations timed just after
    // the sampler's tick (which arms the timers) wait for a core more often than the
    // others: measured with two busy loops beside the test on 2 cores, spin's timed share
    // was 0.89-1.54 of the run against 0.999.
    let (out, cpu_per_wall_time) =
        s.run_measured(&["run", "-q", "--mode", "time", "-o", "time.wprof", m]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = s.profile("time.wprof");
    let a_total = a["total"].as_f64().unwrap();
    let t_total = t["total"].as_f64().unwrap();
    let shares: Vec<(&str, f64, f64)> = on_path[..4]
        .iter()
        .zip(["spin", "hot", "middle", "outer"])
        .map(|(c, name)| {
            let timed = c["inclusive_ns"].as_f64().unwrap() / a_total;
            let truth = function(&t, name)["inclusive"].as_f64().unwrap() / t_total;
            (name, timed, truth)
        })
        .collect();
    if cpu_per_wall.min(cpu_per_wall_time) >= 0.9 {
        for (name, timed, truth) in shares {
            assert!(
                (timed / truth - 1.0).abs() <= 0.35,
                "{name}: {timed:.4} of the adaptive run, {truth:.4} of the time-mode run"
            );
        }
    } else {
        eprintln!(
            "a loaded machine (CPU per wall-clock second {cpu_per_wall:.2} and \
             {cpu_per_wall_time:.2}): shares not compared: {shares:?}"
        );
    }
    // The reports show the path.
    let out = s.run(&["report", "adaptive.wprof"]);
    let text = stdout(&out);
    assert!(
        text.contains("#1 _start > outer > middle > hot > spin"),
        "{text}"
    );
}

#[test]
fn adaptive_settings_resolve_and_refuse_live_switches() {
    let s = Scratch::new();
    let m = sample("fib.wasm");
    let m = m.to_str().unwrap();
    // The flag over the variable over the file.
    std::fs::write(
        s.path("wprof.toml"),
        "adaptive_calls = 7\nadaptive_timers = 2\n",
    )
    .unwrap();
    let out = s
        .wprof(&["config", "--mode", "adaptive", "--adaptive-timers", "3", m])
        .env("WPROF_ADAPTIVE_CALLS", "9")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(text.contains("adaptive_calls"), "{text}");
    let row = |key: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    assert!(
        row("adaptive_calls").contains("9")
            && row("adaptive_calls").contains("WPROF_ADAPTIVE_CALLS")
    );
    assert!(row("adaptive_timers").contains("3") && row("adaptive_timers").contains("flag"));
    // A bad value in the file: one line with file, line and key, exit 2.
    std::fs::write(s.path("wprof.toml"), "\nadaptive_timers = 0\n").unwrap();
    let out = s.run(&["run", "--mode", "adaptive", m]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("wprof.toml:2: adaptive_timers: 0 is not between 1 and 256"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(s.path("wprof.toml")).unwrap();
    // Live switches would share the timers' bytes: refused before anything runs.
    let out = s.run(&["run", "--mode", "adaptive", "--live", m]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
}
