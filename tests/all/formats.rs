//! `wprof report --format folded|flamegraph|pprof|...`: each output read back by the tool
//! that consumes it, and its numbers compared with the profile's.

use std::collections::{BTreeMap, HashSet};
use std::process::Command;

use serde_json::Value;

use crate::support::*;
use crate::tools::*;

/// A cost-mode profile (deterministic) of a sample, written to `out`.
pub fn cost_profile(s: &Scratch, sample_name: &str, args: &[&str], out: &str) -> Value {
    let module = sample(sample_name);
    let mut all = vec![
        "run",
        "-q",
        "--mode",
        "cost",
        "-o",
        out,
        module.to_str().unwrap(),
    ];
    if !args.is_empty() {
        all.push("--");
        all.extend_from_slice(args);
    }
    let o = s.run(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    s.profile(out)
}

/// Runs `wprof report PROFILE --format FORMAT -o OUT` and returns OUT's bytes.
pub fn report_to(s: &Scratch, profile: &str, format: &str, out: &str) -> Vec<u8> {
    let o = s.run(&["report", profile, "--format", format, "-o", out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    std::fs::read(s.path(out)).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Self cost per function name, summed over the profile's contexts.
fn self_by_function(p: &Value) -> BTreeMap<String, u64> {
    let names: BTreeMap<u64, String> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (u(&f["id"]), f["name"].as_str().unwrap().to_string()))
        .collect();
    let mut out = BTreeMap::new();
    for c in p["contexts"].as_array().unwrap() {
        *out.entry(names[&u(&c["function"])].clone()).or_insert(0) += u(&c["self"]);
    }
    out.retain(|_, v| *v > 0);
    out
}

#[test]
fn folded_stacks_add_up_and_inferno_reads_them() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let folded = String::from_utf8(report_to(&s, "c.wprof", "folded", "c.folded")).unwrap();
    let mut total = 0;
    let mut by_leaf: BTreeMap<String, u64> = BTreeMap::new();
    let mut stacks = HashSet::new();
    for line in folded.lines() {
        let (stack, value) = line.rsplit_once(' ').unwrap();
        let value: u64 = value.parse().unwrap();
        assert!(value > 0, "{line}");
        assert!(
            stacks.insert(stack.to_string()),
            "one line per stack: {line}"
        );
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames[0], "_start", "{line}");
        let unique: HashSet<&&str> = frames.iter().collect();
        assert_eq!(unique.len(), frames.len(), "recursion collapsed: {line}");
        *by_leaf
            .entry(frames.last().unwrap().to_string())
            .or_insert(0) += value;
        total += value;
    }
    assert_eq!(total, u(&p["total"]), "self costs add up to the total");
    assert_eq!(by_leaf, self_by_function(&p));
    assert!(by_leaf.contains_key("find_match"));

    // inferno reads the file as it is and draws every function.
    let mut options = inferno::flamegraph::Options::default();
    let mut svg = Vec::new();
    inferno::flamegraph::from_files(&mut options, &[s.path("c.folded")], &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains("<title>find_match ("), "find_match drawn");
}

#[test]
fn flamegraph_pl_reads_folded_stacks() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    report_to(&s, "c.wprof", "folded", "c.folded");
    let Some(script) = flamegraph_pl() else {
        return;
    };
    let o = Command::new("perl")
        .arg(script)
        .args(["--countname", "instructions"])
        .arg(s.path("c.folded"))
        .output()
        .unwrap();
    assert!(o.status.success(), "flamegraph.pl failed: {}", stderr(&o));
    let svg = stdout(&o);
    check_xml(&svg);
    // It read every line: the root is the profile's total, and the hot function is drawn.
    let total = u(&p["total"]);
    let grouped = total
        .to_string()
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(",");
    assert!(
        svg.contains(&format!(
            "<title>all ({grouped} instructions, 100%)</title>"
        )),
        "{svg}"
    );
    assert!(svg.contains("<title>find_match ("), "find_match drawn");
}

