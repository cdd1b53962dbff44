//! `wprof diff OLD NEW [--threshold PCT]` on cost-mode profiles of the same sample with more
//! and less work: the numbers, and the exit code as a CI regression gate.

use crate::formats::cost_profile;
use crate::support::*;

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap()
}

/// compress with 2 rounds (old) and 3 rounds (new): the per-round work grows by half.
fn two_profiles(s: &Scratch) -> (serde_json::Value, serde_json::Value) {
    let old = cost_profile(s, "compress.wasm", &["2"], "old.wprof");
    let new = cost_profile(s, "compress.wasm", &["3"], "new.wprof");
    (old, new)
}

/// The diff row of `name`: its whitespace-separated fields.
fn row<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.trim_end().ends_with(&format!("  {name}")))
        .unwrap_or_else(|| panic!("no row for {name}:\n{text}"))
        .split_whitespace()
        .collect()
}

#[test]
fn diff_shows_per_function_changes() {
    let s = Scratch::new();
    let (old, new) = two_profiles(&s);
    let out = s.run(&["diff", "old.wprof", "new.wprof"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no threshold, no gate: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    let (fo, fnew) = (function(&old, "find_match"), function(&new, "find_match"));
    let r = row(&text, "find_match");
    assert_eq!(r[0], u(&fo["self"]).to_string());
    assert_eq!(r[1], u(&fnew["self"]).to_string());
    let growth = (u(&fnew["self"]) as f64 - u(&fo["self"]) as f64) * 100.0 / u(&fo["self"]) as f64;
    assert_eq!(r[2], format!("{growth:+.2}%"));
    assert_eq!(r[3], u(&fo["inclusive"]).to_string());
    assert_eq!(r[4], u(&fnew["inclusive"]).to_string());
    assert_eq!(r[6], u(&fo["calls"]).to_string());
    assert_eq!(r[7], u(&fnew["calls"]).to_string());
    assert_eq!(r[8], format!("+{}", u(&fnew["calls"]) - u(&fo["calls"])));
    // The largest inclusive change comes first.
    let delta = |name: &str| {
        u(&function(&new, name)["inclusive"]) as i64 - u(&function(&old, name)["inclusive"]) as i64
    };
    let first = text
        .lines()
        .skip_while(|l| !l.contains("old self"))
        .nth(1)
        .unwrap();
    let first_name = first.split_whitespace().last().unwrap();
    for f in new["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        assert!(delta(first_name) >= delta(name), "{first_name} vs {name}");
    }
    assert!(text.contains(&format!("total: +{} ", u(&new["total"]) - u(&old["total"]))));
}

#[test]
fn diff_exit_code_gates_regressions() {
    let s = Scratch::new();
    let (old, new) = two_profiles(&s);
    // The work per round grows by half: past a 10% threshold, within a 100% one.
    let grew = (u(&new["total"]) as f64 / u(&old["total"]) as f64 - 1.0) * 100.0;
    assert!(grew > 10.0 && grew < 100.0, "{grew}");
    let out = s.run(&["diff", "old.wprof", "new.wprof", "--threshold", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let regressions = text.split("regressions past 10%").nth(1).unwrap();
    assert!(
        regressions.contains("  find_match: self +"),
        "{regressions}"
    );
    assert!(regressions.contains("  _start: "), "{regressions}");

    // Tiny helpers (a few instructions that double) are gated unless --min-share leaves
    // them out.
    let tiny = regressions
        .lines()
        .filter_map(|l| l.trim().split(':').next())
        .find(|name| {
            new["functions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == *name && u(&f["inclusive"]) * 100 < u(&new["total"]))
        })
        .expect("a small function regressed too")
        .to_string();
    let out = s.run(&[
        "diff",
        "old.wprof",
        "new.wprof",
        "--threshold",
        "10",
        "--min-share",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let gated = stdout(&out);
    let gated = gated.split("regressions past 10%").nth(1).unwrap();
    assert!(gated.contains("  find_match: "), "{gated}");
    assert!(
        !gated.contains(&format!("  {tiny}: ")),
        "{tiny} left out: {gated}"
    );

    let out = s.run(&["diff", "old.wprof", "new.wprof", "--threshold", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("no regression past 100%"));
    // Less work is never a regression, and a profile equals itself.
    let out = s.run(&["diff", "new.wprof", "old.wprof", "--threshold", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = s.run(&["diff", "old.wprof", "old.wprof", "--threshold", "0"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("functions unchanged"));
}

#[test]
fn diff_refuses_bad_input_with_exit_2() {
    let s = Scratch::new();
    cost_profile(&s, "fib.wasm", &[], "cost.wprof");
    let out = s.run(&[
        "run",
        "-q",
        "-o",
        "time.wprof",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    for args in [
        &["diff", "cost.wprof", "time.wprof"][..],
        &["diff", "cost.wprof", "missing.wprof"][..],
        &["diff", "cost.wprof", "cost.wprof", "--threshold", "-3"][..],
    ] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stdout(&out).is_empty());
        assert!(stderr(&out).contains("error"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn the_default_diff_fits_a_screen_and_says_what_it_left_out() {
    let s = Scratch::new();
    for (name, factor) in [("old.wasm", 1), ("new.wasm", 2)] {
        let module = crate::report::fifty_functions(&s, name, factor);
        let out = s.run(&["run", "-q", "--mode", "cost", module.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    // A function's row: ten columns, the last its name.
    let rows = |text: &str| {
        text.lines()
            .filter(|l| l.split_whitespace().count() == 10 && l.contains('%'))
            .count()
    };
    let default = stdout(&s.run(&["diff", "old.wprof", "new.wprof"]));
    assert_eq!(rows(&default), 30, "{default}");
    assert!(
        default.contains("... 21 more changed functions: `--top 0` shows all"),
        "{default}"
    );
    let all = stdout(&s.run(&["diff", "old.wprof", "new.wprof", "--top", "0"]));
    assert_eq!(rows(&all), 51, "{all}");
    assert!(!all.contains("more changed"), "{all}");
}
