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

mod edges;
mod offsets;

pub use edges::{EdgeCounts, EdgeTable, EDGES_MEMORY};
use offsets::Added;
pub use offsets::CounterOffsets;

/// The exported counters' names: this prefix and the function's id in decimal.
pub const EXPORT_PREFIX: &str = "wprof:calls:";

/// Version of what [`count_entries`] writes: part of the key its compiled code is cached
/// under.
pub const VERSION: u32 = 3;

/// The module's sections in the order the format requires them; custom sections (0) may
/// come anywhere.
const ORDER: [u8; 13] = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
const TYPE: u8 = 1;
const FUNCTION: u8 = 3;
const MEMORY: u8 = 5;
const GLOBAL: u8 = 6;
const EXPORT: u8 = 7;
const CODE: u8 = 10;
const DATA: u8 = 11;
const DATA_COUNT: u8 = 12;

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
    let plan = edges::EdgePlan::of(&layout)?;
    let imports = layout.imported_funcs.len() as u32;
    let defined = layout.defined_funcs.len() as u32;
    let first_global = layout.globals;
    // The capture memory's index: after every memory of the module's; the edges' memory
    // after it.
    let capture_memory = (!captured.is_empty()).then_some(layout.memories);
    let edge_indices = edges::EdgeIndices {
        memory: layout.memories + u32::from(capture_memory.is_some()),
        from: first_global + defined,
        arc: imports + defined,
    };
    let added = Additions {
        layout: &layout,
        plan: &plan,
        edges: edge_indices,
        capture_memory,
        captured: &captured,
    };
    let sections = sections(module)?;
    let mut out = Vec::with_capacity(module.len() + module.len() / 8 + 64);
    out.extend_from_slice(&module[..8]);
    let mut places = Vec::new();
    let mut code_end = 0;
    let mut written = Vec::new();
    // The sections, then the end, before which any of ours the module lacks go.
    for section in sections.iter().map(Some).chain([None]) {
        // A section the format wants after ours: ours first, if the module has none.
        if let Some(r) = section.map_or(Some(usize::MAX), |s| rank(s.id)) {
            for &id in ORDER.iter().filter(|&&id| rank(id).unwrap() < r) {
                if written.contains(&id) || sections.iter().any(|s| s.id == id) {
                    continue;
                }
                written.push(id);
                if let Some(contents) = added.section(id, &[], 0)? {
                    put_section(&mut out, id, &contents);
                }
            }
        }
        let Some(section) = section else { break };
        let contents = &module[section.contents.clone()];
        written.push(section.id);
        if section.id == CODE {
            let (contents, at, appended) = added.code(&mut places)?;
            put_section(&mut out, CODE, &contents);
            let base = out.len() - contents.len();
            for place in &mut places[at..] {
                place.at += base;
            }
            // The module's code ends where `arc`, if any, starts: none of it is theirs.
            code_end = out.len() - appended;
            continue;
        }
        match added.section(section.id, contents, section.contents.start)? {
            Some(contents) => put_section(&mut out, section.id, &contents),
            None => put_section(&mut out, section.id, contents),
        }
    }
    Ok(CountedModule {
        bytes: out,
        offsets: CounterOffsets {
            added: places,
            code_end,
        },
        captured,
    })
}

/// What the counters add to a module's sections.
struct Additions<'a> {
    layout: &'a ModuleLayout<'a>,
    plan: &'a edges::EdgePlan,
    edges: edges::EdgeIndices,
    capture_memory: Option<u32>,
    captured: &'a [Capture],
}

