//! QuickJS's call stack, read from its runtime in linear memory: the chain of
//! `JSStackFrame`s from the innermost (`rt->current_stack_frame`) back through each
//! `prev_frame`, as QuickJS's own backtraces (`build_backtrace`) walk it. The runtime is
//! reached from the context `JS_CallInternal` was last entered with (its first argument,
//! kept by stack mode's capture; `ctx->rt`). Each frame's function (`cur_func`, an object)
//! is a bytecode function, whose `JSFunctionBytecode` gives its name, file and the line it
//! is defined at, or a C function (`Array.prototype.sort`, `JSON.parse`...), whose code is
//! native and shows as such.
//!
//! Every frame, C functions' too, is the frame of one native `JS_CallInternal`: QuickJS
//! calls a function, from bytecode or from C, through it, so the frames can be put in
//! place of those native frames one for one (see `crate::run::stacks::languages`); a C
//! function's stays native.
//!
//! Every offset comes from the interpreter's DWARF ([`QuickJsLayout::from_dwarf`]), the
//! class ids of bytecode functions too; the constants are how QuickJS-ng packs its values
//! on a 32-bit target (`JS_NAN_BOXING`: a `JSValue` is 64 bits, the tag in the high word),
//! its strings' header (`len:31, is_wide_char:1`, then `hash:28, kind:2, atom_type:2`) and
//! its line table's encoding (`PC2LINE_*`). A build of Fabrice Bellard's QuickJS, whose
//! debug fields are in a `debug` member, is not read (one warning, native frames).
//!
//! The interpreter writes a frame's position (`cur_pc`) only before it calls, throws or
//! may run other code: a calling frame is at its call, but the innermost frame's position
//! is unknown while it runs its own bytecode; its line is then the line it is defined at.

use super::layout::Layout;
use super::memory::Memory;
use super::ScriptFunction;

/// Frames walked at most; a deeper stack is truncated.
pub const MAX_DEPTH: usize = 512;

/// A name or file is read up to this many characters.
const MAX_STRING: usize = 512;
/// `JS_TAG_OBJECT`, a `JSValue`'s high word for an object.
const TAG_OBJECT: u32 = -1i32 as u32;
/// An atom that is an integer (`__JS_AtomIsTaggedInt`).
const ATOM_TAGGED_INT: u32 = 1 << 31;
/// The classes of functions with bytecode: plain, generator, async, async generator.
const BYTECODE_CLASSES: [&str; 4] = [
    "JS_CLASS_BYTECODE_FUNCTION",
    "JS_CLASS_GENERATOR_FUNCTION",
    "JS_CLASS_ASYNC_FUNCTION",
    "JS_CLASS_ASYNC_GENERATOR_FUNCTION",
];
/// The line table's short form: an opcode byte at or past `PC2LINE_OP_FIRST` holds a pc
/// step of `(op - first) / RANGE` and a line step of `(op - first) % RANGE + BASE`.
const PC2LINE_BASE: i32 = -1;
const PC2LINE_RANGE: i32 = 5;
const PC2LINE_OP_FIRST: u8 = 1;

/// Where QuickJS-ng keeps what the walk reads, in one build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuickJsLayout {
    context_runtime: u32,
    runtime_current_frame: u32,
    runtime_atom_array: u32,
    runtime_atom_size: u32,
    frame_previous: u32,
    frame_function: u32,
    frame_pc: u32,
    object_class: u32,
    object_bytecode: u32,
    bytecode_classes: Vec<u16>,
    bytecode_code: u32,
    bytecode_code_len: u32,
    bytecode_name: u32,
    bytecode_file: u32,
    bytecode_line: u32,
    bytecode_column: u32,
    bytecode_lines_len: u32,
    bytecode_lines: u32,
    string_data: u32,
}

