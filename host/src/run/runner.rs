//! Running a WASI preview 1 command under wasmtime, with or without the probes linked: the
//! store and its linker, the host's wrappers, a threaded program's spawned threads, the
//! features that read the probes while the program runs (live switches, `--serve`'s
//! windows), and the run's outcome. What the mode links, starts and stops around `_start`
//! and reads once it returned is the mode's (see [`crate::run::modes`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wasmtime::{Engine, Instance, Linker, Module, Store};
use wprof_agent::ContextArena;

use crate::exit::Failure;
use crate::run::adaptive::stopwatch::TimerCost;
use crate::run::allocs::{AllocTracker, Allocs};
use crate::run::collector::PS_PER_NS;
use crate::run::host_calls::meter::HostAccount;
use crate::run::host_calls::HostCalls;
use crate::run::modes::{Entered, EntryCall, First, HostFigures, ReadCall, Readings, ThreadMode};
use crate::run::outcome::{ending_of, first_line};
use crate::run::start::Entry;
use crate::run::switches::LiveRun;
use crate::run::threads::Threads;
use crate::run::wasi::context::wasi_context;
use crate::run::wasi::Wasi;
use crate::settings::RunSettings;
use crate::timings::{Timings, PROGRAM};

pub use crate::run::host_state::HostState;
pub(crate) use crate::run::host_state::{
    attach_stopwatch, bare_store, probe_linker, reset_slot, take_collector, take_stopwatch,
};
pub use crate::run::inline::window::Serve;
pub use crate::run::outcome::RunOutcome;
pub use crate::run::probes::Probes;
pub use crate::run::start::ProbeBytes;
pub use crate::run::switches::Live;
pub use crate::run::wasi::context::Stdio;

/// What the first thread's run starts beside the mode, taken from the probes.
struct Features {
    live: Option<Live>,
    timer_cost: TimerCost,
    blocks: Option<crate::profile::coverage::Coverage>,
    serve: Option<Serve>,
    /// `--allocs` and `--serve` together: the tracker `--serve`'s thread shares.
    served_allocs: Option<Arc<std::sync::Mutex<AllocTracker>>>,
}

/// Runs `module`'s `_start`. With `probes`, the probe imports are linked to its collector.
pub fn run(
    engine: &Engine,
    module: &Module,
    settings: &RunSettings,
    stdio: Stdio,
    mut probes: Option<Probes>,
) -> Result<RunOutcome, Failure> {
    let shown = settings.module.display().to_string();
    let _runtime = crate::run::wasi::context::enter_runtime();
    let threaded = crate::run::threads::is_threaded(module);
    let probe_bytes = probes.as_mut().and_then(|p| p.probe_bytes.take());
    let mode = crate::run::modes::of(
        probes.as_ref().map(|p| p.mode),
        probe_bytes,
        module,
        settings,
    );
    let injected = probes.as_mut().and_then(|p| p.injected.take());
    let (allocs, features) = features(probes.as_mut());
    // Each spawned thread reports to a copy of the collector, made empty.
    let template = probes
        .as_ref()
        .filter(|_| threaded)
        .map(|p| p.collector.fresh_copy());
    let (collector, log) = mode.reporting(probes.map(|p| p.collector));
    // A threaded program's threads share one context (see `crate::run::wasi::shared`).
    let ctx = wasi_context(settings, stdio)?;
    let (wasi, shared_wasi) = match threaded {
        true => {
            let (wasi, shared) = Wasi::share(ctx, stdio == Stdio::Inherit);
            (wasi, Some(shared))
        }
        false => (Wasi::Own(ctx), None),
    };
    let state = HostState {
        wasi,
        collector,
        log,
        stopwatch: None,
        host: None,
        allocs,
        injected,
    };
    let mut store = Store::new(engine, state);
    let mut linker: Linker<HostState> = Linker::new(engine);
    crate::run::wasi::link(&mut linker, threaded)?;
    mode.link(&mut linker)?;
    let host_calls = install_host_calls(&mut linker, &mut store, module, settings, &*mode)?;
    let threads = match shared_wasi {
        Some(wasi) => {
            let blocks = features.blocks.clone();
            let threads = Threads::new(
                engine,
                module,
                settings,
                wasi,
                mode.clone(),
                template,
                blocks,
            )?;
            threads.link(&mut linker, &store)?;
            Some(threads)
        }
        None => None,
    };
    crate::run::wasi::link_unknown_as_traps(
        &mut linker,
        module,
        settings.entry.unknown_imports_trap,
    )?;
    let mut timings = Timings::new();
    let instantiated = timings.time("instantiate", || linker.instantiate(&mut store, module));
    let first = match instantiated {
        Ok(instance) => {
            host_calls.connect(&mut store, &instance);
            let arena = instance.get_memory(&mut store, ContextArena::MEMORY);
            if let (Some(account), Some(arena)) = (store.data_mut().host.as_mut(), arena) {
                account.set_arena(arena);
            }
            let run = FirstThread {
                store: &mut store,
                instance: &instance,
                module,
                settings,
                mode: &*mode,
                threaded,
            };
            run.run(features, &mut timings)?
        }
        // The start function ended the program (`proc_exit`, a trap): the program's own
        // ending, as under `wasmtime run`, not wprof's.
        Err(e)
            if e.downcast_ref::<wasmtime_wasi::I32Exit>().is_some()
                || e.downcast_ref::<wasmtime::Trap>().is_some() =>
        {
            FirstRun {
                entered: Entered::plain(Err(e), 0),
                readings: Readings::default(),
                live: None,
            }
        }
        Err(e) => {
            return Err(Failure::input(format!(
                "cannot instantiate {shown}: {}",
                first_line(&e.to_string())
            )))
        }
    };
    let _ = std::io::stdout().flush();
    let mut outcome = outcome(
        first,
        store.into_data(),
        &host_calls,
        threads,
        settings,
        &shown,
        timings,
    );
    // The inline modes: what every thread's ticks learnt of the script's functions, now
    // that `outcome` has waited for the threads.
    outcome.languages = mode.scripts();
    Ok(outcome)
}

