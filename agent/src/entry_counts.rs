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
//! when its resume point (`PC_B`, local 0) is 0, a call rather than a resumption.

use std::ops::Range;

use wasm_encoder::{Encode, Instruction};
use wasmparser::{BinaryReader, FunctionBody};

use crate::layout::ModuleLayout;
use crate::AgentError;

/// The exported counters' names: this prefix and the function's id in decimal.
pub const EXPORT_PREFIX: &str = "wprof:calls:";

/// Version of what [`count_entries`] writes: part of the key its compiled code is cached
/// under.
pub const VERSION: u32 = 1;

/// The module's sections in the order the format requires them; custom sections (0) may
/// come anywhere.
const ORDER: [u8; 13] = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
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
    /// Per defined function, in order: where its increment starts and its original code
    /// resumes in `bytes`, and where that code starts in the original.
    bodies: Vec<BodyPlace>,
}

#[derive(Debug, Clone, Copy)]
struct BodyPlace {
    increment: usize,
    code: usize,
    original: usize,
}

impl CountedModule {
    /// The offset in the original module of the instruction at `offset` in the counted
    /// one (the increment's own instructions are the function's first instruction's); `None`
    /// outside the code.
    pub fn original_offset(&self, offset: usize) -> Option<usize> {
        let at = self.bodies.partition_point(|b| b.increment <= offset);
        let body = self.bodies.get(at.checked_sub(1)?)?;
        let next = self.bodies.get(at).map_or(usize::MAX, |b| b.increment);
        (offset < next).then(|| body.original + offset.saturating_sub(body.code))
    }
}

/// `module` with an entry counter in every defined function (see the module docs).
pub fn count_entries(module: &[u8]) -> Result<CountedModule, AgentError> {
    let layout = ModuleLayout::parse(module)?;
    let sections = sections(module)?;
    let imports = layout.imported_funcs.len() as u32;
    let defined = layout.defined_funcs.len() as u32;
    let first_global = layout.globals;
    let mut out = Vec::with_capacity(module.len() + module.len() / 16 + 64);
    out.extend_from_slice(&module[..8]);
    let mut wrote_globals = false;
    let mut wrote_exports = false;
    let mut bodies = Vec::new();
    for section in &sections {
        let contents = &module[section.contents.clone()];
        // A section the format wants after ours: ours first, if the module has none.
        if let Some(r) = rank(section.id) {
            if !wrote_globals && r > rank(GLOBAL).unwrap() {
                put_section(&mut out, GLOBAL, &globals(&[], 0, defined)?);
                wrote_globals = true;
            }
            if !wrote_exports && r > rank(EXPORT).unwrap() {
                put_section(
                    &mut out,
                    EXPORT,
                    &exports(&[], 0, imports, first_global, defined)?,
                );
                wrote_exports = true;
            }
        }
        match section.id {
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
                    )?,
                );
                wrote_exports = true;
            }
            CODE => {
                let (contents, places) = code(&layout, first_global)?;
                put_section(&mut out, CODE, &contents);
                let base = out.len() - contents.len();
                bodies = places
                    .into_iter()
                    .map(|p| BodyPlace {
                        increment: base + p.increment,
                        code: base + p.code,
                        original: p.original,
                    })
                    .collect();
            }
            id => put_section(&mut out, id, contents),
        }
    }
    if !wrote_globals {
        put_section(&mut out, GLOBAL, &globals(&[], 0, defined)?);
    }
    if !wrote_exports {
        put_section(
            &mut out,
            EXPORT,
            &exports(&[], 0, imports, first_global, defined)?,
        );
    }
    Ok(CountedModule { bytes: out, bodies })
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

/// The global section with one `(mut i64)` counter, starting at 0, per defined function.
fn globals(original: &[u8], offset: usize, defined: u32) -> Result<Vec<u8>, AgentError> {
    extended(original, offset, defined, |out| {
        for _ in 0..defined {
            // i64, mutable, (i64.const 0) end.
            out.extend_from_slice(&[0x7E, 0x01, 0x42, 0x00, 0x0B]);
        }
    })
}

