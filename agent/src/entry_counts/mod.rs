//! Entry counters: the module as it is, but each defined function's first instructions add
//! one to a mutable `i64` global of its own, exported as [`EXPORT_PREFIX`] followed by the
//! function's id. Stack mode's exact calls per function, for a load, an add and a store per
//! call (measured on recursive fib(38): 1.06x its plain time).
//!
//! Nothing else changes: no import, no function, no memory is added, so every function
//! keeps its index and the compiled module's code is the original's but for those four
//! instructions at each entry. Bodies are copied byte for byte after them, and every other
//! section as it is (the global and export sections gain entries at their ends, or are
//! added where the format wants them). A thread instantiating the module again counts in
//! its own instance's globals.
//!
//! A Go module re-enters a goroutine's frames when it resumes it (see
//! [`crate::ContextArena::go_table`]): a function with Go's calling convention adds one only
//! when its resume point (`PC_B`, local 0) is 0, a call rather than a resumption, and takes
//! it back when it calls `runtime.morestack`, after which it starts over at 0. The
//! counts are then those of the inline modes, whose probes follow the goroutines.

use std::ops::Range;

use wasm_encoder::{Encode, Instruction};
use wasmparser::{BinaryReader, FunctionBody};

use crate::layout::ModuleLayout;
use crate::AgentError;

mod offsets;

use offsets::Added;
pub use offsets::CounterOffsets;

/// The exported counters' names: this prefix and the function's id in decimal.
pub const EXPORT_PREFIX: &str = "wprof:calls:";

/// Version of what [`count_entries`] writes: part of the key its compiled code is cached
/// under.
pub const VERSION: u32 = 2;

/// The module's sections in the order the format requires them; custom sections (0) may
/// come anywhere.
const ORDER: [u8; 13] = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
const MEMORY: u8 = 5;
const GLOBAL: u8 = 6;
const EXPORT: u8 = 7;
const CODE: u8 = 10;

fn rank(id: u8) -> Option<usize> {
    ORDER.iter().position(|&i| i == id)
}

/// One section of the original: its id and the range of its contents.
struct Section {
    id: u8,
    contents: Range<usize>,
}

fn sections(bytes: &[u8]) -> Result<Vec<Section>, AgentError> {
    let mut reader = BinaryReader::new(bytes, 0);
    reader.skip(|r| r.read_bytes(8).map(|_| ()))?;
    let mut out = Vec::new();
    while !reader.eof() {
        let id = reader.read_u8()?;
        let size = reader.read_var_u32()? as usize;
        let start = reader.original_position();
        reader.read_bytes(size)?;
        out.push(Section {
            id,
            contents: start..start + size,
        });
    }
    Ok(out)
}

/// A module with entry counters, and where its code came from.
#[derive(Debug)]
pub struct CountedModule {
    /// The module's bytes.
    pub bytes: Vec<u8>,
    /// Where the counters' instructions are, to tell offsets in the original's terms.
    pub offsets: CounterOffsets,
    /// The captures made (those asked for that fit the module).
    pub captured: Vec<Capture>,
}

/// The memory a counted module with captures defines and exports under this name: one
/// page, whose `u32` at `4 * slot` holds each capture's last value (see [`Capture`]).
pub const CAPTURE_MEMORY: &str = "wprof:captures";

/// A parameter kept at each entry of a function: the first instructions of function
/// `function` (an id) also store its `i32` parameter `param` at `4 * slot` in
/// [`CAPTURE_MEMORY`], where the host reads it while the program runs (an interpreter's
/// eval loop, whose first parameter is the state a frame reader starts from). Each thread's
/// instance has its own memory, so each thread its own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capture {
    /// The function, by id (imports counted).
    pub function: u32,
    /// Its parameter kept, an `i32`.
    pub param: u32,
    /// Where it is kept: the `u32` at `4 * slot`.
    pub slot: u32,
}

/// Slots of [`CAPTURE_MEMORY`] (its one page, 4 bytes each).
pub const CAPTURE_SLOTS: u32 = 16384;

/// `module` with an entry counter in every defined function (see the module docs).
pub fn count_entries(module: &[u8]) -> Result<CountedModule, AgentError> {
    count_entries_capturing(module, &[])
}

