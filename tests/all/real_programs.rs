//! Every mode on the real programs of the benchmark set (`bash bench/programs/build.sh
//! --small`, which `.ci/run` runs): the program's output and exit code are unchanged, and
//! every profile keeps its promises (self <= inclusive for functions, edges and contexts,
//! the self times adding up to the total, min <= max), checked by
//! [`wprof::profile::Profile::violations`].
//!
//! The list is `.tools/bench/programs.json` (or `WPROF_BENCH_PROGRAMS`). Without it the
//! tests say so and pass, unless `WPROF_REQUIRE_TOOLS` is set.

use std::path::PathBuf;

use wprof::commands::bench::programs::read_programs;

use crate::support::{stderr, stdout, Scratch};

fn programs_file() -> Option<PathBuf> {
    let file = match std::env::var_os("WPROF_BENCH_PROGRAMS") {
        Some(f) => PathBuf::from(f),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench/programs.json"),
    };
    if file.is_file() {
        return Some(file);
    }
    if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
        panic!(
            "{} is required (WPROF_REQUIRE_TOOLS): run `bash bench/programs/build.sh --small`",
            file.display()
        );
    }
    crate::tools::skip(&format!(
        "no {} (bash bench/programs/build.sh --small)",
        file.display()
    ));
    None
}

/// Each edge's calls in each probed mode, by (caller, callee).
type EdgeCalls = std::collections::BTreeMap<(Option<u32>, u32), Vec<u64>>;

/// Stack mode's edge counters against the probed modes' calls, for the edges on which the
/// three runs agree (as for functions: a program's hashes seeded by the time or a scheduler
/// make some calls vary): equal, but for a race's, Go's switches or Lua's seeds (within 1% of
/// the calls);
/// and the edges of an interpreter's script functions, which no probe counts, aside.
fn edge_calls_match(
    name: &str,
    profile: &wprof::profile::Profile,
    exact: &EdgeCalls,
    varies: bool,
) {
    let script = |id: u32| profile.function(id).is_some_and(|f| f.is_script());
    let mut counted: std::collections::BTreeMap<(Option<u32>, u32), u64> = Default::default();
    for e in &profile.edges {
        if !e.caller.is_some_and(script) && !script(e.callee) {
            *counted.entry((e.caller, e.callee)).or_default() += e.calls;
        }
    }
    let (mut compared, mut off, mut mismatched) = (0, 0, Vec::new());
    for (edge, calls) in exact {
        let exact = match calls.as_slice() {
            &[a, b, c] if a == b && b == c => a,
            _ => continue,
        };
        compared += 1;
        let stack = counted.get(edge).copied().unwrap_or(0);
        if stack != exact {
            let caller = edge
                .0
                .and_then(|c| profile.function(c))
                .map_or("(root)", |f| &f.name);
            let callee = profile.function(edge.1).map_or("?", |f| &f.name);
            mismatched.push(format!("{caller} -> {callee}: {stack} (probes {exact})"));
            off += stack.abs_diff(exact);
        }
    }
    let all: u64 = counted.values().sum();
    assert!(
        mismatched.is_empty() || varies && off * 100 <= all,
        "{name}: stack mode's edge calls differ from the probes' for {} of {compared} edges: {:?}",
        mismatched.len(),
        &mismatched[..mismatched.len().min(20)]
    );
    assert!(
        compared * 2 >= exact.len(),
        "{name}: the probed modes agree on {compared} edges' calls of {}",
        exact.len()
    );
}

