//! `wprof report` on a real profile.

use crate::support::*;

fn fib_profile(s: &Scratch) {
    // Raw times keep fib (the call storm) the most expensive function by far.
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "time",
        "--keep-overhead",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn text_report_has_flat_profile_and_call_graph() {
    let s = Scratch::new();
    fib_profile(&s);
    let out = s.run(&["report", "fib.wprof"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let flat = text.split("Callers and callees").next().unwrap();
    // fib is the most expensive by self time: the first row of the flat profile.
    let first_row = flat
        .lines()
        .skip_while(|l| !l.contains("self%"))
        .nth(1)
        .unwrap();
    assert!(first_row.trim_end().ends_with(" fib"), "{first_row}");
    assert!(first_row.contains("242785"));
    assert!(text.contains("called by fib"));
    assert!(text.contains("calls     wasi_snapshot_preview1::fd_write"));
    let top = stdout(&s.run(&["report", "fib.wprof", "--top", "1"]));
    assert!(!top.split("Callers").next().unwrap().contains("_start"));
}

#[test]
fn the_profile_file_is_compressed_json_that_zstd_and_report_json_read() {
    let s = Scratch::new();
    fib_profile(&s);
    let file = std::fs::read(s.path("fib.wprof")).unwrap();
    assert!(file.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]), "a zstd frame");
    let printed: serde_json::Value =
        serde_json::from_slice(&s.run(&["report", "fib.wprof", "--format", "json"]).stdout)
            .unwrap();
    assert_eq!(printed, s.profile("fib.wprof"));
    let pretty = serde_json::to_vec_pretty(&printed).unwrap();
    assert!(
        file.len() * 4 <= pretty.len(),
        "{} of {}",
        file.len(),
        pretty.len()
    );
    // The reader scripts would use: the zstd command line.
    if let Some(zstd) = crate::tools::tool("zstd", "decompressing a profile file") {
        let out = std::process::Command::new(zstd)
            .args(["-dc", s.path("fib.wprof").to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
            printed
        );
    }
    // A profile written before the compression (pretty JSON) still reads.
    std::fs::write(s.path("old.wprof"), &pretty).unwrap();
    let old = s.run(&["report", "old.wprof", "--format", "json"]);
    assert_eq!(old.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&old.stdout).unwrap(),
        printed
    );
}

#[test]
fn json_report_has_the_stable_schema() {
    let s = Scratch::new();
    fib_profile(&s);
    let out = s.run(&["report", "fib.wprof", "--format", "json", "-o", "fib.json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("fib.json")).unwrap()).unwrap();
    for key in [
        "format_version",
        "module",
        "mode",
        "unit",
        "exit_code",
        "instrumentation",
        "functions",
        "edges",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert!(v["module"]["path"].as_str().unwrap().ends_with("fib.wasm"));
    assert_eq!(v["module"]["blake3"].as_str().unwrap().len(), 64);
    for key in [
        "functions_total",
        "functions_instrumented",
        "functions_from_cache",
        "module_from_cache",
    ] {
        assert!(v["instrumentation"].get(key).is_some(), "missing {key}");
    }
    let f = &v["functions"][0];
    for key in [
        "id",
        "name",
        "kind",
        "calls",
        "self",
        "inclusive",
        "min_self",
        "max_self",
    ] {
        assert!(f.get(key).is_some(), "missing functions[].{key}");
    }
    let root_edge = v["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["caller"].is_null())
        .unwrap();
    for key in ["caller", "callee", "calls", "inclusive"] {
        assert!(root_edge.get(key).is_some(), "missing edges[].{key}");
    }
}

/// A cost-mode profile of fib: the same numbers on every run.
pub fn fib_cost_profile(s: &Scratch) -> serde_json::Value {
    let out = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        "-o",
        "fibc.wprof",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    s.profile("fibc.wprof")
}

/// The rows of a cost-mode flat profile: (name, calls, self, inclusive, min self, max self),
/// min and max being `-` (cost mode counts per context, not per activation).
fn flat_rows(text: &str) -> Vec<(String, u64, u64, u64, String, String)> {
    text.lines()
        .skip_while(|l| !l.contains("self%"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("..."))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| fields[i].parse::<u64>().unwrap();
            let name = fields[7..].join(" ");
            let name = name.trim_end_matches(" [import]").to_string();
            (name, n(4), n(0), n(2), fields[5].into(), fields[6].into())
        })
        .collect()
}

#[test]
fn text_report_sorts_filters_and_cuts() {
    let s = Scratch::new();
    let p = fib_cost_profile(&s);
    let report = |args: &[&str]| {
        let mut all = vec!["report", "fibc.wprof"];
        all.extend_from_slice(args);
        let out = s.run(&all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    // Every function, with the profile's numbers.
    let rows = flat_rows(&report(&[]));
    assert_eq!(rows.len(), p["functions"].as_array().unwrap().len());
    for (name, calls, self_, incl, min, max) in &rows {
        let f = function(&p, name);
        assert_eq!(
            (*calls, *self_, *incl, min.as_str(), max.as_str()),
            (
                f["calls"].as_u64().unwrap(),
                f["self"].as_u64().unwrap(),
                f["inclusive"].as_u64().unwrap(),
                "-",
                "-"
            ),
            "{name}"
        );
    }
    let column = |rows: &[(String, u64, u64, u64, String, String)], k: usize| -> Vec<u64> {
        rows.iter().map(|r| [r.1, r.2, r.3][k]).collect::<Vec<_>>()
    };
    let descending = |v: &[u64]| v.windows(2).all(|w| w[0] >= w[1]);
    assert!(descending(&column(&rows, 1)), "default: by self");
    let by_incl = flat_rows(&report(&["--sort", "inclusive"]));
    assert!(descending(&column(&by_incl, 2)));
    assert_eq!(by_incl[0].0, "_start");
    let by_calls = flat_rows(&report(&["--sort", "calls"]));
    assert!(descending(&column(&by_calls, 0)));
    assert_eq!(by_calls[0].0, "fib");
    let by_name: Vec<String> = flat_rows(&report(&["--sort", "name"]))
        .into_iter()
        .map(|r| r.0)
        .collect();
    let mut sorted = by_name.clone();
    sorted.sort();
    assert_eq!(by_name, sorted);
    assert_ne!(
        by_name[0], rows[0].0,
        "name order differs from self order here"
    );

    // --filter keeps the matching functions, in the flat profile and the call graph.
    let text = report(&["--filter", "^(fib|print)$"]);
    let names: Vec<String> = flat_rows(&text).into_iter().map(|r| r.0).collect();
    assert_eq!(names, vec!["fib".to_string(), "print".to_string()]);
    let graph = text.split("Callers and callees").nth(1).unwrap();
    assert!(graph.lines().any(|l| l.starts_with("fib  (")));
    assert!(!graph.lines().any(|l| l.starts_with("_start  (")));
    assert!(graph.contains("called by _start"), "{graph}");
    // --top cuts after sorting.
    let top2 = flat_rows(&report(&["--sort", "inclusive", "--top", "2"]));
    assert_eq!(top2.len(), 2);
    assert_eq!(top2[..], by_incl[..2]);
    let none = report(&["--filter", "^no such function$"]);
    assert!(none.contains("(no function matches)"));
}

#[test]
fn text_report_shares_of_inclusive_time() {
    let s = Scratch::new();
    let p = fib_cost_profile(&s);
    let text = stdout(&s.run(&["report", "fibc.wprof", "--filter", "^_start$"]));
    let incl = function(&p, "_start")["inclusive"].as_u64().unwrap();
    let (start, fib) = (
        function(&p, "_start")["id"].clone(),
        function(&p, "fib")["id"].clone(),
    );
    let edge = p["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["caller"] == start && e["callee"] == fib)
        .unwrap();
    // _start's line for fib shows the edge's calls and its share of _start's inclusive cost.
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("calls     fib "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(&format!(" {} calls", edge["calls"])),
        "{line}"
    );
    let share = edge["inclusive"].as_u64().unwrap() as f64 * 100.0 / incl as f64;
    assert!(share > 50.0, "fib is most of _start");
    assert!(
        line.trim_end().ends_with(&format!("{share:.2}%")),
        "{line} vs {share:.2}%"
    );
}

#[test]
fn bad_regex_is_one_line_and_exit_2() {
    let s = Scratch::new();
    fib_cost_profile(&s);
    let out = s.run(&["report", "fibc.wprof", "--filter", "(unclosed"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    assert!(stderr(&out).contains("--filter"), "{}", stderr(&out));
}

/// A module whose `_start` calls 50 functions, `$fK` looping K times `factor`: known
/// costs, many functions.
pub fn fifty_functions(s: &Scratch, name: &str, factor: u32) -> std::path::PathBuf {
    let mut wat = String::from("(module\n");
    for k in 1..=50 {
        wat.push_str(&format!(
            "(func $f{k} (local i32) (local.set 0 (i32.const {}))
               (loop $l (local.set 0 (i32.sub (local.get 0) (i32.const 1)))
                 (br_if $l (local.get 0))))\n",
            k * factor
        ));
    }
    wat.push_str("(func (export \"_start\")");
    for k in 1..=50 {
        wat.push_str(&format!(" (call $f{k})"));
    }
    wat.push_str("))");
    s.wat_module(name, &wat)
}

#[test]
fn the_default_text_report_fits_a_screen_and_says_what_it_left_out() {
    let s = Scratch::new();
    let module = fifty_functions(&s, "fifty.wasm", 1);
    let out = s.run(&["run", "-q", "--mode", "cost", module.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let default = stdout(&s.run(&["report", "fifty.wprof"]));
    let rows = flat_rows(&default);
    // 51 functions; the largest 30 do not make 95% of the cost, so the cap holds.
    assert_eq!(rows.len(), 30, "{default}");
    assert_eq!(rows[0].0, "f50");
    assert!(default.contains("top 30 of 51"), "{default}");
    let left_out = default
        .lines()
        .find(|l| l.starts_with("... 21 more functions with "))
        .unwrap_or_else(|| panic!("no line for what was left out:\n{default}"));
    assert!(left_out.contains("`--top 0` shows all"), "{left_out}");
    // `_start` calls 50 functions: the five largest, then one line for the rest.
    let start = stdout(&s.run(&["report", "fifty.wprof", "--filter", "^_start$"]));
    assert_eq!(start.matches("    calls     f").count(), 5, "{start}");
    assert!(start.contains("    ... 45 more callees with "), "{start}");
    let all = stdout(&s.run(&["report", "fifty.wprof", "--top", "0"]));
    assert_eq!(flat_rows(&all).len(), 51);
    assert!(!all.contains("more function"), "{all}");
    assert!(!all.contains("more callees"), "{all}");
    assert_eq!(all.matches("    calls     f").count(), 50);
    // In another order the default is the first 30.
    let by_name = stdout(&s.run(&["report", "fifty.wprof", "--sort", "name"]));
    assert_eq!(flat_rows(&by_name).len(), 30);
    // A profile that fits is shown whole, with no such line.
    fib_profile(&s);
    let fib = stdout(&s.run(&["report", "fib.wprof"]));
    assert!(!fib.contains("more function"), "{fib}");
}

/// `wprof report --help` describes every format `--format` takes, and no other.
#[test]
fn report_help_describes_every_format() {
    use clap::ValueEnum;
    let s = Scratch::new();
    let help = stdout(&s.run(&["report", "--help"]));
    let names: Vec<String> = wprof::report::Format::value_variants()
        .iter()
        .filter_map(|f| f.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    // The table's rows: two spaces, a name, two or more spaces.
    let rows: Vec<&str> = help
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_lowercase()))
        .filter_map(|l| l.split_once("  ").map(|(name, _)| name))
        .filter(|name| !name.contains(' '))
        .collect();
    for name in &names {
        assert!(
            rows.contains(&name.as_str()),
            "no row for {name} in:\n{help}"
        );
    }
    for row in &rows {
        assert!(
            names.iter().any(|n| n == row),
            "{row} is not a format:\n{help}"
        );
    }
}
