//! Running a WASI preview 1 command under wasmtime, with or without the probes linked.

use std::io::Write;
use std::time::Instant;

use wasmtime::{Caller, Engine, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::WasiCtxBuilder;

use crate::collector::Collector;
use crate::exit::Failure;
use crate::instrument::PROBE_MODULE;
use crate::settings::RunSettings;

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

fn define_probes(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    fn collector<'a>(caller: &'a mut Caller<'_, HostState>) -> Option<&'a mut Collector> {
        caller.data_mut().collector.as_mut()
    }
    linker.func_wrap(
        PROBE_MODULE,
        "enter",
        |mut c: Caller<'_, HostState>, id: i32| {
            if let Some(col) = collector(&mut c) {
                col.enter(id as u32)
            }
        },
    )?;
    linker.func_wrap(
        PROBE_MODULE,
        "exit",
        |mut c: Caller<'_, HostState>, id: i32| {
            if let Some(col) = collector(&mut c) {
                col.exit(id as u32)
            }
        },
    )?;
    linker.func_wrap(
        PROBE_MODULE,
        "tail",
        |mut c: Caller<'_, HostState>, id: i32| {
            if let Some(col) = collector(&mut c) {
                col.tail(id as u32)
            }
        },
    )?;
    Ok(())
}

/// Runs `module`'s `_start`. With `collector`, the probe imports are linked to it.
pub fn run(
    engine: &Engine,
    module: &Module,
    settings: &RunSettings,
    stdio: Stdio,
    collector: Option<Collector>,
) -> Result<RunOutcome, Failure> {
    let shown = settings.module.display().to_string();
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(|e| Failure::input(format!("cannot link WASI: {e}")))?;
    if collector.is_some() {
        define_probes(&mut linker)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
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
    let _ = std::io::stdout().flush();

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
                let report =
                    format!("failed to run main module `{shown}`\n\nCaused by:\n    {e:?}");
                let message = match e.downcast_ref::<wasmtime::Trap>() {
                    Some(trap) => trap.to_string(),
                    None => first_line(&e.to_string()),
                };
                (code, Some((message, report)))
            }
        }
    };
    let mut collector = store.into_data().collector;
    if let Some(c) = collector.as_mut() {
        let now = c.now();
        c.finish_at(now);
    }
    Ok(RunOutcome {
        exit_code,
        trap,
        wall_time,
        collector,
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}
