//! Linux `perf` as the reference for time: finding it, sampling the uninstrumented
//! program with it, and reading its samples back as a distribution over the module's
//! functions (see [`super::accuracy`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use super::programs::{timed, wprof_run, Program};
use crate::exit::{Failure, MISSING_TOOL};
use wprof_agent::{Indexed, ProbeMode};

/// Self time (or samples) per function id.
pub type Distribution = HashMap<u32, f64>;

/// `perf` on the PATH, able to sample.
pub fn find_perf() -> Result<PathBuf, Failure> {
    let perf = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("perf"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| Failure {
            code: MISSING_TOOL,
            message: "perf is not installed (Debian: apt-get install linux-perf); \
                      `wprof bench --accuracy` compares with its samples"
                .into(),
        })?;
    let ok = Command::new(&perf)
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(Failure {
            code: MISSING_TOOL,
            message: format!(
                "{} cannot record cpu-clock samples here (see /proc/sys/kernel/perf_event_paranoid)",
                perf.display()
            ),
        });
    }
    Ok(perf)
}

/// How often perf samples the program (`perf record -F`): each sample stands for
/// `1 / SAMPLES_PER_SECOND` of CPU time.
pub const SAMPLES_PER_SECOND: u32 = 4000;

/// perf's distribution of one uninstrumented run (`run` tells the runs' data files apart).
pub fn perf_truth(
    perf: &Path,
    program: &Program,
    scratch: &Path,
    run: usize,
    names: &HashMap<String, u32>,
) -> Result<Distribution, Failure> {
    let data = scratch.join(format!("perf-{run}.data"));
    let inner = wprof_run(
        program,
        scratch,
        &[("WPROF", "0"), ("WPROF_PERFMAP", "1")],
        &[],
    );
    let script = perf_script(perf, program, inner, &data)?;
    Ok(perf_distribution(&script, names, Some))
}

/// perf's distribution of `probed`, a `wprof run` in sample mode (with the engine's perf
/// map): where the probed program spends its time, the probes' own instructions counted in
/// the functions they sit in, as perf would show a user. Against [`perf_truth`] it says how
/// much the probes change where the program's time goes, which no attribution of samples
/// can undo: the part of sample mode's distance that is the probes' and not the sampler's.
/// `indices` places the instrumented module's functions (the probe imports, the node finder
/// and the retry functions are none of the module's).
pub fn perf_of_probed(
    perf: &Path,
    program: &Program,
    probed: Command,
    scratch: &Path,
    names: &HashMap<String, u32>,
    indices: wprof_agent::FunctionIndices,
) -> Result<Distribution, Failure> {
    let script = perf_script(perf, program, probed, &scratch.join("perf-probed.data"))?;
    Ok(perf_distribution(&script, names, |n| {
        original_function(&indices, n)
    }))
}

/// Runs `counted` (stack mode, its ticks a second apart, with a perf map) under perf: the
/// distribution of the program with stack mode's counters, whose functions keep their
/// names and indices (below `functions`, the original's count, imports included; a
/// function the counters add is wprof's own, left out).
pub fn perf_of_counted(
    perf: &Path,
    program: &Program,
    counted: Command,
    scratch: &Path,
    names: &HashMap<String, u32>,
    functions: u32,
) -> Result<Distribution, Failure> {
    let script = perf_script(perf, program, counted, &scratch.join("perf-counted.data"))?;
    Ok(perf_distribution(&script, names, |n| {
        (n < functions).then_some(n)
    }))
}

/// The original module's function that function `n` of the probed module is; `None` for
/// wprof's own.
fn original_function(indices: &wprof_agent::FunctionIndices, n: u32) -> Option<u32> {
    match indices.what(n) {
        Indexed::Function(id) | Indexed::ProbedCopy(id) => Some(id),
        Indexed::Probe => None,
    }
}

