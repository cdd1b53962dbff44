//! wasmtime-wasi's own preview 1 functions, called by the functions wprof puts in their
//! place for threaded programs ([`super::locked`], [`super::sleep`], [`super::stdin`]) with
//! the store's context and the program's memory, as wasmtime-wasi's synchronous bindings
//! call them.

use wasmtime::{Caller, Extern, Linker};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::HoldsWasi;

/// WASI preview 1's module.
pub(super) const MODULE: &str = "wasi_snapshot_preview1";

/// Defines in `linker` (WASI already in it) the functions `define` puts in place of
/// wasmtime-wasi's.
pub(super) fn replace<T>(
    linker: &mut Linker<T>,
    define: impl FnOnce(&mut Linker<T>) -> wasmtime::Result<()>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = define(linker);
    linker.allow_shadowing(false);
    defined
}

/// Calls `call` with the calling thread's context, taken for the call and given back when
/// it returns, and the memory the program exports. As the bindings do, the context is
/// first given the store's allowance of bytes a call may copy (wasmtime-wasi's "hostcall
/// fuel"): without it, every call that copies an array (the iovecs of a read, the
/// subscriptions of a poll) fails with `ENOMEM`.
pub(super) fn call<T: HoldsWasi, R>(
    caller: &mut Caller<'_, T>,
    call: impl FnOnce(&mut WasiP1Ctx, &mut wiggle::GuestMemory<'_>) -> wasmtime::Result<R>,
) -> wasmtime::Result<R> {
    use wasmtime::AsContextMut;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1;
    let fuel = caller.as_context_mut().hostcall_fuel();
    let result = match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => {
            let (bytes, state) = memory.data_and_store_mut(&mut *caller);
            let ctx = state.wasi().ctx();
            ctx.set_hostcall_fuel(fuel);
            call(ctx, &mut wiggle::GuestMemory::Unshared(bytes))
        }
        Some(Extern::SharedMemory(memory)) => {
            let ctx = caller.data_mut().wasi().ctx();
            ctx.set_hostcall_fuel(fuel);
            call(ctx, &mut wiggle::GuestMemory::Shared(memory.data()))
        }
        _ => Err(wasmtime::format_err!("missing required memory export")),
    };
    caller.data_mut().wasi().returned_to_wasm();
    result
}
