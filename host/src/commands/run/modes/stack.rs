//! `wprof run --mode stack`, the default: the module runs with an entry counter in each
//! function and no other probe (see [`crate::prepare::counted`]), and its threads' call
//! stacks are sampled (see [`crate::run::stacks`]); the profile has every function's,
//! edge's and context's time, and each function's calls (read from the counters; WASI's
//! from the host), not the edges' or the contexts'.

use std::cell::OnceCell;
use std::collections::HashMap;

use wasmtime::Module;

use super::groundwork::{Groundwork, Wanted};
use super::off::compile_original;
use super::scripts;
use super::sources;
use super::{Job, RunMode};
use crate::commands::run::summary;
use crate::exit::Failure;
use crate::prepare::counted::{self, CountedCode};
use crate::prepare::injections::Split;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::warn;
use crate::profile::{Ending, FunctionInfo, ModuleRef, Profile, SamplingRecord, StackWalkRecord};
use crate::run::code::map::{CodeMap, Running};
use crate::run::runner::{self, RunOutcome, Stdio};
use crate::run::stacks::entry_counts::EntryCounts;
use crate::run::stacks::profile::profile_of_stacks;
use crate::run::stacks::{self, Located, StackSamples};
use crate::settings::RunSettings;
use wprof_agent::entry_counts::CounterOffsets;

/// Stack mode's run: what it compiled, and the stacks its threads' timers sampled.
#[derive(Debug, Default)]
pub struct Stack {
    /// The module that runs, counted (or as it is), set by `prepare`.
    compiled: Option<CountedCode>,
    /// Where the running module's functions are, set by `run`: the walks' map, then
    /// the samples'.
    code: Option<CodeMap>,
    /// The first thread's samples, `None` if its timer could not be made.
    samples: Option<StackSamples>,
}

/// A spawned thread's part: its id, wall time, samples and calls.
type Spawned = (u32, u64, StackSamples, Option<EntryCounts>);

impl RunMode for Stack {
    fn keeps_compiled_functions(&self, _: &RunSettings) -> bool {
        // Stack mode compiles its module whole: the incremental cache would have Cranelift
        // hash every function for nothing (2 s of CPU on a 69 MB module).
        false
    }

    fn prepare(&mut self, job: &mut Job) -> Result<Module, Failure> {
        job.progress.step("compiling", None);
        let code = job.timings.time("compile", || {
            counted::compile(
                &job.engine,
                &job.loaded,
                &job.settings.module,
                &mut job.cache,
                |cache| compile_original(&job.engine, &job.loaded, &job.settings, cache),
            )
        })?;
        job.progress.finish();
        if code.counted && !job.settings.native {
            scripts::find_interpreter(job);
        }
        let module = code.module.clone();
        self.compiled = Some(code);
        Ok(module)
    }

    fn run(&mut self, job: &mut Job, module: &Module) -> Result<RunOutcome, Failure> {
        // Same functions, same indices: the counted module's code maps as the original's.
        let code = self.code.insert(CodeMap::of_original(module));
        let (outcome, samples) = stacks::while_walking(code, job.settings.sample_period, |_| {
            runner::run(&job.engine, module, &job.settings, Stdio::Inherit, None)
        });
        self.samples = samples;
        outcome
    }

    fn groundwork(&self, job: &Job) -> Wanted {
        // The manifest where the counters were not added now, and the DWARF for the sampled
        // lines and the sources.
        let counted = self
            .compiled
            .as_ref()
            .is_some_and(|c| c.counted && c.counters.is_none());
        Wanted {
            manifest: counted && job.cache.is_enabled(),
            dwarf: sources::dwarf_needed(&job.loaded, true),
            lines: true,
        }
    }

