//! What the reports show of the module's functions beyond the profile's own records, kept
//! in the profile when it is written: the names a reader knows them by (demangled, or Go's
//! own) and their source files and lines. A report then reads the same from any directory
//! and on any machine, without the module.

use serde::{Deserialize, Serialize};

/// The module's functions as the reports show them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolsRecord {
    /// Where the module was when it was profiled, as an absolute path (reports that need
    /// its bytes look there, after `--module`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_path: Option<String>,
    /// The profile's functions whose shown name or source the module told, by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionSymbol>,
}

/// One function's shown name and source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSymbol {
    /// The function's id, as in `functions`.
    pub id: u32,
    /// The name the reports show, where it is not the record's (`name`, the module's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<String>,
    /// Its source file, as the compiler recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The first line of its code in that file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// Stack mode: the sampled CPU time of each source line, as the line tables tell where the
/// sampled instructions are (each function's own time, at the instruction it ran or the
/// call it was in; an inlined function's instructions are its own lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinesRecord {
    /// Each line that samples found, by function, file and line.
    pub lines: Vec<LineTime>,
    /// Sampled time at instructions of no line (no DWARF there, or line 0), in
    /// nanoseconds.
    #[serde(default)]
    pub unlined_ns: u64,
    /// Sampled time at machine code of no wasm instruction (what the compiler adds around
    /// a function's body), in nanoseconds.
    #[serde(default)]
    pub unmapped_ns: u64,
    /// Go: the part of `lines`' time that was sampled at a function's dispatch (through
    /// which every jump between its blocks goes) and is shared among the lines jumped to,
    /// in proportion to their own sampled time ([`crate::report::go_lines`]), in
    /// nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dispatch_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One source line's sampled time in one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineTime {
    /// The function whose instructions they are, by id.
    pub function: u32,
    /// The source file, as the compiler recorded it.
    pub file: String,
    pub line: u32,
    /// The CPU time samples found there, in nanoseconds.
    pub self_ns: u64,
}
