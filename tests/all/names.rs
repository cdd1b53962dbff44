//! Names and sources in the reports: demangled Rust and C++ names, and each function's
//! source file:line from the module's DWARF, as text, pprof and callgrind show them.

use std::process::Command;

use wprof::profile::Profile;

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
fn a_profile_keeps_its_names_and_sources_without_its_module() {
    let s = Scratch::new();
    // A module written here, profiled (the default mode and cost mode), then removed, and
    // the profiles reported from another directory with another (empty) cache: the same
    // reports, sources and demangled names included, and nothing to warn about.
    let module = s.path("gone.wasm");
    std::fs::copy(sample("compress.wasm"), &module).unwrap();
    let mangled = s.wat_module("mangled.wasm", MANGLED);
    for args in [
        vec!["--mode", "cost", module.to_str().unwrap(), "--", "1"],
        vec!["-o", "stack.wprof", module.to_str().unwrap(), "--", "1"],
        vec!["--mode", "cost", mangled.to_str().unwrap()],
    ] {
        let mut all = vec!["run", "-q"];
        all.extend(args);
        let o = s.run(&all);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let here: Vec<String> = ["gone.wprof", "stack.wprof", "mangled.wprof"]
        .iter()
        .map(|p| stdout(&s.run(&["report", p])))
        .collect();
    assert!(here[0].contains("[compress.c:"), "{}", here[0]);
    assert!(here[1].contains("[compress.c:"), "{}", here[1]);
    assert!(here[2].contains("  foo(int)\n"), "{}", here[2]);
    std::fs::remove_file(&module).unwrap();
    std::fs::remove_file(&mangled).unwrap();
    let elsewhere = s.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    for (i, name) in ["gone.wprof", "stack.wprof", "mangled.wprof"]
        .iter()
        .enumerate()
    {
        std::fs::rename(s.path(name), elsewhere.join(name)).unwrap();
        let o = s
            .wprof(&["report", name])
            .current_dir(&elsewhere)
            .env("WPROF_CACHE_DIR", s.path("another-cache"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), here[i], "{name}");
        assert_eq!(stderr(&o), "", "{name}");
        // The profile says where the module was, as an absolute path.
        let kept = Profile::read(&elsewhere.join(name)).unwrap();
        let path = kept.symbols.unwrap().module_path.unwrap();
        assert!(std::path::Path::new(&path).is_absolute(), "{path}");
    }
    // A profile of an earlier wprof keeps no names: its module comes from the cache (the
    // original, by its digest), else one warning says what is missing.
    let mut older: serde_json::Value = s.profile("elsewhere/gone.wprof");
    older.as_object_mut().unwrap().remove("symbols");
    std::fs::write(s.path("older.wprof"), older.to_string()).unwrap();
    let o = s.run(&["report", "older.wprof"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), here[0], "from the cache");
    let o = s
        .wprof(&["report", "older.wprof"])
        .env("WPROF_CACHE_DIR", s.path("another-cache"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("[compress.c:"));
    assert!(
        stderr(&o).contains("the profiled module is not at")
            && stderr(&o).matches("warning").count() == 1,
        "{}",
        stderr(&o)
    );
    // --module finds it elsewhere; a different module is an error.
    let o = s.run(&[
        "report",
        "older.wprof",
        "--module",
        sample("compress.wasm").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("[compress.c:"));
    let o = s.run(&[
        "report",
        "older.wprof",
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

/// `bytes` without its name section (every other section as it was).
fn without_name_section(bytes: &[u8]) -> Vec<u8> {
    let mut module = wasm_encoder::Module::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.unwrap();
        if matches!(&payload, wasmparser::Payload::CustomSection(c) if c.name() == "name") {
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            module.section(&wasm_encoder::RawSection {
                id,
                data: &bytes[range],
            });
        }
    }
    module.finish()
}

#[test]
fn a_module_without_a_name_section_is_named_from_its_dwarf() {
    let s = Scratch::new();
    let original = std::fs::read(sample("compress.wasm")).unwrap();
    let bare = without_name_section(&original);
    assert!(bare.len() < original.len());
    let module = s.path("bare.wasm");
    std::fs::write(&module, &bare).unwrap();
    let module = module.to_str().unwrap();
    let crc = definition_line("compress.c", "crc32");
    // The original's names, from its name section.
    let o = s.run(&[
        "run",
        "-q",
        "-o",
        "named.wprof",
        sample("compress.wasm").to_str().unwrap(),
        "--",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let named = s.profile("named.wprof");
    let original_name = |id: u64| {
        named["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["name"].as_str().unwrap().to_string())
            .unwrap()
    };
    // Stack mode (its names made while the program runs, then from its manifest), and a
    // probed mode (from the instrumented module's manifest), each cold then from the cache.
    for (mode, run) in [("stack", 1), ("stack", 2), ("sample", 1), ("sample", 2)] {
        let out = format!("{mode}{run}.wprof");
        let o = s.run(&["run", "--mode", mode, "-o", &out, module, "--", "4"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let summary = stderr(&o);
        let profile = s.profile(&out);
        let mut unnamed = Vec::new();
        let mut names = Vec::new();
        for f in profile["functions"].as_array().unwrap() {
            let name = f["name"].as_str().unwrap();
            if name.starts_with("func[") {
                unnamed.push(original_name(f["id"].as_u64().unwrap()));
            }
            names.push(name);
        }
        for own in [
            "crc32",
            "crc32_init",
            "generate",
            "lz_compress",
            "find_match",
        ] {
            assert!(names.contains(&own), "{mode} {run}: {own} in {names:?}");
        }
        // Only what the linker made, or the C library's start-up code, has no DWARF.
        unnamed.sort();
        assert_eq!(
            unnamed,
            ["__main_void", "__wasm_call_ctors"],
            "{mode} {run}"
        );
        for own in ["find_match", "crc32"] {
            assert!(
                summary.contains(&format!("  {own}\n")),
                "{mode} {run}: {summary}"
            );
        }
        let text = stdout(&s.run(&["report", &out, "--top", "100"]));
        assert!(
            text.contains(&format!("crc32  [compress.c:{crc}]")),
            "{mode} {run}: {text}"
        );
    }
}

/// The functions' sources are read from the DWARF once per module and kept in the cache
/// (its `facts`): the next run takes them from there, with the same symbols, and a damaged
/// value is a miss, read again and rewritten.
#[test]
fn a_modules_sources_are_read_once_and_kept_in_the_cache() {
    let s = Scratch::new();
    let compress = sample("compress.wasm");
    let run = |out: &str| {
        let o = s.run(&["run", "-q", "-o", out, compress.to_str().unwrap(), "1"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stderr(&o), "");
        s.profile(out)["symbols"].clone()
    };
    let facts = |what: &str| {
        let out = s.run(&["cache", "stats", "--json"]);
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let kinds = stats["kinds"].as_array().unwrap();
        let facts = kinds.iter().find(|k| k["kind"] == "facts").unwrap();
        facts[what].as_u64().unwrap()
    };
    let first = run("a.wprof");
    let find = definition_line("compress.c", "find_match");
    assert!(
        first.to_string().contains(&format!("\"line\":{find}")),
        "{first}"
    );
    assert_eq!((facts("writes"), facts("hits")), (1, 0));
    assert_eq!(run("b.wprof"), first);
    assert_eq!((facts("writes"), facts("hits")), (1, 1));
    let text = stdout(&s.run(&["report", "b.wprof"]));
    assert!(
        text.contains(&format!("find_match  [compress.c:{find}]")),
        "{text}"
    );

    let cache = wprof_cache::Cache::open(&s.cache_dir()).unwrap();
    let keys = cache.keys(wprof_cache::Kind::Facts).unwrap();
    assert_eq!(keys.len(), 1);
    cache
        .put(wprof_cache::Kind::Facts, &keys[0], b"not facts")
        .unwrap();
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("facts"), "{}", stdout(&out));
    assert_eq!(run("c.wprof"), first);
    assert_eq!(facts("writes"), 2);
    let out = s.run(&["cache", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// What the default mode's profile needs of the module that the run cannot change, the
/// counted module's manifest and the DWARF, is read on a thread of wprof's while the program
/// runs: `--timings` lists that work apart, and the profile has the same sources and lines.
#[test]
fn the_manifest_and_the_dwarf_are_read_while_the_program_runs() {
    let s = Scratch::new();
    let compress = sample("compress.wasm");
    let run = |out: &str| {
        let o = s.run(&[
            "run",
            "-q",
            "--timings=json",
            "-o",
            out,
            compress.to_str().unwrap(),
            "1",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let line = stderr(&o)
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no timings: {}", stderr(&o)))
            .to_string();
        let timings: serde_json::Value = serde_json::from_str(&line).unwrap();
        let names = |key: &str| -> Vec<String> {
            let list = timings[key].as_array().unwrap();
            list.iter()
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect()
        };
        (names("phases"), names("beside"), s.profile(out))
    };
    // Cold: the counters are added now, so only the DWARF is read beside the run.
    let (_, cold_beside, cold) = run("a.wprof");
    assert!(cold_beside.contains(&"dwarf".into()), "{cold_beside:?}");
    assert!(!cold_beside.contains(&"manifest".into()), "{cold_beside:?}");
    // Warm: the manifest from the cache too; the profile waits for both as phases.
    let (phases, beside, warm) = run("b.wprof");
    for work in ["manifest", "dwarf"] {
        assert!(beside.contains(&work.into()), "{work}: {beside:?}");
        assert!(phases.contains(&work.into()), "{work}: {phases:?}");
    }
    assert_eq!(warm["symbols"], cold["symbols"]);
    let find = definition_line("compress.c", "find_match");
    assert!(
        warm["symbols"]
            .to_string()
            .contains(&format!("\"line\":{find}")),
        "{}",
        warm["symbols"]
    );
    let lines = warm["lines"]["lines"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["file"].as_str().unwrap().ends_with("compress.c")
                && l["self_ns"].as_u64() > Some(0)),
        "{lines:?}"
    );
    // The functions named by the manifest are the module's, as the cold run named them.
    let names = |p: &serde_json::Value| -> Vec<String> {
        let functions = p["functions"].as_array().unwrap();
        functions.iter().map(|f| f["name"].to_string()).collect()
    };
    assert_eq!(names(&warm), names(&cold));
}
