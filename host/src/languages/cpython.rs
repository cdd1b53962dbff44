//! CPython's call stack (3.11 to 3.15), read from a thread state in linear memory: the
//! chain of `_PyInterpreterFrame`s from the running one (3.11's and 3.12's
//! `tstate->cframe->current_frame`, 3.13's `tstate->current_frame`) back through each
//! `previous`, as Python's own tracebacks walk it. The thread state is the one
//! `_PyEval_EvalFrameDefault` was last entered with (its first argument, kept by stack
//! mode's capture). Each frame's code object (`f_code`, 3.13's `f_executable`) gives the
//! function's qualified name, file and first line, and the instruction it is at
//! (`prev_instr`, 3.13's `instr_ptr`) its current line, decoded from the code's location
//! table (`co_linetable`) as `PyCode_Addr2Line` does. A frame that started a run of the
//! eval loop (called from C) ends a run, as a Lua call marked `CIST_FRESH` does, so that
//! the frames can be placed among the native ones: 3.11 marks such a frame (`is_entry`);
//! 3.12 and later link a frame of their own below it, owned by the C stack or the
//! interpreter (`owner`), which the walk steps over.
//!
//! Every offset of 3.11 and 3.12 comes from the interpreter's DWARF
//! ([`PythonLayout::from_dwarf`]), the owner's value too; 3.13 and later describe their
//! structures themselves ([`debug_offsets`]), and are read so even without DWARF. The
//! constants are those all share: a code unit of two bytes, the string header's bits
//! (`interned:2, kind:3, compact:1, ascii:1`) and the location table's encoding. A build
//! whose name section does not name its eval loop has it found by its shape ([`unnamed`]).

use super::layout::Layout;
use super::lua::LuaFrame;
use super::memory::Memory;
use super::ScriptFunction;

pub mod debug_offsets;
pub mod unnamed;

/// Frames walked at most; a deeper stack is truncated.
pub const MAX_DEPTH: usize = 512;

/// A name or file is read up to this many characters.
const MAX_STRING: usize = 512;
/// A location table is read up to this many bytes.
const MAX_TABLE: usize = 1 << 20;
/// The bytes of a code unit (an instruction and its argument).
const CODE_UNIT: u32 = 2;

/// A frame's code object is kept as a pointer (3.11 to 3.13) or, from 3.14, as a
/// `_PyStackRef`: the pointer with tags in its low bits, which these clear (an object is
/// aligned to 4 bytes at least).
const TAG_BITS: u32 = 3;

/// How a frame tells that it started a run of the eval loop (that C called it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum RunStart {
    /// 3.11: the frame's own flag (`is_entry`), at this offset.
    Flag(u32),
    /// 3.12 and later: the frame below it is the run's own, not the script's: its `owner`
    /// (at `owner`) is `cstack` or more (3.12's and 3.13's `FRAME_OWNED_BY_CSTACK`, the
    /// last owner there; 3.14's `FRAME_OWNED_BY_INTERPRETER` and after).
    ShimBelow { owner: u32, cstack: u8 },
}

/// Where the thread state keeps its innermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum CurrentFrame {
    /// 3.11 and 3.12: `tstate->cframe` (at `state_cframe`), whose `current_frame` is at
    /// `cframe_current`.
    ThroughCFrame {
        state_cframe: u32,
        cframe_current: u32,
    },
    /// 3.13 and later: `tstate->current_frame`, at this offset.
    InState(u32),
}

/// Frames of the C stack stepped over in a row at most.
const MAX_SHIMS: usize = 4;

/// Where CPython 3.11 to 3.15 keeps what the walk reads, in one build.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PythonLayout {
    current_frame: CurrentFrame,
    frame_code: u32,
    frame_previous: u32,
    frame_instruction: u32,
    run_start: RunStart,
    /// Where an object keeps its type (`ob_type`).
    object_type: u32,
    /// The code objects' type (`PyCode_Type`), by address: a frame whose `f_code` is of
    /// another type is not one (a frame being set up, or gone).
    code_type: u32,
    code_qualname: u32,
    code_filename: u32,
    code_first_line: u32,
    code_line_table: u32,
    code_units: u32,
    bytes_data: u32,
    bytes_size: u32,
    string_length: u32,
    string_state: u32,
    ascii_data: u32,
    compact_data: u32,
}

