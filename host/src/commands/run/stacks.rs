//! `wprof run --mode stack`: the module runs with an entry counter in each function and no
//! other probe (see [`crate::prepare::counted`]), and its threads' call stacks are sampled
//! (see [`crate::run::stacks`]); the profile has every function's, edge's and context's
//! time, and each function's calls (read from the counters; WASI's from the host), not
//! the edges' or the contexts'.

use crate::commands::run::summary;
use crate::exit::Failure;
use crate::prepare::counted::{self, CountedCode};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::{warn, CacheSession};
use crate::profile::{Ending, ModuleRef, SamplingRecord, StackWalkRecord};
use crate::run::code::map::CodeMap;
use crate::run::runner::{self, RunOutcome, Stdio};
use crate::run::stacks::profile::profile_of_stacks;
use crate::run::stacks::{self, StackSamples};
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Runs `compiled`, `loaded` compiled with its counters (or as it is), sampling its
/// stacks, and writes its profile; the program's exit code. The functions' names and the
/// counters' places come from `cache` when it has them.
pub fn run(
    engine: &wasmtime::Engine,
    mut compiled: CountedCode,
    loaded: &LoadedModule,
    settings: &RunSettings,
    cache: &mut CacheSession,
    timings: &mut Timings,
) -> Result<i32, Failure> {
    let shown = settings.module.display().to_string();
    let module = &compiled.module;
    // Same functions, same indices: the counted module's code maps as the original's.
    let code = CodeMap::of_original(module);
    let period = settings.sample_period;
    let (outcome, samples) = stacks::while_walking(&code, period, || {
        runner::run(engine, module, settings, Stdio::Inherit, None)
    });
    let mut outcome = outcome?;
    timings.extend(&outcome.timings);
    let Some(mut samples) = samples else {
        warn(format_args!(
            "stack mode could not interrupt the program's thread (SIGPROF is taken, no thread \
             timer can be made, or this platform is not Linux on x86-64 or AArch64); \
             {shown} ran without profiling"
        ));
        return Ok(summary::finish_unprofiled(outcome, settings.quiet));
    };
    // The functions, and where the counters are: from the module's manifest (on a 69 MB
    // module, 0.2 s less than naming its functions and adding the counters again).
    let (functions, recorded_offsets) = match (compiled.counted, compiled.counters.take()) {
        (true, None) => match timings.time("manifest", || {
            counted::recorded_or_made(cache, loaded, &settings.module)
        }) {
            Some(r) => (r.functions, Some(r.offsets)),
            None => (
                timings.time("names", || counted::functions(&loaded.bytes)),
                None,
            ),
        },
        // Added now: their manifest is being stored.
        (_, made) => (
            timings.time("names", || counted::functions(&loaded.bytes)),
            made,
        ),
    };
    // The counters moved the code: offsets go back to the original's through where they
    // are, told by the manifest, else by the counted module made again (it is
    // deterministic) if some stack needs it.
    let counted_offsets = std::cell::OnceCell::new();
    if let Some(offsets) = recorded_offsets {
        let _ = counted_offsets.set(Some(offsets));
    }
    // A module from the cache: its address map is read where the call sites are, instead
    // of iterated whole (0.2 s on a 69 MB module).
    let address_map = std::cell::OnceCell::new();
    let locate = |samples: &mut StackSamples| {
        samples.resolve_imports(&loaded.bytes, code.imports(), |calls| {
            let artifact = address_map.get_or_init(|| {
                compiled
                    .image
                    .as_ref()
                    .and_then(crate::run::code::address_map::ArtifactAddressMap::open)
            });
            let offsets = code.module_offsets(module, artifact.as_ref(), calls);
            if !compiled.counted {
                return offsets;
            }
            let Some(counted) = counted_offsets.get_or_init(|| counted::offsets_of(loaded)) else {
                return vec![None; offsets.len()];
            };
            offsets
                .into_iter()
                .map(|o| {
                    let at = counted.original_offset(o? as usize)?;
                    u32::try_from(at).ok()
                })
                .collect()
        })
    };
    let mut threads = outcome.threads.take();
    let mut spawned = Vec::new();
    timings.time("locate", || {
        locate(&mut samples);
        for thread in threads.iter_mut().flat_map(|(ended, _)| ended) {
            if let Some(mut own) = thread.stacks.take() {
                locate(&mut own);
                let calls = thread.entry_counts.take();
                spawned.push((thread.tid, thread.wall_time, own, calls));
            }
        }
    });
    if let Some((message, report)) = &outcome.trap {
        if compiled.counted {
            // Tell the backtrace in the original's offsets, as `wasmtime run` would.
            let frames: Vec<_> = outcome
                .backtrace
                .iter()
                .map(|f| crate::run::backtrace::Frame {
                    module_offset: f.module_offset.and_then(|o| {
                        counted_offsets
                            .get_or_init(|| counted::offsets_of(loaded))
                            .as_ref()?
                            .original_offset(o)
                    }),
                    ..f.clone()
                })
                .collect();
            crate::say!(
                "Error: {}",
                crate::run::backtrace::report(&shown, &frames, message)
            );
        } else {
            crate::say!("Error: {report}");
        }
    }
    let module_ref = ModuleRef {
        path: shown.clone(),
        blake3: loaded.digest_hex(),
    };
    let ticks = samples.ticks + spawned.iter().map(|(_, _, s, _)| s.ticks).sum::<u64>();
    let mut walks = samples.record(spawned.iter().map(|(_, _, s, _)| s));
    // The first thread's calls: its functions' counters and the host's count of WASI's;
    // and every thread started, as calls of `thread-spawn` (wprof's own import, which no
    // wrapper counts).
    let started = threads.as_ref().map_or(0, |(ended, unfinished)| {
        ended.len() as u64 + u64::from(*unfinished)
    });
    let spawn = functions
        .iter()
        .find(|f| f.kind == "import" && f.name == "wasi::thread-spawn")
        .map(|f| f.id);
    let calls = outcome.entry_counts.take().map(|mut counts| {
        counts.extend(
            outcome
                .host_calls
                .iter()
                .map(|h| (h.function, h.figures.calls)),
        );
        counts.extend(spawn.filter(|_| started > 0).map(|id| (id, started)));
        counts
    });
    walks.function_calls = calls.is_some();
    let profile = timings.time("profile", || {
        let mut profile = profile_of_stacks(
            module_ref.clone(),
            &functions,
            &samples,
            calls.as_deref(),
            ending(&outcome, ticks, walks, settings),
        );
        profile.host_calls = outcome.host_calls.clone();
        // Their time is the samples' (the wrappers only count): on the CPU, and waiting.
        for call in &mut profile.host_calls {
            let time = samples
                .imports
                .get(&call.function)
                .copied()
                .unwrap_or_default();
            call.figures.cpu_ns = time.cpu_ns;
            call.figures.wall_ns = time.cpu_ns + time.waited_ns;
        }
        profile.instrumentation = crate::profile::InstrumentationStats {
            functions_total: functions.iter().filter(|f| f.kind != "import").count() as u32,
            compiled_from_cache: compiled.image.is_some(),
            ..Default::default()
        };
        if let Some((_, unfinished)) = threads {
            // Each spawned thread as if alone, then all of them in one profile.
            let others = spawned
                .iter()
                .map(|(tid, wall_time, samples, calls)| {
                    let ending = Ending {
                        exit_code: 0,
                        trap: None,
                        wall_time: *wall_time,
                        sampling: None,
                    };
                    let own = profile_of_stacks(
                        module_ref.clone(),
                        &functions,
                        samples,
                        calls.as_deref(),
                        ending,
                    );
                    (*tid, own)
                })
                .collect();
            crate::profile::threads::merge(&mut profile, others, unfinished);
        }
        profile
    });
    let written = summary::write_profile(&profile, settings, timings);
    if !settings.quiet {
        summary::print_stacks(&profile, &loaded.bytes, settings, written);
    }
    Ok(outcome.exit_code)
}

/// How the run ended, and how its time was sampled.
fn ending(
    outcome: &RunOutcome,
    ticks: u64,
    walks: StackWalkRecord,
    settings: &RunSettings,
) -> Ending {
    Ending {
        exit_code: outcome.exit_code,
        trap: outcome.trap.as_ref().map(|(m, _)| m.clone()),
        wall_time: outcome.wall_time,
        sampling: Some(SamplingRecord {
            period_ns: settings.sample_period.base.as_nanos() as u64,
            readings: ticks,
            answered: ticks,
            longest_period_ns: crate::settings::sample_period::longest_reached(
                settings.sample_period,
                std::time::Duration::from_nanos(outcome.wall_time),
            ),
            probe_ns: 0,
            off_ns: 0,
            stacks: Some(walks),
        }),
    }
}
