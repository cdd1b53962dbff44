//! The control socket of a live run, and `wprof ctl`'s side of it.
//!
//! A live run listens on `CACHE/control/PID.sock` (the folder 0700, the socket 0600: only
//! its owner may turn its probes). A request is one line of JSON, `{"action": "on" |
//! "off" | "status", "patterns": [...]}`; the answer is one line of JSON, `{"ok": bool,
//! "message": "...", "preparing": bool}`. The socket opens as soon as the run has read its
//! settings, before the module is instrumented and compiled (which takes minutes on a large
//! module); until the program starts, every request is answered `preparing` and `wprof
//! ctl` asks again. The socket goes when the program ends; one left by a killed run is
//! removed by the next `wprof ctl` that finds nobody behind it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{describe, Functions, LiveSetup};
use crate::run::switches::Switchboard;
use crate::settings::FunctionPattern;

/// What `wprof ctl` asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// `on`, `off` or `status`.
    pub action: String,
    /// Which functions (on, off): patterns as `--only` takes them; none: every function.
    #[serde(default)]
    pub patterns: Vec<String>,
}

/// What the run answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// The request was carried out.
    pub ok: bool,
    /// What happened, for a person.
    pub message: String,
    /// The run is still preparing its program (no switches yet): ask again.
    #[serde(default)]
    pub preparing: bool,
}

/// What requests go to once the program is about to start: its switchboard and names, and
/// when it started.
type Switches = Arc<OnceLock<(Arc<Switchboard>, Arc<Functions>, std::time::Instant)>>;

/// The folder of the control sockets in cache directory `cache_dir`.
pub fn control_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("control")
}

/// The socket of run `pid`.
pub fn socket_path(control_dir: &Path, pid: u32) -> PathBuf {
    control_dir.join(format!("{pid}.sock"))
}

/// A running control socket; dropping it closes the socket.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    switches: Switches,
}

impl Server {
    /// Listens in `dir` for requests about the run of `setup`; until [`Server::ready`],
    /// each is answered that the run is preparing.
    pub fn open(dir: &Path, setup: &LiveSetup) -> std::io::Result<Self> {
        private_dir(dir)?;
        let path = socket_path(dir, std::process::id());
        // Bound and made owner-only under a name `wprof ctl` does not look for, then
        // renamed into place: the socket appears already listening (a `wprof ctl` that
        // reached it between bind and listen was refused, and took it for a dead run's).
        let aside = dir.join(format!(".{}.sock.new", std::process::id()));
        let _ = std::fs::remove_file(&aside);
        let listener = UnixListener::bind(&aside)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o600))?;
        }
        // Over a socket of a dead process that had this pid, if there is one.
        std::fs::rename(&aside, &path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let switches = Switches::default();
        let about = format!("{}, {} mode", setup.module.display(), setup.mode);
        let thread = {
            let (stop, switches) = (stop.clone(), switches.clone());
            std::thread::Builder::new()
                .name("wprof-control".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let Ok(stream) = stream else { continue };
                        let _ = match switches.get() {
                            Some((board, functions, started)) => serve(stream, |request| {
                                answer(request, board, functions, &about, *started)
                            }),
                            None => serve(stream, |_| Reply {
                                ok: false,
                                message: format!(
                                    "{about}: still preparing the program (instrumenting, \
                                     compiling); its switches exist once it starts"
                                ),
                                preparing: true,
                            }),
                        };
                    }
                })?
        };
        Ok(Server {
            path,
            stop,
            thread: Some(thread),
            switches,
        })
    }

    /// The program is about to start: requests from now on go to `board`, whose functions
    /// are `functions`.
    pub fn ready(&self, board: Arc<Switchboard>, functions: Arc<Functions>) {
        let _ = self
            .switches
            .set((board, functions, std::time::Instant::now()));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the thread from `accept`.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates `dir` (and its parents) owner-only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Reads one request from `stream` and writes what `answer` makes of it.
fn serve(stream: UnixStream, answer: impl FnOnce(&Request) -> Reply) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => answer(&request),
        Err(e) => Reply {
            ok: false,
            message: format!("not a request: {e}"),
            preparing: false,
        },
    };
    let mut out = serde_json::to_vec(&reply).expect("replies serialize");
    out.push(b'\n');
    (&stream).write_all(&out)
}

