//! WASI preview 1 for a module's run: the context its threads run with, made from the
//! run's settings ([`context`]); in a threaded program one context for all its threads
//! ([`shared`]), which its sleeps ([`sleep`]), waits for stdin ([`stdin`]) and writes to
//! stdout and stderr ([`stdout`]) do not hold while they wait, as long as descriptors 0 to
//! 2 are the process's ([`stdio`]), all calling wasmtime-wasi's own functions when they
//! must ([`real`]); the host's accesses to a shared memory ([`memory`]).

pub mod context;
mod locked;
pub(crate) mod memory;
mod real;
pub(crate) mod shared;
mod sleep;
mod stdin;
mod stdio;
mod stdout;

use wasmtime::Linker;

use crate::exit::Failure;

pub(crate) use shared::{SharedWasi, Wasi};

/// A store's state that holds a thread's [`Wasi`] (the run's `HostState`).
pub(crate) trait HoldsWasi: Send + 'static {
    fn wasi(&mut self) -> &mut Wasi;
}

/// Links WASI preview 1 into a linker of the program's stores, reaching each store's
/// context through [`Wasi::ctx`]; `threaded`: each function taking the shared context
/// for the call alone ([`locked`]), with the sleeps of [`sleep`], the reads of [`stdin`]
/// and the writes of [`stdout`].
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>, threaded: bool) -> Result<(), Failure> {
    let linked = wasmtime_wasi::p1::add_to_linker_sync(linker, |s: &mut T| s.wasi().ctx())
        .and_then(|()| match threaded {
            true => locked::link(linker)
                .and_then(|()| sleep::link(linker))
                .and_then(|()| stdin::link(linker))
                .and_then(|()| stdout::link(linker))
                .and_then(|()| stdio::link(linker)),
            false => Ok(()),
        });
    linked.map_err(|e| Failure::input(format!("cannot link WASI: {e}")))
}

/// `--unknown-imports-trap` (`trap`): the imports of `module` that nothing in `linker`
/// defines, neither WASI nor wprof, are linked to functions that trap when called. Called
/// after everything else is defined.
pub(crate) fn link_unknown_as_traps<T: 'static>(
    linker: &mut Linker<T>,
    module: &wasmtime::Module,
    trap: bool,
) -> Result<(), Failure> {
    if !trap {
        return Ok(());
    }
    linker
        .define_unknown_imports_as_traps(module)
        .map_err(|e| Failure::input(format!("cannot link the unknown imports to traps: {e}")))
}