impl Additions<'_> {
    /// Section `id`'s contents with ours added (`original`, at `offset`: the module's,
    /// empty if it has none); `None` where nothing is added.
    fn section(
        &self,
        id: u8,
        original: &[u8],
        offset: usize,
    ) -> Result<Option<Vec<u8>>, AgentError> {
        let layout = self.layout;
        let defined = layout.defined_funcs.len() as u32;
        let indirect = self.plan.counts_indirect();
        let contents = match id {
            TYPE if indirect => extended(original, offset, 1, |out| {
                out.extend_from_slice(&edges::ARC_TYPE)
            })?,
            FUNCTION if indirect => extended(original, offset, 1, |out| {
                (layout.types.len() as u32).encode(out)
            })?,
            MEMORY => {
                let memories = 1 + u32::from(self.capture_memory.is_some());
                extended(original, offset, memories, |out| {
                    if self.capture_memory.is_some() {
                        // Limits with a maximum: 1 page, 1 page.
                        out.extend_from_slice(&[0x01, 0x01, 0x01]);
                    }
                    let pages = self.plan.table.pages();
                    out.push(0x01);
                    pages.encode(out);
                    pages.encode(out);
                })?
            }
            GLOBAL => globals(original, offset, defined, indirect)?,
            EXPORT => exports(
                original,
                offset,
                layout.imported_funcs.len() as u32,
                layout.globals,
                defined,
                self.capture_memory,
                self.edges.memory,
            )?,
            DATA_COUNT if !original.is_empty() => {
                // One segment more: the count is the whole section.
                let count = BinaryReader::new(original, offset).read_var_u32()?;
                let mut out = Vec::with_capacity(5);
                (count + 1).encode(&mut out);
                out
            }
            DATA => extended(original, offset, 1, |out| {
                // Active, in the edges' memory, at 0.
                out.push(0x02);
                self.edges.memory.encode(out);
                Instruction::I32Const(0).encode(out);
                Instruction::End.encode(out);
                self.plan.table.data(&self.plan.pairs).encode(out);
            })?,
            _ => return Ok(None),
        };
        Ok(Some(contents))
    }

    /// The code section (see [`code`]), with `arc` after the module's bodies when indirect
    /// calls are counted; the places added go to `places`, from the index returned on,
    /// their `at` relative to the section's contents; and the bytes of `arc` at its end.
    fn code(&self, places: &mut Vec<Added>) -> Result<(Vec<u8>, usize, usize), AgentError> {
        let at = places.len();
        let captures = self.capture_memory.map(|memory| (memory, self.captured));
        let (contents, made) = code(self.layout, self.plan, self.edges, captures)?;
        places.extend(made);
        if self.plan.counts_indirect() {
            // The count, one more, then the bodies as they are and `arc`'s.
            let mut reader = BinaryReader::new(&contents, 0);
            let count = reader.read_var_u32()?;
            let bodies = reader.original_position();
            let mut arc = Vec::new();
            let body = self.edges.arc_body(self.plan.table);
            body.len().encode(&mut arc);
            arc.extend_from_slice(&body);
            let mut out = Vec::with_capacity(contents.len() + arc.len() + 5);
            (count + 1).encode(&mut out);
            let shift = out.len() as isize - bodies as isize;
            out.extend_from_slice(&contents[bodies..]);
            out.extend_from_slice(&arc);
            for place in &mut places[at..] {
                place.at = (place.at as isize + shift) as usize;
            }
            return Ok((out, at, arc.len()));
        }
        Ok((contents, at, 0))
    }
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

/// The global section with one `(mut i64)` counter, starting at 0, per defined function,
/// and with `indirect` the `(mut i32)` indirect sites announce their caller in.
fn globals(
    original: &[u8],
    offset: usize,
    defined: u32,
    indirect: bool,
) -> Result<Vec<u8>, AgentError> {
    extended(original, offset, defined + u32::from(indirect), |out| {
        for _ in 0..defined {
            // i64, mutable, (i64.const 0) end.
            out.extend_from_slice(&[0x7E, 0x01, 0x42, 0x00, 0x0B]);
        }
        if indirect {
            // i32, mutable, (i32.const 0) end.
            out.extend_from_slice(&[0x7F, 0x01, 0x41, 0x00, 0x0B]);
        }
    })
}

/// The export section with each counter exported under its function's id (the counters
/// are the globals from `first_global` on), the capture memory, if any, under
/// [`CAPTURE_MEMORY`], and the edges' memory under [`EDGES_MEMORY`].
fn exports(
    original: &[u8],
    offset: usize,
    imports: u32,
    first_global: u32,
    defined: u32,
    capture_memory: Option<u32>,
    edges_memory: u32,
) -> Result<Vec<u8>, AgentError> {
    if !original.is_empty() {
        let reader = wasmparser::ExportSectionReader::new(BinaryReader::new(original, offset))?;
        for export in reader {
            let export = export?;
            if export.name.starts_with(EXPORT_PREFIX)
                || [CAPTURE_MEMORY, EDGES_MEMORY].contains(&export.name)
            {
                return Err(AgentError::Unsupported {
                    what: format!("a module exporting `{}`, a name wprof uses", export.name),
                    offset,
                });
            }
        }
    }
    let added = defined + u32::from(capture_memory.is_some()) + 1;
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
        EDGES_MEMORY.encode(out);
        out.push(0x02);
        edges_memory.encode(out);
    })
}

/// The code section: each body's locals, its counter's increment (and in a function with
/// captures, their stores into the capture memory, `captures`' first; in a function a
/// table may reach, its look for an indirect caller), then its code as it was, with each
/// call site's count (see [`edges`]) and, in a Go function, the increment taken back
/// before it calls `runtime.morestack`, after which it starts over; and where the added
/// instructions are in it.
fn code(
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
        insertions.clear();
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
        if plan.taken[d] {
            entry.extend(edge_indices.look(id));
        }
        insertions.push((code_start, entry));
        if let Some(call) = restart {
            let take_back = vec![
                Instruction::GlobalGet(counter),
                Instruction::I64Const(1),
                Instruction::I64Sub,
                Instruction::GlobalSet(counter),
            ];
            insertions.push((call, take_back));
        }
        for site in &plan.sites[d] {
            match site.kind {
                edges::SiteKind::Direct(cell) => {
                    insertions.push((site.at, edge_indices.bump(plan.table, cell).to_vec()));
                }
                edges::SiteKind::Indirect { tail } => {
                    insertions.push((site.at, edge_indices.announce(id).to_vec()));
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

#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod tests;
