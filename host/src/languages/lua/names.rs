//! The name Lua's own traceback gives a function called from Lua code: what its caller's
//! calling instruction called (`global 'fib'`, `local 'f'`, `method 'add'`, `field 'new'`,
//! `upvalue 'g'`, `for iterator`), found as Lua's debug library finds it: the register the
//! call takes the function from is traced back to the instruction that last set it, by a
//! symbolic run of the caller's code up to the call.
//!
//! Everything comes from the interpreter: the opcodes' numbers from its DWARF (the
//! enumerators `OP_MOVE`...), which instructions set their register A from its table
//! `luaP_opmodes` in memory, local variables' and upvalues' names from the prototype.

use super::super::layout::Layout;
use super::super::memory::Memory;
use super::LuaLayout;

/// The opcodes the naming reads, by their names in `lopcodes.h`.
const OPCODES: &[&str] = &[
    "OP_MOVE",
    "OP_LOADK",
    "OP_LOADKX",
    "OP_LOADNIL",
    "OP_GETUPVAL",
    "OP_GETTABUP",
    "OP_GETTABLE",
    "OP_GETI",
    "OP_GETFIELD",
    "OP_SELF",
    "OP_JMP",
    "OP_CALL",
    "OP_TAILCALL",
    "OP_TFORCALL",
    "OP_EXTRAARG",
];

/// Instructions read at most by one symbolic run (a caller's code up to its call).
const MAX_RUN: i32 = 1 << 16;
/// Registers traced back through moves at most.
const MAX_MOVES: usize = 32;
/// `luaP_opmodes`: the bit of an instruction that sets its register A, and of a
/// metamethod call (which follows the instruction that failed).
const SETS_A: u8 = 1 << 3;
const METAMETHOD: u8 = 1 << 7;
/// The upvalue whose name marks a global access.
const ENV: &str = "_ENV";

/// Where naming reads, in one build of Lua 5.4.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LuaNaming {
    /// The opcodes of [`OPCODES`], in that order.
    opcodes: Vec<u32>,
    opmodes: u32,
    proto_k: u32,
    value_size: u32,
    proto_upvalues: u32,
    proto_size_upvalues: u32,
    upvalue_size: u32,
    upvalue_name: u32,
    proto_locvars: u32,
    proto_size_locvars: u32,
    locvar_size: u32,
    locvar_name: u32,
    locvar_start: u32,
    locvar_end: u32,
}

impl LuaNaming {
    /// The types, globals and enumerators [`LuaNaming::from_layout`] reads.
    pub const TYPES: &'static [&'static str] = &["LocVar", "Upvaldesc"];
    pub const GLOBALS: &'static [&'static str] = &["luaP_opmodes"];
    pub const ENUMERATORS: &'static [&'static str] = OPCODES;

    /// What naming reads, from a layout that has it (with [`LuaLayout::TYPES`]).
    pub fn from_layout(layout: &Layout) -> Option<LuaNaming> {
        let at = |ty: &str, path: &str| u32::try_from(layout.offset(ty, path)?).ok();
        let size = |ty: &str| u32::try_from(layout.size(ty)?).ok();
        Some(LuaNaming {
            opcodes: OPCODES
                .iter()
                .map(|name| u32::try_from(*layout.enumerators.get(*name)?).ok())
                .collect::<Option<Vec<u32>>>()?,
            opmodes: u32::try_from(*layout.globals.get("luaP_opmodes")?).ok()?,
            proto_k: at("Proto", "k")?,
            value_size: size("TValue")?,
            proto_upvalues: at("Proto", "upvalues")?,
            proto_size_upvalues: at("Proto", "sizeupvalues")?,
            upvalue_size: size("Upvaldesc")?,
            upvalue_name: at("Upvaldesc", "name")?,
            proto_locvars: at("Proto", "locvars")?,
            proto_size_locvars: at("Proto", "sizelocvars")?,
            locvar_size: size("LocVar")?,
            locvar_name: at("LocVar", "varname")?,
            locvar_start: at("LocVar", "startpc")?,
            locvar_end: at("LocVar", "endpc")?,
        })
    }

    fn op(&self, name: &str) -> u32 {
        let at = OPCODES
            .iter()
            .position(|n| *n == name)
            .expect("a listed opcode");
        self.opcodes[at]
    }
}

