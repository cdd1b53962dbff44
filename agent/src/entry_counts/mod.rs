//! Entry and edge counters: the module as it is, but with the calls of its functions and
//! of its edges counted by the module itself. Stack mode's exact calls per function and per
//! caller -> callee edge, for a load, an add and a store per call (measured on recursive
//! fib(38): 1.06x its plain time with entry counters alone).
//!
//! - Each call site adds one to its edge's counter before it calls, and a call through a
//!   table or a reference is counted at its callee's entry (see [`edges`]).
//! - A function that is entered otherwise too (an export, the start function, a Go
//!   function, one whose indirect callers can only go to the table of pairs) keeps an entry
//!   counter: its first instructions add one to a mutable `i64` global of its own, exported
//!   as [`EXPORT_PREFIX`] followed by the function's id. Any other function's calls are the
//!   sum of its edges'.
//!
//! Nothing else changes: no import is added, and every function keeps its index (an added
//! function, `arc`, comes after them), so the compiled module's code is the original's but
//! for the counters' instructions. Bodies are copied byte for byte around them, and every
//! other section as it is (the type, function, memory, global, export, data count and data
//! sections gain entries at their ends, or are added where the format wants them). A thread
//! instantiating the module again counts in its own instance's globals and memory.
//!
//! A Go module re-enters a goroutine's frames when it resumes it (see
//! [`crate::ContextArena::go_table`]): a function with Go's calling convention adds one only
//! when its resume point (`PC_B`, local 0) is 0, a call rather than a resumption, and takes
//! it back when it calls `runtime.morestack`, after which it starts over at 0. The
//! counts are then those of the inline modes, whose probes follow the goroutines.

use crate::layout::ModuleLayout;
use crate::AgentError;

mod bodies;
mod edges;
mod offsets;
mod sections;

pub use edges::{EdgeCounts, EdgeTable, EDGES_MEMORY, FUNCTIONS_PREFIX};
pub use offsets::CounterOffsets;

/// The exported counters' names: this prefix and the function's id in decimal.
pub const EXPORT_PREFIX: &str = "wprof:calls:";

/// Version of what [`count_entries`] writes: part of the key its compiled code is cached
/// under.
pub const VERSION: u32 = 7;

/// A module with entry counters, and where its code came from.
#[derive(Debug)]
pub struct CountedModule {
    /// The module's bytes.
    pub bytes: Vec<u8>,
    /// Where the counters' instructions are, to tell offsets in the original's terms.
    pub offsets: CounterOffsets,
    /// The captures made (those asked for that fit the module).
    pub captured: Vec<Capture>,
}

/// The memory a counted module with captures defines and exports under this name: one
/// page, whose `u32` at `4 * slot` holds each capture's last value (see [`Capture`]).
pub const CAPTURE_MEMORY: &str = "wprof:captures";

/// A parameter kept at each entry of a function: the first instructions of function
/// `function` (an id) also store its `i32` parameter `param` at `4 * slot` in
/// [`CAPTURE_MEMORY`], where the host reads it while the program runs (an interpreter's
/// eval loop, whose first parameter is the state a frame reader starts from). Each thread's
/// instance has its own memory, so each thread its own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capture {
    /// The function, by id (imports counted).
    pub function: u32,
    /// Its parameter kept, an `i32`.
    pub param: u32,
    /// Where it is kept: the `u32` at `4 * slot`.
    pub slot: u32,
}

/// Slots of [`CAPTURE_MEMORY`] (its one page, 4 bytes each).
pub const CAPTURE_SLOTS: u32 = 16384;

/// `module` with an entry counter in every defined function (see the module docs).
pub fn count_entries(module: &[u8]) -> Result<CountedModule, AgentError> {
    count_entries_capturing(module, &[])
}

/// `module` with an entry counter in every defined function and the `captures` that fit it
/// (a defined function, an `i32` parameter, a slot in the page); with none that fit, the
/// module adds no memory.
pub fn count_entries_capturing(
    module: &[u8],
    captures: &[Capture],
) -> Result<CountedModule, AgentError> {
    let layout = ModuleLayout::parse(module)?;
    let captured: Vec<Capture> = captures
        .iter()
        .copied()
        .filter(|c| {
            c.slot < CAPTURE_SLOTS
                && c.function
                    .checked_sub(layout.imported_funcs.len() as u32)
                    .and_then(|d| layout.defined_funcs.get(d as usize))
                    .is_some_and(|f| {
                        layout.signature(f.type_index).params.get(c.param as usize)
                            == Some(&wasmparser::ValType::I32)
                    })
        })
        .collect();
    let plan = edges::EdgePlan::of(&layout)?;
    let imports = layout.imported_funcs.len() as u32;
    let defined = layout.defined_funcs.len() as u32;
    let first_global = layout.globals;
    // The capture memory's index: after every memory of the module's; the edges' memory
    // after it.
    let capture_memory = (!captured.is_empty()).then_some(layout.memories);
    let counters = plan.counted.iter().filter(|&&c| c).count() as u32;
    let edge_indices = edges::EdgeIndices {
        memory: layout.memories + u32::from(capture_memory.is_some()),
        from: first_global + counters,
        arc: imports + defined,
        restart: (layout.go && plan.counts_indirect()).then_some(first_global + counters + 1),
    };
    let added = sections::Additions {
        layout: &layout,
        plan: &plan,
        edges: edge_indices,
        capture_memory,
        captured: &captured,
    };
    let (bytes, offsets) = sections::write(module, &added)?;
    Ok(CountedModule {
        bytes,
        offsets,
        captured,
    })
}

#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod tests;
