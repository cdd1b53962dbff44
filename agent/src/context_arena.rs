//! The calling-context tree the inline modes keep in the module's own memory: its layout,
//! which the agent's probes write and the host reads.

/// In the inline modes ([`crate::ProbeMode::counts_inline`]) the module keeps its own
/// calling-context tree in a memory the agent adds; the host reads it when the program ends.
///
/// A node is 40 bytes and a slot per call site of its function, 8-byte aligned:
///
/// | offset | field |
/// |---|---|
/// | 0 | `u64` activations |
/// | 8 | `u64` self cost (cost mode: instructions) |
/// | 16 | `u32` function id + 1 (0 in the root and in the empty node at address 0); adaptive mode: [`ContextArena::TIMED`] set while the host times it |
/// | 20 | `u32` next node reached through the same slot (another callee), or 0 |
/// | 24 | `u32` number of slots |
/// | 28 | `u32` adaptive mode: the host's count of timed activations left (see [`ContextArena::TIMER`]) |
/// | 32 | `u32` Go modules: the parent node (see [`ContextArena::go_table`]), else 0 |
/// | 40 + 4k | `u32` slot k: the first child reached from call site k, or 0 |
///
/// Slots are numbered in body order of the `call*` and `return_call*` instructions,
/// imports included: with [`crate::ProbePlan::call_sites`] one per call instruction, else one
/// per directly called function (all the sites that call it share it) and one per indirect
/// call site. Before each call the caller puts the address of the call's slot in
/// the global exported as [`ContextArena::SLOT`]; the callee's entry probe follows that
/// slot to its node (a load and a compare; on a miss, the same with the node after it), or
/// calls an added function that finds the node
/// among the slot's chain or allocates it. A direct call to an import looks up the import's
/// node the same way at the call site. The host resets the slot to
/// [`ContextArena::ROOT_SLOT`] before it calls an export.
///
/// Nodes are never collapsed: recursion makes a path as deep as the recursion; but a
/// function's tail calls to itself (a `return_call` loop) count, after the first, in the
/// node of the first: a loop of them is two nodes, not one per iteration. Past
/// [`ContextArena::LIMIT`] bytes new contexts stop being allocated: each function then
/// gets one overflow node (address in the table at [`ContextArena::OVERFLOW_TABLE`]), so
/// counts stay exact while contexts are lost.
#[derive(Debug, Clone, Copy)]
pub struct ContextArena;

impl ContextArena {
    /// Export name of the tree's memory.
    pub const MEMORY: &'static str = "wprof:contexts";
    /// Export name of the `i32` global holding the address of the slot the next entry
    /// follows.
    pub const SLOT: &'static str = "wprof:slot";
    /// Export name of the `i32` global holding the first free byte of the tree's memory.
    pub const END: &'static str = "wprof:contexts_end";
    /// Sample mode: the address of the `u32` holding the address of the node running now
    /// (an import's node while the import runs; in cost mode too, where the cell holds an
    /// import's node during the calls the probes bracket and 0 otherwise), inside the empty
    /// node at address 0. A
    /// function without probes stores the address of the slot it was reached through
    /// instead (inside its caller's node), and so does, at exit, a function with live
    /// probes (its caller runs again).
    pub const CURRENT: u32 = 8;
    /// Sample and cost mode: the `u32` (the empty node's slot count, which nothing reads)
    /// where a retry function leaves the node it found, and where the slot global then
    /// points. A function that calls nothing does not call the node finder itself (the
    /// call alone would make every activation save and restore registers): past its two
    /// looks it tail-calls its retry function, one the agent appends per such function
    /// with the same type, which calls the finder, stores the node here, points the slot
    /// global here and tail-calls the function again, whose first look finds the node
    /// (the function's overflow node as well, which no slot holds). A leaf's node has no
    /// slots, and the caller points the slot global at its own slot before every call, so
    /// nothing else follows this one. The module says how many functions the agent
    /// appended in the name of a second export of the tree's memory,
    /// [`ContextArena::ADDED`] followed by the count in decimal.
    pub const RETRY: u32 = 24;
    /// Sample and adaptive mode with a [`crate::StateCapture`]: the `u32` (the empty node's
    /// activation count, which nothing counts) where the captured function's entries
    /// store its parameter.
    pub const CAPTURED: u32 = 0;
    /// See [`ContextArena::RETRY`].
    pub const ADDED: &'static str = "wprof:added=";
    /// Address of the root node (the engine calling an export).
    pub const ROOT: u32 = 32;
    /// Address of the root's only slot.
    pub const ROOT_SLOT: u32 = Self::ROOT + Self::SLOTS;
    /// Address of the overflow table: one `u32` node address per function id.
    pub const OVERFLOW_TABLE: u32 = Self::ROOT_SLOT + 8;
    /// Bytes of nodes allocated before contexts overflow.
    pub const LIMIT: u32 = 256 << 20;
    /// Offset of a node's activation count.
    pub const CALLS: u32 = 0;
    /// Offset of a node's self cost.
    pub const SELF_COST: u32 = 8;
    /// Offset of a node's function id + 1.
    pub const FUNCTION: u32 = 16;
    /// Offset of a node's next sibling through the same slot.
    pub const NEXT: u32 = 20;
    /// Offset of a node's number of slots.
    pub const SLOT_COUNT: u32 = 24;
    /// Go modules: offset of a node's parent (its caller's node, in Go's terms: resumed
    /// frames hang under their real callers).
    pub const PARENT: u32 = 32;
    /// Offset of a node's first slot.
    pub const SLOTS: u32 = 40;
    /// In [`crate::ProbeMode::Adaptive`], the bit of a node's function field that says its
    /// activations are timed (the host sets and clears it while the program runs).
    ///
    /// An armed node fails the entry probe's quick test (its field is not the function's
    /// id + 1), so its activations take the slow path: the node finder, which matches a
    /// node whatever this bit and returns its address with bit 0 set when the bit is set
    /// (nodes are 8-aligned). Only adaptive mode's entry probe looks at that bit: it
    /// clears it and, when it was set, calls the host's `enter_catching(node)` and keeps the
    /// token returned in a local; every way out of the activation (its exits, and its tail
    /// calls, which end it before the callee runs) calls `exit(token)` when the token is not
    /// 0. So an activation is timed from entry to exit or not at all, whenever the bit
    /// changes, and an untimed activation pays nothing at entry and a test of a local at
    /// each exit. A frame an exception unwinds never calls `exit`; the host closes it when
    /// an outer timed frame exits.
    pub const TIMED: u32 = 1 << 31;
    /// Offset of the host's count of timed activations left in an armed node (adaptive
    /// mode; the module never reads it).
    pub const TIMER: u32 = 28;

