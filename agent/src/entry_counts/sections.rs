//! The counted module's sections: the original's, in order, each with what the counters
//! add to it (see [`Additions`]), and ours where the module has none.

use std::ops::Range;

use wasm_encoder::{Encode, Instruction};
use wasmparser::BinaryReader;

use super::edges;
use super::offsets::{Added, CounterOffsets};
use super::{Capture, CAPTURE_MEMORY, EDGES_MEMORY, EXPORT_PREFIX, FUNCTIONS_PREFIX};
use crate::layout::ModuleLayout;
use crate::AgentError;

/// The module's sections in the order the format requires them; custom sections (0) may
/// come anywhere.
pub(super) const ORDER: [u8; 13] = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
const TYPE: u8 = 1;
const FUNCTION: u8 = 3;
const MEMORY: u8 = 5;
const GLOBAL: u8 = 6;
const EXPORT: u8 = 7;
pub(super) const CODE: u8 = 10;
const DATA: u8 = 11;
const DATA_COUNT: u8 = 12;

pub(super) fn rank(id: u8) -> Option<usize> {
    ORDER.iter().position(|&i| i == id)
}

/// One section of the original: its id and the range of its contents.
pub(super) struct Section {
    id: u8,
    contents: Range<usize>,
}

pub(super) fn sections(bytes: &[u8]) -> Result<Vec<Section>, AgentError> {
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

/// `module` with what `added` adds, and where the added instructions are.
pub(super) fn write(
    module: &[u8],
    added: &Additions<'_>,
) -> Result<(Vec<u8>, CounterOffsets), AgentError> {
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
    Ok((
        out,
        CounterOffsets {
            added: places,
            code_end,
        },
    ))
}

/// What the counters add to a module's sections.
pub(super) struct Additions<'a> {
    pub(super) layout: &'a ModuleLayout<'a>,
    pub(super) plan: &'a edges::EdgePlan,
    pub(super) edges: edges::EdgeIndices,
    pub(super) capture_memory: Option<u32>,
    pub(super) captured: &'a [Capture],
}

impl Additions<'_> {
    /// Entry counters: one per function that keeps one (see [`edges::EdgePlan::counted`]).
    fn counters(&self) -> u32 {
        self.plan.counted.iter().filter(|&&c| c).count() as u32
    }

    /// Section `id`'s contents with ours added (`original`, at `offset`: the module's,
    /// empty if it has none); `None` where nothing is added.
    fn section(
        &self,
        id: u8,
        original: &[u8],
        offset: usize,
    ) -> Result<Option<Vec<u8>>, AgentError> {
        let layout = self.layout;
        let arc = self.plan.has_arc();
        let contents = match id {
            TYPE if arc => extended(original, offset, 1, |out| {
                out.extend_from_slice(&edges::ARC_TYPE)
            })?,
            FUNCTION if arc => extended(original, offset, 1, |out| {
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
            GLOBAL => {
                let added = u32::from(self.plan.counts_indirect())
                    + u32::from(self.edges.restart.is_some());
                globals(original, offset, self.counters(), added)?
            }
            EXPORT => exports(original, offset, self)?,
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
                self.plan.table.data(self.plan).encode(out);
            })?,
            _ => return Ok(None),
        };
        Ok(Some(contents))
    }

    /// The code section (see [`super::bodies::code`]), with `arc` after the module's bodies when indirect
    /// calls are counted; the places added go to `places`, from the index returned on,
    /// their `at` relative to the section's contents; and the bytes of `arc` at its end.
    fn code(&self, places: &mut Vec<Added>) -> Result<(Vec<u8>, usize, usize), AgentError> {
        let at = places.len();
        let captures = self.capture_memory.map(|memory| (memory, self.captured));
        let (contents, made) = super::bodies::code(self.layout, self.plan, self.edges, captures)?;
        places.extend(made);
        if self.plan.has_arc() {
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

pub(super) fn put_section(out: &mut Vec<u8>, id: u8, contents: &[u8]) {
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

/// The global section with `counters` `(mut i64)` counters starting at 0, then `i32s`
/// `(mut i32)`s starting at 0: the global indirect sites announce themselves in, and a Go
/// module's restart global (see [`edges::EdgeIndices`]).
fn globals(
    original: &[u8],
    offset: usize,
    counters: u32,
    i32s: u32,
) -> Result<Vec<u8>, AgentError> {
    extended(original, offset, counters + i32s, |out| {
        for _ in 0..counters {
            // i64, mutable, (i64.const 0) end.
            out.extend_from_slice(&[0x7E, 0x01, 0x42, 0x00, 0x0B]);
        }
        for _ in 0..i32s {
            // i32, mutable, (i32.const 0) end.
            out.extend_from_slice(&[0x7F, 0x01, 0x41, 0x00, 0x0B]);
        }
    })
}

/// The export section with each counter exported under its function's id (the counters
/// are the globals from the module's own on, in the order of their functions), the capture
/// memory, if any, under [`CAPTURE_MEMORY`], and the edges' memory under [`EDGES_MEMORY`]
/// and under [`FUNCTIONS_PREFIX`] with the number of the module's functions.
fn exports(original: &[u8], offset: usize, added: &Additions<'_>) -> Result<Vec<u8>, AgentError> {
    let layout = added.layout;
    let imports = layout.imported_funcs.len() as u32;
    if !original.is_empty() {
        let reader = wasmparser::ExportSectionReader::new(BinaryReader::new(original, offset))?;
        for export in reader {
            let export = export?;
            if export.name.starts_with(EXPORT_PREFIX)
                || export.name.starts_with(FUNCTIONS_PREFIX)
                || [CAPTURE_MEMORY, EDGES_MEMORY].contains(&export.name)
            {
                return Err(AgentError::Unsupported {
                    what: format!("a module exporting `{}`, a name wprof uses", export.name),
                    offset,
                });
            }
        }
    }
    let count = added.counters() + u32::from(added.capture_memory.is_some()) + 2;
    extended(original, offset, count, |out| {
        let counted = (0u32..).zip(&added.plan.counted).filter(|(_, &c)| c);
        for (global, (d, _)) in (layout.globals..).zip(counted) {
            format!("{EXPORT_PREFIX}{}", imports + d)
                .as_str()
                .encode(out);
            // A global, its index.
            out.push(0x03);
            global.encode(out);
        }
        if let Some(memory) = added.capture_memory {
            CAPTURE_MEMORY.encode(out);
            // A memory, its index.
            out.push(0x02);
            memory.encode(out);
        }
        let functions = imports + layout.defined_funcs.len() as u32;
        for name in [
            EDGES_MEMORY.to_string(),
            format!("{FUNCTIONS_PREFIX}{functions}"),
        ] {
            name.as_str().encode(out);
            out.push(0x02);
            added.edges.memory.encode(out);
        }
    })
}
