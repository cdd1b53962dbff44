//! Running a WASI preview 1 command under wasmtime, with or without the probes linked:
//! the store and its linker, the host's wrappers, a threaded program's spawned threads,
//! what the probes start and stop around `_start` (live switches, adaptive mode's walker,
//! `--serve`'s windows), and what is read once it returned.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wasmtime::{Engine, Linker, Module, Store};
use wprof_agent::{ContextArena, ProbeMode};

use crate::exit::Failure;
use crate::run::allocs::{AllocTracker, Allocs};
use crate::run::collector::PS_PER_NS;
use crate::run::host_calls::meter::HostAccount;
use crate::run::host_calls::HostCalls;
use crate::run::inline::replay::read_after_entry;
use crate::run::outcome::{ending_of, first_line};
use crate::run::start::{call_start, StartProbes};
use crate::run::switches::LiveRun;
use crate::run::threads::Threads;
use crate::run::time::probe_log::ProbeLog;
use crate::run::wasi::context::wasi_context;
use crate::run::wasi::Wasi;
use crate::settings::RunSettings;
use crate::timings::{Timings, PROGRAM};

use crate::run::host_state::define_probes;
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
    let mut linker: Linker<HostState> = Linker::new(engine);
    crate::run::wasi::link(&mut linker, threaded)?;
    let mode = probes.as_ref().map(|p| p.mode);
    let probe_bytes = probes.as_mut().and_then(|p| p.probe_bytes.take());
    let live = probes.as_mut().and_then(|p| p.live.take());
    let timer_cost = probes.as_ref().and_then(|p| p.timer_cost);
    let blocks = probes.as_mut().and_then(|p| p.blocks.take());
    let injected = probes.as_mut().and_then(|p| p.injected.take());
    let serve = probes.as_mut().and_then(|p| p.serve.take());
    // Shared with `--serve`'s thread when it serves allocation profiles.
    let allocs = probes
        .as_mut()
        .and_then(|p| p.allocators.take())
        .map(AllocTracker::new)
        .map(|tracker| match serve {
            Some(_) => Allocs::Shared(Arc::new(std::sync::Mutex::new(tracker))),
            None => Allocs::Own(tracker),
        });
    let served_allocs = match &allocs {
        Some(Allocs::Shared(shared)) => Some(shared.clone()),
        _ => None,
    };
    if let Some(mode) = mode {
        define_probes(&mut linker, mode)
            .map_err(|e| Failure::input(format!("cannot link probes: {e}")))?;
    }
    let template = probes
        .as_ref()
        .filter(|_| threaded)
        .map(|p| p.collector.fresh_copy());
    let (collector, log) = match probes {
        Some(Probes {
            collector,
            mode: ProbeMode::Time,
            ..
        }) => (None, Some(ProbeLog::start(collector))),
        Some(p) => (Some(p.collector), None),
        None => (None, None),
    };
    // A threaded program's threads share one context (see `crate::run::wasi::shared`).
    let ctx = wasi_context(settings, stdio)?;
    let (wasi, shared_wasi) = match threaded {
        true => {
            let (wasi, shared) = Wasi::share(ctx);
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
    if threaded {
        crate::run::wasi::give_back_on_return(&mut store);
    }
    // Profiled runs measure the host's calls; `WPROF=0` wraps only what `--inject` names.
    // The probed modes time each call; cost mode times nothing, and stack mode samples the
    // calls' time as it samples the rest (see `StackSamples::imports`): its wrappers count
    // calls and bytes, and read no clock.
    let profiled = mode.is_some() || settings.profiling && settings.stacks;
    let host_calls = HostCalls::install(
        &mut linker,
        &mut store,
        module,
        &settings.injections,
        profiled,
        mode.is_some_and(|m| m != ProbeMode::Cost),
    )?;
    if profiled {
        store.data_mut().host = Some(HostAccount::for_module(module));
    }
    let threads = match shared_wasi {
        Some(wasi) => {
            let threads = Threads::new(
                engine,
                module,
                settings,
                wasi,
                mode,
                probe_bytes.as_ref().map(ProbeBytes::try_clone),
                template,
                blocks.clone(),
            )?;
            threads.link(&mut linker, &store)?;
            Some(threads)
        }
        None => None,
    };
    let mut timings = Timings::new();
    let instantiated = timings.time("instantiate", || linker.instantiate(&mut store, module));
    if let Ok(instance) = &instantiated {
        host_calls.connect(&mut store, instance);
        let arena = instance.get_memory(&mut store, ContextArena::MEMORY);
        if let (Some(account), Some(arena)) = (store.data_mut().host.as_mut(), arena) {
            account.set_arena(arena);
        }
    }
    let mut read = crate::run::inline::replay::Read::default();
    let mut live_record = None;
    let mut entry_counts = None;
    let mut start_cpu_ns = None;
    let (result, samples, wall_time) = match instantiated {
        Ok(instance) => {
            let live = live
                .zip(mode)
                .and_then(|(live, mode)| LiveRun::start(&mut store, &instance, mode, live));
            let mut walker = match mode {
                Some(ProbeMode::Adaptive) => {
                    let cost = timer_cost.unwrap_or_default();
                    let walker = crate::run::adaptive::walker::start(
                        &mut store,
                        &instance,
                        settings.adaptive,
                        cost,
                    );
                    if walker.is_none() {
                        crate::say!(
                            "wprof: warning: adaptive mode cannot reach the module's timers on \
                             this host; times are sampled only"
                        );
                    }
                    walker
                }
                _ => None,
            };
            // `--serve`: windows read the tree while the program runs, and ask the sampler
            // for its readings.
            let ended = Arc::new(AtomicBool::new(false));
            let desk = mode
                .filter(|m| m.samples())
                .map(|_| Arc::new(crate::run::inline::sampler::SampleDesk::default()));
            let serving = match (serve, mode) {
                (Some(serve), Some(mode)) if mode.counts_inline() => {
                    crate::run::inline::window::serve_while_running(
                        serve,
                        &mut store,
                        &instance,
                        mode,
                        module,
                        desk.clone().map(|d| {
                            (
                                d,
                                probe_bytes.as_ref().map(ProbeBytes::try_clone),
                                settings.sample_period.longest(),
                            )
                        }),
                        ended.clone(),
                        served_allocs,
                    )
                }
                _ => None,
            };
            // Time mode reads a wall clock: the thread's CPU time in `_start` says how long
            // it waited for a processor (see `Profile::cpu_wait_ns`).
            let cpu = (mode == Some(ProbeMode::Time))
                .then(crate::run::clock::ThreadCpuClock::of_this_thread)
                .flatten()
                .and_then(|c| Some((c, c.now_ps()?)));
            let (result, samples, wall_time) = call_start(
                &mut store,
                &instance,
                module,
                StartProbes {
                    mode,
                    bytes: probe_bytes.as_ref(),
                    switches: live.as_ref().map(LiveRun::board),
                    desk: desk.as_deref(),
                    cpu_time: threaded,
                    returned: None,
                },
                settings,
                walker.as_mut(),
                &mut timings,
            )?;
            start_cpu_ns =
                cpu.and_then(|(c, from)| Some(c.now_ps()?.saturating_sub(from) / PS_PER_NS));
            if settings.profiling && settings.stacks {
                entry_counts = crate::run::stacks::entry_counts::read(&mut store, &instance);
            }
            // Windows stop before the tree's memory can go.
            ended.store(true, Ordering::Release);
            drop(serving);
            let walks = walker.map(crate::run::adaptive::walker::Walker::finish);
            let stopwatch = store.data_mut().stopwatch.take();
            timings.record(PROGRAM, std::time::Duration::from_nanos(wall_time));
            // Whoever turns the switches stops before the memory goes.
            live_record = live.map(LiveRun::close);
            if mode.is_some_and(ProbeMode::counts_inline) {
                let adaptive = walks
                    .zip(stopwatch)
                    .map(|(w, s)| (w, s, timer_cost.unwrap_or_default()));
                read = read_after_entry(
                    &mut store,
                    &instance,
                    samples.as_ref(),
                    blocks,
                    adaptive,
                    settings,
                    &mut timings,
                );
            }
            (result, samples, wall_time)
        }
        // The start function ended the program (`proc_exit`, a trap): the program's own
        // ending, as under `wasmtime run`, not wprof's.
        Err(e)
            if e.downcast_ref::<wasmtime_wasi::I32Exit>().is_some()
                || e.downcast_ref::<wasmtime::Trap>().is_some() =>
        {
            (Err(e), None, 0)
        }
        Err(e) => {
            return Err(Failure::input(format!(
                "cannot instantiate {shown}: {}",
                first_line(&e.to_string())
            )))
        }
    };
    let _ = std::io::stdout().flush();

    let backtrace = match &result {
        Err(e) => crate::run::backtrace::frames_of(e),
        Ok(()) => Vec::new(),
    };
    let (exit_code, trap) = ending_of(result, &shown, &backtrace);
    // Frames left open (a trap, proc_exit) close at the end: now (time mode), or the last
    // count (the inline modes).
    let state = store.into_data();
    // Stack mode: the first thread's calls to WASI beside its functions' counters.
    let entry_counts = entry_counts
        .map(|c| crate::run::stacks::entry_counts::with_host_calls(c, state.host.as_ref()));
    let mut host_records = state
        .host
        .as_ref()
        .map(|account| host_calls.records(account))
        .unwrap_or_default();
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
    let (readings, answered) = spawned.fold((0, 0), |(r, a), t| (r + t.readings, a + t.answered));
    Ok(RunOutcome {
        exit_code,
        trap,
        backtrace,
        wall_time,
        sampling: samples.as_ref().map(|s| crate::profile::SamplingRecord {
            period_ns: settings.sample_period.base.as_nanos() as u64,
            longest_period_ns: crate::settings::sample_period::longest_reached(
                settings.sample_period,
                std::time::Duration::from_nanos(wall_time),
            ),
            readings: s.readings + readings,
            answered: s.answered + answered,
            probe_ns: read
                .attribution
                .as_ref()
                .map_or(0, |a| a.probe_ps / PS_PER_NS),
            off_ns: s.off_ps / PS_PER_NS,
            stacks: None,
        }),
        collector,
        live: live_record,
        adaptive: read.adaptive,
        injections: host_calls.injections(state.injected.as_ref()),
        host_calls: host_records,
        coverage: read.coverage,
        allocations,
        timings,
        threads,
        entry_counts,
        start_cpu_ns,
    })
}
