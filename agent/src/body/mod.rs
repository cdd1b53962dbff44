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
//! - with coverage ([`crate::ProbePlan::coverage`]), every basic block adds one to its own
//!   `u64` in the tree's memory before its first instruction; the body records where its
//!   blocks start ([`InstrumentedBody::blocks`]) and where each increment is, for the
//!   assembler to place the counters ([`InstrumentedBody::counter_sites`]);
//! - an allocator ([`crate::Allocators`]) keeps the parameters its role reports at entry
//!   and calls `wprof.alloc` before its exit probes; its tail calls become calls followed
//!   by a return, so that it reports after its callee;
//! - a function fault injection targets ([`crate::Injections`]) asks `wprof.inject(id)`
//!   after its entry probe whether this call runs, and returns the injected value (through
//!   its exit probe) when told to;
//! - in time mode, a `memory.atomic.wait32`/`wait64` is bracketed by `enter` and `exit` of
//!   [`crate::ProbeImports::WAIT_ID`], so that the time a thread waits is the wait's;
//! - in sample mode, the node running now is stored in the current-node cell at entry,
//!   around calls to imports, before instructions the engine carries out in its own code
//!   (`scan::runs_in_engine`) and wherever a catch lands; the body records which of its bytes
//!   are probes ([`InstrumentedBody::probe_code`]), which the assembled module carries in
//!   its `wprof.probe-code` section (see [`crate::ProbeCode`]).
//!
//! This file is the rewriting loop; `scan.rs` the first pass over a body; `counted.rs` which
//! functions time mode counts but does not time; `emitter.rs` the probe points every mode
//! shares; `dispatch.rs` a function's own body under live probes; `host_calls.rs` (time
//! mode), `inline_tree.rs`, `cost.rs`, `coverage.rs`, `sample.rs` and `timer.rs` (adaptive
//! mode) the instructions of each kind of probe.

mod allocs;
mod blocks;
mod cost;
mod counted;
mod coverage;
mod dispatch;
mod emitter;
mod go_frames;
mod host_calls;
mod inject;
mod inline_tree;
mod instrumented_body;
mod locals;
mod sample;
mod scan;
mod timer;

use wasm_encoder::Instruction;
use wasmparser::{BinaryReader, FunctionBody, Operator};

use crate::layout::ModuleLayout;
use crate::probe_map::ProbeLayout;
use crate::{AgentError, ProbePlan};
use dispatch::dispatch;
use emitter::{Emitter, InlineLocals, SelfTailLocals};
use locals::locals_with_extra;
use scan::{catch_labels, ends_basic_block, is_call, runs_in_engine, scan};

pub(crate) use allocs::extra_locals as alloc_locals;
pub use blocks::BlockCount;
pub(crate) use coverage::{padded_leb, patch as patch_counter};
pub use instrumented_body::InstrumentedBody;
pub(crate) use scan::call_sites;
pub use scan::instruction_weight;

