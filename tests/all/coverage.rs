//! `wprof run --coverage`: exact block counts in every inline mode, the coverage and lcov
//! reports (lcov read by `genhtml`), runs that add up, and the block map from the cache.

use serde_json::Value;

use crate::support::*;
use crate::tools::tool;

/// `$count(10)` loops ten times and calls `$odd` on odd iterations; `$never` never runs.
const COUNTER: &str = r#"
(module
  (func $count (param $n i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.and (local.get $i) (i32.const 1))
          (then (call $odd)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))
  (func $odd)
  (func $never (drop (i32.const 1)))
  (func (export "_start") (call $count (i32.const 10))))
"#;

/// Runs `wprof ARGS MODULE`, which must exit 0; returns its stderr.
fn run_ok(s: &Scratch, args: &[&str], module: &std::path::Path) -> String {
    let out = s.wprof(args).arg(module).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

/// `wprof ARGS` must exit 2 with one line saying `needle`.
fn refused(s: &Scratch, args: &[&str], needle: &str) {
    let out = s.run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
}

/// The coverage record of function `name`: (block starts, counts).
fn blocks(profile: &Value, name: &str) -> (Vec<u64>, Vec<u64>) {
    let f = profile["coverage"]["functions"]
        .as_array()
        .expect("the profile has coverage")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no coverage of {name}"));
    let list = |key: &str| -> Vec<u64> {
        f[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    (list("starts"), list("counts"))
}

/// Each probed function's first block ran once per call.
fn assert_first_blocks_are_calls(p: &Value) {
    for f in p["functions"].as_array().unwrap() {
        if f["kind"] == "local" {
            let name = f["name"].as_str().unwrap();
            assert_eq!(blocks(p, name).1[0], f["calls"].as_u64().unwrap(), "{name}");
        }
    }
}

#[test]
fn block_counts_are_exact_in_every_inline_mode() {
    let s = Scratch::new();
    let module = s.wat_module("counter.wasm", COUNTER);
    for mode in ["sample", "cost", "adaptive"] {
        let profile = format!("{mode}.wprof");
        let err = run_ok(
            &s,
            &["run", "--coverage", "--mode", mode, "-o", &profile],
            &module,
        );
        assert!(
            err.contains("wprof: coverage: 9 of 12 basic blocks ran (75.0%), in 3 of 4"),
            "{mode}: {err}"
        );
        let p = s.profile(&profile);
        // One block per straight line: `block`, `loop`, the test at the loop's head (11
        // times: 10 iterations and the way out), the `if` (10), its `then` (5), the rest of
        // the iteration (10), the loop's `end` after `br` and the block's `end` (never
        // reached: the `br_if` leaves past it), the function's `end`.
        let (starts, counts) = blocks(&p, "count");
        assert_eq!(counts, vec![1, 1, 11, 10, 5, 10, 0, 0, 1], "{mode}");
        assert_eq!(starts.len(), counts.len());
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
        assert_eq!(blocks(&p, "odd").1, vec![5]);
        assert_eq!(blocks(&p, "never").1, vec![0]);
        assert_first_blocks_are_calls(&p);
        let report = s.run(&["report", "--format", "coverage", &profile]);
        assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
        let text = stdout(&report);
        assert!(text.contains("Never called (1):\n  never\n"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["9", "7", "77.8%", "1", "count"]),
            "{text}"
        );
    }
    // Time mode counts no blocks: one line, exit 2, nothing run.
    let time = [
        "run",
        "--coverage",
        "--mode",
        "time",
        module.to_str().unwrap(),
    ];
    refused(
        &s,
        &time,
        "coverage (flag) counts blocks in the inline modes",
    );
    // Nor does a profile made without --coverage have any.
    run_ok(&s, &["run", "-o", "plain.wprof"], &module);
    refused(
        &s,
        &["report", "--format", "coverage", "plain.wprof"],
        "no coverage",
    );
}

#[test]
fn runs_add_up_and_the_block_map_comes_from_the_cache() {
    let s = Scratch::new();
    let module = s.wat_module("counter.wasm", COUNTER);
    let run = |profile: &str| run_ok(&s, &["run", "--coverage", "-o", profile], &module);
    assert!(run("a.wprof").contains("4 instrumented now"));
    // The second run instruments nothing: its block map is the cache's.
    assert!(run("b.wprof").contains("0 instrumented now"));
    assert_eq!(
        s.profile("a.wprof")["coverage"],
        s.profile("b.wprof")["coverage"]
    );
    // Added up: a.wprof and b.wprof's counts, twice each block's.
    let report = s.run(&["report", "--format", "coverage", "a.wprof", "b.wprof"]);
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    assert!(
        stdout(&report)
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["1", "1", "100.0%", "10", "odd"]),
        "{}",
        stdout(&report)
    );
    // Only coverage adds up, only profiles of one module, only profiles with coverage.
    refused(
        &s,
        &["report", "a.wprof", "b.wprof"],
        "coverage formats only",
    );
    let other = s.wat_module("other.wasm", "(module (func (export \"_start\")))");
    run_ok(&s, &["run", "--coverage", "-o", "other.wprof"], &other);
    let mixed = ["report", "--format", "coverage", "a.wprof", "other.wprof"];
    refused(&s, &mixed, "another module");
    run_ok(&s, &["run", "-o", "plain.wprof"], &module);
    let without = ["report", "--format", "lcov", "a.wprof", "plain.wprof"];
    refused(&s, &without, "plain.wprof holds no coverage");
}

#[test]
fn lcov_of_a_c_program_is_read_by_genhtml() {
    let Some(genhtml) = tool("genhtml", "reading --format lcov") else {
        return;
    };
    let s = Scratch::new();
    let module = sample("compress.wasm");
    for profile in ["one.wprof", "two.wprof"] {
        run_ok(&s, &["run", "--coverage", "-o", profile], &module);
    }
    let out = s.run(&[
        "report",
        "--format",
        "lcov",
        "-o",
        "app.info",
        "one.wprof",
        "two.wprof",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let info = std::fs::read_to_string(s.path("app.info")).unwrap();
    // The program's own file is found beside the module, wherever it was built.
    let record = info
        .split("end_of_record\n")
        .find(|r| r.contains("/compress.c\n"))
        .unwrap_or_else(|| panic!("no record of compress.c in\n{info}"));
    let source = record.lines().find_map(|l| l.strip_prefix("SF:")).unwrap();
    assert!(std::path::Path::new(source).exists(), "{source}");
    // Two runs: twice find_match's calls in one.
    let calls = calls(&s.profile("one.wprof"), "find_match");
    assert!(
        record.contains(&format!("FNDA:{},find_match\n", 2 * calls)),
        "{record}"
    );
    // genhtml reads it all (sources of the C library may be missing on this machine) and
    // finds the totals the tracefile says.
    let total = |key: &str| -> u64 {
        info.lines()
            .filter_map(|l| l.strip_prefix(key))
            .map(|n| n.parse::<u64>().unwrap())
            .sum()
    };
    let (lines, hit) = (total("LF:"), total("LH:"));
    let html = s.path("html");
    let out = std::process::Command::new(genhtml)
        .current_dir(s.dir.path())
        .args(["--ignore-errors", "source", "-o"])
        .arg(&html)
        .arg("app.info")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("({hit} of {lines} lines)")),
        "{}",
        stdout(&out)
    );
    assert!(html.join("index.html").exists());
}

#[test]
fn coverage_comes_from_the_flag_the_variable_or_the_file() {
    let s = Scratch::new();
    let module = s.wat_module("counter.wasm", COUNTER);
    let m = module.to_str().unwrap();
    let resolved = |args: &[&str], envs: &[(&str, &str)]| {
        let mut cmd = s.wprof(&[&["config", "--json"], args, &[m]].concat());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        (
            v["coverage"]["value"].as_bool().unwrap(),
            v["coverage"]["source"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(resolved(&[], &[]), (false, "default".into()));
    std::fs::write(s.path("wprof.toml"), "coverage = true\n").unwrap();
    assert_eq!(resolved(&[], &[]), (true, "wprof.toml:1".into()));
    let off = [("WPROF_COVERAGE", "0")];
    assert_eq!(resolved(&[], &off), (false, "WPROF_COVERAGE".into()));
    assert_eq!(resolved(&["--coverage"], &off), (true, "flag".into()));
    // The text form shows it too, and a run does what it says.
    let text = s.run(&["config", m]);
    assert!(stdout(&text).contains("coverage"), "{}", stdout(&text));
    run_ok(&s, &["run", "-q", "-o", "file.wprof"], &module);
    assert_eq!(blocks(&s.profile("file.wprof"), "odd").1, vec![5]);
}

/// The counters are read however the program ends: a trap (exit 134) or `proc_exit`.
#[test]
fn coverage_survives_a_trap_and_proc_exit() {
    let s = Scratch::new();
    for (name, code) in [("trap.wasm", 134), ("exit_code.wasm", 3)] {
        let profile = format!("{name}.wprof");
        let out = s
            .wprof(&["run", "--coverage", "-o", &profile])
            .arg(sample(name))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{name}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("wprof: coverage: "),
            "{}",
            stderr(&out)
        );
        let p = s.profile(&profile);
        assert_first_blocks_are_calls(&p);
    }
}
