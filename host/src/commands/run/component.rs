//! `wprof run` on a WASI 0.2 command component: each core module (nested ones too)
//! instrumented through the cache by its own bytes, the component rewritten around them (see
//! [`crate::prepare::component`]), run under WASI 0.2, and one profile over every module,
//! its functions named `module!function` when there are several.

use super::component_prepare::{inject_into, prepare};
use super::modes::scripts;
use crate::components::ComponentLayout;
use crate::exit::Failure;
use crate::prepare::instrument;
use crate::prepare::session::{warn, CacheSession};
use crate::profile::{Ending, ModuleRef};
use crate::progress::Progress;
use crate::run::collector::Collector;
use crate::run::component::{ComponentOutcome, ComponentProbes};
use crate::run::host_calls::inject::FunctionInjectors;
use crate::run::stacks::languages::merge_one;
use crate::run::wasi::context::Stdio;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Runs the component `bytes` (read from `settings.module`): the program's exit code.
pub(crate) fn run(
    settings: &RunSettings,
    engine: &wasmtime::Engine,
    bytes: Vec<u8>,
    timings: &mut Timings,
) -> Result<i32, Failure> {
    let shown = settings.module.display().to_string();
    let layout = ComponentLayout::read(&bytes)
        .map_err(|e| Failure::input(format!("{shown} is not a valid component: {e}")))?;
    if !layout.is_command() {
        return Err(Failure::input(format!(
            "{shown} is a component that is not a WASI command: it exports no {}.x",
            crate::components::CLI_RUN
        )));
    }
    // `--serve` listens before anything runs: a bad address is one line.
    let server = crate::commands::serve::PprofServer::bind_for(settings)?;
    let mut mode = crate::run::component::modes::of(settings.mode);
    if settings.profiling && settings.live && !mode.counts_in_trees() {
        return Err(Failure::input(format!(
            "--live on a component needs sample or cost mode, not {} mode ({shown} is one)",
            settings.mode.name()
        )));
    }
    // Every `--inject` names functions of the core modules, which the agent injects into.
    let injections = inject_into(settings, &bytes, &layout)?;
    if let (false, Some(first)) = (settings.profiling, injections.functions.first()) {
        return Err(Failure::input(format!(
            "--inject {}: {} is one of the component's own functions, which only a profiled \
             run can inject into (WPROF=0 runs the component as it is)",
            first.injection.spec, first.name
        )));
    }
    // A core module inside a nested component instantiated more than once, or instantiated
    // by another component than its own, runs as it is (see `crate::components::layout`).
    if settings.profiling && layout.unprobed_modules() > 0 {
        let n = layout.unprobed_modules();
        warn(format_args!(
            "{shown}: {n} core module{} instantiated more than once, or in nested components \
             that are, run{} without probes: {} time goes to the calls into {}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" },
            if n == 1 { "its" } else { "their" },
            if n == 1 { "it" } else { "them" },
        ));
    }
    // `--live`: `wprof ctl` reaches the run while it prepares (and is told so).
    let mut control = crate::live::open_control(settings);
    // The inline modes read each module's tree from its memory, which only an engine whose
    // memories wprof makes can find (see `crate::run::component::memory`).
    let own_engine;
    // So does `--allocs`, for the allocators that store a block's address in the program's.
    let engine = match settings.profiling && (mode.counts_in_trees() || settings.allocs) {
        true => {
            own_engine = crate::run::component::memory::engine().map_err(Failure::from)?;
            &own_engine
        }
        false => engine,
    };
    let digest = *blake3::hash(&bytes).as_bytes();
    let mut cache = timings.time("open cache", || {
        CacheSession::open(settings.cache_dir.as_deref())
    });
    let progress = Progress::on_terminal(settings.quiet);
    let prepared = match settings.profiling {
        true => timings.time("instrument", || {
            crate::prepare::guard::quietly(|| {
                prepare(
                    settings,
                    &bytes,
                    &layout,
                    &injections,
                    &mut cache,
                    &progress,
                )
            })
            .unwrap_or_else(|why| Err(format!("wprof failed: {why}")))
            .map_err(|why| {
                warn(format_args!(
                    "cannot instrument {shown} ({why}); running it without profiling"
                ))
            })
            .ok()
        }),
        false => None,
    };
    // What instrumenting freed is not reused by the compiling threads.
    crate::prepare::heap::give_back_freed();
    progress.step("compiling", None);
    let mut compile = |bytes: &[u8]| {
        crate::prepare::component::compile::compile(engine, bytes, &mut cache)
            .map(|(component, _)| component)
            .map_err(|e| {
                Failure::input(format!(
                    "cannot compile {shown}: {}",
                    e.to_string().lines().next().unwrap_or_default()
                ))
            })
    };
    let compiled = match prepared {
        Some(p) => match timings.time("compile", || compile(&p.component)) {
            Ok(component) => Some((p, component)),
            Err(e) => {
                warn(format_args!(
                    "the instrumented {shown} does not compile ({}); running it without profiling",
                    e.message
                ));
                None
            }
        },
        None => None,
    };
    let Some((prepared, component)) = compiled else {
        // No probes, no switches: `wprof ctl` finds no run.
        drop(control.take());
        let component = timings.time("compile", || compile(&bytes))?;
        progress.finish();
        let outcome =
            crate::run::component::run(engine, &component, settings, Stdio::Inherit, None)?;
        return Ok(finish(&outcome));
    };
    progress.finish();
    let mut collector = mode.collector(prepared.functions.len());
    if let Some(trace) = &settings.trace {
        collector = collector.with_trace(crate::run::collector::Tracer::new(
            trace.buffer,
            trace.max_depth,
            crate::commands::run::trace::selected(trace, &prepared.functions, &bytes),
        ));
    }
    let collector = mode.calibrate(engine, settings, timings, collector);
    let mut injected = FunctionInjectors::default();
    for f in &injections.functions {
        injected.add(f.id, &f.name, &f.injection, f.order);
    }
    let live = settings.live.then(|| {
        let names: Vec<String> = prepared.functions.iter().map(|f| f.name.clone()).collect();
        // A component has no Go module: names are shown demangled.
        let shown = names.iter().map(|n| crate::demangle::demangle(n)).collect();
        let switchable = instrument::switchable(&prepared.functions);
        crate::live::hook(
            crate::live::LiveSetup::of(settings),
            control.take(),
            names,
            shown,
            switchable,
        )
    });
    let serve = server.map(|server| {
        server.serve(
            settings,
            prepared.functions.clone(),
            ModuleRef {
                path: shown.clone(),
                blake3: wprof_cache::hex(&digest),
            },
        )
    });
    let probed = mode.probes();
    let probes = ComponentProbes {
        mode,
        injected,
        allocs: settings.allocs,
        live,
        serve,
        collector,
        modules: prepared.modules.clone(),
        memories: prepared.memories.clone(),
    };
    let mut outcome =
        crate::run::component::run(engine, &component, settings, Stdio::Inherit, Some(probes))?;
    let trace = outcome.collector.as_mut().and_then(Collector::take_trace);
    if let Some((_, report)) = &outcome.trap {
        crate::say!("Error: {report}");
    }
    let Some(collector) = outcome.collector.as_ref() else {
        // Cost mode without its trees (warned about): the program's ending only.
        return Ok(outcome.exit_code);
    };
    // An interpreter's script functions, whose ids in the collector follow the component's.
    let mut functions = std::borrow::Cow::Borrowed(&prepared.functions);
    let language = outcome.languages.take().map(|own| {
        let source_line = |file: &str, line: i32| scripts::line(settings, file, line);
        let language = merge_one(functions.to_mut(), own, &source_line);
        scripts::tell(&shown, &language);
        language
    });
    let profile = timings.time("profile", || {
        crate::run::profile_of_run(
            ModuleRef {
                path: shown.clone(),
                blake3: wprof_cache::hex(&digest),
            },
            &functions,
            prepared.stats,
            probed,
            collector,
            Ending {
                exit_code: outcome.exit_code,
                trap: outcome.trap.as_ref().map(|(m, _)| m.clone()),
                wall_time: outcome.wall_time,
                sampling: outcome.sampling,
            },
        )
    });
    let mut profile = crate::profile::Profile {
        coverage: outcome.coverage.clone(),
        injections: outcome.injections.clone(),
        allocations: outcome.allocations.clone(),
        live: outcome.live.clone(),
        adaptive: outcome.adaptive.clone(),
        ..profile
    };
    if let Some(coverage) = &mut profile.coverage {
        coverage.set_calls(&profile.functions);
    }
    if let Some(language) = &language {
        // The script's lines, and its functions' files and first lines, kept with the
        // component's.
        profile.lines = scripts::with_lines(profile.lines.take(), language, settings);
        profile.symbols = Some(crate::profile::SymbolsRecord {
            module_path: None,
            functions: scripts::symbols(language, settings),
        });
    }
    timings.time("symbols", || {
        crate::report::source::record_symbols(&mut profile, &bytes, &settings.module)
    });
    let written = crate::commands::run::summary::write_profile(&profile, settings, timings);
    if !settings.quiet {
        crate::commands::run::summary::print_component(
            &profile,
            &prepared.stats,
            &prepared.module_names,
            prepared.cached_modules,
            settings,
            written,
        );
    }
    if let (Some(trace), Some(to)) = (&trace, &settings.trace) {
        match timings.time("trace", || {
            crate::commands::run::trace::write(trace, to, &profile, &bytes)
        }) {
            Ok(line) if !settings.quiet => crate::say!("{line}"),
            Ok(_) => {}
            Err(e) => warn(format_args!("{e}; no trace written")),
        }
    }
    cache.wait_for_stores(timings);
    Ok(outcome.exit_code)
}

fn finish(outcome: &ComponentOutcome) -> i32 {
    if let Some((_, report)) = &outcome.trap {
        crate::say!("Error: {report}");
    }
    outcome.exit_code
}
