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
//!
//! Every WASI call of wasmtime-wasi's synchronous bindings blocks on a tokio runtime. With
//! none entered on the thread, each call enters wasmtime-wasi's own and yields to it once
//! before running (`in_tokio`): about 130 ns a call here, half of what a `fd_write` to
//! `/dev/null` costs in all. A thread that runs the program enters wprof's runtime for as
//! long as it runs ([`enter_runtime`]), and its calls are polled at once, as the wasmtime
//! CLI's (asynchronous) bindings poll them.

use std::sync::OnceLock;

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

/// wprof's runtime, made at the first program run: one worker thread, which drives timers
/// (`poll_oneoff`) and sockets' readiness while a program's thread waits for them; `None`
/// where it cannot be made (the calls then use wasmtime-wasi's own, as before).
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("wprof-wasi")
                .enable_all()
                .build()
                .map_err(|e| tracing::debug!(%e, "no runtime for WASI's calls"))
                .ok()
        })
        .as_ref()
}

/// Makes wprof's runtime the calling thread's own until the guard is dropped: called by a
/// thread before it runs the program (its first thread, each spawned one, a component).
pub(crate) fn enter_runtime() -> Option<tokio::runtime::EnterGuard<'static>> {
    runtime().map(tokio::runtime::Runtime::enter)
}
