//! Running a WASI 0.2 command component (`wasi:cli/run`) as `wasmtime run` would: WASI 0.2
//! from wasmtime-wasi, the same arguments, environment, preopened directories and stdio as
//! a module's run, the exit code of `wasi:cli/exit` or of `run`'s result.
//!
//! In an instrumented run the component is the rewritten one (see
//! [`crate::components::rewrite`]): the host defines each instrumented core
//! module's probe instance, whose functions report under the module's ids moved to the
//! component's id space (module `k`'s function `i` is `offset(k) + i`), so that in time mode
//! one probe log sees calls cross from module to module as one calling-context tree. In the
//! inline modes (cost, sample) each module counts into its own tree, in a memory found among
//! those the instantiation made ([`crate::run::component::memory`]); sample mode's ticks say
//! which module runs ([`crate::run::component::code`], [`crate::run::component::sampler`]);
//! at the end the trees are grafted into one, each module's a root of its own
//! ([`crate::run::component::read`]). What differs by mode is behind one interface,
//! [`crate::run::component::modes::ComponentMode`], which [`run`] calls step by step.

pub mod allocs;
pub mod calibrate;
pub mod code;
pub mod coverage;
pub mod live;
pub mod memory;
pub mod modes;
pub mod probes;
pub mod read;
pub mod sampler;
pub mod state;
pub mod ticks;

use std::io::Write;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};

use crate::exit::Failure;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::run::collector::Collector;
use crate::run::component::memory::MadeMemory;
use crate::run::host_calls::inject::FunctionInjectors;
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::wasi::context::{wasi_builder, Stdio};
use crate::settings::RunSettings;

pub use crate::run::component::modes::ComponentMode;
pub use crate::run::component::state::{ComponentState, ModuleProbes};

/// What an instrumented component's run needs besides the component.
#[derive(Debug)]
pub struct ComponentProbes {
    /// The mode every module was instrumented for, calibrated.
    pub mode: Box<dyn ComponentMode>,
    /// `--inject` into the modules' own functions, by component id.
    pub injected: FunctionInjectors,
    /// `--allocs`: the allocators report.
    pub allocs: bool,
    /// `--live`: who turns the switches (the inline modes).
    pub live: Option<crate::run::runner::Live>,
    /// `--serve`: who serves windows of the profile while the program runs (the inline
    /// modes).
    pub serve: Option<crate::run::runner::Serve>,
    /// Where the probes report, over the component's id space.
    pub collector: Collector,
    /// The instrumented modules, in the order of their probe instances.
    pub modules: Vec<ModuleProbes>,
    /// The inline modes and `--allocs`: every memory the component's instantiation makes,
    /// in order (see [`crate::run::component::memory`]), and which are the modules' tree
    /// memories and memories 0.
    pub memories: Vec<ExpectedMemory>,
}

/// A memory a component's instantiation makes: its minimum size, and whether it is the
/// tree memory of an instrumented module (its index in [`ComponentProbes::modules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedMemory {
    /// Its minimum size in bytes.
    pub minimum: usize,
    /// The module whose tree memory it is, if it is one.
    pub tree_of: Option<usize>,
    /// The module whose memory 0 it is, if it is one.
    pub main_of: Option<usize>,
    /// The interpreter module whose linear memory it is, if it is one (see
    /// [`crate::prepare::component::interpreter`]).
    pub program_of: Option<usize>,
}

