//! Names and sources in the reports: demangled Rust and C++ names, and each function's
//! source file:line from the module's DWARF, as text, pprof and callgrind show them.

use std::process::Command;

use crate::formats::{cost_profile, report_to};
use crate::support::*;
use crate::tools::tool;

/// The line of `samples/<file>` where function `name` is defined (a line that does not end
/// with `;` and holds `name(` after a type).
fn definition_line(file: &str, name: &str) -> u32 {
    let text = std::fs::read_to_string(sample(file)).unwrap();
    let at = text
        .lines()
        .position(|l| {
            l.contains(&format!(" {name}(")) && !l.trim_end().ends_with(';') && !l.starts_with(' ')
        })
        .unwrap_or_else(|| panic!("{name} not defined in {file}"));
    at as u32 + 1
}

#[test]
fn sources_from_dwarf_in_text_pprof_and_callgrind() {
    let s = Scratch::new();
    cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let find = definition_line("compress.c", "find_match");
    let crc = definition_line("compress.c", "crc32");
    let text = stdout(&s.run(&["report", "c.wprof"]));
    assert!(
        text.contains(&format!("find_match  [compress.c:{find}]")),
        "{text}"
    );
    assert!(
        text.contains(&format!("crc32  [compress.c:{crc}]")),
        "{text}"
    );

    report_to(&s, "c.wprof", "pprof", "c.pb.gz");
    if let Some(mut go) = crate::tools::go_pprof(
        &s,
        "reading --format pprof with `go tool pprof`",
        &["-top", "-lines", "c.pb.gz"],
    ) {
        let o = go.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let top = stdout(&o);
        let row = top
            .lines()
            .find(|l| l.contains(" find_match "))
            .unwrap_or_else(|| panic!("{top}"));
        assert!(
            row.trim_end().ends_with(&format!("compress.c:{find}")),
            "{row}"
        );
    }

    report_to(&s, "c.wprof", "callgrind", "callgrind.out.c");
    if let Some(annotate) = tool("callgrind_annotate", "reading --format callgrind") {
        let o = Command::new(annotate)
            .current_dir(s.dir.path())
            .args(["--auto=no", "callgrind.out.c"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stdout(&o).contains("compress.c:find_match"),
            "{}",
            stdout(&o)
        );
    }
    let cg = std::fs::read_to_string(s.path("callgrind.out.c")).unwrap();
    assert!(
        cg.contains(&format!("\n{find} ")),
        "find_match's cost on its line"
    );
}

#[test]
fn no_module_no_sources_and_a_wrong_module_is_refused() {
    let s = Scratch::new();
    // A module written here, profiled, then removed: the report works, without sources.
    let module = s.path("gone.wasm");
    std::fs::copy(sample("compress.wasm"), &module).unwrap();
    let o = s.run(&[
        "run",
        "-q",
        "--mode",
        "cost",
        module.to_str().unwrap(),
        "--",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let with = stdout(&s.run(&["report", "gone.wprof"]));
    assert!(with.contains("[compress.c:"), "{with}");
    std::fs::remove_file(&module).unwrap();
    let o = s.run(&["report", "gone.wprof"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("[compress.c:"));
    // --module finds it elsewhere; a different module is an error.
    let o = s.run(&[
        "report",
        "gone.wprof",
        "--module",
        sample("compress.wasm").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("[compress.c:"));
    let o = s.run(&[
        "report",
        "gone.wprof",
        "--module",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not the module that was profiled"),
        "{}",
        stderr(&o)
    );
}

const MANGLED: &str = r#"(module
  (func $_ZN4core3fmt5write17h0123456789abcdefE (result i32) i32.const 1)
  (func $_Z3fooi (param i32) (result i32) local.get 0 call $_ZN4core3fmt5write17h0123456789abcdefE i32.add)
  (func (export "_start") i32.const 2 call $_Z3fooi drop))"#;

#[test]
fn mangled_names_are_shown_demangled() {
    let s = Scratch::new();
    let m = s.wat_module("mangled.wasm", MANGLED);
    let o = s.run(&["run", "-q", "--mode", "cost", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&s.run(&["report", "mangled.wprof"]));
    assert!(text.contains("  core::fmt::write\n"), "{text}");
    assert!(text.contains("  foo(int)\n"), "{text}");
    assert!(!text.contains("_ZN4core"), "{text}");
    let folded = String::from_utf8(report_to(&s, "mangled.wprof", "folded", "m.folded")).unwrap();
    assert!(
        folded.contains("_start;foo(int);core::fmt::write 1\n"),
        "{folded}"
    );
    let html = String::from_utf8(report_to(&s, "mangled.wprof", "html", "m.html")).unwrap();
    // The function page (made by the page's script) shows it as `symbol: ...`.
    assert!(
        html.contains(r#""raw":"_Z3fooi""#) && html.contains(r#""symbol: " + f.raw"#),
        "the page keeps the symbol"
    );
    // JSON is the profile itself: the module's own names.
    let json = String::from_utf8(report_to(&s, "mangled.wprof", "json", "m.json")).unwrap();
    assert!(json.contains("\"_Z3fooi\""));
}
