//! Selective probes through the binary: `--only`, `--exclude`, `WPROF_FILTER` and the
//! configuration file's `include`/`exclude`, in every mode.

use serde_json::Value;

use crate::support::{calls, sample, stderr, stdout, Scratch};

fn profiled(s: &Scratch, args: &[&str]) -> Value {
    let fib = sample("fib.wasm");
    let out = s.run(
        &[
            &["run", "-q", "-o", "p.wprof"],
            args,
            &[fib.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "fib(25) = 75025\n");
    s.profile("p.wprof")
}

fn names(p: &Value) -> Vec<String> {
    let mut n: Vec<String> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[test]
fn an_excluded_function_is_part_of_its_caller_in_every_mode() {
    let s = Scratch::new();
    for mode in ["time", "sample", "cost"] {
        let full = profiled(&s, &["--mode", mode]);
        let p = profiled(&s, &["--mode", mode, "--exclude", "fib"]);
        assert_eq!(p["unprobed"], serde_json::json!(["fib"]), "{mode}");
        assert_eq!(
            names(&p),
            [
                "_start",
                "print",
                "utoa",
                "wasi_snapshot_preview1::fd_write"
            ],
            "{mode}"
        );
        for f in ["_start", "print", "utoa"] {
            assert_eq!(calls(&p, f), 1, "{mode} {f}");
        }
        // No edge to or from it; its callers' edges are intact.
        let edges = p["edges"].as_array().unwrap();
        assert_eq!(edges.len(), 4, "{mode}: {edges:?}");
        let total = p["total"].as_u64().unwrap();
        let selfs: u64 = crate::support::self_sum(&p);
        assert_eq!(selfs, total, "{mode}: self times add up to the total");
        if mode == "cost" {
            // Deterministic: exactly fib's instructions fewer.
            let fib_self = full["functions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == "fib")
                .unwrap()["self"]
                .as_u64()
                .unwrap();
            assert_eq!(total, full["total"].as_u64().unwrap() - fib_self);
        }
        let report = s.run(&["report", "p.wprof"]);
        assert!(
            stdout(&report).contains("1 function without probes (--only/--exclude)"),
            "{}",
            stdout(&report)
        );
    }
}

#[test]
fn only_probes_what_matches_and_the_cache_keys_know_the_selection() {
    let s = Scratch::new();
    // `print` alone (and the imports, which are never left out): its caller is the root.
    let p = profiled(&s, &["--only", "pr?nt"]);
    assert_eq!(names(&p), ["print", "wasi_snapshot_preview1::fd_write"]);
    let unprobed: Vec<&str> = p["unprobed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(unprobed, ["fib", "utoa", "_start"]);
    let i = &p["instrumentation"];
    assert_eq!(i["functions_instrumented"], 4, "{i}");
    // The same selection again: nothing instrumented; another: instrumented anew; none: the
    // full profile.
    let again = profiled(&s, &["--only", "pr?nt"]);
    assert_eq!(again["instrumentation"]["module_from_cache"], true);
    let ids = profiled(&s, &["--exclude", "/^f/", "--exclude", "#4"]);
    assert_eq!(ids["instrumentation"]["module_from_cache"], false);
    let mut u: Vec<&str> = ids["unprobed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    u.sort();
    assert_eq!(u.len(), 2, "{u:?}");
    assert!(u.contains(&"fib"));
    let all = profiled(&s, &[]);
    assert!(all.get("unprobed").is_none());
    assert_eq!(calls(&all, "fib"), 242_785);

    // WPROF_FILTER, and the configuration file, say the same.
    let fib = sample("fib.wasm");
    let out = s
        .wprof(&["run", "-q", "-o", "e.wprof", fib.to_str().unwrap()])
        .env("WPROF_FILTER", "!fib")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.profile("e.wprof")["unprobed"], serde_json::json!(["fib"]));
    std::fs::write(s.path("wprof.toml"), "exclude = [\"fib\"]\n").unwrap();
    let p = profiled(&s, &[]);
    assert_eq!(p["unprobed"], serde_json::json!(["fib"]));
    let out = s.run(&["config", "--json", fib.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["filter"]["value"], "!fib");
    assert_eq!(v["filter"]["source"], "wprof.toml:1");
}

#[test]
fn a_bad_pattern_is_one_line_and_exit_2() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    for args in [
        vec!["--only", "/(/"],
        vec!["--exclude", "#9-2"],
        vec!["--exclude", "a["],
    ] {
        let out = s.run(&[&["run"], &args[..], &[fib.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert_eq!(stdout(&out), "");
    }
    let out = s
        .wprof(&["run", fib.to_str().unwrap()])
        .env("WPROF_FILTER", "!/(/")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("WPROF_FILTER"), "{}", stderr(&out));
    std::fs::write(s.path("wprof.toml"), "\ninclude = [\"#x\"]\n").unwrap();
    let out = s.run(&["run", fib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("wprof: error: wprof.toml:2: include:"),
        "{}",
        stderr(&out)
    );
}