    fn profile(
        &mut self,
        job: &mut Job,
        outcome: &mut RunOutcome,
        ground: &mut Groundwork,
    ) -> Option<Profile> {
        let Some(mut samples) = self.samples.take() else {
            warn(format_args!(
                "stack mode could not interrupt the program's thread (SIGPROF is taken, no \
                 thread timer can be made, or this platform is not Linux on x86-64 or \
                 AArch64); {} ran without profiling",
                job.shown
            ));
            return None;
        };
        let mut compiled = self.compiled.take()?;
        let code = self.code.take()?;
        let (mut functions, recorded_offsets) = functions_and_counters(job, &mut compiled, ground);
        // The counters moved the code: offsets go back to the original's through where
        // they are, told by the manifest, else by the counted module made again (it is
        // deterministic) if some stack needs it.
        let counted_offsets = OnceCell::new();
        if let Some(offsets) = recorded_offsets {
            let _ = counted_offsets.set(Some(offsets));
        }
        let mut threads = outcome.threads.take();
        let mut spawned: Vec<Spawned> = Vec::new();
        // Spawned threads that could not be interrupted: their calls are counted all the
        // same, and the profile names them.
        let mut unsampled = Vec::new();
        job.timings.time("locate", || {
            // The counted module's own functions come after the original's.
            let first_added = u32::try_from(functions.len()).unwrap_or(u32::MAX);
            let mut locate = locator(&job.loaded, &compiled, &code, &counted_offsets, first_added);
            locate(&mut samples);
            for thread in threads.iter_mut().flat_map(|(ended, _)| ended) {
                let own = match thread.stacks.take() {
                    Some(mut own) => {
                        locate(&mut own);
                        own
                    }
                    None => {
                        unsampled.push(thread.tid);
                        StackSamples::default()
                    }
                };
                let calls = thread.entry_counts.take();
                spawned.push((thread.tid, thread.wall_time, own, calls));
            }
        });
        let every_thread =
            std::iter::once(&mut samples).chain(spawned.iter_mut().map(|t| &mut t.2));
        let source_line = |file: &str, line: i32| scripts::line(&job.settings, file, line);
        let language = stacks::languages::merge(&mut functions, every_thread, &source_line);
        if let Some(language) = &language {
            scripts::tell(&job.shown, language);
        }
        if !unsampled.is_empty() {
            warn(format_args!(
                "{} of {}'s threads could not be interrupted (the system refused their timers); \
                 their calls are counted, their time is not sampled",
                unsampled.len(),
                job.shown
            ));
        }
        tell_trap(job, outcome, &compiled, &counted_offsets);
        let module_ref = ModuleRef {
            path: job.shown.clone(),
            blake3: job.loaded.digest_hex(),
        };
        let ticks = samples.ticks + spawned.iter().map(|(_, _, s, _)| s.ticks).sum::<u64>();
        let mut walks = samples.record(spawned.iter().map(|(_, _, s, _)| s));
        // The first thread's calls: its functions' counters and the host's count of
        // WASI's (see `entry_counts::with_host_calls`); and every thread started, as calls of `thread-spawn` (wprof's own
        // import, which no wrapper counts).
        let started = threads.as_ref().map_or(0, |(ended, unfinished)| {
            ended.len() as u64 + u64::from(*unfinished)
        });
        let spawn = functions
            .iter()
            .find(|f| f.kind == "import" && f.name == "wasi::thread-spawn")
            .map(|f| f.id);
        let calls = outcome.entry_counts.take().map(|mut counts| {
            (counts.functions).extend(spawn.filter(|_| started > 0).map(|id| (id, started)));
            counts
        });
        walks.function_calls = calls.is_some();
        walks.edge_calls = calls.as_ref().is_some_and(|c| c.edges.is_some());
        walks.edge_calls_lost = calls
            .iter()
            .chain(spawned.iter().filter_map(|t| t.3.as_ref()))
            .filter_map(|c| c.edges.as_ref())
            .map(|e| e.lost)
            .sum();
        let ending = ending(outcome, ticks, walks, &job.settings);
        let mut profile = job.timings.time("profile", || {
            let mut profile = profile_of_stacks(
                module_ref.clone(),
                &functions,
                &samples,
                calls.as_ref(),
                ending,
            );
            profile.host_calls = outcome.host_calls.clone();
            // Their time is the samples' (the wrappers only count): on the CPU, and waiting.
            for call in &mut profile.host_calls {
                let every_thread = std::iter::once(&samples).chain(spawned.iter().map(|t| &t.2));
                let (cpu_ns, waited_ns) = every_thread
                    .filter_map(|s| s.imports.get(&call.function))
                    .fold((0, 0), |(c, w), t| (c + t.cpu_ns, w + t.waited_ns));
                call.figures.cpu_ns = cpu_ns;
                call.figures.wall_ns = cpu_ns + waited_ns;
            }
            profile.instrumentation = crate::profile::InstrumentationStats {
                functions_total: functions.iter().filter(|f| f.kind != "import").count() as u32,
                compiled_from_cache: compiled.image.is_some(),
                ..Default::default()
            };
            if let Some((_, unfinished)) = threads {
                merge_threads(&mut profile, &module_ref, &functions, &spawned, unfinished);
                let records = profile.threads.iter_mut().flat_map(|t| &mut t.threads);
                for thread in records.filter(|t| unsampled.contains(&t.id)) {
                    thread.unsampled = true;
                }
            }
            profile
        });
        // Every thread's sampled time per offset.
        let mut at_offset: HashMap<u32, u64> = HashMap::new();
        let mut unmapped = 0;
        for own in std::iter::once(&samples).chain(spawned.iter().map(|t| &t.2)) {
            for (&offset, &ns) in &own.at_offset {
                *at_offset.entry(offset).or_default() += ns;
            }
            unmapped += own.unlocated_ns;
        }
        // The module's DWARF, read once for the sampled lines and the functions' sources
        // (where either needs it).
        let bytes = &job.loaded.bytes;
        let dwarf = match sources::dwarf_needed(&job.loaded, !at_offset.is_empty()) {
            true => ground.dwarf(job.timings),
            false => None,
        };
        // The sampled offsets turned into source lines.
        profile.lines = job.timings.time("lines", || {
            let lines = crate::report::lines::record(bytes, dwarf.as_ref(), &at_offset, unmapped);
            match &language {
                Some(language) => scripts::with_lines(lines, language, &job.settings),
                None => lines,
            }
        });
        // The script's functions' files and first lines, kept with the module's (see
        // `record_symbols`).
        if let Some(language) = &language {
            profile.symbols = Some(crate::profile::SymbolsRecord {
                module_path: None,
                functions: scripts::symbols(language, &job.settings),
            });
        }
        let (path, timings) = (&job.settings.module, &mut *job.timings);
        sources::record(&job.loaded, path, timings, &mut profile, dwarf.as_ref());
        Some(profile)
    }

