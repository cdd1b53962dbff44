//! The environment variables wprof reads, in one list: `wprof --help` and `wprof run --help`
//! print it, and a test checks it against every `WPROF_` name in the source, so that help
//! and code cannot drift apart.
//!
//! A meaning may name `{modes}`, `{default_mode}`, `{period_us}`, `{default_cap}` and
//! `{short_max}`: the caller fills them in from the definitions the code uses (the mode
//! enum, the sampler's period, the cache's cap, time mode's bound on short functions).

/// One variable.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it does; lines after the first are continuations.
    pub meaning: &'static str,
}

/// Every variable wprof reads.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "WPROF",
        meaning: "0|off|false: run the original module as plain wasmtime would: no probes,\n\
                  no profile; its compiled code is cached (not with --no-cache)",
    },
    Variable {
        name: "WPROF_CONFIG",
        meaning: "the configuration file (default ./wprof.toml if there is one; `off`:\n\
                  none); flags and WPROF_* variables win over it (see `wprof config`)",
    },
    Variable {
        name: "WPROF_MODE",
        meaning: "{modes}: what `wprof run` measures\n\
                  (like --mode; default {default_mode})",
    },
    Variable {
        name: "WPROF_FILTER",
        meaning: "which functions get probes: patterns separated by commas, `!PATTERN`\n\
                  to exclude (like --only / --exclude)",
    },
    Variable {
        name: "WPROF_LIVE",
        meaning: "1|0: like --live (probes behind switches that `wprof ctl` and edits of\n\
                  the configuration file's `off` list turn while the program runs)",
    },
    Variable {
        name: "WPROF_OUT",
        meaning: "profile path (like -o; default ./<module stem>.wprof)",
    },
    Variable {
        name: "WPROF_CACHE_DIR",
        meaning: "cache directory (like --cache-dir; default $XDG_CACHE_HOME/wprof,\n\
                  else ~/.cache/wprof)",
    },
    Variable {
        name: "WPROF_CACHE_MAX_SIZE",
        meaning: "size cap of the cache, kept after runs that store something\n\
                  (default {default_cap}; `off` for none; see `wprof cache gc`)",
    },
    Variable {
        name: "WPROF_INCREMENTAL",
        meaning: "0|off: like --no-incremental (the probed modes keep no compiled function\n\
                  for the module's next version: a faster first run, half the cache)",
    },
    Variable {
        name: "WPROF_CALL_SITES",
        meaning: "1|0: like --call-sites (caller -> callee edges split by call site)",
    },
    Variable {
        name: "WPROF_COVERAGE",
        meaning: "1|0: like --coverage (every basic block's executions counted, for\n\
                  `wprof report --format coverage|lcov`)",
    },
    Variable {
        name: "WPROF_TRACE",
        meaning: "1|true|yes|on (or 0|false|...): like --trace (a trace of the calls, time mode)",
    },
    Variable {
        name: "WPROF_TRACE_OUT",
        meaning: "like --trace-out FILE (where --trace writes the trace)",
    },
    Variable {
        name: "WPROF_TRACE_BUFFER",
        meaning: "like --trace-buffer N (the most calls a trace keeps)",
    },
    Variable {
        name: "WPROF_TRACE_DEPTH",
        meaning: "like --trace-depth N (a trace keeps calls at most N frames deep)",
    },
    Variable {
        name: "WPROF_SERVE",
        meaning: "like --serve ADDR (the running profile at http://ADDR/debug/pprof/profile)",
    },
    Variable {
        name: "WPROF_ALLOCS",
        meaning: "1|0: like --allocs (every block the module's allocator hands out,\n\
                  by calling context, and those live at exit)",
    },
    Variable {
        name: "WPROF_SHORT_MAX",
        meaning: "time mode: functions of straight-line code of at most N instructions\n\
                  are counted, not timed (like --short-max; default {short_max}; 0: time all)",
    },
    Variable {
        name: "WPROF_SAMPLE_PERIOD_US",
        meaning: "stack, sample and adaptive mode's period in µs (like --sample-period-us;\n\
                  default {period_us})",
    },
    Variable {
        name: "WPROF_ADAPTIVE_CALLS",
        meaning: "adaptive mode's timed activations per step of a walk (like\n\
                  --adaptive-calls; default 1000)",
    },
    Variable {
        name: "WPROF_ADAPTIVE_TIMERS",
        meaning: "adaptive mode's most functions timed at once (like\n\
                  --adaptive-timers; default 4)",
    },
    Variable {
        name: "WPROF_INJECT",
        meaning: "faults to inject into imported functions, comma-separated (like\n\
                  --inject; e.g. wasi:fd_write=errno:EIO@2)",
    },
    Variable {
        name: "WPROF_PERFMAP",
        meaning: "1: write /tmp/perf-PID.map so that `perf report` names the wasm\n\
                  functions (of the original with WPROF=0, else the instrumented)",
    },
    Variable {
        name: "WPROF_TIMINGS",
        meaning: "text|json: print wprof's own phase times (like --timings)",
    },
    Variable {
        name: "WPROF_PROGRESS_DELAY_MS",
        meaning: "how long a start (instrumenting, compiling) runs before its\n\
                  progress bar shows on a terminal (default 1000)",
    },
    Variable {
        name: "WPROF_LOG",
        meaning: "wprof's own log filter, e.g. `debug` (off by default); `info`\n\
                  logs each phase's duration",
    },
];

