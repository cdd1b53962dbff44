//! Rewriting one function body: probes in, every other instruction copied byte for byte.
//!
//! Besides the entry/exit/import/tail probes described in the crate docs:
//!
//! - a function that catches exceptions (`try_table` with catch clauses, or a legacy
//!   `try` with `catch`/`catch_all`) enters through `enter_catching`, keeps the returned
//!   frame token in a new local, and calls `unwind(token)` wherever a catch lands — after
//!   the `end` of each block a catch clause targets, after a legacy `catch`, and before the
//!   exit probe — so the collector closes exactly the frames the exception skipped;
//! - in the inline modes (cost and sample, see [`crate::ContextArena`]) no probe calls the
//!   host: the entry follows the slot its caller set to the function's calling-context
//!   node (kept in a new local) and counts the call there; before every call the function
//!   sets the slot of that call site; a direct call to an import finds and counts the
//!   import's node at the call site;
//! - in cost mode, the first instruction of every basic block is preceded by
//!   `delta += N`, N being the number of original instructions in the block (`end`
//!   excluded), `delta` being a new local, added to the node's self cost (and reset) at
//!   the function's exit, before a tail call, a throw or a call to an import, and — in
//!   modules that can throw or import `proc_exit` — before every call;
//! - in sample mode, the node running now is stored in the current-node cell at entry,
//!   around calls to imports, after every call returns and wherever a catch lands.

use wasm_encoder::{BlockType, Encode, Instruction, MemArg};
use wasmparser::{BinaryReader, FunctionBody, Operator, OperatorsReader};

use crate::layout::ModuleLayout;
use crate::probe_map::{InlineIndices, ProbeLayout};
use crate::{AgentError, ContextArena, ProbePlan};

/// One instrumented function body, independent of where it lands in a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstrumentedBody {
    /// The body's bytes (locals and code, without the size prefix).
    pub bytes: Vec<u8>,
    /// For each original instruction, in order: its offset from the start of the original
    /// body, and the offset of its copy from the start of this body.
    pub offsets: Vec<(u32, u32)>,
}

/// The locals the inline modes add to a body.
#[derive(Debug, Clone, Copy)]
struct InlineLocals {
    /// The function's calling-context node.
    node: u32,
    /// Scratch: an import's node around a call to it.
    import_node: u32,
    /// Cost mode: the instructions counted since the last flush to the node.
    delta: Option<u32>,
    /// The function tail-calls itself.
    self_tail: Option<SelfTailLocals>,
}

/// The locals of a function that tail-calls itself (inline modes): a loop of such calls
/// counts in one node, the one its first iteration reached.
#[derive(Debug, Clone, Copy)]
struct SelfTailLocals {
    /// The slot this activation was reached through.
    came_from: u32,
    /// This activation was entered by the function's own tail call.
    via_self_tail: u32,
}

/// Writes the instructions the probes are made of.
struct Emitter<'p> {
    out: Vec<u8>,
    probes: &'p ProbeLayout,
    call_sites: bool,
    /// The inline modes: where the tree is, and the body's added locals.
    inline: Option<(InlineIndices, InlineLocals)>,
    /// The slot of each call instruction, in order (see [`BodyFacts::slots`]).
    slots: Vec<u32>,
    /// How many call instructions were emitted so far.
    calls_emitted: usize,
}

