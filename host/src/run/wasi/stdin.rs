//! `fd_read` of stdin for a threaded program, whose threads share one WASI context (see
//! [`super::shared`]): a thread waiting for input does not hold the context while it waits.
//!
//! wasmtime-wasi reads the process's stdin on a worker thread of its own, into one buffer
//! that every handle on stdin shares. A read of descriptor 0 first waits here, without the
//! context, until that buffer holds data (or stdin ended); the read itself is then
//! wasmtime-wasi's, made with the context held, and finds the data there at once. Two
//! threads reading stdin at the same moment may still see one of them take the other's
//! data, and the other wait with the context held: the same race as on any shared stdin.
//! Once the program closed or renumbered descriptor 0 (see [`super::stdio`]), every read
//! of it is wasmtime-wasi's alone.

use wasmtime::{Caller, Linker};

use super::real::MODULE;
use super::HoldsWasi;

/// Replaces the linker's `fd_read` (the linker of a threaded program's stores, WASI already
/// in it).
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    super::real::replace(linker, |linker| {
        linker.func_wrap(MODULE, "fd_read", fd_read::<T>)?;
        Ok(())
    })
}

fn fd_read<T: HoldsWasi>(
    mut caller: Caller<'_, T>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nread: i32,
) -> wasmtime::Result<i32> {
    if fd == 0 && iovs_len > 0 && caller.data_mut().wasi().is_process_stdio(0) {
        wait_for_stdin();
    }
    super::real::call(&mut caller, |ctx, memory| {
        use wasmtime_wasi::p1::wasi_snapshot_preview1::fd_read;
        wasmtime_wasi::runtime::in_tokio(fd_read(ctx, memory, fd, iovs, iovs_len, nread))
    })
}

/// Waits until the process's stdin, as wasmtime-wasi reads it, holds data or has ended.
fn wait_for_stdin() {
    wait_for_stdin_within(None);
}

/// Waits until the process's stdin, as wasmtime-wasi reads it, holds data or has ended,
/// for at most `timeout` (without one, as long as it takes): whether it did.
pub(super) fn wait_for_stdin_within(timeout: Option<std::time::Duration>) -> bool {
    use wasmtime_wasi::cli::StdinStream;
    use wasmtime_wasi::p2::Pollable;
    let mut stdin = StdinStream::p2_stream(&tokio::io::stdin());
    wasmtime_wasi::runtime::in_tokio(async {
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, stdin.ready()).await.is_ok(),
            None => {
                stdin.ready().await;
                true
            }
        }
    })
}
