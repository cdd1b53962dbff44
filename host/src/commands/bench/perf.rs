//! Linux `perf` as the reference for time: finding it, sampling the uninstrumented
//! program with it, and reading its samples back as a distribution over the module's
//! functions (see [`super::accuracy`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use super::programs::{timed, wprof_run, Program};
use crate::exit::{Failure, MISSING_TOOL};

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

/// perf's distribution of one uninstrumented run.
/// How often perf samples the program (`perf record -F`): each sample stands for
/// `1 / SAMPLES_PER_SECOND` of CPU time.
pub const SAMPLES_PER_SECOND: u32 = 4000;

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
    let mut cmd = Command::new(perf);
    cmd.current_dir(scratch)
        .args(["record", "-q", "-e", "cpu-clock", "-F"])
        .arg(SAMPLES_PER_SECOND.to_string())
        .args(["-g", "-o"])
        .arg(&data)
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
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .context("cannot run perf script")?;
    Ok(perf_distribution(
        &String::from_utf8_lossy(&script.stdout),
        names,
    ))
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
/// own work, the process's `main`) are left out.
pub fn perf_distribution(script: &str, names: &HashMap<String, u32>) -> Distribution {
    let mut counts = Distribution::new();
    for sample in script.split("\n\n") {
        for frame in sample.lines() {
            let Some((symbol, dso)) = frame_of(frame) else {
                continue;
            };
            if symbol.contains("wasmtime_wasi::") || symbol.contains("wasi_snapshot_preview1") {
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
            let id = names
                .get(symbol)
                .copied()
                .or_else(|| function_index(symbol));
            if let Some(id) = id {
                *counts.entry(id).or_default() += 1.0;
                break;
            }
        }
    }
    counts
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


\t    bbbb regalloc2::ion::run (/work/wprof)
\t    cccc main (/work/wprof)


\t    dddd wasmtime_internal_unwinder::stackwalk::visit_frames (/work/wprof)
\t    1234 Rect::area() (/tmp/perf-12.map)


\t    4a697 wasm[0]::function[7]::Square::area() (/cache/artifacts/13bf7d)
";
        let names: HashMap<String, u32> =
            [("Rect::area()".to_string(), 3), ("main".to_string(), 1)].into();
        let d = perf_distribution(script, &names);
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
            2,
            "WASI calls, compile time and the process's own main are left out: {d:?}"
        );
    }

    #[test]
    fn perf_names_are_wasmtimes() {
        assert_eq!(perf_name("_ZN4Rect4areaEv"), "Rect::area()");
        assert_eq!(perf_name("main"), "main");
        assert_eq!(perf_name("regexp.(*Regexp).find"), "regexp.(*Regexp).find");
    }
}
