//! `wprof annotate`: source lines with exact counts and instructions, from a `--coverage`
//! profile and the module's DWARF.

use crate::support::*;

/// `(runs, instructions)` of the row whose source text is `text`, in an annotation.
pub fn row(annotation: &str, text: &str) -> (u64, u64) {
    let line = annotation
        .lines()
        .find(|l| l.split_once(" | ").is_some_and(|(_, t)| t.trim() == text))
        .unwrap_or_else(|| panic!("no line `{text}` in:\n{annotation}"));
    let numbers: Vec<u64> = line
        .split(" | ")
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    (numbers[0], numbers[1])
}

/// `wprof annotate ARGS`' output (it must succeed).
pub fn annotate(s: &Scratch, args: &[&str]) -> String {
    let mut all = vec!["annotate"];
    all.extend_from_slice(args);
    let out = s.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

/// Runs bundled sample `module` (with `args`) with block counts in `mode`, profile to `file`.
pub fn coverage_run(s: &Scratch, mode: &str, file: &str, module: &str, args: &[&str]) {
    let out = s
        .wprof(&["run", "-q", "--coverage", "--mode", mode, "-o", file])
        .arg(sample(module))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn lines_carry_the_counts_known_by_construction() {
    let s = Scratch::new();
    for mode in ["cost", "sample"] {
        let file = format!("{mode}.wprof");
        coverage_run(&s, mode, &file, "wasi_storm.wasm", &[]);
        let main = annotate(&s, &[&file, "__original_main"]);
        assert!(main.starts_with("wprof annotate: "), "{main}");
        assert_eq!(row(&main, "tick();").0, 200_000, "{mode}");
        assert_eq!(row(&main, "line(i);").0, 20_000, "{mode}");
        let tick = annotate(&s, &[&file, "tick"]);
        assert_eq!(row(&tick, "clock_gettime(CLOCK_MONOTONIC, &t);").0, 200_000);
        assert!(tick.contains("tick: 200000 calls"), "{tick}");
    }
}

#[test]
fn a_functions_lines_add_up_to_its_cost() {
    let s = Scratch::new();
    coverage_run(&s, "cost", "c.wprof", "compress.wasm", &["1"]);
    let p = s.profile("c.wprof");
    // Every function with block counts (a regex matching all of them).
    let all = annotate(&s, &["c.wprof", "."]);
    let mut checked = 0;
    for f in p["functions"].as_array().unwrap() {
        if f["kind"] != "local" {
            continue;
        }
        let name = f["name"].as_str().unwrap();
        let header = format!(
            "{name}: {} calls, {} wasm instructions ran",
            f["calls"], f["self"]
        );
        assert!(all.contains(&header), "{header} not in:\n{all}");
        checked += 1;
    }
    assert!(checked > 5, "{checked}");
}

#[test]
fn a_profile_without_block_counts_or_a_name_that_matches_nothing_is_one_line() {
    let s = Scratch::new();
    let out = s
        .wprof(&["run", "-q", "--mode", "cost", "-o", "plain.wprof"])
        .arg(sample("fib.wasm"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let o = s.run(&["annotate", "plain.wprof"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("wprof run --coverage"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    coverage_run(&s, "cost", "c.wprof", "fib.wasm", &[]);
    let o = s.run(&["annotate", "c.wprof", "no_such_function"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no function"), "{}", stderr(&o));
    // Without DWARF (a WAT sample): the blocks and their instructions.
    let text = stdout(&s.run(&["annotate", "c.wprof", "fib"]));
    assert!(text.contains("no DWARF: by basic block"), "{text}");
    assert!(text.contains("Call"), "{text}");
}

/// The first number on the line of `text` whose source is `source` (`1,234` or `1234`).
fn cost_beside(text: &str, source: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_end().ends_with(source))
        .unwrap_or_else(|| panic!("no `{source}` in:\n{text}"));
    line.split_whitespace()
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no number on `{line}`"))
}

#[test]
fn callgrind_and_pprof_carry_the_same_line_costs_to_their_tools() {
    let s = Scratch::new();
    coverage_run(&s, "cost", "c.wprof", "wasi_storm.wasm", &[]);
    let main = annotate(&s, &["c.wprof", "__original_main"]);
    let (_, wanted) = row(&main, "line(i);");
    assert!(wanted > 0, "{main}");

    let o = s.run(&[
        "report",
        "c.wprof",
        "--format",
        "callgrind",
        "-o",
        "callgrind.out.c",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    if let Some(tool) = crate::tools::tool("callgrind_annotate", "reading --format callgrind") {
        let o = std::process::Command::new(tool)
            .current_dir(s.dir.path())
            .args(["--auto=yes", "callgrind.out.c"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(cost_beside(&stdout(&o), "line(i);"), wanted);
    }

    let o = s.run(&["report", "c.wprof", "--format", "pprof", "-o", "c.pb.gz"]);
    assert!(o.status.success(), "{}", stderr(&o));
    if let Some(mut go) = crate::tools::go_pprof(
        &s,
        "reading --format pprof with `go tool pprof`",
        &["-list", "^__original_main$", "c.pb.gz"],
    ) {
        let o = go.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(cost_beside(&stdout(&o), "line(i);"), wanted);
        // By function, the totals stay the profile's.
        let top = crate::tools::pprof_top(&s, "c.pb.gz", &[]).unwrap();
        let p = s.profile("c.wprof");
        for f in p["functions"].as_array().unwrap() {
            let name = f["name"].as_str().unwrap();
            if let Some(row) = top.get(name) {
                assert_eq!(row.0, f["self"].as_u64().unwrap(), "{name}");
            }
        }
    }
}

#[test]
fn a_default_profile_annotates_its_sampled_time_per_line() {
    // Stack mode keeps the time samples found at each source line: `find_match` (the
    // compressor's hot function, its helper `hash4` inlined) has its time at its own lines,
    // and annotate shows them with their source, without `--coverage` and without the
    // module (the lines are in the profile; the source is read where DWARF says).
    let s = Scratch::new();
    let out = s
        .wprof(&["run", "-q", "-o", "s.wprof"])
        .arg(sample("compress.wasm"))
        .arg("8")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("s.wprof");
    assert_eq!(p["mode"], "stack");
    let find_match = function(&p, "find_match");
    let id = find_match["id"].as_u64().unwrap();
    let lines = p["lines"]["lines"].as_array().expect("sampled lines");
    let own: Vec<&serde_json::Value> = lines.iter().filter(|l| l["function"] == id).collect();
    assert!(!own.is_empty(), "{lines:?}");
    for line in &own {
        assert!(
            line["file"].as_str().unwrap().ends_with("compress.c"),
            "{line}"
        );
        // `hash4` (125-128) and `find_match` (138-161).
        let n = line["line"].as_u64().unwrap();
        assert!((125..=161).contains(&n), "{line}");
    }
    let at_lines: u64 = own.iter().map(|l| l["self_ns"].as_u64().unwrap()).sum();
    let own_self = find_match["self"].as_u64().unwrap();
    assert!(
        at_lines * 10 >= own_self * 7 && at_lines <= own_self,
        "{at_lines} of {own_self}"
    );
    let text = annotate(&s, &["s.wprof", "find_match"]);
    assert!(text.contains("sampled time per line"), "{text}");
    assert!(text.contains("find_match: "), "{text}");
    let hottest = own
        .iter()
        .max_by_key(|l| l["self_ns"].as_u64().unwrap())
        .unwrap();
    let row = format!("{:>6}: ", hottest["line"]);
    let shown = text
        .lines()
        .find(|l| l.contains(&row))
        .unwrap_or_else(|| panic!("no line {row} in:\n{text}"));
    assert!(shown.contains('%'), "{shown}");
    // The run's summary says where to read them.
    let out = s
        .wprof(&["run", "-o", "t.wprof"])
        .arg(sample("compress.wasm"))
        .arg("1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains("time per source line: `wprof annotate t.wprof`"),
        "{said}"
    );
}

#[test]
fn a_default_profile_carries_its_sampled_lines_to_pprof_and_callgrind() {
    // The sampled time per line goes where the tools read lines: pprof's locations (`go
    // tool pprof -lines` lists find_match's lines, adding up to its self time),
    // callgrind's cost lines and the HTML report's source; the module is not needed (it is
    // deleted first; the source is read where DWARF says).
    let s = Scratch::new();
    let module = s.dir.path().join("compress.wasm");
    std::fs::copy(sample("compress.wasm"), &module).unwrap();
    let out = s
        .wprof(&["run", "-q", "-o", "s.wprof"])
        .arg(&module)
        .arg("8")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_file(&module).unwrap();
    let p = s.profile("s.wprof");
    let find_match = function(&p, "find_match");
    let own_self = find_match["self"].as_u64().unwrap();
    assert!(own_self > 0, "{find_match}");

    let o = s.run(&["report", "s.wprof", "--format", "callgrind", "-o", "cg.out"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cg = std::fs::read_to_string(s.dir.path().join("cg.out")).unwrap();
    // find_match's block: its cost lines (`line cost`) up to its first call line (its name
    // is given once, at its first mention, `(N) find_match`; `fn=(N)` after).
    let named = cg
        .lines()
        .find_map(|l| l.split_once('=')?.1.strip_suffix(" find_match"))
        .unwrap_or_else(|| panic!("{cg}"));
    let block: Vec<&str> = cg
        .lines()
        .skip_while(|l| l.strip_prefix("fn=").is_none_or(|f| !f.starts_with(named)))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("cfi=") && !l.starts_with("cfn="))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    let numbers: Vec<(u64, u64)> = block
        .iter()
        .map(|l| {
            let mut f = l.split_whitespace().map(|n| n.parse::<u64>().unwrap());
            (f.next().unwrap(), f.next().unwrap())
        })
        .collect();
    assert!(numbers.len() > 1, "{block:?}");
    assert_eq!(
        numbers.iter().map(|n| n.1).sum::<u64>(),
        own_self,
        "{block:?}"
    );
    assert!(
        numbers
            .iter()
            .any(|&(n, c)| (138..=161).contains(&n) && c > 0),
        "{block:?}"
    );

    // The HTML report's function page: the source with each line's time (its data).
    let o = s.run(&["report", "s.wprof", "--format", "html", "-o", "s.html"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = html_function_page(&s.path("s.html"), "find_match");
    let ann = page["ann"].as_array().unwrap();
    let shown: u64 = ann.iter().map(|l| l[1].as_u64().unwrap()).sum();
    assert!(shown > 0 && shown <= own_self, "{ann:?}");
    assert!(
        ann.iter()
            .any(|l| l[2].as_str().unwrap().contains("find_match(")),
        "{ann:?}"
    );

    let o = s.run(&["report", "s.wprof", "--format", "pprof", "-o", "s.pb.gz"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let Some(rows) = crate::tools::pprof_lines_of(&s, "s.pb.gz", "find_match") else {
        return;
    };
    assert!(rows.len() > 1, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), own_self, "{rows:?}");
    assert!(
        rows.iter().any(|(name, _)| {
            let line = name.rsplit(':').next().unwrap().parse::<u64>().unwrap_or(0);
            name.contains("compress.c:") && (138..=161).contains(&line)
        }),
        "{rows:?}"
    );
}