impl QuickJsLayout {
    /// The types [`QuickJsLayout::from_dwarf`] reads.
    pub const TYPES: &'static [&'static str] = &[
        "JSContext",
        "JSRuntime",
        "JSStackFrame",
        "JSObject",
        "JSFunctionBytecode",
        "JSString",
    ];

    /// The layout of the QuickJS-ng interpreter in the module `bytes`, from its DWARF, or
    /// what is missing.
    pub fn from_dwarf(bytes: &[u8]) -> Result<QuickJsLayout, String> {
        Self::from_layout(&Layout::read_with(
            bytes,
            Self::TYPES,
            &[],
            &BYTECODE_CLASSES,
        ))
    }

    /// The layout from the types read, or the first member missing.
    pub fn from_layout(layout: &Layout) -> Result<QuickJsLayout, String> {
        let at = |ty: &str, path: &str| {
            layout
                .offset(ty, path)
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| format!("no `{ty}.{path}` in the module's DWARF"))
        };
        let bytecode_classes = BYTECODE_CLASSES
            .iter()
            .map(|name| {
                layout
                    .enumerators
                    .get(*name)
                    .and_then(|&v| u16::try_from(v).ok())
                    .ok_or_else(|| format!("no `{name}` in the module's DWARF"))
            })
            .collect::<Result<Vec<u16>, String>>()?;
        Ok(QuickJsLayout {
            context_runtime: at("JSContext", "rt")?,
            runtime_current_frame: at("JSRuntime", "current_stack_frame")?,
            runtime_atom_array: at("JSRuntime", "atom_array")?,
            runtime_atom_size: at("JSRuntime", "atom_size")?,
            frame_previous: at("JSStackFrame", "prev_frame")?,
            frame_function: at("JSStackFrame", "cur_func")?,
            frame_pc: at("JSStackFrame", "cur_pc")?,
            object_class: at("JSObject", "class_id")?,
            object_bytecode: at("JSObject", "u.func.function_bytecode")?,
            bytecode_classes,
            bytecode_code: at("JSFunctionBytecode", "byte_code_buf")?,
            bytecode_code_len: at("JSFunctionBytecode", "byte_code_len")?,
            bytecode_name: at("JSFunctionBytecode", "func_name")?,
            bytecode_file: at("JSFunctionBytecode", "filename")?,
            bytecode_line: at("JSFunctionBytecode", "line_num")?,
            bytecode_column: at("JSFunctionBytecode", "col_num")?,
            bytecode_lines_len: at("JSFunctionBytecode", "pc2line_len")?,
            bytecode_lines: at("JSFunctionBytecode", "pc2line_buf")?,
            // The characters follow the header (QuickJS-ng's 16 bytes; older QuickJS
            // names them `u`).
            string_data: at("JSString", "u").or_else(|_| {
                layout
                    .size("JSString")
                    .and_then(|s| u32::try_from(s).ok())
                    .ok_or_else(|| "no size of `JSString` in the module's DWARF".to_string())
            })?,
        })
    }
}

/// One frame on QuickJS's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsFrame {
    /// Its function's bytecode (`JSFunctionBytecode`), by address; 0 for a frame whose
    /// function could not be read, or a C function's.
    pub bytecode: u32,
    /// Where it is in its bytecode (a byte offset; -1 when unknown).
    pub pc: i32,
    /// A C function's frame: native code, which the native frames show.
    pub native: bool,
}

impl JsFrame {
    /// The frame as one word: the bytecode's address, the position plus one in 30 bits,
    /// whether it is native in bit 62.
    pub fn pack(self) -> u64 {
        u64::from(self.bytecode)
            | ((self.pc.wrapping_add(1) as u32 as u64) & 0x3fff_ffff) << 32
            | u64::from(self.native) << 62
    }

    /// The frame [`JsFrame::pack`] made `word` of.
    pub fn unpack(word: u64) -> JsFrame {
        JsFrame {
            bytecode: word as u32,
            pc: (((word >> 32) & 0x3fff_ffff) as i32) - 1,
            native: (word >> 62) & 1 != 0,
        }
    }
}

/// The runtime of the context at `context`.
pub fn runtime(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    context: u32,
) -> Option<u32> {
    memory.u32(context.checked_add(layout.context_runtime)?)
}

/// Walks the stack of the runtime of the context at `context`, handing each frame to
/// `push`, innermost first, until it says no more; whether the walk reached the outermost
/// frame. Allocates nothing: the signal handler walks with it.
pub fn walk_into(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    context: u32,
    push: &mut dyn FnMut(JsFrame) -> bool,
) -> bool {
    let Some(mut frame) = runtime(layout, memory, context)
        .and_then(|rt| memory.u32(rt.checked_add(layout.runtime_current_frame)?))
    else {
        return false;
    };
    for _ in 0..MAX_DEPTH {
        if frame == 0 {
            return true;
        }
        let Some((read, previous)) = read_frame(layout, memory, frame) else {
            return false;
        };
        if !push(read) {
            return false;
        }
        frame = previous;
    }
    false
}