#[test]
fn folded_collapses_recursion() {
    let s = Scratch::new();
    let p = cost_profile(&s, "mutual.wasm", &[], "m.wprof");
    let folded = String::from_utf8(report_to(&s, "m.wprof", "folded", "m.folded")).unwrap();
    // even and odd call each other 20 deep, 3 times: one stack each, holding all their cost.
    let even: Vec<&str> = folded.lines().filter(|l| l.contains("even")).collect();
    assert!(!even.is_empty());
    for l in folded.lines() {
        assert!(
            l.matches("even").count() <= 1 && l.matches("odd").count() <= 1,
            "{l}"
        );
    }
    let odd_self = u(&function(&p, "odd")["self"]);
    let odd_lines: u64 = folded
        .lines()
        .filter(|l| l.rsplit_once(' ').unwrap().0.ends_with("odd"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(odd_lines, odd_self);
}

/// A well-formed XML document (every tag closed), or the parse error.
fn check_xml(text: &str) {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut depth = 0i64;
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Start(_) => depth += 1,
            quick_xml::events::Event::End(_) => depth -= 1,
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "balanced tags");
}

#[test]
fn flamegraph_is_an_svg_with_every_costly_function() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let svg = String::from_utf8(report_to(&s, "c.wprof", "flamegraph", "c.svg")).unwrap();
    assert!(svg.contains("<svg"));
    check_xml(&svg);
    // Every function with a visible share of the cost (inferno leaves out frames narrower
    // than 0.1 pixel) has a frame titled with its name.
    let total = u(&p["total"]);
    let drawn: Vec<String> = self_by_function(&p)
        .into_iter()
        .filter(|&(_, cost)| cost * 100 >= total)
        .map(|(name, _)| name)
        .collect();
    assert!(drawn.len() >= 5, "{drawn:?}");
    for name in drawn {
        assert!(
            svg.contains(&format!("<title>{name} (")),
            "{name} in the flame graph"
        );
    }
    // The root frame carries the total.
    let grouped = total
        .to_string()
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(",");
    assert!(svg.contains(&format!(
        "<title>all ({grouped} instructions, 100%)</title>"
    )));
    // Deterministic: the same profile gives the same file.
    let again = report_to(&s, "c.wprof", "flamegraph", "c2.svg");
    assert_eq!(svg.as_bytes(), &again[..]);
}

#[test]
fn pprof_is_read_by_go_tool_pprof() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let bytes = report_to(&s, "c.wprof", "pprof", "c.pb.gz");
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip");
    let Some(rows) = pprof_top(&s, "c.pb.gz", &[]) else {
        return;
    };
    // flat = self, cum = inclusive, for every function with any cost.
    for f in p["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        if u(&f["inclusive"]) == 0 {
            continue;
        }
        let row = rows
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing: {rows:?}"));
        assert_eq!(*row, (u(&f["self"]), u(&f["inclusive"])), "{name}");
    }
    // The calls sample type: flat calls per function.
    let calls = pprof_top(&s, "c.pb.gz", &["-sample_index=calls"]).unwrap();
    for f in p["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        assert_eq!(calls[name].0, u(&f["calls"]), "{name} calls");
    }
}

#[test]
fn pprof_is_not_written_to_a_terminal_but_pipes_are_fine() {
    let s = Scratch::new();
    cost_profile(&s, "fib.wasm", &[], "f.wprof");
    let o = s.run(&["report", "f.wprof", "--format", "pprof"]);
    assert_eq!(o.status.code(), Some(0), "a pipe is not a terminal");
    assert_eq!(&o.stdout[..2], &[0x1f, 0x8b]);
}

