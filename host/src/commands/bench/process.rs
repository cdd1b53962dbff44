//! Whole processes, timed from spawn to exit: `wprof run` with `WPROF=0` (this very
//! binary), and, when the wasmtime CLI is installed, `wasmtime run` and `wasmtime run
//! --profile=guest` — the reference point a user would otherwise pick; then, caches warm,
//! `wprof run` profiling in each mode beside `wasmtime run` with its compilation cache,
//! with wprof's own time outside the guest (the process minus the program's `_start`, as
//! `--timings=json` reports it).
//!
//! These are process wall times: start-up of the binary, reading and compiling the module
//! (in the first group nothing is cached: the CLI runs with `-C cache=n`, and `WPROF=0`
//! never touches a cache), the program, and exit. Every process runs in a temporary
//! directory (profiles and caches are written there), with empty stdin and its output
//! discarded.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::settings::Mode;

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
        Self::at(path).map(Some)
    }

    /// The CLI at `path`; an error when it does not run.
    pub fn at(path: PathBuf) -> Result<Self, Failure> {
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
        Ok(Self {
            path,
            version,
            is_script,
        })
    }
}

/// `path` as a TOML basic string.
fn toml_string(path: &Path) -> String {
    serde_json::to_string(&path.to_string_lossy()).expect("a string serializes")
}

/// Writes a wasmtime cache configuration at `config` that keeps the cache in `directory`.
pub fn write_wasmtime_cache_config(config: &Path, directory: &Path) -> Result<(), Failure> {
    std::fs::write(
        config,
        format!("[cache]\ndirectory = {}\n", toml_string(directory)),
    )
    .context("failed to write a wasmtime cache configuration")?;
    Ok(())
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
    /// `wprof run --no-cache MODULE` with `WPROF=0`: this binary, profiling off, nothing
    /// cached.
    pub wprof_off: u64,
    /// `wasmtime run -C cache=n MODULE`; `null` without the CLI.
    pub wasmtime_run: Option<u64>,
    /// `wasmtime run -C cache=n --profile=guest,FILE MODULE`; `null` without the CLI.
    pub wasmtime_profile_guest: Option<u64>,
    /// `wasmtime_profile_guest / wasmtime_run`: what the guest profiler costs.
    pub profile_guest_ratio: Option<f64>,
    /// `wprof_off / wasmtime_run`: what wprof with profiling off costs over plain wasmtime.
    pub wprof_off_ratio: Option<f64>,
    /// `wasmtime run` with its compilation cache warm (in a temporary directory); `null`
    /// without the CLI.
    pub wasmtime_run_warm: Option<u64>,
    /// `WPROF=0 wprof run`, its cache (the compiled original) warm.
    pub wprof_off_warm: u64,
    /// `wprof_off_warm / wasmtime_run_warm`.
    pub wprof_off_warm_ratio: Option<f64>,
    /// `wprof run` profiling, its cache warm, per mode.
    pub profiled: Vec<ProfiledProcess>,
}

/// `wprof run -q MODULE` in one mode, its cache warm.
#[derive(Debug, Serialize)]
pub struct ProfiledProcess {
    /// The probe mode.
    pub mode: &'static str,
    /// Median process wall time.
    pub wall: u64,
    /// Median of the process wall time minus the program's `_start` (the `run` phase):
    /// everything wprof adds outside the guest, process start and exit included.
    pub own: u64,
    /// Median of the phases wprof times itself, outside the guest (`--timings`' "own").
    pub own_phases: u64,
    /// `wall / wasmtime_run_warm`.
    pub ratio: Option<f64>,
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

/// Spawns a `wprof run --timings=json` and waits: its wall time and the phases it
/// printed (the last line of its stderr).
fn timed_run(mut cmd: Command) -> Result<(u64, serde_json::Value), Failure> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let elapsed = t.elapsed().as_nanos() as u64;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let phases = timings_in(&stderr).ok_or_else(|| {
        Failure::input(format!(
            "`wprof run --timings=json` printed no timings ({}): {}",
            out.status,
            stderr.lines().last().unwrap_or_default()
        ))
    })?;
    Ok((elapsed, phases))
}

/// What a `wprof run --timings=json` printed last on stderr: its timings, if it did.
pub fn timings_in(stderr: &str) -> Option<serde_json::Value> {
    stderr
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("phases").is_some())
}

