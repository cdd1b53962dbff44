//! The WASI context a thread of the program runs with: its arguments, environment,
//! preopened directories and stdio, from the run's settings (the program's first thread and
//! every thread it spawns get one each).
//!
//! Its blocking calls (a file read or write, opening a file, listing a folder, a relative
//! `poll_oneoff` sleep) run on the calling thread, as the wasmtime CLI runs them: without
//! that, wasmtime-wasi hands each one to a thread of its blocking pool and waits for the
//! answer, two thread switches per call (SQLite on a database file made 769,109 `futex`
//! calls under `WPROF=0 wprof run` against 19 under the CLI, and took 2.76x its time).
//! Made on the program's own thread, a call's CPU time is that thread's, so stack mode's
//! ticks and the host-call meters of the other modes see it where the program spent it.

use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::WasiCtxBuilder;

use crate::exit::Failure;
use crate::settings::RunSettings;

/// Where the program's stdio goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio {
    /// This process's stdin, stdout and stderr (what `wprof run` does).
    Inherit,
    /// Empty stdin; output discarded (benchmarks).
    Discard,
}

/// A WASI context for a thread of the program `settings` runs.
pub(crate) fn wasi_context(settings: &RunSettings, stdio: Stdio) -> Result<WasiP1Ctx, Failure> {
    Ok(wasi_builder(settings, stdio)?.build_p1())
}

/// The WASI settings of the program `settings` runs: built for preview 1 by
/// [`wasi_context`], for a component (WASI 0.2) by [`crate::run::component`].
pub(crate) fn wasi_builder(
    settings: &RunSettings,
    stdio: Stdio,
) -> Result<WasiCtxBuilder, Failure> {
    let mut builder = WasiCtxBuilder::new();
    // wprof sets no deadline on the program (nothing needs to interrupt a blocked call),
    // which is when the CLI blocks its own thread too.
    builder.allow_blocking_current_thread(true);
    if stdio == Stdio::Inherit {
        builder.inherit_stdio();
    }
    let mut argv = vec![settings.module.display().to_string()];
    argv.extend(settings.args.iter().cloned());
    builder.args(&argv);
    builder.envs(&settings.env);
    for dir in &settings.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, wasmtime_wasi::FsPerms::ReadWrite)
            .map_err(|e| {
                Failure::input(format!("cannot open --dir {}: {e}", dir.host.display()))
            })?;
    }
    Ok(builder)
}
