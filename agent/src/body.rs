//! Rewriting one function body: probes in, every other instruction copied byte for byte.

use wasm_encoder::{Encode, Instruction};
use wasmparser::{BinaryReader, FunctionBody, Operator};

use crate::layout::ModuleLayout;
use crate::probe_map::ProbeLayout;
use crate::{AgentError, ProbePlan};

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
}

impl Emitter<'_> {
    fn instr(&mut self, instr: Instruction<'_>) {
        instr.encode(&mut self.out);
    }

    fn probe(&mut self, probe: u32, id: u32) {
        self.instr(Instruction::I32Const(id as i32));
        self.instr(Instruction::Call(probe));
    }

    fn enter(&mut self, id: u32) {
        self.probe(self.probes.enter(), id);
    }

    fn exit(&mut self, id: u32) {
        self.probe(self.probes.exit(), id);
    }

    /// A direct call to imported function `import`, bracketed so it is its own node.
    fn probed_import_call(&mut self, import: u32) {
        self.enter(import);
        self.instr(Instruction::Call(import));
        self.exit(import);
    }
}

/// Rewrites the body of the `defined`-th defined function (see the crate docs for what the
/// probes are).
pub(crate) fn instrument_body(
    layout: &ModuleLayout<'_>,
    probes: &ProbeLayout,
    _plan: &ProbePlan,
    defined: u32,
) -> Result<InstrumentedBody, AgentError> {
    let func = &layout.defined_funcs[defined as usize];
    let id = layout.function_id(defined);
    let base = func.body.start;
    let body = FunctionBody::new(BinaryReader::new(&layout.bytes[func.body.clone()], base));
    let mut ops = body.get_operators_reader()?;
    let code_start = ops.original_position();

    let mut e = Emitter {
        out: Vec::with_capacity(func.body.len() + func.body.len() / 4 + 16),
        probes,
    };
    // Locals are unchanged.
    e.out.extend_from_slice(&layout.bytes[base..code_start]);
    let mut offsets = Vec::new();

    e.enter(id);
    // Every branch to the function's outermost label now lands at the end of this block,
    // where the exit probe runs.
    e.instr(Instruction::Block(probes.wrapper_block(func.type_index)));

    // Open blocks inside the function (the function's own label excluded).
    let mut depth: u32 = 0;
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
        match op {
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Try { .. }
            | Operator::TryTable { .. } => {
                depth += 1;
                e.out.extend_from_slice(original);
            }
            Operator::End if depth == 0 => {
                // Closes the wrapper block; then the exit probe; then the function.
                e.instr(Instruction::End);
                e.exit(id);
                e.instr(Instruction::End);
                finished = true;
            }
            Operator::End | Operator::Delegate { .. } => {
                depth -= 1;
                e.out.extend_from_slice(original);
            }
            Operator::Return => {
                e.exit(id);
                e.out.extend_from_slice(original);
            }
            Operator::Call { function_index } if function_index < probes.imported_funcs => {
                e.probed_import_call(function_index);
            }
            Operator::Call { function_index } => {
                e.instr(Instruction::Call(probes.renumber(function_index)));
            }
            Operator::ReturnCall { function_index } if function_index < probes.imported_funcs => {
                // The import is not instrumented, so it cannot close the caller's frame:
                // make it an ordinary call followed by a return.
                e.probed_import_call(function_index);
                e.exit(id);
                e.instr(Instruction::Return);
            }
            Operator::ReturnCall { function_index } => {
                e.probe(probes.tail(), id);
                e.instr(Instruction::ReturnCall(probes.renumber(function_index)));
            }
            Operator::ReturnCallIndirect { .. } | Operator::ReturnCallRef { .. } => {
                e.probe(probes.tail(), id);
                e.out.extend_from_slice(original);
            }
            Operator::RefFunc { function_index } => {
                e.instr(Instruction::RefFunc(probes.renumber(function_index)));
            }
            _ => e.out.extend_from_slice(original),
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