impl PythonLayout {
    /// The types [`PythonLayout::from_dwarf`] reads.
    pub const TYPES: &'static [&'static str] = &[
        "PyThreadState",
        "_PyCFrame",
        "_PyInterpreterFrame",
        "PyCodeObject",
        "PyBytesObject",
        "PyVarObject",
        "PyASCIIObject",
        "PyCompactUnicodeObject",
        "PyObject",
    ];

    /// The global variables [`PythonLayout::from_dwarf`] reads.
    pub const GLOBALS: &'static [&'static str] = &["PyCode_Type"];

    /// The enumerator that marks 3.12's frames of the C stack.
    const CSTACK: &'static str = "FRAME_OWNED_BY_CSTACK";

    /// The layout of the CPython 3.11 or 3.12 interpreter in the module `bytes`, from its
    /// DWARF, or what is missing.
    pub fn from_dwarf(bytes: &[u8]) -> Result<PythonLayout, String> {
        let layout = Layout::read(bytes, Self::TYPES, Self::GLOBALS);
        if layout.offset("_PyInterpreterFrame", "is_entry").is_some() {
            return Self::from_layout(&layout);
        }
        // 3.12: the owner's values too (reading for an enumerator 3.11 does not have would
        // read its whole DWARF).
        Self::from_layout(&Layout::read_with(
            bytes,
            Self::TYPES,
            Self::GLOBALS,
            &[Self::CSTACK],
        ))
    }

    /// The layout from the types read, or the first member missing.
    pub fn from_layout(layout: &Layout) -> Result<PythonLayout, String> {
        let at = |ty: &str, path: &str| {
            layout
                .offset(ty, path)
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| format!("no `{ty}.{path}` in the module's DWARF"))
        };
        let size = |ty: &str| {
            layout
                .size(ty)
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(|| format!("no size of `{ty}` in the module's DWARF"))
        };
        Ok(PythonLayout {
            current_frame: CurrentFrame::ThroughCFrame {
                state_cframe: at("PyThreadState", "cframe")?,
                cframe_current: at("_PyCFrame", "current_frame")?,
            },
            frame_code: at("_PyInterpreterFrame", "f_code")?,
            frame_previous: at("_PyInterpreterFrame", "previous")?,
            frame_instruction: at("_PyInterpreterFrame", "prev_instr")?,
            run_start: match at("_PyInterpreterFrame", "is_entry") {
                Ok(offset) => RunStart::Flag(offset),
                Err(_) => RunStart::ShimBelow {
                    owner: at("_PyInterpreterFrame", "owner")?,
                    cstack: layout
                        .enumerators
                        .get(Self::CSTACK)
                        .and_then(|&v| u8::try_from(v).ok())
                        .ok_or_else(|| {
                            format!(
                                "neither `_PyInterpreterFrame.is_entry` nor `{}` in the \
                                 module's DWARF",
                                Self::CSTACK
                            )
                        })?,
                },
            },
            object_type: at("PyObject", "ob_type")?,
            code_type: layout
                .globals
                .get("PyCode_Type")
                .and_then(|&a| u32::try_from(a).ok())
                .ok_or("no `PyCode_Type` in the module's DWARF")?,
            code_qualname: at("PyCodeObject", "co_qualname")?,
            code_filename: at("PyCodeObject", "co_filename")?,
            code_first_line: at("PyCodeObject", "co_firstlineno")?,
            code_line_table: at("PyCodeObject", "co_linetable")?,
            code_units: at("PyCodeObject", "co_code_adaptive")?,
            bytes_data: at("PyBytesObject", "ob_sval")?,
            bytes_size: at("PyVarObject", "ob_size")?,
            string_length: at("PyASCIIObject", "length")?,
            string_state: at("PyASCIIObject", "state")?,
            ascii_data: size("PyASCIIObject")?,
            compact_data: size("PyCompactUnicodeObject")?,
        })
    }
}

/// Walks the frames of the thread state at `state`, handing each to `push` (as a
/// [`LuaFrame`]: its code object, its instruction, whether it started a run of the eval
/// loop), innermost first, until it says no more; whether the walk reached the outermost
/// frame. Allocates nothing: the signal handler walks with it.
pub fn walk_into(
    layout: &PythonLayout,
    memory: &(impl Memory + ?Sized),
    state: u32,
    push: &mut dyn FnMut(LuaFrame) -> bool,
) -> bool {
    let first = match layout.current_frame {
        CurrentFrame::ThroughCFrame {
            state_cframe,
            cframe_current,
        } => state
            .checked_add(state_cframe)
            .and_then(|at| memory.u32(at))
            .and_then(|cframe| memory.u32(cframe.checked_add(cframe_current)?)),
        CurrentFrame::InState(offset) => state.checked_add(offset).and_then(|at| memory.u32(at)),
    }
    .and_then(|first| past_shim(layout, memory, first));
    super::walk_chain(first, MAX_DEPTH, |at| read_frame(layout, memory, at), push)
}

