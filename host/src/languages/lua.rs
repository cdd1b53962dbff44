//! Lua 5.4's call stack, read from a `lua_State` in linear memory: the chain of `CallInfo`
//! records from the running one (`L->ci`) back to the state's base, as Lua's own
//! traceback (`luaL_traceback`) walks it. Each Lua function's record gives its prototype
//! (`Proto`: its source and the line it is defined at) and the instruction it is at
//! (`savedpc`), from which the current line comes, decoded from the prototype's line
//! table as `luaG_getfuncline` decodes it. A record of a C function is passed over, but
//! where a call started a new run of `luaV_execute` (`CIST_FRESH`) is kept, so that the
//! Lua frames can be placed among the native ones.
//!
//! Every offset comes from the interpreter's DWARF ([`LuaLayout::from_dwarf`]); the only
//! constants are Lua 5.4's tag and status bits, the same in every 5.4 release.
//!
//! The innermost Lua frame's line is where that function last saved its position
//! (`savepc`: at calls, and at instructions that may raise an error or run a metamethod),
//! which is how Lua's own error messages place it; the frames below it are at their calls.

use super::layout::Layout;
use super::memory::Memory;
use super::ScriptFunction;

pub mod names;

/// Lua records walked at most; a deeper stack is truncated (Lua's own limit, `LUAI_MAXCCALLS`,
/// is 200 C levels, but Lua-to-Lua calls may go far deeper).
pub const MAX_DEPTH: usize = 512;

/// `CallInfo.callstatus`: a call of a C function.
const CIST_C: u16 = 1 << 1;
/// `CallInfo.callstatus`: a call that started a new run of `luaV_execute`.
const CIST_FRESH: u16 = 1 << 2;
/// `CallInfo.callstatus`: a tail call, whose record the caller's call gave up: the record
/// below it is not the caller, and Lua's traceback gives it no name.
const CIST_TAIL: u16 = 1 << 5;
/// A Lua closure's tag in a `TValue` (`LUA_VLCL`, collectable).
const TAG_LUA_CLOSURE: u8 = 0x06 | (1 << 6);
/// A long string's tag (`LUA_VLNGSTR`); a short one is `LUA_VSHRSTR` (0x04).
const TAG_LONG_STRING: u8 = 0x14;
const TAG_SHORT_STRING: u8 = 0x04;
/// A prototype's tag (`LUA_VPROTO`).
const TAG_PROTO: u8 = 0x0A;
/// Instructions between two absolute line entries, at most (`MAXIWTHABS`).
const MAX_INSTRUCTIONS_WITHOUT_ABSOLUTE_LINE: i32 = 128;
/// A source name is read up to this many bytes.
const MAX_SOURCE: usize = 512;

/// Where Lua 5.4 keeps what the walk reads, in one build.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LuaLayout {
    state_ci: u32,
    state_status: u32,
    state_global: u32,
    global_main_thread: u32,
    state_base_ci: u32,
    ci_func: u32,
    ci_previous: u32,
    ci_callstatus: u32,
    ci_savedpc: u32,
    value_tag: u32,
    closure_proto: u32,
    proto_tag: u32,
    proto_source: u32,
    proto_line_defined: u32,
    proto_last_line_defined: u32,
    proto_code: u32,
    proto_size_code: u32,
    proto_line_info: u32,
    proto_size_line_info: u32,
    proto_abs_line_info: u32,
    proto_size_abs_line_info: u32,
    abs_line_size: u32,
    abs_line_pc: u32,
    abs_line_line: u32,
    string_tag: u32,
    string_short_len: u32,
    string_long_len: u32,
    string_contents: u32,
    /// Where the names Lua's traceback gives functions are read, if the build says.
    naming: Option<names::LuaNaming>,
}

