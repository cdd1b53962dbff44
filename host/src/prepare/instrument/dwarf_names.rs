//! Function names from a module's DWARF, for the functions its name section leaves
//! unnamed (or for all of them, in a module without one). A subprogram names the function
//! whose body starts at its `low_pc`; a build whose DWARF records no addresses (CPython
//! 3.12's WASI build has them all 0) names nothing. `prepare` gives them to the agent before it names the functions,
//! so that they are in the cached manifests, the profiles and every report; a run from
//! the cache reads them from its manifest and never parses DWARF.
//!
//! Each `DW_TAG_subprogram` with code (a `DW_AT_low_pc`) names the function whose code
//! starts there. In a wasm module a DWARF address is an offset from the start of the code
//! section's contents, and a function's `low_pc` is where its body starts (LLVM's, past
//! the entry's size; the size's own offset is taken too). A subprogram whose code
//! the linker dropped has a `low_pc` that is no function's start (a tombstone), and names
//! nothing; inlined subroutines are not functions. The name is the linkage name
//! (`DW_AT_linkage_name`: a Rust or C++ one is mangled, as a name section holds it, and
//! reports demangle it; Zig's is its qualified path) when there is one, else `DW_AT_name`
//! (C's functions have only that), looked for through
//! `DW_AT_specification` and `DW_AT_abstract_origin` too (a C++ method defined outside its class, an out-of-line copy
//! of an inline function). Where two subprograms start at one function, the first names it.
//!
//! DWARF that cannot be read gives the names read before the problem, never an error:
//! a name is a courtesy, and the function keeps `func[N]`.
//!
//! A CPython whose DWARF places no function has its eval loop found by its shape
//! ([`crate::languages::cpython::unnamed`]), and named `_PyEval_EvalFrameDefault`, the
//! name its DWARF gives it: the frames of the Python script stand in its place, and
//! `--native` shows it by that name.

use std::collections::HashMap;

use addr2line::gimli;
use gimli::{AttributeValue, EndianSlice, LittleEndian};

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// References followed from a subprogram to the entry that names it, at most.
const MAX_REFERENCES: usize = 4;

/// Names the functions of `instrumenter` (reading `bytes`) that its name section leaves
/// unnamed, from the module's DWARF; nothing to do (and nothing read) when the name
/// section names every function.
pub fn name_unnamed(instrumenter: &mut wprof_agent::Instrumenter<'_>, bytes: &[u8]) {
    let unnamed = instrumenter.unnamed_functions();
    if unnamed.is_empty() {
        return;
    }
    let names = read(bytes, &unnamed);
    instrumenter.name_unnamed(names);
}

/// The DWARF names of the functions `wanted` (ids, imports counted) of the module `bytes`;
/// empty for a module without DWARF.
pub fn read(bytes: &[u8], wanted: &[u32]) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    let Some(module) = Sections::read(bytes) else {
        return names;
    };
    if let Some((eval, _)) = crate::languages::cpython::unnamed::eval_loop(bytes) {
        if wanted.contains(&eval) {
            names.insert(eval, "_PyEval_EvalFrameDefault".to_string());
        }
    }
    let starts = module.starts(wanted);
    if starts.is_empty() {
        return names;
    }
    if let Err(e) = module.name(&starts, &mut names) {
        tracing::debug!("DWARF names: {e} (after {} names)", names.len());
    }
    names
}

/// What naming needs of a module: its DWARF sections, where its code section's contents
/// start, how many functions it imports, and each defined function's body.
struct Sections<'a> {
    debug: HashMap<&'a str, &'a [u8]>,
    code_start: usize,
    imported: u32,
    bodies: Vec<std::ops::Range<usize>>,
}