    fn summarize(&mut self, job: &mut Job, profile: &Profile, written: bool) {
        if !job.settings.quiet {
            summary::print_stacks(profile, &job.loaded.bytes, &job.settings, written);
        }
    }
}

/// The functions, and where the counters are: from the module's manifest (on a 69 MB
/// module, 0.2 s less than naming its functions and adding the counters again).
fn functions_and_counters(
    job: &mut Job,
    compiled: &mut CountedCode,
    ground: &mut Groundwork,
) -> (Vec<FunctionInfo>, Option<CounterOffsets>) {
    match (compiled.counted, compiled.counters.take()) {
        (true, None) => match ground.manifest(job.timings).or_else(|| {
            job.timings.time("manifest", || {
                counted::recorded_or_made(&mut job.cache, &job.loaded, &job.settings.module)
            })
        }) {
            Some(r) => (r.functions, Some(r.offsets)),
            None => (
                job.timings
                    .time("names", || counted::functions(&job.loaded.bytes)),
                None,
            ),
        },
        // Added now: their manifest is being stored.
        (_, made) => (
            job.timings
                .time("names", || counted::functions(&job.loaded.bytes)),
            made,
        ),
    }
}

/// What resolves a thread's samples: their imports' calls and their frames' offsets in
/// the original module; the frames of functions the counted module added (from
/// `first_added` on) taken out.
fn locator<'a>(
    loaded: &'a LoadedModule,
    compiled: &'a CountedCode,
    code: &'a CodeMap,
    counted_offsets: &'a OnceCell<Option<CounterOffsets>>,
    first_added: u32,
) -> impl FnMut(&mut StackSamples) + 'a {
    // A module from the cache: its address map is read where the call sites are, instead
    // of iterated whole (0.2 s on a 69 MB module).
    let address_map = OnceCell::new();
    move |samples: &mut StackSamples| {
        // Where addresses in the compiled code are in the original module (`nearest`: code
        // the compiler added takes the nearest instruction's before it).
        let located = |pcs: &[usize], nearest: bool| -> Vec<Located> {
            let artifact = address_map.get_or_init(|| {
                compiled
                    .image
                    .as_ref()
                    .and_then(crate::run::code::address_map::ArtifactAddressMap::open)
            });
            let offsets = match nearest {
                true => code.nearest_module_offsets(&compiled.module, artifact.as_ref(), pcs),
                false => code.module_offsets(&compiled.module, artifact.as_ref(), pcs),
            };
            let map = match compiled.counted {
                true => counted_offsets
                    .get_or_init(|| counted::offsets_of(loaded))
                    .as_ref(),
                false => None,
            };
            offsets
                .into_iter()
                .map(|offset| located_in(offset, compiled.counted, map))
                .collect()
        };
        let offsets = |pcs: &[usize]| -> Vec<Option<u32>> {
            let offset = |l| match l {
                Located::Offset(offset) => Some(offset),
                Located::Counter | Located::Nowhere => None,
            };
            located(pcs, false).into_iter().map(offset).collect()
        };
        samples.resolve_imports(&loaded.bytes, code.imports(), offsets);
        let function_of = |pc| match code.running(pc) {
            Running::Function(id) => Some(id),
            Running::Probe | Running::Outside => None,
        };
        samples.locate_addresses(function_of, |pcs| located(pcs, true));
        if compiled.counted {
            samples.leave_out_added(first_added);
        }
    }
}