/// The frame at `at` and the address of the one below it.
fn read_frame(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    at: u32,
) -> Option<(JsFrame, u32)> {
    let field = |offset: u32| at.checked_add(offset);
    let previous = memory.u32(field(layout.frame_previous)?)?;
    let function = field(layout.frame_function)?;
    let (object, tag) = (memory.u32(function)?, memory.u32(function.checked_add(4)?)?);
    let unknown = JsFrame {
        bytecode: 0,
        pc: -1,
        native: false,
    };
    if tag != TAG_OBJECT || object == 0 {
        return Some((unknown, previous));
    }
    let class = memory.u16(object.checked_add(layout.object_class)?)?;
    if !layout.bytecode_classes.contains(&class) {
        let native = JsFrame {
            native: true,
            ..unknown
        };
        return Some((native, previous));
    }
    let bytecode = memory.u32(object.checked_add(layout.object_bytecode)?)?;
    let code = memory.u32(bytecode.checked_add(layout.bytecode_code)?)?;
    let code_len = memory.i32(bytecode.checked_add(layout.bytecode_code_len)?)?;
    let saved = memory.u32(field(layout.frame_pc)?)?;
    // `cur_pc` is past the instruction it was saved at.
    let pc = match saved {
        0 => -1,
        _ => (saved.wrapping_sub(code) as i32).wrapping_sub(1),
    };
    let torn = code == 0 || pc < -1 || pc >= code_len;
    Some((
        JsFrame {
            bytecode: if torn { 0 } else { bytecode },
            pc: if torn { -1 } else { pc },
            native: false,
        },
        previous,
    ))
}

/// What names the function whose bytecode is at `bytecode`, cheaply: its name and file
/// atoms, and the line and column it is defined at (a function of the same four is the
/// same function).
pub fn function_key(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    bytecode: u32,
) -> Option<(u32, i32)> {
    let field = |offset: u32| bytecode.checked_add(offset);
    let name = memory.u32(field(layout.bytecode_name)?)?;
    let file = memory.u32(field(layout.bytecode_file)?)?;
    let line = memory.i32(field(layout.bytecode_line)?)?;
    let column = memory.i32(field(layout.bytecode_column)?)?;
    Some((
        name.rotate_left(16) ^ file,
        line.wrapping_mul(4096).wrapping_add(column),
    ))
}

/// The function whose bytecode is at `bytecode`, its atoms read from runtime `rt`'s table:
/// its name (empty for a function the bytecode does not name: a method, an arrow
/// function; see [`name_at`]), file and the line and column it is defined at.
pub fn function(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    rt: u32,
    bytecode: u32,
) -> Option<ScriptFunction> {
    let field = |offset: u32| bytecode.checked_add(offset);
    let name = atom(
        layout,
        memory,
        rt,
        memory.u32(field(layout.bytecode_name)?)?,
    )?;
    let file = atom(
        layout,
        memory,
        rt,
        memory.u32(field(layout.bytecode_file)?)?,
    )?;
    Some(ScriptFunction {
        name: Some(name),
        source: file,
        line_defined: memory.i32(field(layout.bytecode_line)?)?,
        last_line_defined: memory.i32(field(layout.bytecode_column)?)?,
        size_code: memory.i32(field(layout.bytecode_code_len)?)?,
    })
}

