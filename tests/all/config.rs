//! The configuration file through the binary: precedence (flag over variable over file over
//! default), `[[module]]` sections, the cache's settings, and bad files.

use serde_json::Value;

use crate::support::{calls, sample, stderr, stdout, Scratch};

fn config_json(s: &Scratch, args: &[&str], envs: &[(&str, &str)]) -> Value {
    let mut cmd = s.wprof(&[&["config", "--json"], args].concat());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn each_source_wins_over_the_next() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let fib = fib.to_str().unwrap();
    let cfg = |s: &Scratch, args: &[&str], envs: &[(&str, &str)]| {
        let v = config_json(s, &[args, &[fib]].concat(), envs);
        (
            v["mode"]["value"].as_str().unwrap().to_string(),
            v["mode"]["source"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(cfg(&s, &[], &[]), ("stack".into(), "default".into()));
    std::fs::write(s.path("wprof.toml"), "mode = \"cost\"\n").unwrap();
    assert_eq!(cfg(&s, &[], &[]), ("cost".into(), "wprof.toml:1".into()));
    assert_eq!(
        cfg(&s, &[], &[("WPROF_MODE", "time")]),
        ("time".into(), "WPROF_MODE".into())
    );
    assert_eq!(
        cfg(&s, &["--mode", "sample"], &[("WPROF_MODE", "time")]),
        ("sample".into(), "flag".into())
    );
    // WPROF_CONFIG names another file, or none.
    std::fs::write(s.path("other.toml"), "\n\nmode = \"time\"\n").unwrap();
    assert_eq!(
        cfg(&s, &[], &[("WPROF_CONFIG", "other.toml")]),
        ("time".into(), "other.toml:3".into())
    );
    assert_eq!(
        cfg(&s, &[], &[("WPROF_CONFIG", "off")]),
        ("stack".into(), "default".into())
    );

    // And a run does what `wprof config` says: the file's mode, then the variable's.
    let out = s.run(&["run", "-q", fib]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("fib.wprof");
    assert_eq!(p["mode"], "cost");
    assert_eq!(calls(&p, "fib"), 242_785);
    let out = s
        .wprof(&["run", "-q", fib])
        .env("WPROF_MODE", "time")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.profile("fib.wprof")["mode"], "time");
}

#[test]
fn module_sections_match_by_name_or_blake3_and_win_over_the_top_level() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let digest = blake3::hash(&std::fs::read(&fib).unwrap()).to_hex();
    std::fs::write(
        s.path("wprof.toml"),
        format!(
            "sample_period_us = 300\n\
             output = \"profiles/all.wprof\"\n\
             [[module]]\n\
             name = \"exit_*.wasm\"\n\
             profiling = false\n\
             [[module]]\n\
             blake3 = \"{}\"\n\
             mode = \"cost\"\n\
             output = \"profiles/fib.wprof\"\n",
            &digest[..12]
        ),
    )
    .unwrap();
    let v = config_json(&s, &[fib.to_str().unwrap()], &[]);
    assert_eq!(v["module_section"], 6);
    assert_eq!(v["mode"]["value"], "cost");
    assert_eq!(v["mode"]["source"], "wprof.toml:8 ([[module]] of line 6)");
    assert_eq!(v["sample_period_us"]["value"], 300);
    assert_eq!(v["sample_period_us"]["source"], "wprof.toml:1");

    // The section's output, its directory made; the run profiled in cost mode.
    let out = s.run(&["run", "-q", fib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("profiles/fib.wprof");
    assert_eq!(p["mode"], "cost");
    assert_eq!(calls(&p, "fib"), 242_785);

    // `profiling = false` for exit_code.wasm: the original runs, no profile; WPROF=1 wins.
    let exit = sample("exit_code.wasm");
    let out = s.run(&["run", "-q", exit.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(!s.path("profiles/all.wprof").exists());
    let out = s
        .wprof(&["run", "-q", exit.to_str().unwrap()])
        .env("WPROF", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(s.path("profiles/all.wprof").is_file());
}

#[test]
fn the_cache_settings_apply_to_every_command() {
    let s = Scratch::new();
    std::fs::write(
        s.path("wprof.toml"),
        "[cache]\ndir = \"from-file\"\nmax_size = \"off\"\n",
    )
    .unwrap();
    let fib = sample("fib.wasm");
    // The file's directory when no flag or variable names one.
    let out = s
        .wprof(&["run", "-q", fib.to_str().unwrap()])
        .env_remove("WPROF_CACHE_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(s.path("from-file/FORMAT").is_file());
    assert!(!s.cache_dir().exists());
    let out = s
        .wprof(&["cache", "gc"])
        .env_remove("WPROF_CACHE_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("cap none"), "{}", stdout(&out));
    let v = config_json(&s, &[], &[]);
    assert_eq!(v["cache_max_size"]["value"], Value::Null);
    assert_eq!(v["cache_max_size"]["source"], "wprof.toml:3");
    // The variable still wins.
    let v = config_json(&s, &[], &[("WPROF_CACHE_MAX_SIZE", "1G")]);
    assert_eq!(v["cache_max_size"]["value"], 1u64 << 30);
}

#[test]
fn a_bad_file_is_one_line_and_exit_2_before_anything_runs() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    for (text, want) in [
        (
            "mode = \"fast\"\n",
            "wprof.toml:1: mode: \"fast\" is not a mode",
        ),
        (
            "mode = \"cost\"\nsample_rate = 3\n",
            "wprof.toml:2: sample_rate: unknown field",
        ),
        ("call_sites = 1\n", "wprof.toml:1: call_sites: invalid type"),
        (
            "[cache]\nmax_size = \"big\"\n",
            "wprof.toml:2: cache.max_size:",
        ),
        (
            "[[module]]\nmode = \"cost\"\n",
            "wprof.toml:1: module: a section needs",
        ),
        ("mode = \"cost\n", "wprof.toml:1: mode:"),
        (
            "inject = [\"wasi:fd_write=explode\"]\n",
            "wprof.toml:1: inject: wasi:fd_write=explode: `explode`: the action is",
        ),
    ] {
        std::fs::write(s.path("wprof.toml"), text).unwrap();
        for args in [
            vec!["run", fib.to_str().unwrap()],
            vec!["config"],
            vec!["instrument", fib.to_str().unwrap()],
            vec!["cache", "ls"],
        ] {
            let out = s.run(&args);
            assert_eq!(out.status.code(), Some(2), "{text:?} {args:?}");
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with(&format!("wprof: error: {want}")),
                "{text:?} {args:?}: {err}"
            );
            assert_eq!(stdout(&out), "", "nothing ran");
        }
        assert!(!s.cache_dir().exists(), "the cache untouched");
        assert!(!s.path("fib.wprof").exists(), "no profile");
    }
    // A file WPROF_CONFIG names must exist.
    let out = s
        .wprof(&["config"])
        .env("WPROF_CONFIG", s.path("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
    // Commands that read no settings ignore it.
    let out = s.run(&["report", "--help"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn instrument_alone_prepares_the_modules_the_file_names() {
    let s = Scratch::new();
    let out = s.run(&["instrument"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no modules to prepare"),
        "{}",
        stderr(&out)
    );

    std::fs::copy(sample("fib.wasm"), s.path("fib.wasm")).unwrap();
    std::fs::write(
        s.path("wprof.toml"),
        "[[module]]\npath = \"fib.wasm\"\nmode = \"cost\"\nexclude = [\"utoa\"]\n",
    )
    .unwrap();
    let out = s.run(&["instrument", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The run that follows, with the same file, finds everything prepared.
    let out = s.run(&["run", "-q", "fib.wasm"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = s.profile("fib.wprof");
    assert_eq!(p["mode"], "cost");
    assert_eq!(p["unprobed"], serde_json::json!(["utoa"]));
    assert_eq!(p["instrumentation"]["module_from_cache"], true);
    assert_eq!(p["instrumentation"]["compiled_from_cache"], true);
}

#[test]
fn live_and_off_come_from_flags_variables_or_the_file() {
    let s = Scratch::new();
    let fib = sample("fib.wasm");
    let fib = fib.to_str().unwrap();
    let live = |args: &[&str], envs: &[(&str, &str)]| {
        let v = config_json(&s, &[args, &[fib]].concat(), envs);
        (
            v["live"]["value"].as_bool().unwrap(),
            v["live"]["source"].as_str().unwrap().to_string(),
            v["off"]["value"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(live(&[], &[]), (false, "default".into(), String::new()));
    assert_eq!(
        live(&[], &[("WPROF_LIVE", "1")]),
        (true, "WPROF_LIVE".into(), String::new())
    );
    std::fs::write(
        s.path("wprof.toml"),
        "live = false\n[[module]]\nname = \"fib*\"\noff = [\"fib\", \"/^print/\"]\n",
    )
    .unwrap();
    // Switches that start off make the probes live, whatever `live` says.
    assert_eq!(
        live(&[], &[]),
        (
            true,
            "wprof.toml:4 ([[module]] of line 2)".into(),
            "fib,/^print/".into()
        )
    );
    // The flag's list wins over the file's.
    assert_eq!(live(&["--off", "main"], &[]).2, "main");
    // A bad pattern in `off` is the file's one-line error.
    std::fs::write(s.path("wprof.toml"), "off = [\"/(/\"]\n").unwrap();
    let out = s.run(&["config", fib]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("wprof: error: wprof.toml:1: off: "),
        "{}",
        stderr(&out)
    );
}
