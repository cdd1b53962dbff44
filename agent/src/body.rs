//! Rewriting one function body: probes in, every other instruction copied byte for byte.
//!
//! Besides the entry/exit/import/tail probes described in the crate docs:
//!
//! - a function that catches exceptions (`try_table` with catch clauses, or a legacy
//!   `try` with `catch`/`catch_all`) enters through `enter_catching`, keeps the returned
//!   frame token in a new local, and calls `unwind(token)` wherever a catch lands — after
//!   the `end` of each block a catch clause targets, after a legacy `catch`, and before the
//!   exit probe — so the collector closes exactly the frames the exception skipped;
//! - in cost mode, the first instruction of every basic block is preceded by
//!   `delta += N`, N being the number of original instructions in the block (`end`
//!   excluded), `delta` being a new local, added to the counter global (and reset) at the
//!   function's exit, before a tail call or a throw, and — in modules that can throw —
//!   before every call; probes write events carrying the counter global into a buffer
//!   the host drains (see [`crate::EventBuffer`]).

use wasm_encoder::{Encode, Instruction};
use wasmparser::{BinaryReader, FunctionBody, Operator, OperatorsReader};

use crate::layout::ModuleLayout;
use crate::probe_map::ProbeLayout;
use crate::{AgentError, EventBuffer, ProbePlan};

/// One instrumented function body, independent of where it lands in a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstrumentedBody {
    /// The body's bytes (locals and code, without the size prefix).
    pub bytes: Vec<u8>,
    /// For each original instruction, in order: its offset from the start of the original
    /// body, and the offset of its copy from the start of this body.
    pub offsets: Vec<(u32, u32)>,
}

/// Writes the instructions the probes are made of.
struct Emitter<'p> {
    out: Vec<u8>,
    probes: &'p ProbeLayout,
    call_sites: bool,
    /// Cost mode: the local accumulating this function's instruction count since the last
    /// flush to the counter global (a register add per basic block instead of a global
    /// load and store).
    delta: Option<u32>,
    /// Cost mode: a scratch `i32` local holding the event buffer's fill level while an
    /// event is written.
    addr: Option<u32>,
}