/// The name a function that its bytecode does not name has in the source line `line` where
/// it starts, at `column` (from 1): a method's (`run` in `class R { run(n) {...} }`,
/// `get size()`, `static of(x)`); none for an arrow function or a `function` expression
/// (nor for a call, `xs.sort(`, where QuickJS may place an arrow function it is given).
pub fn name_at(line: &str, column: i32) -> Option<String> {
    let start = usize::try_from(column.checked_sub(1)?).ok()?;
    // A property read (`xs.sort(`, where an arrow function passed to it may say it
    // starts) is not a definition.
    if start > 0 && line.chars().nth(start - 1) == Some('.') {
        return None;
    }
    let mut rest: String = line.chars().skip(start).collect();
    for prefix in ["static ", "async ", "get ", "set ", "*"] {
        if let Some(after) = rest.trim_start().strip_prefix(prefix) {
            rest = after.to_string();
        }
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == '#';
    let name: String = rest
        .trim_start()
        .chars()
        .take_while(|&c| is_word(c))
        .collect();
    let after = rest.trim_start()[name.len()..].trim_start();
    let is_name = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !["function", "async", "class"].contains(&name.as_str());
    (is_name && after.starts_with('(')).then_some(name)
}

/// The text of `atom` in runtime `rt`'s table: an integer atom's digits, an empty string
/// for the null atom; `None` for a free or unreadable slot.
fn atom(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    rt: u32,
    atom: u32,
) -> Option<String> {
    if atom & ATOM_TAGGED_INT != 0 {
        return Some((atom & !ATOM_TAGGED_INT).to_string());
    }
    if atom == 0 {
        return Some(String::new());
    }
    let size = memory.u32(rt.checked_add(layout.runtime_atom_size)?)?;
    if atom >= size {
        return None;
    }
    let array = memory.u32(rt.checked_add(layout.runtime_atom_array)?)?;
    let string = memory.u32(array.checked_add(atom.checked_mul(4)?)?)?;
    // A free slot links to the next free one, with its low bit set.
    if string & 1 != 0 || string == 0 {
        return None;
    }
    read_string(layout, memory, string)
}

/// The string at `at`, up to [`MAX_STRING`] characters: Latin-1 or UTF-16 as its header
/// says; `None` for a string kept elsewhere (a slice or rope, which atoms are not).
fn read_string(layout: &QuickJsLayout, memory: &(impl Memory + ?Sized), at: u32) -> Option<String> {
    let header = memory.u32(at)?;
    let kind = (memory.u32(at.checked_add(4)?)? >> 28) & 3;
    if kind != 0 {
        return None;
    }
    let len = ((header & 0x7fff_ffff) as usize).min(MAX_STRING);
    let data = at.checked_add(layout.string_data)?;
    if header >> 31 == 0 {
        let mut bytes = vec![0; len];
        memory.read(data, &mut bytes)?;
        return Some(bytes.iter().map(|&b| char::from(b)).collect());
    }
    let mut bytes = vec![0; len * 2];
    memory.read(data, &mut bytes)?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    Some(String::from_utf16_lossy(&units))
}

/// The line position `pc` of the bytecode at `bytecode` is at, as QuickJS's backtraces
/// decode its line table; the line the function is defined at for an unknown position
/// (-1) or without a table.
pub fn line(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    bytecode: u32,
    pc: i32,
) -> Option<i32> {
    let field = |offset: u32| bytecode.checked_add(offset);
    let defined = memory.i32(field(layout.bytecode_line)?)?;
    let table = memory.u32(field(layout.bytecode_lines)?)?;
    let len = memory.i32(field(layout.bytecode_lines_len)?)?;
    if pc < 0 || table == 0 || len <= 0 {
        return Some(defined);
    }
    let mut bytes = vec![0; usize::try_from(len).ok()?.min(1 << 20)];
    memory.read(table, &mut bytes)?;
    Some(decode_line(&bytes, defined, pc))
}

/// The line at position `pc` in the line table `table` of a function defined at line
/// `line`: each entry steps the position and the line (one byte for small steps, else a 0
/// and the two as LEB128 numbers), then the column (a zigzag LEB128 number); the line of
/// the last entry at or before `pc`.
fn decode_line(table: &[u8], mut line: i32, pc: i32) -> i32 {
    let mut at = 0;
    let mut position: i64 = 0;
    while at < table.len() {
        let op = table[at];
        at += 1;
        let (pc_step, line_step) = if op == 0 {
            let Some(pc_step) = uleb(table, &mut at) else {
                break;
            };
            let Some(line_step) = zigzag(table, &mut at) else {
                break;
            };
            (pc_step as i64, line_step)
        } else {
            let op = i32::from(op - PC2LINE_OP_FIRST);
            (
                i64::from(op / PC2LINE_RANGE),
                op % PC2LINE_RANGE + PC2LINE_BASE,
            )
        };
        // The column's step.
        if zigzag(table, &mut at).is_none() {
            break;
        }
        position += pc_step;
        if i64::from(pc) < position {
            break;
        }
        line = line.wrapping_add(line_step);
    }
    line
}

/// An unsigned LEB128 number at `at` (moved past it).
fn uleb(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// A signed number as QuickJS writes them: zigzag over an unsigned LEB128 number.
fn zigzag(bytes: &[u8], at: &mut usize) -> Option<i32> {
    let v = uleb(bytes, at)?;
    Some(((v >> 1) as i32) ^ -((v & 1) as i32))
}

#[cfg(test)]
mod tests;