/// Fields of an instruction (Lua 5.4's formats).
fn op(i: u32) -> u32 {
    i & 0x7f
}
fn arg_a(i: u32) -> u32 {
    (i >> 7) & 0xff
}
fn arg_k(i: u32) -> bool {
    (i >> 15) & 1 != 0
}
fn arg_b(i: u32) -> u32 {
    (i >> 16) & 0xff
}
fn arg_c(i: u32) -> u32 {
    (i >> 24) & 0xff
}
fn arg_bx(i: u32) -> u32 {
    i >> 15
}
fn arg_ax(i: u32) -> u32 {
    i >> 7
}
fn arg_sj(i: u32) -> i32 {
    (i >> 7) as i32 - 0x00ff_ffff
}

/// One prototype's code and names, read as needed.
struct Code<'a, M: Memory + ?Sized> {
    naming: &'a LuaNaming,
    lua: &'a LuaLayout,
    memory: &'a M,
    proto: u32,
    code: u32,
    size: i32,
}

impl<M: Memory + ?Sized> Code<'_, M> {
    fn at(&self, pc: i32) -> Option<u32> {
        if pc < 0 || pc >= self.size {
            return None;
        }
        self.memory.u32(self.code.checked_add(pc as u32 * 4)?)
    }

    fn mode(&self, op: u32) -> Option<u8> {
        self.memory.u8(self.naming.opmodes.checked_add(op)?)
    }

    fn field(&self, offset: u32) -> Option<u32> {
        self.memory.u32(self.proto.checked_add(offset)?)
    }

    /// Constant `k`'s text, if it is a string.
    fn constant(&self, k: u32) -> Option<String> {
        let at = self
            .field(self.naming.proto_k)?
            .checked_add(k.checked_mul(self.naming.value_size)?)?;
        let tag = self.memory.u8(at.checked_add(self.lua.value_tag)?)?;
        // A string's tag in a value: its variant with the collectable bit.
        if tag & 0x0f != 0x04 {
            return None;
        }
        super::string(self.lua, self.memory, self.memory.u32(at)?)
    }

    fn upvalue(&self, n: u32) -> Option<String> {
        if n >= self.field(self.naming.proto_size_upvalues)? {
            return None;
        }
        let at = self
            .field(self.naming.proto_upvalues)?
            .checked_add(n * self.naming.upvalue_size)?;
        let name = self.memory.u32(at.checked_add(self.naming.upvalue_name)?)?;
        super::string(self.lua, self.memory, name)
    }

    /// The name of the `n`-th local (from 1) alive at `pc`, as `luaF_getlocalname` counts.
    fn local(&self, mut n: u32, pc: i32) -> Option<String> {
        let count = self.field(self.naming.proto_size_locvars)? as i32;
        let vars = self.field(self.naming.proto_locvars)?;
        for i in 0..count.min(MAX_RUN) {
            let at = vars.checked_add(i as u32 * self.naming.locvar_size)?;
            let start = self.memory.i32(at.checked_add(self.naming.locvar_start)?)?;
            if start > pc {
                break;
            }
            let end = self.memory.i32(at.checked_add(self.naming.locvar_end)?)?;
            if pc < end {
                n -= 1;
                if n == 0 {
                    let name = self.memory.u32(at.checked_add(self.naming.locvar_name)?)?;
                    return super::string(self.lua, self.memory, name);
                }
            }
        }
        None
    }

    /// The last instruction before `last` that set register `reg` where it surely ran
    /// (not inside a jump that may skip it), as Lua's `findsetreg` finds it.
    fn set_by(&self, mut last: i32, reg: u32) -> Option<i32> {
        let n = self.naming;
        if self.mode(op(self.at(last)?))? & METAMETHOD != 0 {
            last -= 1;
        }
        let (mut set, mut jump_target) = (None, 0);
        for pc in 0..last.min(MAX_RUN) {
            let i = self.at(pc)?;
            let (o, a) = (op(i), arg_a(i));
            let changes = if o == n.op("OP_LOADNIL") {
                a <= reg && reg <= a + arg_b(i)
            } else if o == n.op("OP_TFORCALL") {
                reg >= a + 2
            } else if o == n.op("OP_CALL") || o == n.op("OP_TAILCALL") {
                reg >= a
            } else if o == n.op("OP_JMP") {
                let dest = pc + 1 + arg_sj(i);
                if dest <= last && dest > jump_target {
                    jump_target = dest;
                }
                false
            } else {
                self.mode(o)? & SETS_A != 0 && reg == a
            };
            if changes {
                set = (pc >= jump_target).then_some(pc);
            }
        }
        set
    }

    /// What register `reg` holds at `pc` when it is a local, an upvalue or a constant:
    /// the kind and the name, and where the register was set (`None` if unknown).
    fn basic(
        &self,
        pc: i32,
        reg: u32,
        moves: usize,
    ) -> (Option<(&'static str, String)>, Option<i32>) {
        if let Some(name) = self.local(reg + 1, pc) {
            return (Some(("local", name)), Some(pc));
        }
        let Some(set) = self.set_by(pc, reg) else {
            return (None, None);
        };
        let Some(i) = self.at(set) else {
            return (None, None);
        };
        let n = self.naming;
        let o = op(i);
        let found = if o == n.op("OP_MOVE") && arg_b(i) < arg_a(i) && moves < MAX_MOVES {
            return self.basic(set, arg_b(i), moves + 1);
        } else if o == n.op("OP_GETUPVAL") {
            self.upvalue(arg_b(i)).map(|name| ("upvalue", name))
        } else if o == n.op("OP_LOADK") {
            self.constant(arg_bx(i)).map(|name| ("constant", name))
        } else if o == n.op("OP_LOADKX") {
            self.at(set + 1)
                .and_then(|x| self.constant(arg_ax(x)))
                .map(|name| ("constant", name))
        } else {
            None
        };
        (found, Some(set))
    }

    /// `global` if the table instruction `i` at `pc` indexes `_ENV`, else `field`.
    fn global_or_field(&self, pc: i32, i: u32, table_is_upvalue: bool) -> &'static str {
        let name = match table_is_upvalue {
            true => self.upvalue(arg_b(i)),
            false => match self.basic(pc, arg_b(i), 0).0 {
                Some(("local" | "upvalue", name)) => Some(name),
                _ => None,
            },
        };
        if name.as_deref() == Some(ENV) {
            "global"
        } else {
            "field"
        }
    }

    /// What register `reg` holds at `pc`, as Lua's `getobjname` names it.
    fn object(&self, pc: i32, reg: u32) -> Option<(&'static str, String)> {
        let (found, set) = self.basic(pc, reg, 0);
        if found.is_some() {
            return found;
        }
        let set = set?;
        let i = self.at(set)?;
        let n = self.naming;
        let o = op(i);
        let key = |c: u32| self.constant(c).unwrap_or_else(|| "?".to_string());
        if o == n.op("OP_GETTABUP") {
            Some((self.global_or_field(set, i, true), key(arg_c(i))))
        } else if o == n.op("OP_GETFIELD") {
            Some((self.global_or_field(set, i, false), key(arg_c(i))))
        } else if o == n.op("OP_GETTABLE") {
            let name = match self.basic(set, arg_c(i), 0).0 {
                Some(("constant", name)) => name,
                _ => "?".to_string(),
            };
            Some((self.global_or_field(set, i, false), name))
        } else if o == n.op("OP_GETI") {
            Some(("field", "integer index".to_string()))
        } else if o == n.op("OP_SELF") {
            let name = match arg_k(i) {
                true => key(arg_c(i)),
                false => match self.basic(set, arg_c(i), 0).0 {
                    Some(("constant", name)) => name,
                    _ => "?".to_string(),
                },
            };
            Some(("method", name))
        } else {
            None
        }
    }
}

/// The name Lua's traceback gives the function the Lua function of prototype `proto`
/// calls at instruction `pc` (`global 'fib'`, `method 'add'`...), if its calling
/// instruction names one.
pub fn called_at(
    naming: &LuaNaming,
    lua: &LuaLayout,
    memory: &(impl Memory + ?Sized),
    proto: u32,
    pc: i32,
) -> Option<String> {
    let code = Code {
        naming,
        lua,
        memory,
        proto,
        code: memory.u32(proto.checked_add(lua.proto_code)?)?,
        size: memory.i32(proto.checked_add(lua.proto_size_code)?)?,
    };
    let i = code.at(pc)?;
    let o = op(i);
    if o == naming.op("OP_TFORCALL") {
        return Some("for iterator".to_string());
    }
    if o != naming.op("OP_CALL") && o != naming.op("OP_TAILCALL") {
        return None;
    }
    let (kind, name) = code.object(pc, arg_a(i))?;
    Some(format!("{kind} '{name}'"))
}