/// Takes from `probes` what the first thread's run starts beside the mode, and the
/// allocation tracker of its store.
fn features(probes: Option<&mut Probes>) -> (Option<Allocs>, Features) {
    let Some(p) = probes else {
        let features = Features {
            live: None,
            timer_cost: TimerCost::default(),
            blocks: None,
            serve: None,
            served_allocs: None,
        };
        return (None, features);
    };
    let serve = p.serve.take();
    // Shared with `--serve`'s thread when it serves allocation profiles.
    let allocs = p
        .allocators
        .take()
        .map(AllocTracker::new)
        .map(|tracker| match serve {
            Some(_) => Allocs::Shared(Arc::new(std::sync::Mutex::new(tracker))),
            None => Allocs::Own(tracker),
        });
    let served_allocs = match &allocs {
        Some(Allocs::Shared(shared)) => Some(shared.clone()),
        _ => None,
    };
    let features = Features {
        live: p.live.take(),
        timer_cost: p.timer_cost.unwrap_or_default(),
        blocks: p.blocks.take(),
        serve,
        served_allocs,
    };
    (allocs, features)
}

/// Wraps the WASI functions `module` imports for the host's figures the mode asks (see
/// [`crate::run::host_calls`]), and `--inject`'s.
fn install_host_calls(
    linker: &mut Linker<HostState>,
    store: &mut Store<HostState>,
    module: &Module,
    settings: &RunSettings,
    mode: &dyn ThreadMode,
) -> Result<HostCalls, Failure> {
    let figures = mode.host_figures();
    let host_calls = HostCalls::install(
        linker,
        store,
        module,
        &settings.injections,
        figures.measured(),
        figures == HostFigures::Timed,
    )?;
    if figures.measured() {
        store.data_mut().host = Some(HostAccount::for_module(module));
    }
    Ok(host_calls)
}

/// The program's first thread, instantiated.
struct FirstThread<'a> {
    store: &'a mut Store<HostState>,
    instance: &'a Instance,
    module: &'a Module,
    settings: &'a RunSettings,
    mode: &'a dyn ThreadMode,
    threaded: bool,
}

/// How the first thread's `_start` ended, and what was read of it.
struct FirstRun {
    entered: Entered,
    readings: Readings,
    live: Option<crate::profile::LiveRecord>,
}

