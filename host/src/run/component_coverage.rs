//! Coverage of a component's core modules (`wprof run --coverage`): each instrumented
//! module counts its blocks in globals, as a module does (see [`crate::run::coverage`]),
//! and its dump functions copy them into its tree memory. A component's core exports are
//! out of the host's reach, so the rewrite exports the dump functions lifted (see
//! [`crate::components::lift`]); wasmtime lets no export of a component run after a trap
//! or an exit, so they are called when `run` returns, or from within `wasi:cli/exit`'s
//! `exit` before it ends the program ([`crate::run::component`]).
//!
//! The dumps write into the tree memory's last bytes, which are put back afterwards: the
//! tree is read after the program ends, and sample mode's timer may read the cell at any
//! moment until then.

use std::sync::atomic::Ordering;

use wasmtime::component::{Instance, Linker};
use wasmtime::{AsContextMut, Store, StoreContextMut};
use wprof_agent::ContextArena;

use crate::components::lift::lifted_export_name;
use crate::profile::coverage::Coverage;
use crate::run::component_memory::MadeMemory;

/// The interface of `exit`, as wasmtime-wasi defines it (its version included: the
/// function defined here takes its place).
const EXIT_INTERFACE: &str = "wasi:cli/exit@0.2.12";

/// What is read when the program ends: the component's instance, each module's coverage
/// with its tree memory, and once read, the coverage or why it could not be read.
pub struct AtExit {
    instance: Instance,
    modules: Vec<(ModuleCoverage, MadeMemory)>,
    read: Option<Result<Coverage, String>>,
}

impl std::fmt::Debug for AtExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtExit")
            .field("modules", &self.modules.len())
            .finish_non_exhaustive()
    }
}

/// A store's data that keeps what is read when the program ends.
pub trait KeepsCoverage: 'static {
    /// Where it keeps it.
    fn at_exit(&mut self) -> &mut Option<AtExit>;
}

impl AtExit {
    /// For `instance`, whose modules that count blocks are `modules`, each with its tree
    /// memory; `None` if there are none.
    pub fn new(instance: Instance, modules: Vec<(ModuleCoverage, MadeMemory)>) -> Option<Self> {
        (!modules.is_empty()).then_some(AtExit {
            instance,
            modules,
            read: None,
        })
    }
}

/// Reads the coverage of the store's instance, unless it was read already.
fn read_once<T: KeepsCoverage>(mut store: StoreContextMut<'_, T>) {
    let Some(mut at) = store.data_mut().at_exit().take() else {
        return;
    };
    if at.read.is_none() {
        let read: Result<Vec<Coverage>, String> = at
            .modules
            .iter()
            .map(|(coverage, memory)| read(&mut store, &at.instance, coverage, memory))
            .collect();
        at.read = Some(read.map(merged));
    }
    *store.data_mut().at_exit() = Some(at);
}

/// Defines `wasi:cli/exit`'s `exit` in `linker` in place of wasmtime-wasi's: it reads the
/// coverage, then ends the program as that one does (exit code 0 or 1). After `exit`,
/// as after a trap, wasmtime lets nothing in the component run.
pub fn read_at_exit<T: KeepsCoverage>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.instance(EXIT_INTERFACE)?.func_wrap(
        "exit",
        |mut store: StoreContextMut<'_, T>, (status,): (Result<(), ()>,)| {
            read_once(store.as_context_mut());
            let code = if status.is_ok() { 0 } else { 1 };
            wasmtime::Result::<()>::Err(wasmtime::Error::new(wasmtime_wasi::I32Exit(code)))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Once the program has ended (`trapped`: by a trap): the coverage, read now if `exit`
/// did not; `None` (with one warning) if it could not be read, as after a trap.
pub fn at_end<T: KeepsCoverage>(store: &mut Store<T>, trapped: bool) -> Option<Coverage> {
    let unread = store
        .data_mut()
        .at_exit()
        .as_ref()
        .is_some_and(|at| at.read.is_none());
    if trapped && unread {
        *store.data_mut().at_exit() = None;
        crate::say!(
            "wprof: warning: coverage not recorded: the component trapped, and wasmtime \
             runs none of its functions after a trap"
        );
        return None;
    }
    read_once(store.as_context_mut());
    match store.data_mut().at_exit().take()?.read? {
        Ok(coverage) => Some(coverage),
        Err(e) => {
            crate::say!("wprof: warning: coverage not recorded: {e}");
            None
        }
    }
}

/// One instrumented module's coverage: its block map, and where its dumps are.
#[derive(Debug, Clone)]
pub struct ModuleCoverage {
    /// The block map it was instrumented with, in the component's terms (see
    /// [`in_component`]).
    pub map: Coverage,
    /// Its replacement's index in the rewrite (see [`lifted_export_name`]).
    pub replacement: usize,
}

/// The counts of `module`'s blocks, read through its lifted dump functions into the end of
/// its tree `memory`.
pub fn read(
    mut store: impl AsContextMut,
    instance: &Instance,
    module: &ModuleCoverage,
    memory: &MadeMemory,
) -> Result<Coverage, String> {
    let total = crate::run::coverage::counters(&module.map) as usize;
    // Dump function `c` stores counter `k` (counted over the module) at `at + 8k`: the
    // counters go to the memory's last `8 * total` bytes.
    let size = memory.size.load(Ordering::Acquire);
    let at = size.checked_sub(8 * total).ok_or_else(|| {
        format!("its {total} counters do not fit in the tree memory ({size} bytes)",)
    })? & !7;
    // SAFETY: the memory stays where it is while the store lives, `at..at + 8 * total`
    // lies within its accessible size, and no wasm runs but the dumps, which write
    // exactly those bytes.
    let tail = unsafe { std::slice::from_raw_parts_mut((memory.base + at) as *mut u8, 8 * total) };
    let kept = tail.to_vec();
    let mut called = Ok(());
    for c in 0..total.div_ceil(ContextArena::CHUNK as usize) {
        let name = lifted_export_name(module.replacement, c);
        called = instance
            .get_typed_func::<(u32,), ()>(&mut store, &name)
            .and_then(|dump| dump.call(&mut store, (at as u32,)))
            .map_err(|e| format!("{name}: {}", e.root_cause()));
        if called.is_err() {
            break;
        }
    }
    let counters: Vec<u64> = tail
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    tail.copy_from_slice(&kept);
    called?;
    crate::run::coverage::assign(module.map.clone(), &counters)
        .ok_or_else(|| "the counters do not match the block map".to_string())
}

/// `map`, a module's block map, in the component's terms: ids moved by `offset` (the
/// module's function 0 in the component's id space), names as `name` gives them, bodies
/// as byte ranges of the component file (`start`: where the module's bytes begin in it).
pub fn in_component(
    mut map: Coverage,
    offset: u32,
    start: u32,
    name: impl Fn(&str) -> String,
) -> Coverage {
    for f in &mut map.functions {
        f.id += offset;
        f.name = name(&f.name);
        f.body = (f.body.0 + start, f.body.1 + start);
    }
    map
}

/// The modules' coverage as one record, in id order.
pub fn merged(modules: impl IntoIterator<Item = Coverage>) -> Coverage {
    let mut out = Coverage::default();
    for coverage in modules {
        out.functions.extend(coverage.functions);
    }
    out.functions.sort_by_key(|f| f.id);
    out
}
