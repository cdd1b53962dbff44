//! Live probes (see [`crate::SwitchTable`]): the function's own body, which hands each
//! activation to its probed copy while the function's switch is on and otherwise runs the
//! original's instructions as they are.

use wasm_encoder::Instruction;
use wasmparser::Operator;

use super::emitter::Emitter;
use crate::layout::ModuleLayout;
use crate::probe_map::ProbeLayout;
use crate::AgentError;

/// Live probes (see [`crate::SwitchTable`]): the function's own code, after its locals.
/// `switch == 0; if; local.get 0..; return_call PROBED_COPY; end; ORIGINAL`: with the
/// switch on, the probed copy takes the activation over (with the same arguments); off, the
/// original's instructions run as they are (function indices renumbered), in a body that
/// holds nothing else. The original's offsets go to `offsets`.
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch(
    e: &mut Emitter<'_>,
    layout: &ModuleLayout<'_>,
    probes: &ProbeLayout,
    id: u32,
    params: u32,
    self_tail: bool,
    mut ops: wasmparser::OperatorsReader<'_>,
    base: usize,
    offsets: &mut Vec<(u32, u32)>,
) -> Result<(), AgentError> {
    let copy = probes
        .indices()
        .probed_copy(id)
        .expect("every defined function of a live module has a probed copy");
    e.read_switch(id);
    e.instrs(&[
        Instruction::I32Eqz,
        Instruction::If(wasm_encoder::BlockType::Empty),
    ]);
    for local in 0..params {
        e.instr(Instruction::LocalGet(local));
    }
    e.instrs(&[Instruction::ReturnCall(copy), Instruction::End]);
    if let (true, Some(arena)) = (self_tail, probes.arena()) {
        // A probed activation's tail call to itself announced itself: nobody else may
        // read that.
        e.instrs(&[
            Instruction::I32Const(0),
            Instruction::GlobalSet(arena.self_tail),
        ]);
    }
    while !ops.eof() {
        let start = ops.original_position();
        let op = ops.read()?;
        let end = ops.original_position();
        offsets.push(((start - base) as u32, e.out.len() as u32));
        match op {
            Operator::Call { function_index } => {
                e.original_instr(Instruction::Call(probes.renumber(function_index)))
            }
            Operator::ReturnCall { function_index } => {
                e.original_instr(Instruction::ReturnCall(probes.renumber(function_index)))
            }
            Operator::RefFunc { function_index } => {
                e.original_instr(Instruction::RefFunc(probes.renumber(function_index)))
            }
            _ => e.original(&layout.bytes[start..end]),
        }
    }
    Ok(())
}
