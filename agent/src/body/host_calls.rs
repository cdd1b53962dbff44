//! Time mode's probes: calls to the host's probe imports (`enter`, `exit`, `tail`,
//! `site`, `unwind`, `enter_catching`), each with a function id, call-site offset or
//! frame token as its argument.

use wasm_encoder::Instruction;

use super::emitter::Emitter;
use crate::ProbeImports;

impl Emitter<'_> {
    /// `probe(arg)`: a call to the host (time mode).
    pub(super) fn probe_with(&mut self, probe: u32, arg: Instruction<'_>) {
        self.instr(arg);
        self.instr(Instruction::Call(probe));
    }

    pub(super) fn probe(&mut self, probe: u32, id: u32) {
        self.probe_with(probe, Instruction::I32Const(id as i32));
    }

    /// `memory.atomic.wait32`/`wait64` (`original`), in time mode between an `enter` and
    /// an `exit` of [`ProbeImports::WAIT_ID`]: the time the thread waits is the wait's, a
    /// callee of the function, not the function's own. The probes take their own argument
    /// and return nothing, so the wait's operands and result stay where they are.
    pub(super) fn atomic_wait(&mut self, original: &[u8]) {
        let timed = self.inline.is_none()
            && !self.excluded
            && !self.silent
            && !self.counted
            && self.go_time.is_none();
        if timed {
            self.probe(self.probes.enter(), ProbeImports::WAIT_ID);
        }
        self.original(original);
        if timed {
            self.probe(self.probes.exit(), ProbeImports::WAIT_ID);
        }
    }
}
