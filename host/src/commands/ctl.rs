//! `wprof ctl`: turn the probes of a live run on or off while it runs, or ask how they
//! stand.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::exit::Failure;
use crate::live::control::{self, AskError, Request};

/// Turn a running `wprof run --live`'s probes on or off, or show how they stand.
///
/// The run listens on a socket in its cache directory (only its owner may use it). A
/// function whose probes are off is part of its caller from its next call on, as with
/// --exclude; the profile records when each function was on.
#[derive(Debug, clap::Args)]
#[command(after_help = CTL_AFTER_HELP)]
pub struct CtlCommand {
    /// The process id of the `wprof run --live` (without it: list the live runs).
    #[arg(value_name = "PID")]
    pid: Option<u32>,

    /// `on` or `off` (the functions PATTERN matches), or `status`.
    #[arg(value_enum, value_name = "ACTION", default_value_t = Action::Status)]
    action: Action,

    /// Which functions: globs on the name (`luaH_*`; mangled names match demangled too),
    /// `/REGEX/`, or `#N`/`#N-M` ids (repeatable). None: every function.
    #[arg(value_name = "PATTERN")]
    patterns: Vec<String>,

    /// The cache directory the run uses [default: as `wprof run` resolves it].
    #[arg(long, value_name = "DIR", env = "WPROF_CACHE_DIR")]
    cache_dir: Option<PathBuf>,

    /// How long to wait, in seconds, for a run that is still preparing its program
    /// (instrumenting and compiling a large module takes minutes the first time): its
    /// socket answers at once, its switches exist once the program starts.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    wait: u64,
}

/// How long a wprof process that has no socket yet is given to open it (it opens it as soon
/// as it has read its settings, which a busy machine may delay).
const SOCKET_GRACE: Duration = Duration::from_secs(10);

/// Whether process `pid` may be a `wprof run` that has not opened its socket yet: it is a
/// wprof (by its command line, where the system shows it), or at least alive.
fn may_be_starting(pid: u32) -> bool {
    if let Ok(line) = std::fs::read(format!("/proc/{pid}/cmdline")) {
        let program = line.split(|&b| b == 0).next().unwrap_or_default();
        let name = std::path::Path::new(std::ffi::OsStr::from_bytes(program)).file_name();
        return name.is_some_and(|n| n.to_string_lossy().starts_with("wprof"));
    }
    control::process_exists(pid)
}

const CTL_AFTER_HELP: &str = "\
Examples:
  wprof run --live --off '*' server.wasm &     # every probe off at first
  wprof ctl                                    # the live runs
  wprof ctl 4242 on 'handle_*'                 # probe the request handlers
  wprof ctl 4242 status
  wprof ctl 4242 off                           # every probe off again

A run opens its socket as soon as it starts; while it instruments and compiles its
module, `wprof ctl` waits for the program to start (--wait).

Exit status:
  0 when the run did it; 1 when it refused (no function with probes matches) or was
  still preparing after --wait; 2 when there is no such live run, or the request is
  malformed";

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Turn the matching functions' probes on.
    On,
    /// Turn them off.
    Off,
    /// Show which functions are off.
    Status,
}

impl CtlCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache_dir = self
            .cache_dir
            .clone()
            .or_else(crate::settings::default_cache_dir)
            .ok_or_else(|| {
                Failure::input("no cache directory (set --cache-dir or WPROF_CACHE_DIR)")
            })?;
        let dir = control::control_dir(&cache_dir);
        for p in &self.patterns {
            crate::settings::FunctionPattern::parse(p).map_err(Failure::input)?;
        }
        let Some(pid) = self.pid else {
            return Ok(self.list(&dir));
        };
        let request = Request {
            action: match self.action {
                Action::On => "on",
                Action::Off => "off",
                Action::Status => "status",
            }
            .to_string(),
            patterns: self.patterns.clone(),
        };
        let asked = Instant::now();
        let answer = loop {
            let waited = asked.elapsed();
            match control::ask(&dir, pid, &request) {
                Ok(reply) if reply.preparing && waited < Duration::from_secs(self.wait) => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(AskError::NoSuchRun(_)) if waited < SOCKET_GRACE && may_be_starting(pid) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other,
            }
        };
        match answer {
            Ok(reply) if reply.preparing => {
                crate::say!(
                    "wprof: {pid}: {} (waited {} s; --wait)",
                    reply.message,
                    self.wait
                );
                Ok(1)
            }
            Ok(reply) if reply.ok => {
                println!("{pid}: {}", reply.message);
                Ok(0)
            }
            Ok(reply) => {
                crate::say!("wprof: {pid}: {}", reply.message);
                Ok(1)
            }
            Err(AskError::NoSuchRun(path)) => Err(Failure::input(format!(
                "no live run {pid} (no {}; is it `wprof run --live`, with this cache directory?)",
                path.display()
            ))),
            Err(AskError::Gone(_)) => Err(Failure::input(format!(
                "run {pid} has ended without closing its control socket (removed it)"
            ))),
            Err(AskError::Io(e)) => Err(Failure::input(format!("cannot reach run {pid}: {e}"))),
        }
    }

    /// Lists the live runs and how their switches stand.
    fn list(&self, dir: &std::path::Path) -> i32 {
        let status = Request {
            action: "status".into(),
            patterns: Vec::new(),
        };
        let mut any = false;
        for pid in control::runs(dir) {
            if let Ok(reply) = control::ask(dir, pid, &status) {
                println!("{pid}: {}", reply.message);
                any = true;
            }
        }
        if !any {
            println!("no live runs (sockets in {})", dir.display());
        }
        0
    }
}