/// The complement of `original` (sorted, not overlapping) within `from..to`.
fn complement(original: &[(u32, u32)], from: u32, to: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(original.len() + 1);
    let mut at = from;
    for &(start, end) in original {
        if start > at {
            out.push((at, start));
        }
        at = at.max(end);
    }
    if to > at {
        out.push((at, to));
    }
    out
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
    // An allocator is timed: its report goes to its own frame. One that returns its
    // result by a tail call to itself (a loop of them) does not report: making those calls
    // would grow the stack without bound.
    let role = plan
        .alloc_role(id)
        .filter(|role| !(plan.excludes(id) || role.uses_result() && facts.self_tail));
    // A function injected into asks the host at each call.
    let injected = plan.injection(id);
    let counted = role.is_none() && injected.is_none() && counted::is_counted(plan, &facts, id);
    let excluded = plan.excludes(id) || counted;

    let mut e = Emitter {
        out: Vec::with_capacity(func.body.len() + func.body.len() / 4 + 16),
        probes,
        call_sites: plan.call_sites,
        inline: None,
        slots: Vec::new(),
        calls_emitted: 0,
        original_code: Vec::new(),
        excluded,
        silent: plan.silences(id),
        counted,
        blocks: None,
        go_time: None,
        alloc: None,
        retry: None,
        retry_site: None,
    };
    // New locals: the frame token (time mode, functions that catch); the node, an
    // import's node and, in cost mode, the delta (the inline modes). An excluded function
    // (see `Selection`) keeps the slot it was reached through where the node would be.
    use wasm_encoder::ValType::{I32, I64};
    let arena = probes.arena();
    let mut extra = match arena {
        None if facts.catches && !excluded => vec![I32],
        None => vec![],
        Some(_) if plan.mode == crate::ProbeMode::Cost && !excluded => vec![I32, I32, I64],
        Some(_) => vec![I32, I32],
    };
    // A function that tail-calls itself keeps where it came from (inline modes).
    let self_tail_at = (arena.is_some() && facts.self_tail && !excluded).then(|| {
        let at = extra.len() as u32;
        extra.extend([I32, I32]);
        at
    });
    // A parameter that is no `i32` of this function is not captured.
    let captured = plan.captured().filter(|c| {
        c.function == id
            && layout
                .signature(func.type_index)
                .params
                .get(c.param as usize)
                == Some(&wasmparser::ValType::I32)
    });
    // Live probes, inline modes: the slot it came through. A captured function (an
    // interpreter's eval loop, which calls itself) too: at exit the current-node cell
    // names its caller again, so that the caller's time after the call is not the
    // callee's (see `crate::StateCapture`).
    let live = probes.switches().is_some() && !excluded;
    let came_at = ((live || captured.is_some() && !excluded) && arena.is_some()).then(|| {
        extra.push(I32);
        extra.len() as u32 - 1
    });
    // Adaptive mode: the activation's timer token.
    let timer_at = (probes.timed() && !excluded).then(|| {
        extra.push(I32);
        extra.len() as u32 - 1
    });
    // Time mode, a Go function with Go's signature: its result at an exit.
    let go_signature = {
        let sig = layout.signature(func.type_index);
        sig.params == [wasmparser::ValType::I32] && sig.results == [wasmparser::ValType::I32]
    };
    let go_time_at = (probes.go_time_global().is_some() && go_signature && !excluded).then(|| {
        extra.push(I32);
        extra.len() as u32 - 1
    });
    // A Go module's function: scratch for the goroutine table.
    let go_at = (arena.is_some_and(|a| a.go.is_some()) && !excluded).then(|| {
        extra.push(I32);
        extra.len() as u32 - 1
    });
    // An allocator: the parameters it reports and its result.
    let signature = layout.signature(func.type_index);
    let alloc_at = match role {
        Some(role) => {
            let at = extra.len() as u32;
            extra.extend(allocs::extra_locals(
                role,
                &signature.params,
                &signature.results,
                base,
            )?);
            Some((role, at))
        }
        None => None,
    };
    let mut offsets = Vec::new();
    // Live probes: the function's own body comes first (see `dispatch`), then its probed
    // copy's, which the rest of this function writes.
    let own_code = if live {
        e.out.extend_from_slice(&layout.bytes[base..code_start]);
        let begins = e.out.len() as u32;
        dispatch(
            &mut e,
            layout,
            probes,
            id,
            layout.signature(func.type_index).params.len() as u32,
            facts.self_tail,
            ops.clone(),
            base,
            &mut offsets,
        )?;
        Some(begins)
    } else {
        None
    };
    let probed_at = own_code.map(|_| e.out.len() as u32);
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
    let token = (arena.is_none() && facts.catches && !excluded).then_some(first_new);
    let code_begins = e.out.len() as u32;
    if let Some(arena) = arena {
        let locals = InlineLocals {
            node: first_new,
            import_node: first_new + 1,
            delta: (plan.mode == crate::ProbeMode::Cost && !excluded).then_some(first_new + 2),
            came: came_at.map(|at| first_new + at),
            timer: timer_at.map(|at| first_new + at),
            self_tail: self_tail_at.map(|at| SelfTailLocals {
                came_from: first_new + at,
                via_self_tail: first_new + at + 1,
            }),
            go: go_at.map(|at| locals::GoLocals {
                scratch: first_new + at,
                resumable: go_signature,
            }),
        };
        // A leaf's entry leaves for its retry function rather than call the finder (see
        // `Emitter::find_or_retry`): sample and cost mode, with nothing else at its entry
        // (a leaf has no call sites, catches nothing and never tail-calls itself).
        if facts.leaf
            && !excluded
            && role.is_none()
            && injected.is_none()
            && locals.came.is_none()
            && arena.go.is_none()
            && !probes.timed()
        {
            e.retry = Some(layout.signature(func.type_index).params.len() as u32);
        }
        e.inline = Some((arena, locals));
    }
    if let (Some(at), Some(told)) = (go_time_at, probes.go_time_global()) {
        e.go_time = Some(locals::GoTimeLocals {
            told,
            result: first_new + at,
        });
    }
    e.enter(id, facts.slot_count, token);
    if let (Some(capture), Some(arena)) = (captured, arena) {
        e.capture(arena, capture.param);
    }
    if let Some((role, at)) = alloc_at {
        e.alloc = Some(locals::AllocLocals::at(
            id,
            role,
            first_new + at,
            &signature.results,
        ));
        e.alloc_entry(&signature.params);
    }
    if let Some(value) = injected {
        e.inject_check(id, value);
    }
    if arena.is_some() && probes.coverage && !excluded {
        e.blocks = Some(Default::default());
    }
    e.slots = std::mem::take(&mut facts.slots);
    // Every branch to the function's outermost label now lands at the end of this block,
    // where the exit probe runs.
    e.instr(Instruction::Block(probes.wrapper_block(func.type_index)));
    let mut weights = facts.block_weights.iter().copied();
    e.begin_block((code_start - base) as u32, BlockCount::Counter);
    e.add_cost(weights.next().unwrap_or(0));

    // Open blocks inside the function (the wrapper excluded); `true` where a catch clause
    // lands after the block's `end`.
    let mut open: Vec<bool> = Vec::new();
    // Parallel to `open`: which are loops.
    let mut loops: Vec<bool> = Vec::new();
    let mut wrapper_catches = false;
    let mut finished = false;
    while !ops.eof() {
        let start = ops.original_position();
        let op = ops.read()?;
        let end = ops.original_position();
        let mut closed_loop = false;
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
        if runs_in_engine(&op) {
            e.before_engine_code();
        }
        match &op {
            Operator::TryTable { try_table } => {
                for label in catch_labels(try_table) {
                    // Catch labels are relative to the block around the try_table; a loop
                    // target lands at the loop's head (see below).
                    match open.len().checked_sub(label + 1) {
                        Some(at) if !loops[at] => open[at] = true,
                        Some(_) => {}
                        None => wrapper_catches = true,
                    }
                }
                open.push(false);
                loops.push(false);
                e.original(original);
            }
            Operator::Loop { .. } => {
                open.push(false);
                loops.push(true);
                e.original(original);
                if facts.caught_loops.contains(&start) {
                    // Harmless on an ordinary iteration: no frame is above this one.
                    e.landing(token);
                }
            }
            Operator::Block { .. } | Operator::If { .. } | Operator::Try { .. } => {
                open.push(false);
                loops.push(false);
                e.original(original);
            }
            Operator::End if open.is_empty() => {
                // Closes the wrapper block; then the exit probe; then the function.
                e.instr(Instruction::End);
                if wrapper_catches {
                    e.landing(token);
                }
                e.alloc_report();
                e.exit(id);
                // The function's own end (its return) is the original's.
                e.original_instr(Instruction::End);
                finished = true;
            }
            Operator::End | Operator::Delegate { .. } => {
                closed_loop = loops.pop() == Some(true) && matches!(op, Operator::End);
                let caught_here = open.pop().unwrap_or(false);
                e.original(original);
                if caught_here {
                    e.landing(token);
                }
            }
            Operator::Catch { .. } | Operator::CatchAll => {
                e.original(original);
                e.landing(token);
            }
            Operator::Return => {
                e.alloc_report();
                e.exit(id);
                e.original(original);
            }
            // An allocator whose report holds its result reports after its callee: its
            // tail calls become calls. (A `free` reports before its tail calls.)
            Operator::ReturnCall { function_index } if e.alloc_needs_result() => {
                if *function_index < probes.imported_funcs {
                    e.probed_import_call(*function_index);
                } else {
                    e.flush_before_call();
                    e.original_instr(Instruction::Call(probes.renumber(*function_index)));
                    e.after_call();
                }
                e.alloc_report();
                e.exit(id);
                e.original_instr(Instruction::Return);
            }
            Operator::ReturnCallIndirect {
                type_index,
                table_index,
            } if e.alloc_needs_result() => {
                e.flush_before_call();
                e.original_instr(Instruction::CallIndirect {
                    type_index: *type_index,
                    table_index: *table_index,
                });
                e.after_call();
                e.alloc_report();
                e.exit(id);
                e.original_instr(Instruction::Return);
            }
            Operator::ReturnCallRef { type_index } if e.alloc_needs_result() => {
                e.flush_before_call();
                e.original_instr(Instruction::CallRef(*type_index));
                e.after_call();
                e.alloc_report();
                e.exit(id);
                e.original_instr(Instruction::Return);
            }
            Operator::Call { function_index } if *function_index < probes.imported_funcs => {
                e.probed_import_call(*function_index);
            }
            // No store of the current node after a call between the module's functions:
            // sample mode's sampler reads the program counter, which says when the caller
            // runs again (see the host's `run::inline::attribution`).
            Operator::Call { function_index } => {
                e.flush_before_call();
                let callee = layout
                    .defined_funcs
                    .get((*function_index - probes.imported_funcs) as usize)
                    .ok_or_else(|| AgentError::Unsupported {
                        what: format!("a call to function {function_index}, which is not defined"),
                        offset: start,
                    })?;
                e.call_defined(
                    *function_index,
                    callee.type_index,
                    plan.excludes(*function_index),
                );
                e.after_call();
            }
            Operator::CallIndirect { .. } | Operator::CallRef { .. } => {
                e.flush_before_call();
                e.original(original);
                e.after_call();
            }
            Operator::Throw { .. } | Operator::ThrowRef | Operator::Rethrow { .. } => {
                // The frames this throw unwinds lose their locals: their counts go in now.
                e.flush();
                e.original(original);
            }
            Operator::ReturnCall { function_index } if *function_index < probes.imported_funcs => {
                // The import is not instrumented, so it cannot close the caller's frame:
                // make it an ordinary call followed by a return.
                e.probed_import_call(*function_index);
                e.alloc_report();
                e.exit(id);
                e.original_instr(Instruction::Return);
            }
            Operator::ReturnCall { function_index } => {
                e.alloc_report();
                if *function_index == id {
                    e.self_tail_call();
                }
                e.tail_to(id, *function_index, plan.excludes(*function_index));
                e.original_instr(Instruction::ReturnCall(probes.renumber(*function_index)));
            }
            Operator::ReturnCallIndirect { .. } | Operator::ReturnCallRef { .. } => {
                e.alloc_report();
                e.tail(id);
                e.original(original);
            }
            Operator::RefFunc { function_index } => {
                e.original_instr(Instruction::RefFunc(probes.renumber(*function_index)));
            }
            Operator::MemoryAtomicWait32 { .. } | Operator::MemoryAtomicWait64 { .. } => {
                e.atomic_wait(original);
            }
            _ => e.original(original),
        }
        if !finished && ends_basic_block(&op) {
            e.begin_block((end - base) as u32, BlockCount::after(&op, closed_loop));
            e.add_cost(weights.next().unwrap_or(0));
        }
    }
    if !finished {
        return Err(AgentError::Unsupported {
            what: "a function body without its final `end`".to_string(),
            offset: func.body.end,
        });
    }
    let end = e.out.len() as u32;
    let probe_code = match (own_code, probed_at) {
        (Some(own_begins), Some(at)) => {
            let split = e.original_code.partition_point(|&(start, _)| start < at);
            let mut code = complement(&e.original_code[..split], own_begins, at);
            code.extend(complement(&e.original_code[split..], code_begins, end));
            code
        }
        _ => complement(&e.original_code, code_begins, end),
    };
    let map = e.blocks.unwrap_or_default();
    Ok(InstrumentedBody {
        bytes: e.out,
        probed_at,
        offsets,
        probe_code,
        blocks: map.blocks,
        counter_sites: map.counter_sites,
        retry_site: e.retry_site,
    })
}