impl LuaLayout {
    /// The types [`LuaLayout::from_dwarf`] reads.
    pub const TYPES: &'static [&'static str] = &[
        "lua_State",
        "global_State",
        "CallInfo",
        "TValue",
        "LClosure",
        "Proto",
        "AbsLineInfo",
        "TString",
        "LocVar",
        "Upvaldesc",
    ];

    /// The layout of the Lua 5.4 interpreter in the module `bytes`, from its DWARF, or
    /// what is missing.
    pub fn from_dwarf(bytes: &[u8]) -> Result<LuaLayout, String> {
        Self::from_layout(&Layout::read_with(
            bytes,
            Self::TYPES,
            names::LuaNaming::GLOBALS,
            names::LuaNaming::ENUMERATORS,
        ))
    }

    /// Where the names Lua's traceback gives functions are read, if the build says.
    pub fn naming(&self) -> Option<&names::LuaNaming> {
        self.naming.as_ref()
    }

    /// The layout from the types read, or the first member missing.
    pub fn from_layout(layout: &Layout) -> Result<LuaLayout, String> {
        let at = |ty: &str, path: &str| {
            layout
                .offset(ty, path)
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| format!("no `{ty}.{path}` in the module's DWARF"))
        };
        // `CallInfo.func` is a `StkIdRel` (a union of the pointer and an offset) since
        // 5.4.6, the pointer itself before.
        let (state_ci, state_base_ci) = (at("lua_State", "ci")?, at("lua_State", "base_ci")?);
        let ci_func = at("CallInfo", "func.p").or_else(|_| at("CallInfo", "func"))?;
        Ok(LuaLayout {
            state_ci,
            state_status: at("lua_State", "status")?,
            state_global: at("lua_State", "l_G")?,
            global_main_thread: at("global_State", "mainthread")?,
            state_base_ci,
            ci_func,
            ci_previous: at("CallInfo", "previous")?,
            ci_callstatus: at("CallInfo", "callstatus")?,
            ci_savedpc: at("CallInfo", "u.l.savedpc")?,
            value_tag: at("TValue", "tt_")?,
            closure_proto: at("LClosure", "p")?,
            proto_tag: at("Proto", "tt")?,
            proto_source: at("Proto", "source")?,
            proto_line_defined: at("Proto", "linedefined")?,
            proto_last_line_defined: at("Proto", "lastlinedefined")?,
            proto_code: at("Proto", "code")?,
            proto_size_code: at("Proto", "sizecode")?,
            proto_line_info: at("Proto", "lineinfo")?,
            proto_size_line_info: at("Proto", "sizelineinfo")?,
            proto_abs_line_info: at("Proto", "abslineinfo")?,
            proto_size_abs_line_info: at("Proto", "sizeabslineinfo")?,
            abs_line_size: layout
                .size("AbsLineInfo")
                .and_then(|s| u32::try_from(s).ok())
                .ok_or("no size of `AbsLineInfo` in the module's DWARF")?,
            abs_line_pc: at("AbsLineInfo", "pc")?,
            abs_line_line: at("AbsLineInfo", "line")?,
            string_tag: at("TString", "tt")?,
            string_short_len: at("TString", "shrlen")?,
            string_long_len: at("TString", "u.lnglen")?,
            string_contents: at("TString", "contents")?,
            naming: names::LuaNaming::from_layout(layout),
        })
    }
}

/// One Lua function's record on the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LuaFrame {
    /// Its prototype's address.
    pub proto: u32,
    /// The instruction it is at (an index into its code; -1 before the first).
    pub pc: i32,
    /// Its call started a new run of `luaV_execute`: the native frames below this one's
    /// belong to the caller's run.
    pub fresh: bool,
    /// The record below it is a Lua function's, whose instruction made the call (else a C
    /// function called it, or it is the stack's first).
    pub called_from_lua: bool,
}

impl LuaFrame {
    /// The frame in one word, as the signal handler keeps it: the prototype's address, the
    /// instruction plus one in the next 30 bits, then whether a Lua function called it and
    /// whether it is fresh.
    pub fn pack(self) -> u64 {
        u64::from(self.proto)
            | (u64::from((self.pc + 1) as u32 & 0x3fff_ffff) << 32)
            | (u64::from(self.called_from_lua) << 62)
            | (u64::from(self.fresh) << 63)
    }

    /// The frame [`LuaFrame::pack`] kept in `word`.
    pub fn unpack(word: u64) -> LuaFrame {
        LuaFrame {
            proto: word as u32,
            pc: ((word >> 32) as u32 & 0x3fff_ffff) as i32 - 1,
            called_from_lua: (word >> 62) & 1 != 0,
            fresh: word >> 63 != 0,
        }
    }
}

/// The name the source line `line` gives the function it defines, if it defines one and
/// only one: `fib` in `local function fib(n)`, `Vec.new` in `function Vec.new(x, y)`,
/// `Vec:add` in `function Vec:add(o)`, `inc` in `local inc = function(x)`.
pub fn name_in_source(line: &str) -> Option<String> {
    let code = line.split("--").next().unwrap_or(line);
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let keyword_at: Vec<usize> = code
        .match_indices("function")
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            let after = code[at + 8..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        })
        .map(|(at, _)| at)
        .collect();
    let [at] = keyword_at[..] else {
        return None;
    };
    let is_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| is_word(c) || c == '.' || c == ':')
    };
    // `function NAME(`
    let after = code[at + 8..].trim_start();
    if let Some(open) = after.find('(') {
        let name = after[..open].trim();
        if is_name(name) {
            return Some(name.to_string());
        }
    }
    // `[local] NAME = function(`
    let before = code[..at].trim_end().strip_suffix('=')?.trim_end();
    let name = before
        .rsplit(|c: char| c.is_whitespace() || c == ',')
        .next()?;
    let name = name.strip_prefix("local").map_or(name, str::trim);
    is_name(name).then(|| name.to_string())
}

