//! The frames of interpreted languages (Lua, and next Python and JavaScript) running in a
//! module: an interpreter's structures located in linear memory from its DWARF
//! ([`layout`]), and the language's call stack read from them ([`lua`]), so that a profile
//! can show the script's functions where the interpreter's eval loop ran them.
//!
//! Reading is a bounded walk of memory the program may be rewriting at that instant:
//! every address is checked against the memory's size, every chain has a depth limit, and
//! a chain that does not hold together ends the walk, counted as truncated, never a trap.

pub mod layout;
pub mod lua;
pub mod memory;