/// The frame at `at`, or the first below it that is not a frame of the C stack (3.12's
/// and later's, a run's own, which has no function of the script): 0 for none.
fn past_shim(layout: &PythonLayout, memory: &(impl Memory + ?Sized), at: u32) -> Option<u32> {
    let RunStart::ShimBelow { owner, cstack } = layout.run_start else {
        return Some(at);
    };
    let mut at = at;
    for _ in 0..MAX_SHIMS {
        if at == 0 || memory.u8(at.checked_add(owner)?)? < cstack {
            return Some(at);
        }
        at = memory.u32(at.checked_add(layout.frame_previous)?)?;
    }
    None
}

/// The frame at `at` and the address of the one below it.
fn read_frame(
    layout: &PythonLayout,
    memory: &(impl Memory + ?Sized),
    at: u32,
) -> Option<(LuaFrame, u32)> {
    let field = |offset: u32| at.checked_add(offset);
    let mut previous = memory.u32(field(layout.frame_previous)?)?;
    let code = memory.u32(field(layout.frame_code)?)? & !TAG_BITS;
    // Not a frame (the chain was caught being linked or unlinked): the walk ends here.
    if !is_code(layout, memory, code) {
        return None;
    }
    let instruction = memory.u32(field(layout.frame_instruction)?)?;
    let is_entry = match layout.run_start {
        RunStart::Flag(offset) => memory.u8(field(offset)?)? != 0,
        RunStart::ShimBelow { .. } => {
            let below = past_shim(layout, memory, previous)?;
            let shim = below != previous;
            previous = below;
            shim
        }
    };
    // 3.11's and 3.12's `prev_instr` is one code unit before the first instruction until
    // the frame starts (3.13's `instr_ptr` is at it). A
    // position out of the code makes a frame of an unknown function; the walk goes on
    // below it.
    let first = code.wrapping_add(layout.code_units);
    let pc = (instruction.wrapping_sub(first) as i32) / CODE_UNIT as i32;
    let units = code
        .checked_add(layout.bytes_size)
        .and_then(|at| memory.i32(at));
    let torn = code == 0 || pc < -1 || units.is_none_or(|units| pc >= units);
    Some((
        LuaFrame {
            proto: if torn { 0 } else { code },
            pc,
            fresh: is_entry,
            called_from_lua: false,
        },
        previous,
    ))
}

/// Whether the object at `code` is a code object. The reader asks again what a tick's walk
/// checked: by the time it reads a function's names, the code object may have been freed
/// and its memory given to another object (a `str`, an enum's member), whose fields read
/// as a code object's would name a file `ATOMIC_GROUP` at line 4,803,008.
fn is_code(layout: &PythonLayout, memory: &(impl Memory + ?Sized), code: u32) -> bool {
    code.checked_add(layout.object_type)
        .and_then(|at| memory.u32(at))
        .is_some_and(|ty| ty == layout.code_type)
}

/// What names the function whose code object is at `code`, cheaply: its qualified name's
/// and its file's addresses, and its first line; `None` if it is no longer a code object.
pub fn function_key(
    layout: &PythonLayout,
    memory: &(impl Memory + ?Sized),
    code: u32,
) -> Option<(u32, i32)> {
    if !is_code(layout, memory, code) {
        return None;
    }
    let field = |offset: u32| code.checked_add(offset);
    Some((
        memory.u32(field(layout.code_qualname)?)?.rotate_left(16)
            ^ memory.u32(field(layout.code_filename)?)?,
        memory.i32(field(layout.code_first_line)?)?,
    ))
}

/// The function whose code object is at `code`: its qualified name, file and first line;
/// `None` if it is no longer a code object.
pub fn function(
    layout: &PythonLayout,
    memory: &(impl Memory + ?Sized),
    code: u32,
) -> Option<ScriptFunction> {
    if !is_code(layout, memory, code) {
        return None;
    }
    let field = |offset: u32| code.checked_add(offset);
    let name = string(layout, memory, memory.u32(field(layout.code_qualname)?)?)?;
    let file = string(layout, memory, memory.u32(field(layout.code_filename)?)?)?;
    Some(ScriptFunction {
        name: Some(name),
        source: file,
        line_defined: memory.i32(field(layout.code_first_line)?)?,
        last_line_defined: 0,
        size_code: memory.i32(field(layout.bytes_size)?)?,
    })
}