/// Walks the call stack of the `lua_State` at `state`, handing each Lua frame to `push`,
/// innermost first, until it says no more; whether the walk reached the state's base.
/// Allocates nothing: the signal handler walks with it.
pub fn walk_into(
    layout: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    state: u32,
    push: &mut dyn FnMut(LuaFrame) -> bool,
) -> bool {
    let Some(base) = state.checked_add(layout.state_base_ci) else {
        return false;
    };
    let Some(mut ci) = state
        .checked_add(layout.state_ci)
        .and_then(|at| memory.u32(at))
    else {
        return false;
    };
    // A frame is handed on once the record below it is read, which says whether a Lua
    // function called it (not for a tail call: the record below is its caller's caller).
    let mut pending: Option<(LuaFrame, bool)> = None;
    for _ in 0..MAX_DEPTH {
        if ci == base {
            return pending.is_none_or(|(frame, _)| push(frame));
        }
        let Some(record) = read_record(layout, memory, ci) else {
            return false;
        };
        if let Some((mut frame, tail)) = pending.take() {
            frame.called_from_lua = record.frame.is_some() && !tail;
            if !push(frame) {
                return false;
            }
        }
        pending = record.frame.map(|frame| (frame, record.tail));
        ci = record.previous;
    }
    false
}

/// The state whose stack a tick walks, given the one the eval loop was last entered with
/// (`entered`): that one while it runs; once it no longer does (a coroutine that yielded,
/// or returned, into the one that resumed it), the state's main thread, which resumed it
/// unless coroutines resume coroutines. `None` if `entered` is no state.
pub fn running_state(
    layout: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    entered: u32,
) -> Option<u32> {
    let status = memory.u8(entered.checked_add(layout.state_status)?)?;
    let ci = memory.u32(entered.checked_add(layout.state_ci)?)?;
    let at_base = Some(ci) == entered.checked_add(layout.state_base_ci);
    if status == 0 && !at_base {
        return Some(entered);
    }
    let global = memory.u32(entered.checked_add(layout.state_global)?)?;
    memory.u32(global.checked_add(layout.global_main_thread)?)
}

/// What one `CallInfo` says.
struct Record {
    previous: u32,
    frame: Option<LuaFrame>,
    /// The call was a tail call (see [`CIST_TAIL`]).
    tail: bool,
}

fn read_record(layout: &LuaLayout, memory: &(impl Memory + ?Sized), ci: u32) -> Option<Record> {
    let field = |offset: u32| ci.checked_add(offset);
    let previous = memory.u32(field(layout.ci_previous)?)?;
    let status = memory.u16(field(layout.ci_callstatus)?)?;
    if previous == 0 {
        return None; // only the base has no previous record, and it was checked for
    }
    if status & CIST_C != 0 {
        return Some(Record {
            previous,
            frame: None,
            tail: false,
        });
    }
    let func = memory.u32(field(layout.ci_func)?)?;
    if memory.u8(func.checked_add(layout.value_tag)?)? != TAG_LUA_CLOSURE {
        return None;
    }
    let closure = memory.u32(func)?;
    let proto = memory.u32(closure.checked_add(layout.closure_proto)?)?;
    let code = memory.u32(proto.checked_add(layout.proto_code)?)?;
    let size_code = memory.i32(proto.checked_add(layout.proto_size_code)?)?;
    let saved = memory.u32(field(layout.ci_savedpc)?)?;
    let pc = (saved.wrapping_sub(code) as i32 / 4) - 1;
    // A record the interpreter is filling in (`L->ci` is set before its fields, so a tick
    // may find the last call's function there) may name a prototype whose code the
    // instruction is not in: a frame of an unknown function (prototype 0).
    let torn = code == 0 || pc < -1 || pc >= size_code;
    Some(Record {
        previous,
        frame: Some(LuaFrame {
            proto: if torn { 0 } else { proto },
            pc,
            fresh: status & CIST_FRESH != 0,
            called_from_lua: false,
        }),
        tail: status & CIST_TAIL != 0,
    })
}