/// `module` with an entry counter in every defined function and the `captures` that fit it
/// (a defined function, an `i32` parameter, a slot in the page); with none that fit, the
/// module adds no memory.
pub fn count_entries_capturing(
    module: &[u8],
    captures: &[Capture],
) -> Result<CountedModule, AgentError> {
    let layout = ModuleLayout::parse(module)?;
    let captured: Vec<Capture> = captures
        .iter()
        .copied()
        .filter(|c| {
            c.slot < CAPTURE_SLOTS
                && c.function
                    .checked_sub(layout.imported_funcs.len() as u32)
                    .and_then(|d| layout.defined_funcs.get(d as usize))
                    .is_some_and(|f| {
                        layout.signature(f.type_index).params.get(c.param as usize)
                            == Some(&wasmparser::ValType::I32)
                    })
        })
        .collect();
    // The capture memory's index: after every memory of the module's.
    let capture_memory = (!captured.is_empty()).then_some(layout.memories);
    let sections = sections(module)?;
    let imports = layout.imported_funcs.len() as u32;
    let defined = layout.defined_funcs.len() as u32;
    let first_global = layout.globals;
    let mut out = Vec::with_capacity(module.len() + module.len() / 16 + 64);
    out.extend_from_slice(&module[..8]);
    let mut wrote_memories = capture_memory.is_none();
    let mut wrote_globals = false;
    let mut wrote_exports = false;
    let mut added = Vec::new();
    let mut code_end = 0;
    // The sections, then the end, before which any of ours not written yet go.
    for section in sections.iter().map(Some).chain([None]) {
        // A section the format wants after ours: ours first, if the module has none.
        if let Some(r) = section.map_or(Some(usize::MAX), |s| rank(s.id)) {
            if !wrote_memories && r > rank(MEMORY).unwrap() {
                put_section(&mut out, MEMORY, &capture_page(&[], 0)?);
                wrote_memories = true;
            }
            if !wrote_globals && r > rank(GLOBAL).unwrap() {
                put_section(&mut out, GLOBAL, &globals(&[], 0, defined)?);
                wrote_globals = true;
            }
            if !wrote_exports && r > rank(EXPORT).unwrap() {
                put_section(
                    &mut out,
                    EXPORT,
                    &exports(&[], 0, imports, first_global, defined, capture_memory)?,
                );
                wrote_exports = true;
            }
        }
        let Some(section) = section else { break };
        let contents = &module[section.contents.clone()];
        match section.id {
            MEMORY if !wrote_memories => {
                put_section(
                    &mut out,
                    MEMORY,
                    &capture_page(contents, section.contents.start)?,
                );
                wrote_memories = true;
            }
            GLOBAL => {
                put_section(
                    &mut out,
                    GLOBAL,
                    &globals(contents, section.contents.start, defined)?,
                );
                wrote_globals = true;
            }
            EXPORT => {
                put_section(
                    &mut out,
                    EXPORT,
                    &exports(
                        contents,
                        section.contents.start,
                        imports,
                        first_global,
                        defined,
                        capture_memory,
                    )?,
                );
                wrote_exports = true;
            }
            CODE => {
                let captures = capture_memory.map(|memory| (memory, captured.as_slice()));
                let (contents, places) = code(&layout, first_global, captures)?;
                put_section(&mut out, CODE, &contents);
                let base = out.len() - contents.len();
                added = places
                    .into_iter()
                    .map(|a| Added {
                        at: base + a.at,
                        ..a
                    })
                    .collect();
                code_end = out.len();
            }
            id => put_section(&mut out, id, contents),
        }
    }
    Ok(CountedModule {
        bytes: out,
        offsets: CounterOffsets { added, code_end },
        captured,
    })
}

fn put_section(out: &mut Vec<u8>, id: u8, contents: &[u8]) {
    out.push(id);
    contents.len().encode(out);
    out.extend_from_slice(contents);
}

/// A vector section's contents with `added` entries after the original's (`original`,
/// at `offset` in the module; empty for none): the new count, the old entries as they are.
fn extended(
    original: &[u8],
    offset: usize,
    added: u32,
    write: impl FnOnce(&mut Vec<u8>),
) -> Result<Vec<u8>, AgentError> {
    let (count, entries) = if original.is_empty() {
        (0, &original[..0])
    } else {
        let mut reader = BinaryReader::new(original, offset);
        let count = reader.read_var_u32()?;
        let at = reader.original_position() - offset;
        (count, &original[at..])
    };
    let total = count.checked_add(added).ok_or(AgentError::Unsupported {
        what: "a module with more than 2^32 globals or exports".to_string(),
        offset,
    })?;
    let mut out = Vec::with_capacity(original.len() + added as usize * 20 + 5);
    total.encode(&mut out);
    out.extend_from_slice(entries);
    write(&mut out);
    Ok(out)
}

