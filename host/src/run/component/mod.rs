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
//! at the end the trees are grafted into one, each module's a root of its own.

pub mod allocs;
pub mod calibrate;
pub mod code;
pub mod coverage;
pub mod memory;
pub mod probes;
pub mod sampler;
pub mod state;
pub mod ticks;

use std::io::Write;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wprof_agent::ProbeMode;

use crate::exit::Failure;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::run::adaptive::stopwatch::{Stopwatch, TimerCost};
use crate::run::adaptive::walker::Walker;
use crate::run::collector::Collector;
use crate::run::component::memory::MadeMemory;
use crate::run::host_calls::inject::FunctionInjectors;
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::inline::tree::InlineTree;
use crate::run::switches::Switchboard;
use crate::run::time::probe_log::ProbeLog;
use crate::run::wasi::context::{wasi_builder, Stdio};
use crate::settings::RunSettings;

pub use crate::run::component::state::{ComponentState, ModuleProbes};

/// What an instrumented component's run needs besides the component.
#[derive(Debug)]
pub struct ComponentProbes {
    /// The mode every module was instrumented for.
    pub mode: ProbeMode,
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
    /// Adaptive mode: what a timer costs, subtracted from what it measures.
    pub timer_cost: Option<TimerCost>,
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
    let timer_cost = probes
        .as_ref()
        .and_then(|p| p.timer_cost)
        .unwrap_or_default();
    let (log, collector, modules, memories) = match probes {
        Some(p) if p.mode == ProbeMode::Time => (
            Some(ProbeLog::start(p.collector)),
            None,
            p.modules,
            p.memories,
        ),
        // The inline modes: cost and sample.
        Some(p) => (None, Some(p.collector), p.modules, p.memories),
        None => (None, None, Vec::new(), Vec::new()),
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
    let mut served_allocs = None;
    if allocs {
        let tracker = crate::run::allocs::AllocTracker::new(
            modules.iter().flat_map(|m| m.allocators.clone()).collect(),
        );
        let tracker = match serve {
            Some(_) => {
                let shared = std::sync::Arc::new(std::sync::Mutex::new(tracker));
                served_allocs = Some(shared.clone());
                crate::run::allocs::Allocs::Shared(shared)
            }
            None => crate::run::allocs::Allocs::Own(tracker),
        };
        store.data_mut().allocs = Some(crate::run::component::allocs::ComponentAllocs {
            tracker,
            memories: (0..modules.len())
                .map(|k| {
                    let mains = &found.as_ref()?.1;
                    mains
                        .iter()
                        .find(|(of, _)| *of == k)
                        .map(|(_, m)| m.clone())
                })
                .collect(),
        });
    }
    let trees = match collector.is_some() {
        true => {
            let trees = found.map(|(trees, _)| trees);
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
    let board = match (live, &trees) {
        (Some(live), Some(trees)) => switchboard(&modules, trees, settings.mode, live),
        (Some(_), None) => {
            switches_unreachable();
            None
        }
        _ => None,
    };
    // Adaptive mode: a stopwatch and a walker per module, over its tree; the walkers by the
    // module's position, as the sampler knows the modules.
    let mut walkers: Vec<Option<Walker>> = Vec::new();
    if let (ProbeMode::Adaptive, Some(trees)) = (settings.mode, &trees) {
        let positions = modules.iter().map(|m| m.position + 1).max().unwrap_or(0);
        walkers.resize_with(positions, || None);
        let mut stopwatches: Vec<Option<Stopwatch>> = (0..modules.len()).map(|_| None).collect();
        for (k, memory) in trees {
            let module = &modules[*k];
            // SAFETY: the tree memory never moves and lives as long as the store; the
            // walkers and stopwatches go before it (the sampler is joined, the store's data
            // dropped with it).
            let tree = unsafe { memory.live_tree() };
            stopwatches[*k] = Some(Stopwatch::new(
                crate::run::clock::Clock::new(),
                crate::run::adaptive::timers::Timers::new(tree),
                timer_cost,
            ));
            walkers[module.position] = Some(Walker::new(
                tree,
                module.indices.functions,
                settings.adaptive,
            ));
        }
        store.data_mut().stopwatches = stopwatches;
    }
    let sampled = settings.mode.samples() && trees.is_some();
    // `--serve`: windows read the trees while the program runs, and ask the sampler for
    // its readings.
    let ended = std::sync::Arc::new(AtomicBool::new(false));
    let desk = sampled.then(|| std::sync::Arc::new(SampleDesk::<Vec<Samples>>::default()));
    let serving = match (serve, &trees) {
        (Some(serve), Some(trees)) => {
            let windows = trees
                .iter()
                .map(|(k, memory)| crate::run::inline::window::ModuleTree {
                    k: *k,
                    position: modules[*k].position,
                    offset: modules[*k].offset,
                    functions: modules[*k].indices.functions,
                    // SAFETY: the tree memory never moves and lives as long as the store;
                    // the windows stop (`ended`, then `serving` dropped) before it goes.
                    tree: unsafe { memory.live_tree() },
                })
                .collect();
            let source = crate::run::inline::window::WindowSource::of_component(
                windows,
                settings.mode,
                serve.functions,
                serve.module_ref,
                desk.clone().map(|d| (d, settings.sample_period.longest())),
                ended.clone(),
            )
            .with_allocs(served_allocs);
            Some((serve.start)(source))
        }
        _ => None,
    };
    let started = std::time::Instant::now();
    let (result, samples) = match (sampled, &trees) {
        (true, Some(trees)) => {
            let switches = board.as_ref().map(|(b, _, _)| &**b);
            let (result, samples) = crate::run::component::sampler::call_sampled(
                &mut store,
                &command,
                component,
                (&modules, trees),
                switches,
                desk.as_deref(),
                &mut walkers,
                settings,
            );
            (result, Some(samples))
        }
        _ => {
            let ticking = crate::run::component::ticks::start(
                &store,
                component,
                &modules,
                settings.mode == ProbeMode::Time && settings.short_max > 0,
            );
            let result = command.wasi_cli_run().call_run(&mut store);
            drop(ticking);
            (result, None)
        }
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
    let (exit_code, trap) = match result {
        Ok(Ok(())) => (0, None),
        Ok(Err(())) => (1, None),
        Err(e) => match crate::run::outcome::exit_of(&e) {
            (code, None) => (code, None),
            (code, Some(message)) => {
                // An injected trap is wprof's, not the `unreachable` it is marked as (so that
                // it exits as a trap): the report names it alone, under the backtrace.
                let injected = e
                    .downcast_ref::<crate::run::host_calls::InjectedTrap>()
                    .is_some();
                let report = match (injected, e.downcast_ref::<wasmtime::WasmBacktrace>()) {
                    (true, Some(backtrace)) => format!(
                        "{}\n\nCaused by:\n    0: {message}",
                        backtrace.to_string().trim_end()
                    ),
                    (true, None) => message.clone(),
                    (false, _) => format!("{e:?}"),
                };
                (code, Some((message, report)))
            }
        },
    };
    let mut probe_ps = 0;
    let mut coverage = None;
    let mut adaptive: Option<crate::profile::AdaptiveRecord> = None;
    let collector = match (store.data_mut().log.take(), collector, trees) {
        (Some(log), _, _) => {
            let mut collector = log.finish().0;
            collector.settle_allocs();
            Some(collector)
        }
        (None, Some(mut collector), Some(trees)) => {
            let mut tree = InlineTree::empty();
            for (k, memory) in &trees {
                let size = memory.size.load(std::sync::atomic::Ordering::Acquire);
                // SAFETY: the memory lives as long as the store, which is alive here, and
                // nothing runs in it any more; `size` bytes from its base are accessible.
                let bytes = unsafe { std::slice::from_raw_parts(memory.base as *const u8, size) };
                let module = &modules[*k];
                let mut own = InlineTree::read(bytes, module.indices.functions);
                if let Some(samples) = &samples {
                    // Sample mode: each node's sampled time in place of its cost.
                    let attribution =
                        crate::run::inline::attribution::attribute(&own, &samples[module.position]);
                    probe_ps += attribution.probe_ps;
                    for node in &mut own.nodes {
                        node.self_cost = attribution.time.get(&node.address).copied().unwrap_or(0);
                    }
                }
                // Adaptive mode: the module's walks and timed activations, in the component's
                // ids.
                let walker = walkers.get_mut(module.position).and_then(Option::take);
                let stopwatch = store
                    .data_mut()
                    .stopwatches
                    .get_mut(*k)
                    .and_then(Option::take);
                if let (Some(walker), Some(stopwatch)) = (walker, stopwatch) {
                    let (times, unfinished) = stopwatch.finish();
                    let sampled: std::collections::HashMap<u32, u64> =
                        own.nodes.iter().map(|n| (n.address, n.self_cost)).collect();
                    let record = crate::run::adaptive::record(
                        settings.adaptive,
                        timer_cost,
                        &walker.finish(),
                        &times,
                        unfinished,
                        &own,
                        |address| sampled.get(&address).copied().unwrap_or(0),
                    );
                    adaptive = Some(crate::run::adaptive::merged(
                        adaptive,
                        record,
                        module.offset,
                    ));
                }
                tree.graft(own, *k, module.offset);
            }
            coverage = crate::run::component::coverage::at_end(
                trees
                    .iter()
                    .filter_map(|(k, memory)| Some((modules[*k].coverage.as_ref()?, memory))),
            );
            let by_node = store
                .data_mut()
                .allocs
                .as_mut()
                .map(|a| a.tracker.with(|t| t.by_node()));
            tree.replay(
                &mut collector,
                |n| n.self_cost,
                None,
                None,
                by_node.as_ref(),
            );
            collector.finish_at(collector.last());
            Some(collector)
        }
        _ => None,
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
        collector,
        sampling: samples.map(|samples| crate::profile::SamplingRecord {
            period_ns: settings.sample_period.base.as_nanos() as u64,
            longest_period_ns: crate::settings::sample_period::longest_reached(
                settings.sample_period,
                std::time::Duration::from_nanos(wall_time),
            ),
            readings: samples.iter().map(|s| s.readings).sum(),
            answered: samples.iter().map(|s| s.answered).sum(),
            probe_ns: probe_ps / crate::run::collector::PS_PER_NS,
            off_ns: 0,
            stacks: None,
        }),
        coverage,
        injections,
        allocations,
        live: live_record,
        adaptive,
    })
}

/// Live probes: the one warning when a switch table is not where it should be.
fn switches_unreachable() {
    crate::say!("wprof: warning: the probes' switches cannot be reached; every probe stays on");
}

/// Live probes: the switchboard over every instrumented module's switch table (in its tree
/// memory), started, with what turns the switches and the functions' names; `None` (one
/// warning) if a table is not where it should be.
#[allow(clippy::type_complexity)]
fn switchboard(
    modules: &[ModuleProbes],
    trees: &[(usize, MadeMemory)],
    mode: ProbeMode,
    live: crate::run::runner::Live,
) -> Option<(
    std::sync::Arc<Switchboard>,
    Box<dyn std::any::Any>,
    Vec<String>,
)> {
    let mut tables = Vec::new();
    for (k, memory) in trees {
        let module = &modules[*k];
        let functions = module.indices.functions;
        let base = wprof_agent::SwitchTable::base(mode, functions) as usize;
        if memory.size.load(Ordering::Acquire) < base + functions as usize {
            switches_unreachable();
            return None;
        }
        tables.push((module.offset, functions, (memory.base + base) as *mut u8));
    }
    // SAFETY: each table lies within its tree memory (checked above), which never moves
    // and lives as long as the store; the board is closed before the store goes.
    let board = std::sync::Arc::new(unsafe { Switchboard::over(&tables, live.switchable) });
    let running = (live.start)(board.clone());
    Some((board, running, live.names))
}

/// The tree memory and memory 0 of each instrumented module among the memories the
/// instantiation `made`, each as `(module, memory)`; `None` unless they are the ones
/// `expected`, in number and sizes.
#[allow(clippy::type_complexity)]
fn as_expected(
    expected: &[ExpectedMemory],
    made: &[MadeMemory],
) -> Option<(Vec<(usize, MadeMemory)>, Vec<(usize, MadeMemory)>)> {
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
    Some((of(|e| e.tree_of), of(|e| e.main_of)))
}
