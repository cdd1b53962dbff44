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
    /// Where the counters' instructions are, to tell offsets in the original's terms.
    pub offsets: CounterOffsets,
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
    let mut added = Vec::new();
    let mut code_end = 0;
    // The sections, then the end, before which any of ours not written yet go.
    for section in sections.iter().map(Some).chain([None]) {
        // A section the format wants after ours: ours first, if the module has none.
        if let Some(r) = section.map_or(Some(usize::MAX), |s| rank(s.id)) {
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
        let Some(section) = section else { break };
        let contents = &module[section.contents.clone()];
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

/// The code section: each body's locals, its counter's increment, then its code as it was
/// (in a Go function, with the increment taken back before it calls `runtime.morestack`,
/// after which it starts over); and where the added instructions are in it.
fn code(layout: &ModuleLayout<'_>, first_global: u32) -> Result<(Vec<u8>, Vec<Added>), AgentError> {
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
        let increment: &[Instruction<'_>] = match resumable {
            true => &[
                Instruction::GlobalGet(counter),
                Instruction::LocalGet(0),
                Instruction::I32Eqz,
                Instruction::I64ExtendI32U,
                Instruction::I64Add,
                Instruction::GlobalSet(counter),
            ],
            false => &[
                Instruction::GlobalGet(counter),
                Instruction::I64Const(1),
                Instruction::I64Add,
                Instruction::GlobalSet(counter),
            ],
        };
        places.push(add(&mut body, code_start, increment));
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
mod tests {
    use super::*;
    use wasmparser::{Operator, Parser, Payload};

    /// Marks `wasm` as Go marks its modules: with a build id.
    fn as_go(wasm: &mut Vec<u8>) {
        use wasm_encoder::Section;
        wasm_encoder::CustomSection {
            name: "go:buildid".into(),
            data: b"x".into(),
        }
        .append_to(wasm);
    }

    /// Each body's operators, named, with their offsets in the module.
    fn bodies(bytes: &[u8]) -> Vec<Vec<(String, usize)>> {
        Parser::new(0)
            .parse_all(bytes)
            .filter_map(|p| match p.unwrap() {
                Payload::CodeSectionEntry(body) => Some(
                    body.get_operators_reader()
                        .unwrap()
                        .into_iter_with_offsets()
                        .map(|op| {
                            let (op, at) = op.unwrap();
                            (named(op), at)
                        })
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    /// Each body's operators, named.
    fn operators(bytes: &[u8]) -> Vec<Vec<String>> {
        bodies(bytes)
            .into_iter()
            .map(|ops| ops.into_iter().map(|(name, _)| name).collect())
            .collect()
    }

    fn named(op: Operator<'_>) -> String {
        match op {
            Operator::GlobalGet { global_index } => format!("get {global_index}"),
            Operator::GlobalSet { global_index } => format!("set {global_index}"),
            Operator::I64Const { value } => format!("i64 {value}"),
            Operator::LocalGet { local_index } => format!("local {local_index}"),
            Operator::Call { function_index } => format!("call {function_index}"),
            other => format!("{other:?}"),
        }
    }

    /// The module's exports, by name, and each body's first operators, after validating it.
    fn read(bytes: &[u8]) -> (Vec<(String, u32)>, Vec<Vec<String>>) {
        wasmparser::Validator::new()
            .validate_all(bytes)
            .expect("the counted module validates");
        let mut exports = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            if let Payload::ExportSection(reader) = payload.unwrap() {
                for e in reader {
                    let e = e.unwrap();
                    exports.push((e.name.to_string(), e.index));
                }
            }
        }
        let starts = operators(bytes)
            .into_iter()
            .map(|mut ops| {
                ops.truncate(6);
                ops
            })
            .collect();
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
            ["get 2", "i64 1", "I64Add", "set 2", "call 2"]
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
                 (func $go (param i32) (result i32)
                   i32.const 0
                   call $runtime.morestack_noctxt
                   drop
                   i32.const 1)
                 (func $other (param i64))
                 (func $runtime.morestack_noctxt (param i32) (result i32) i32.const 1))"#,
        )
        .unwrap();
        as_go(&mut wasm);
        let counted = count_entries(&wasm).unwrap();
        let (_, starts) = read(&counted.bytes);
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
        // It starts over after `morestack`: that call takes its count back.
        let after: Vec<String> = operators(&counted.bytes)[0]
            .iter()
            .skip(7)
            .take(5)
            .cloned()
            .collect();
        assert_eq!(after, ["get 3", "i64 1", "I64Sub", "set 3", "call 2"]);
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
            bodies(bytes)
                .into_iter()
                .map(|ops| ops.into_iter().map(|(_, at)| at).collect())
                .collect()
        };
        let (old, new) = (offsets(&wasm), offsets(&counted.bytes));
        for (old, new) in old.iter().zip(&new) {
            // The four of the increment are the first instruction's, the rest their own.
            let mapped: Vec<usize> = new
                .iter()
                .map(|&at| counted.offsets.original_offset(at).unwrap())
                .collect();
            assert_eq!(mapped[..4], [old[0]; 4]);
            assert_eq!(mapped[4..], old[..]);
        }
        assert_eq!(counted.offsets.original_offset(3), None, "before the code");
        assert_eq!(counted.offsets.original_offset(counted.bytes.len()), None);
    }

    #[test]
    fn a_go_functions_instructions_map_back_around_both_additions() {
        let mut wasm = wat::parse_str(
            r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $f (param i32) (result i32) (local i64)
                   local.get 0
                   call $runtime.morestack
                   i32.const 2
                   i32.add)
                 (func $runtime.morestack (param i32) (result i32) local.get 0))"#,
        )
        .unwrap();
        as_go(&mut wasm);
        let counted = count_entries(&wasm).unwrap();
        let with_offsets = |bytes: &[u8]| bodies(bytes).swap_remove(0);
        let old: Vec<usize> = with_offsets(&wasm).into_iter().map(|(_, at)| at).collect();
        let new = with_offsets(&counted.bytes);
        let names: Vec<&str> = new.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[..12],
            [
                "get 3",
                "local 0",
                "I32Eqz",
                "I64ExtendI32U",
                "I64Add",
                "set 3",
                "local 0",
                "get 3",
                "i64 1",
                "I64Sub",
                "set 3",
                "call 1"
            ]
        );
        // The increment goes with the first instruction, the take-back with the call.
        let mut expected = vec![old[0]; 7];
        expected.extend([old[1]; 4]);
        expected.extend(&old[1..]);
        let mapped: Vec<usize> = new
            .iter()
            .map(|&(_, at)| counted.offsets.original_offset(at).unwrap())
            .collect();
        assert_eq!(mapped, expected);
    }

    #[test]
    fn the_offset_map_survives_its_encoding_and_marks_the_added_bytes() {
        let mut wasm = wat::parse_str(
            r#"(module
                 (global (mut i32) (i32.const 0))
                 (global (mut i64) (i64.const 0))
                 (global (mut i64) (i64.const 0))
                 (func $f (param i32) (result i32)
                   local.get 0
                   call $runtime.morestack)
                 (func $runtime.morestack (param i32) (result i32) local.get 0)
                 (func $g (local i32) i32.const 1 local.set 0))"#,
        )
        .unwrap();
        as_go(&mut wasm);
        let counted = count_entries(&wasm).unwrap();
        let encoded = counted.offsets.encode();
        let decoded = CounterOffsets::decode(&encoded).unwrap();
        assert_eq!(decoded, counted.offsets);
        // Every byte of every counted body: the same original offset, added where the
        // increments and take-backs are.
        let ops: Vec<(String, usize)> = bodies(&counted.bytes).into_iter().flatten().collect();
        let mut added = 0;
        for (name, at) in &ops {
            assert_eq!(
                decoded.original_offset(*at),
                counted.offsets.original_offset(*at)
            );
            let is_counter = name.starts_with("get ") || name.starts_with("set ");
            if is_counter {
                assert!(decoded.is_added(*at), "{name} at {at}");
                added += 1;
            }
        }
        assert_eq!(
            added,
            2 * 4,
            "three increments and a take-back, a get and a set each"
        );
        assert!(!decoded.is_added(ops.last().unwrap().1));
        // Not a map: cut, with bytes left over, or with a place past the code's end.
        assert_eq!(CounterOffsets::decode(&encoded[..encoded.len() - 1]), None);
        assert_eq!(
            CounterOffsets::decode(&[encoded.as_slice(), &[0]].concat()),
            None
        );
        assert_eq!(CounterOffsets::decode(&[1, 1, 5, 0, 3]), None);
        assert_eq!(CounterOffsets::decode(&[]), None);
    }
}
