//! The layout of an interpreter's structures in linear memory, read from its module's
//! DWARF: each wanted type's size and its members' offsets, found by name, and global
//! variables' addresses. An interpreter's frame reader asks for the members it follows
//! (`CallInfo.previous`, `CallInfo.u.l.savedpc`), so a new build or minor version of the
//! interpreter, whose structures moved, needs no new table.
//!
//! A type is taken from its first complete definition (a `DW_TAG_structure_type` or
//! `DW_TAG_union_type` with a size, or a typedef of one); declarations are passed over.
//! Typedefs, `const` and `volatile` are looked through; pointers are leaves (their
//! pointee is named, not followed), so a shape is a tree of bounded depth.
//!
//! DWARF that cannot be read gives what was read before the problem, never an error: a
//! reader that misses a member it needs says so and reads nothing.

use std::collections::HashMap;

use addr2line::gimli;
use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset};

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// Nesting followed into a type's members (structs in structs), at most.
const MAX_DEPTH: usize = 8;

/// A type's shape: its size and, for a struct or union, its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A struct (or class) or union: its size and its members, in order.
    Record { size: u64, members: Vec<Member> },
    /// A pointer, and the name of what it points to, if that has one.
    Pointer { to: Option<String> },
    /// An array: its element's shape and its length, if known.
    Array {
        element: Box<Shape>,
        len: Option<u64>,
    },
    /// Anything else (a number, an enum): its size, if known.
    Scalar { size: Option<u64> },
}

/// A member of a struct or union: its name (none for an anonymous struct or union, whose
/// members are reached as the enclosing type's), its offset from the enclosing type's
/// start, and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: Option<String>,
    pub offset: u64,
    pub shape: Shape,
}

impl Shape {
    /// The shape's size in bytes (a pointer: 4, wasm32's).
    pub fn size(&self) -> Option<u64> {
        match self {
            Shape::Record { size, .. } => Some(*size),
            Shape::Pointer { .. } => Some(4),
            Shape::Array { element, len } => element.size()?.checked_mul((*len)?),
            Shape::Scalar { size } => *size,
        }
    }

    /// The member `name` of this record, looking through anonymous members: its offset
    /// from this record's start and its shape.
    pub fn member(&self, name: &str) -> Option<(u64, &Shape)> {
        let Shape::Record { members, .. } = self else {
            return None;
        };
        for m in members {
            match &m.name {
                Some(n) if n == name => return Some((m.offset, &m.shape)),
                None => {
                    if let Some((offset, shape)) = m.shape.member(name) {
                        return Some((m.offset + offset, shape));
                    }
                }
                Some(_) => {}
            }
        }
        None
    }

    /// The member at the dotted `path` (`u.l.savedpc`): its offset from this record's
    /// start and its shape.
    pub fn at(&self, path: &str) -> Option<(u64, &Shape)> {
        let mut here = (0, self);
        for name in path.split('.') {
            let (offset, shape) = here.1.member(name)?;
            here = (here.0 + offset, shape);
        }
        Some(here)
    }
}

/// The layouts a reader asked for, as the module's DWARF gives them.
#[derive(Debug, Default, Clone)]
pub struct Layout {
    /// Each wanted type found, by name.
    pub types: HashMap<String, Shape>,
    /// Each wanted global variable found at a fixed address, by name.
    pub globals: HashMap<String, u64>,
    /// Each wanted enumerator's value, by name (the first of the name found).
    pub enumerators: HashMap<String, i64>,
}

impl Layout {
    /// Reads the types named `types` and the global variables named `globals` from the
    /// DWARF of the module `bytes`; empty for a module without DWARF.
    pub fn read(bytes: &[u8], types: &[&str], globals: &[&str]) -> Layout {
        Self::read_with(bytes, types, globals, &[])
    }

    /// [`Layout::read`], and the values of the enumerators named `enumerators`.
    pub fn read_with(
        bytes: &[u8],
        types: &[&str],
        globals: &[&str],
        enumerators: &[&str],
    ) -> Layout {
        let mut layout = Layout::default();
        let sections = debug_sections(bytes);
        if !sections.contains_key(".debug_info") {
            return layout;
        }
        let wanted = Wanted {
            types,
            globals,
            enumerators,
        };
        if let Err(e) = layout.read_sections(&sections, &wanted) {
            tracing::debug!("DWARF layout: {e}");
        }
        layout
    }

