//! Running a WASI preview 1 command under wasmtime, with or without the probes linked.

use std::io::Write;
use std::time::Instant;

use wasmtime::{Caller, Engine, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::WasiCtxBuilder;

use crate::collector::Collector;
use crate::exit::Failure;
use crate::settings::RunSettings;
use wprof_agent::ProbeMode;

/// What the store holds: WASI's state, and the collector when the module is instrumented.
pub struct HostState {
    wasi: WasiP1Ctx,
    collector: Option<Collector>,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("collector", &self.collector)
            .finish_non_exhaustive()
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The program's exit code (0 when `_start` returns, the `proc_exit` code, or
    /// [`crate::exit::TRAP`]).
    pub exit_code: i32,
    /// The trap, if the program trapped: a one-line message and the full report.
    pub trap: Option<(String, String)>,
    /// The trap's wasm backtrace, innermost first (frames of the module that ran).
    pub backtrace: Vec<crate::backtrace::Frame>,
    /// Wall time of `_start` in nanoseconds.
    pub wall_time: u64,
    /// The collector, every frame closed, when the module was instrumented.
    pub collector: Option<Collector>,
}

/// Where the program's stdio goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio {
    /// This process's stdin, stdout and stderr (what `wprof run` does).
    Inherit,
    /// Empty stdin; output discarded (benchmarks).
    Discard,
}

fn wasi_context(settings: &RunSettings, stdio: Stdio) -> Result<WasiP1Ctx, Failure> {
    let mut builder = WasiCtxBuilder::new();
    if stdio == Stdio::Inherit {
        builder.inherit_stdio();
    }
    let mut argv = vec![settings.module.display().to_string()];
    argv.extend(settings.args.iter().cloned());
    builder.args(&argv);
    builder.envs(&settings.env);
    for dir in &settings.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, wasmtime_wasi::FsPerms::ReadWrite)
            .map_err(|e| {
                Failure::input(format!("cannot open --dir {}: {e}", dir.host.display()))
            })?;
    }
    Ok(builder.build_p1())
}

/// A linker with the probe imports of `mode` bound to the store's collector (and nothing
/// else).
pub(crate) fn probe_linker(
    engine: &Engine,
    mode: ProbeMode,
) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    define_probes(&mut linker, mode)?;
    Ok(linker)
}

/// A store with an empty WASI context and `collector`.
pub(crate) fn bare_store(engine: &Engine, collector: Option<Collector>) -> Store<HostState> {
    Store::new(
        engine,
        HostState {
            wasi: WasiCtxBuilder::new().build_p1(),
            collector,
        },
    )
}

/// The collector of a store.
pub(crate) fn take_collector(store: Store<HostState>) -> Option<Collector> {
    store.into_data().collector
}

fn define_probes(linker: &mut Linker<HostState>, mode: ProbeMode) -> wasmtime::Result<()> {
    use wprof_agent::ProbeImports as P;
    fn col<'a>(caller: &'a mut Caller<'_, HostState>) -> &'a mut Collector {
        caller
            .data_mut()
            .collector
            .as_mut()
            .expect("probes are linked only with a collector")
    }
    match mode {
        ProbeMode::Time => {
            linker.func_wrap(
                P::MODULE,
                P::ENTER,
                |mut c: Caller<'_, HostState>, id: i32| col(&mut c).enter(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::EXIT,
                |mut c: Caller<'_, HostState>, id: i32| col(&mut c).exit(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::TAIL,
                |mut c: Caller<'_, HostState>, id: i32| col(&mut c).tail(id as u32),
            )?;
            linker.func_wrap(
                P::MODULE,
                P::ENTER_CATCHING,
                |mut c: Caller<'_, HostState>, id: i32| {
                    let col = col(&mut c);
                    let now = col.now();
                    col.enter_catching_at(id as u32, now) as i32
                },
            )?;
            linker.func_wrap(
                P::MODULE,
                P::SITE,
                |mut c: Caller<'_, HostState>, site: i32| col(&mut c).site(site as u32),
            )?;
            // Only cost-mode modules call it.
            linker.func_wrap(P::MODULE, P::DRAIN, || {})?;
            linker.func_wrap(
                P::MODULE,
                P::UNWIND,
                |mut c: Caller<'_, HostState>, token: i32| {
                    let col = col(&mut c);
                    let now = col.now();
                    col.unwind_at(token as u32, now)
                },
            )?;
        }
        ProbeMode::Cost => {
            // A cost-mode module writes events into its buffer and calls only `drain`, when
            // the buffer is full; the other probes are imported but never called.
            linker.func_wrap(P::MODULE, P::DRAIN, |mut c: Caller<'_, HostState>| {
                if let Some(memory) = c
                    .get_export(wprof_agent::EventBuffer::MEMORY)
                    .and_then(|e| e.into_memory())
                {
                    replay(memory, &mut c, wprof_agent::EventBuffer::CAPACITY as usize);
                }
            })?;
            for name in [P::ENTER, P::EXIT, P::TAIL, P::UNWIND, P::SITE] {
                linker.func_wrap(P::MODULE, name, |_: i32, _: i64| {})?;
            }
            linker.func_wrap(P::MODULE, P::ENTER_CATCHING, |_: i32, _: i64| 0i32)?;
        }
    }
    Ok(())
}

