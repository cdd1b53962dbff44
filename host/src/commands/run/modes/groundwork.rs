//! What a profile needs of the module that the program's run cannot change, read on a
//! thread of its own while the program runs, so that after the run the profile waits only
//! for what the run decides.
//!
//! - **The counted module's manifest** (stack mode): its functions, and where the counters
//!   moved the code, as the cache recorded them. It goes to the profile as soon as it is
//!   read.
//! - **The module's DWARF** (every mode that keeps sources or sampled lines): addr2line's
//!   context, made once. While the program goes on, the thread then parses the line tables
//!   of the compile units one function at a time, from the first function on, at a lower
//!   priority (nice 10), and stops when the profile asks for the DWARF or after
//!   [`PARSE_AHEAD_FOR`] (a module with hundreds of megabytes of DWARF is not parsed whole
//!   for the few units its samples fall in). A compile unit parsed beside the run is one
//!   the sampled lines no longer wait for: CPython 3.11's whole line tables take 25-30 ms
//!   this way, and its sampled lines then 0.5 ms after the run instead of 6.6-8.4 ms.
//!
//! Nothing here changes what a profile holds: the same manifest and the same DWARF are read
//! after the run when the thread could not read them (no cache, a panic, a module the cache
//! lacks). `--timings` lists the thread's work apart from wprof's phases, which show what
//! the profile waited (see [`Timings::record_beside`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crate::prepare::counted::{self, Recorded};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::report::source::{self, ModuleDwarf};
use crate::timings::Timings;

/// The longest the line tables are parsed ahead.
pub const PARSE_AHEAD_FOR: Duration = Duration::from_millis(50);

/// What a mode's profile will want of the module (see [`super::RunMode::groundwork`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// The counted module's manifest, from the cache.
    pub manifest: bool,
    /// The module's DWARF.
    pub dwarf: bool,
    /// And its line tables, parsed as far as the run leaves time for (for sampled lines).
    pub lines: bool,
}

/// What the thread read, and how long it took.
struct Read<'env> {
    /// `None`: not read (not wanted); `Some(None)`: the module has no DWARF, or it could
    /// not be read.
    dwarf: Option<Option<ModuleDwarf<'env>>>,
    took: Duration,
    /// The time spent parsing line tables after the context was made, and in how many
    /// functions.
    warmed: (Duration, usize),
}

/// The manifest, and how long reading it took.
type ManifestRead = (Option<Recorded>, Duration);

/// The thread reading the groundwork of one run, or nothing.
pub struct Groundwork<'scope, 'env> {
    loaded: &'env LoadedModule,
    manifest: Option<mpsc::Receiver<ManifestRead>>,
    thread: Option<ScopedJoinHandle<'scope, Read<'env>>>,
    /// Set when the profile wants the DWARF: the line tables stop being parsed ahead.
    wanted_now: &'env AtomicBool,
}

impl<'scope, 'env> Groundwork<'scope, 'env> {
    /// Starts reading what `wanted` names of `loaded` on a thread of `scope`, the manifest
    /// from `cache`; no thread if neither the manifest nor the DWARF is wanted, or if none
    /// can be made (the profile then reads what it needs itself).
    /// `wanted_now` must be false: it stops the parsing ahead when set.
    pub fn start(
        scope: &'scope Scope<'scope, 'env>,
        loaded: &'env LoadedModule,
        mut cache: CacheSession,
        wanted: Wanted,
        wanted_now: &'env AtomicBool,
    ) -> Self {
        let mut ground = Groundwork {
            loaded,
            manifest: None,
            thread: None,
            wanted_now,
        };
        if !(wanted.manifest || wanted.dwarf) {
            return ground;
        }
        let (send, receive) = mpsc::channel();
        let work = move || {
            if wanted.manifest {
                let started = Instant::now();
                let recorded = counted::recorded(&mut cache, loaded);
                let _ = send.send((recorded, started.elapsed()));
            }
            drop(send);
            let started = Instant::now();
            let dwarf = wanted.dwarf.then(|| read_dwarf(&loaded.bytes));
            let took = started.elapsed();
            let warmed = match &dwarf {
                Some(Some(dwarf)) if wanted.lines => parse_ahead(dwarf, wanted_now),
                _ => (Duration::ZERO, 0),
            };
            Read {
                dwarf,
                took,
                warmed,
            }
        };
        let spawned = std::thread::Builder::new()
            .name("wprof groundwork".into())
            .spawn_scoped(scope, work);
        match spawned {
            Ok(thread) => {
                ground.manifest = wanted.manifest.then_some(receive);
                ground.thread = Some(thread);
            }
            Err(e) => tracing::debug!("no groundwork thread: {e}"),
        }
        ground
    }

