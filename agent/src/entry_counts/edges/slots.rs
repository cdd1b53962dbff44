//! Calls through a table that never changes, counted at the call site by the slot called:
//! what the table holds is known from the module alone, so each slot names its callee,
//! and a site adds one to its caller's cell of that slot before it calls, as a direct site
//! does. The callee does nothing at its entry, where counting made a few-instruction
//! virtual method twice as long (and perf's share of it half the default mode's).
//!
//! A table never changes when the module defines it (not imported, not exported), fills it
//! only with active element segments at constant offsets, and no instruction writes it
//! (`table.set`, `grow`, `fill`, `copy` into it, `init`, their atomic forms). Its slots are
//! then what the segments put there at instantiation, and its size stays its initial size.
//!
//! A caller's cells for one table and one type are a block of the direct edges' cells, a
//! pair (caller, callee) per slot and one more: the site clamps the index to the table's
//! size, so an index out of bounds lands on the last. That cell, and those of slots that
//! hold nothing or a function of another type, name no callee ([`NO_CALLEE`]): a call
//! there traps, and is no call. The site keeps the index in a local of its own, added to
//! the function (see [`scratch_local`]).

use std::collections::{HashMap, HashSet};

use wasmparser::{BinaryReader, ElementItems, ElementKind, Operator, Payload};

use crate::layout::ModuleLayout;
use crate::AgentError;

/// The callee of a cell a call that traps lands on.
pub const NO_CALLEE: u32 = u32::MAX;

/// The largest table whose calls are counted by slot: every caller has a cell per slot.
pub(super) const MAX_SLOTS: u32 = 4096;

/// The most cells all blocks may have (each is 16 bytes of memory, and its pair 8 bytes of
/// the counted module's data); past it, the callee's entry counts.
pub(super) const MAX_CELLS: u64 = 1 << 16;

/// The tables of a module that never change, with what each slot holds (a function id),
/// and the type of every function.
#[derive(Debug, Default)]
pub(super) struct FixedTables {
    slots: HashMap<u32, Vec<Option<u32>>>,
    /// Per function id (imports first), its type index.
    types: Vec<u32>,
}

impl FixedTables {
    /// The fixed tables of `layout`'s module, given the tables its code writes
    /// ([`writes_table`]).
    pub fn of(layout: &ModuleLayout<'_>, written: &HashSet<u32>) -> Result<Self, AgentError> {
        let mut types = Vec::new();
        let mut imported_tables = 0u32;
        // Per table index: its slots, while it may still be fixed.
        let mut tables: HashMap<u32, Vec<Option<u32>>> = HashMap::new();
        let mut defined_tables = 0u32;
        for payload in wasmparser::Parser::new(0).parse_all(layout.bytes) {
            match payload? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        match import?.ty {
                            wasmparser::TypeRef::Func(t) | wasmparser::TypeRef::FuncExact(t) => {
                                types.push(t)
                            }
                            wasmparser::TypeRef::Table(_) => imported_tables += 1,
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for t in reader {
                        types.push(t?);
                    }
                }
                Payload::TableSection(reader) => {
                    for table in reader {
                        let table = table?;
                        let index = imported_tables + defined_tables;
                        defined_tables += 1;
                        let plain = matches!(table.init, wasmparser::TableInit::RefNull)
                            && !table.ty.table64
                            && !table.ty.shared
                            && table.ty.element_type == wasmparser::RefType::FUNCREF
                            && table.ty.initial <= u64::from(MAX_SLOTS)
                            && !written.contains(&index);
                        if plain {
                            tables.insert(index, vec![None; table.ty.initial as usize]);
                        }
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == wasmparser::ExternalKind::Table {
                            tables.remove(&export.index);
                        }
                    }
                }
                Payload::ElementSection(reader) => {
                    for element in reader {
                        let element = element?;
                        let ElementKind::Active {
                            table_index,
                            offset_expr,
                        } = element.kind
                        else {
                            continue;
                        };
                        let table = table_index.unwrap_or(0);
                        let Some(slots) = tables.get_mut(&table) else {
                            continue;
                        };
                        let mut ops = offset_expr.get_operators_reader();
                        let offset = match (ops.read()?, ops.read()?) {
                            (Operator::I32Const { value }, Operator::End) => Some(value as u32),
                            _ => None,
                        };
                        let items = items(&element.items)?;
                        let fits = offset.and_then(|o| {
                            let end = (o as usize).checked_add(items.len())?;
                            (end <= slots.len()).then_some(o as usize)
                        });
                        match (fits, items.iter().all(Option::is_some)) {
                            (Some(at), true) => {
                                for (slot, item) in slots[at..].iter_mut().zip(items) {
                                    *slot = item.expect("checked");
                                }
                            }
                            // An offset from a global, an item not a function nor null, or
                            // a segment that does not fit (instantiation fails then).
                            _ => {
                                tables.remove(&table);
                            }
                        }
                    }
                }
                Payload::CodeSectionStart { .. } => break,
                _ => {}
            }
        }
        Ok(FixedTables {
            slots: tables,
            types,
        })
    }

    /// What table `table` holds, slot by slot, if it never changes.
    pub fn slots(&self, table: u32) -> Option<&[Option<u32>]> {
        self.slots.get(&table).map(Vec::as_slice)
    }

    /// The pairs of `caller`'s block for calls of type key `key` (of `keys`, per type
    /// index) through a table holding `slots`: a slot's callee where its function has that
    /// type, [`NO_CALLEE`] where a call traps (nothing there, another type, past the end).
    pub fn block<'a>(
        &'a self,
        slots: &'a [Option<u32>],
        caller: u32,
        key: u32,
        keys: &'a [u32],
    ) -> impl Iterator<Item = (u32, u32)> + 'a {
        let of_the_type = move |f: u32| {
            self.types
                .get(f as usize)
                .and_then(|&t| keys.get(t as usize))
                == Some(&key)
        };
        slots
            .iter()
            .map(move |slot| slot.filter(|&f| of_the_type(f)).unwrap_or(NO_CALLEE))
            .chain([NO_CALLEE])
            .map(move |callee| (caller, callee))
    }
}