    /// Offset of the member at `path` in type `ty` (`"CallInfo"`, `"u.l.savedpc"`).
    pub fn offset(&self, ty: &str, path: &str) -> Option<u64> {
        Some(self.types.get(ty)?.at(path)?.0)
    }

    /// Type `ty`'s size.
    pub fn size(&self, ty: &str) -> Option<u64> {
        self.types.get(ty)?.size()
    }

    fn read_sections(
        &mut self,
        sections: &HashMap<&str, &[u8]>,
        wanted: &Wanted<'_>,
    ) -> gimli::Result<()> {
        let Wanted {
            types,
            globals,
            enumerators,
        } = *wanted;
        let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| {
            let data = sections.get(id.name()).copied().unwrap_or(&[]);
            Ok::<_, gimli::Error>(EndianSlice::new(data, LittleEndian))
        })?;
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            if self.types.len() == types.len()
                && self.globals.len() == globals.len()
                && self.enumerators.len() == enumerators.len()
            {
                break;
            }
            let unit = dwarf.unit(header)?;
            let mut entries = unit.entries();
            while let Some(entry) = entries.next_dfs()? {
                let tag = entry.tag();
                let wanted_type = matches!(
                    tag,
                    gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_union_type
                        | gimli::DW_TAG_class_type
                        | gimli::DW_TAG_typedef
                );
                if !wanted_type && tag != gimli::DW_TAG_variable && tag != gimli::DW_TAG_enumerator
                {
                    continue;
                }
                let Some(name) = entry
                    .attr_value(gimli::DW_AT_name)
                    .and_then(|v| dwarf.attr_string(&unit, v).ok())
                    .map(|s| s.to_string_lossy().into_owned())
                else {
                    continue;
                };
                if tag == gimli::DW_TAG_enumerator {
                    if enumerators.contains(&name.as_str()) && !self.enumerators.contains_key(&name)
                    {
                        let value = match entry.attr_value(gimli::DW_AT_const_value) {
                            Some(AttributeValue::Sdata(v)) => Some(v),
                            Some(v) => v.udata_value().and_then(|v| i64::try_from(v).ok()),
                            None => None,
                        };
                        if let Some(value) = value {
                            self.enumerators.insert(name, value);
                        }
                    }
                } else if wanted_type {
                    if types.contains(&name.as_str()) && !self.types.contains_key(&name) {
                        let reading = Reading {
                            dwarf: &dwarf,
                            unit: &unit,
                        };
                        if let Some(shape @ Shape::Record { .. }) =
                            reading.shape(entry.offset(), 0)?
                        {
                            self.types.insert(name, shape);
                        }
                    }
                } else if globals.contains(&name.as_str()) && !self.globals.contains_key(&name) {
                    if let Some(address) = fixed_address(&unit, entry)? {
                        self.globals.insert(name, address);
                    }
                }
            }
        }
        Ok(())
    }
}

/// What a reading looks for, by name.
#[derive(Clone, Copy)]
struct Wanted<'a> {
    types: &'a [&'a str],
    globals: &'a [&'a str],
    enumerators: &'a [&'a str],
}