/// The export section with each counter exported under its function's id; the counters
/// are the globals from `first_global` on.
fn exports(
    original: &[u8],
    offset: usize,
    imports: u32,
    first_global: u32,
    defined: u32,
) -> Result<Vec<u8>, AgentError> {
    if !original.is_empty() {
        let reader = wasmparser::ExportSectionReader::new(BinaryReader::new(original, offset))?;
        for export in reader {
            let export = export?;
            if export.name.starts_with(EXPORT_PREFIX) {
                return Err(AgentError::Unsupported {
                    what: format!("a module exporting `{}`, a name wprof uses", export.name),
                    offset,
                });
            }
        }
    }
    extended(original, offset, defined, |out| {
        for d in 0..defined {
            format!("{EXPORT_PREFIX}{}", imports + d)
                .as_str()
                .encode(out);
            // A global, its index.
            out.push(0x03);
            (first_global + d).encode(out);
        }
    })
}

/// The code section: each body's locals, its counter's increment, then its code as it was;
/// and where each body's increment and code are in it.
fn code(
    layout: &ModuleLayout<'_>,
    first_global: u32,
) -> Result<(Vec<u8>, Vec<BodyPlace>), AgentError> {
    let bodies = &layout.defined_funcs;
    let size: usize = bodies.iter().map(|f| f.body.len() + 24).sum();
    let mut out = Vec::with_capacity(size + 5);
    (bodies.len() as u32).encode(&mut out);
    let mut body = Vec::new();
    let mut places = Vec::with_capacity(bodies.len());
    for (d, func) in bodies.iter().enumerate() {
        let bytes = &layout.bytes[func.body.clone()];
        let reader = FunctionBody::new(BinaryReader::new(bytes, func.body.start));
        let code_start = reader
            .get_binary_reader_for_operators()?
            .original_position();
        let split = code_start - func.body.start;
        let counter = first_global + d as u32;
        // Go's calling convention, `(PC_B i32) -> (i32)`: a resumption is not a call.
        let resumable = layout.go && {
            let sig = layout.signature(func.type_index);
            sig.params == [wasmparser::ValType::I32] && sig.results == [wasmparser::ValType::I32]
        };
        body.clear();
        body.extend_from_slice(&bytes[..split]);
        Instruction::GlobalGet(counter).encode(&mut body);
        if resumable {
            Instruction::LocalGet(0).encode(&mut body);
            Instruction::I32Eqz.encode(&mut body);
            Instruction::I64ExtendI32U.encode(&mut body);
        } else {
            Instruction::I64Const(1).encode(&mut body);
        }
        Instruction::I64Add.encode(&mut body);
        Instruction::GlobalSet(counter).encode(&mut body);
        let increment_len = body.len() - split;
        body.extend_from_slice(&bytes[split..]);
        body.len().encode(&mut out);
        places.push(BodyPlace {
            increment: out.len() + split,
            code: out.len() + split + increment_len,
            original: code_start,
        });
        out.extend_from_slice(&body);
    }
    Ok((out, places))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmparser::{Operator, Parser, Payload};

    /// The module's exports, by name, and each body's first operators, after validating it.
    fn read(bytes: &[u8]) -> (Vec<(String, u32)>, Vec<Vec<String>>) {
        wasmparser::Validator::new()
            .validate_all(bytes)
            .expect("the counted module validates");
        let mut exports = Vec::new();
        let mut starts = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.unwrap() {
                Payload::ExportSection(reader) => {
                    for e in reader {
                        let e = e.unwrap();
                        exports.push((e.name.to_string(), e.index));
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let ops = body.get_operators_reader().unwrap();
                    let first: Vec<String> = ops
                        .into_iter()
                        .take(6)
                        .map(|op| match op.unwrap() {
                            Operator::GlobalGet { global_index } => format!("get {global_index}"),
                            Operator::GlobalSet { global_index } => format!("set {global_index}"),
                            Operator::I64Const { value } => format!("i64 {value}"),
                            Operator::LocalGet { local_index } => format!("local {local_index}"),
                            other => format!("{other:?}"),
                        })
                        .collect();
                    starts.push(first);
                }
                _ => {}
            }
        }
        (exports, starts)
    }

    #[test]
    fn each_defined_function_counts_its_entries_in_a_global_exported_under_its_id() {
        // Two imports, a global and an export of the module's own, locals in a body.
        let wasm = wat::parse_str(
            r#"(module
                 (import "a" "f" (func))
                 (import "a" "g" (func))
                 (global $g (mut i32) (i32.const 7))
                 (func $one (export "one") (result i32) (local i32 i64)
                   global.get $g)
                 (func $two (call $one) drop))"#,
        )
        .unwrap();
        let (exports, starts) = read(&count_entries(&wasm).unwrap().bytes);
        assert_eq!(
            exports,
            [
                ("one".to_string(), 2),
                ("wprof:calls:2".to_string(), 1),
                ("wprof:calls:3".to_string(), 2)
            ]
        );
        assert_eq!(
            starts[0][..5],
            ["get 1", "i64 1", "I64Add", "set 1", "get 0"]
        );
        assert_eq!(
            starts[1][..5],
            [
                "get 2",
                "i64 1",
                "I64Add",
                "set 2",
                "Call { function_index: 2 }"
            ]
        );
    }

    #[test]
    fn a_module_without_globals_or_exports_gets_both_sections_in_their_places() {
        // A start function and a data segment: the new sections go between the others.
        let wasm = wat::parse_str(
            r#"(module
                 (memory 1)
                 (func $main)
                 (start $main)
                 (data (i32.const 0) "x"))"#,
        )
        .unwrap();
        let (exports, starts) = read(&count_entries(&wasm).unwrap().bytes);
        assert_eq!(exports, [("wprof:calls:0".to_string(), 0)]);
        assert_eq!(starts[0][..4], ["get 0", "i64 1", "I64Add", "set 0"]);
        // No defined function: nothing to count, still valid.
        let empty = wat::parse_str("(module)").unwrap();
        let (exports, starts) = read(&count_entries(&empty).unwrap().bytes);
        assert!(exports.is_empty() && starts.is_empty());
    }

    #[test]
    fn a_go_function_counts_calls_and_not_resumptions() {
        let mut wasm = wat::parse_str(
            r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $go (param i32) (result i32) i32.const 0)
                 (func $other (param i64)))"#,
        )
        .unwrap();
        // Go marks its modules with a build id.
        use wasm_encoder::Section;
        wasm_encoder::CustomSection {
            name: "go:buildid".into(),
            data: b"x".into(),
        }
        .append_to(&mut wasm);
        let (_, starts) = read(&count_entries(&wasm).unwrap().bytes);
        assert_eq!(
            starts[0][..6],
            [
                "get 3",
                "local 0",
                "I32Eqz",
                "I64ExtendI32U",
                "I64Add",
                "set 3"
            ]
        );
        assert_eq!(starts[1][..4], ["get 4", "i64 1", "I64Add", "set 4"]);
    }

    #[test]
    fn a_module_using_the_counters_names_is_refused() {
        let wasm = wat::parse_str(r#"(module (func (export "wprof:calls:0")))"#).unwrap();
        let e = count_entries(&wasm).unwrap_err();
        assert!(e.to_string().contains("a name wprof uses"), "{e}");
        assert!(
            count_entries(b"\0asm\x01\0\0\0\x01").is_err(),
            "a cut section"
        );
    }

    #[test]
    fn every_instruction_maps_back_to_its_offset_in_the_original() {
        let wasm = wat::parse_str(
            r#"(module
                 (global $g (mut i32) (i32.const 0))
                 (func $a (local i32) i32.const 1 local.set 0)
                 (func $b (call $a) (call $a)))"#,
        )
        .unwrap();
        let counted = count_entries(&wasm).unwrap();
        let offsets = |bytes: &[u8]| -> Vec<Vec<usize>> {
            Parser::new(0)
                .parse_all(bytes)
                .filter_map(|p| match p.unwrap() {
                    Payload::CodeSectionEntry(body) => Some(
                        body.get_operators_reader()
                            .unwrap()
                            .into_iter_with_offsets()
                            .map(|op| op.unwrap().1)
                            .collect(),
                    ),
                    _ => None,
                })
                .collect()
        };
        let (old, new) = (offsets(&wasm), offsets(&counted.bytes));
        for (old, new) in old.iter().zip(&new) {
            // The four of the increment are the first instruction's, the rest their own.
            let mapped: Vec<usize> = new
                .iter()
                .map(|&at| counted.original_offset(at).unwrap())
                .collect();
            assert_eq!(mapped[..4], [old[0]; 4]);
            assert_eq!(mapped[4..], old[..]);
        }
        assert_eq!(counted.original_offset(3), None, "before the code");
    }
}
