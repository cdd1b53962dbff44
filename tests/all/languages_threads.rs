//! An interpreter on several threads: the benchmark set's `lua_mt.wasm` (built by `bash
//! bench/programs/build.sh --small`) runs one Lua state per wasi-thread, each on
//! `workers.lua`, as plugin hosts run one interpreter per worker. In every mode that
//! samples, each thread's script frames stand where its eval loop ran them, the threads'
//! functions are one function each in the profile, and the script's known split holds.

use std::path::{Path, PathBuf};

use wprof::profile::Profile;

use crate::languages::assert_one_two_three;
use crate::support::{stderr, stdout, Scratch};

/// The threaded Lua host and the folder its script is in, if built.
fn lua_mt() -> Option<(PathBuf, PathBuf)> {
    let wasm = crate::languages::bench_tool("lua_mt.wasm")?;
    let data = wasm.parent().unwrap().join("data");
    Some((wasm, data))
}

/// Runs `workers.lua` on the threaded host in `mode`: the profile.
fn profile_of(s: &Scratch, (wasm, data): (&Path, &Path), mode: &str) -> Profile {
    let mapping = format!("{}::/data", data.display());
    let out = s.run(&[
        "run",
        "--mode",
        mode,
        "-o",
        "out.wprof",
        "--dir",
        &mapping,
        wasm.to_str().unwrap(),
        "/data/workers.lua",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The same output as under the wasmtime CLI (bench/programs/build.sh checks it there).
    assert!(
        stdout(&out).contains("checksum 285968167314546895"),
        "{}",
        stdout(&out)
    );
    Profile::read(&s.path("out.wprof")).unwrap()
}

#[test]
fn every_thread_of_a_threaded_interpreter_has_its_scripts_frames_in_every_sampling_mode() {
    let Some((wasm, data)) = lua_mt() else {
        return;
    };
    let s = Scratch::new();
    for mode in ["stack", "sample", "adaptive"] {
        let profile = profile_of(&s, (&wasm, &data), mode);
        let problems = profile.violations();
        assert!(problems.is_empty(), "{mode}: {problems:?}");
        let named = |name: &str| {
            let found: Vec<_> = profile
                .functions
                .iter()
                .filter(|f| f.name == name)
                .collect();
            assert_eq!(found.len(), 1, "{mode}: {name} once: {found:?}");
            found[0]
        };
        // One function each, whichever threads ran it, named by its source line.
        let churn = named("churn (/data/workers.lua:5)");
        assert!(churn.is_script());
        // The known split, by the parts' inclusive time (each calls churn for all of it).
        let parts = [("a", 14), ("b", 15), ("c", 16)]
            .map(|(part, line)| named(&format!("part_{part} (/data/workers.lua:{line})")));
        assert_one_two_three(parts.map(|f| f.inclusive));
        // The eval loop gave its place to the script in every thread: nearly all the
        // time is the script's.
        let eval = named("luaV_execute");
        assert!(
            eval.self_time * 20 <= profile.total,
            "{mode}: luaV_execute keeps {} of {}",
            eval.self_time,
            profile.total
        );
        assert!(
            churn.self_time * 10 >= profile.total * 8,
            "{mode}: {churn:?}"
        );
        // Each of the three workers ran the script: where the profile keeps each thread's
        // contexts, every spawned thread has churn in its own.
        let threads = profile.threads.as_ref().expect("a threads record");
        let spawned: Vec<u32> = threads
            .threads
            .iter()
            .map(|t| t.id)
            .filter(|&id| id != 0)
            .collect();
        assert_eq!(spawned.len(), 3, "{mode}: {threads:?}");
        if profile.contexts.iter().any(|c| c.thread.is_some()) {
            for id in spawned {
                assert!(
                    profile
                        .contexts
                        .iter()
                        .any(|c| c.thread == Some(id) && c.function == churn.id && c.self_time > 0),
                    "{mode}: thread {id} has no time in churn"
                );
            }
        }
    }
}