#[test]
fn callgrind_is_read_by_callgrind_annotate() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let text = String::from_utf8(report_to(&s, "c.wprof", "callgrind", "callgrind.out.c")).unwrap();
    assert!(text.starts_with("# callgrind format\n"));
    // Call lines: `calls=` is the edge's exact count.
    let start = text.find("fn=(").unwrap();
    assert!(text[start..].contains("calls="));
    let Some(self_rows) = annotate(&s, &[], "callgrind.out.c", false) else {
        return;
    };
    let incl_rows = annotate(&s, &[], "callgrind.out.c", true).unwrap();
    for f in p["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        if u(&f["inclusive"]) == 0 {
            continue;
        }
        assert_eq!(self_rows.get(name), Some(&u(&f["self"])), "{name} self");
        // No recursion in compress: self + call costs = inclusive, exactly.
        assert_eq!(
            incl_rows.get(name),
            Some(&u(&f["inclusive"])),
            "{name} inclusive"
        );
    }
    // The calls on call lines match the profile's edges.
    let lz = function(&p, "lz_compress");
    let calls = edge_calls(&p, Some("lz_compress"), "find_match");
    assert!(calls > 0);
    // Blocks are `fl=` then `fn=(id)` (with the name if it was not named before); call
    // lines give the callee's first source line.
    let key = format!("fn=({})", u(&lz["id"]) + 1);
    let block = text
        .split("\n\n")
        .find(|b| {
            b.lines()
                .nth(1)
                .is_some_and(|l| l == key || l.starts_with(&format!("{key} ")))
        })
        .unwrap_or_else(|| panic!("{text}"));
    assert!(block.contains(&format!("calls={calls} ")), "{block}");
}

#[test]
fn callgrind_counts_recursion_once() {
    let s = Scratch::new();
    let p = cost_profile(&s, "fib.wasm", &[], "f.wprof");
    report_to(&s, "f.wprof", "callgrind", "callgrind.out.f");
    let Some(incl) = annotate(&s, &[], "callgrind.out.f", true) else {
        return;
    };
    // fib calls itself 242784 times; its inclusive cost is still counted once.
    assert_eq!(incl["fib"], u(&function(&p, "fib")["inclusive"]));
    assert_eq!(incl["_start"], u(&p["total"]));
}

/// Validates a speedscope file against the schema shipped in speedscope's npm package
/// (installed in `modules`), with ajv.
fn speedscope_schema_check(
    modules: &std::path::Path,
    file: &std::path::Path,
) -> Result<(), String> {
    let script = r#"
const fs = require("fs");
const path = require("path");
const Ajv = require("ajv");
const dir = process.env.NODE_MODULES_DIR;
const schema = JSON.parse(fs.readFileSync(
  path.join(dir, "speedscope/dist/release/file-format-schema.json"), "utf8"));
const data = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const validate = new Ajv({ strict: false, allErrors: true }).compile(schema);
if (!validate(data)) {
  console.error(JSON.stringify(validate.errors, null, 1));
  process.exit(1);
}
console.log("valid");
"#;
    let o = Command::new("node")
        .arg("-e")
        .arg(script)
        .arg(file)
        .env("NODE_PATH", modules)
        .env("NODE_MODULES_DIR", modules)
        .output()
        .unwrap();
    if o.status.success() && stdout(&o).trim() == "valid" {
        Ok(())
    } else {
        Err(format!("{}{}", stdout(&o), stderr(&o)))
    }
}

fn speedscope_modules() -> Option<std::path::PathBuf> {
    node_modules(
        "speedscope",
        "validating --format speedscope against its schema",
    )
}

#[test]
fn speedscope_is_valid_and_holds_the_stacks() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let bytes = report_to(&s, "c.wprof", "speedscope", "c.speedscope.json");
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    // Semantics: weights per leaf frame are the self costs.
    let frames = v["shared"]["frames"].as_array().unwrap();
    let profile = &v["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    let mut by_leaf: BTreeMap<String, u64> = BTreeMap::new();
    let samples = profile["samples"].as_array().unwrap();
    let weights = profile["weights"].as_array().unwrap();
    assert_eq!(samples.len(), weights.len());
    for (stack, w) in samples.iter().zip(weights) {
        let leaf = stack.as_array().unwrap().last().unwrap().as_u64().unwrap();
        let name = frames[leaf as usize]["name"].as_str().unwrap().to_string();
        *by_leaf.entry(name).or_insert(0) += u(w);
    }
    assert_eq!(by_leaf, self_by_function(&p));
    assert_eq!(u(&profile["endValue"]), u(&p["total"]));
    if let Some(modules) = speedscope_modules() {
        if let Err(e) = speedscope_schema_check(&modules, &s.path("c.speedscope.json")) {
            panic!("not valid against speedscope's schema: {e}");
        }
    }
}