/// Where `offset`, of the compiled module's code, is in the original module: as it is
/// where the module was compiled uncounted, else through `map`, the counted module's map of
/// what it added (none read: nothing is placed).
fn located_in(offset: Option<u32>, counted: bool, map: Option<&CounterOffsets>) -> Located {
    let Some(offset) = offset else {
        return Located::Nowhere;
    };
    if !counted {
        return Located::Offset(offset);
    }
    let Some(map) = map else {
        return Located::Nowhere;
    };
    if map.is_added(offset as usize) {
        return Located::Counter;
    }
    map.original_offset(offset as usize)
        .and_then(|at| u32::try_from(at).ok())
        .map_or(Located::Nowhere, Located::Offset)
}

/// A trap, told in the original's offsets, as `wasmtime run` would.
fn tell_trap(
    job: &Job,
    outcome: &RunOutcome,
    compiled: &CountedCode,
    counted_offsets: &OnceCell<Option<CounterOffsets>>,
) {
    let Some((message, report)) = &outcome.trap else {
        return;
    };
    if !compiled.counted {
        crate::say!("Error: {report}");
        return;
    }
    let frames: Vec<_> = outcome
        .backtrace
        .iter()
        .map(|f| crate::run::backtrace::Frame {
            module_offset: f.module_offset.and_then(|o| {
                counted_offsets
                    .get_or_init(|| counted::offsets_of(&job.loaded))
                    .as_ref()?
                    .original_offset(o)
            }),
            ..f.clone()
        })
        .collect();
    crate::say!(
        "Error: {}",
        crate::run::backtrace::report(
            &job.shown,
            job.settings.entry.invoke.as_deref(),
            &frames,
            message,
        )
    );
}

/// Each spawned thread as if alone, then all of them in one profile.
fn merge_threads(
    profile: &mut Profile,
    module_ref: &ModuleRef,
    functions: &[FunctionInfo],
    spawned: &[Spawned],
    unfinished: u32,
) {
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
                functions,
                samples,
                calls.as_ref(),
                ending,
            );
            (*tid, own)
        })
        .collect();
    crate::profile::threads::merge(profile, others, unfinished);
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

/// The settings a profiled run in stack mode goes on with: where what was asked for
/// needs probes (`--serve`, `--inject` into the module's own functions), an error if stack
/// mode was asked for, else sample mode, the probed mode closest to it.
pub fn settle(settings: RunSettings, injections: &Split) -> Result<RunSettings, Failure> {
    if !(settings.profiling && settings.stacks) {
        return Ok(settings);
    }
    let wanting = [
        (
            "--serve (profiles the probes keep while the program runs)",
            settings.serve.is_some(),
        ),
        (
            "--inject into the module's own functions",
            !injections.functions.is_empty(),
        ),
    ];
    let Some((what, _)) = wanting.iter().find(|w| w.1) else {
        return Ok(settings);
    };
    if !settings.stack_by_default {
        return Err(Failure::input(format!(
            "stack mode runs the module without probes but its entry counters, which {what} needs; use sample mode"
        )));
    }
    // No mode was chosen: the default gives way to the probed mode closest to it.
    tracing::debug!("{what} needs probes: sample mode instead of stack mode");
    Ok(settings.in_sample_mode())
}

/// A component's settings: stack mode samples a core module's stacks; a component is
/// profiled in sample mode (said, unless stack mode was only the default).
pub fn settle_component(settings: &RunSettings) -> RunSettings {
    if !settings.stacks {
        return settings.clone();
    }
    if !settings.stack_by_default {
        warn(format_args!(
            "stack mode samples a core module's stacks; {} is a component, profiled in sample mode",
            settings.module.display()
        ));
    }
    settings.in_sample_mode()
}
