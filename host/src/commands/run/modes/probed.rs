//! What the modes with probes (time, sample, cost, adaptive) share: the module instrumented
//! through the cache and compiled (or, where that fails, run as it is after one warning),
//! run with the probes linked to a collector, and the collector's totals read into a
//! profile, every spawned thread's merged in. Each mode's own part is a [`Probing`]: the
//! collector its probes report to and what it measures of its own cost before the run.

use std::collections::HashMap;

use wasmtime::Module;
use wprof_agent::{ProbeMode, ProbePlan};

use super::groundwork::{Groundwork, Wanted};
use super::off::compile_original;
use super::{scripts, Job, RunMode};
use crate::commands::run::{summary, trace};
use crate::exit::Failure;
use crate::prepare::instrument::{self, Prepared};
use crate::prepare::loader;
use crate::prepare::session::warn;
use crate::profile::{Ending, FunctionInfo, InstrumentationStats, ModuleRef, Profile};
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::runner::{self, Probes, RunOutcome, Stdio};
use crate::run::stacks::languages::merge_one;
use crate::settings::RunSettings;

/// One probed mode's own part.
pub trait Probing {
    /// The mode the module is instrumented for.
    fn mode(&self) -> ProbeMode;

    /// The collector the probes of `prepared` report to; by default (the inline modes),
    /// times in nanosecond quanta and, with `--call-sites`, the call sites' offsets.
    fn collector(&self, job: &Job, prepared: &Prepared) -> Collector {
        inline_collector(job, prepared, self.mode()).with_quantum(PS_PER_NS)
    }

    /// What the mode measures of its own cost before the program runs, to subtract from
    /// what it measures (time mode: its probes'; adaptive mode: its timers').
    fn calibrate(&self, _job: &mut Job, probes: Probes) -> Probes {
        probes
    }
}

/// A run in a probed mode.
#[derive(Debug)]
pub struct Probed<P> {
    probing: P,
    /// The instrumented module and its map, `None` where it runs as it is.
    prepared: Option<Prepared>,
    /// The probe plan it was instrumented with.
    plan: Option<ProbePlan>,
    /// wasmtime's serialized form of the compiled module, when it came from the cache.
    image: Option<std::fs::File>,
    /// `--trace`: the calls the collector kept.
    trace: Option<crate::profile::trace::CallTrace>,
}

impl<P: Probing> Probed<P> {
    /// A run in `probing`'s mode.
    pub fn new(probing: P) -> Self {
        Probed {
            probing,
            prepared: None,
            plan: None,
            image: None,
            trace: None,
        }
    }

    /// The probe plan of the run.
    fn plan(&self, job: &Job) -> ProbePlan {
        let settings = &job.settings;
        ProbePlan {
            mode: self.probing.mode(),
            call_sites: settings.call_sites,
            selection: settings.filter.selection().map(std::sync::Arc::new),
            live: settings.live,
            short_max: settings.short_max,
            coverage: settings.coverage,
            allocators: settings
                .allocs
                .then(|| std::sync::Arc::new(settings.allocators.plan())),
            injections: job.injections.plan.clone().map(std::sync::Arc::new),
            capture: settings.interpreter.as_ref().map(|i| i.state_capture()),
        }
    }

    /// Sample and adaptive mode: the interpreter the module is, if it is one whose
    /// language's frames the ticks can read (its eval loop's state is then kept, see
    /// [`crate::run::inline::scripts`]); said when it is one whose cannot. Not with
    /// `--native`, nor with live probes (a function switched off keeps nothing).
    fn find_interpreter(&self, job: &mut Job) {
        if !self.probing.mode().samples() || job.settings.native || job.settings.live {
            return;
        }
        super::scripts::find_interpreter(job);
    }

