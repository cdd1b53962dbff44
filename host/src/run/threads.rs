//! Programs that spawn threads (wasi-threads): a module that imports a shared memory, and
//! `wasi::thread-spawn` to start a thread at its export `wasi_thread_start(tid, arg)`.
//!
//! Each spawned thread runs on a thread of its own, in a store of its own, with a new
//! instance of the same compiled module over the one shared memory, as wasi-threads
//! prescribes. The instance's globals and the memory the agent adds are the thread's own,
//! so each thread counts into its own calling-context tree and, in time mode, logs into its
//! own collector; the runner merges them when the program ends (see
//! [`crate::profile::threads`]). All the threads share the first thread's WASI context,
//! as wasi-threads prescribes (see [`crate::run::wasi::shared`]): a descriptor one of them
//! opens is valid in all.
//!
//! Sample mode samples a spawned thread as the first: its own timer interrupts it (see
//! [`crate::run::interrupt`]) and its own sampler reads its program counter and cell; each
//! thread's time is its CPU time. Stack mode walks a spawned thread's stack as the first's:
//! its own timer and its own reader (see [`crate::run::stacks`]). Each thread's calls to
//! WASI go through the host's wrappers as the first thread's do, and its figures join the
//! first's. `--inject` into WASI, `--allocs`, `--trace`, live switching, `--serve` and
//! adaptive mode's walks see the first thread only.
//!
//! A spawned thread that traps or calls `proc_exit` ends the whole program, as under
//! wasi-threads: wprof prints what `wasmtime run` would and exits with the program's code,
//! with one warning that no profile was written.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::{Engine, Linker, Module, SharedMemory, Store};

use crate::exit::Failure;
use crate::profile::coverage::Coverage;
use crate::run::collector::Collector;
use crate::run::host_calls::HostCalls;
use crate::run::host_state::HostState;
use crate::run::modes::{EntryCall, HostFigures, ReadCall, ThreadMode};
use crate::run::stacks::{entry_counts, StackSamples};
use crate::run::start::Entry;
use crate::run::wasi::SharedWasi;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// The import that spawns a thread.
const SPAWN: (&str, &str) = ("wasi", "thread-spawn");
/// The largest thread id wasi-threads allows.
const MAX_TID: u32 = 0x1FFF_FFFF;

/// Whether `module` is a threaded program: it imports a shared memory.
pub fn is_threaded(module: &Module) -> bool {
    module
        .imports()
        .any(|i| matches!(i.ty(), wasmtime::ExternType::Memory(m) if m.is_shared()))
}

/// One spawned thread that ran to its end.
#[derive(Debug)]
pub struct ThreadRun {
    /// The id `thread-spawn` gave it.
    pub tid: u32,
    /// Its collector, every frame closed (instrumented runs).
    pub collector: Option<Collector>,
    /// Its wall time in nanoseconds.
    pub wall_time: u64,
    /// Coverage: its block counts.
    pub coverage: Option<Coverage>,
    /// Sample mode: its sampler's readings.
    pub readings: u64,
    /// Sample mode: the ticks among them that located the thread by its program counter.
    pub answered: u64,
    /// Stack mode: its sampled stacks (`None` when it could not be interrupted).
    pub stacks: Option<StackSamples>,
    /// Sample and stack mode: it could not be interrupted (the system refused its timer).
    pub unsampled: bool,
    /// Stack mode: its calls, when its module counts them.
    pub entry_counts: Option<crate::run::stacks::entry_counts::EntryCounts>,
    /// Profiled runs: its calls to WASI's functions, as the host's wrappers measured them.
    pub host_calls: Vec<crate::profile::HostCallRecord>,
}

/// What the threads of one run share: how to start one, and the ones that ended.
pub struct Threads {
    engine: Engine,
    module: Module,
    settings: RunSettings,
    /// The program's WASI context, shared by its threads.
    wasi: SharedWasi,
    /// The mode each thread runs in, the first thread's.
    mode: Arc<dyn ThreadMode>,
    /// An empty collector configured for this run, copied for each thread.
    template: Mutex<Option<Collector>>,
    /// Coverage: the block map, filled by each thread.
    blocks: Option<Coverage>,
    memories: Vec<(String, String, SharedMemory)>,
    next: AtomicU32,
    /// Where the spawned threads are, told to [`Threads::take_ended`] through `changed`.
    progress: Mutex<Progress>,
    changed: Condvar,
}