/// A segment's items: `Some(Some(f))` a function, `Some(None)` null, `None` anything else.
fn items(items: &ElementItems<'_>) -> Result<Vec<Option<Option<u32>>>, AgentError> {
    let mut out = Vec::new();
    match items {
        ElementItems::Functions(functions) => {
            for f in functions.clone() {
                out.push(Some(Some(f?)));
            }
        }
        ElementItems::Expressions(_, expressions) => {
            for e in expressions.clone() {
                let e = e?;
                let mut ops = e.get_operators_reader();
                out.push(match (ops.read()?, ops.read()?) {
                    (Operator::RefFunc { function_index }, Operator::End) => {
                        Some(Some(function_index))
                    }
                    (Operator::RefNull { .. }, Operator::End) => Some(None),
                    _ => None,
                });
            }
        }
    }
    Ok(out)
}

/// The table `operator` writes, if it writes one.
pub(super) fn writes_table(operator: &Operator<'_>) -> Option<u32> {
    match *operator {
        Operator::TableSet { table }
        | Operator::TableGrow { table }
        | Operator::TableFill { table }
        | Operator::TableInit { table, .. } => Some(table),
        Operator::TableCopy { dst_table, .. } => Some(dst_table),
        Operator::TableAtomicSet { table_index, .. }
        | Operator::TableAtomicRmwXchg { table_index, .. }
        | Operator::TableAtomicRmwCmpxchg { table_index, .. } => Some(table_index),
        _ => None,
    }
}

/// The index of an `i32` local that defined function `d` would get if one were added after
/// its own, and its locals' declarations with it (their bytes, from the start of the body
/// up to its code); `None` when the function cannot take one (its declarations would need a
/// longer count, or it has nearly as many locals as an engine allows).
pub(super) fn scratch_local(
    layout: &ModuleLayout<'_>,
    d: usize,
) -> Result<Option<(u32, Vec<u8>)>, AgentError> {
    let func = &layout.defined_funcs[d];
    let bytes = &layout.bytes[func.body.clone()];
    let mut reader = BinaryReader::new(bytes, 0);
    let groups = reader.read_var_u32()?;
    let count_len = reader.current_position();
    let mut count = layout.signature(func.type_index).params.len() as u64;
    for _ in 0..groups {
        count += u64::from(reader.read_var_u32()?);
        reader.read::<wasmparser::ValType>()?;
    }
    let code_start = reader.current_position();
    let mut header = Vec::with_capacity(code_start + 2);
    wasm_encoder::Encode::encode(&(groups + 1), &mut header);
    if count >= 50_000 || header.len() != count_len {
        return Ok(None);
    }
    header.extend_from_slice(&bytes[count_len..code_start]);
    header.extend_from_slice(&[0x01, 0x7F]);
    Ok(Some((count as u32, header)))
}
