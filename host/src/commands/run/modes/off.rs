//! `WPROF=0`: the original module as wasmtime would run it, its compiled code cached;
//! nothing instrumented, nothing measured but what `--inject` names. Also what a profiled
//! mode runs when it cannot instrument (see [`compile_original`]).

use wasmtime::Module;

use super::{Job, RunMode};
use crate::exit::Failure;
use crate::prepare::loader::{self, LoadedModule};
use crate::prepare::session::CacheSession;
use crate::profile::Profile;
use crate::run::runner::{self, RunOutcome, Stdio};
use crate::settings::RunSettings;

/// Profiling off.
#[derive(Debug)]
pub struct Off;

impl RunMode for Off {
    fn keeps_compiled_functions(&self, _: &RunSettings) -> bool {
        false
    }

    fn prepare(&mut self, job: &mut Job) -> Result<Module, Failure> {
        job.progress.step("compiling", None);
        let module = job.timings.time("compile", || {
            compile_original(&job.engine, &job.loaded, &job.settings, &mut job.cache)
        })?;
        job.progress.finish();
        Ok(module)
    }

    fn run(&mut self, job: &mut Job, module: &Module) -> Result<RunOutcome, Failure> {
        runner::run(&job.engine, module, &job.settings, Stdio::Inherit, None)
    }

    fn profile(
        &mut self,
        _: &mut Job,
        _: &mut RunOutcome,
        _: &mut super::groundwork::Groundwork,
    ) -> Option<Profile> {
        None
    }

    fn summarize(&mut self, _: &mut Job, _: &Profile, _: bool) {}
}

/// Compiles the original module (which validates it) through the cache of compiled
/// artifacts, as `WPROF=0` and a run whose instrumentation failed both run it: a module
/// that does not validate is the loader's one-line failure, any other compile error one
/// line of its own.
pub fn compile_original(
    engine: &wasmtime::Engine,
    loaded: &LoadedModule,
    settings: &RunSettings,
    cache: &mut CacheSession,
) -> Result<Module, Failure> {
    crate::prepare::compile::compile_bytes(
        engine,
        || Ok(&loaded.bytes),
        &loaded.digest,
        cache,
        None,
    )
    .map(|compiled| compiled.module)
    .map_err(|e| {
        if let Err(invalid) = loader::validate(loaded, &settings.module, engine) {
            return invalid;
        }
        Failure::input(format!(
            "cannot compile {}: {}",
            settings.module.display(),
            e.to_string().lines().next().unwrap_or_default()
        ))
    })
}
