//! `wprof cache ls / stats / verify / show / export` through the real binary, on caches
//! filled by real runs, copied elsewhere, and damaged on purpose.

use std::path::{Path, PathBuf};

use serde_json::Value;
use wprof_cache::{Cache, Kind};

use crate::support::*;

fn run_ok(s: &Scratch, args: &[&str]) -> std::process::Output {
    let out = s.run(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

fn json(s: &Scratch, args: &[&str]) -> Value {
    let out = run_ok(s, args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A scratch directory whose cache holds fib (run twice) and wasi_loop (once), both run
/// from copies in the scratch directory.
fn filled() -> Scratch {
    let s = Scratch::new();
    for name in ["fib.wasm", "wasi_loop.wasm"] {
        std::fs::copy(sample(name), s.path(name)).unwrap();
    }
    // Time mode: its probes are calls that `cache show` names.
    run_ok(&s, &["run", "-q", "--mode", "time", "fib.wasm"]);
    run_ok(&s, &["run", "-q", "--mode", "time", "fib.wasm"]);
    run_ok(&s, &["run", "-q", "--mode", "time", "wasi_loop.wasm"]);
    s
}

fn row<'a>(rows: &'a Value, path_end: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with(path_end))
        .unwrap_or_else(|| panic!("no {path_end} in {rows}"))
}

#[test]
fn ls_lists_every_module_with_its_usage() {
    let s = filled();
    let rows = json(&s, &["cache", "ls", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    let fib = row(&rows, "fib.wasm");
    let digest = blake3::hash(&std::fs::read(sample("fib.wasm")).unwrap()).to_hex();
    assert_eq!(fib["module"], digest.as_str());
    // Recorded absolute, as support wants it.
    let recorded = std::path::PathBuf::from(fib["path"].as_str().unwrap());
    assert!(recorded.is_absolute(), "{fib}");
    assert_eq!(recorded, s.path("fib.wasm").canonicalize().unwrap());
    assert_eq!(fib["functions"], 4);
    assert_eq!(fib["imports"], 1);
    assert_eq!(fib["hits"], 1, "the second run found it");
    assert_eq!(fib["mode"], "time");
    assert_eq!(fib["module_stored"], true);
    assert_eq!(fib["original_stored"], true);
    assert_eq!(fib["compiled"].as_array().unwrap().len(), 1);
    assert!(fib["instrumented_size"].as_u64().unwrap() > 431);
    let (first, last) = (
        fib["first_use"].as_u64().unwrap(),
        fib["last_use"].as_u64().unwrap(),
    );
    assert!(first > 0 && first <= last, "{fib}");
    assert_eq!(row(&rows, "wasi_loop.wasm")["hits"], 0);
    // Numbered in order of first use.
    assert_eq!(fib["index"], 1);
    assert_eq!(row(&rows, "wasi_loop.wasm")["index"], 2);

    let text = stdout(&run_ok(&s, &["cache", "ls"]));
    assert!(
        text.contains("fib.wasm") && text.contains("wasi_loop.wasm"),
        "{text}"
    );
    assert!(text.contains(&digest.as_str()[..12]), "{text}");
}

#[test]
fn stats_count_hits_and_misses_of_every_run() {
    let s = filled();
    let stats = json(&s, &["cache", "stats", "--json"]);
    let kind = |name: &str| {
        stats["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == name)
            .unwrap()
            .clone()
    };
    // Three runs looked for a manifest: two misses (cold fib, cold wasi_loop), one hit.
    assert_eq!(kind("manifests")["hits"], 1);
    assert_eq!(kind("manifests")["misses"], 2);
    assert_eq!(kind("manifests")["entries"], 2);
    // Every defined function of both modules missed once and was written once.
    let rows = json(&s, &["cache", "ls", "--json"]);
    let defined: u64 = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["functions"].as_u64().unwrap())
        .sum();
    assert_eq!(defined, 4 + 3);
    // Their bodies: one pack per module (its lineage), looked for once and written once.
    assert_eq!(kind("functions")["writes"], 2);
    assert_eq!(kind("functions")["misses"], 2);
    assert_eq!(kind("functions")["entries"], 2);
    // Original and instrumented module of each.
    assert_eq!(kind("modules")["entries"], 4);
    // Compiled code: each module's, and the host calls' trampoline, one for both (their
    // WASI imports have the same types): made by cold fib, then taken from the cache by the
    // two other runs.
    assert_eq!(kind("artifacts")["entries"], 3);
    assert_eq!(kind("artifacts")["hits"], 1 + 2);
    assert_eq!(kind("artifacts")["misses"], 2 + 1);
    let bytes: u64 = stats["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(stats["bytes"].as_u64().unwrap(), bytes);
    assert!(stats["since"].as_u64().unwrap() > 0);
    let text = stdout(&run_ok(&s, &["cache", "stats"]));
    assert!(
        text.contains("counting since") && text.contains("manifests"),
        "{text}"
    );
    // The help explains every kind the command reports.
    let help = stdout(&run_ok(&s, &["cache", "stats", "--help"]));
    let kinds = help.split("Kinds:").nth(1).expect("a Kinds: paragraph");
    for k in stats["kinds"].as_array().unwrap() {
        let name = k["kind"].as_str().unwrap();
        assert!(
            kinds.contains(&format!(" {name} (")),
            "cache stats --help does not explain {name}"
        );
    }
}

#[test]
fn inspection_works_on_a_copied_directory_with_nothing_else() {
    let s = filled();
    let rows = json(&s, &["cache", "ls", "--json"]);
    let fib = row(&rows, "fib.wasm").clone();
    // Another place, another user: no modules, no secret key.
    let support = Scratch::new();
    copy_dir(&s.cache_dir(), &support.cache_dir());
    drop(s);
    let copied = json(&support, &["cache", "ls", "--json"]);
    assert_eq!(copied, rows, "the copy lists the same");
    run_ok(&support, &["cache", "verify"]);
    run_ok(&support, &["cache", "stats"]);

    let shown = stdout(&run_ok(&support, &["cache", "show", "fib.wasm"]));
    assert!(shown.contains(fib["module"].as_str().unwrap()), "{shown}");
    assert!(
        shown.contains("utoa") && shown.contains("[import]"),
        "{shown}"
    );

    // The function side by side: original and copy on one line, probes marked.
    let shown = stdout(&run_ok(&support, &["cache", "show", "1", "fib"]));
    assert!(shown.contains("probe: wprof.enter"), "{shown}");
    assert!(shown.contains("probe: wprof.exit"), "{shown}");
    let paired = shown
        .lines()
        .filter(|l| l.matches("call $fib").count() == 2)
        .count();
    assert_eq!(
        paired, 2,
        "both recursive calls paired with their copies:\n{shown}"
    );
    assert!(shown
        .lines()
        .any(|l| l.starts_with('+') && l.contains("wprof.enter")));
    assert!(shown.contains("17 original instructions mapped"), "{shown}");

    // Export: exactly the bytes that were compiled, and the original.
    run_ok(&support, &["cache", "export", "fib", "-o", "inst.wasm"]);
    let inst = std::fs::read(support.path("inst.wasm")).unwrap();
    assert_eq!(blake3::hash(&inst).to_hex().as_str(), fib["instrumented"]);
    run_ok(
        &support,
        &["cache", "export", "fib", "--original", "-o", "orig.wasm"],
    );
    assert_eq!(
        std::fs::read(support.path("orig.wasm")).unwrap(),
        std::fs::read(sample("fib.wasm")).unwrap()
    );
    run_ok(
        &support,
        &["cache", "export", "1", "--wat", "-o", "inst.wat"],
    );
    let wat = std::fs::read_to_string(support.path("inst.wat")).unwrap();
    assert!(wat.starts_with("(module") && wat.contains("\"wprof\" \"enter\""));
    // The same module: the same sections, custom ones in any order (the text format
    // places wprof's own custom section before the names it rebuilds).
    assert_eq!(
        sections(&wat::parse_str(&wat).unwrap()),
        sections(&inst),
        "the text is the same module"
    );

    // Nothing was compiled or run: no key was needed, none was created.
    assert!(!support.path("config").exists());
}

#[test]
fn modules_and_functions_are_found_every_way() {
    let s = filled();
    let rows = json(&s, &["cache", "ls", "--json"]);
    let fib = row(&rows, "fib.wasm");
    let first_line = |args: &[&str]| {
        stdout(&run_ok(&s, args))
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    let digest = fib["module"].as_str().unwrap();
    for spec in [
        "1",
        "fib.wasm",
        "fib",
        &digest[..8],
        s.path("fib.wasm").to_str().unwrap(),
        fib["manifest"].as_str().unwrap(),
    ] {
        assert!(
            first_line(&["cache", "show", spec]).starts_with("module #1"),
            "{spec}"
        );
    }
    // A copy of the module elsewhere is found by its contents.
    std::fs::create_dir(s.path("elsewhere")).unwrap();
    std::fs::copy(sample("fib.wasm"), s.path("elsewhere/renamed.wasm")).unwrap();
    assert!(first_line(&["cache", "show", "elsewhere/renamed.wasm"]).starts_with("module #1"));
    // Functions by id, name, key prefix.
    let shown = stdout(&run_ok(&s, &["cache", "show", "1"]));
    let key = shown
        .lines()
        .find(|l| l.contains(" utoa "))
        .and_then(|l| l.split_whitespace().last())
        .unwrap()
        .to_string();
    for spec in ["2", "utoa", &key[..8]] {
        assert!(
            first_line(&["cache", "show", "1", spec]).starts_with("function 2 `utoa`"),
            "{spec}"
        );
    }
    // What matches nothing, or an import, is one line and exit 2.
    for args in [
        &["cache", "show", "nosuch"][..],
        &["cache", "show", "1", "nosuch"],
        &["cache", "show", "1", "0"],
        &["cache", "export", "99", "-o", "x.wasm"],
    ] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            stderr(&out).lines().count(),
            1,
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // The same module in two modes is ambiguous by name, not by number.
    run_ok(&s, &["run", "-q", "--mode", "cost", "fib.wasm"]);
    let out = s.run(&["cache", "show", "fib.wasm"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("matches 2 modules"),
        "{}",
        stderr(&out)
    );
    assert!(first_line(&["cache", "show", "3", "fib"]).contains("cost mode"));
}

#[test]
fn show_rebuilds_the_offset_map_when_bodies_were_evicted() {
    let s = filled();
    {
        let cache = Cache::open(&s.cache_dir()).unwrap();
        for key in cache.keys(Kind::Function).unwrap() {
            cache.remove(Kind::Function, &key).unwrap();
        }
    }
    let shown = stdout(&run_ok(&s, &["cache", "show", "fib.wasm", "fib"]));
    assert!(shown.contains("17 original instructions mapped"), "{shown}");
    assert!(shown.contains("probe: wprof.enter"));
}

#[test]
fn show_pairs_both_bodies_of_a_live_function_with_the_original() {
    // With the bodies cached, and rebuilt from the original once they are gone.
    let s = Scratch::new();
    std::fs::copy(sample("fib.wasm"), s.path("fib.wasm")).unwrap();
    run_ok(&s, &["run", "-q", "--live", "-o", "fib.wprof", "fib.wasm"]);
    let check = |s: &Scratch| {
        let shown = stdout(&run_ok(s, &["cache", "show", "fib.wasm", "fib"]));
        assert!(shown.lines().next().unwrap().contains("live"), "{shown}");
        assert!(shown.contains("-> instrumented body"), "{shown}");
        assert!(shown.contains("-> probed copy"), "{shown}");
        // Every original instruction is found in the function's own body and again in its
        // probed copy.
        assert_eq!(
            shown.matches("17 original instructions mapped").count(),
            2,
            "{shown}"
        );
        assert!(shown.contains("return_call"), "{shown}");
    };
    check(&s);
    {
        let cache = Cache::open(&s.cache_dir()).unwrap();
        for key in cache.keys(Kind::Function).unwrap() {
            cache.remove(Kind::Function, &key).unwrap();
        }
    }
    check(&s);
}

#[test]
fn inspection_never_creates_a_cache() {
    let s = Scratch::new();
    for sub in ["ls", "stats", "verify"] {
        let out = s.run(&["cache", sub]);
        assert_eq!(out.status.code(), Some(2), "{sub}");
        assert!(
            stderr(&out).starts_with("wprof: error:") && stderr(&out).contains("no wprof cache"),
            "{}",
            stderr(&out)
        );
        assert!(!s.cache_dir().exists());
    }
}

/// Every stored value, and the damage done to it.
fn damage_one(dir: &Path, kind: Kind, at: usize) -> bool {
    let cache = Cache::open(dir).unwrap();
    let Some(key) = cache.keys(kind).unwrap().into_iter().next() else {
        return false;
    };
    let mut raw = cache.get_raw_for_tests(kind, &key).unwrap().unwrap();
    let at = at.min(raw.len() - 1);
    raw[at] ^= 0x20;
    cache.put_raw_for_tests(kind, &key, &raw).unwrap();
    true
}

fn artifact_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("artifacts"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn verify_reports_every_bad_entry_and_repair_drops_them() {
    let s = filled();
    assert!(damage_one(&s.cache_dir(), Kind::Module, 50));
    assert!(damage_one(&s.cache_dir(), Kind::Function, 0));
    let artifact = artifact_files(&s.cache_dir())[0].clone();
    let mut bytes = std::fs::read(&artifact).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&artifact, &bytes).unwrap();

    let out = s.run(&["cache", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["clean"], false);
    let sections: Vec<&str> = report["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["section"].as_str().unwrap())
        .collect();
    for kind in ["modules", "functions", "artifacts"] {
        assert!(sections.contains(&kind), "{report}");
    }
    let text = s.run(&["cache", "verify"]);
    assert_eq!(text.status.code(), Some(1));
    assert!(stdout(&text).contains("bad modules"), "{}", stdout(&text));

    let repaired = s.run(&["cache", "verify", "--repair"]);
    assert_eq!(repaired.status.code(), Some(1));
    assert!(stdout(&repaired).contains("dropped"));
    let again = s.run(&["cache", "verify", "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", stdout(&again));
    // Runs rebuild what was dropped, with exact results.
    for name in ["fib.wasm", "wasi_loop.wasm"] {
        run_ok(&s, &["run", "-q", name]);
    }
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
    run_ok(&s, &["cache", "verify"]);
}

/// A module's sections as (id, bytes): the others in order, then the custom ones sorted.
fn sections(module: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let (mut known, mut custom) = (Vec::new(), Vec::new());
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        let payload = payload.unwrap();
        if let Some((id, range)) = payload.as_section() {
            let section = (id, module[range].to_vec());
            match id {
                0 => custom.push(section),
                _ => known.push(section),
            }
        }
    }
    custom.sort();
    known.extend(custom);
    known
}

/// Stack mode (the default) keeps its counted module as the probed modes keep theirs:
/// listed with its compiled code, shown with its counters beside the original, exported as
/// compiled, verified; a cache without its manifest (filled by an earlier wprof) gets one
/// from the next run; and it is evicted whole, compiled code with it.
#[test]
fn a_stack_mode_module_is_listed_shown_exported_and_evicted_whole() {
    let s = Scratch::new();
    for name in ["fib.wasm", "wasi_loop.wasm"] {
        std::fs::copy(sample(name), s.path(name)).unwrap();
    }
    run_ok(&s, &["run", "-q", "fib.wasm"]);
    run_ok(&s, &["run", "-q", "fib.wasm"]);
    let rows = json(&s, &["cache", "ls", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    let fib = row(&rows, "fib.wasm").clone();
    assert_eq!(fib["mode"], "stack");
    assert_eq!(fib["functions"], 4);
    assert_eq!(fib["imports"], 1);
    assert_eq!(fib["hits"], 1, "the second run found it");
    assert_eq!(fib["module_stored"], true);
    assert_eq!(fib["original_stored"], true);
    assert_eq!(fib["compiled"].as_array().unwrap().len(), 1, "{fib}");
    run_ok(&s, &["cache", "verify"]);

    // The counters, and nothing else, marked as added: `fib`'s two calls of itself each
    // count their edge (one cell: six instructions before each); it has no entry counter,
    // since only those calls and `main`'s enter it.
    let shown = stdout(&run_ok(&s, &["cache", "show", "1", "fib"]));
    assert!(shown.contains("(stack mode)"), "{shown}");
    let added: Vec<&str> = shown.lines().filter(|l| l.starts_with('+')).collect();
    assert_eq!(added.len(), 12, "{shown}");
    assert!(added[2].contains("i64.load") && added[5].contains("i64.store"));
    let text = |line: &str| {
        line.split_whitespace()
            .skip(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(text(added[2]), text(added[8]), "{shown}");
    assert!(shown.contains("17 original instructions mapped"), "{shown}");

    // Exported: the module that was compiled, its counters exported.
    run_ok(&s, &["cache", "export", "1", "-o", "counted.wasm"]);
    let counted = std::fs::read(s.path("counted.wasm")).unwrap();
    assert_eq!(
        blake3::hash(&counted).to_hex().as_str(),
        fib["instrumented"]
    );
    wasmparser::Validator::new().validate_all(&counted).unwrap();
    let exports: Vec<String> = wasmparser::Parser::new(0)
        .parse_all(&counted)
        .filter_map(|p| match p.unwrap() {
            wasmparser::Payload::ExportSection(e) => Some(e),
            _ => None,
        })
        .flat_map(|e| e.into_iter().map(|x| x.unwrap().name.to_string()))
        .collect();
    // `_start` (function 4), the export, keeps its entry counter; the edges' memory is
    // exported too.
    assert!(
        exports.contains(&"wprof:calls:4".to_string())
            && !exports.contains(&"wprof:calls:1".to_string())
            && exports.contains(&"wprof:edges".to_string()),
        "{exports:?}"
    );

    // Without its manifest, the next run records it again.
    {
        let cache = Cache::open(&s.cache_dir()).unwrap();
        for key in cache.keys(Kind::Manifest).unwrap() {
            cache.remove(Kind::Manifest, &key).unwrap();
        }
    }
    assert_eq!(json(&s, &["cache", "ls", "--json"]), serde_json::json!([]));
    run_ok(&s, &["run", "-q", "fib.wasm"]);
    let rows = json(&s, &["cache", "ls", "--json"]);
    assert_eq!(row(&rows, "fib.wasm")["instrumented"], fib["instrumented"]);

    // Evicted whole: fib, used first, goes with its modules and compiled code.
    run_ok(&s, &["run", "-q", "wasi_loop.wasm"]);
    let artifacts = |s: &Scratch| {
        Cache::open(&s.cache_dir())
            .unwrap()
            .keys(Kind::Artifact)
            .unwrap()
            .len()
    };
    let before = artifacts(&s);
    let total = Cache::open(&s.cache_dir()).unwrap().total_size().unwrap();
    run_ok(&s, &["cache", "gc", "--max-size", &(total - 1).to_string()]);
    let rows = json(&s, &["cache", "ls", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    row(&rows, "wasi_loop.wasm");
    assert_eq!(
        artifacts(&s),
        before - 1,
        "fib's compiled code went with it"
    );
    let cache = Cache::open(&s.cache_dir()).unwrap();
    for digest in [&fib["module"], &fib["instrumented"]] {
        let key = wprof_cache::key_from_hex(digest.as_str().unwrap()).unwrap();
        assert!(!cache.contains(Kind::Module, &key).unwrap(), "{digest}");
    }
}
