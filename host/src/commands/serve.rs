//! `wprof run --serve ADDR`: a pprof endpoint while the program runs, as Go programs serve
//! one (`net/http/pprof`), for `go tool pprof http://ADDR/debug/pprof/profile?seconds=N` and
//! the continuous-profiling agents that scrape it. `/debug/pprof/profile?seconds=N` (default
//! 30) answers after N seconds with the profile of those seconds (see
//! [`crate::run::inline::window`]), gzip'd `profile.proto`; with `--allocs`, `/debug/pprof/allocs`
//! (and `heap`) the blocks handed out since the start and those live now, by context, with
//! Go's heap-profile sample types; `/debug/pprof/` lists the endpoints.
//! Requests are answered one at a time, on one thread; the server stops when the program
//! ends (a window still open is answered with what it saw).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::exit::Failure;
use crate::run::inline::window::WindowSource;

/// The longest window asked for, in seconds.
const MAX_SECONDS: u64 = 3600;
/// A window's length when the request names none (Go's default).
const DEFAULT_SECONDS: u64 = 30;

/// The endpoint, bound (so that a bad address fails before the program runs).
pub struct PprofServer {
    server: tiny_http::Server,
    address: SocketAddr,
}

impl std::fmt::Debug for PprofServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PprofServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// The address `--serve` names: `PORT` and `:PORT` are on the loopback interface;
/// `HOST:PORT` as given (`0.0.0.0:PORT` to serve other machines).
pub fn address(spec: &str) -> Result<SocketAddr, Failure> {
    let bad = |why: String| Failure::input(format!("--serve {spec}: {why}"));
    let spec = spec.trim();
    let with_host = match spec.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None if spec.parse::<u16>().is_ok() => format!("127.0.0.1:{spec}"),
        None => spec.to_string(),
    };
    with_host
        .to_socket_addrs()
        .map_err(|e| {
            bad(format!(
                "not an address ({e}); give PORT, :PORT or HOST:PORT"
            ))
        })?
        .next()
        .ok_or_else(|| bad("names no address".to_string()))
}

impl PprofServer {
    /// Listens at `spec` (see [`address`]); one line if it cannot.
    pub fn bind(spec: &str) -> Result<Self, Failure> {
        let wanted = address(spec)?;
        let server = tiny_http::Server::http(wanted).map_err(|e| {
            Failure::input(format!("--serve {spec}: cannot listen at {wanted}: {e}"))
        })?;
        let address = server.server_addr().to_ip().unwrap_or(wanted);
        Ok(Self { server, address })
    }

    /// The server a run with `settings` asks for, listening before anything runs (a bad
    /// address is one line): none without `--serve`, none with one warning when profiling
    /// is off; `--serve` outside the inline modes is one line.
    pub fn bind_for(settings: &crate::settings::RunSettings) -> Result<Option<Self>, Failure> {
        match (&settings.serve, settings.profiling) {
            (Some(_), true) if !settings.mode.counts_inline() => Err(Failure::input(format!(
                "--serve needs an inline mode (sample, cost or adaptive), not {} mode",
                settings.mode.name()
            ))),
            (Some(spec), true) => Self::bind(spec).map(Some),
            (Some(_), false) => {
                crate::say!(
                    "wprof: warning: --serve: profiling is off (WPROF=0); nothing is served"
                );
                Ok(None)
            }
            (None, _) => Ok(None),
        }
    }

