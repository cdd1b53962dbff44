//! Go modules (`GOOS=wasip1 GOARCH=wasm`): Go's own names and files from the module's
//! symbol table, as Go's stack traces show them. The modules are
//! `bench/programs/src/go_calls.go` built by two Go versions (`bash bench/programs/build.sh
//! --small`, which `.ci/run` runs); without them the tests say so and pass, unless
//! `WPROF_REQUIRE_TOOLS` is set.

use std::path::PathBuf;
use std::process::Command;

use crate::formats::report_to;
use crate::support::*;
use crate::tools::tool;

/// The modules: `go_calls.wasm` (the pinned Go) and `go_calls_go121.wasm` (Go 1.21).
pub fn go_modules() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench");
    let modules: Vec<PathBuf> = ["go_calls.wasm", "go_calls_go121.wasm"]
        .iter()
        .map(|m| dir.join(m))
        .collect();
    if modules.iter().all(|m| m.is_file()) {
        return modules;
    }
    if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
        panic!("the Go modules are required (WPROF_REQUIRE_TOOLS): run `bash bench/programs/build.sh --small`");
    }
    crate::tools::skip(&format!(
        "no Go modules in {} (bash bench/programs/build.sh --small)",
        dir.display()
    ));
    Vec::new()
}

/// The frames of Go's panic trace on `stderr`: `(function, file, line)`.
fn panic_frames(stderr: &str) -> Vec<(String, String, u32)> {
    let mut lines = stderr
        .lines()
        .skip_while(|l| !l.starts_with("goroutine 1 ["))
        .skip(1);
    let mut frames = Vec::new();
    while let (Some(call), Some(place)) = (lines.next(), lines.next()) {
        let (Some(open), Some(place)) = (call.rfind('('), place.strip_prefix('\t')) else {
            break;
        };
        let place = place.split(' ').next().unwrap();
        let (file, line) = place.rsplit_once(':').unwrap();
        frames.push((
            call[..open].to_string(),
            file.to_string(),
            line.parse().unwrap(),
        ));
    }
    frames
}

/// The line of go_calls.go where Go function `name` (`main.f`, `main.(*T).m`) is declared.
fn declaration_line(name: &str) -> u32 {
    let source = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/programs/src/go_calls.go"),
    )
    .unwrap();
    let (receiver, function) = match name.strip_prefix("main.(*") {
        Some(rest) => {
            let (t, m) = rest.split_once(").").unwrap();
            (Some(format!("*{t})")), m)
        }
        None => (None, name.strip_prefix("main.").unwrap()),
    };
    let at = source
        .lines()
        .position(|l| {
            l.starts_with("func ")
                && l.contains(&format!(" {function}("))
                && receiver.as_ref().is_none_or(|r| l.contains(r.as_str()))
        })
        .unwrap_or_else(|| panic!("{name} is not declared in go_calls.go"));
    at as u32 + 1
}

#[test]
fn names_and_files_as_go_prints_them_in_a_panic() {
    for module in go_modules() {
        let s = Scratch::new();
        let path = module.to_str().unwrap();
        let o = s.run(&["run", "--mode", "cost", "-o", "p.wprof", path, "panic"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("panic: boom at 7"), "{err}");
        let frames = panic_frames(&err);
        let names: Vec<&str> = frames.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["main.(*counter).boom", "main.main"], "{err}");

        // The text report: Go's names, each with the line of its `func`.
        let text = stdout(&s.run(&["report", "p.wprof", "--top", "0"]));
        for (name, file, _) in &frames {
            let short = file.rsplit('/').next().unwrap();
            let shown = format!("{name}  [{short}:{}]", declaration_line(name));
            assert!(
                text.contains(&shown),
                "{}: no {shown:?} in\n{text}",
                module.display()
            );
        }
        // The module's own name of a function stays out of sight; the summary uses Go's.
        assert!(!text.contains("main.__counter_.boom"), "{text}");
        assert!(err.contains("main.(*counter).boom"), "{err}");

        // go tool pprof: the file as Go's trace shows it.
        report_to(&s, "p.wprof", "pprof", "p.pb.gz");
        if let Some(mut go) = crate::tools::go_pprof(
            &s,
            "reading --format pprof with `go tool pprof`",
            &["-top", "-lines", "-nodefraction=0", "p.pb.gz"],
        ) {
            let o = go.output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            let top = stdout(&o);
            for (name, file, _) in &frames {
                let row = top
                    .lines()
                    .find(|l| l.contains(&format!(" {name} ")))
                    .unwrap_or_else(|| panic!("no {name} in\n{top}"));
                let place = format!("{file}:{}", declaration_line(name));
                assert!(row.trim_end().ends_with(&place), "{row} (want {place})");
            }
        }
    }
}