/// The address of a variable whose location is one fixed address (`DW_OP_addr`).
fn fixed_address(
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<Option<u64>> {
    let Some(AttributeValue::Exprloc(expression)) = entry.attr_value(gimli::DW_AT_location) else {
        return Ok(None);
    };
    let mut ops = expression.operations(unit.encoding());
    let first = ops.next()?;
    let Some(gimli::Operation::Address { address }) = first else {
        return Ok(None);
    };
    Ok(ops.next()?.is_none().then_some(address))
}

/// Reading types in one unit.
struct Reading<'d, 'a> {
    dwarf: &'d gimli::Dwarf<Reader<'a>>,
    unit: &'d gimli::Unit<Reader<'a>>,
}

impl Reading<'_, '_> {
    /// The shape of the type at `offset`, typedefs and qualifiers looked through; `None`
    /// for a declaration (no size), or past [`MAX_DEPTH`].
    fn shape(&self, offset: UnitOffset, depth: usize) -> gimli::Result<Option<Shape>> {
        if depth > MAX_DEPTH {
            return Ok(None);
        }
        let entry = self.unit.entry(offset)?;
        let size = entry
            .attr_value(gimli::DW_AT_byte_size)
            .and_then(|v| v.udata_value());
        match entry.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => match type_of(&entry) {
                Some(inner) => self.shape(inner, depth),
                None => Ok(Some(Shape::Scalar { size: None })),
            },
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type => Ok(Some(Shape::Pointer {
                to: match type_of(&entry) {
                    Some(to) => self.name_of(to)?,
                    None => None,
                },
            })),
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
                let Some(size) = size else {
                    return Ok(None);
                };
                let mut members = Vec::new();
                let mut tree = self.unit.entries_tree(Some(offset))?;
                let mut children = tree.root()?.children();
                while let Some(child) = children.next()? {
                    let child = child.entry();
                    if child.tag() != gimli::DW_TAG_member {
                        continue;
                    }
                    let offset = match child.attr_value(gimli::DW_AT_data_member_location) {
                        Some(v) => v.udata_value().unwrap_or(0),
                        None => 0, // a union's members
                    };
                    let Some(shape) = (match type_of(child) {
                        Some(ty) => self.shape(ty, depth + 1)?,
                        None => None,
                    }) else {
                        continue;
                    };
                    let name = child
                        .attr_value(gimli::DW_AT_name)
                        .and_then(|v| self.dwarf.attr_string(self.unit, v).ok())
                        .map(|s| s.to_string_lossy().into_owned());
                    members.push(Member {
                        name,
                        offset,
                        shape,
                    });
                }
                Ok(Some(Shape::Record { size, members }))
            }
            gimli::DW_TAG_array_type => {
                let Some(element) = type_of(&entry) else {
                    return Ok(None);
                };
                let Some(element) = self.shape(element, depth + 1)? else {
                    return Ok(None);
                };
                let mut len = None;
                let mut tree = self.unit.entries_tree(Some(offset))?;
                let mut children = tree.root()?.children();
                while let Some(child) = children.next()? {
                    let child = child.entry();
                    if child.tag() == gimli::DW_TAG_subrange_type {
                        len = child
                            .attr_value(gimli::DW_AT_count)
                            .and_then(|v| v.udata_value())
                            .or_else(|| {
                                child
                                    .attr_value(gimli::DW_AT_upper_bound)
                                    .and_then(|v| v.udata_value())
                                    .map(|u| u + 1)
                            });
                        break;
                    }
                }
                Ok(Some(Shape::Array {
                    element: Box::new(element),
                    len,
                }))
            }
            _ => Ok(Some(Shape::Scalar { size })),
        }
    }

    /// The name of the type at `offset`, if it has one.
    fn name_of(&self, offset: UnitOffset) -> gimli::Result<Option<String>> {
        let entry = self.unit.entry(offset)?;
        Ok(entry
            .attr_value(gimli::DW_AT_name)
            .and_then(|v| self.dwarf.attr_string(self.unit, v).ok())
            .map(|s| s.to_string_lossy().into_owned()))
    }
}

/// The type an entry refers to, within its unit.
fn type_of(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> Option<UnitOffset> {
    match entry.attr_value(gimli::DW_AT_type)? {
        AttributeValue::UnitRef(offset) => Some(offset),
        _ => None,
    }
}

/// The module's DWARF sections, by name.
fn debug_sections(bytes: &[u8]) -> HashMap<&str, &[u8]> {
    let mut sections = HashMap::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(wasmparser::Payload::CustomSection(section))
                if section.name().starts_with(".debug_") =>
            {
                sections.insert(section.name(), section.data());
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_through_typedefs_and_anonymous_unions() {
        let Some(bytes) = crate::languages::bench_lua() else {
            eprintln!("skipped: .tools/bench/lua.wasm is not built (bench/programs/build.sh)");
            return;
        };
        let layout = Layout::read(&bytes, &["CallInfo", "lua_State", "TString"], &[]);
        // Lua 5.4.8's lstate.h, on wasm32: CallInfo is 36 bytes; `func` (a StkIdRel, a
        // union of a pointer and an offset) first, then `top`, `previous`, `next`, and
        // the union `u` whose Lua half starts with `savedpc`.
        assert_eq!(layout.size("CallInfo"), Some(36));
        assert_eq!(layout.offset("CallInfo", "func.p"), Some(0));
        assert_eq!(layout.offset("CallInfo", "previous"), Some(8));
        assert_eq!(layout.offset("CallInfo", "u.l.savedpc"), Some(16));
        let (_, ci) = layout.types["lua_State"].at("ci").unwrap();
        assert_eq!(
            ci,
            &Shape::Pointer {
                to: Some("CallInfo".into())
            }
        );
        assert!(layout.offset("TString", "contents").is_some());
        assert_eq!(layout.offset("CallInfo", "nothing"), None);
    }
}
