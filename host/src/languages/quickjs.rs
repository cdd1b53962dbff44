//! QuickJS's call stack, read from its runtime in linear memory: the chain of
//! `JSStackFrame`s from the innermost (`rt->current_stack_frame`) back through each
//! `prev_frame`, as QuickJS's own backtraces (`build_backtrace`) walk it. The runtime is
//! reached from the context `JS_CallInternal` was last entered with (its first argument,
//! kept by stack mode's capture; `ctx->rt`). Each frame's function (`cur_func`, an object)
//! is a bytecode function, whose `JSFunctionBytecode` gives its name, file and the line it
//! is defined at, or a C function (`Array.prototype.sort`, `JSON.parse`...), whose code is
//! native and shows as such.
//!
//! Each frame is pushed by a native frame of the interpreter, `JS_CallInternal` for a
//! bytecode function, the C function's caller for a C function: the frames are put in place
//! of those native frames (see [`placing`]).
//!
//! Both QuickJS-ng and Fabrice Bellard's QuickJS are read. Every offset comes from the
//! interpreter's DWARF ([`QuickJsLayout::from_dwarf`]), the class ids of bytecode functions
//! too, and so does which of the two it is: QuickJS-ng keeps a function's file, line and
//! column in the bytecode (`filename`, `line_num`, `col_num`); Bellard's keeps the file in
//! its `debug` member and the line and column at the head of its line table
//! (`debug.pc2line_buf`: two LEB128 numbers, each less one, as `find_line_num` reads them).
//! The constants are how both pack their values on a 32-bit target (`JS_NAN_BOXING`: a
//! `JSValue` is 64 bits, the tag in the high word), their strings' header (`len:31,
//! is_wide_char:1`, then the hash and `atom_type:2`, with QuickJS-ng's `kind:2` of a string
//! kept elsewhere between them, where its DWARF has `kind`), and which functions push frames.
//!
//! The interpreter writes a frame's position (`cur_pc`) only before it calls, throws or
//! may run other code, and never clears it: the running function's position is unknown
//! while it runs its own bytecode, so its time has no line of the script.

use super::layout::Layout;
use super::memory::Memory;
use super::ScriptFunction;

pub mod placing;

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
/// Where QuickJS-ng keeps what the walk reads, in one build.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Where a bytecode's link in the runtime's list of garbage-collected objects is
    /// (`header.link`); `None` where the DWARF does not say (nothing is checked then).
    bytecode_link: Option<u32>,
    defined: Defined,
    string_data: u32,
    /// Whether a string's header says where its characters are (QuickJS-ng's `kind`).
    string_kind: bool,
}

/// Where a function's bytecode says the line and column it is defined at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Defined {
    /// QuickJS-ng: in fields of their own (`line_num`, `col_num`).
    Fields { line: u32, column: u32 },
    /// Bellard's: at the head of its line table, whose address and length are here
    /// (`debug.pc2line_buf`, `debug.pc2line_len`).
    LineTable { table: u32, len: u32 },
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

    /// The layout of the QuickJS interpreter (QuickJS-ng or Bellard's) in the module
    /// `bytes`, from its DWARF, or what is missing.
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
            bytecode_file: at("JSFunctionBytecode", "filename")
                .or_else(|_| at("JSFunctionBytecode", "debug.filename"))?,
            bytecode_link: at("JSFunctionBytecode", "header.link").ok(),
            defined: match at("JSFunctionBytecode", "line_num") {
                Ok(line) => Defined::Fields {
                    line,
                    column: at("JSFunctionBytecode", "col_num")?,
                },
                Err(_) => Defined::LineTable {
                    table: at("JSFunctionBytecode", "debug.pc2line_buf")
                        .map_err(|_| "no `JSFunctionBytecode.line_num` nor `.debug.pc2line_buf` in the module's DWARF".to_string())?,
                    len: at("JSFunctionBytecode", "debug.pc2line_len")?,
                },
            },
            string_kind: layout.offset("JSString", "kind").is_some(),
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
    /// Where it last saved its position in its bytecode (a byte offset; -1 when unknown):
    /// a calling frame's call.
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
    let first = runtime(layout, memory, context)
        .and_then(|rt| memory.u32(rt.checked_add(layout.runtime_current_frame)?));
    super::walk_chain(first, MAX_DEPTH, |at| read_frame(layout, memory, at), push)
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
    // Bellard's QuickJS leaves `cur_pc` unset until the frame first saves it: a position
    // out of its code is unknown, the function still known.
    let placed = (-1..code_len).contains(&pc);
    Some((
        JsFrame {
            bytecode: if code == 0 { 0 } else { bytecode },
            pc: if code != 0 && placed { pc } else { -1 },
            native: false,
        },
        previous,
    ))
}

