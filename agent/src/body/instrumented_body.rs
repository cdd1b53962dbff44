//! What rewriting a body gives: its bytes, where each original instruction went, which of
//! its bytes are probes, and, with coverage or in the inline modes, the places the
//! assembler fills in.

use super::blocks::BlockCount;

/// One instrumented function body, independent of where it lands in a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstrumentedBody {
    /// The body's bytes (locals and code, without the size prefix). With live probes (see
    /// [`crate::SwitchTable`]), two bodies one after the other: the function's own, then,
    /// from [`InstrumentedBody::probed_at`], its probed copy's.
    pub bytes: Vec<u8>,
    /// With live probes, where the probed copy's body starts in
    /// [`InstrumentedBody::bytes`].
    pub probed_at: Option<u32>,
    /// For each original instruction, in order: its offset from the start of the original
    /// body, and the offset of its copy from the start of [`InstrumentedBody::bytes`]. With
    /// live probes, the function's own body's entries, then the probed copy's; the
    /// instrumented offsets always increase.
    pub offsets: Vec<(u32, u32)>,
    /// The byte ranges of this body's code that are wprof's probes, not the original's
    /// instructions: sorted, from the start of this body. (The original's instructions are
    /// the rest of the code after the local declarations.)
    pub probe_code: Vec<(u32, u32)>,
    /// With [`crate::ProbePlan::coverage`]: where each basic block starts, as an offset
    /// from the start of the original body, in order (a block ends where the next one
    /// starts, the last at the body's end), and how its count is known: the `k`-th block
    /// with a counter has the function's `k`-th counter. Empty without coverage, and for a
    /// function without probes. The first block always has a counter.
    pub blocks: Vec<(u32, BlockCount)>,
    /// With [`crate::ProbePlan::coverage`]: where the `k`-th counter's increment starts in
    /// [`InstrumentedBody::bytes`]. The body places its counters at `0, 8, 16, ...`, each
    /// address a five-byte LEB128 that the assembler overwrites with the counter's real
    /// address in the tree's memory (see [`crate::ContextArena::counters`]).
    pub counter_sites: Vec<u32>,
    /// Sample and cost mode, a function that calls nothing: where in
    /// [`InstrumentedBody::bytes`] its entry probe's `return_call` to the function's retry
    /// function has its index, a five-byte LEB128 the assembler overwrites (see
    /// [`crate::ContextArena::RETRY`]).
    pub retry_site: Option<u32>,
}