impl<'a> Sections<'a> {
    /// `None` for a module without DWARF, or one that cannot be read.
    fn read(bytes: &'a [u8]) -> Option<Self> {
        let mut module = Sections {
            debug: HashMap::new(),
            code_start: 0,
            imported: 0,
            bodies: Vec::new(),
        };
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            match payload.ok()? {
                wasmparser::Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        if matches!(
                            import.ok()?.ty,
                            wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                        ) {
                            module.imported += 1;
                        }
                    }
                }
                wasmparser::Payload::CodeSectionStart { range, .. } => {
                    module.code_start = range.start
                }
                wasmparser::Payload::CodeSectionEntry(body) => module.bodies.push(body.range()),
                wasmparser::Payload::CustomSection(section)
                    if section.name().starts_with(".debug_") =>
                {
                    module.debug.insert(section.name(), section.data());
                }
                _ => {}
            }
        }
        module.debug.contains_key(".debug_info").then_some(module)
    }

    /// The DWARF addresses the functions `wanted` start at (their entry's size, and their
    /// body), each to its function's id.
    fn starts(&self, wanted: &[u32]) -> HashMap<u64, u32> {
        let mut starts = HashMap::with_capacity(wanted.len() * 2);
        for &id in wanted {
            let Some(body) = id
                .checked_sub(self.imported)
                .and_then(|d| self.bodies.get(d as usize))
            else {
                continue;
            };
            let Some(at) = body.start.checked_sub(self.code_start) else {
                continue;
            };
            let size = leb128_len(body.len() as u64);
            starts.insert(at as u64, id);
            if let Some(entry) = at.checked_sub(size) {
                starts.insert(entry as u64, id);
            }
        }
        starts
    }

    /// Walks every unit's entries for subprograms that start at one of `starts`, and names
    /// their functions in `names`.
    fn name(
        &self,
        starts: &HashMap<u64, u32>,
        names: &mut HashMap<u32, String>,
    ) -> gimli::Result<()> {
        let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| {
            let data = self.debug.get(id.name()).copied().unwrap_or(&[]);
            Ok::<_, gimli::Error>(EndianSlice::new(data, LittleEndian))
        })?;
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let unit = dwarf.unit(header)?;
            if !has_code(&dwarf, &unit)? {
                continue;
            }
            let mut entries = unit.entries();
            while let Some(entry) = entries.next_dfs()? {
                if entry.tag() != gimli::DW_TAG_subprogram {
                    continue;
                }
                let Some(low_pc) = entry.attr_value(gimli::DW_AT_low_pc) else {
                    continue;
                };
                let Some(&id) = dwarf
                    .attr_address(&unit, low_pc)?
                    .and_then(|pc| starts.get(&pc))
                else {
                    continue;
                };
                if names.contains_key(&id) {
                    continue;
                }
                if let Some(name) = name_of(&dwarf, &unit, entry.clone()) {
                    names.insert(id, name);
                }
            }
        }
        Ok(())
    }
}