/// How a component's run ended.
#[derive(Debug)]
pub struct ComponentOutcome {
    /// The program's exit code (0, `wasi:cli/exit`'s code, 1 when `run` returns an error,
    /// [`crate::exit::TRAP`] after a trap).
    pub exit_code: i32,
    /// The trap or host error that ended it: a line, and the full report.
    pub trap: Option<(String, String)>,
    /// Wall time of `run` in nanoseconds.
    pub wall_time: u64,
    /// The collector, every frame closed (instrumented runs).
    pub collector: Option<Collector>,
    /// Sample mode: how the time was sampled.
    pub sampling: Option<crate::profile::SamplingRecord>,
    /// With `--coverage`: every instrumented module's blocks, in the component's id space.
    pub coverage: Option<crate::profile::coverage::Coverage>,
    /// What each `--inject` did.
    pub injections: Vec<crate::settings::injection::InjectionRecord>,
    /// With `--allocs`: the blocks handed out and taken back.
    pub allocations: Option<crate::profile::AllocationsRecord>,
    /// With `--live`: what was switched when.
    pub live: Option<crate::profile::LiveRecord>,
    /// Adaptive mode: the walks and what was timed, over every module.
    pub adaptive: Option<crate::profile::AdaptiveRecord>,
    /// In an interpreter: its script's functions, whose ids follow the component's.
    pub languages: Option<crate::run::stacks::languages::LanguageSamples>,
}