/// The help section: `Environment:` and one entry per variable, `fill` replacing the
/// placeholders of each meaning.
pub fn help(fill: &[(&str, String)]) -> String {
    const COLUMN: usize = 27;
    let mut out = String::from("Environment:\n");
    for v in VARIABLES {
        let mut meaning = v.meaning.to_string();
        for (placeholder, value) in fill {
            meaning = meaning.replace(&format!("{{{placeholder}}}"), value);
        }
        let mut lines = meaning.lines().map(str::trim);
        let first = lines.next().unwrap_or_default();
        if v.name.len() + 4 <= COLUMN {
            out.push_str(&format!(
                "  {:<width$}{first}\n",
                v.name,
                width = COLUMN - 2
            ));
        } else {
            out.push_str(&format!("  {}  {first}\n", v.name));
        }
        for line in lines {
            out.push_str(&format!("{:COLUMN$}{line}\n", ""));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names the source mentions that are not wprof's settings: test switches and hooks.
    const NOT_SETTINGS: &[&str] = &[
        // Set when wprof is built (`build.rs`), not read when it runs.
        "WPROF_FACTS_CODE",
        "WPROF_REQUIRE_TOOLS",
        "WPROF_SURELY_UNSET_VARIABLE",
        "WPROF_TEST_PANIC_IN",
        "WPROF_TEST_SLOW_PREPARE_MS",
        "WPROF_TEST_TIME_FLOOR",
        "WPROF_WRITE_REFERENCE",
    ];

    fn sources(dir: &std::path::Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(file!()) {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }

    #[test]
    fn every_variable_the_code_reads_is_in_the_list() {
        let mut text = String::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut text,
        );
        let names = regex::Regex::new(r#""(WPROF_[A-Z0-9_]+)""#).unwrap();
        let mut found: Vec<&str> = names
            .captures_iter(&text)
            .map(|c| c.get(1).unwrap().as_str())
            .filter(|n| !NOT_SETTINGS.contains(n))
            .collect();
        found.sort_unstable();
        found.dedup();
        assert!(found.len() >= 8, "{found:?}");
        for name in found {
            assert!(
                VARIABLES.iter().any(|v| v.name == name),
                "the code reads {name}, which the help's list lacks"
            );
        }
    }

    #[test]
    fn the_help_fills_every_placeholder() {
        let help = help(&[
            ("modes", "a|b".into()),
            ("default_mode", "a".into()),
            ("period_us", "100".into()),
            ("default_cap", "5G".into()),
            ("short_max", "40".into()),
        ]);
        assert!(!help.contains('{'), "{help}");
        assert!(help.contains("a|b: what `wprof run` measures"), "{help}");
        for v in VARIABLES {
            assert!(help.contains(&format!("  {}", v.name)), "{help}");
        }
    }
}
