//! The first pass over a body: its basic blocks and their weights, whether it catches,
//! the slot of each call in the inline modes, and self tail calls; and the offsets of a
//! body's calls ([`call_sites`]).

use wasmparser::{BinaryReader, FunctionBody, Operator, OperatorsReader};

use crate::layout::ModuleLayout;
use crate::AgentError;

/// Whether the instruction after `op` starts a new basic block: control may arrive there
/// from elsewhere, or `op` may leave the straight line.
pub(super) fn ends_basic_block(op: &Operator<'_>) -> bool {
    use Operator::*;
    is_exception_handling(op)
        || matches!(
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
                | BrOnNull { .. }
                | BrOnNonNull { .. }
                | BrOnCast { .. }
                | BrOnCastFail { .. }
                | ReturnCall { .. }
                | ReturnCallIndirect { .. }
                | ReturnCallRef { .. }
        )
}

/// Whether `op` throws, catches or opens a block that may catch.
fn is_exception_handling(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        TryTable { .. }
            | Try { .. }
            | Catch { .. }
            | CatchAll
            | Delegate { .. }
            | Throw { .. }
            | ThrowRef
            | Rethrow { .. }
    )
}

/// What one execution of `op` adds to cost mode's count: 1 for every instruction but
/// `end`, which adds 0. (`wprof annotate` counts a line's instructions by the same rule.)
pub fn instruction_weight(op: &Operator<'_>) -> u64 {
    u64::from(!matches!(op, Operator::End))
}

/// What the first pass learns about a body.
pub(super) struct BodyFacts {
    /// Weights of the basic blocks, in order (cost mode).
    pub(super) block_weights: Vec<u64>,
    /// The body catches exceptions.
    pub(super) catches: bool,
    /// Inline modes: for each call instruction (`call*` and `return_call*`) in order, its
    /// slot in the node: one per call site when call sites are reported, else one per
    /// directly called function (so that recursion through two sites, like fib's, stays
    /// one path) and one per indirect call site.
    pub(super) slots: Vec<u32>,
    /// The number of distinct slots.
    pub(super) slot_count: u32,
    /// The function tail-calls itself (`return_call` of its own index).
    pub(super) self_tail: bool,
    /// Loops (by the offset of their `loop` instruction) that a `try_table` catch clause
    /// targets: a branch to a loop lands at its head, so the landing probe goes there.
    pub(super) caught_loops: std::collections::HashSet<usize>,
    /// The body is straight-line work of bounded length: no loop, no call of any kind, no
    /// exception handling, nothing whose cost grows with its operands or with another
    /// thread or the collector (see `unbounded`). Then it runs at most this many
    /// instructions (`end` excluded) per activation. `None` for every other body.
    pub(super) straight_length: Option<u32>,
    /// The body calls nothing: no call of any kind, no exception handling, nothing
    /// wasmtime carries out in its own code, no GC allocation (loops allowed). Compiled, it
    /// makes no call but the ones its probes add.
    pub(super) leaf: bool,
}

/// Whether `op` may keep an activation busy for longer than a bounded number of steps, or
/// leaves it other than by returning: a loop, a call, exception handling, an instruction
/// whose cost depends on its operands, waking or waiting for another thread, or a GC
/// allocation (which may start a collection).
fn unbounded(op: &Operator<'_>) -> bool {
    use Operator::*;
    is_call(op)
        || is_exception_handling(op)
        || runs_in_engine(op)
        || matches!(
            op,
            Loop { .. }
                | ArrayNew { .. }
                | ArrayNewDefault { .. }
                | ArrayNewData { .. }
                | ArrayNewElem { .. }
                | ArrayFill { .. }
                | ArrayCopy { .. }
                | ArrayInitData { .. }
                | ArrayInitElem { .. }
                // An allocation may start a collection.
                | StructNew { .. }
                | StructNewDefault { .. }
                | ArrayNewFixed { .. }
        )
}

/// Whether wasmtime carries `op` out in its own code rather than in the function's: bulk
/// memory and table operations, `memory.grow`, atomic waits and notifies. A tick of sample
/// mode's timer there has no program counter in the module to say which function runs.
pub(super) fn runs_in_engine(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        MemoryGrow { .. }
            | MemoryFill { .. }
            | MemoryCopy { .. }
            | MemoryInit { .. }
            | MemoryDiscard { .. }
            | TableGrow { .. }
            | TableFill { .. }
            | TableCopy { .. }
            | TableInit { .. }
            | MemoryAtomicWait32 { .. }
            | MemoryAtomicWait64 { .. }
            | MemoryAtomicNotify { .. }
    )
}

/// The labels a `try_table`'s catch clauses branch to.
pub(super) fn catch_labels(try_table: &wasmparser::TryTable) -> impl Iterator<Item = usize> + '_ {
    try_table.catches.iter().map(|catch| match *catch {
        wasmparser::Catch::One { label, .. }
        | wasmparser::Catch::OneRef { label, .. }
        | wasmparser::Catch::All { label }
        | wasmparser::Catch::AllRef { label } => label as usize,
    })
}

/// Whether `op` calls a function (and so has a call site, and a slot in the inline modes).
pub(super) fn is_call(op: &Operator<'_>) -> bool {
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

pub(super) fn scan(
    mut ops: OperatorsReader<'_>,
    call_sites: bool,
    id: u32,
) -> Result<BodyFacts, AgentError> {
    let mut facts = BodyFacts {
        block_weights: Vec::new(),
        catches: false,
        slots: Vec::new(),
        slot_count: 0,
        caught_loops: Default::default(),
        self_tail: false,
        straight_length: Some(0),
        leaf: true,
    };
    let mut slot_of_callee = std::collections::HashMap::new();
    // Open blocks: the offset of each that is a loop.
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut current = 0;
    while !ops.eof() {
        let start = ops.original_position();
        let op = ops.read()?;
        current += instruction_weight(&op);
        facts.straight_length = match facts.straight_length {
            Some(n) if !unbounded(&op) => Some(n + instruction_weight(&op) as u32),
            _ => None,
        };
        facts.leaf &= matches!(op, Operator::Loop { .. }) || !unbounded(&op);
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
