//! Interpreted languages through the binary: a Lua 5.4 interpreter (the benchmark set's
//! `lua.wasm`, built by `bash bench/programs/build.sh --small`) runs scripts whose
//! functions do known shares of the work. In the default mode the profile shows the
//! script's functions where the interpreter's eval loop ran them, named by their source
//! lines, with the shares the script gives them; `--native` shows the eval loop instead,
//! with the same time.

use std::path::PathBuf;

use wprof::profile::Profile;

use crate::support::{stderr, stdout, Scratch};

/// The benchmark set's Lua, if built.
fn lua_wasm() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench/lua.wasm");
    if path.is_file() {
        return Some(path);
    }
    if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
        panic!(
            "{} is required: bash bench/programs/build.sh --small",
            path.display()
        );
    }
    crate::tools::skip("no .tools/bench/lua.wasm (bash bench/programs/build.sh --small)");
    None
}

/// Three functions of one body doing 1, 2 and 3 parts of the work, called from a fourth,
/// recursion beside them, and a function its source line does not name.
const SHARES: &str = "local function part_a(n)
  local s = 0
  for i = 1, n do s = (s + i * i) % 1000003 end
  return s
end
local function part_b(n)
  local s = 0
  for i = 1, n do s = (s + i * i) % 1000003 end
  return s
end
local function part_c(n)
  local s = 0
  for i = 1, n do s = (s + i * i) % 1000003 end
  return s
end
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local function round(n)
  return part_a(n) + part_b(2 * n) + part_c(3 * n)
end
local total = 0
for r = 1, 40 do total = total + round(100000) end
local ops = {}
ops[1] = function(n) local s = 0 for i = 1, n do s = s + i end return s end
for r = 1, 20 do total = total + ops[1](200000) end
local twice = function(x) return 2 * x end
print(total, twice(fib(27)))
";

/// Runs `script` under `lua.wasm` with `wprof run` and `flags`: the profile.
fn profile_of(s: &Scratch, lua: &std::path::Path, script: &str, flags: &[&str]) -> Profile {
    let dir = s.path("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("shares.lua"), script).unwrap();
    let mapping = format!("{}::/s", dir.display());
    let mut args = vec!["run", "-o", "out.wprof", "--dir", &mapping];
    args.extend(flags);
    let lua = lua.to_str().unwrap();
    args.extend([lua, "/s/shares.lua"]);
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("\t392836"), "{}", stdout(&out));
    Profile::read(&s.path("out.wprof")).unwrap()
}

#[test]
fn a_lua_scripts_functions_stand_where_the_eval_loop_ran_them_with_their_shares() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    let profile = profile_of(&s, &lua, SHARES, &[]);
    let problems = profile.violations();
    assert!(problems.is_empty(), "{problems:?}");
    let script: Vec<&str> = profile
        .functions
        .iter()
        .filter(|f| f.is_script())
        .map(|f| f.name.as_str())
        .collect();
    for name in [
        "part_a (/s/shares.lua:1)",
        "part_b (/s/shares.lua:6)",
        "part_c (/s/shares.lua:11)",
        "round (/s/shares.lua:17)",
        "fib (/s/shares.lua:16)",
        "main chunk </s/shares.lua>",
        // Named as Lua's traceback names it, by the instruction that called it.
        "field 'integer index' (/s/shares.lua:23)",
    ] {
        assert!(script.contains(&name), "no {name} in {script:?}");
    }
    let f = |name: &str| {
        profile
            .functions
            .iter()
            .find(|f| f.name.starts_with(name))
            .unwrap()
    };
    // The known split, within 5 points of total variation.
    let parts = [
        f("part_a ").self_time,
        f("part_b ").self_time,
        f("part_c ").self_time,
    ];
    let sum: u64 = parts.iter().sum();
    let distance: f64 = parts
        .iter()
        .zip([1.0, 2.0, 3.0])
        .map(|(&t, k)| (t as f64 / sum as f64 - k / 6.0).abs())
        .sum::<f64>()
        / 2.0;
    assert!(
        distance <= 0.05,
        "shares {parts:?}: {distance:.3} from 1:2:3"
    );
    // The script's calls nest as it made them: round's time holds its parts'.
    assert!(f("round ").inclusive >= sum);
    assert!(f("main chunk ").inclusive >= f("round ").inclusive);
    // The eval loop's own frames gave their place to the script's.
    let eval = f("luaV_execute");
    assert!(
        eval.self_time * 20 <= profile.total,
        "luaV_execute keeps {} of {}",
        eval.self_time,
        profile.total
    );

    // `--native`: the interpreter's own frames, the eval loop where the script's were,
    // with as much of the time (within 5 points: two runs).
    let native = profile_of(&s, &lua, SHARES, &["--native"]);
    assert!(native.functions.iter().all(|f| !f.is_script()));
    let in_script: u64 = profile
        .functions
        .iter()
        .filter(|f| f.is_script())
        .map(|f| f.self_time)
        .sum::<u64>()
        + eval.self_time;
    let in_eval = native
        .functions
        .iter()
        .find(|f| f.name == "luaV_execute")
        .unwrap()
        .self_time;
    let share = |t: u64, p: &Profile| t as f64 / p.total as f64;
    let (a, b) = (share(in_script, &profile), share(in_eval, &native));
    assert!(
        (a - b).abs() <= 0.05,
        "script {a:.3} against the eval loop's {b:.3}"
    );
}