impl Emitter<'_> {
    fn instr(&mut self, instr: Instruction<'_>) {
        instr.encode(&mut self.out);
    }

    /// Cost mode: `counter += delta; delta = 0`, so that the counter global is exact. Done
    /// before every probe, call and throw: whatever runs next sees the right count.
    fn flush(&mut self) {
        let (Some(counter), Some(delta)) = (self.probes.cost_global(), self.delta) else {
            return;
        };
        self.instr(Instruction::GlobalGet(counter));
        self.instr(Instruction::LocalGet(delta));
        self.instr(Instruction::I64Add);
        self.instr(Instruction::GlobalSet(counter));
        self.instr(Instruction::I64Const(0));
        self.instr(Instruction::LocalSet(delta));
    }

    /// Cost mode, in a module that can throw: a callee may be unwound together with this
    /// frame, so this frame's count goes in before the call. (Without exceptions a frame
    /// always flushes at its own exit, and nothing is lost.)
    fn flush_before_call(&mut self) {
        if self.probes.may_throw {
            self.flush();
        }
    }

    /// `probe(arg[, counter])`: a call to the host (time mode).
    fn probe_with(&mut self, probe: u32, arg: Instruction<'_>) {
        self.flush();
        self.instr(arg);
        if let Some(counter) = self.probes.cost_global() {
            self.instr(Instruction::GlobalGet(counter));
        }
        self.instr(Instruction::Call(probe));
    }

    fn probe(&mut self, probe: u32, id: u32) {
        self.probe_with(probe, Instruction::I32Const(id as i32));
    }

    /// Cost mode: appends an event to the buffer (see [`crate::EventBuffer`]), draining it
    /// when full. `header` pushes the event's `u64` header. The event records the counter
    /// global, which never includes the running function's unflushed delta: the counts
    /// events report only grow.
    fn event(&mut self, header: impl FnOnce(&mut Self)) {
        let (Some(counter), Some((memory, fill, _))) =
            (self.probes.cost_global(), self.probes.event_buffer())
        else {
            unreachable!("events are only written in cost mode");
        };
        let at = |offset| wasm_encoder::MemArg {
            offset,
            align: 3,
            memory_index: memory,
        };
        let addr = self.addr.expect("cost mode has the scratch local");
        self.instr(Instruction::GlobalGet(fill));
        self.instr(Instruction::LocalTee(addr));
        header(self);
        self.instr(Instruction::I64Store(at(0)));
        self.instr(Instruction::LocalGet(addr));
        self.instr(Instruction::GlobalGet(counter));
        self.instr(Instruction::I64Store(at(8)));
        self.instr(Instruction::LocalGet(addr));
        self.instr(Instruction::I32Const(EventBuffer::EVENT_SIZE as i32));
        self.instr(Instruction::I32Add);
        self.instr(Instruction::LocalTee(addr));
        self.instr(Instruction::GlobalSet(fill));
        self.instr(Instruction::LocalGet(addr));
        self.instr(Instruction::I32Const(EventBuffer::CAPACITY as i32));
        self.instr(Instruction::I32GeU);
        self.instr(Instruction::If(wasm_encoder::BlockType::Empty));
        self.instr(Instruction::Call(self.probes.drain()));
        self.instr(Instruction::I32Const(0));
        self.instr(Instruction::GlobalSet(fill));
        self.instr(Instruction::End);
    }

    /// An event whose header is a constant.
    fn const_event(&mut self, kind: u8, id: u32) {
        let header = (u64::from(id) << 32) | u64::from(kind);
        self.event(|e| e.instr(Instruction::I64Const(header as i64)));
    }

    /// An event whose header carries the token in `token_local`.
    fn token_event(&mut self, kind: u8, id: u32, token_local: u32) {
        let fixed = (u64::from(id) << 32) | u64::from(kind);
        self.event(|e| {
            e.instr(Instruction::LocalGet(token_local));
            e.instr(Instruction::I64ExtendI32U);
            e.instr(Instruction::I64Const(8));
            e.instr(Instruction::I64Shl);
            e.instr(Instruction::I64Const(fixed as i64));
            e.instr(Instruction::I64Or);
        });
    }

    fn buffered(&self) -> bool {
        self.probes.event_buffer().is_some()
    }

    fn enter(&mut self, id: u32) {
        if self.buffered() {
            self.const_event(EventBuffer::ENTER, id);
        } else {
            self.probe(self.probes.enter(), id);
        }
    }

    fn exit(&mut self, id: u32) {
        if self.buffered() {
            // The function's own count goes in before its frame closes.
            self.flush();
            self.const_event(EventBuffer::EXIT, id);
        } else {
            self.probe(self.probes.exit(), id);
        }
    }

    fn tail(&mut self, id: u32) {
        if self.buffered() {
            // The caller's frame stays open while its locals die: count them now.
            self.flush();
            self.const_event(EventBuffer::TAIL, id);
        } else {
            self.probe(self.probes.tail(), id);
        }
    }

    /// Enters a function that catches; leaves its frame token in `token_local`.
    fn enter_catching(&mut self, id: u32, token_local: u32) {
        if self.buffered() {
            // Tokens only need to tell catching activations apart: a counter of them.
            let (_, _, tokens) = self.probes.event_buffer().expect("cost mode");
            self.instr(Instruction::GlobalGet(tokens));
            self.instr(Instruction::I32Const(1));
            self.instr(Instruction::I32Add);
            self.instr(Instruction::I32Const(0xff_ffff));
            self.instr(Instruction::I32And);
            self.instr(Instruction::LocalTee(token_local));
            self.instr(Instruction::GlobalSet(tokens));
            self.token_event(EventBuffer::ENTER_CATCHING, id, token_local);
        } else {
            self.probe(self.probes.enter_catching(), id);
            self.instr(Instruction::LocalSet(token_local));
        }
    }

    fn unwind(&mut self, token_local: u32) {
        if self.buffered() {
            self.token_event(EventBuffer::UNWIND, 0, token_local);
        } else {
            self.probe_with(self.probes.unwind(), Instruction::LocalGet(token_local));
        }
    }

    /// A direct call to imported function `import`, bracketed so it is its own node.
    fn probed_import_call(&mut self, import: u32) {
        self.enter(import);
        self.instr(Instruction::Call(import));
        if self.buffered() {
            // No flush: the caller's pending count is the caller's, not the import's.
            self.const_event(EventBuffer::EXIT, import);
        } else {
            self.exit(import);
        }
    }

    /// With call sites on: `site(offset)`, before a call at `offset` in the original body.
    fn site(&mut self, offset: u32) {
        if !self.call_sites {
            return;
        }
        if self.buffered() {
            self.const_event(EventBuffer::SITE, offset);
        } else {
            self.probe(self.probes.site(), offset);
        }
    }

    /// `delta += weight` (cost mode, non-zero weights only).
    fn add_cost(&mut self, weight: u64) {
        let Some(delta) = self.delta else {
            return;
        };
        if weight == 0 {
            return;
        }
        self.instr(Instruction::LocalGet(delta));
        self.instr(Instruction::I64Const(weight as i64));
        self.instr(Instruction::I64Add);
        self.instr(Instruction::LocalSet(delta));
    }
}

