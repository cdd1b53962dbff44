//! The counted module's code section: each body as it was, with the counters' instructions
//! inserted where they go, and where they are.

use wasm_encoder::{Encode, Instruction};
use wasmparser::{BinaryReader, FunctionBody};

use super::edges;
use super::offsets::Added;
use super::Capture;
use crate::layout::ModuleLayout;
use crate::AgentError;

/// The code section: each body's locals, its counter's increment (and in a function with
/// captures, their stores into the capture memory, `captures`' first; in a function a
/// table may reach, its look for an indirect caller), then its code as it was, with each
/// call site's count (see [`super::edges`]) and, in a Go function, the increment taken back
/// before it calls `runtime.morestack`, after which it starts over; and where the added
/// instructions are in it.
pub(super) fn code(
    layout: &ModuleLayout<'_>,
    plan: &edges::EdgePlan,
    edge_indices: edges::EdgeIndices,
    captures: Option<(u32, &[Capture])>,
) -> Result<(Vec<u8>, Vec<Added>), AgentError> {
    let first_global = layout.globals;
    let bodies = &layout.defined_funcs;
    let size: usize = bodies.iter().map(|f| f.body.len() + 24).sum();
    let mut out = Vec::with_capacity(size + size / 8 + 5);
    (bodies.len() as u32).encode(&mut out);
    let morestack: Vec<u32> = match layout.go {
        true => layout
            .names
            .iter()
            .filter(|(_, name)| {
                matches!(
                    name.as_str(),
                    "runtime.morestack" | "runtime.morestack_noctxt"
                )
            })
            .map(|(&id, _)| id)
            .collect(),
        false => Vec::new(),
    };
    let mut body = Vec::new();
    let mut added = Vec::with_capacity(bodies.len());
    // Instructions to add, each before the original's instruction at its offset.
    let mut insertions: Vec<(usize, Vec<Instruction<'_>>)> = Vec::new();
    let mut counter = first_global;
    for (d, func) in bodies.iter().enumerate() {
        let base = func.body.start;
        let bytes = &layout.bytes[func.body.clone()];
        let reader = FunctionBody::new(BinaryReader::new(bytes, base));
        let code_start = reader
            .get_binary_reader_for_operators()?
            .original_position();
        let counted = plan.counted[d];
        // Go's calling convention, `(PC_B i32) -> (i32)`: a resumption is not a call. But
        // `runtime.goexit`, a goroutine's first frame, is entered once, when the
        // goroutine's function returns into it (a resumption): that is its call.
        let id = layout.function_id(d as u32);
        let resumable =
            layout.go && layout.names.get(&id).map(String::as_str) != Some("runtime.goexit") && {
                let sig = layout.signature(func.type_index);
                sig.params == [wasmparser::ValType::I32]
                    && sig.results == [wasmparser::ValType::I32]
            };
        // `morestack_noctxt` calling `morestack` is not stopped by it.
        let restart = match counted && resumable && !morestack.contains(&id) {
            true => first_call_to(&reader, &morestack)?,
            false => None,
        };
        insertions.clear();
        let mut entry: Vec<Instruction<'_>> = match (counted, resumable) {
            (false, _) => Vec::new(),
            (true, true) => vec![
                Instruction::GlobalGet(counter),
                Instruction::LocalGet(0),
                Instruction::I32Eqz,
                Instruction::I64ExtendI32U,
                Instruction::I64Add,
                Instruction::GlobalSet(counter),
            ],
            (true, false) => vec![
                Instruction::GlobalGet(counter),
                Instruction::I64Const(1),
                Instruction::I64Add,
                Instruction::GlobalSet(counter),
            ],
        };
        if let Some((memory, captures)) = captures {
            for c in captures.iter().filter(|c| c.function == id) {
                entry.extend([
                    Instruction::I32Const(0),
                    Instruction::LocalGet(c.param),
                    Instruction::I32Store(wasm_encoder::MemArg {
                        offset: u64::from(c.slot) * 4,
                        align: 2,
                        memory_index: memory,
                    }),
                ]);
            }
        }
        entry.extend(edge_indices.look(id, plan.looks[d], resumable));
        // Even when empty: every body's first place anchors the map of its offsets.
        insertions.push((code_start, entry));
        if let Some(call) = restart {
            let mut take_back = vec![
                Instruction::GlobalGet(counter),
                Instruction::I64Const(1),
                Instruction::I64Sub,
                Instruction::GlobalSet(counter),
            ];
            take_back.extend(edge_indices.restarting(id));
            insertions.push((call, take_back));
        }
        counter += u32::from(counted);
        for site in &plan.sites[d] {
            match site.kind {
                edges::SiteKind::Direct(cell) => {
                    insertions.push((site.at, edge_indices.bump(plan.table, cell).to_vec()));
                }
                edges::SiteKind::Slot { block, local } => {
                    let block = plan.blocks[block as usize];
                    let kind = &plan.kinds[block.kind as usize];
                    let count = edge_indices.count_slot(kind, block, local);
                    insertions.push((site.at, count.to_vec()));
                }
                edges::SiteKind::Indirect { number, tail } => {
                    insertions.push((site.at, edge_indices.announce(number).to_vec()));
                    if !tail {
                        insertions.push((site.next, edge_indices.forget().to_vec()));
                    }
                }
            }
        }
        // In order; at one offset, in the order pushed (the take-back before the count).
        insertions.sort_by_key(|(at, _)| *at);
        body.clear();
        let mut copied = base;
        // With a local added: the locals' declarations that say so, in place of the
        // original's (the map of offsets starts at the code, below them).
        if let Some(header) = &plan.locals[d] {
            body.extend_from_slice(header);
            copied = code_start;
        }
        let mut places: Vec<(usize, usize, usize)> = Vec::with_capacity(insertions.len());
        for (before, instructions) in &insertions {
            body.extend_from_slice(&layout.bytes[copied..*before]);
            copied = *before;
            let at = body.len();
            for i in instructions {
                i.encode(&mut body);
            }
            match places.last_mut() {
                // One place for what goes before one instruction.
                Some(last) if last.2 == *before => last.1 += body.len() - at,
                _ => places.push((at, body.len() - at, *before)),
            }
        }
        body.extend_from_slice(&layout.bytes[copied..func.body.end]);
        body.len().encode(&mut out);
        added.extend(places.into_iter().map(|(at, len, before)| Added {
            at: out.len() + at,
            len,
            before,
        }));
        out.extend_from_slice(&body);
    }
    Ok((out, added))
}

/// The offset of the body's first call to one of `functions`, if any.
fn first_call_to(body: &FunctionBody<'_>, functions: &[u32]) -> Result<Option<usize>, AgentError> {
    let mut operators = body.get_operators_reader()?;
    while !operators.eof() {
        let (operator, at) = operators.read_with_offset()?;
        if let wasmparser::Operator::Call { function_index } = operator {
            if functions.contains(&function_index) {
                return Ok(Some(at));
            }
        }
    }
    Ok(None)
}