#[test]
fn the_text_report_marks_a_scripts_functions_and_counts_no_calls_for_them() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    profile_of(&s, &lua, SHARES, &[]);
    let out = s.run(&["report", "out.wprof"]);
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("part_c (/s/shares.lua:11)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with("[lua]"), "{line}");
    // The calls column: not counted.
    let columns: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(columns[6], "-", "{line}");
}

#[test]
fn annotate_shows_the_time_of_a_scripts_lines_in_its_source() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    profile_of(&s, &lua, SHARES, &[]);
    let out = s.run(&["annotate", "out.wprof"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let block = text
        .split("\n\n")
        .find(|b| b.starts_with("part_c (/s/shares.lua:11)"))
        .unwrap_or_else(|| panic!("no part_c in {text}"));
    // Its loop is all its time, shown in the script's source, read where --dir put it.
    assert!(block.contains("shares.lua"), "{block}");
    let hot = block
        .lines()
        .find(|l| l.contains("13:   for i = 1, n do"))
        .unwrap_or_else(|| panic!("{block}"));
    assert!(hot.contains("100.0%"), "{hot}");

    // pprof carries the same lines, and the script's file for its functions: `go tool
    // pprof -lines` puts part_c's time at line 13 of the script on this machine.
    let out = s.run(&[
        "report",
        "out.wprof",
        "--format",
        "pprof",
        "-o",
        "out.pb.gz",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let Some(rows) = crate::tools::pprof_top(&s, "out.pb.gz", &["-lines", "-unit=ns"]) else {
        return;
    };
    let script = s.path("scripts").join("shares.lua");
    let part_c = format!("part_c (/s/shares.lua:11) {}:13", script.display());
    let (flat, _) = rows.get(&part_c).unwrap_or_else(|| panic!("{rows:?}"));
    let p = Profile::read(&s.path("out.wprof")).unwrap();
    let own = p
        .functions
        .iter()
        .find(|f| f.name.starts_with("part_c ("))
        .unwrap();
    assert_eq!(*flat, own.self_time, "{rows:?}");
}

/// `wasm` without its DWARF (every `.debug_*` section), its name section kept.
fn without_dwarf(wasm: &[u8]) -> Vec<u8> {
    let mut out = wasm[..8].to_vec();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let payload = payload.unwrap();
        let Some((id, range)) = payload.as_section() else {
            continue;
        };
        if let wasmparser::Payload::CustomSection(c) = &payload {
            if c.name().starts_with(".debug_") {
                continue;
            }
        }
        out.push(id);
        leb128(&mut out, range.len());
        out.extend_from_slice(&wasm[range]);
    }
    out
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[test]
fn an_interpreter_whose_structures_cannot_be_read_is_profiled_as_native_code_with_one_warning() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    let stripped = s.path("lua-stripped.wasm");
    std::fs::write(&stripped, without_dwarf(&std::fs::read(&lua).unwrap())).unwrap();
    let dir = s.path("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("shares.lua"), SHARES).unwrap();
    let mapping = format!("{}::/s", dir.display());
    let out = s.run(&[
        "run",
        "-o",
        "out.wprof",
        "--dir",
        &mapping,
        stripped.to_str().unwrap(),
        "/s/shares.lua",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("\t392836"));
    let warnings: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.contains("warning"))
        .map(str::to_string)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("a Lua interpreter (no `lua_State.ci` in the module's DWARF)"),
        "{warnings:?}"
    );
    let profile = Profile::read(&s.path("out.wprof")).unwrap();
    assert!(profile.functions.iter().all(|f| !f.is_script()));
    assert!(profile
        .functions
        .iter()
        .any(|f| f.name == "luaV_execute" && f.self_time * 2 > profile.total));
}
