//! CPython's eval loop in a build that does not name it. The CPython 3.12 that sandbox
//! packages on PyPI ship (VMware's WASI build) has no name section, and its DWARF, though
//! it describes every structure and names every function, places none: `wasm-opt` rewrote
//! the code after linking and left every `DW_AT_low_pc` 0. Its structures can still be
//! read; only the eval loop, whose native frames the script's stand in place of, has to be
//! found otherwise.
//!
//! It is found by its shape. `_PyEval_EvalFrameDefault(PyThreadState *, _PyInterpreterFrame
//! *, int)` returns a `PyObject *`: on wasm32, a function of type `(i32, i32, i32) -> i32`.
//! It holds the code of every bytecode instruction in one body, and is by far the largest
//! function of a CPython build (106 KB in that 3.12 build, where the next function of its
//! type has 42 KB; 3.11's is 81 KB). The guess is taken only when the module is a CPython
//! (its DWARF names `_PyEval_EvalFrameDefault`, or its data holds 3.13's and later's
//! `_Py_DebugOffsets`, see [`super::debug_offsets`]) and the largest function of that type
//! is at least [`MARGIN`] times the size of the next one; the run says that it was made.

/// How many times larger than any other function of its type the eval loop must be.
pub const MARGIN: usize = 2;

/// The eval loop's name, as the module's DWARF strings hold it.
const EVAL: &[u8] = b"_PyEval_EvalFrameDefault\0";

/// The function id (imports counted) of the eval loop of the CPython module `bytes`, found
/// by its shape, and what made it so (what the module is, for the run to say); `None` if the module is not a CPython whose DWARF
/// names the loop, or no function stands out.
pub fn eval_loop(bytes: &[u8]) -> Option<(u32, String)> {
    let describes_itself = || {
        crate::languages::memory::InitialMemory::of(bytes)
            .find(super::debug_offsets::COOKIE)
            .is_some()
    };
    if !strings_name_the_loop(bytes) && !describes_itself() {
        return None;
    }
    let mut types: Vec<bool> = Vec::new();
    let mut imported = 0u32;
    let mut defined: Vec<u32> = Vec::new();
    // The size of each defined function's body, 0 for one of another type.
    let mut sizes: Vec<usize> = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            wasmparser::Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.ok()?.into_types() {
                        types.push(matches!(
                            &sub.composite_type.inner,
                            wasmparser::CompositeInnerType::Func(f)
                                if f.params() == [wasmparser::ValType::I32; 3]
                                    && f.results() == [wasmparser::ValType::I32]
                        ));
                    }
                }
            }
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import.ok()?.ty, wasmparser::TypeRef::Func(_)) {
                        imported += 1;
                    }
                }
            }
            wasmparser::Payload::FunctionSection(reader) => {
                for ty in reader {
                    defined.push(ty.ok()?);
                }
            }
            wasmparser::Payload::CodeSectionEntry(body) => {
                let ty = *defined.get(sizes.len())? as usize;
                let of_its_type = types.get(ty) == Some(&true);
                sizes.push(if of_its_type { body.range().len() } else { 0 });
            }
            _ => {}
        }
    }
    let (index, &largest) = sizes
        .iter()
        .enumerate()
        .max_by_key(|&(i, s)| (s, usize::MAX - i))?;
    let next = sizes
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != index)
        .map(|(_, &s)| s)
        .max()
        .unwrap_or(0);
    if largest == 0 || largest < next.saturating_mul(MARGIN) {
        return None;
    }
    let id = imported + u32::try_from(index).ok()?;
    Some((
        id,
        format!(
            "a CPython interpreter: its eval loop is taken to be func[{id}], the largest \
             function of its type ({largest} bytes, the next {next}): the module names no \
             function"
        ),
    ))
}

/// Whether the module's DWARF strings (`.debug_str`) hold the eval loop's name. Only the
/// section headers are read on the way to them.
fn strings_name_the_loop(bytes: &[u8]) -> bool {
    let mut found = false;
    super::super::each_custom_section(bytes, &mut |section| {
        if section.name() != ".debug_str" {
            return true;
        }
        let data = section.data();
        found = data.starts_with(EVAL)
            || data
                .windows(EVAL.len() + 1)
                .any(|w| w[0] == 0 && &w[1..] == EVAL);
        false
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module like an unnamed CPython: functions of the eval loop's type, one of them
    /// `body_instructions` long, and DWARF strings naming the loop when `names_it`.
    fn module(body_instructions: usize, other_instructions: usize, names_it: bool) -> Vec<u8> {
        module_with(body_instructions, other_instructions, names_it, "")
    }

    /// [`module`] with the module fields `data` too.
    fn module_with(
        body_instructions: usize,
        other_instructions: usize,
        names_it: bool,
        data: &str,
    ) -> Vec<u8> {
        let body = "(drop (i32.const 1))".repeat(body_instructions);
        let other = "(drop (i32.const 1))".repeat(other_instructions);
        let wat = format!(
            r#"(module
                (import "env" "f" (func (param i32)))
                (func (param i32 i32 i32) (result i32) {other} (i32.const 0))
                (func (param i32 i32) (result i32) {body} {body} {body} (i32.const 0))
                (func (param i32 i32 i32) (result i32) {body} (i32.const 0))
                {data})"#
        );
        let mut bytes = wat::parse_str(wat).unwrap();
        if names_it {
            let mut strings = b"main\0".to_vec();
            strings.extend_from_slice(EVAL);
            let name = b".debug_str";
            let size = 1 + name.len() + strings.len();
            assert!(size < 128, "one byte of size");
            bytes.extend_from_slice(&[0, size as u8, name.len() as u8]);
            bytes.extend_from_slice(name);
            bytes.extend_from_slice(&strings);
        }
        bytes
    }

    #[test]
    fn the_largest_function_of_the_loops_type_is_taken_when_it_stands_out() {
        let found = eval_loop(&module(400, 10, true)).unwrap();
        assert_eq!(found.0, 3, "{}", found.1);
        assert!(found.1.contains("func[3]"), "{}", found.1);
    }

    #[test]
    fn a_cpython_that_describes_itself_is_one_without_dwarf() {
        let table = r#"(memory 1) (data (i32.const 64) "xdebugpy\f0\00\0f\03")"#;
        let found = eval_loop(&module_with(400, 10, false, table)).unwrap();
        assert_eq!(found.0, 3, "{}", found.1);
    }

    #[test]
    fn nothing_is_taken_without_the_loops_name_or_a_clear_winner() {
        assert_eq!(eval_loop(&module(400, 10, false)), None);
        assert_eq!(eval_loop(&module(400, 300, true)), None);
        assert_eq!(eval_loop(b"\0asm\x01\0\0\0"), None);
    }
}