/// Whether the object at `bytecode` is still a live function's bytecode. The reader asks
/// again what a tick's walk found: by the time it reads a function's names, a function run
/// once (a module's body, an `eval`) may have been freed and its memory given to another
/// object, whose fields would name another function or none. A live bytecode is on its
/// runtime's list of garbage-collected objects (`header.link`, a `list_head` of `prev`
/// then `next`), its neighbours pointing back at it; freeing it unlinks it and clears both
/// (`list_del`). The object's kind is no help: QuickJS keeps it in the object's header in
/// one version and in its allocator's block header in another.
fn is_bytecode(layout: &QuickJsLayout, memory: &(impl Memory + ?Sized), bytecode: u32) -> bool {
    let Some(link) = layout.bytecode_link else {
        return true;
    };
    let linked = || {
        let link = bytecode.checked_add(link)?;
        let (previous, next) = (memory.u32(link)?, memory.u32(link.checked_add(4)?)?);
        let back = memory.u32(previous.checked_add(4)?)? == link && memory.u32(next)? == link;
        Some(previous != 0 && next != 0 && back)
    };
    linked().unwrap_or(false)
}

/// What names the function whose bytecode is at `bytecode`, cheaply: its name and file
/// atoms, and the line and column it is defined at (a function of the same four is the
/// same function). Not checked as [`function`] is: a key unchanged since the function was
/// read is that function, freed or not (its memory untouched: the interpreter frees
/// everything as it ends, while the last ticks are read); memory taken by another object
/// gives another key, whose names [`function`] then refuses.
pub fn function_key(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    bytecode: u32,
) -> Option<(u32, i32)> {
    let field = |offset: u32| bytecode.checked_add(offset);
    let name = memory.u32(field(layout.bytecode_name)?)?;
    let file = memory.u32(field(layout.bytecode_file)?)?;
    let place = match layout.defined {
        Defined::Fields { line, column } => {
            let line = memory.i32(field(line)?)?;
            let column = memory.i32(field(column)?)?;
            line.wrapping_mul(4096).wrapping_add(column)
        }
        // The line table is the function's own.
        Defined::LineTable { table, .. } => memory.i32(field(table)?)?,
    };
    Some((name.rotate_left(16) ^ file, place))
}

/// The line and column the function whose bytecode is at `bytecode` is defined at (0 for
/// a function without them: Bellard's QuickJS can strip them).
fn defined_at(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    bytecode: u32,
) -> Option<(i32, i32)> {
    let field = |offset: u32| bytecode.checked_add(offset);
    match layout.defined {
        Defined::Fields { line, column } => {
            Some((memory.i32(field(line)?)?, memory.i32(field(column)?)?))
        }
        Defined::LineTable { table, len } => {
            let (table, len) = (memory.u32(field(table)?)?, memory.u32(field(len)?)?);
            if table == 0 {
                return Some((0, 0));
            }
            // Two LEB128 numbers of at most five bytes each, as wasm writes them.
            let mut head = vec![0; (len as usize).min(10)];
            memory.read(table, &mut head)?;
            let mut reader = wasmparser::BinaryReader::new(&head, 0);
            let line = reader.read_var_u32().ok()?;
            let column = reader.read_var_u32().ok()?;
            Some((
                i32::try_from(line).ok()?.checked_add(1)?,
                i32::try_from(column).ok()?.checked_add(1)?,
            ))
        }
    }
}

/// The function whose bytecode is at `bytecode`, its atoms read from runtime `rt`'s table:
/// its name (empty for a function the bytecode does not name: a method, an arrow
/// function; see [`name_at`]), file and the line and column it is defined at; `None` if it
/// is no longer a bytecode.
pub fn function(
    layout: &QuickJsLayout,
    memory: &(impl Memory + ?Sized),
    rt: u32,
    bytecode: u32,
) -> Option<ScriptFunction> {
    if !is_bytecode(layout, memory, bytecode) {
        return None;
    }
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
    let (line, column) = defined_at(layout, memory, bytecode)?;
    Some(ScriptFunction {
        name: Some(name),
        source: file,
        line_defined: line,
        last_line_defined: column,
        size_code: memory.i32(field(layout.bytecode_code_len)?)?,
    })
}

/// The name a function that its bytecode does not name has in the source line `line` where
/// it starts, at `column` (from 1, in bytes): a method's (`run` in `class R { run(n) {...} }`,
/// `get size()`, `static of(x)`); none for an arrow function or a `function` expression
/// (nor for a call, `xs.sort(`, where QuickJS may place an arrow function it is given).
pub fn name_at(line: &str, column: i32) -> Option<String> {
    // QuickJS counts columns in bytes of the source.
    let start = usize::try_from(column.checked_sub(1)?).ok()?;
    if !line.is_char_boundary(start) {
        return None;
    }
    // A property read (`xs.sort(`, where an arrow function passed to it may say it
    // starts) is not a definition.
    if line[..start].ends_with('.') {
        return None;
    }
    let mut rest: String = line.get(start..)?.to_string();
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
    if layout.string_kind && kind != 0 {
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

#[cfg(test)]
mod tests;
