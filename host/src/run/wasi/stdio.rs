//! Which of a threaded program's descriptors 0, 1 and 2 are still the process's stdin,
//! stdout and stderr (see [`super::shared`]): those are read ([`super::stdin`]) and written
//! ([`super::stdout`]) without holding the shared context while they wait.
//!
//! WASI has no `dup`: a descriptor stops being the process's stdio only when the program
//! closes it or renumbers another onto it (or it onto another). `fd_close` and
//! `fd_renumber` are watched for that, then made by wasmtime-wasi as always; from then on
//! every call on the descriptor is wasmtime-wasi's alone.

use wasmtime::{Caller, Linker};

use super::real::MODULE;
use super::HoldsWasi;

/// Replaces the linker's `fd_close` and `fd_renumber` (the linker of a threaded program's
/// stores, WASI already in it).
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    super::real::replace(linker, define)
}

fn define<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "fd_close",
        |mut caller: Caller<'_, T>, fd: i32| -> wasmtime::Result<i32> {
            caller.data_mut().wasi().stdio_moved(fd);
            super::real::call(&mut caller, |ctx, memory| {
                use wasmtime_wasi::p1::wasi_snapshot_preview1::fd_close;
                wasmtime_wasi::runtime::in_tokio(fd_close(ctx, memory, fd))
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_renumber",
        |mut caller: Caller<'_, T>, from: i32, to: i32| -> wasmtime::Result<i32> {
            let wasi = caller.data_mut().wasi();
            wasi.stdio_moved(from);
            wasi.stdio_moved(to);
            super::real::call(&mut caller, |ctx, memory| {
                use wasmtime_wasi::p1::wasi_snapshot_preview1::fd_renumber;
                wasmtime_wasi::runtime::in_tokio(fd_renumber(ctx, memory, from, to))
            })
        },
    )?;
    Ok(())
}
