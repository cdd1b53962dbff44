//! Calls through a table that never changes, counted at the call site by the slot called:
//! what the table holds is known from the module alone, so each slot names its callee, and
//! a site adds one to its caller's cell of that slot before it calls, as a direct site
//! does. The callee does nothing at its entry, where counting made a few-instruction
//! virtual method twice as long (and perf's share of it half the default mode's).
//!
//! A table never changes when the module defines it (not imported, not exported), fills it
//! only with active element segments at constant offsets, and no instruction writes it
//! (`table.set`, `grow`, `fill`, `copy` into it, `init`, their atomic forms). Its slots are
//! then what the segments put there at instantiation, and its size stays its initial size.
//!
//! A call of type `t` through such a table can reach only its functions of type `t`: the
//! [`SlotKind`] of the table and the type names, per slot and one past the end, the
//! function a call there calls, or [`NO_CALLEE`] where it traps (nothing there, a function
//! of another type, an index out of bounds), which is no call. A caller's cells for a kind
//! are a [`SlotBlock`] of the edges' memory, one per slot and one past the end. The site
//! keeps the index in a local of its own, added to the function (see [`scratch_local`]),
//! clamps it to the table's size and adds one to that cell: 15 instructions, no branch.
//!
//! A cell per slot is more memory than a cell per callee of the type (CPython 3.11's
//! 4,587-slot table takes 5.8 M cells, against 1.3 M), but the memory is touched only where
//! calls are counted, and a map from slot to cell at the site cost CPython 3.12 more than
//! counting at the callee's entry (`docs/history.md`, "Counting calls through tables").

use std::collections::{HashMap, HashSet};

use wasmparser::{BinaryReader, ElementItems, ElementKind, Operator, Payload};

use crate::layout::ModuleLayout;
use crate::AgentError;

/// The callee of a cell a call that traps lands on.
pub const NO_CALLEE: u32 = u32::MAX;

/// The largest table whose calls are counted at the site.
pub(in crate::entry_counts) const MAX_SLOTS: u32 = 1 << 16;

/// The most cells all blocks may have (128 MiB of memory, touched only where calls are
/// counted); past it, the callee's entry counts.
pub(in crate::entry_counts) const MAX_CELLS: u64 = 1 << 24;

/// The most callees all kinds may list (8 MiB of the counted module's data).
pub(in crate::entry_counts) const MAX_CALLEES: u64 = 1 << 21;

/// The calls of one type through one table that never changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::entry_counts) struct SlotKind {
    /// Per slot, and one past the end, the function a call of the type there calls;
    /// [`NO_CALLEE`] where it traps.
    pub callees: Vec<u32>,
}

impl SlotKind {
    /// Cells a caller's block of this kind has: one per slot, and one past the end.
    pub fn cells(&self) -> u32 {
        self.callees.len() as u32
    }

    /// The table's size.
    pub fn len(&self) -> u32 {
        self.cells() - 1
    }
}

/// A caller's cells for the calls of one [`SlotKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::entry_counts) struct SlotBlock {
    pub caller: u32,
    /// Its kind in [`super::EdgePlan::kinds`].
    pub kind: u32,
    /// The address of its first cell.
    pub cell: u32,
}

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

    /// The kind of the calls of type key `key` (of `keys`, per type index) through a
    /// table holding `slots`.
    pub fn kind(&self, slots: &[Option<u32>], key: u32, keys: &[u32]) -> SlotKind {
        let of_the_type = |f: u32| {
            self.types
                .get(f as usize)
                .and_then(|&t| keys.get(t as usize))
                == Some(&key)
        };
        SlotKind {
            callees: slots
                .iter()
                .map(|slot| slot.filter(|&f| of_the_type(f)).unwrap_or(NO_CALLEE))
                .chain([NO_CALLEE])
                .collect(),
        }
    }
}

/// The kinds and blocks a module's sites count in, while they are chosen, within
/// [`MAX_CELLS`] and [`MAX_CALLEES`].
#[derive(Debug, Default)]
pub(super) struct SlotBlocks {
    pub kinds: Vec<SlotKind>,
    pub blocks: Vec<SlotBlock>,
    /// Per (table, type key), its kind (`None`: no room for it); per (caller, kind), its
    /// block.
    kind_of: HashMap<(u32, u32), Option<u32>>,
    block_of: HashMap<(u32, u32), u32>,
    cells: u64,
    callees: u64,
}

impl SlotBlocks {
    /// The block `caller` counts its calls of type key `key` through `table` (its index and
    /// slots) in, made if there is room; `None` if there is not.
    pub fn block(
        &mut self,
        fixed: &FixedTables,
        (table, slots): (u32, &[Option<u32>]),
        key: u32,
        keys: &[u32],
        caller: u32,
    ) -> Option<u32> {
        // A kind's callees and each of its blocks' cells: one per slot and one past the end.
        let cells = slots.len() as u64 + 1;
        let kind = match self.kind_of.get(&(table, key)) {
            Some(&known) => known?,
            None => {
                // Listed only with room for a block too (the cells left only shrink), and
                // refused once for all the kind's sites.
                let room = self.callees + cells <= MAX_CALLEES && self.cells + cells <= MAX_CELLS;
                let made = room.then(|| {
                    self.callees += cells;
                    self.kinds.push(fixed.kind(slots, key, keys));
                    self.kinds.len() as u32 - 1
                });
                self.kind_of.insert((table, key), made);
                made?
            }
        };
        if let Some(&b) = self.block_of.get(&(caller, kind)) {
            return Some(b);
        }
        if self.cells + cells > MAX_CELLS {
            return None;
        }
        self.cells += cells;
        self.blocks.push(SlotBlock {
            caller,
            kind,
            cell: 0,
        });
        let b = self.blocks.len() as u32 - 1;
        self.block_of.insert((caller, kind), b);
        Some(b)
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
