//! Coverage of a component's core modules (`wprof run --coverage`): each instrumented
//! module counts its blocks in its tree memory, as a module does (see
//! [`crate::run::inline::coverage`]). wprof made those memories (see
//! [`crate::run::component::memory`]), so it reads the counts when the program has ended,
//! however it ended: after a trap or `exit` wasmtime runs nothing in the component any
//! more, but its memories are still there.

use std::sync::atomic::Ordering;

use crate::profile::coverage::Coverage;
use crate::run::component::memory::MadeMemory;

/// One instrumented module's coverage: its block map, and its number of functions (which
/// says where its counters are).
#[derive(Debug, Clone)]
pub struct ModuleCoverage {
    /// The block map it was instrumented with, in the component's terms (see
    /// [`in_component`]).
    pub map: Coverage,
    /// Its functions, imports included.
    pub functions: u32,
}

/// The counts of `module`'s blocks, read from its tree `memory`.
pub fn read(module: &ModuleCoverage, memory: &MadeMemory) -> Result<Coverage, String> {
    let size = memory.size.load(Ordering::Acquire);
    // SAFETY: the memory stays where it is while the store lives, which it does while the
    // run reads it, and its first `size` bytes are accessible; nothing runs in it any more.
    let tree = unsafe { std::slice::from_raw_parts(memory.base as *const u8, size) };
    let counts = crate::run::inline::coverage::in_memory(tree, module.functions, &module.map)?;
    crate::run::inline::coverage::assign(module.map.clone(), &counts)
        .ok_or_else(|| "the counters do not match the block map".to_string())
}

/// Every counting module's coverage as one record, once the program has ended; `None`
/// (with one warning) if one could not be read.
pub fn at_end<'a>(
    modules: impl IntoIterator<Item = (&'a ModuleCoverage, &'a MadeMemory)>,
) -> Option<Coverage> {
    let read: Result<Vec<Coverage>, String> = modules
        .into_iter()
        .map(|(coverage, memory)| read(coverage, memory))
        .collect();
    match read {
        Ok(modules) if modules.is_empty() => None,
        Ok(modules) => Some(merged(modules)),
        Err(e) => {
            crate::say!("wprof: warning: coverage not recorded: {e}");
            None
        }
    }
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