/// Runs `component`'s `wasi:cli/run`. With `probes`, its probe instances report to their
/// collector.
pub fn run(
    engine: &Engine,
    component: &Component,
    settings: &RunSettings,
    stdio: Stdio,
    mut probes: Option<ComponentProbes>,
) -> Result<ComponentOutcome, Failure> {
    let shown = settings.module.display().to_string();
    let _runtime = crate::run::wasi::context::enter_runtime();
    let mut linker: Linker<ComponentState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .map_err(|e| Failure::input(format!("cannot link WASI: {e}")))?;
    let injected = probes
        .as_mut()
        .map(|p| std::mem::take(&mut p.injected))
        .unwrap_or_default();
    let allocs = probes.as_ref().is_some_and(|p| p.allocs);
    let live = probes.as_mut().and_then(|p| p.live.take());
    let serve = probes.as_mut().and_then(|p| p.serve.take());
    let (mode, log, collector, modules, memories) = match probes {
        Some(p) => {
            let (collector, log) = p.mode.reporting(p.collector);
            (Some(p.mode), log, collector, p.modules, p.memories)
        }
        None => (None, None, None, Vec::new(), Vec::new()),
    };
    for (k, module) in modules.iter().enumerate() {
        crate::run::component::probes::define_probes(&mut linker, k, module)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
    let wasi = wasi_builder(settings, stdio)?.build();
    let mut store = Store::new(
        engine,
        ComponentState {
            wasi,
            table: ResourceTable::new(),
            log,
            injected,
            allocs: None,
            stopwatches: Vec::new(),
        },
    );
    let (instantiated, made) = crate::run::component::memory::record(|| -> wasmtime::Result<_> {
        let instance = linker.instantiate(&mut store, component)?;
        wasmtime_wasi::p2::bindings::sync::Command::new(&mut store, &instance)
    });
    let command = instantiated.map_err(|e| {
        Failure::input(format!(
            "cannot instantiate {shown}: {}",
            crate::run::outcome::first_line(&e.to_string())
        ))
    })?;
    let found = as_expected(&memories, &made);
    // Shared with `--serve`'s thread, which serves allocation profiles too.
    let served_allocs = match allocs {
        true => allocs::ComponentAllocs::attach(
            &mut store,
            &modules,
            found.as_ref().map(|found| found.mains.as_slice()),
            serve.is_some(),
        ),
        false => None,
    };
    // The interpreter's linear memory, where its script's frames are read.
    let program = found
        .as_ref()
        .and_then(|found| found.programs.first().cloned());
    let trees = match collector.is_some() {
        true => {
            let trees = found.map(|found| found.trees);
            if trees.is_none() {
                crate::say!(
                    "wprof: warning: the instrumented modules' context trees are not where \
                     {shown}'s instantiation should have made them; no profile is written"
                );
            }
            trees
        }
        false => None,
    };
    let board = match (live, &trees, &mode) {
        (Some(live), Some(trees), Some(mode)) => {
            live::switchboard(&modules, trees, mode.probes(), live)
        }
        (Some(_), _, _) => {
            live::switches_unreachable();
            None
        }
        _ => None,
    };
    if let (Some(mode), Some(trees)) = (&mode, &trees) {
        mode.prepare(modes::Prepare {
            store: &mut store,
            modules: &modules,
            trees,
            settings,
        });
    }
    let sampled = mode.as_ref().is_some_and(|m| m.samples()) && trees.is_some();
    // `--serve`: windows read the trees while the program runs, and ask the sampler for
    // its readings.
    let ended = std::sync::Arc::new(AtomicBool::new(false));
    let desk = sampled.then(|| std::sync::Arc::new(SampleDesk::<Vec<Samples>>::default()));
    let serving = match (serve, &trees, &mode) {
        (Some(serve), Some(trees), Some(mode)) => Some(live::serve_windows(
            serve,
            mode.probes(),
            (&modules, trees),
            desk.clone(),
            ended.clone(),
            served_allocs,
            settings,
        )),
        _ => None,
    };
    let started = std::time::Instant::now();
    let (result, samples) = match &mode {
        Some(mode) => mode.enter(modes::Entry {
            store: &mut store,
            command: &command,
            component,
            modules: &modules,
            trees: trees.as_deref(),
            program: program.as_ref().map(|(k, memory)| (*k, memory)),
            switches: board.as_ref().map(|(b, _, _)| &**b),
            desk: desk.as_deref(),
            settings,
        }),
        None => (command.wasi_cli_run().call_run(&mut store), None),
    };
    // Windows stop before the trees' memories can go.
    ended.store(true, Ordering::Release);
    drop(serving);
    let live_record = board.map(|(board, running, names)| {
        // Whoever turns the switches stops before the memories go.
        drop(running);
        board.close(&|id| names.get(id as usize).cloned().unwrap_or_default())
    });
    let wall_time = started.elapsed().as_nanos() as u64;
    let _ = std::io::stdout().flush();
    let (exit_code, trap) = read::ending_of(result);
    let read = match (
        mode.as_deref(),
        store.data_mut().log.take(),
        collector,
        trees,
    ) {
        (_, Some(log), _, _) => read::Read::of_log(log),
        (Some(mode), None, Some(collector), Some(trees)) => read::read_trees(
            &mut store,
            mode,
            collector,
            (&modules, &trees),
            samples.as_deref(),
            settings,
        ),
        _ => read::Read::default(),
    };
    let allocations = store
        .data_mut()
        .allocs
        .as_mut()
        .map(|a| a.tracker.with(|t| t.record_of_run()));
    let injections = store
        .data()
        .injected
        .records()
        .into_iter()
        .map(|(_, record)| record)
        .collect();
    drop(store);
    Ok(ComponentOutcome {
        exit_code,
        trap,
        wall_time,
        collector: read.collector,
        sampling: samples.map(|s| read::sampling_of(&s, read.probe_ps, wall_time, settings)),
        coverage: read.coverage,
        injections,
        allocations,
        live: live_record,
        adaptive: read.adaptive,
        languages: read.languages,
    })
}

/// The memories of the instrumented modules found among those the instantiation made, each
/// as `(module, memory)`.
struct FoundMemories {
    /// Each module's tree memory.
    trees: Vec<(usize, MadeMemory)>,
    /// Each module's memory 0 (`--allocs`).
    mains: Vec<(usize, MadeMemory)>,
    /// The interpreter module's linear memory.
    programs: Vec<(usize, MadeMemory)>,
}

/// The tree memory, memory 0 and linear memory of each instrumented module among the
/// memories the instantiation `made`; `None` unless they are the ones `expected`, in
/// number and sizes.
fn as_expected(expected: &[ExpectedMemory], made: &[MadeMemory]) -> Option<FoundMemories> {
    if expected.len() != made.len()
        || expected
            .iter()
            .zip(made)
            .any(|(e, m)| e.minimum != m.minimum)
    {
        tracing::debug!(?expected, made = made.len(), "memories not as expected");
        return None;
    }
    let of = |pick: fn(&ExpectedMemory) -> Option<usize>| {
        expected
            .iter()
            .zip(made)
            .filter_map(|(e, m)| pick(e).map(|k| (k, m.clone())))
            .collect()
    };
    Some(FoundMemories {
        trees: of(|e| e.tree_of),
        mains: of(|e| e.main_of),
        programs: of(|e| e.program_of),
    })
}