    /// The run's hook for windows of the profile of `functions`, named `module_ref`, served
    /// from this server (said on stderr unless `--quiet`).
    pub fn serve(
        self,
        settings: &crate::settings::RunSettings,
        functions: Vec<crate::profile::FunctionInfo>,
        module_ref: crate::profile::ModuleRef,
    ) -> crate::run::runner::Serve {
        if !settings.quiet {
            crate::say!(
                "wprof: serving the running profile at http://{}/debug/pprof/profile?seconds=N",
                self.address()
            );
        }
        crate::run::runner::Serve {
            functions,
            module_ref,
            start: Box::new(move |source| self.start(source)),
        }
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers requests from `source`'s windows on a thread of its own, until what this
    /// returns is dropped.
    pub fn start(self, source: WindowSource) -> Box<dyn std::any::Any> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("wprof-serve".to_string())
                .spawn(move || self.answer(&source, &stop))
        };
        Box::new(Running {
            stop,
            thread: thread.ok(),
        })
    }

    fn answer(&self, source: &WindowSource, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let request = match self.server.recv_timeout(Duration::from_millis(50)) {
                Ok(Some(request)) => request,
                Ok(None) => continue,
                Err(_) => return,
            };
            let response = respond(request.url(), source, stop);
            let _ = request.respond(response);
        }
    }
}

/// Stops the server when dropped.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn text(status: u16, body: String) -> Response {
    tiny_http::Response::from_string(body).with_status_code(status)
}

/// The answer to a request for `url`.
fn respond(url: &str, source: &WindowSource, stop: &AtomicBool) -> Response {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    match path.trim_end_matches('/') {
        "/debug/pprof" => text(
            200,
            "wprof: profiles of the running program\n\n\
             /debug/pprof/profile?seconds=N  the profile of the next N seconds (default 30), \
             gzip'd profile.proto (go tool pprof)\n\
             /debug/pprof/allocs             with --allocs: the blocks handed out since the \
             start, and those live now (also /debug/pprof/heap)\n"
                .to_string(),
        ),
        "/debug/pprof/allocs" | "/debug/pprof/heap" if source.has_allocs() => {
            answer_profile(source.allocations())
        }
        "/debug/pprof/profile" => {
            let seconds = match seconds(query) {
                Ok(s) => s,
                Err(why) => return text(400, why),
            };
            answer_profile(source.profile(Duration::from_secs(seconds), stop))
        }
        _ => text(
            404,
            format!("no such endpoint: {path} (see /debug/pprof/)\n"),
        ),
    }
}

/// A profile as pprof's gzip'd `profile.proto`, or why there is none.
fn answer_profile(profile: Result<crate::profile::Profile, String>) -> Response {
    let mut profile = match profile {
        Ok(p) => p,
        Err(why) => return text(503, format!("{why}\n")),
    };
    let raw_names = crate::report::source::demangle_names(&mut profile);
    let symbols = crate::report::source::Symbols {
        raw_names,
        ..Default::default()
    };
    match crate::report::pprof::render(&profile, &symbols) {
        Ok(bytes) => {
            let response = tiny_http::Response::from_data(bytes);
            match tiny_http::Header::from_bytes("Content-Type", "application/octet-stream") {
                Ok(header) => response.with_header(header),
                Err(()) => response,
            }
        }
        Err(e) => text(500, format!("{e}\n")),
    }
}

/// The `seconds` of a query string (default [`DEFAULT_SECONDS`]).
fn seconds(query: &str) -> Result<u64, String> {
    let Some(value) = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("seconds="))
    else {
        return Ok(DEFAULT_SECONDS);
    };
    value
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=MAX_SECONDS).contains(s))
        .ok_or_else(|| format!("seconds={value}: a whole number from 1 to {MAX_SECONDS}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_the_loopback_interface() {
        assert_eq!(address("6060").unwrap().to_string(), "127.0.0.1:6060");
        assert_eq!(address(":6061").unwrap().to_string(), "127.0.0.1:6061");
        assert_eq!(address("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        for bad in ["", "nowhere", "127.0.0.1:99999", ":x"] {
            assert!(address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn windows_are_one_second_to_an_hour() {
        assert_eq!(seconds(""), Ok(30));
        assert_eq!(seconds("debug=1&seconds=5"), Ok(5));
        for bad in ["seconds=0", "seconds=x", "seconds=3601"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