/// Whether the instruction after `op` starts a new basic block: control may arrive there
/// from elsewhere, or `op` may leave the straight line.
fn ends_basic_block(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        Block { .. }
            | Loop { .. }
            | If { .. }
            | Else
            | End
            | Br { .. }
            | BrIf { .. }
            | BrTable { .. }
            | Return
            | Unreachable
            | TryTable { .. }
            | Try { .. }
            | Catch { .. }
            | CatchAll
            | Delegate { .. }
            | Throw { .. }
            | ThrowRef
            | Rethrow { .. }
            | BrOnNull { .. }
            | BrOnNonNull { .. }
            | BrOnCast { .. }
            | BrOnCastFail { .. }
            | ReturnCall { .. }
            | ReturnCallIndirect { .. }
            | ReturnCallRef { .. }
    )
}

/// Instructions that count in cost mode: all but `end`.
fn instruction_weight(op: &Operator<'_>) -> u64 {
    u64::from(!matches!(op, Operator::End))
}

/// What the first pass learns about a body.
struct BodyFacts {
    /// Weights of the basic blocks, in order (cost mode).
    block_weights: Vec<u64>,
    /// The body catches exceptions.
    catches: bool,
}

fn scan(mut ops: OperatorsReader<'_>) -> Result<BodyFacts, AgentError> {
    let mut facts = BodyFacts {
        block_weights: Vec::new(),
        catches: false,
    };
    let mut current = 0;
    while !ops.eof() {
        let op = ops.read()?;
        current += instruction_weight(&op);
        match &op {
            Operator::TryTable { try_table } if !try_table.catches.is_empty() => {
                facts.catches = true
            }
            Operator::Catch { .. } | Operator::CatchAll => facts.catches = true,
            _ => {}
        }
        if ends_basic_block(&op) {
            facts.block_weights.push(std::mem::take(&mut current));
        }
    }
    facts.block_weights.push(current);
    Ok(facts)
}

