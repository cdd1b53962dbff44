//! Time mode's probes: calls to the host's probe imports (`enter`, `exit`, `tail`,
//! `site`, `unwind`, `enter_catching`), each with a function id, call-site offset or
//! frame token as its argument.

use wasm_encoder::Instruction;

use super::emitter::Emitter;

impl Emitter<'_> {
    /// `probe(arg)`: a call to the host (time mode).
    pub(super) fn probe_with(&mut self, probe: u32, arg: Instruction<'_>) {
        self.instr(arg);
        self.instr(Instruction::Call(probe));
    }

    pub(super) fn probe(&mut self, probe: u32, id: u32) {
        self.probe_with(probe, Instruction::I32Const(id as i32));
    }
}