/// Whether the object at `proto` is a prototype. The reader reads a function's names
/// after the tick that found it: by then the collector may have freed the prototype (of a
/// chunk `load` made) and its memory gone to another object.
fn is_proto(layout: &LuaLayout, memory: &(impl Memory + ?Sized), proto: u32) -> bool {
    proto
        .checked_add(layout.proto_tag)
        .and_then(|at| memory.u8(at))
        .is_some_and(|tag| tag == TAG_PROTO)
}

/// What names the function whose prototype is at `proto`, cheaply: its source string's
/// address and the line it is defined at (a function of the same two is the same
/// function); `None` if it is no longer a prototype.
pub fn function_key(
    layout: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    proto: u32,
) -> Option<(u32, i32)> {
    if !is_proto(layout, memory, proto) {
        return None;
    }
    Some((
        memory.u32(proto.checked_add(layout.proto_source)?)?,
        memory.i32(proto.checked_add(layout.proto_line_defined)?)?,
    ))
}

/// The function whose prototype is at `proto`; `None` if it is no longer a prototype.
pub fn function(
    layout: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    proto: u32,
) -> Option<ScriptFunction> {
    if !is_proto(layout, memory, proto) {
        return None;
    }
    let field = |offset: u32| proto.checked_add(offset);
    let source = memory.u32(field(layout.proto_source)?)?;
    let source = if source == 0 {
        "?".to_string() // a stripped chunk (`string.dump(f, true)`)
    } else {
        string(layout, memory, source)?
    };
    Some(ScriptFunction {
        name: None,
        source,
        line_defined: memory.i32(field(layout.proto_line_defined)?)?,
        last_line_defined: memory.i32(field(layout.proto_last_line_defined)?)?,
        size_code: memory.i32(field(layout.proto_size_code)?)?,
    })
}

/// The Lua string at `at`, read up to [`MAX_SOURCE`] bytes.
fn string(layout: &LuaLayout, memory: &(impl Memory + ?Sized), at: u32) -> Option<String> {
    let tag = memory.u8(at.checked_add(layout.string_tag)?)?;
    let len = match tag {
        TAG_SHORT_STRING => memory.u8(at.checked_add(layout.string_short_len)?)? as usize,
        TAG_LONG_STRING => memory.u32(at.checked_add(layout.string_long_len)?)? as usize,
        _ => return None,
    };
    let mut bytes = vec![0; len.min(MAX_SOURCE)];
    memory.read(at.checked_add(layout.string_contents)?, &mut bytes)?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The line instruction `pc` of the prototype at `proto` comes from, as `luaG_getfuncline`
/// decodes it; `None` without line information (a stripped chunk), out of its code, or if
/// `proto` is no longer a prototype.
pub fn line(
    layout: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    proto: u32,
    pc: i32,
) -> Option<i32> {
    if !is_proto(layout, memory, proto) {
        return None;
    }
    let field = |offset: u32| proto.checked_add(offset);
    let size_code = memory.i32(field(layout.proto_size_code)?)?;
    let size_line_info = memory.i32(field(layout.proto_size_line_info)?)?;
    let line_info = memory.u32(field(layout.proto_line_info)?)?;
    if line_info == 0 || pc < 0 || pc >= size_code.min(size_line_info) {
        return None;
    }
    let line_defined = memory.i32(field(layout.proto_line_defined)?)?;
    let size_abs = memory.i32(field(layout.proto_size_abs_line_info)?)?;
    let abs = memory.u32(field(layout.proto_abs_line_info)?)?;
    let abs_entry = |i: i32| -> Option<(i32, i32)> {
        let at = abs.checked_add((i as u32).checked_mul(layout.abs_line_size)?)?;
        Some((
            memory.i32(at.checked_add(layout.abs_line_pc)?)?,
            memory.i32(at.checked_add(layout.abs_line_line)?)?,
        ))
    };
    // The nearest absolute line at or before `pc`, if any; else the line it is defined at.
    let (mut base_pc, mut line) = (-1, line_defined);
    if size_abs > 0 && abs != 0 && abs_entry(0)?.0 <= pc {
        let mut i = (pc / MAX_INSTRUCTIONS_WITHOUT_ABSOLUTE_LINE - 1).clamp(0, size_abs - 1);
        if abs_entry(i)?.0 > pc {
            i = 0;
        }
        while i + 1 < size_abs && pc >= abs_entry(i + 1)?.0 {
            i += 1;
        }
        (base_pc, line) = abs_entry(i)?;
    }
    // Then each instruction's difference from the one before it.
    let mut deltas = vec![0u8; usize::try_from(pc - base_pc).ok()?];
    memory.read(line_info.checked_add((base_pc + 1) as u32)?, &mut deltas)?;
    Some(line + deltas.iter().map(|&d| d as i8 as i32).sum::<i32>())
}

#[cfg(test)]
mod tests;