/// The `str` at `at`, up to [`MAX_STRING`] characters: a compact string's characters of
/// one, two or four bytes; `None` for a string kept elsewhere (a legacy one).
fn string(layout: &PythonLayout, memory: &(impl Memory + ?Sized), at: u32) -> Option<String> {
    let state = memory.u32(at.checked_add(layout.string_state)?)?;
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
    if compact == 0 || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let len = (memory.u32(at.checked_add(layout.string_length)?)? as usize).min(MAX_STRING);
    let data = at.checked_add(match ascii {
        1 => layout.ascii_data,
        _ => layout.compact_data,
    })?;
    let mut bytes = vec![0; len * kind as usize];
    memory.read(data, &mut bytes)?;
    Some(
        bytes
            .chunks_exact(kind as usize)
            .map(|c| {
                let mut unit = [0u8; 4];
                unit[..c.len()].copy_from_slice(c);
                char::from_u32(u32::from_le_bytes(unit)).unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
    )
}

/// The line instruction `pc` (in code units) of the code object at `code` comes from, as
/// its location table says (the first line for a frame not started, -1); `None` for an
/// instruction of no line, or out of the table, or if `code` is no longer a code object.
pub fn line(
    layout: &PythonLayout,
    memory: &(impl Memory + ?Sized),
    code: u32,
    pc: i32,
) -> Option<i32> {
    if !is_code(layout, memory, code) {
        return None;
    }
    let field = |offset: u32| code.checked_add(offset);
    let first = memory.i32(field(layout.code_first_line)?)?;
    if pc < 0 {
        return Some(first); // not started: its first line, as `PyCode_Addr2Line` says
    }
    let table = memory.u32(field(layout.code_line_table)?)?;
    let len = memory.u32(table.checked_add(layout.bytes_size)?)? as usize;
    // An entry covers one code unit at least, in 22 bytes at most: what covers `pc`.
    let needed = (pc as usize + 1).saturating_mul(22);
    let mut bytes = vec![0; len.min(needed).min(MAX_TABLE)];
    memory.read(table.checked_add(layout.bytes_data)?, &mut bytes)?;
    decode_line(&bytes, first, pc)
}

/// The line of code unit `pc` in the location table `table` of code whose first line is
/// `line` (CPython 3.11's format): entries of a first byte with its top bit set, a code in
/// bits 3-6 and the units it covers, less one, in bits 0-2, then the code's fields; the
/// line moves by a signed number (long form, 14; no column, 13), by `code - 10` (one-line
/// forms, 10-12), or not at all (short forms, 0-9); 15 is no location.
fn decode_line(table: &[u8], mut line: i32, pc: i32) -> Option<i32> {
    let mut at = 0;
    let mut unit: i64 = 0;
    while at < table.len() {
        let head = table[at];
        if head & 0x80 == 0 {
            return None;
        }
        at += 1;
        let code = (head >> 3) & 15;
        let units = i64::from(head & 7) + 1;
        let here = match code {
            15 => None,
            14 => {
                line = line.wrapping_add(signed(table, &mut at)?);
                for _ in 0..3 {
                    varint(table, &mut at)?; // end line, column, end column
                }
                Some(line)
            }
            13 => {
                line = line.wrapping_add(signed(table, &mut at)?);
                Some(line)
            }
            10..=12 => {
                line = line.wrapping_add(i32::from(code) - 10);
                at += 2; // column, end column
                Some(line)
            }
            _ => {
                at += 1; // column
                Some(line)
            }
        };
        if i64::from(pc) < unit + units {
            return here;
        }
        unit += units;
    }
    None
}

/// A location table's unsigned number: six bits a byte, the seventh set while more follow.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut value: u32 = 0;
    for shift in (0..30).step_by(6) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u32::from(b & 63) << shift;
        if b & 64 == 0 {
            return Some(value);
        }
    }
    None
}

/// A location table's signed number: an unsigned one whose lowest bit is the sign.
fn signed(bytes: &[u8], at: &mut usize) -> Option<i32> {
    let v = varint(bytes, at)?;
    let magnitude = (v >> 1) as i32;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests;