    /// The instrumented module, from the cache or made now; `None` (after one warning)
    /// when it cannot be made: the program runs as it is.
    fn instrument(&self, job: &mut Job, plan: &ProbePlan) -> Result<Option<Prepared>, Failure> {
        let Job {
            loaded,
            settings,
            cache,
            engine,
            progress,
            shown,
            timings,
            ..
        } = job;
        crate::prepare::guard::test_slow_prepare();
        // A panic in the agent or the cache is caught: one warning, the program runs as it is.
        timings.time("instrument", || {
            crate::prepare::guard::quietly(|| {
                if let Some(hit) = instrument::from_cache(loaded, &settings.module, plan, cache) {
                    return Ok(Some(hit));
                }
                // Bad input stops here, before anything of it reaches the cache.
                loader::validate(loaded, &settings.module, engine)?;
                let rules = instrument::FunctionRules {
                    filter: &settings.filter,
                    allocators: &settings.allocators,
                    left_out: None,
                };
                match instrument::instrument(
                    loaded,
                    &settings.module,
                    plan,
                    &rules,
                    cache,
                    progress,
                ) {
                    Ok(p) => Ok(Some(p)),
                    Err(e) => {
                        warn(format_args!(
                            "cannot instrument {shown} ({e}); running it without profiling"
                        ));
                        Ok::<_, Failure>(None)
                    }
                }
            })
            .unwrap_or_else(|why| {
                warn(format_args!(
                    "wprof failed while preparing {shown} ({why}); running it without profiling"
                ));
                Ok(None)
            })
        })
    }

    /// The probes the instrumented module's run links, and what they start.
    fn probes(&self, job: &mut Job, prepared: &mut Prepared) -> Probes {
        let mut collector = self.probing.collector(job, prepared);
        let settings = &job.settings;
        if let Some(trace) = &settings.trace {
            collector = collector.with_trace(crate::run::collector::Tracer::new(
                trace.buffer,
                trace.max_depth,
                trace::selected(trace, &prepared.functions, &job.loaded.bytes),
            ));
        }
        let mut probes = Probes::new(
            collector,
            self.probing.mode(),
            prepared.probe_code.clone(),
            self.image.as_ref().and_then(|f| f.try_clone().ok()),
        );
        if settings.live {
            probes = probes.with_live(live_hook(
                settings,
                job.control.take(),
                &job.loaded.bytes,
                prepared,
            ));
        }
        if let Some(map) = prepared.blocks.take() {
            probes = probes.with_coverage(map);
        }
        if settings.allocs {
            probes = probes.with_allocators(std::mem::take(&mut prepared.allocators));
        }
        if let Some(server) = job.server.take() {
            probes = probes.with_serve(server.serve(
                settings,
                prepared.functions.clone(),
                ModuleRef {
                    path: job.shown.clone(),
                    blake3: job.loaded.digest_hex(),
                },
            ));
        }
        if !job.injections.functions.is_empty() {
            let mut injected = crate::run::host_calls::inject::FunctionInjectors::default();
            for f in &job.injections.functions {
                injected.add(f.id, &f.name, &f.injection, f.order);
            }
            probes = probes.with_injected(injected);
        }
        if job.settings.subtract_overhead {
            probes = self.probing.calibrate(job, probes);
        }
        probes
    }
}

impl<P: Probing> RunMode for Probed<P> {
    fn keeps_compiled_functions(&self, _: &RunSettings) -> bool {
        true
    }

    fn prepare(&mut self, job: &mut Job) -> Result<Module, Failure> {
        self.find_interpreter(job);
        let plan = self.plan(job);
        let prepared = self.instrument(job, &plan)?;
        // What instrumenting freed is not reused by the compiling threads.
        crate::prepare::heap::give_back_freed();
        // Compiled through the cache of compiled artifacts (see `prepare::compile`).
        job.progress.step("compiling", None);
        let Job {
            engine,
            loaded,
            cache,
            settings,
            shown,
            timings,
            ..
        } = job;
        let compiled = timings.time("compile", || {
            prepared.and_then(|mut p| {
                let compiled = crate::prepare::guard::quietly(|| {
                    crate::prepare::compile::compile(
                        engine,
                        &mut p,
                        loaded,
                        cache,
                        settings.incremental,
                    )
                })
                .unwrap_or_else(|why| Err(anyhow::anyhow!("wprof failed: {why}")));
                match compiled {
                    Ok(module) => Some((p, module)),
                    Err(e) => {
                        warn(format_args!(
                            "the instrumented {shown} does not compile ({}); running it without \
                             profiling",
                            e.to_string().lines().next().unwrap_or_default()
                        ));
                        None
                    }
                }
            })
        });
        let Some((prepared, compiled)) = compiled else {
            // No probes, no switches: `wprof ctl` finds no run.
            drop(job.control.take());
            let module = job.timings.time("compile", || {
                compile_original(&job.engine, &job.loaded, &job.settings, &mut job.cache)
            })?;
            job.progress.finish();
            return Ok(module);
        };
        job.progress.finish();
        self.prepared = Some(prepared);
        self.plan = Some(plan);
        self.image = compiled.image;
        Ok(compiled.module)
    }

