//! Whole processes, timed from spawn to exit: `wprof run` with `WPROF=0` (this very
//! binary), and, when the wasmtime CLI is installed, `wasmtime run` and `wasmtime run
//! --profile=guest` — the reference point a user would otherwise pick.
//!
//! These are process wall times: start-up of the binary, reading and compiling the module
//! (nothing is cached: the CLI runs with `-C cache=n`, and `WPROF=0` never touches a cache),
//! the program, and exit. Every process runs in a temporary directory (the guest profile is
//! written there), with empty stdin and its output discarded.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::exit::Failure;
use crate::stats::median;

/// The wasmtime CLI: `WASMTIME_CLI`, else `wasmtime` on `PATH`.
#[derive(Debug, Clone)]
pub struct WasmtimeCli {
    /// Its path.
    pub path: PathBuf,
    /// What `wasmtime --version` prints.
    pub version: String,
    /// The file is a script (`#!`), such as a pyenv shim: its interpreter's start-up is
    /// inside every `wasmtime run` time.
    pub is_script: bool,
}

impl WasmtimeCli {
    /// Finds the CLI. `Ok(None)` when it is not installed; an error when `WASMTIME_CLI`
    /// names something that does not run.
    pub fn find() -> Result<Option<Self>, Failure> {
        let explicit = std::env::var_os("WASMTIME_CLI").filter(|v| !v.is_empty());
        let path = match &explicit {
            Some(p) => PathBuf::from(p),
            None => match on_path("wasmtime") {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let out = Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run the wasmtime CLI {}", path.display()))?;
        if !out.status.success() {
            return Err(Failure::input(format!(
                "the wasmtime CLI {} failed on --version ({})",
                path.display(),
                out.status
            )));
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut head = [0u8; 2];
        let is_script = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok()
            && &head == b"#!";
        Ok(Some(Self {
            path,
            version,
            is_script,
        }))
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

/// One module's process wall times (nanoseconds, medians).
#[derive(Debug, Serialize)]
pub struct ProcessBench {
    /// `wprof run MODULE` with `WPROF=0`: this binary, profiling off.
    pub wprof_off: u64,
    /// `wasmtime run -C cache=n MODULE`; `null` without the CLI.
    pub wasmtime_run: Option<u64>,
    /// `wasmtime run -C cache=n --profile=guest,FILE MODULE`; `null` without the CLI.
    pub wasmtime_profile_guest: Option<u64>,
    /// `wasmtime_profile_guest / wasmtime_run`: what the guest profiler costs.
    pub profile_guest_ratio: Option<f64>,
    /// `wprof_off / wasmtime_run`: what wprof with profiling off costs over plain wasmtime.
    pub wprof_off_ratio: Option<f64>,
}

/// Spawns `cmd` with empty stdin and discarded output and waits: the wall time. The exit
/// status is not checked (samples that trap or exit non-zero are measured all the same),
/// but a process that cannot be started is an error.
fn wall_time(mut cmd: Command) -> Result<u64, Failure> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let elapsed = t.elapsed().as_nanos() as u64;
    // Killed by a signal: not a measurement of the program.
    if status.code().is_none() {
        return Err(Failure::input(format!(
            "{:?} on {:?} ended by a signal ({status})",
            cmd.get_program(),
            cmd.get_args().last().unwrap_or(OsStr::new(""))
        )));
    }
    Ok(elapsed)
}

/// Measures the processes on `path`, `runs` times each, interleaved.
pub fn measure(path: &Path, runs: u32, cli: Option<&WasmtimeCli>) -> Result<ProcessBench, Failure> {
    let module = std::fs::canonicalize(path)
        .with_context(|| format!("cannot resolve {}", path.display()))?;
    let wprof = std::env::current_exe().context("cannot locate the wprof binary")?;
    let scratch = tempfile::tempdir().context("failed to create a scratch directory")?;
    let dir = scratch.path();
    let profile = dir.join("guest-profile.json");
    let profile = profile
        .to_str()
        .filter(|p| !p.contains(','))
        .with_context(|| format!("{} cannot be a --profile=guest path", profile.display()))?
        .to_string();

    let wprof_off = || {
        let mut cmd = Command::new(&wprof);
        cmd.current_dir(dir)
            .env("WPROF", "0")
            .arg("run")
            .arg(&module);
        cmd
    };
    let wasmtime = |cli: &WasmtimeCli, guest: bool| {
        let mut cmd = Command::new(&cli.path);
        cmd.current_dir(dir).args(["run", "-C", "cache=n"]);
        if guest {
            cmd.arg(format!("--profile=guest,{profile}"));
        }
        cmd.arg(&module);
        cmd
    };
    let (mut off, mut plain, mut guest) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        off.push(wall_time(wprof_off())?);
        if let Some(cli) = cli {
            plain.push(wall_time(wasmtime(cli, false))?);
            guest.push(wall_time(wasmtime(cli, true))?);
        }
    }
    let wprof_off = median(off);
    let (wasmtime_run, wasmtime_profile_guest) = match cli {
        Some(_) => (Some(median(plain)), Some(median(guest))),
        None => (None, None),
    };
    let ratio = |a: u64, b: Option<u64>| b.map(|b| a as f64 / b.max(1) as f64);
    Ok(ProcessBench {
        wprof_off,
        wasmtime_run,
        wasmtime_profile_guest,
        profile_guest_ratio: wasmtime_profile_guest.and_then(|g| ratio(g, wasmtime_run)),
        wprof_off_ratio: ratio(wprof_off, wasmtime_run),
    })
}