/// Carries out one request.
pub fn answer(
    request: &Request,
    board: &Switchboard,
    functions: &Functions,
    about: &str,
    started: std::time::Instant,
) -> Reply {
    let fail = |message: String| Reply {
        ok: false,
        message,
        preparing: false,
    };
    let patterns = match request
        .patterns
        .iter()
        .map(|p| FunctionPattern::parse(p))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let on = match request.action.as_str() {
        "on" => true,
        "off" => false,
        "status" => {
            let off: Vec<&str> = (0..board.functions())
                .filter(|&id| board.is_off(id))
                .map(|id| functions.name(id))
                .collect();
            let switchable = (0..board.functions())
                .filter(|&id| board.is_switchable(id))
                .count();
            let mut message = format!(
                "{about}, running for {}; {} of {switchable} functions off",
                crate::display::format_ns(started.elapsed().as_nanos() as u64),
                off.len()
            );
            if !off.is_empty() {
                const SHOWN: usize = 20;
                message.push_str(": ");
                message.push_str(&off[..off.len().min(SHOWN)].join(", "));
                if off.len() > SHOWN {
                    message.push_str(&format!(" and {} more", off.len() - SHOWN));
                }
            }
            return Reply {
                ok: true,
                message,
                preparing: false,
            };
        }
        other => return fail(format!("{other:?} is not an action (on, off, status)")),
    };
    let ids = functions.matching(&patterns);
    let turned = board.turn(&ids, on, &describe(&patterns), "ctl");
    if turned.matched == 0 {
        return fail(format!(
            "no function with probes matches {}",
            describe(&patterns)
        ));
    }
    Reply {
        ok: true,
        message: format!(
            "{} turned {} ({} matched, {} of them already {}); {} off now",
            turned.changed,
            if on { "on" } else { "off" },
            turned.matched,
            turned.matched - turned.changed,
            if on { "on" } else { "off" },
            board.off_count()
        ),
        preparing: false,
    }
}

/// Why `wprof ctl` could not ask.
#[derive(Debug)]
pub enum AskError {
    /// No socket for that process (no live run of that pid, or another cache directory).
    NoSuchRun(PathBuf),
    /// The socket is there but nobody answers (the run was killed): it was removed.
    Gone(PathBuf),
    /// Anything else.
    Io(std::io::Error),
}

/// Sends `request` to run `pid` in `control_dir`.
pub fn ask(control_dir: &Path, pid: u32, request: &Request) -> Result<Reply, AskError> {
    let path = socket_path(control_dir, pid);
    if !path.exists() {
        return Err(AskError::NoSuchRun(path));
    }
    let stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        // Nobody listens: a killed run's socket, removed; unless the process lives.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && !process_exists(pid) => {
            let _ = std::fs::remove_file(&path);
            return Err(AskError::Gone(path));
        }
        Err(e) => return Err(AskError::Io(e)),
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(AskError::Io)?;
    let mut line = serde_json::to_vec(request).expect("requests serialize");
    line.push(b'\n');
    (&stream).write_all(&line).map_err(AskError::Io)?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(AskError::Io)?;
    serde_json::from_str(&answer).map_err(|e| {
        AskError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a garbled answer: {e}"),
        ))
    })
}

/// Whether process `pid` exists (whoever owns it).
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The pids of the live runs with a socket in `control_dir`, in order.
pub fn runs(control_dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir(control_dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let name = e.ok()?.file_name();
                    name.to_str()?.strip_suffix(".sock")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_answers_that_it_prepares_until_its_switches_are_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        let control = control_dir(dir.path());
        let setup = LiveSetup {
            module: PathBuf::from("app.wasm"),
            off: Vec::new(),
            control_dir: Some(control.clone()),
            config: None,
            mode: "sample",
        };
        let server = Server::open(&control, &setup).unwrap();
        let status = Request {
            action: "status".into(),
            patterns: Vec::new(),
        };
        let pid = std::process::id();
        let early = ask(&control, pid, &status).unwrap();
        assert!(early.preparing && !early.ok, "{early:?}");
        assert!(early.message.contains("still preparing"), "{early:?}");
        // The program starts: its switches answer.
        let mut table = vec![0u8; 2];
        // SAFETY: the table outlives the board (dropped with the server below).
        let board = Arc::new(unsafe { Switchboard::new(table.as_mut_ptr(), 2, vec![true; 2]) });
        let names = Arc::new(Functions::new(
            vec!["f0".into(), "f1".into()],
            vec![None, None],
        ));
        server.ready(board.clone(), names);
        let off = Request {
            action: "off".into(),
            patterns: vec!["f1".into()],
        };
        let turned = ask(&control, pid, &off).unwrap();
        assert!(turned.ok && !turned.preparing, "{turned:?}");
        assert!(board.is_off(1) && !board.is_off(0));
        let now = ask(&control, pid, &status).unwrap();
        assert!(now.message.contains("1 of 2 functions off: f1"), "{now:?}");
        drop(server);
        assert!(matches!(
            ask(&control, pid, &status),
            Err(AskError::NoSuchRun(_))
        ));
        drop(board);
        drop(table);
    }
}