impl Emitter<'_> {
    fn instr(&mut self, instr: Instruction<'_>) {
        instr.encode(&mut self.out);
    }

    fn instrs(&mut self, instrs: &[Instruction<'_>]) {
        for i in instrs {
            i.encode(&mut self.out);
        }
    }

    fn tree_i32(arena: InlineIndices, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
            align: 2,
            memory_index: arena.memory,
        }
    }

    fn tree_i64(arena: InlineIndices, offset: u32) -> MemArg {
        MemArg {
            offset: u64::from(offset),
            align: 3,
            memory_index: arena.memory,
        }
    }

    /// Cost mode: `node.self += delta; delta = 0`.
    fn flush(&mut self) {
        let Some((
            arena,
            InlineLocals {
                node,
                delta: Some(delta),
                ..
            },
        )) = self.inline
        else {
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(node),
            Instruction::LocalGet(node),
            Instruction::I64Load(Self::tree_i64(arena, ContextArena::SELF_COST)),
            Instruction::LocalGet(delta),
            Instruction::I64Add,
            Instruction::I64Store(Self::tree_i64(arena, ContextArena::SELF_COST)),
            Instruction::I64Const(0),
            Instruction::LocalSet(delta),
        ]);
    }

    /// Cost mode, in a module whose frames may end without returning (a throw unwinds
    /// them, or a callee exits the program): this frame's count goes in before each call.
    /// (Otherwise a frame always flushes at its own exit, and nothing is lost.)
    fn flush_before_call(&mut self) {
        if self.probes.frames_may_vanish {
            self.flush();
        }
    }

    /// Inline modes: `local = the node of function id` (through the slot global), counting
    /// one call in it.
    fn find_and_count(&mut self, arena: InlineIndices, local: u32, id: u32, slots: u32) {
        let id1 = id.wrapping_add(1) as i32;
        self.instrs(&[
            Instruction::GlobalGet(arena.slot),
            Instruction::I32Load(Self::tree_i32(arena, 0)),
            Instruction::LocalTee(local),
            Instruction::I32Load(Self::tree_i32(arena, ContextArena::FUNCTION)),
            Instruction::I32Const(id1),
            Instruction::I32Ne,
            Instruction::If(BlockType::Empty),
            Instruction::GlobalGet(arena.slot),
            Instruction::I32Const(id1),
            Instruction::I32Const(slots as i32),
            Instruction::Call(arena.child),
            Instruction::LocalSet(local),
            Instruction::End,
            Instruction::LocalGet(local),
            Instruction::LocalGet(local),
            Instruction::I64Load(Self::tree_i64(arena, ContextArena::CALLS)),
            Instruction::I64Const(1),
            Instruction::I64Add,
            Instruction::I64Store(Self::tree_i64(arena, ContextArena::CALLS)),
        ]);
    }

    /// Sample mode: the current-node cell holds `local`.
    fn set_current(&mut self, local: u32) {
        let Some((arena, _)) = self.inline.filter(|(arena, _)| arena.sampled) else {
            return;
        };
        self.instrs(&[
            Instruction::I32Const(0),
            Instruction::LocalGet(local),
            Instruction::I32Store(Self::tree_i32(arena, ContextArena::CURRENT)),
        ]);
    }

    /// Sample mode: this function runs again (a call returned, or a catch landed here).
    fn resume(&mut self) {
        if let Some((_, locals)) = self.inline {
            self.set_current(locals.node);
        }
    }

    /// `probe(arg)`: a call to the host (time mode).
    fn probe_with(&mut self, probe: u32, arg: Instruction<'_>) {
        self.instr(arg);
        self.instr(Instruction::Call(probe));
    }

    fn probe(&mut self, probe: u32, id: u32) {
        self.probe_with(probe, Instruction::I32Const(id as i32));
    }

    /// The entry probe of function `id` with `slots` call sites; in time mode, for a
    /// function that catches, the frame token goes to `token`.
    fn enter(&mut self, id: u32, slots: u32, token: Option<u32>) {
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
                self.find_and_count(arena, locals.node, id, slots);
                self.set_current(locals.node);
            }
            (None, Some(token)) => {
                self.probe(self.probes.enter_catching(), id);
                self.instr(Instruction::LocalSet(token));
            }
            (None, None) => self.probe(self.probes.enter(), id),
        }
    }

    fn exit(&mut self, id: u32) {
        if self.inline.is_some() {
            // The function's own count goes in before its frame closes.
            self.flush();
        } else {
            self.probe(self.probes.exit(), id);
        }
    }

    fn tail(&mut self, id: u32) {
        if self.inline.is_some() {
            // The caller's node stays the callee's parent; its locals die now.
            self.flush();
        } else {
            self.probe(self.probes.tail(), id);
        }
    }

    /// Inline modes, before this function's tail call to itself (its call site already
    /// announced): a call made by an activation that was itself entered that way follows
    /// the same slot again, so the whole loop counts in the node its first iteration
    /// reached; and the callee learns it was entered this way.
    fn self_tail_call(&mut self) {
        let Some((
            arena,
            InlineLocals {
                self_tail: Some(t), ..
            },
        )) = self.inline
        else {
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(t.via_self_tail),
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(t.came_from),
            Instruction::GlobalSet(arena.slot),
            Instruction::End,
            Instruction::I32Const(1),
            Instruction::GlobalSet(arena.self_tail),
        ]);
    }

    /// Where a catch lands in this function.
    fn landing(&mut self, token: Option<u32>) {
        if self.inline.is_some() {
            self.resume();
        } else if let Some(token) = token {
            self.probe_with(self.probes.unwind(), Instruction::LocalGet(token));
        }
    }

    /// Before a call instruction at `offset` of the original body: time mode with call
    /// sites reports it; the inline modes point the slot global at the call's slot.
    fn call_site(&mut self, offset: u32) {
        match self.inline {
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

    /// A direct call to imported function `import` (its call site already announced),
    /// bracketed so it is its own node.
    fn probed_import_call(&mut self, import: u32) {
        match self.inline {
            Some((arena, locals)) => {
                // The caller's count goes in first: an import may end the program.
                self.flush();
                self.find_and_count(arena, locals.import_node, import, 0);
                self.set_current(locals.import_node);
                self.instr(Instruction::Call(import));
                self.resume();
            }
            None => {
                self.probe(self.probes.enter(), import);
                self.instr(Instruction::Call(import));
                self.probe(self.probes.exit(), import);
            }
        }
    }

    /// `delta += weight` (cost mode, non-zero weights only).
    fn add_cost(&mut self, weight: u64) {
        let Some((
            _,
            InlineLocals {
                delta: Some(delta), ..
            },
        )) = self.inline
        else {
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
    /// Inline modes: for each call instruction (`call*` and `return_call*`) in order, its
    /// slot in the node: one per call site when call sites are reported, else one per
    /// directly called function (so that recursion through two sites, like fib's, stays
    /// one path) and one per indirect call site.
    slots: Vec<u32>,
    /// The number of distinct slots.
    slot_count: u32,
    /// The function tail-calls itself (`return_call` of its own index).
    self_tail: bool,
    /// Loops (by the offset of their `loop` instruction) that a `try_table` catch clause
    /// targets: a branch to a loop lands at its head, so the landing probe goes there.
    caught_loops: std::collections::HashSet<usize>,
}

/// The labels a `try_table`'s catch clauses branch to.
fn catch_labels(try_table: &wasmparser::TryTable) -> impl Iterator<Item = usize> + '_ {
    try_table.catches.iter().map(|catch| match *catch {
        wasmparser::Catch::One { label, .. }
        | wasmparser::Catch::OneRef { label, .. }
        | wasmparser::Catch::All { label }
        | wasmparser::Catch::AllRef { label } => label as usize,
    })
}

/// Whether `op` calls a function (and so has a call site, and a slot in the inline modes).
fn is_call(op: &Operator<'_>) -> bool {
    matches!(
        op,
        Operator::Call { .. }
            | Operator::CallIndirect { .. }
            | Operator::CallRef { .. }
            | Operator::ReturnCall { .. }
            | Operator::ReturnCallIndirect { .. }
            | Operator::ReturnCallRef { .. }
    )
}

fn scan(mut ops: OperatorsReader<'_>, call_sites: bool, id: u32) -> Result<BodyFacts, AgentError> {
    let mut facts = BodyFacts {
        block_weights: Vec::new(),
        catches: false,
        slots: Vec::new(),
        slot_count: 0,
        caught_loops: Default::default(),
        self_tail: false,
    };
    let mut slot_of_callee = std::collections::HashMap::new();
    // Open blocks: the offset of each that is a loop.
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut current = 0;
    while !ops.eof() {
        let start = ops.original_position();
        let op = ops.read()?;
        current += instruction_weight(&op);
        if matches!(op, Operator::ReturnCall { function_index } if function_index == id) {
            facts.self_tail = true;
        }
        match &op {
            Operator::Block { .. } | Operator::If { .. } | Operator::Try { .. } => open.push(None),
            Operator::Loop { .. } => open.push(Some(start)),
            Operator::End | Operator::Delegate { .. } => {
                open.pop();
            }
            _ => {}
        }
        match &op {
            Operator::TryTable { try_table } if !try_table.catches.is_empty() => {
                facts.catches = true;
                // Catch labels are relative to the block around the try_table.
                for label in catch_labels(try_table) {
                    if let Some(Some(at)) = open.len().checked_sub(label + 1).map(|i| open[i]) {
                        facts.caught_loops.insert(at);
                    }
                }
                open.push(None);
            }
            Operator::TryTable { .. } => open.push(None),
            Operator::Catch { .. } | Operator::CatchAll => facts.catches = true,
            Operator::Call { function_index } | Operator::ReturnCall { function_index }
                if !call_sites =>
            {
                let next = facts.slot_count;
                let slot = *slot_of_callee.entry(*function_index).or_insert(next);
                facts.slot_count += u32::from(slot == next);
                facts.slots.push(slot);
            }
            op if is_call(op) => {
                facts.slots.push(facts.slot_count);
                facts.slot_count += 1;
            }
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

/// The offsets, from the start of the body, of the call instructions of the `defined`-th
/// defined function, in order.
pub(crate) fn call_sites(layout: &ModuleLayout<'_>, defined: u32) -> Result<Vec<u32>, AgentError> {
    let func = &layout.defined_funcs[defined as usize];
    let base = func.body.start;
    let body = FunctionBody::new(BinaryReader::new(&layout.bytes[func.body.clone()], base));
    let mut ops = body.get_operators_reader()?;
    let mut sites = Vec::new();
    while !ops.eof() {
        let start = ops.original_position();
        if is_call(&ops.read()?) {
            sites.push((start - base) as u32);
        }
    }
    Ok(sites)
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
    let mut facts = scan(ops.clone(), plan.call_sites, id)?;

    let mut e = Emitter {
        out: Vec::with_capacity(func.body.len() + func.body.len() / 4 + 16),
        probes,
        call_sites: plan.call_sites,
        inline: None,
        slots: Vec::new(),
        calls_emitted: 0,
    };
    // New locals: the frame token (time mode, functions that catch); the node, an
    // import's node and, in cost mode, the delta (the inline modes).
    use wasm_encoder::ValType::{I32, I64};
    let arena = probes.arena();
    let mut extra = match arena {
        None if facts.catches => vec![I32],
        None => vec![],
        Some(_) if plan.mode == crate::ProbeMode::Cost => vec![I32, I32, I64],
        Some(_) => vec![I32, I32],
    };
    // A function that tail-calls itself keeps where it came from (inline modes).
    let self_tail_at = (arena.is_some() && facts.self_tail).then(|| {
        let at = extra.len() as u32;
        extra.extend([I32, I32]);
        at
    });
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
    let token = (arena.is_none() && facts.catches).then_some(first_new);
    if let Some(arena) = arena {
        let locals = InlineLocals {
            node: first_new,
            import_node: first_new + 1,
            delta: (plan.mode == crate::ProbeMode::Cost).then_some(first_new + 2),
            self_tail: self_tail_at.map(|at| SelfTailLocals {
                came_from: first_new + at,
                via_self_tail: first_new + at + 1,
            }),
        };
        e.inline = Some((arena, locals));
    }
    e.enter(id, facts.slot_count, token);
    e.slots = std::mem::take(&mut facts.slots);
    let mut offsets = Vec::new();
    // Every branch to the function's outermost label now lands at the end of this block,
    // where the exit probe runs.
    e.instr(Instruction::Block(probes.wrapper_block(func.type_index)));
    let mut weights = facts.block_weights.iter().copied();
    e.add_cost(weights.next().unwrap_or(0));

    // Open blocks inside the function (the wrapper excluded); `true` where a catch clause
    // lands after the block's `end`.
    let mut blocks: Vec<bool> = Vec::new();
    // Parallel to `blocks`: which are loops.
    let mut loops: Vec<bool> = Vec::new();
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
        if is_call(&op) {
            e.call_site((start - base) as u32);
        }
        match &op {
            Operator::TryTable { try_table } => {
                for label in catch_labels(try_table) {
                    // Catch labels are relative to the block around the try_table; a loop
                    // target lands at the loop's head (see below).
                    match blocks.len().checked_sub(label + 1) {
                        Some(at) if !loops[at] => blocks[at] = true,
                        Some(_) => {}
                        None => wrapper_catches = true,
                    }
                }
                blocks.push(false);
                loops.push(false);
                e.out.extend_from_slice(original);
            }
            Operator::Loop { .. } => {
                blocks.push(false);
                loops.push(true);
                e.out.extend_from_slice(original);
                if facts.caught_loops.contains(&start) {
                    // Harmless on an ordinary iteration: no frame is above this one.
                    e.landing(token);
                }
            }
            Operator::Block { .. } | Operator::If { .. } | Operator::Try { .. } => {
                blocks.push(false);
                loops.push(false);
                e.out.extend_from_slice(original);
            }
            Operator::End if blocks.is_empty() => {
                // Closes the wrapper block; then the exit probe; then the function.
                e.instr(Instruction::End);
                if wrapper_catches {
                    e.landing(token);
                }
                e.exit(id);
                e.instr(Instruction::End);
                finished = true;
            }
            Operator::End | Operator::Delegate { .. } => {
                loops.pop();
                let caught_here = blocks.pop().unwrap_or(false);
                e.out.extend_from_slice(original);
                if caught_here {
                    e.landing(token);
                }
            }
            Operator::Catch { .. } | Operator::CatchAll => {
                e.out.extend_from_slice(original);
                e.landing(token);
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
                e.resume();
            }
            Operator::CallIndirect { .. } | Operator::CallRef { .. } => {
                e.flush_before_call();
                e.out.extend_from_slice(original);
                e.resume();
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
                if *function_index == id {
                    e.self_tail_call();
                }
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