/// Calls of go_calls.go by construction: (caller, callee, calls), callers as the name
/// section names them (the profile's own names).
const CALLS: [(&str, &str, u64); 3] = [
    ("main.worker", "main.step", 200),
    ("main.step", "main.__counter_.add", 200),
    ("main.__counter_.add", "main.__counter_.bump", 200),
];

#[test]
fn calls_are_exact_across_goroutine_switches_in_every_mode() {
    for module in go_modules() {
        let s = Scratch::new();
        // Stack mode counts at the call sites what the probed modes count at entries.
        for mode in ["sample", "cost", "adaptive", "time", "stack"] {
            let out = format!("{mode}.wprof");
            let path = module.to_str().unwrap();
            let o = s.run(&["run", "-q", "--mode", mode, "-o", &out, path]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            assert_eq!(stdout(&o), "sum 23400\n");
            let p = s.profile(&out);
            let at = format!("{} in {mode} mode", module.display());
            // Each worker yields and blocks inside every call: each call is still one.
            assert_eq!(calls(&p, "main.worker"), 8, "{at}");
            assert_eq!(calls(&p, "main.main"), 1, "{at}");
            for (caller, callee, n) in CALLS {
                assert_eq!(calls(&p, callee), n, "{callee}, {at}");
                assert_eq!(
                    edge_calls(&p, Some(caller), callee),
                    n,
                    "{caller} -> {callee}, {at}"
                );
            }
            // The work resumed after a switch stays under its real caller: a worker's
            // whole inclusive cost is under the goroutine's start, none of it under the
            // scheduler's loop directly.
            assert_eq!(
                edge_calls(&p, Some("wasm_pc_f_loop"), "main.step"),
                0,
                "{at}"
            );
            assert_eq!(
                edge_calls(&p, Some("wasm_pc_f_loop"), "main.__counter_.add"),
                0,
                "{at}"
            );

            if mode == "stack" {
                // It has no probes to select.
                continue;
            }
            // Go's names select functions; those left without probes switch goroutines
            // unseen, and the probed ones still count exactly.
            let only = ["run", "-q", "--mode", mode, "--only", "main.(*counter).*"];
            let o = s.run(&[&only[..], &["-o", "only.wprof", path]].concat());
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let p = s.profile("only.wprof");
            assert_eq!(calls(&p, "main.__counter_.add"), 200, "--only, {at}");
            assert_eq!(calls(&p, "main.__counter_.bump"), 200, "--only, {at}");
            let probed = p["functions"].as_array().unwrap();
            assert!(
                !probed.iter().any(|f| f["name"] == "main.step"),
                "--only, {at}"
            );
        }
    }
}

/// The first file named `name` under `dir`.
fn find_file(dir: &std::path::Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// The line of go_calls.go holding `text`.
fn line_of(text: &str) -> u32 {
    let source = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/programs/src/go_calls.go"),
    )
    .unwrap();
    source
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no {text:?} in go_calls.go")) as u32
        + 1
}

#[test]
fn coverage_lines_from_go_s_line_table_as_the_program_runs_them() {
    for module in go_modules() {
        let s = Scratch::new();
        let path = module.to_str().unwrap();
        let o = s.run(&["run", "-q", "--coverage", "-o", "c.wprof", path]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        report_to(&s, "c.wprof", "lcov", "c.info");
        let info = std::fs::read_to_string(s.path("c.info")).unwrap();
        let record = info
            .split("end_of_record")
            .find(|r| r.contains("SF:gocalls/main.go"))
            .unwrap_or_else(|| panic!("no gocalls/main.go in\n{info}"));
        let da = |line: u32| -> u64 {
            let prefix = format!("DA:{line},");
            let row = record
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no line {line} in\n{record}"));
            row[prefix.len()..].parse().unwrap()
        };
        let at = module.display();
        // By construction: 8 workers, 25 steps each, every step switched out twice.
        assert_eq!(da(line_of("c.n += k")), 200, "{at}");
        assert_eq!(da(line_of("ch <- c.add(k)")), 200, "{at}");
        assert_eq!(da(line_of("for i := 0; i < 25; i++")), 8 * 26, "{at}");
        assert_eq!(da(line_of("step(ch, c, i+1)")), 200, "{at}");
        assert_eq!(da(line_of("for w := 0; w < 8; w++")), 9, "{at}");
        assert_eq!(da(line_of("(&counter{n: 7}).boom()")), 0, "{at}");
        assert!(
            record.contains("FNDA:200,main.(*counter).add\n"),
            "{record}"
        );
        assert!(record.contains("FNDA:8,main.worker\n"), "{record}");

        // genhtml reads it, with the source where the table says it is.
        if let Some(genhtml) = tool("genhtml", "reading --format lcov") {
            std::fs::create_dir_all(s.path("gocalls")).unwrap();
            std::fs::copy(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/programs/src/go_calls.go"),
                s.path("gocalls/main.go"),
            )
            .unwrap();
            let out = Command::new(genhtml)
                .current_dir(s.dir.path())
                .args(["--ignore-errors", "source", "-o", "html", "c.info"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            // genhtml names the page after the source's path, less the common prefix.
            let page = find_file(&s.path("html"), "main.go.gcov.html")
                .unwrap_or_else(|| panic!("no page of main.go: {}", stdout(&out)));
            let page = std::fs::read_to_string(page).unwrap();
            assert!(page.contains("c.n += k"), "the page shows the source");
        }
    }
}

#[test]
fn time_per_line_from_go_s_line_table_in_the_default_mode() {
    // main.burn's second loop does three times the work of its first. Go's loops jump back
    // through the function's dispatch, where most of a tight loop's samples land: shared
    // among the lines jumped to, the loops' lines hold the function's time, split about
    // 1:3. The module is deleted before the reports, and the source is found under
    // --source-path at the tail of the path Go's table recorded (`gocalls/main.go`).
    let source =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/programs/src/go_calls.go");
    for module in go_modules() {
        let s = Scratch::new();
        let copy = s.path("app.wasm");
        std::fs::copy(&module, &copy).unwrap();
        let o = s
            .wprof(&["run", "-q", "-o", "b.wprof"])
            .arg(&copy)
            .arg("burn")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).starts_with("burn "), "{}", stdout(&o));
        std::fs::remove_file(&copy).unwrap();
        std::fs::create_dir_all(s.path("src/gocalls")).unwrap();
        std::fs::copy(&source, s.path("src/gocalls/main.go")).unwrap();
        let p = s.profile("b.wprof");
        let burn = function(&p, "main.burn");
        let own_self = burn["self"].as_u64().unwrap();

        let o = s.run(&["annotate", "b.wprof", "main.burn", "--source-path", "src"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        let at = module.display();
        assert!(
            text.contains("Go: "),
            "{at}: the dispatch's share is said\n{text}"
        );
        assert!(
            text.contains("// second loop"),
            "{at}: the source is shown\n{text}"
        );
        // `  283.55 ms  21.9%     60: <source>`: each sampled line's share of the function.
        let share = |lines: std::ops::RangeInclusive<u32>| -> f64 {
            text.lines()
                .filter_map(|l| {
                    let (head, _) = l.split_once(": ")?;
                    let mut f = head.split_whitespace().rev();
                    let line: u32 = f.next()?.parse().ok()?;
                    let share: f64 = f.next()?.strip_suffix('%')?.parse().ok()?;
                    lines.contains(&line).then_some(share)
                })
                .sum()
        };
        let first = line_of("// first loop");
        let second = line_of("// second loop");
        let (one, three) = (share(first - 1..=first + 1), share(second - 1..=second + 2));
        assert!(one + three > 95.0, "{at}: the loops hold the time\n{text}");
        assert!(
            (10.0..40.0).contains(&one),
            "{at}: first loop {one}%\n{text}"
        );
        assert!(three > 2.0 * one, "{at}: second loop {three}%\n{text}");

        // The HTML report's function page shows the source found under --source-path, each
        // line with its time (the second loop's, which holds most of it; its head alone can
        // get no sample: Go 1.21's table gives it a stretch of a few instructions, which one
        // cold run in five missed).
        let o = s.run(&[
            "report",
            "b.wprof",
            "--format",
            "html",
            "-o",
            "b.html",
            "--source-path",
            "src",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let page = html_function_page(&s.path("b.html"), "main.burn");
        let ann = page["ann"].as_array().unwrap();
        assert!(
            ann.iter().any(|l| {
                let text = l[2].as_str().unwrap();
                (text.contains("i < 3*n") || text.contains("// second loop"))
                    && l[1].as_u64().unwrap() > 0
            }),
            "{at}: {ann:?}"
        );

        // pprof's locations carry the lines: `go tool pprof -lines` adds them up to the
        // function's self time.
        let o = s.run(&["report", "b.wprof", "--format", "pprof", "-o", "b.pb.gz"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let Some(rows) = crate::tools::pprof_lines_of(&s, "b.pb.gz", "main.burn") else {
            continue;
        };
        let sum: u64 = rows.iter().map(|r| r.1).sum();
        assert_eq!(sum, own_self, "{at}: {rows:?}");
        let loop_line = format!("gocalls/main.go:{}", second - 1);
        assert!(
            rows.iter().any(|(name, _)| name.ends_with(&loop_line)),
            "{at}: {rows:?}"
        );
    }
}