/// The nanoseconds of phase `name` in `--timings=json` output.
pub fn phase_ns(timings: &serde_json::Value, name: &str) -> u64 {
    timings["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == name)
        .filter_map(|p| p["ns"].as_u64())
        .sum()
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

    // `WPROF=0 wprof run`, with nothing cached or with its cache (the compiled original).
    let wprof_off_with = |cached: bool| {
        let mut cmd = Command::new(&wprof);
        // Benchmarks measure wprof's defaults, whatever the user's configuration.
        cmd.env("WPROF_CONFIG", "off");
        cmd.current_dir(dir).env("WPROF", "0").arg("run");
        if cached {
            cmd.arg("--cache-dir").arg(dir.join("wprof-cache"));
        } else {
            cmd.arg("--no-cache");
        }
        cmd.arg(&module);
        cmd
    };
    let wprof_off = || wprof_off_with(false);
    let wprof_off_warm = || wprof_off_with(true);
    let wasmtime = |cli: &WasmtimeCli, guest: bool| {
        let mut cmd = Command::new(&cli.path);
        cmd.current_dir(dir).args(["run", "-C", "cache=n"]);
        if guest {
            cmd.arg(format!("--profile=guest,{profile}"));
        }
        cmd.arg(&module);
        cmd
    };
    let cache_config = dir.join("wasmtime-cache.toml");
    write_wasmtime_cache_config(&cache_config, &dir.join("wasmtime-cache"))?;
    let wasmtime_warm = |cli: &WasmtimeCli| {
        let mut cmd = Command::new(&cli.path);
        cmd.current_dir(dir)
            .args(["run", "-C", "cache=y", "-C"])
            .arg(format!("cache-config={}", cache_config.display()))
            .arg(&module);
        cmd
    };
    let profiled = |mode: Mode| {
        let mut cmd = Command::new(&wprof);
        // Benchmarks measure wprof's defaults, whatever the user's configuration.
        cmd.env("WPROF_CONFIG", "off");
        cmd.current_dir(dir)
            .env_remove("WPROF")
            .args(["run", "-q", "--timings=json", "--mode", mode.name()])
            .arg("--cache-dir")
            .arg(dir.join("wprof-cache"))
            .arg("-o")
            .arg(dir.join(format!("{}.wprof", mode.name())))
            .arg(&module);
        cmd
    };
    // Warm both caches.
    if let Some(cli) = cli {
        wall_time(wasmtime_warm(cli))?;
    }
    wall_time(wprof_off_warm())?;
    for mode in Mode::ALL {
        timed_run(profiled(mode))?;
    }

    let (mut off, mut plain, mut guest, mut warm, mut off_warm) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut by_mode: Vec<(Vec<u64>, Vec<u64>, Vec<u64>)> =
        Mode::ALL.iter().map(|_| Default::default()).collect();
    for _ in 0..runs {
        off.push(wall_time(wprof_off())?);
        off_warm.push(wall_time(wprof_off_warm())?);
        if let Some(cli) = cli {
            plain.push(wall_time(wasmtime(cli, false))?);
            guest.push(wall_time(wasmtime(cli, true))?);
            warm.push(wall_time(wasmtime_warm(cli))?);
        }
        for (mode, (walls, own, phases)) in Mode::ALL.iter().zip(&mut by_mode) {
            let (wall, timings) = timed_run(profiled(*mode))?;
            walls.push(wall);
            own.push(wall.saturating_sub(phase_ns(&timings, crate::timings::PROGRAM)));
            phases.push(timings["own_ns"].as_u64().unwrap_or(0));
        }
    }
    let wasmtime_run_warm = cli.map(|_| median(warm));
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
        wasmtime_run_warm,
        wprof_off_warm: median(off_warm.clone()),
        wprof_off_warm_ratio: ratio(median(off_warm), wasmtime_run_warm),
        profiled: Mode::ALL
            .iter()
            .zip(by_mode)
            .map(|(mode, (walls, own, phases))| {
                let wall = median(walls);
                ProfiledProcess {
                    mode: mode.name(),
                    wall,
                    own: median(own),
                    own_phases: median(phases),
                    ratio: ratio(wall, wasmtime_run_warm),
                }
            })
            .collect(),
    })
}
