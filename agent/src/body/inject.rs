//! Fault injection's probe: a function the host may make fail asks, as it starts, whether
//! this call runs (see [`crate::Injections`]).

use wasm_encoder::{BlockType, Instruction};

use super::emitter::Emitter;
use crate::InjectedValue;

impl Emitter<'_> {
    /// After function `id`'s entry probe: `wprof.inject(id)`, which traps for an injected
    /// trap; with `value`, a 1 from it returns `value` at once, through the exit probe.
    pub(super) fn inject_check(&mut self, id: u32, value: Option<InjectedValue>) {
        self.instrs(&[
            Instruction::I32Const(id as i32),
            Instruction::Call(self.probes.inject()),
        ]);
        let Some(value) = value else {
            self.instr(Instruction::Drop);
            return;
        };
        self.instr(Instruction::If(BlockType::Empty));
        self.instr(match value {
            InjectedValue::I32(v) => Instruction::I32Const(v),
            InjectedValue::I64(v) => Instruction::I64Const(v),
            InjectedValue::F32(bits) => Instruction::F32Const(f32::from_bits(bits).into()),
            InjectedValue::F64(bits) => Instruction::F64Const(f64::from_bits(bits).into()),
        });
        self.exit(id);
        self.instrs(&[Instruction::Return, Instruction::End]);
    }
}