/// Feeds the first `len` bytes of the event buffer `memory` to the store's collector.
fn replay<'a>(
    memory: wasmtime::Memory,
    store: impl Into<wasmtime::StoreContextMut<'a, HostState>>,
    len: usize,
) {
    let (data, state) = memory.data_and_store_mut(store);
    if let (Some(events), Some(collector)) = (data.get(..len), state.collector.as_mut()) {
        collector.apply_events(events);
    }
}

/// At the end of a cost-mode run: the events still in the buffer.
fn drain_rest(store: &mut Store<HostState>, instance: &wasmtime::Instance) {
    use wprof_agent::EventBuffer as E;
    let (Some(memory), Some(len)) = (
        instance.get_memory(&mut *store, E::MEMORY),
        instance.get_global(&mut *store, E::LENGTH),
    ) else {
        return;
    };
    let len = len.get(&mut *store).i32().unwrap_or(0).max(0) as usize;
    replay(memory, store, len);
}

/// Runs `module`'s `_start`. With `collector`, the probe imports are linked to it.
pub fn run(
    engine: &Engine,
    module: &Module,
    settings: &RunSettings,
    stdio: Stdio,
    probes: Option<(Collector, ProbeMode)>,
) -> Result<RunOutcome, Failure> {
    let shown = settings.module.display().to_string();
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(|e| Failure::input(format!("cannot link WASI: {e}")))?;
    let mode = probes.as_ref().map(|(_, mode)| *mode);
    if let Some(mode) = mode {
        define_probes(&mut linker, mode)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
    let collector = probes.map(|(collector, _)| collector);
    let state = HostState {
        wasi: wasi_context(settings, stdio)?,
        collector,
    };
    let mut store = Store::new(engine, state);
    let instance = linker.instantiate(&mut store, module).map_err(|e| {
        Failure::input(format!(
            "cannot instantiate {shown}: {}",
            first_line(&e.to_string())
        ))
    })?;
    let start = instance
        .get_typed_func::<(), ()>(&mut store, "_start")
        .map_err(|e| Failure::input(format!("{shown} has no usable `_start`: {e}")))?;
    let started = Instant::now();
    let result = start.call(&mut store, ());
    let wall_time = started.elapsed().as_nanos() as u64;
    if mode == Some(ProbeMode::Cost) {
        drain_rest(&mut store, &instance);
    }
    let _ = std::io::stdout().flush();

    let backtrace = match &result {
        Err(e) => crate::backtrace::frames_of(e),
        Ok(()) => Vec::new(),
    };
    let (exit_code, trap) = match result {
        Ok(()) => (0, None),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                (exit.0, None)
            } else {
                // A trap exits as under `wasmtime run` (134); any other error that ends the
                // program (a host error) exits with 1, as wasmtime's does.
                let code = if e.downcast_ref::<wasmtime::Trap>().is_some() {
                    crate::exit::TRAP
                } else {
                    1
                };
                let message = match e.downcast_ref::<wasmtime::Trap>() {
                    Some(trap) => trap.to_string(),
                    None => first_line(&e.root_cause().to_string()),
                };
                let report = crate::backtrace::report(&shown, &backtrace, &message);
                (code, Some((message, report)))
            }
        }
    };
    let mut collector = store.into_data().collector;
    if let Some(c) = collector.as_mut() {
        // Frames left open (a trap, proc_exit) close at the end: now, or the last count.
        let end = match mode {
            Some(ProbeMode::Cost) => c.last(),
            _ => c.now(),
        };
        c.finish_at(end);
    }
    Ok(RunOutcome {
        exit_code,
        trap,
        backtrace,
        wall_time,
        collector,
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}
