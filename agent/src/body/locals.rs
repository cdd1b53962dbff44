//! The locals some kinds of probe add to a body, named by the emitter that carries them
//! and filled in by each kind's own file ([`super::allocs`], [`super::go_frames`]).

use crate::AllocRole;

/// An allocator's added locals: the two parameters its role reports, as they were at
/// entry (`i64`), and its result.
#[derive(Debug, Clone, Copy)]
pub(super) struct AllocLocals {
    pub(super) id: u32,
    pub(super) role: AllocRole,
    /// (the parameter, the local keeping it) for the probe's `a` and `b` arguments.
    pub(super) a: Option<(u32, u32)>,
    pub(super) b: Option<(u32, u32)>,
    /// The local keeping the result at an exit, and whether it is an `i32`.
    pub(super) result: Option<(u32, bool)>,
}

/// The locals a Go module's probed function adds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GoLocals {
    /// Scratch: a goroutine table entry's address.
    pub(crate) scratch: u32,
    /// The function has Go's own calling convention, `(PC_B i32) -> (unwinding i32)`,
    /// local 0 being `PC_B`: it can be re-entered.
    pub(crate) resumable: bool,
}

/// Time mode, a Go function with Go's signature: what its probes flag (see
/// [`crate::GoTimeFlags`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GoTimeLocals {
    /// The global holding the goroutine last told to the host.
    pub(crate) told: u32,
    /// Scratch: the function's result at an exit.
    pub(crate) result: u32,
}