/// The memory section with the capture memory after the module's: one page, at most one.
fn capture_page(original: &[u8], offset: usize) -> Result<Vec<u8>, AgentError> {
    extended(original, offset, 1, |out| {
        // Limits with a maximum: 1 page, 1 page.
        out.extend_from_slice(&[0x01, 0x01, 0x01]);
    })
}

/// The global section with one `(mut i64)` counter, starting at 0, per defined function.
fn globals(original: &[u8], offset: usize, defined: u32) -> Result<Vec<u8>, AgentError> {
    extended(original, offset, defined, |out| {
        for _ in 0..defined {
            // i64, mutable, (i64.const 0) end.
            out.extend_from_slice(&[0x7E, 0x01, 0x42, 0x00, 0x0B]);
        }
    })
}

/// The export section with each counter exported under its function's id (the counters
/// are the globals from `first_global` on), and the capture memory, if any, under
/// [`CAPTURE_MEMORY`].
fn exports(
    original: &[u8],
    offset: usize,
    imports: u32,
    first_global: u32,
    defined: u32,
    capture_memory: Option<u32>,
) -> Result<Vec<u8>, AgentError> {
    if !original.is_empty() {
        let reader = wasmparser::ExportSectionReader::new(BinaryReader::new(original, offset))?;
        for export in reader {
            let export = export?;
            if export.name.starts_with(EXPORT_PREFIX) || export.name == CAPTURE_MEMORY {
                return Err(AgentError::Unsupported {
                    what: format!("a module exporting `{}`, a name wprof uses", export.name),
                    offset,
                });
            }
        }
    }
    let added = defined + u32::from(capture_memory.is_some());
    extended(original, offset, added, |out| {
        for d in 0..defined {
            format!("{EXPORT_PREFIX}{}", imports + d)
                .as_str()
                .encode(out);
            // A global, its index.
            out.push(0x03);
            (first_global + d).encode(out);
        }
        if let Some(memory) = capture_memory {
            CAPTURE_MEMORY.encode(out);
            // A memory, its index.
            out.push(0x02);
            memory.encode(out);
        }
    })
}

/// The code section: each body's locals, its counter's increment (and in a function with
/// captures, their stores into the capture memory, `captures`' first), then its code as it
/// was (in a Go function, with the increment taken back before it calls
/// `runtime.morestack`, after which it starts over); and where the added instructions are
/// in it.
fn code(
    layout: &ModuleLayout<'_>,
    first_global: u32,
    captures: Option<(u32, &[Capture])>,
) -> Result<(Vec<u8>, Vec<Added>), AgentError> {
    let bodies = &layout.defined_funcs;
    let size: usize = bodies.iter().map(|f| f.body.len() + 24).sum();
    let mut out = Vec::with_capacity(size + 5);
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
    for (d, func) in bodies.iter().enumerate() {
        let base = func.body.start;
        let bytes = &layout.bytes[func.body.clone()];
        let reader = FunctionBody::new(BinaryReader::new(bytes, base));
        let code_start = reader
            .get_binary_reader_for_operators()?
            .original_position();
        let counter = first_global + d as u32;
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
        let restart = match resumable && !morestack.is_empty() && !morestack.contains(&id) {
            true => first_call_to(&reader, &morestack)?,
            false => None,
        };
        body.clear();
        let mut copied = base;
        let mut add = |body: &mut Vec<u8>, before: usize, instructions: &[Instruction<'_>]| {
            body.extend_from_slice(&layout.bytes[copied..before]);
            copied = before;
            let at = body.len();
            for i in instructions {
                i.encode(body);
            }
            (at, body.len() - at, before)
        };
        let mut places = Vec::with_capacity(2);
        let mut entry: Vec<Instruction<'_>> = match resumable {
            true => vec![
                Instruction::GlobalGet(counter),
                Instruction::LocalGet(0),
                Instruction::I32Eqz,
                Instruction::I64ExtendI32U,
                Instruction::I64Add,
                Instruction::GlobalSet(counter),
            ],
            false => vec![
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
        places.push(add(&mut body, code_start, &entry));
        if let Some(call) = restart {
            let take_back = [
                Instruction::GlobalGet(counter),
                Instruction::I64Const(1),
                Instruction::I64Sub,
                Instruction::GlobalSet(counter),
            ];
            places.push(add(&mut body, call, &take_back));
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

#[cfg(test)]
mod tests;
