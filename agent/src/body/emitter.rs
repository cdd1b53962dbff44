//! The emitter: writes a body's new bytes, and the probes that every mode places at the
//! same points (entry, exit, tail call, catch landing, call site, call to an import),
//! each dispatched to the mode's own instructions in the sibling files.

use wasm_encoder::{BlockType, Encode, Instruction, MemArg};

use crate::probe_map::{InlineIndices, ProbeLayout};
use crate::ContextArena;

/// The locals the inline modes add to a body.
#[derive(Debug, Clone, Copy)]
pub(super) struct InlineLocals {
    /// The function's calling-context node.
    pub(super) node: u32,
    /// Scratch: an import's node around a call to it.
    pub(super) import_node: u32,
    /// Cost mode: the instructions counted since the last flush to the node.
    pub(super) delta: Option<u32>,
    /// Live probes: the slot global as the function found it at entry, put back at exit.
    pub(super) came: Option<u32>,
    /// Adaptive mode: the token of this activation's timer, 0 when it is not timed.
    pub(super) timer: Option<u32>,
    /// The function tail-calls itself.
    pub(super) self_tail: Option<SelfTailLocals>,
    /// A Go module's function (see [`super::go_frames`]).
    pub(super) go: Option<super::locals::GoLocals>,
}

/// The locals of a function that tail-calls itself (inline modes): a loop of such calls
/// counts in one node, the one its first iteration reached.
#[derive(Debug, Clone, Copy)]
pub(super) struct SelfTailLocals {
    /// The slot this activation was reached through.
    pub(super) came_from: u32,
    /// This activation was entered by the function's own tail call.
    pub(super) via_self_tail: u32,
}

/// Writes the instructions the probes are made of.
pub(super) struct Emitter<'p> {
    pub(super) out: Vec<u8>,
    pub(super) probes: &'p ProbeLayout,
    pub(super) call_sites: bool,
    /// The inline modes: where the tree is, and the body's added locals.
    pub(super) inline: Option<(InlineIndices, InlineLocals)>,
    /// The slot of each call instruction, in order (see [`super::scan::BodyFacts::slots`]).
    pub(super) slots: Vec<u32>,
    /// How many call instructions were emitted so far.
    pub(super) calls_emitted: usize,
    /// The ranges of `out` holding the original's instructions, sorted, adjacent ones
    /// merged.
    pub(super) original_code: Vec<(u32, u32)>,
    /// The function is left without probes (see [`crate::Selection`]): in the inline
    /// modes, [`InlineLocals::node`] holds the slot it was reached through instead of a
    /// node.
    pub(super) excluded: bool,
    /// Excluded and silent (see [`crate::Selection::silent`]): not even its calls to
    /// imports are bracketed.
    pub(super) silent: bool,
    /// Time mode: the function is counted, not timed (see
    /// [`crate::ProbePlan::short_max`]); it is also [`Emitter::excluded`], its entry
    /// calling `called(id)` and nothing else.
    pub(super) counted: bool,
    /// Coverage: the blocks so far and where their counters' increments are; `None`
    /// without coverage.
    pub(super) blocks: Option<super::blocks::BlockMap>,
    /// Time mode, a Go function with Go's signature (see [`super::go_frames`]).
    pub(super) go_time: Option<super::locals::GoTimeLocals>,
    /// An allocator (allocation profiling, see [`crate::Allocators`]).
    pub(super) alloc: Option<super::locals::AllocLocals>,
    /// Sample and cost mode, a function that calls nothing (see [`Emitter::find_and_count`]):
    /// how many parameters it takes, when its entry probe leaves for its retry function
    /// rather than call the node finder.
    pub(super) retry: Option<u32>,
    /// Where the index of the retry function the entry probe tail-calls was left for the
    /// assembler to write (see [`crate::InstrumentedBody::retry_site`]).
    pub(super) retry_site: Option<u32>,
}

