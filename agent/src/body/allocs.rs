//! Allocation profiling's probe: an allocator function reports, just before it returns,
//! the block it handed out or took back (see [`crate::Allocators`]).

use wasm_encoder::{Instruction, ValType};

use super::emitter::Emitter;
use super::locals::AllocLocals;
use crate::{AgentError, AllocRole};

/// The locals an allocator of `role` with signature `params -> results` adds, in order,
/// or why the role does not fit the signature.
pub(crate) fn extra_locals(
    role: AllocRole,
    params: &[wasmparser::ValType],
    results: &[wasmparser::ValType],
    offset: usize,
) -> Result<Vec<ValType>, AgentError> {
    use wasmparser::ValType::{I32, I64};
    let unfit = |what: &str| AgentError::Unsupported {
        what: format!("an allocator whose {what} does not fit its role {role:?}"),
        offset,
    };
    let (a, b) = role.arguments();
    let mut extra = Vec::new();
    for param in [a, b].into_iter().flatten() {
        match params.get(usize::from(param)) {
            Some(I32 | I64) => extra.push(ValType::I64),
            _ => return Err(unfit("parameters")),
        }
    }
    if role.uses_result() {
        match results {
            [I32] => extra.push(ValType::I32),
            [I64] => extra.push(ValType::I64),
            _ => return Err(unfit("result")),
        }
    }
    Ok(extra)
}

impl AllocLocals {
    /// The locals of an allocator whose [`extra_locals`] start at local `first`.
    pub(super) fn at(
        id: u32,
        role: AllocRole,
        first: u32,
        results: &[wasmparser::ValType],
    ) -> AllocLocals {
        let mut next = first;
        let mut take = |param: Option<u8>| {
            param.map(|p| {
                next += 1;
                (u32::from(p), next - 1)
            })
        };
        let (a, b) = role.arguments();
        let (a, b) = (take(a), take(b));
        let result = role
            .uses_result()
            .then(|| (next, results == [wasmparser::ValType::I32]));
        AllocLocals {
            id,
            role,
            a,
            b,
            result,
        }
    }
}

impl Emitter<'_> {
    /// At an allocator's entry: keeps the parameters its probe reports (the body may
    /// reuse them), widened to `i64`.
    pub(super) fn alloc_entry(&mut self, params: &[wasmparser::ValType]) {
        let Some(alloc) = self.alloc else { return };
        for (param, local) in [alloc.a, alloc.b].into_iter().flatten() {
            self.instr(Instruction::LocalGet(param));
            if params.get(param as usize) == Some(&wasmparser::ValType::I32) {
                self.instr(Instruction::I64ExtendI32U);
            }
            self.instr(Instruction::LocalSet(local));
        }
    }

    /// Whether this is an allocator whose report holds its result (so that its tail calls
    /// must become calls).
    pub(super) fn alloc_needs_result(&self) -> bool {
        self.alloc.is_some_and(|a| a.role.uses_result())
    }

    /// At an allocator's exit, its results on the stack (or before a `free`'s tail call,
    /// the callee's arguments on it): `wprof.alloc(id, kind, a, b, result, node)`, the
    /// stack as it was.
    pub(super) fn alloc_report(&mut self) {
        let Some(alloc) = self.alloc else { return };
        if let Some((local, _)) = alloc.result {
            self.instr(Instruction::LocalSet(local));
        }
        self.instrs(&[
            Instruction::I32Const(alloc.id as i32),
            Instruction::I32Const(alloc.role.code() as i32),
        ]);
        for kept in [alloc.a, alloc.b] {
            match kept {
                Some((_, local)) => self.instr(Instruction::LocalGet(local)),
                None => self.instr(Instruction::I64Const(0)),
            }
        }
        match alloc.result {
            Some((local, narrow)) => {
                self.instr(Instruction::LocalGet(local));
                if narrow {
                    self.instr(Instruction::I64ExtendI32U);
                }
            }
            None => self.instr(Instruction::I64Const(0)),
        }
        match self.inline {
            Some((_, locals)) => self.instr(Instruction::LocalGet(locals.node)),
            None => self.instr(Instruction::I32Const(0)),
        }
        self.instr(Instruction::Call(self.probes.alloc()));
        if let Some((local, _)) = alloc.result {
            self.instr(Instruction::LocalGet(local));
        }
    }
}