/// Where the spawned threads are.
#[derive(Debug, Default)]
struct Progress {
    /// Started and still running wasm.
    in_wasm: u32,
    /// Those threads' ids in the operating system, by the id `thread-spawn` gave them.
    os_threads: std::collections::HashMap<u32, i32>,
    /// Done with wasm, their profile being collected.
    collecting: u32,
    /// Done.
    ended: Vec<ThreadRun>,
}

/// How long at most the end of the program waits for spawned threads still in wasm that are
/// not asleep: a thread the program joined has returned from its last C function but may
/// still be in the last instructions of `wasi_thread_start` (or waiting for a core) when
/// the first thread ends.
const PATIENCE: Duration = Duration::from_millis(500);

/// How often the end of the program looks whether the threads still in wasm sleep; after
/// three looks in a row that find all of them asleep (blocked for good: waiting for work
/// that will not come), it waits no longer.
const LOOK: Duration = Duration::from_millis(2);

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl Threads {
    /// The threads of a run of `module` (threaded: see [`is_threaded`]): creates its shared
    /// memories and links the module for the threads it will spawn.
    pub(crate) fn new(
        engine: &Engine,
        module: &Module,
        settings: &RunSettings,
        wasi: SharedWasi,
        mode: Arc<dyn ThreadMode>,
        template: Option<Collector>,
        blocks: Option<Coverage>,
    ) -> Result<Arc<Threads>, Failure> {
        let mut memories = Vec::new();
        for import in module.imports() {
            if let wasmtime::ExternType::Memory(ty) = import.ty() {
                if ty.is_shared() {
                    let memory = SharedMemory::new(engine, ty).map_err(|e| {
                        Failure::input(format!("cannot create the shared memory: {e}"))
                    })?;
                    memories.push((
                        import.module().to_string(),
                        import.name().to_string(),
                        memory,
                    ));
                }
            }
        }
        let threads = Arc::new(Threads {
            engine: engine.clone(),
            module: module.clone(),
            settings: settings.clone(),
            wasi,
            mode,
            template: Mutex::new(template),
            blocks,
            memories,
            next: AtomicU32::new(1),
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
        });
        // What a thread will be linked with is checked now, before the program starts.
        let mut store = Store::new(engine, threads.state(None)?);
        let (linker, _) = threads.linker(&mut store)?;
        linker
            .instantiate_pre(module)
            .map_err(|e| Failure::input(format!("cannot link a thread's instance: {e}")))?;
        Ok(threads)
    }

    /// The linker of a spawned thread's `store`: WASI, the probes, the shared memories and
    /// `thread-spawn`, and the host's wrappers of WASI's functions, which count the thread's
    /// calls into its store as the first thread's count into its own.
    fn linker(
        self: &Arc<Self>,
        store: &mut Store<HostState>,
    ) -> Result<(Linker<HostState>, HostCalls), Failure> {
        let mut linker: Linker<HostState> = Linker::new(&self.engine);
        crate::run::wasi::link(&mut linker, true)?;
        self.mode.link(&mut linker)?;
        self.link(&mut linker, store)?;
        let figures = self.mode.host_figures();
        let (measured, timed) = (figures.measured(), figures == HostFigures::Timed);
        let host_calls =
            HostCalls::install(&mut linker, store, &self.module, &[], measured, timed)?;
        crate::run::wasi::link_unknown_as_traps(
            &mut linker,
            &self.module,
            self.settings.entry.unknown_imports_trap,
        )?;
        Ok((linker, host_calls))
    }

    /// Defines the shared memories and `thread-spawn` in `linker` (the first thread's, or
    /// the spawned threads').
    pub(crate) fn link(
        self: &Arc<Self>,
        linker: &mut Linker<HostState>,
        store: &Store<HostState>,
    ) -> Result<(), Failure> {
        let failed = |e: wasmtime::Error| Failure::input(format!("cannot link threads: {e}"));
        for (module, name, memory) in &self.memories {
            linker
                .define(store, module, name, memory.clone())
                .map_err(failed)?;
        }
        // The spawned threads' linker holds this closure, which holds the threads: a cycle
        // that lives as long as the process, like the threads themselves.
        let threads = self.clone();
        linker
            .func_wrap(SPAWN.0, SPAWN.1, move |arg: i32| -> i32 {
                threads.spawn(arg)
            })
            .map_err(failed)?;
        Ok(())
    }

    /// A new thread's store state: its handle on the program's WASI context, and its own
    /// collector.
    fn state(&self, template: Option<Collector>) -> Result<HostState, Failure> {
        let (collector, log) = self.mode.reporting(template);
        // Profiled runs count WASI's calls in each thread (the host's wrappers record them).
        let host = (self.mode.host_figures().measured())
            .then(|| crate::run::host_calls::meter::HostAccount::for_module(&self.module));
        Ok(HostState {
            wasi: crate::run::wasi::Wasi::Shared(self.wasi.lease()),
            collector,
            log,
            stopwatch: None,
            host,
            allocs: None,
            injected: None,
        })
    }

    /// `thread-spawn`: starts a thread at `wasi_thread_start(tid, arg)`; its id, or a
    /// negative number when none can be started.
    fn spawn(self: &Arc<Self>, arg: i32) -> i32 {
        let tid = self.next.fetch_add(1, Ordering::Relaxed);
        if tid > MAX_TID {
            return -1;
        }
        let threads = self.clone();
        self.update(|p| p.in_wasm += 1);
        let started = std::thread::Builder::new()
            .name(format!("wasm thread {tid}"))
            .spawn(move || threads.run(tid, arg));
        match started {
            Ok(_) => tid as i32,
            Err(e) => {
                self.update(|p| p.in_wasm -= 1);
                tracing::warn!(%e, "cannot start a thread");
                -1
            }
        }
    }

    /// Runs the spawned thread `tid` to its end.
    fn run(self: &Arc<Self>, tid: u32, arg: i32) {
        let _runtime = crate::run::wasi::context::enter_runtime();
        let wasm_done = std::cell::Cell::new(false);
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run_thread(tid, arg, &wasm_done)
        }));
        match ran {
            Ok(Ok(run)) => self.update(|p| {
                p.collecting -= 1;
                p.ended.push(run);
            }),
            Ok(Err(ending)) => ending.end_program(tid, &self.settings),
            // A defect of wprof's (reported by the panic hook): the thread is left out, and
            // the end of the program does not wait for it.
            Err(_) => self.update(|p| match wasm_done.get() {
                true => p.collecting -= 1,
                false => {
                    p.in_wasm -= 1;
                    p.os_threads.remove(&tid);
                }
            }),
        }
    }

    /// Changes the threads' progress and tells whoever waits.
    fn update(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.progress.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.notify_all();
    }

    fn run_thread(
        self: &Arc<Self>,
        tid: u32,
        arg: i32,
        wasm_done: &std::cell::Cell<bool>,
    ) -> Result<ThreadRun, ThreadEnding> {
        // SAFETY: gettid has no preconditions.
        let os_thread = unsafe { libc::gettid() };
        self.update(|p| {
            p.os_threads.insert(tid, os_thread);
        });
        let template = self
            .template
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Collector::fresh_copy);
        let state = self.state(template).map_err(ThreadEnding::Wprof)?;
        let mut store = Store::new(&self.engine, state);
        let (linker, host_calls) = self.linker(&mut store).map_err(ThreadEnding::Wprof)?;
        let instance = linker
            .instantiate(&mut store, &self.module)
            .map_err(ThreadEnding::Program)?;
        host_calls.connect(&mut store, &instance);
        let arena = instance.get_memory(&mut store, wprof_agent::ContextArena::MEMORY);
        if let (Some(account), Some(arena)) = (store.data_mut().host.as_mut(), arena) {
            account.set_arena(arena);
        }
        let mut timings = Timings::new();
        // Done with wasm as soon as the entry returns (whatever wprof does after it may
        // sleep: joining the sampler), so that the end of the program waits for this
        // thread's profile rather than taking it for one blocked for good.
        // The mode calls it once, right after the entry returns.
        let returned = || {
            wasm_done.set(true);
            self.update(|p| {
                p.in_wasm -= 1;
                p.os_threads.remove(&tid);
                p.collecting += 1;
            });
        };
        let mut entered = self
            .mode
            .enter(EntryCall {
                store: &mut store,
                instance: &instance,
                module: &self.module,
                entry: Entry::Thread {
                    tid: tid as i32,
                    arg,
                },
                settings: &self.settings,
                switches: None,
                desk: None,
                cpu_time: true,
                walker: None,
                returned: Some(&returned),
                timings: &mut timings,
            })
            .map_err(ThreadEnding::Wprof)?;
        std::mem::replace(&mut entered.result, Ok(())).map_err(ThreadEnding::Program)?;
        let readings = self.mode.read(ReadCall {
            store: &mut store,
            instance: &instance,
            entered: &entered,
            blocks: self.blocks.clone(),
            walker: None,
            timer_cost: Default::default(),
            first: false,
            settings: &self.settings,
            timings: &mut timings,
        });
        let (readings_taken, answered) = entered
            .samples
            .as_ref()
            .map_or((0, 0), |s| (s.readings, s.answered));
        let (wall_time, stacks, unsampled) = (entered.wall_time, entered.stacks, entered.unsampled);
        let state = store.into_data();
        let host_calls = state
            .host
            .as_ref()
            .map(|account| host_calls.records(account))
            .unwrap_or_default();
        // Stack mode: WASI's calls, counted by the host, beside the functions' counters.
        let entry_counts = readings
            .entry_counts
            .map(|c| entry_counts::with_host_calls(c, state.host.as_ref()));
        let collector = match state.log {
            Some(log) => Some(log.finish().0),
            None => state.collector.map(|mut c| {
                c.finish_at(c.last());
                c
            }),
        };
        Ok(ThreadRun {
            tid,
            collector,
            wall_time,
            coverage: readings.coverage,
            readings: readings_taken,
            answered,
            stacks,
            unsampled,
            entry_counts,
            host_calls,
        })
    }

    /// Once the program's first thread has ended: the spawned threads that ended, and how
    /// many are still running. Waits for threads still in wasm until they are all asleep
    /// (see [`LOOK`]) or for [`PATIENCE`], then for the profiles of those done with wasm.
    pub fn take_ended(&self) -> (Vec<ThreadRun>, u32) {
        let started = std::time::Instant::now();
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let mut asleep = 0;
        while progress.in_wasm > 0 && started.elapsed() < PATIENCE {
            // Looked at without the lock: a thread that has just left wasm sleeps on it
            // while it tells so, and would be taken for one blocked in wasm.
            let (in_wasm, os_threads): (u32, Vec<i32>) = (
                progress.in_wasm,
                progress.os_threads.values().copied().collect(),
            );
            drop(progress);
            let all_asleep = os_threads.into_iter().all(sleeps);
            progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
            if progress.in_wasm != in_wasm {
                // Some thread moved on meanwhile: what was seen is stale.
                asleep = 0;
                continue;
            }
            asleep = if all_asleep { asleep + 1 } else { 0 };
            if asleep >= 3 {
                break;
            }
            progress = self
                .changed
                .wait_timeout(progress, LOOK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mut progress = self
            .changed
            .wait_while(progress, |p| p.collecting > 0)
            .unwrap_or_else(|e| e.into_inner());
        let mut ended = std::mem::take(&mut progress.ended);
        ended.sort_by_key(|t| t.tid);
        (ended, progress.in_wasm)
    }
}

/// How a spawned thread ended the program.
enum ThreadEnding {
    /// A trap, `proc_exit` or a host error.
    Program(wasmtime::Error),
    /// wprof could not run the thread.
    Wprof(Failure),
}

impl ThreadEnding {
    /// Ends the process as the thread ended the program.
    fn end_program(self, tid: u32, settings: &RunSettings) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let shown = settings.module.display();
        let code = match self {
            ThreadEnding::Program(e) => {
                if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                    crate::say!(
                        "wprof: warning: thread {tid} of {shown} ended the program (exit code {}); \
                         no profile written",
                        exit.0
                    );
                    exit.0
                } else {
                    let trap = e.downcast_ref::<wasmtime::Trap>().is_some();
                    crate::say!(
                        "Error: thread {tid} of {shown} failed: {}",
                        e.root_cause()
                            .to_string()
                            .lines()
                            .next()
                            .unwrap_or_default()
                    );
                    crate::say!(
                        "wprof: warning: thread {tid} ended the program; no profile written"
                    );
                    if trap {
                        crate::exit::TRAP
                    } else {
                        1
                    }
                }
            }
            ThreadEnding::Wprof(failure) => {
                crate::say!("wprof: error: thread {tid} of {shown}: {failure}");
                crate::exit::USAGE_OR_INPUT
            }
        };
        std::process::exit(code)
    }
}

/// Whether the thread `os_thread` of this process sleeps (blocked: state `S` in
/// `/proc/self/task/TID/stat`). Elsewhere than on Linux, every thread is taken to sleep.
fn sleeps(os_thread: i32) -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{os_thread}/stat")) else {
        // Gone: nothing to wait for.
        return true;
    };
    // `TID (NAME) STATE ...`: the name may hold spaces and parentheses.
    stat.rfind(')')
        .and_then(|end| stat[end + 1..].trim_start().chars().next())
        .is_some_and(|state| state == 'S')
}