impl Emitter<'_> {
    pub(super) fn instr(&mut self, instr: Instruction<'_>) {
        instr.encode(&mut self.out);
    }

    pub(super) fn instrs(&mut self, instrs: &[Instruction<'_>]) {
        for i in instrs {
            i.encode(&mut self.out);
        }
    }

    /// Copies an original instruction's bytes.
    pub(super) fn original(&mut self, bytes: &[u8]) {
        let start = self.out.len() as u32;
        self.out.extend_from_slice(bytes);
        self.mark_original(start);
    }

    /// Writes an original instruction re-encoded (a function index renumbered).
    pub(super) fn original_instr(&mut self, instr: Instruction<'_>) {
        let start = self.out.len() as u32;
        instr.encode(&mut self.out);
        self.mark_original(start);
    }

    fn mark_original(&mut self, start: u32) {
        let end = self.out.len() as u32;
        match self.original_code.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.original_code.push((start, end)),
        }
    }

    pub(super) fn tree_i32(arena: InlineIndices, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
            align: 2,
            memory_index: arena.memory,
        }
    }

    pub(super) fn tree_i64(arena: InlineIndices, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
            align: 3,
            memory_index: arena.memory,
        }
    }

    /// `stack: [] -> [i32]`: the switch of function `id` (live probes only).
    pub(super) fn read_switch(&mut self, id: u32) {
        let switches = self
            .probes
            .switches()
            .expect("switches are read only with live probes");
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::I32Load8U(MemArg {
                offset: u64::from(switches.base) + u64::from(id),
                align: 0,
                memory_index: switches.memory,
            }),
        ]);
    }

    /// The entry probe of function `id` with `slots` call sites; in time mode, for a
    /// function that catches, the frame token goes to `token`.
    pub(super) fn enter(&mut self, id: u32, slots: u32, token: Option<u32>) {
        if let Some((
            arena,
            InlineLocals {
                came: Some(came), ..
            },
        )) = self.inline
        {
            // Live probes: put back at exit, for callees of callers without probes now.
            self.instrs(&[
                Instruction::GlobalGet(arena.slot),
                Instruction::LocalSet(came),
            ]);
        }
        self.entry_probe(id, slots, token);
    }

    fn entry_probe(&mut self, id: u32, slots: u32, token: Option<u32>) {
        if self.counted {
            self.called_probe(id);
            return;
        }
        if self.excluded {
            // Only where it was reached from, for its own calls (and the sampler).
            if let Some((arena, locals)) = self.inline {
                self.instrs(&[
                    Instruction::GlobalGet(arena.slot),
                    Instruction::LocalSet(locals.node),
                ]);
                self.set_current(locals.node);
            }
            return;
        }
        match (self.inline, token) {
            (Some((arena, locals)), _) => {
                if let Some(t) = locals.self_tail {
                    self.instrs(&[
                        Instruction::GlobalGet(arena.slot),
                        Instruction::LocalSet(t.came_from),
                        Instruction::GlobalGet(arena.self_tail),
                        Instruction::LocalSet(t.via_self_tail),
                        Instruction::I32Const(0),
                        Instruction::GlobalSet(arena.self_tail),
                    ]);
                }
                match (arena.go, locals.go) {
                    (Some(go), Some(go_locals)) => {
                        if go_locals.resumable {
                            // A re-entry finds its node; a call, as everywhere (a new
                            // node's parent is set by the finder).
                            self.go_reentry(arena, go, go_locals, locals.node, id);
                            self.instrs(&[
                                Instruction::LocalGet(locals.node),
                                Instruction::I32Eqz,
                                Instruction::If(BlockType::Empty),
                            ]);
                            self.find_and_count(arena, locals.node, id, slots, true);
                            self.instr(Instruction::End);
                        } else {
                            self.find_and_count(arena, locals.node, id, slots, true);
                        }
                        self.go_now_in(go, locals.node);
                    }
                    _ if self.retry.is_some() => self.find_or_retry(arena, locals.node, id),
                    _ => self.find_and_count(arena, locals.node, id, slots, true),
                }
                self.set_current(locals.node);
            }
            (None, Some(token)) => {
                self.probe(self.probes.enter_catching(), id);
                self.instr(Instruction::LocalSet(token));
            }
            (None, None) => match self.go_time {
                Some(t) => self.go_time_enter(t, id),
                None => self.probe(self.probes.enter(), id),
            },
        }
    }

    /// Time mode, a function counted, not timed: `called(id)`, behind its switch with live
    /// probes.
    fn called_probe(&mut self, id: u32) {
        if self.probes.switches().is_some() {
            self.read_switch(id);
            self.instrs(&[Instruction::I32Eqz, Instruction::If(BlockType::Empty)]);
            self.probe(self.probes.called(), id);
            self.instr(Instruction::End);
        } else {
            self.probe(self.probes.called(), id);
        }
    }

    pub(super) fn exit(&mut self, id: u32) {
        if self.excluded {
            return;
        }
        if let Some((arena, locals)) = self.inline {
            self.stop_timer();
            // The function's own count goes in before its frame closes.
            self.flush();
            if let (Some(go), Some(go_locals)) = (arena.go, locals.go) {
                self.go_leave(arena, go, go_locals, locals.node);
            }
            if let Some(came) = locals.came {
                // Live probes: the slot its caller set, for the caller's next calls (the
                // caller's switch may be off, and then it sets none), and in sample mode
                // the cell says the caller runs again.
                self.instrs(&[
                    Instruction::LocalGet(came),
                    Instruction::GlobalSet(arena.slot),
                ]);
                self.set_current(came);
            }
        } else if let Some(t) = self.go_time {
            self.go_time_exit(t, id);
        } else {
            self.probe(self.probes.exit(), id);
        }
    }

    /// Time mode, before a direct tail call to defined function `callee`: when the callee
    /// has no probes it cannot close this frame, so the frame closes now (the callee is its
    /// caller's); else as [`Emitter::tail`]. With live probes, the callee's switch decides
    /// (read now: a switch turned between this and the callee's entry leaves this frame
    /// open until an outer one closes).
    pub(super) fn tail_to(&mut self, id: u32, callee: u32, callee_excluded: bool) {
        if self.inline.is_some() {
            self.tail(id);
        } else if callee_excluded {
            self.exit(id);
        } else if self.probes.switches().is_none() || self.excluded {
            self.tail(id);
        } else {
            self.read_switch(callee);
            self.instr(Instruction::If(BlockType::Empty));
            self.probe(self.probes.exit(), id);
            self.instr(Instruction::Else);
            self.probe(self.probes.tail(), id);
            self.instr(Instruction::End);
        }
    }

    pub(super) fn tail(&mut self, id: u32) {
        if self.excluded {
            return;
        }
        if self.inline.is_some() {
            // The caller's node stays the callee's parent; its locals die now.
            self.stop_timer();
            self.flush();
        } else {
            self.probe(self.probes.tail(), id);
        }
    }

    /// Where a catch lands in this function.
    pub(super) fn landing(&mut self, token: Option<u32>) {
        if self.inline.is_some() {
            self.resume();
        } else if let Some(token) = token.filter(|_| !self.excluded) {
            self.probe_with(self.probes.unwind(), Instruction::LocalGet(token));
        }
    }

    /// Before a call instruction at `offset` of the original body: time mode with call
    /// sites reports it; the inline modes point the slot global at the call's slot.
    pub(super) fn call_site(&mut self, offset: u32) {
        match self.inline {
            Some((arena, locals)) if self.excluded => {
                // The callee hangs where this function's caller would have it.
                self.calls_emitted += 1;
                self.instrs(&[
                    Instruction::LocalGet(locals.node),
                    Instruction::GlobalSet(arena.slot),
                ]);
            }
            None if self.excluded => {}
            Some((arena, locals)) => {
                let slot = self.slots.get(self.calls_emitted).copied().unwrap_or(0);
                self.calls_emitted += 1;
                let slot = ContextArena::SLOTS + 4 * slot;
                self.instrs(&[
                    Instruction::LocalGet(locals.node),
                    Instruction::I32Const(slot as i32),
                    Instruction::I32Add,
                    Instruction::GlobalSet(arena.slot),
                ]);
            }
            None if self.call_sites => self.probe(self.probes.site(), offset),
            None => {}
        }
    }

    /// A direct call to defined function `callee`, of type `type_index`. From a probed
    /// body with live probes the callee's switch is read here: on, its probed copy is
    /// called directly (not through its own body, whose dispatch would read the same byte
    /// and tail-call it: a second prologue and stack check per call); off, its own body. A
    /// callee left out of the selection has no switch: its own body.
    pub(super) fn call_defined(&mut self, callee: u32, type_index: u32, callee_excluded: bool) {
        let own = self.probes.renumber(callee);
        let copy = match self.probes.switches() {
            Some(_) if !self.excluded && !callee_excluded => {
                self.probes.indices().probed_copy(callee)
            }
            _ => None,
        };
        let Some(copy) = copy else {
            self.original_instr(Instruction::Call(own));
            return;
        };
        self.read_switch(callee);
        self.instrs(&[
            Instruction::I32Eqz,
            Instruction::If(BlockType::FunctionType(type_index)),
            Instruction::Call(copy),
            Instruction::Else,
        ]);
        self.original_instr(Instruction::Call(own));
        self.instr(Instruction::End);
    }

    /// After a call to one of the module's functions returned: an excluded function in
    /// sample mode says it runs again (a probed one need not: the sampler's program counter
    /// finds it among the cell's ancestors, which an excluded function is not).
    pub(super) fn after_call(&mut self) {
        if self.excluded {
            self.resume();
        }
    }

    /// A direct call to imported function `import` (its call site already announced),
    /// bracketed so it is its own node.
    pub(super) fn probed_import_call(&mut self, import: u32) {
        if self.silent {
            self.original_instr(Instruction::Call(import));
            return;
        }
        self.before_import(import);
        self.original_instr(Instruction::Call(import));
        self.after_import(import);
    }

    fn before_import(&mut self, import: u32) {
        match self.inline {
            Some((arena, locals)) => {
                // The caller's count goes in first: an import may end the program.
                self.flush();
                self.find_and_count(arena, locals.import_node, import, 0, false);
                self.name_import(locals.import_node);
            }
            None => self.probe(self.probes.enter(), import),
        }
    }

    fn after_import(&mut self, import: u32) {
        match self.inline {
            Some(_) => {
                self.resume();
                self.import_returned();
            }
            None => self.probe(self.probes.exit(), import),
        }
    }
}