/// Where sample mode's instrumentation of `module` puts its functions; `None` if it does
/// not parse.
pub fn sample_mode_indices(module: &[u8]) -> Option<wprof_agent::FunctionIndices> {
    let (mut imports, mut defined) = (0u32, 0u32);
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload.ok()? {
            wasmparser::Payload::ImportSection(section) => {
                for import in section.into_imports() {
                    if matches!(import.ok()?.ty, wasmparser::TypeRef::Func(_)) {
                        imports += 1;
                    }
                }
            }
            wasmparser::Payload::FunctionSection(section) => defined = section.count(),
            _ => {}
        }
    }
    Some(wprof_agent::FunctionIndices {
        imports,
        functions: imports + defined,
        mode: ProbeMode::Sample,
        live: false,
    })
}

/// Runs `inner` under `perf record` into `data` and gives back `perf script`'s text.
fn perf_script(
    perf: &Path,
    program: &Program,
    inner: Command,
    data: &Path,
) -> Result<String, Failure> {
    let mut cmd = Command::new(perf);
    cmd.current_dir(inner.get_current_dir().unwrap_or(Path::new(".")))
        .args(["record", "-q", "-e", "cpu-clock", "-F"])
        .arg(SAMPLES_PER_SECOND.to_string())
        .args(["-g", "-o"])
        .arg(data)
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    timed(cmd, program)?;
    let script = Command::new(perf)
        .args(["script", "-F", "ip,sym,dso", "-i"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .context("cannot run perf script")?;
    Ok(String::from_utf8_lossy(&script.stdout).into_owned())
}

/// The name wasmtime's perf map gives a function with name-section name `raw`.
pub fn perf_name(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return d.to_string();
    }
    if let Ok(symbol) = cpp_demangle::Symbol::new(raw) {
        if let Ok(text) = symbol.demangle() {
            return text;
        }
    }
    raw.to_string()
}

/// perf's samples per function: each sample of `perf script -F ip,sym,dso` output charged
/// to the innermost frame of compiled wasm code (named by the engine's perf map, or by the
/// symbols of a compiled artifact loaded from the cache) that names a function of the module (`names`: perf name → id, or a `function[N]` symbol),
/// unless a WASI host function is inside it. Samples with no such frame (compiling, wprof's
/// own work, the process's `main`) are left out. `index` says which function of the module
/// a `function[N]` symbol names, if any.
pub fn perf_distribution(
    script: &str,
    names: &HashMap<String, u32>,
    index: impl Fn(u32) -> Option<u32>,
) -> Distribution {
    let mut counts = Distribution::new();
    for sample in script.split("\n\n") {
        for frame in sample.lines() {
            let Some((symbol, dso)) = frame_of(frame) else {
                continue;
            };
            if is_host_call(symbol) {
                break;
            }
            // Code compiled in this process is named by the perf map; code loaded from a
            // compiled artifact by the artifact's own symbols (`wasm[0]::function[N]::...`).
            let wasm_code = dso.starts_with("[JIT]")
                || dso.contains("/perf-") && dso.ends_with(".map")
                || symbol.starts_with("wasm[");
            if !wasm_code {
                continue;
            }
            let id = match names.get(symbol) {
                Some(&id) => Some(id),
                // `index` says `None` for wprof's own functions in a probed module (the
                // node finder, a retry function): left out, as perf shows them apart.
                None => match function_index(symbol) {
                    Some(n) => index(n),
                    None => continue,
                },
            };
            if let Some(id) = id {
                *counts.entry(id).or_default() += 1.0;
            }
            break;
        }
    }
    counts
}

/// Whether a frame is in a host function the module called (an import such as WASI's,
/// which wprof may implement itself, so its frames need not name `wasmtime_wasi`), or the
/// engine's way out of wasm into one: the sample is the import's, which both distributions
/// leave out. The engine's libcalls (`wasmtime_builtin_memory_copy` and the like) are not
/// host calls: their time is their wasm caller's.
fn is_host_call(symbol: &str) -> bool {
    [
        "wasmtime_wasi::",
        "wasi_snapshot_preview1",
        "wasm_to_array_trampoline",
        "wasm_to_native_trampoline",
    ]
    .iter()
    .any(|s| symbol.contains(s))
}

/// The symbol and object of one callchain line, `\t    7f0b... symbol (dso)`.
fn frame_of(line: &str) -> Option<(&str, &str)> {
    let (ip, rest) = line.trim_start().split_once(' ')?;
    if ip.is_empty() || !ip.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let rest = rest.trim();
    let open = rest.rfind(" (")?;
    let dso = rest[open + 2..].strip_suffix(')')?;
    Some((rest[..open].trim(), dso))
}

/// `N` of a `wasm[0]::function[N]...` symbol.
fn function_index(symbol: &str) -> Option<u32> {
    let rest = symbol.strip_prefix("wasm[0]::function[")?;
    rest[..rest.find(']')?].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_samples_go_to_the_innermost_module_function() {
        let script = "
\t    7f00 __memset_avx2_unaligned_erms (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t    1234 Rect::area() (/tmp/perf-12.map)
\t    5678 main (/tmp/perf-12.map)


\t    9999 wasm[0]::function[7]::anon (/tmp/perf-12.map)
\t    5678 main (/tmp/perf-12.map)


\t    aaaa wasmtime_wasi::p1::fd_write (/work/wprof)
\t    1234 Rect::area() (/tmp/perf-12.map)


\t    eeee write (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t    ffff wprof::run::wasi::stdio::write (/work/wprof)
\t    1111 wasmtime::runtime::func::HostFunc::array_call_trampoline (/work/wprof)
\t    2222 signatures[4]::wasm_to_array_trampoline (/tmp/perf-12.map)
\t    1234 Rect::area() (/tmp/perf-12.map)


\t    3333 wasmtime_builtin_memory_copy (/tmp/perf-12.map)
\t    5678 main (/tmp/perf-12.map)


\t    bbbb regalloc2::ion::run (/work/wprof)
\t    cccc main (/work/wprof)


\t    dddd wasmtime_internal_unwinder::stackwalk::visit_frames (/work/wprof)
\t    1234 Rect::area() (/tmp/perf-12.map)


\t    4a697 wasm[0]::function[7]::Square::area() (/cache/artifacts/13bf7d)
";
        let names: HashMap<String, u32> =
            [("Rect::area()".to_string(), 3), ("main".to_string(), 1)].into();
        let d = perf_distribution(script, &names, Some);
        assert_eq!(d.get(&1), Some(&1.0), "a libcall is its wasm caller's");
        assert_eq!(
            d.get(&3),
            Some(&2.0),
            "memset and the unwinder are their wasm caller's"
        );
        assert_eq!(
            d.get(&7),
            Some(&2.0),
            "by index: unnamed, or loaded from an artifact"
        );
        assert_eq!(
            d.len(),
            3,
            "WASI calls (wasmtime-wasi's or any host function's), compile time and the process's own main are left out: {d:?}"
        );
    }

    #[test]
    fn a_probed_modules_functions_are_the_originals_and_wprofs_own_are_left_out() {
        let indices = sample_mode_indices(
            &wat::parse_str(r#"(module (import "m" "f" (func)) (func) (func (call 0)) (func))"#)
                .unwrap(),
        )
        .unwrap();
        let (finder, last) = (indices.renumber(1) - 1, indices.renumber(3));
        let script = format!(
            "\t    1 wasm[0]::function[{last}] (/cache/artifacts/1)\n\n\
             \t    2 wasm[0]::function[{finder}] (/cache/artifacts/1)\n\
             \t    3 wasm[0]::function[{last}] (/cache/artifacts/1)\n\n"
        );
        let d = perf_distribution(&script, &HashMap::new(), |n| original_function(&indices, n));
        // The node finder's sample is wprof's, not its caller's.
        assert_eq!(d, [(3, 1.0)].into());
    }

    #[test]
    fn perf_names_are_wasmtimes() {
        assert_eq!(perf_name("_ZN4Rect4areaEv"), "Rect::area()");
        assert_eq!(perf_name("main"), "main");
        assert_eq!(perf_name("regexp.(*Regexp).find"), "regexp.(*Regexp).find");
    }
}