#[test]
fn speedscope_schema_check_rejects_a_broken_file() {
    // The check itself can fail: a file without `shared.frames` is refused.
    let Some(modules) = speedscope_modules() else {
        return;
    };
    let s = Scratch::new();
    let bad = s.path("bad.json");
    std::fs::write(
        &bad,
        r#"{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[],"shared":{}}"#,
    )
    .unwrap();
    let e = speedscope_schema_check(&modules, &bad).unwrap_err();
    assert!(e.contains("frames"), "{e}");
}

#[test]
fn firefox_processed_profile_holds_the_stacks() {
    let s = Scratch::new();
    cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let folded = String::from_utf8(report_to(&s, "c.wprof", "folded", "c.folded")).unwrap();
    let bytes = report_to(&s, "c.wprof", "firefox", "c.fxprof.json");
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(v["meta"]["version"].as_u64().unwrap() > 0);
    assert!(v["meta"]["preprocessedProfileVersion"].as_u64().unwrap() > 0);
    let t = &v["threads"][0];
    let col = |table: &str, c: &str| t[table][c].as_array().unwrap().clone();
    // Every table's columns have its `length`.
    for (table, columns) in [
        ("samples", &["stack", "weight", "timeDeltas"][..]),
        ("stackTable", &["prefix", "frame"][..]),
        ("frameTable", &["func", "category"][..]),
        ("funcTable", &["name"][..]),
    ] {
        let n = t[table]["length"].as_u64().unwrap() as usize;
        for c in columns {
            assert_eq!(col(table, c).len(), n, "{table}.{c}");
        }
    }
    let strings = t["stringArray"].as_array().unwrap();
    let (prefix, frame) = (col("stackTable", "prefix"), col("stackTable", "frame"));
    let func = col("frameTable", "func");
    let fname = col("funcTable", "name");
    let name_of_stack = |i: usize| {
        let f = func[u(&frame[i]) as usize].as_u64().unwrap() as usize;
        strings[u(&fname[f]) as usize].as_str().unwrap().to_string()
    };
    // Rebuild each sample's stack, root first: the lines are the folded lines.
    let mut lines = Vec::new();
    for (stack, w) in col("samples", "stack").iter().zip(col("samples", "weight")) {
        let mut names = Vec::new();
        let mut at = Some(u(stack) as usize);
        while let Some(i) = at {
            names.push(name_of_stack(i));
            at = prefix[i].as_u64().map(|p| p as usize);
        }
        names.reverse();
        lines.push(format!("{} {}", names.join(";"), u(&w)));
    }
    assert_eq!(lines, folded.lines().collect::<Vec<_>>());
}

#[test]
fn a_profile_without_contexts_still_reports() {
    // Profiles may lack `contexts` (it is optional in the schema): the flat formats still
    // work, the flame graph says in one line that there is nothing to draw.
    let s = Scratch::new();
    cost_profile(&s, "fib.wasm", &[], "f.wprof");
    let mut v = s.profile("f.wprof");
    v.as_object_mut().unwrap().remove("contexts");
    std::fs::write(s.path("flat.wprof"), serde_json::to_string(&v).unwrap()).unwrap();
    for format in [
        "text",
        "json",
        "folded",
        "pprof",
        "callgrind",
        "speedscope",
        "firefox",
        "html",
    ] {
        let o = s.run(&["report", "flat.wprof", "--format", format, "-o", "out"]);
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
    }
    let o = s.run(&[
        "report",
        "flat.wprof",
        "--format",
        "flamegraph",
        "-o",
        "out.svg",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no calling-context tree"), "{err}");
}
