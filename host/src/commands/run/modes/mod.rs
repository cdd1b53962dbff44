//! The modes of `wprof run` on a core module, each one module behind one interface,
//! [`RunMode`]: what it compiles (instrumented, counted or as it is), what it links and
//! starts around `_start`, and how it reads what was measured into a profile. The run's
//! orchestration (`commands::run::run_timed`) asks these questions in order and no other:
//! adding a mode is adding a module here and a line in [`of`].
//!
//! - [`off`]: `WPROF=0`, the original as wasmtime would run it (and where instrumenting
//!   failed).
//! - [`stack`]: the default, the original with an entry counter per function, its stacks
//!   sampled.
//! - [`probed`]: what the modes with probes share (instrumenting through the cache, the
//!   probes' run, the collector's profile), each mode's own part in [`time`], [`sample`],
//!   [`cost`] and [`adaptive`] behind [`probed::Probing`].
//!
//! What a mode's profile needs of the module that the run cannot change (its manifest, its
//! DWARF) is read while the program runs, on a thread of [`groundwork`]'s.

pub mod adaptive;
pub mod cost;
pub mod groundwork;
pub mod off;
pub mod probed;
pub mod sample;
pub(super) mod scripts;
mod sources;
pub mod stack;
pub mod time;

use wasmtime::Module;
use wprof_agent::ProbeMode;

use crate::commands::serve::PprofServer;
use crate::exit::Failure;
use crate::prepare::injections::Split;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::profile::Profile;
use crate::progress::Progress;
use crate::run::runner::RunOutcome;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// Everything a mode's run works with, made once by the orchestration.
pub struct Job<'t> {
    /// The run's settings, as the mode runs them.
    pub settings: RunSettings,
    /// The module, read and hashed.
    pub loaded: std::sync::Arc<LoadedModule>,
    /// `--inject`, split into the imports' (the host's wrappers) and the module's own
    /// functions' (the agent's).
    pub injections: Split,
    /// The engine the module compiles in.
    pub engine: wasmtime::Engine,
    /// The cache, or none.
    pub cache: CacheSession,
    /// How long each of wprof's phases took.
    pub timings: &'t mut Timings,
    /// The progress bar of a long first preparation.
    pub progress: Progress,
    /// `--live`: the control socket `wprof ctl` reaches.
    pub control: Option<crate::live::control::Server>,
    /// `--serve`: the bound address.
    pub server: Option<PprofServer>,
    /// The module's path as messages show it.
    pub shown: String,
}

impl std::fmt::Debug for Job<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("module", &self.shown)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// One mode of `wprof run` on a core module. The orchestration calls, in order,
/// [`prepare`](RunMode::prepare), [`run`](RunMode::run), [`profile`](RunMode::profile),
/// then, with a profile, [`summarize`](RunMode::summarize).
pub trait RunMode {
    /// Whether the engine keeps compiled functions (wasmtime's incremental cache) for this
    /// run: worth it only where probes change some functions and not others.
    fn keeps_compiled_functions(&self, settings: &RunSettings) -> bool;

    /// The module that runs: instrumented, counted, or the original (compiled through the
    /// cache of compiled artifacts).
    fn prepare(&mut self, job: &mut Job) -> Result<Module, Failure>;

    /// What the profile will want of the module that the run cannot change, read while
    /// the program runs (see [`groundwork`]); nothing by default.
    fn groundwork(&self, _job: &Job) -> groundwork::Wanted {
        groundwork::Wanted::default()
    }

    /// Runs `module`'s `_start`, with what the mode links and starts around it.
    fn run(&mut self, job: &mut Job, module: &Module) -> Result<RunOutcome, Failure>;

    /// What was measured, as a profile, with the names and sources the reports show (see
    /// [`crate::report::source::record_symbols`]); tells a trap in the original module's
    /// terms. `None` when the run was not profiled (the mode could not measure, said in a
    /// warning). `ground`: what was read of the module while the program ran.
    fn profile(
        &mut self,
        job: &mut Job,
        outcome: &mut RunOutcome,
        ground: &mut groundwork::Groundwork,
    ) -> Option<Profile>;

    /// The summary on stderr, and what else the run writes beside its profile (`--trace`);
    /// `written` says whether the profile file was written.
    fn summarize(&mut self, job: &mut Job, profile: &Profile, written: bool);
}

/// The mode `settings` ask for.
pub fn of(settings: &RunSettings) -> Box<dyn RunMode> {
    if !settings.profiling {
        return Box::new(off::Off);
    }
    if settings.stacks {
        return Box::new(stack::Stack::default());
    }
    match settings.mode {
        ProbeMode::Time => Box::new(probed::Probed::new(time::Time)),
        ProbeMode::Sample => Box::new(probed::Probed::new(sample::Sample)),
        ProbeMode::Cost => Box::new(probed::Probed::new(cost::Cost)),
        ProbeMode::Adaptive => Box::new(probed::Probed::new(adaptive::Adaptive)),
    }
}

/// The settings a module's run goes on with, `--inject` split: the default mode gives way
/// to sample mode where what was asked for needs probes (see [`stack::settle`]).
pub fn settle(
    settings: &RunSettings,
    loaded: &LoadedModule,
) -> Result<(RunSettings, Split), Failure> {
    // `--inject` into imports stays with the host's wrappers; into the module's own
    // functions, it goes to the agent.
    let injections = crate::prepare::injections::split(&loaded.bytes, &settings.injections)?;
    if let (false, Some(first)) = (settings.profiling, injections.functions.first()) {
        return Err(Failure::input(format!(
            "--inject {}: {} is one of the module's own functions, which only a profiled run \
             can inject into (WPROF=0 runs the original as it is)",
            first.injection.spec, first.name
        )));
    }
    let settings = RunSettings {
        injections: injections.imports.clone(),
        ..settings.clone()
    };
    let settings = stack::settle(settings, &injections)?;
    Ok((settings, injections))
}

/// A component's settings: stack mode samples a core module's stacks, a component runs in
/// sample mode instead (said unless it was the default).
pub fn settle_component(settings: &RunSettings) -> RunSettings {
    stack::settle_component(settings)
}

/// The engine for a run of `settings` in `mode`: compiled functions (wasmtime's
/// incremental cache) kept only where the mode wants them, the run has a cache and no
/// `--no-incremental`; whole compiled modules for every run with a cache.
pub fn engine_for(
    mode: &dyn RunMode,
    settings: &RunSettings,
    timings: &mut Timings,
) -> Result<wasmtime::Engine, Failure> {
    let keeps_functions = mode.keeps_compiled_functions(settings)
        && settings.cache_dir.is_some()
        && settings.incremental;
    Ok(timings.time("engine", || match keeps_functions {
        true => crate::prepare::compiled::new_engine_caching(),
        false => crate::run::engine::new_engine(),
    })?)
}