    /// The counted module's manifest as the cache recorded it, waiting for it as phase
    /// `manifest`; `None` if it was not read here or the cache lacks it.
    pub fn manifest(&mut self, timings: &mut Timings) -> Option<Recorded> {
        let receive = self.manifest.take()?;
        let (recorded, took) = timings.time("manifest", || receive.recv().ok())?;
        timings.record_beside("manifest", took);
        recorded
    }

    /// The module's DWARF, as phase `dwarf`: waited for if the thread reads it, else read
    /// now; `None` if the module has none or it cannot be read.
    pub fn dwarf(&mut self, timings: &mut Timings) -> Option<ModuleDwarf<'env>> {
        self.wanted_now.store(true, Ordering::Relaxed);
        let read = self
            .thread
            .take()
            .and_then(|thread| timings.time("dwarf", || thread.join().ok()));
        if let Some(read) = &read {
            if read.warmed.1 > 0 {
                timings.record_beside("lines ahead", read.warmed.0);
            }
        }
        match read.and_then(|read| Some((read.dwarf?, read.took))) {
            Some((dwarf, took)) => {
                timings.record_beside("dwarf", took);
                dwarf
            }
            None => timings.time("dwarf", || read_dwarf(&self.loaded.bytes)),
        }
    }
}

impl std::fmt::Debug for Groundwork<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groundwork")
            .field("manifest", &self.manifest.is_some())
            .field("thread", &self.thread.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Groundwork<'_, '_> {
    fn drop(&mut self) {
        // Stop its parsing ahead, and wait for it here: a thread the scope joined itself
        // would turn a panic in it (bad DWARF) into one of the whole run.
        self.wanted_now.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The DWARF of the module `bytes`: none if it has none or it cannot be read.
fn read_dwarf(bytes: &[u8]) -> Option<ModuleDwarf<'_>> {
    source::module_dwarf(bytes).unwrap_or_else(|e| {
        tracing::debug!("no DWARF: {e}");
        None
    })
}

/// Parses the line tables of `dwarf`'s compile units, by looking up each function's first
/// address in order, until `stop` is set, every function is looked up, or
/// [`PARSE_AHEAD_FOR`] has passed; how long it took and how many functions were looked up.
/// Runs at a lower priority than the program.
fn parse_ahead(dwarf: &ModuleDwarf<'_>, stop: &AtomicBool) -> (Duration, usize) {
    lower_this_threads_priority();
    let started = Instant::now();
    let mut looked_up = 0;
    for body in &dwarf.bodies {
        if stop.load(Ordering::Relaxed) || started.elapsed() > PARSE_AHEAD_FOR {
            break;
        }
        let address = body.start.saturating_sub(dwarf.code_start) as u64;
        let _ = dwarf.context.find_location(address);
        looked_up += 1;
    }
    (started.elapsed(), looked_up)
}

/// Makes the calling thread yield to the program's threads where both want a core.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on the calling thread's own id; raising one's nice value needs
    // no privilege, and a failure changes nothing.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module of `wat`, as loaded.
    fn loaded(wat: &str) -> LoadedModule {
        LoadedModule {
            bytes: wat::parse_str(wat).unwrap(),
            digest: [0; 32],
        }
    }

    #[test]
    fn nothing_wanted_starts_no_thread_and_reads_nothing() {
        let loaded = loaded("(module (func))");
        let now = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let mut ground = Groundwork::start(
                scope,
                &loaded,
                CacheSession::none(),
                Wanted::default(),
                &now,
            );
            let mut timings = Timings::new();
            assert!(ground.manifest(&mut timings).is_none());
            assert!(timings.phases().is_empty());
            // Read now, as the thread was not asked to.
            assert!(ground.dwarf(&mut timings).is_none());
            assert!(timings.get("dwarf").is_some() && timings.beside().is_empty());
        });
    }

    #[test]
    fn a_module_without_dwarf_is_read_as_having_none() {
        let loaded = loaded("(module (func) (func))");
        let now = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let wanted = Wanted {
                manifest: true,
                dwarf: true,
                lines: true,
            };
            let mut ground = Groundwork::start(scope, &loaded, CacheSession::none(), wanted, &now);
            let mut timings = Timings::new();
            // No cache: no manifest, but the thread said so.
            assert!(ground.manifest(&mut timings).is_none());
            assert!(ground.dwarf(&mut timings).is_none());
            assert!(timings.get("dwarf").is_some());
            let beside: Vec<_> = timings.beside().iter().map(|b| b.0).collect();
            assert_eq!(beside, ["manifest", "dwarf"]);
            assert!(now.load(Ordering::Relaxed));
        });
    }
}