    fn run(&mut self, job: &mut Job, module: &Module) -> Result<RunOutcome, Failure> {
        let mut prepared = self.prepared.take();
        let probes = prepared.as_mut().map(|p| self.probes(job, p));
        self.prepared = prepared;
        runner::run(&job.engine, module, &job.settings, Stdio::Inherit, probes)
    }

    fn groundwork(&self, job: &Job) -> Wanted {
        // The functions' sources, where the cache does not know them yet.
        Wanted {
            manifest: false,
            dwarf: super::sources::dwarf_needed(&job.loaded, false),
            lines: false,
        }
    }

    fn profile(
        &mut self,
        job: &mut Job,
        outcome: &mut RunOutcome,
        ground: &mut Groundwork,
    ) -> Option<Profile> {
        let prepared = self.prepared.as_ref()?;
        self.trace = outcome.collector.as_mut().and_then(Collector::take_trace);
        if let Some((message, _)) = &outcome.trap {
            // Tell the backtrace in terms of the original module, as `wasmtime run` would.
            let frames = match (prepared.bytes(&job.loaded), &self.plan) {
                (Some(instrumented), Some(plan)) => crate::run::backtrace::to_original(
                    &outcome.backtrace,
                    &job.loaded.bytes,
                    instrumented,
                    plan,
                ),
                _ => outcome.backtrace.clone(),
            };
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
        let mode = self.probing.mode();
        let collector = outcome.collector.as_ref()?;
        // An interpreter's script functions, whose ids in the collector follow the
        // module's.
        let mut functions = std::borrow::Cow::Borrowed(&prepared.functions);
        let language = outcome.languages.take().map(|own| {
            let source_line = |file: &str, line: i32| scripts::line(&job.settings, file, line);
            let language = merge_one(functions.to_mut(), own, &source_line);
            scripts::tell(&job.shown, &language);
            language
        });
        let profile = job.timings.time("profile", || {
            crate::run::profile_of_run(
                ModuleRef {
                    path: job.shown.clone(),
                    blake3: job.loaded.digest_hex(),
                },
                &functions,
                prepared.stats,
                mode,
                collector,
                Ending {
                    exit_code: outcome.exit_code,
                    trap: outcome.trap.as_ref().map(|(m, _)| m.clone()),
                    wall_time: outcome.wall_time,
                    sampling: outcome.sampling,
                },
            )
        });
        let mut profile = Profile {
            live: outcome.live.clone(),
            adaptive: outcome.adaptive.clone(),
            injections: outcome.injections.clone(),
            coverage: outcome.coverage.clone(),
            host_calls: outcome.host_calls.clone(),
            allocations: outcome.allocations.clone(),
            ..profile
        };
        if outcome.threads.is_none() {
            profile.cpu_wait_ns = outcome
                .start_cpu_ns
                .and_then(|cpu| profile.cpu_wait_of(cpu));
        }
        if let Some((threads, unfinished)) = outcome.threads.take() {
            merge_threads(
                &mut profile,
                (&functions, prepared.stats),
                mode,
                threads,
                unfinished,
            );
        }
        if let Some(coverage) = &mut profile.coverage {
            coverage.set_calls(&profile.functions);
        }
        if let Some(language) = &language {
            // The script's lines, and its functions' files and first lines, kept with the
            // module's.
            profile.lines = scripts::with_lines(profile.lines.take(), language, &job.settings);
            profile.symbols = Some(crate::profile::SymbolsRecord {
                module_path: None,
                functions: scripts::symbols(language, &job.settings),
            });
        }
        let (path, timings) = (&job.settings.module, &mut *job.timings);
        let dwarf = match super::sources::dwarf_needed(&job.loaded, false) {
            true => ground.dwarf(timings),
            false => None,
        };
        super::sources::record(&job.loaded, path, timings, &mut profile, dwarf.as_ref());
        Some(profile)
    }

    fn summarize(&mut self, job: &mut Job, profile: &Profile, written: bool) {
        let settings = &job.settings;
        if let Some(prepared) = &self.prepared {
            if !settings.quiet {
                summary::print(profile, &job.loaded.bytes, prepared, settings, written);
            }
        }
        if let (Some(trace), Some(to)) = (&self.trace, &settings.trace) {
            match job.timings.time("trace", || {
                trace::write(trace, to, profile, &job.loaded.bytes)
            }) {
                Ok(line) if !settings.quiet => crate::say!("{line}"),
                Ok(_) => {}
                Err(e) => warn(format_args!("{e}; no trace written")),
            }
        }
    }
}

/// Each spawned thread as if alone, then all of them in one profile (`functions`: the
/// module's, then the script's the threads ran, whose ids their collectors share).
fn merge_threads(
    profile: &mut Profile,
    (functions, stats): (&[FunctionInfo], InstrumentationStats),
    mode: ProbeMode,
    threads: Vec<crate::run::threads::ThreadRun>,
    unfinished: u32,
) {
    let mut others = Vec::new();
    // Sampled threads the system refused a timer: their time comes from the context the
    // module keeps alone, and the profile names them.
    let unsampled: Vec<u32> = threads
        .iter()
        .filter(|t| t.unsampled)
        .map(|t| t.tid)
        .collect();
    if !unsampled.is_empty() {
        warn(format_args!(
            "{} of {}'s threads could not be interrupted (the system refused their timers); \
             their calls are counted, their time is read from the calling context alone (the \
             time a function spends after a call returns goes to the callee)",
            unsampled.len(),
            profile.module.path
        ));
    }
    for thread in threads {
        if let (Some(mine), Some(theirs)) = (profile.coverage.as_mut(), &thread.coverage) {
            if let Err(e) = mine.merge(theirs) {
                warn(format_args!(
                    "thread {}'s coverage not merged: {e}",
                    thread.tid
                ));
            }
        }
        let Some(collector) = &thread.collector else {
            continue;
        };
        let own = crate::run::profile_of_run(
            profile.module.clone(),
            functions,
            stats,
            mode,
            collector,
            Ending {
                exit_code: 0,
                trap: None,
                wall_time: thread.wall_time,
                sampling: None,
            },
        );
        others.push((thread.tid, own));
    }
    crate::profile::threads::merge(profile, others, unfinished);
    let records = profile.threads.iter_mut().flat_map(|t| &mut t.threads);
    for thread in records.filter(|t| unsampled.contains(&t.id)) {
        thread.unsampled = true;
    }
}

/// Live probes: the switches of every probed function, turned by `wprof ctl` through a
/// socket in the cache directory and by edits of the configuration file.
fn live_hook(
    settings: &RunSettings,
    control: Option<crate::live::control::Server>,
    module: &[u8],
    prepared: &Prepared,
) -> runner::Live {
    let names: Vec<String> = prepared.functions.iter().map(|f| f.name.clone()).collect();
    let shown = crate::go_symbols::shown_names(module, &names);
    let switchable = instrument::switchable(&prepared.functions);
    crate::live::hook(
        crate::live::LiveSetup::of(settings),
        control,
        names,
        shown,
        switchable,
    )
}

/// The inline modes' collector (counts in the module's tree): with `--call-sites`, where
/// each function's call sites are.
pub fn inline_collector(job: &Job, prepared: &Prepared, mode: ProbeMode) -> Collector {
    let collector = Collector::new(prepared.functions.len());
    match job.settings.call_sites {
        true => collector.with_call_site_offsets(call_site_offsets(&job.loaded.bytes, mode)),
        false => collector,
    }
}

/// Per function id, the offsets of its call instructions (the inline modes number call
/// sites in this order). Empty if the module cannot be read, which instrumenting it
/// already ruled out.
pub fn call_site_offsets(module: &[u8], mode: ProbeMode) -> HashMap<u32, Vec<u32>> {
    let plan = ProbePlan {
        mode,
        call_sites: true,
        selection: None,
        live: false,
        short_max: 0,
        coverage: false,
        allocators: None,
        injections: None,
        capture: None,
    };
    let Ok(instrumenter) = wprof_agent::Instrumenter::new(module, &plan) else {
        return HashMap::new();
    };
    let imports = instrumenter.imported_function_count();
    (0..instrumenter.defined_function_count())
        .filter_map(|defined| {
            let sites = instrumenter.call_sites(defined).ok()?;
            Some((imports + defined, sites))
        })
        .collect()
}
