//! The real programs a benchmark runs: the list `bench/programs/build.sh` writes, and
//! running one of them under this wprof binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::Deserialize;

use crate::exit::{Failure, PROGRAM_FAILED};

/// One program of the benchmark set, as `programs.json` describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct Program {
    /// A short name.
    pub name: String,
    /// What kind of program it is (`interpreter`, `database`, `io`, ...).
    #[serde(default)]
    pub kind: String,
    /// The module, relative to the list's folder.
    pub wasm: PathBuf,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// A folder preopened as `/data`, relative to the list's folder.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Folders preopened, as `HOST::GUEST` (host relative to the list's folder).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// The program exits at once (a start-up measurement): too short to sample, skipped.
    #[serde(default)]
    pub startup_only: bool,
    /// Text the program prints when it ran right.
    #[serde(default)]
    pub expect: String,
    /// Where it prints it: `stdout` (the default) or `stderr`.
    #[serde(default)]
    pub expect_stream: Option<String>,
    /// Environment variables the program needs (`NAME=VALUE`), given to it as `--env`
    /// (CPython's `PYTHONHOME`).
    #[serde(default)]
    pub env: Vec<String>,
    /// What `wasmtime run` needs besides the module and its folders (`-W exceptions=y`).
    #[serde(default)]
    pub wasmtime_flags: Vec<String>,
    /// The program spawns threads (wasi-threads), which the wasmtime CLI no longer runs:
    /// it is measured against `WPROF=0` only.
    #[serde(default)]
    pub threads: bool,
    /// The program writes files: each runner preopens a fresh empty folder of its own as
    /// `/scratch` (see [`Program::dir_args`]).
    #[serde(default)]
    pub scratch: bool,
    /// The program's output is meant for a pipe: its stdout is read through one (and
    /// discarded) rather than sent to `/dev/null`.
    #[serde(default)]
    pub stdout_pipe: bool,
}

impl Program {
    /// The `--dir` values of a run of this program in the runner's temporary folder
    /// `scratch`: a program that writes files gets `scratch/files` (made here) as
    /// `/scratch`.
    pub fn dir_args(&self, scratch: &Path) -> Vec<String> {
        let mut out: Vec<String> = self.dirs.clone();
        if let Some(dir) = &self.dir {
            let data = format!("{}::/data", dir.display());
            if !out.iter().any(|d| d.ends_with("::/data")) {
                out.push(data);
            }
        }
        if self.scratch {
            let files = scratch.join("files");
            // Where it cannot be made, the run that preopens it fails and says so.
            let _ = std::fs::create_dir_all(&files);
            out.push(format!("{}::/scratch", files.display()));
        }
        out
    }

    /// Where a benchmark run sends the program's stdout: a pipe that [`timed`] drains, or
    /// nowhere.
    fn stdout(&self) -> Stdio {
        match self.stdout_pipe {
            true => Stdio::piped(),
            false => Stdio::null(),
        }
    }
}

/// Reads a program list (start-up programs included: see [`Program::startup_only`]); paths
/// become relative to the list's folder.
pub fn read_programs(path: &Path) -> Result<Vec<Program>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
    let mut programs: Vec<Program> = serde_json::from_str(&text)
        .map_err(|e| Failure::input(format!("{} is not a program list: {e}", path.display())))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base)
        .map_err(|e| Failure::input(format!("cannot resolve {}: {e}", base.display())))?;
    for p in &mut programs {
        p.wasm = base.join(&p.wasm);
        p.dir = p.dir.as_ref().map(|d| base.join(d));
        for d in &mut p.dirs {
            let (host, guest) = d.split_once("::").unwrap_or((d.as_str(), d.as_str()));
            *d = format!("{}::{guest}", base.join(host).display());
        }
    }
    Ok(programs)
}

/// A `wprof run` of `program` in `scratch`, with `envs`, and `extra` flags.
pub fn wprof_run(
    program: &Program,
    scratch: &Path,
    envs: &[(&str, &str)],
    extra: &[&str],
) -> Command {
    let exe = std::env::current_exe().expect("the running binary has a path");
    let mut cmd = Command::new(exe);
    cmd.current_dir(scratch)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("WPROF")
        .env_remove("WPROF_MODE")
        .env("WPROF_CONFIG", "off")
        .env("WPROF_CACHE_DIR", scratch.join("cache"))
        .arg("run")
        .args(extra);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    for dir in program.dir_args(scratch) {
        cmd.arg("--dir").arg(dir);
    }
    for variable in &program.env {
        cmd.arg("--env").arg(variable);
    }
    cmd.arg(&program.wasm).arg("--").args(&program.args);
    cmd.stdin(Stdio::null()).stdout(program.stdout());
    cmd
}

/// `wasmtime run` of `program` by the CLI at `cli`, its compilation cache as `cache_config`
/// says, in `scratch`.
pub fn wasmtime_run(program: &Program, cli: &Path, scratch: &Path, cache_config: &Path) -> Command {
    let mut cmd = Command::new(cli);
    // With RUST_BACKTRACE set, the CLI captures a backtrace for every WASI call that
    // returns an error (SQLite on a file looks for its journal 40,000 times: 2.5x slower).
    cmd.current_dir(scratch)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .args(["run", "-C", "cache=y", "-C"])
        .arg(format!("cache-config={}", cache_config.display()))
        .args(&program.wasmtime_flags);
    for dir in program.dir_args(scratch) {
        cmd.arg("--dir").arg(dir);
    }
    for variable in &program.env {
        cmd.arg("--env").arg(variable);
    }
    cmd.arg(&program.wasm).args(&program.args);
    cmd.stdin(Stdio::null()).stdout(program.stdout());
    cmd
}

/// A whole process's wall time and the kernel's accounting of it.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Spawn to exit, nanoseconds.
    pub wall_ns: u64,
    /// CPU time, peak memory and context switches of all its threads.
    pub usage: super::usage::Usage,
}

/// Runs `cmd` to its end: its wall time; a failure names the program.
pub fn timed(cmd: Command, program: &Program) -> Result<u64, Failure> {
    Ok(measured(cmd, program)?.wall_ns)
}

/// Runs `cmd` to its end, its stdout (when piped) drained and discarded: its wall time and
/// usage; a failure names the program and its last line of stderr.
pub fn measured(mut cmd: Command, program: &Program) -> Result<Measured, Failure> {
    cmd.stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().context("cannot start a benchmark process")?;
    let drain = child
        .stdout
        .take()
        .map(|mut out| std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink())));
    let mut stderr = Vec::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_end(&mut pipe, &mut stderr)
            .context("cannot read a benchmark process's stderr")?;
    }
    if let Some(drain) = drain {
        let _ = drain.join();
    }
    let usage = super::usage::wait(child)?;
    let wall_ns = started.elapsed().as_nanos() as u64;
    if usage.code != Some(0) {
        let text = String::from_utf8_lossy(&stderr);
        let last = text.lines().rev().find(|l| !l.trim().is_empty());
        return Err(Failure {
            code: PROGRAM_FAILED,
            message: format!(
                "{} failed ({}): {}",
                program.name,
                usage
                    .code
                    .map_or("killed".to_string(), |c| format!("exit {c}")),
                last.unwrap_or("")
            ),
        });
    }
    Ok(Measured { wall_ns, usage })
}
