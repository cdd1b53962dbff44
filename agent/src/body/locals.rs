//! The locals some kinds of probe add to a body, named by the emitter that carries them
//! and filled in by each kind's own file ([`super::allocs`], [`super::go_frames`]), and the
//! body's local declarations with them appended ([`locals_with_extra`]).

use wasm_encoder::Encode;
use wasmparser::FunctionBody;

use crate::{AgentError, AllocRole};

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

/// The local declarations re-encoded with `extra` locals appended, and the index of the
/// first of them (`params + locals`).
pub(super) fn locals_with_extra(
    body: &FunctionBody<'_>,
    params: u32,
    bytes: &[u8],
    base: usize,
    code_start: usize,
    extra: &[wasm_encoder::ValType],
) -> Result<(Vec<u8>, u32), AgentError> {
    let mut reader = body.get_binary_reader();
    let groups = reader.read_var_u32()?;
    let groups_end = reader.original_position();
    let mut locals = params;
    for local in body.get_locals_reader()? {
        let (count, _) = local?;
        locals = locals.checked_add(count).ok_or(AgentError::Unsupported {
            what: "a function with more than 2^32 locals".to_string(),
            offset: base,
        })?;
    }
    let mut out = Vec::new();
    (groups + extra.len() as u32).encode(&mut out);
    out.extend_from_slice(&bytes[groups_end..code_start]);
    for ty in extra {
        1u32.encode(&mut out);
        ty.encode(&mut out);
    }
    Ok((out, locals))
}
