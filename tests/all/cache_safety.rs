//! The cache shared and safe, through the real binary: runs at the same time on one cache,
//! `kill -9` during cold instrumentation, every stored byte changed, private permissions.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wprof_cache::{Cache, Kind};

use crate::support::*;

fn verify_clean(s: &Scratch) {
    let out = s.run(&["cache", "verify", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

fn ls(s: &Scratch) -> Vec<Value> {
    let out = s.run(&["cache", "ls", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn runs_at_the_same_time_all_run_all_profile_and_share_the_cache() {
    let s = Scratch::new();
    let jobs: &[(&str, &str, &str, u64)] = &[
        ("compress.wasm", "3", "crc32", 7),
        ("compress.wasm", "3", "crc32", 7),
        ("interp.wasm", "5000", "builtin_mix", 5000),
        ("nbody.wasm", "300", "advance", 300),
        ("fib.wasm", "", "fib", 242_785),
        ("fib.wasm", "", "fib", 242_785),
    ];
    let children: Vec<Child> = jobs
        .iter()
        .enumerate()
        .map(|(i, (name, arg, _, _))| {
            let out = format!("p{i}.wprof");
            let module = sample(name);
            let mut args = vec![
                "run",
                "--mode",
                "sample",
                "-q",
                "-o",
                &out,
                module.to_str().unwrap(),
            ];
            if !arg.is_empty() {
                args.extend(["--", arg]);
            }
            s.wprof(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, (child, (name, _, function, expected))) in children.into_iter().zip(jobs).enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{name}: no warning");
        assert!(!stdout(&out).is_empty());
        let p = s.profile(&format!("p{i}.wprof"));
        assert_eq!(calls(&p, function), *expected, "{name}");
    }
    verify_clean(&s);
    let modules = ls(&s);
    assert_eq!(modules.len(), 4, "one entry per module");
    assert!(modules.iter().all(|m| m["module_stored"] == true));
    // And the cache they filled serves the next run whole.
    let warm = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        "-o",
        "warm.wprof",
        sample("compress.wasm").to_str().unwrap(),
        "--",
        "3",
    ]);
    assert_eq!(warm.status.code(), Some(0));
    let w = s.profile("warm.wprof");
    assert_eq!(w["instrumentation"]["module_from_cache"], true);
    assert_eq!(w["instrumentation"]["compiled_from_cache"], true);
}

#[test]
fn a_cache_in_use_elsewhere_is_shared_and_an_unusable_one_is_one_warning() {
    let s = Scratch::new();
    // Another process (here: this one) has the cache open: runs use it all the same.
    let held = Cache::open(&s.cache_dir()).unwrap();
    let out = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "");
    assert_eq!(held.keys(Kind::Manifest).unwrap().len(), 1);
    drop(held);
    // A directory holding something else: one warning, and the run goes on without it.
    std::fs::write(s.cache_dir().join("FORMAT"), "some other tool 9\n").unwrap();
    let out = s.run(&[
        "run",
        "--mode",
        "sample",
        "-q",
        sample("fib.wasm").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not a wprof cache of this version") && err.contains("without the cache"),
        "{err}"
    );
    assert_eq!(calls(&s.profile("fib.wprof"), "fib"), 242_785);
    assert_eq!(
        std::fs::read_to_string(s.cache_dir().join("FORMAT")).unwrap(),
        "some other tool 9\n",
        "left as it was"
    );
    let out = s.run(&["cache", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1);
}

/// A small deterministic generator for kill times (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

#[test]
fn kill_9_during_cold_instrumentation_leaves_a_cache_that_verifies_clean() {
    let s = Scratch::new();
    let module = sample("interp.wasm");
    let args = [
        "run",
        "-q",
        "-o",
        "k.wprof",
        module.to_str().unwrap(),
        "--",
        "2000",
    ];
    // How long a cold run takes here (median of 3), to kill anywhere inside one.
    let mut colds: Vec<u64> = (0..3)
        .map(|_| {
            let out = s.run(&["cache", "gc", "--max-size", "0"]);
            assert!(out.status.code() == Some(0) || !s.cache_dir().exists());
            let start = Instant::now();
            let out = s.run(&args);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            start.elapsed().as_micros() as u64
        })
        .collect();
    colds.sort_unstable();
    let cold = colds[1];
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = Lcg(seed);
    let mut killed = 0;
    for round in 0..20 {
        // Mostly from an empty cache (the kill lands in a cold run); every fourth round on
        // what the previous kill left.
        if round % 4 != 3 {
            let out = s.run(&["cache", "gc", "--max-size", "0"]);
            assert_eq!(out.status.code(), Some(0), "seed {seed}: {}", stderr(&out));
        }
        let mut child = s
            .wprof(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(cold * 9 / 10)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        child.wait().unwrap();
        // Opens, verifies clean, and what it lists is whole.
        let out = s.run(&["cache", "verify", "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "seed {seed}, round {round}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        for m in ls(&s) {
            assert_eq!(m["module_stored"], true, "seed {seed}: {m}");
            assert_eq!(m["original_stored"], true, "seed {seed}: {m}");
        }
    }
    eprintln!("{killed} of 20 runs killed mid-way (cold run: {cold} µs, seed {seed})");
    assert!(killed > 0, "no run was killed: the test tested nothing");
    // And the cache still serves runs, exactly.
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(calls(&s.profile("k.wprof"), "builtin_mix"), 2000);
    verify_clean(&s);
}

/// Flips one byte of every stored value of `kind`, at `at` (clamped).
fn damage_all(dir: &Path, kind: Kind, at: usize) -> usize {
    let cache = Cache::open(dir).unwrap();
    let keys = cache.keys(kind).unwrap();
    for key in &keys {
        let mut raw = cache.get_raw_for_tests(kind, key).unwrap().unwrap();
        let at = at.min(raw.len() - 1);
        raw[at] ^= 0x01;
        cache.put_raw_for_tests(kind, key, &raw).unwrap();
    }
    keys.len()
}

#[test]
fn every_changed_byte_is_detected_never_used_and_rewritten() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let run = |s: &Scratch| {
        let out = s.run(&["run", "--mode", "sample", "-q", fib.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "fib(25) = 75025\n");
        assert_eq!(stderr(&out), "", "damage is a miss, not a warning");
        let p = s.profile("fib.wprof");
        assert_eq!(calls(&p, "fib"), 242_785);
        p["instrumentation"].clone()
    };
    run(&s);
    // Envelope header, kind, digest, first and last value byte.
    for at in [0, 4, 5, 36, 37, usize::MAX] {
        for kind in [Kind::Manifest, Kind::Module, Kind::Function] {
            assert!(damage_all(&s.cache_dir(), kind, at) > 0);
            if kind == Kind::Function {
                // Bodies are read only when the module is not whole in the cache.
                damage_all(&s.cache_dir(), Kind::Manifest, at);
            }
            let out = s.run(&["cache", "verify"]);
            assert_eq!(out.status.code(), Some(1), "{kind:?} at {at}: detected");
            let i = run(&s);
            assert_eq!(i["module_from_cache"], false, "{kind:?} at {at}: {i}");
            if kind == Kind::Function {
                assert_eq!(i["functions_instrumented"], 4, "none of them used");
            }
            // Rewritten: the cache is whole again and serves the next run.
            verify_clean(&s);
            assert_eq!(run(&s)["module_from_cache"], true);
        }
    }
    // Compiled functions (wasmtime's incremental cache): with the module's compiled code
    // gone, a run compiles, and each damaged function is a miss, compiled and rewritten.
    for at in [0, 5, 37, usize::MAX] {
        let damaged = damage_all(&s.cache_dir(), Kind::Compiled, at);
        assert!(damaged > 0);
        for f in std::fs::read_dir(s.cache_dir().join("artifacts")).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let out = s.run(&["cache", "verify"]);
        assert_eq!(out.status.code(), Some(1), "compiled at {at}: detected");
        assert_eq!(run(&s)["compiled_from_cache"], false);
        // What the compile asked for was rewritten; a damaged value it did not ask for
        // (Cranelift's keys of a function can differ between compiles) stays unused until
        // a repair or gc drops it.
        let out = s.run(&["cache", "verify", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let bad = report["bad"].as_array().unwrap();
        assert!(
            bad.iter().all(|b| b["section"] == "compiled"),
            "only stale compiled functions: {report}"
        );
        assert!(
            bad.len() * 2 < damaged,
            "most were asked for again: {report}"
        );
        let out = s.run(&["cache", "verify", "--repair"]);
        assert!(out.status.code() == Some(0) || out.status.code() == Some(1));
        verify_clean(&s);
    }
    // Compiled code: a changed byte fails its MAC; it is compiled anew and replaced. The
    // program's is the largest file there (the other is the small module of its WASI
    // imports' trampolines).
    let dir = s.cache_dir().join("artifacts");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .max_by_key(|f| std::fs::metadata(f).unwrap().len())
        .unwrap();
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    for at in [0, len / 3, len / 2, len - 1] {
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(run(&s)["compiled_from_cache"], false, "at {at}");
        verify_clean(&s);
        assert_eq!(run(&s)["compiled_from_cache"], true, "at {at}");
    }
}

#[test]
fn a_copied_cache_recompiles_instead_of_loading_foreign_code() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let run = |s: &Scratch| {
        let out = s.run(&["run", "--mode", "sample", "-q", fib.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        s.profile("fib.wprof")["instrumentation"].clone()
    };
    run(&s);
    assert_eq!(run(&s)["compiled_from_cache"], true);
    // Same cache, another user's key: instrumented code is reused, compiled code is not.
    let other = Scratch::new();
    std::fs::rename(s.cache_dir(), other.cache_dir()).unwrap();
    let i = run(&other);
    assert_eq!(i["module_from_cache"], true);
    assert_eq!(i["compiled_from_cache"], false);
    // ...and is replaced by this user's own.
    assert_eq!(run(&other)["compiled_from_cache"], true);
}

#[cfg(unix)]
#[test]
fn cache_and_key_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let out = s.run(&["run", "-q", sample("fib.wasm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&s.cache_dir()), 0o700);
    assert_eq!(mode(&s.cache_dir().join("artifacts")), 0o700);
    for f in std::fs::read_dir(s.cache_dir().join("artifacts")).unwrap() {
        assert_eq!(mode(&f.unwrap().path()), 0o600);
    }
    assert_eq!(mode(&s.path("config/wprof")), 0o700);
    assert_eq!(mode(&s.path("config/wprof/key")), 0o600);
    // The key never goes into the cache.
    let key = std::fs::read(s.path("config/wprof/key")).unwrap();
    assert_eq!(key.len(), 32);
}