/// The local declarations re-encoded with `extra` locals appended, and the index of the
/// first of them (`params + locals`).
fn locals_with_extra(
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

/// Rewrites the body of the `defined`-th defined function.
pub(crate) fn instrument_body(
    layout: &ModuleLayout<'_>,
    probes: &ProbeLayout,
    plan: &ProbePlan,
    defined: u32,
) -> Result<InstrumentedBody, AgentError> {
    let func = &layout.defined_funcs[defined as usize];
    let id = layout.function_id(defined);
    let base = func.body.start;
    let body = FunctionBody::new(BinaryReader::new(&layout.bytes[func.body.clone()], base));
    let mut ops = body.get_operators_reader()?;
    let code_start = ops.original_position();
    let facts = scan(ops.clone())?;

    let mut e = Emitter {
        out: Vec::with_capacity(func.body.len() + func.body.len() / 4 + 16),
        probes,
        call_sites: plan.call_sites,
        delta: None,
        addr: None,
    };
    // New locals: the frame token (functions that catch), the cost delta (cost mode).
    let mut extra = Vec::new();
    if facts.catches {
        extra.push(wasm_encoder::ValType::I32);
    }
    if probes.cost_global().is_some() {
        extra.push(wasm_encoder::ValType::I64);
        extra.push(wasm_encoder::ValType::I32);
    }
    let first_new = if extra.is_empty() {
        e.out.extend_from_slice(&layout.bytes[base..code_start]);
        0
    } else {
        let params = layout.signature(func.type_index).params.len() as u32;
        let (locals, first) =
            locals_with_extra(&body, params, layout.bytes, base, code_start, &extra)?;
        e.out.extend_from_slice(&locals);
        first
    };
    let token = facts.catches.then_some(first_new);
    if probes.cost_global().is_some() {
        e.delta = Some(first_new + u32::from(facts.catches));
        e.addr = Some(first_new + u32::from(facts.catches) + 1);
    }
    match token {
        Some(token) => e.enter_catching(id, token),
        None => e.enter(id),
    }
    let mut offsets = Vec::new();
    // Every branch to the function's outermost label now lands at the end of this block,
    // where the exit probe runs.
    e.instr(Instruction::Block(probes.wrapper_block(func.type_index)));
    let mut weights = facts.block_weights.iter().copied();
    e.add_cost(weights.next().unwrap_or(0));

    // Open blocks inside the function (the wrapper excluded); `true` where a catch clause
    // lands after the block's `end`.
    let mut blocks: Vec<bool> = Vec::new();
    let mut wrapper_catches = false;
    let mut finished = false;
    while !ops.eof() {
        let start = ops.original_position();
        let op = ops.read()?;
        let end = ops.original_position();
        if finished {
            return Err(AgentError::Unsupported {
                what: "instructions after the end of a function".to_string(),
                offset: start,
            });
        }
        offsets.push(((start - base) as u32, e.out.len() as u32));
        let original = &layout.bytes[start..end];
        if matches!(
            op,
            Operator::Call { .. }
                | Operator::CallIndirect { .. }
                | Operator::CallRef { .. }
                | Operator::ReturnCall { .. }
                | Operator::ReturnCallIndirect { .. }
                | Operator::ReturnCallRef { .. }
        ) {
            e.site((start - base) as u32);
        }
        match &op {
            Operator::TryTable { try_table } => {
                for catch in &try_table.catches {
                    let label = match *catch {
                        wasmparser::Catch::One { label, .. }
                        | wasmparser::Catch::OneRef { label, .. }
                        | wasmparser::Catch::All { label }
                        | wasmparser::Catch::AllRef { label } => label as usize,
                    };
                    // Catch labels are relative to the block around the try_table.
                    match blocks.len().checked_sub(label + 1) {
                        Some(at) => blocks[at] = true,
                        None => wrapper_catches = true,
                    }
                }
                blocks.push(false);
                e.out.extend_from_slice(original);
            }
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Try { .. } => {
                blocks.push(false);
                e.out.extend_from_slice(original);
            }
            Operator::End if blocks.is_empty() => {
                // Closes the wrapper block; then the exit probe; then the function.
                e.instr(Instruction::End);
                if let (Some(token), true) = (token, wrapper_catches) {
                    e.unwind(token);
                }
                e.exit(id);
                e.instr(Instruction::End);
                finished = true;
            }
            Operator::End | Operator::Delegate { .. } => {
                let caught_here = blocks.pop().unwrap_or(false);
                e.out.extend_from_slice(original);
                if let (Some(token), true) = (token, caught_here) {
                    e.unwind(token);
                }
            }
            Operator::Catch { .. } | Operator::CatchAll => {
                e.out.extend_from_slice(original);
                if let Some(token) = token {
                    e.unwind(token);
                }
            }
            Operator::Return => {
                e.exit(id);
                e.out.extend_from_slice(original);
            }
            Operator::Call { function_index } if *function_index < probes.imported_funcs => {
                e.probed_import_call(*function_index);
            }
            Operator::Call { function_index } => {
                e.flush_before_call();
                e.instr(Instruction::Call(probes.renumber(*function_index)));
            }
            Operator::CallIndirect { .. } | Operator::CallRef { .. } => {
                e.flush_before_call();
                e.out.extend_from_slice(original);
            }
            Operator::Throw { .. } | Operator::ThrowRef | Operator::Rethrow { .. } => {
                // The frames this throw unwinds lose their locals: their counts go in now.
                e.flush();
                e.out.extend_from_slice(original);
            }
            Operator::ReturnCall { function_index } if *function_index < probes.imported_funcs => {
                // The import is not instrumented, so it cannot close the caller's frame:
                // make it an ordinary call followed by a return.
                e.probed_import_call(*function_index);
                e.exit(id);
                e.instr(Instruction::Return);
            }
            Operator::ReturnCall { function_index } => {
                e.tail(id);
                e.instr(Instruction::ReturnCall(probes.renumber(*function_index)));
            }
            Operator::ReturnCallIndirect { .. } | Operator::ReturnCallRef { .. } => {
                e.tail(id);
                e.out.extend_from_slice(original);
            }
            Operator::RefFunc { function_index } => {
                e.instr(Instruction::RefFunc(probes.renumber(*function_index)));
            }
            _ => e.out.extend_from_slice(original),
        }
        if !finished && ends_basic_block(&op) {
            e.add_cost(weights.next().unwrap_or(0));
        }
    }
    if !finished {
        return Err(AgentError::Unsupported {
            what: "a function body without its final `end`".to_string(),
            offset: func.body.end,
        });
    }
    Ok(InstrumentedBody {
        bytes: e.out,
        offsets,
    })
}
