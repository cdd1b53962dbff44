//! `wprof cache gc`, the automatic size cap of runs, and `wprof cache pack` / `unpack`,
//! through the real binary.

use std::io::{Read, Write};

use serde_json::Value;

use crate::support::*;

fn ok(s: &Scratch, args: &[&str]) -> std::process::Output {
    let out = s.run(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

fn json(s: &Scratch, args: &[&str]) -> Value {
    serde_json::from_slice(&ok(s, args).stdout).unwrap()
}

fn paths(s: &Scratch) -> Vec<String> {
    json(s, &["cache", "ls", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let p = m["path"].as_str().unwrap();
            p.rsplit('/').next().unwrap().to_string()
        })
        .collect()
}

fn total_bytes(s: &Scratch) -> u64 {
    json(s, &["cache", "stats", "--json"])["bytes"]
        .as_u64()
        .unwrap()
}

fn run(s: &Scratch, name: &str, arg: &str) {
    let m = sample(name);
    let mut args = vec!["run", "--mode", "sample", "-q", m.to_str().unwrap()];
    if !arg.is_empty() {
        args.extend(["--", arg]);
    }
    ok(s, &args);
}

#[test]
fn gc_without_a_cap_evicts_nothing() {
    let s = Scratch::new();
    run(&s, "wasi_loop.wasm", "");
    run(&s, "fib.wasm", "");
    let before = total_bytes(&s);
    for off in ["off", "none", "0"] {
        let out = s
            .wprof(&["cache", "gc"])
            .env("WPROF_CACHE_MAX_SIZE", off)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stdout(&out).contains("0 entries evicted") && stdout(&out).contains("cap none"),
            "{off}: {}",
            stdout(&out)
        );
        assert_eq!(total_bytes(&s), before, "{off}");
    }
    // The default cap (5 GiB) keeps these small modules too; an explicit one trims.
    let out = s
        .wprof(&["cache", "gc", "--max-size", "1K"])
        .env("WPROF_CACHE_MAX_SIZE", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(total_bytes(&s) <= 1024);
}

/// What a process killed while it removed a value leaves (a file renamed aside) is removed
/// by gc once it is a minute old; a young one may be a live process's, and stays.
#[test]
fn gc_removes_the_leftovers_of_interrupted_work() {
    let s = Scratch::new();
    run(&s, "fib.wasm", "");
    let artifacts = s.cache_dir().join("artifacts");
    let old = artifacts.join(".tmp-removed-1-2-3-x");
    let young = artifacts.join(".tmp-removed-4-5-6-y");
    std::fs::write(&old, vec![7u8; 300_000]).unwrap();
    std::fs::write(&young, b"being removed").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(600))
        .unwrap();
    let out = ok(&s, &["cache", "gc"]);
    assert!(
        stdout(&out).contains("of leftovers of interrupted work removed"),
        "{}",
        stdout(&out)
    );
    assert!(!old.exists());
    assert!(young.exists());
    let out = ok(&s, &["cache", "gc"]);
    assert!(!stdout(&out).contains("leftovers"), "{}", stdout(&out));
}

#[test]
fn gc_evicts_the_least_recently_used_modules_whole() {
    let s = Scratch::new();
    run(&s, "wasi_loop.wasm", "");
    run(&s, "fib.wasm", "");
    run(&s, "compress.wasm", "2");
    run(&s, "fib.wasm", ""); // fib is now the most recently used
    let before = total_bytes(&s);
    let cap = before / 2;
    let report = json(
        &s,
        &["cache", "gc", "--max-size", &cap.to_string(), "--json"],
    );
    assert_eq!(report["before"].as_u64().unwrap(), before);
    let after = total_bytes(&s);
    assert_eq!(report["after"].as_u64().unwrap(), after);
    assert!(after <= cap, "{after} > {cap}");
    assert!(report["evicted_entries"].as_u64().unwrap() > 0);
    assert_eq!(paths(&s), vec!["fib.wasm"], "the most recent stays, whole");
    ok(&s, &["cache", "verify"]);
    let stats = json(&s, &["cache", "stats", "--json"]);
    let evicted: u64 = stats["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["evicted"].as_u64().unwrap())
        .sum();
    assert_eq!(evicted, report["evicted_entries"].as_u64().unwrap());
    // What stayed still serves a warm run.
    let m = sample("fib.wasm");
    ok(
        &s,
        &[
            "run",
            "--mode",
            "sample",
            "-q",
            "-o",
            "w.wprof",
            m.to_str().unwrap(),
        ],
    );
    assert_eq!(
        s.profile("w.wprof")["instrumentation"]["module_from_cache"],
        true
    );

    // A cap of nothing empties it; a bad size is an error that changes nothing.
    let text = stdout(&ok(&s, &["cache", "gc", "--max-size", "0"]));
    assert!(text.contains("evicted"), "{text}");
    assert!(paths(&s).is_empty());
    assert_eq!(total_bytes(&s), 0);
    let bad = s.run(&["cache", "gc", "--max-size", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn runs_keep_the_cache_under_its_cap() {
    let s = Scratch::new();
    run(&s, "compress.wasm", "2");
    let big = total_bytes(&s);
    assert!(big > 400 << 10, "{big}");
    // The next run stores fib and brings the cache under 200 KiB: compress, older, goes.
    let out = s
        .wprof(&[
            "run",
            "--mode",
            "sample",
            "-q",
            sample("fib.wasm").to_str().unwrap(),
        ])
        .env("WPROF_CACHE_MAX_SIZE", "200K")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "");
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
    assert!(total_bytes(&s) <= 200 << 10);
    assert_eq!(paths(&s), vec!["fib.wasm"]);
    ok(&s, &["cache", "verify"]);
    // `off` keeps everything.
    let out = s
        .wprof(&[
            "run",
            "--mode",
            "sample",
            "-q",
            sample("compress.wasm").to_str().unwrap(),
            "--",
            "2",
        ])
        .env("WPROF_CACHE_MAX_SIZE", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(paths(&s).len(), 2);
}

#[test]
fn an_earlier_wprofs_cache_is_emptied_with_one_warning_and_never_read() {
    let s = Scratch::new();
    run(&s, "fib.wasm", "");
    // As an earlier wprof left it: its format line, and a value this one would misread.
    std::fs::write(s.cache_dir().join("FORMAT"), "wprof cache 2\n").unwrap();
    let stale = s.cache_dir().join("entries/functions/ab");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("ab".repeat(32)), b"an older entry").unwrap();
    // Inspection changes nothing: one line, exit 2.
    let out = s.run(&["cache", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("wprof cache 2"), "{err}");
    assert!(stale.join("ab".repeat(32)).exists());
    // A run empties it, says so once, and profiles.
    let m = sample("fib.wasm");
    let out = s.run(&["run", "--mode", "sample", "-q", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("earlier wprof's (wprof cache 2)"), "{err}");
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
    assert!(!stale.exists());
    ok(&s, &["cache", "verify"]);
    // Once: the next run is warm and quiet.
    let out = s.run(&["run", "--mode", "sample", "-q", m.to_str().unwrap()]);
    assert_eq!(stderr(&out), "");
    assert_eq!(
        s.profile("fib.wprof")["instrumentation"]["module_from_cache"],
        true
    );
}

fn filled() -> Scratch {
    let s = Scratch::new();
    run(&s, "fib.wasm", "");
    run(&s, "fib.wasm", "");
    run(&s, "wasi_loop.wasm", "");
    s
}

#[test]
fn pack_and_unpack_carry_the_whole_cache() {
    let s = filled();
    let listed = json(&s, &["cache", "ls", "--json"]);
    ok(&s, &["cache", "pack", "-o", "bundle.tar.zst"]);
    let bundle = s.path("bundle.tar.zst");
    assert!(std::fs::metadata(&bundle).unwrap().len() > 0);

    let support = Scratch::new();
    let out = support.run(&[
        "cache",
        "unpack",
        bundle.to_str().unwrap(),
        "--cache-dir",
        support.path("ticket").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let there = [
        "--cache-dir",
        support.path("ticket").to_str().unwrap().to_string().leak(),
    ];
    let ls = |extra: &[&str]| {
        let mut args = vec!["cache", "ls", "--json"];
        args.extend_from_slice(&there);
        args.extend_from_slice(extra);
        json(&support, &args)
    };
    let mut unpacked = ls(&[]);
    // Compiled code stays home: the rest is the same, usage included.
    for m in unpacked.as_array_mut().unwrap() {
        assert_eq!(m["compiled"].as_array().unwrap().len(), 0);
        m["compiled"] = listed[m["index"].as_u64().unwrap() as usize - 1]["compiled"].clone();
    }
    assert_eq!(unpacked, listed);
    let mut verify = vec!["cache", "verify"];
    verify.extend_from_slice(&there);
    ok(&support, &verify);
    let mut show = vec!["cache", "show", "fib.wasm", "fib"];
    show.extend_from_slice(&there);
    assert!(stdout(&ok(&support, &show)).contains("instrumented body"));
    // The user's counters came along into the empty cache.
    let mut stats = vec!["cache", "stats", "--json"];
    stats.extend_from_slice(&there);
    let st = json(&support, &stats);
    let manifests = st["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "manifests")
        .unwrap()
        .clone();
    assert_eq!(manifests["hits"], 1);
}

/// The files of a bundle, and a bundle made of files.
fn unbundle(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut tar =
        tar::Archive::new(zstd::Decoder::new(std::fs::File::open(path).unwrap()).unwrap());
    tar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_str().unwrap().to_string();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, data)
        })
        .collect()
}

fn bundle(path: &std::path::Path, files: &[(String, Vec<u8>)]) {
    let mut tar =
        tar::Builder::new(zstd::Encoder::new(std::fs::File::create(path).unwrap(), 3).unwrap());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        // The name as given, even one that `set_path` would refuse (`..`).
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        tar.append(&h, data.as_slice()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

#[test]
fn unpack_refuses_damaged_bundles_and_writes_nothing() {
    let s = filled();
    ok(&s, &["cache", "pack", "-o", "good.tar.zst"]);
    let good = std::fs::read(s.path("good.tar.zst")).unwrap();
    let files = unbundle(&s.path("good.tar.zst"));
    let module = files
        .iter()
        .position(|(n, _)| n.contains("/modules/"))
        .unwrap();

    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // A flipped byte in the compressed stream.
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    cases.push(("flipped", flipped));
    // Cut short.
    cases.push(("truncated", good[..good.len() * 2 / 3].to_vec()));
    cases.push(("not a bundle", b"hello".to_vec()));
    // A record changed inside a well-formed archive: the index catches it...
    let mut changed = files.clone();
    let last = changed[module].1.len() - 1;
    changed[module].1[last] ^= 1;
    bundle(&s.path("x"), &changed);
    cases.push(("changed record", std::fs::read(s.path("x")).unwrap()));
    // ...and with the index made to agree, the record's own seal does.
    let (name, raw) = changed[module].clone();
    let key = name.rsplit('/').next().unwrap();
    let index = changed
        .iter()
        .position(|(n, _)| n.ends_with("/INDEX"))
        .unwrap();
    let text = String::from_utf8(changed[index].1.clone()).unwrap();
    let fixed: String = text
        .lines()
        .map(|l| {
            if l.contains(key) && l.starts_with("modules ") {
                format!(
                    "modules {key} {} {}\n",
                    raw.len(),
                    blake3::hash(&raw).to_hex()
                )
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    changed[index].1 = fixed.into_bytes();
    bundle(&s.path("x"), &changed);
    cases.push(("resealed index", std::fs::read(s.path("x")).unwrap()));
    // A file the index does not know, with a path that tries to escape.
    let mut extra = files.clone();
    extra.push(("../../escape".to_string(), b"x".to_vec()));
    bundle(&s.path("x"), &extra);
    cases.push(("escaping path", std::fs::read(s.path("x")).unwrap()));

    for (what, bytes) in cases {
        std::fs::write(s.path("bad.tar.zst"), &bytes).unwrap();
        let target = s.path(&format!("target-{}", what.replace(' ', "-")));
        let out = s.run(&[
            "cache",
            "unpack",
            "bad.tar.zst",
            "--cache-dir",
            target.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{what}: {}", stderr(&out));
        assert!(!target.exists(), "{what}: nothing written");
    }
    assert!(!s.path("escape").exists());
    // Into an existing cache, a bad bundle changes nothing there either.
    let before = json(&s, &["cache", "stats", "--json"]);
    let out = s.run(&["cache", "unpack", "bad.tar.zst"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        json(&s, &["cache", "stats", "--json"])["bytes"],
        before["bytes"]
    );
}