/// Whether `unit` may describe code: not when it says where its code is and that is
/// nowhere (every range empty: the linker dropped its functions, or a tool cleared the
/// addresses), which spares reading its entries.
fn has_code(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
) -> gimli::Result<bool> {
    let root = unit.entry(unit.header.root_offset())?;
    if root.attr(gimli::DW_AT_ranges).is_none() && root.attr(gimli::DW_AT_high_pc).is_none() {
        return Ok(true);
    }
    let mut ranges = dwarf.unit_ranges(unit)?;
    while let Some(range) = ranges.next()? {
        if range.begin < range.end {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The name of a subprogram, from it or the entries it refers to (in its own unit): its
/// linkage name, else its name.
fn name_of<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &gimli::Unit<Reader<'a>>,
    mut entry: gimli::DebuggingInformationEntry<Reader<'a>>,
) -> Option<String> {
    let string = |value| {
        dwarf
            .attr_string(unit, value)
            .ok()
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string_lossy().into_owned())
    };
    let (mut linkage, mut name) = (None, None);
    for _ in 0..=MAX_REFERENCES {
        if linkage.is_none() {
            linkage = entry
                .attr_value(gimli::DW_AT_linkage_name)
                .or_else(|| entry.attr_value(gimli::DW_AT_MIPS_linkage_name))
                .and_then(string);
        }
        if name.is_none() {
            name = entry.attr_value(gimli::DW_AT_name).and_then(string);
        }
        if linkage.is_some() && name.is_some() {
            break;
        }
        let next = entry
            .attr_value(gimli::DW_AT_specification)
            .or_else(|| entry.attr_value(gimli::DW_AT_abstract_origin));
        let offset = match next {
            Some(AttributeValue::UnitRef(offset)) => offset,
            Some(AttributeValue::DebugInfoRef(offset)) => {
                match offset.to_unit_offset(&unit.header) {
                    Some(offset) => offset,
                    None => break,
                }
            }
            _ => break,
        };
        match unit.entry(offset) {
            Ok(next) => entry = next,
            Err(_) => break,
        }
    }
    linkage.or(name)
}

/// Bytes of `value` as an unsigned LEB128.
fn leb128_len(mut value: u64) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_without_dwarf_has_no_names() {
        let wasm = wat::parse_str("(module (func) (func))").unwrap();
        assert!(read(&wasm, &[0, 1]).is_empty());
    }

    /// `bytes` without its name section.
    fn unnamed(bytes: &[u8]) -> Vec<u8> {
        let mut module = wasm_encoder::Module::new();
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let payload = payload.unwrap();
            if let wasmparser::Payload::CustomSection(c) = &payload {
                if c.name() == "name" {
                    continue;
                }
            }
            if let Some((id, range)) = payload.as_section() {
                module.section(&wasm_encoder::RawSection {
                    id,
                    data: &bytes[range],
                });
            }
        }
        module.finish()
    }

    #[test]
    fn a_c_modules_dwarf_names_its_functions_as_its_name_section_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/compress.wasm");
        let original = std::fs::read(path).unwrap();
        let plan = wprof_agent::ProbePlan::default();
        let named = wprof_agent::Instrumenter::new(&original, &plan)
            .unwrap()
            .function_names();
        let bytes = unnamed(&original);
        let mut instrumenter = wprof_agent::Instrumenter::new(&bytes, &plan).unwrap();
        let ids = instrumenter.unnamed_functions();
        assert_eq!(ids.len() as u32, instrumenter.defined_function_count());
        let names = read(&bytes, &ids);
        // The sample's own functions (the libc's have no DWARF here), and each as the name
        // section names it.
        for own in ["find_match", "crc32", "lz_compress"] {
            assert!(names.values().any(|n| n == own), "{own}: {names:?}");
        }
        // The sample's own functions as the name section names them (the Zig runtime's
        // linkage names are their qualified paths, where the name section has symbols).
        let source = std::fs::read_to_string(path.replace(".wasm", ".c")).unwrap();
        let defined_in_c = |name: &str| {
            source.lines().any(|l| {
                !l.starts_with(' ')
                    && !l.trim_end().ends_with(';')
                    && l.contains(&format!(" {name}("))
            })
        };
        let mut own = 0;
        for (id, name) in &names {
            let in_name_section = &named[*id as usize];
            if in_name_section == "main" {
                // clang's symbol for `main(argc, argv)`, which a wasi-sdk build's name
                // section holds too (Zig's linker names it `main`).
                assert_eq!(name, "__main_argc_argv");
            } else if defined_in_c(in_name_section) {
                assert_eq!(name, in_name_section, "function {id}");
                own += 1;
            }
        }
        assert!(own >= 8, "{own} of the sample's functions named: {names:?}");
        name_unnamed(&mut instrumenter, &bytes);
        let shown = instrumenter.function_names();
        for (id, name) in &names {
            assert_eq!(&shown[*id as usize], name);
        }
    }

    #[test]
    fn leb128_lengths() {
        assert_eq!(leb128_len(0), 1);
        assert_eq!(leb128_len(127), 1);
        assert_eq!(leb128_len(128), 2);
        assert_eq!(leb128_len(16383), 2);
        assert_eq!(leb128_len(16384), 3);
    }
}