impl FirstThread<'_> {
    /// Calls `_start` with the mode and `features` started around it, and reads what was
    /// measured.
    fn run(self, features: Features, timings: &mut Timings) -> Result<FirstRun, Failure> {
        let FirstThread {
            store,
            instance,
            module,
            settings,
            mode,
            threaded,
        } = self;
        let live = features
            .live
            .zip(mode.probes())
            .and_then(|(live, probes)| LiveRun::start(store, instance, probes, live));
        let mut walker = mode.prepare_first(First {
            store,
            instance,
            settings,
            timer_cost: features.timer_cost,
        });
        // `--serve`: windows read the tree while the program runs, and ask the sampler for
        // its readings.
        let ended = Arc::new(AtomicBool::new(false));
        let desk = mode
            .samples()
            .then(|| Arc::new(crate::run::inline::sampler::SampleDesk::default()));
        let serving = match (features.serve, mode.probes()) {
            (Some(serve), Some(probes)) if mode.serves_windows() => {
                crate::run::inline::window::serve_while_running(
                    serve,
                    store,
                    instance,
                    probes,
                    module,
                    desk.clone().map(|d| {
                        let bytes = mode.probe_bytes().map(ProbeBytes::try_clone);
                        (d, bytes, settings.sample_period.longest())
                    }),
                    ended.clone(),
                    features.served_allocs,
                )
            }
            _ => None,
        };
        let entered = mode.enter(EntryCall {
            store,
            instance,
            module,
            entry: Entry::Start,
            settings,
            switches: live.as_ref().map(LiveRun::board),
            desk: desk.as_deref(),
            cpu_time: threaded,
            walker: walker.as_mut(),
            returned: None,
            timings,
        })?;
        // Windows stop before the tree's memory can go.
        ended.store(true, Ordering::Release);
        drop(serving);
        timings.record(PROGRAM, std::time::Duration::from_nanos(entered.wall_time));
        // Whoever turns the switches stops before the memory goes.
        let live = live.map(LiveRun::close);
        let readings = mode.read(ReadCall {
            store,
            instance,
            entered: &entered,
            blocks: features.blocks,
            walker,
            timer_cost: features.timer_cost,
            first: true,
            settings,
            timings,
        });
        Ok(FirstRun {
            entered,
            readings,
            live,
        })
    }
}

/// The run's outcome: how the first thread ended, with what every thread measured.
fn outcome(
    first: FirstRun,
    state: HostState,
    host_calls: &HostCalls,
    threads: Option<Arc<Threads>>,
    settings: &RunSettings,
    shown: &str,
    mut timings: Timings,
) -> RunOutcome {
    let FirstRun {
        entered,
        readings,
        live,
    } = first;
    let backtrace = match &entered.result {
        Err(e) => crate::run::backtrace::frames_of(e),
        Ok(()) => Vec::new(),
    };
    let wall_time = entered.wall_time;
    let invoked = settings.entry.invoke.as_deref();
    let (exit_code, trap) = ending_of(entered.result, shown, invoked, &backtrace);
    // Stack mode: the first thread's calls to WASI beside its functions' counters.
    let entry_counts = readings
        .entry_counts
        .map(|c| crate::run::stacks::entry_counts::with_host_calls(c, state.host.as_ref()));
    let mut host_records = state
        .host
        .as_ref()
        .map(|account| host_calls.records(account))
        .unwrap_or_default();
    // Frames left open (a trap, proc_exit) close at the end: now (time mode), or the last
    // count (the inline modes).
    let collector = timings.time("collect", || match state.log {
        Some(log) => {
            let mut collector = log.finish().0;
            collector.settle_allocs();
            Some(collector)
        }
        None => state.collector.map(|mut c| {
            c.finish_at(c.last());
            c
        }),
    });
    let allocations = state.allocs.map(|mut t| t.with(|t| t.record_of_run()));
    let threads = threads.map(|t| t.take_ended());
    // The spawned threads' calls to WASI join the first thread's.
    for record in threads
        .iter()
        .flat_map(|(ended, _)| ended)
        .flat_map(|t| &t.host_calls)
    {
        match host_records
            .iter_mut()
            .find(|r| r.function == record.function)
        {
            Some(mine) => mine.figures.add(&record.figures),
            None => host_records.push(record.clone()),
        }
    }
    host_records.sort_by_key(|r| r.function);
    // The spawned threads' samplers read and were answered as the first's.
    let spawned = threads.iter().flat_map(|(ended, _)| ended);
    let (readings_of_spawned, answered) =
        spawned.fold((0, 0), |(r, a), t| (r + t.readings, a + t.answered));
    RunOutcome {
        exit_code,
        trap,
        backtrace,
        wall_time,
        sampling: entered
            .samples
            .as_ref()
            .map(|s| crate::profile::SamplingRecord {
                period_ns: settings.sample_period.base.as_nanos() as u64,
                longest_period_ns: crate::settings::sample_period::longest_reached(
                    settings.sample_period,
                    std::time::Duration::from_nanos(wall_time),
                ),
                readings: s.readings + readings_of_spawned,
                answered: s.answered + answered,
                probe_ns: readings
                    .attribution
                    .as_ref()
                    .map_or(0, |a| a.probe_ps / PS_PER_NS),
                off_ns: s.off_ps / PS_PER_NS,
                stacks: None,
            }),
        collector,
        live,
        adaptive: readings.adaptive,
        injections: host_calls.injections(state.injected.as_ref()),
        host_calls: host_records,
        coverage: readings.coverage,
        allocations,
        timings,
        threads,
        entry_counts,
        start_cpu_ns: entered.cpu_ns,
        // Set by `run` from the mode, which numbered them across the threads.
        languages: None,
    }
}