    /// Where the switch table (see [`crate::SwitchTable`]) lies in the tree's memory, in a module
    /// with `functions` functions: after the overflow table, one byte per function.
    pub fn switches(functions: u32) -> u32 {
        Self::OVERFLOW_TABLE + 4 * functions
    }

    /// Go modules: where the goroutine table lies, after the switches: [`Self::GO_SLOTS`]
    /// pairs of `u32`s, `(g, node)`, `g` being the address of a goroutine's `g` and `node`
    /// its innermost frame's node when it last stopped running, at slot `hash(g)`.
    ///
    /// Go switches goroutines by unwinding the whole wasm stack (every function returns
    /// one) and later calls each frame of the goroutine it resumes again, innermost first,
    /// with `PC_B` (its only parameter) saying where to go on; a frame interrupted by
    /// `morestack` starts over at `PC_B` 0. A Go function's entry probe tells those
    /// re-entries from calls: on a change of `g` (Go's global 2) it files the node the
    /// last goroutine stopped in and takes the new goroutine's; an entry with `PC_B` != 0,
    /// or with 0 just after `morestack` stopped the goroutine, is a re-entry, and finds
    /// its node among the ancestors (through [`Self::PARENT`]) of that node, or of the
    /// node its resumed callee left when it returned, without counting a call. Every exit
    /// that returns leaves its parent as the node the goroutine is in; an unwinding one
    /// leaves the node where the goroutine stopped.
    pub fn go_table(functions: u32) -> u32 {
        (Self::switches(functions) + functions + 7) & !7
    }

    /// Entries in the goroutine table (a power of two).
    pub const GO_SLOTS: u32 = 1 << 14;

    /// With [`crate::ProbePlan::coverage`]: where the block counters lie, in a module with
    /// `functions` functions: after the goroutine table's place (kept in every module, so
    /// that the host finds the counters from the number of functions alone), one `u64`
    /// each. Counter `k` of the module is the `k`-th block with a counter in the order of
    /// the functions' [`crate::InstrumentedBody::blocks`]. The counters live in the tree's
    /// memory, which the host reads however the program ended (a trap, an exit, a component
    /// whose instance no longer runs anything).
    pub fn counters(functions: u32) -> u32 {
        Self::go_table(functions) + 8 * Self::GO_SLOTS
    }

    /// The first byte nodes are allocated from, in a module with `functions` functions and
    /// `counters` block counters: after them.
    pub fn first_free(functions: u32, counters: u32) -> u32 {
        Self::counters(functions) + 8 * counters
    }

    /// The most block counters a module may have (7.2 MB of the tree's memory).
    pub const MAX_COUNTERS: u32 = 900_000;
}