/// Runs program `name` in every mode and checks each profile.
fn every_mode_keeps_its_promises(name: &str) {
    let Some(file) = programs_file() else {
        return;
    };
    let list = read_programs(&file).unwrap();
    let Some(program) = list.iter().find(|p| p.name == name) else {
        if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
            panic!("{name} is not in {}", file.display());
        }
        crate::tools::skip(&format!("{name} is not in {}", file.display()));
        return;
    };
    let on_stderr = program.expect_stream.as_deref() == Some("stderr");
    let s = Scratch::new();
    // Sample mode's edges, counted exactly: stack mode's must be among them. Each
    // function's calls as the probed modes counted them: where they agree, stack mode's
    // counters must say the same.
    let mut exact_edges = std::collections::HashSet::new();
    let mut exact_calls: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    let mut exact_edge_calls: EdgeCalls = Default::default();
    for mode in ["sample", "cost", "time", "stack"] {
        let out_name = format!("{name}.{mode}.wprof");
        let mut args: Vec<String> = vec!["run".into(), "--mode".into(), mode.into()];
        args.extend(["-o".into(), out_name.clone()]);
        if program.kind == "go" {
            // Go's collector paces itself by the clock: a faster run collects more or less
            // often (CI saw 393 cycles in stack mode against 319 in each probed mode, and
            // a million more write-barrier calls), so that no count of its functions
            // compares across modes. Without it the program's calls are its own.
            args.extend(["--env".into(), "GOGC=off".into()]);
        }
        for dir in program.dir_args(&s.path("")) {
            args.extend(["--dir".into(), dir]);
        }
        for variable in &program.env {
            args.extend(["--env".into(), variable.clone()]);
        }
        args.push(program.wasm.display().to_string());
        args.extend(program.args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = s.run(&args);
        let shown = if on_stderr {
            stderr(&out)
        } else {
            stdout(&out)
        };
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} in {mode} mode: {}",
            stderr(&out)
        );
        assert!(
            shown.contains(&program.expect),
            "{name} in {mode} mode printed no {:?}",
            program.expect
        );
        let profile = wprof::profile::Profile::read(&s.path(&out_name)).unwrap();
        assert_eq!(profile.mode, mode);
        assert!(profile.total > 0, "{name} in {mode} mode: empty profile");
        let broken = profile.violations();
        assert!(
            broken.is_empty(),
            "{name} in {mode} mode breaks {} promises, the first: {}",
            broken.len(),
            broken[0]
        );
        if program.threads {
            // zstd's workers: every spawned thread's tree is in the profile.
            let threads = profile
                .threads
                .as_ref()
                .expect("a threaded program's threads");
            assert!(threads.threads.len() >= 4, "{name}: {threads:?}");
            assert_eq!(threads.unfinished, 0, "{name}: {threads:?}");
            let on_workers: u64 = profile
                .contexts
                .iter()
                .filter(|c| c.thread.is_some_and(|t| t > 0))
                .map(|c| {
                    if mode == "stack" {
                        c.self_time
                    } else {
                        c.calls
                    }
                })
                .sum();
            assert!(
                on_workers > 0,
                "{name} in {mode} mode: nothing on the workers"
            );
        }
        if mode == "sample" {
            exact_edges.extend(profile.edges.iter().map(|e| (e.caller, e.callee)));
        }
        // Go's goroutines leave the machine's stack at every switch and come back through
        // `wasm_pc_f_loop`, which re-enters only the innermost frames: stack mode's stacks
        // start there, where sample mode keeps Go's own tree.
        let go = exact_edges.iter().any(|&(_, callee)| {
            profile
                .function(callee)
                .is_some_and(|f| f.name == "wasm_pc_f_loop")
        });
        if mode != "stack" {
            // An interpreter's script functions (sample mode's, after the module's, with
            // time and no calls) are no probe's count.
            let script = |id: u32| profile.function(id).is_some_and(|f| f.is_script());
            for f in profile.functions.iter().filter(|f| !f.is_script()) {
                exact_calls.entry(f.id).or_default().push(f.calls);
            }
            let native = profile
                .edges
                .iter()
                .filter(|e| !e.caller.is_some_and(script) && !script(e.callee));
            for e in native {
                exact_edge_calls
                    .entry((e.caller, e.callee))
                    .or_default()
                    .push(e.calls);
            }
        } else {
            assert!(profile.counts_edge_calls(), "{name}: edges not counted");
            // Lua seeds its strings' hashes with the time, which changes the order its
            // collector marks in: who calls the marker varies from run to run (1,465 of
            // reallymarkobject's 367,108 calls came from itself in half of six runs, from
            // propagatemark in the others), while each function's calls stay the same.
            let varies = go || program.threads || name.starts_with("lua");
            edge_calls_match(name, &profile, &exact_edge_calls, varies);
            // Each function's entry counter against the probed modes' count, where their
            // three runs agree (a program seeding its hashes with the time, such as Lua,
            // or a scheduler, such as Go's, calls some functions a varying number of
            // times): equal.
            let mut compared = 0;
            let mut mismatched = Vec::new();
            // Lua's `table.sort` draws a random pivot from `clock()` and `time()` once a
            // partition comes out unbalanced, which the pivots drawn before decide: how
            // many times it does varies from run to run, and three runs may agree by
            // chance.
            let drawn = |f: &wprof::profile::FunctionRecord| {
                name.starts_with("lua") && (f.name.contains("clock") || f.name.contains("time"))
            };
            for f in profile.functions.iter().filter(|f| !drawn(f)) {
                let exact = match exact_calls.get(&f.id).map(Vec::as_slice) {
                    Some(&[a, b, c]) if a == b && b == c => a,
                    _ => continue,
                };
                compared += 1;
                if f.calls != exact {
                    mismatched.push((
                        format!("{} {} (probes {exact})", f.name, f.calls),
                        f.calls.abs_diff(exact),
                    ));
                }
            }
            // Go: a few of the runtime's functions that run while goroutines switch
            // (the allocator's, 4 to 1,300 calls of 46k-566k) are counted apart from the
            // probes' rules for frames started over; within 1% of the calls. zstd's worker
            // pool makes a compression context or a buffer when no worker has handed one
            // back yet, so those calls follow the threads' race: run after run in one mode
            // (stack: `malloc` 90, 92, 93 times; sample: 93, 95) as across modes. Each
            // thread's exact calls are checked on a program without races
            // (`threads::every_mode_counts_each_thread_exactly`).
            let off: u64 = mismatched.iter().map(|(_, d)| d).sum();
            let all: u64 = profile.functions.iter().map(|f| f.calls).sum();
            assert!(
                mismatched.is_empty() || (go || program.threads) && off * 100 <= all,
                "{name}: stack mode's calls differ from the probes' for {mismatched:?}"
            );
            assert!(
                compared * 2 >= profile.functions.len(),
                "{name}: the probed modes agree on {compared} functions' calls of {}",
                profile.functions.len()
            );
        }
        if mode == "stack" && !go {
            // A caller the walk skips (a tick before the callee saved the frame pointer, or
            // at its return) would make an edge that never ran: none beyond a trace. (An
            // interpreter's script functions stand where its eval loop ran: their edges
            // are the script's, which no probe counts.)
            let script = |id: u32| profile.function(id).is_some_and(|f| f.is_script());
            let unknown: u64 = profile
                .edges
                .iter()
                .filter(|e| !e.caller.is_some_and(script) && !script(e.callee))
                .filter(|e| !exact_edges.contains(&(e.caller, e.callee)))
                .map(|e| e.inclusive)
                .sum();
            assert!(
                unknown * 200 <= profile.total,
                "{name}: stack mode's edges that sample mode never counted hold {unknown} of {}",
                profile.total
            );
        }
        if mode == "sample" && name == "fib" {
            // A call storm spends much of its instrumented time (about half) in the probes
            // of a two-line function: ticks land there, and that time is left out, so the
            // functions' time and the probes' add up to no more than the run's.
            let sampling = profile.sampling.as_ref().expect("sample mode says how");
            assert!(sampling.answered > 0, "{sampling:?}");
            let wall = profile.wall_time.expect("sample mode has a wall time");
            assert!(
                sampling.probe_ns > 0 && sampling.probe_ns + profile.total <= wall,
                "{sampling:?}, total {}, wall time {wall}",
                profile.total
            );
        }
    }
}

#[test]
fn lua_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("lua");
}

#[test]
fn lua_with_wasm_exceptions_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("lua_eh");
}

#[test]
fn python_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("python");
}

#[test]
fn python_312_without_names_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("python312");
}

#[test]
fn quickjs_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("quickjs");
}

#[test]
fn bellards_quickjs_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("quickjs_bellard");
}

#[test]
fn sqlite_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("sqlite");
}

#[test]
fn zstd_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("zstd");
}

#[test]
fn threaded_zstd_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("zstd_mt");
}

#[test]
fn a_lua_state_per_thread_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("lua_mt");
}

#[test]
fn sqlite_on_a_file_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("sqlite_file");
}

#[test]
fn many_small_files_keep_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("many_files");
}

#[test]
fn cpp_tiny_calls_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("tiny_calls");
}

#[test]
fn go_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("go_mix");
}

#[test]
fn a_call_storm_keeps_every_promise_in_every_mode() {
    every_mode_keeps_its_promises("fib");
}
