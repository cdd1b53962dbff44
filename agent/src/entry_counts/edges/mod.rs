//! Caller -> callee calls in a counted module, as gprof's arcs: a counter per direct edge,
//! bumped at each call site, and counters per (caller, callee) for calls through a table or
//! a reference, bumped at the call site where the table never changes, else at the
//! callee's entry.
//!
//! - **Direct calls** (`call`, `return_call`, to a defined function or an import): every
//!   call site of a caller to the same callee shares one `u64` cell of [`EDGES_MEMORY`],
//!   which the site adds one to just before it calls: a load, an add and a store.
//! - **Calls through a table that never changes**: the site adds one to its caller's cell
//!   of the slot it calls (see [`slots`]).
//! - **Other indirect calls** (`call_indirect`, `call_ref` and their tail forms): the site
//!   puts a number naming its function in a global just before it calls, and (unless it is
//!   a tail call) 0 just after. Every function a table or a reference can reach (named by an
//!   element segment or a `ref.func`) looks at that global at its entry and, when it is not
//!   0, counts the call and sets it back to 0:
//!   - in a **matrix** when the module's function types cannot be subtypes of one another
//!     (the usual case): a caller's number is its column among the functions that make
//!     indirect calls of the type, and the callee adds one to the cell of its row at that
//!     column, inline;
//!   - else in an open-addressing **table** of pairs, through an added function,
//!     `arc(caller + 1, callee)`, where a pair that finds the table full is counted as lost
//!     (and said). The same when the matrix would pass [`MATRIX_CELLS`].
//!
//! A function whose every entry is one of those counted calls (not exported, not the start
//! function, and with the matrix or not reachable through a table) gets no entry counter:
//! its calls are its edges' (see [`EdgePlan::counted`]).
//!
//! Go resumes a goroutine's frames through `call_indirect` in `wasm_pc_f_loop`, with `PC_B`
//! (a Go function's parameter) saying where to go on, and starts a frame that
//! `runtime.morestack` stopped over at `PC_B` 0: a Go function counts an indirect caller
//! only for a call, `PC_B` 0 and not that start over, as the probed modes count (a
//! goroutine's first function is called by `wasm_pc_f_loop`). Every Go function keeps its
//! entry counter, which knows a resumption from a call.
//!
//! The memory is the module's own, per instance: each thread counts in its own. Its first
//! bytes say what it holds (see [`EdgeTable`]), so the host reads it with no other record.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use wasmparser::{BinaryReader, FunctionBody, Operator};

use crate::layout::ModuleLayout;
use crate::AgentError;

mod code;
mod slots;
mod table;

pub(crate) use code::{EdgeIndices, ARC_TYPE};
pub use slots::NO_CALLEE;
pub(in crate::entry_counts) use slots::{SlotBlock, SlotKind};
#[cfg(test)]
pub(in crate::entry_counts) use slots::{MAX_CALLEES, MAX_CELLS, MAX_SLOTS};
pub use table::{EdgeCounts, EdgeTable};

/// The name a counted module exports its edge counters' memory under.
pub const EDGES_MEMORY: &str = "wprof:edges";

/// The prefix of a second name the edges' memory is exported under, followed by the number
/// of the original module's functions (imports included) in decimal: the functions after
/// them are wprof's.
pub const FUNCTIONS_PREFIX: &str = "wprof:functions=";

/// The most cells the matrix of indirect calls may have: 2 GiB of the edges' memory, address
/// space that wasmtime reserves for every 32-bit memory anyway (4 GiB), of which a run
/// touches only the pages it counts in, and the host reads only those (see
/// [`EdgeTable`]). Past it, the table of pairs. CPython 3.15's matrix has 152 M cells: in the
/// table of pairs its counters cost twice the time (`docs/history.md`, "The matrix's size").
pub const MATRIX_CELLS: u64 = 1 << 28;

/// A call instruction of a body: where it is, where the next instruction is, and what it
/// calls.
#[derive(Debug, Clone, Copy)]
pub(super) struct Site {
    pub at: usize,
    pub next: usize,
    pub kind: SiteKind,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum SiteKind {
    /// A direct call, counted in this cell.
    Direct(u32),
    /// A call through a table that never changes, counted in the cell of the function it
    /// calls in [`EdgePlan::blocks`]' block `block` (see [`slots`]), the index kept in
    /// `local`.
    Slot { block: u32, local: u32 },
    /// A call through a table or a reference, announcing `number` (the caller's column + 1
    /// times 8 in the matrix, its id + 1 in the table of pairs); `tail`: a tail call.
    Indirect { number: u32, tail: bool },
}

/// A row of the matrix: a function a table reaches, and its cells, one per function that
/// makes indirect calls of its type.
#[derive(Debug, Clone, Copy)]
pub(super) struct Row {
    pub callee: u32,
    /// Its first caller in [`EdgePlan::columns`].
    pub first: u32,
    pub columns: u32,
    /// The address of its first cell.
    pub cell: u32,
}

/// How a function a table may reach counts its indirect callers at its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// It does not: no counted indirect call can reach it.
    None,
    /// In its row of the matrix, whose first cell is at this address.
    Matrix(u32),
    /// Through `arc`, in the table of pairs.
    Pairs,
}

/// Where a module's calls are counted: each body's call sites, the direct edges' cells,
/// how each function counts its indirect callers, and which functions keep an entry
/// counter.
#[derive(Debug, Default)]
pub(super) struct EdgePlan {
    /// Per defined function, its call sites in body order.
    pub sites: Vec<Vec<Site>>,
    /// The direct edges, `(caller, callee)` by cell.
    pub pairs: Vec<(u32, u32)>,
    /// The kinds of calls through tables that never change that sites count, and each
    /// caller's block of cells for one.
    pub kinds: Vec<SlotKind>,
    pub blocks: Vec<SlotBlock>,
    /// Per defined function, how it counts its indirect callers.
    pub looks: Vec<Look>,
    /// The matrix's rows and their columns' callers.
    pub rows: Vec<Row>,
    pub columns: Vec<u32>,
    /// Per defined function, whether it keeps an entry counter: some of its entries are no
    /// counted edge's (an export, the start function, a Go function, one reached through the
    /// table of pairs).
    pub counted: Vec<bool>,
    /// Per defined function with calls counted by slot, its locals' declarations with the
    /// local those sites keep the index in (see [`slots::scratch_local`]).
    pub locals: Vec<Option<Vec<u8>>>,
    /// The memory's layout.
    pub table: EdgeTable,
}

impl EdgePlan {
    /// The plan of `layout`'s module.
    pub fn of(layout: &ModuleLayout<'_>) -> Result<Self, AgentError> {
        let imports = layout.imported_funcs.len() as u32;
        let defined = layout.defined_funcs.len();
        let outside = Outside::of(layout.bytes, imports, defined)?;
        let mut taken = outside.taken;
        let keys = type_keys(layout.bytes)?;
        let mut cells: HashMap<(u32, u32), u32> = HashMap::new();
        let mut pairs = Vec::new();
        let mut sites = Vec::with_capacity(defined);
        // Per type key, the functions making indirect calls of it, in order, and each one's
        // column.
        let mut callers: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut column_of: HashMap<(u32, u32), u32> = HashMap::new();
        // The indirect sites, as (function, its site, type, table of a `call_indirect`),
        // and the tables the code writes.
        let mut indirect_sites: Vec<(usize, usize, u32, Option<u32>)> = Vec::new();
        let mut written = std::collections::HashSet::new();
        for (d, func) in layout.defined_funcs.iter().enumerate() {
            let caller = imports + d as u32;
            let body = FunctionBody::new(BinaryReader::new(
                &layout.bytes[func.body.clone()],
                func.body.start,
            ));
            let mut operators = body.get_operators_reader()?;
            let mut own = Vec::new();
            while !operators.eof() {
                let (operator, at) = operators.read_with_offset()?;
                let next = operators.original_position();
                let (type_index, table, tail) = match operator {
                    Operator::Call { function_index } | Operator::ReturnCall { function_index } => {
                        let fresh = pairs.len() as u32;
                        let cell = *cells.entry((caller, function_index)).or_insert(fresh);
                        if cell == fresh {
                            pairs.push((caller, function_index));
                        }
                        own.push(Site {
                            at,
                            next,
                            kind: SiteKind::Direct(cell),
                        });
                        continue;
                    }
                    Operator::RefFunc { function_index } => {
                        if let Some(t) = function_index
                            .checked_sub(imports)
                            .and_then(|d| taken.get_mut(d as usize))
                        {
                            *t = true;
                        }
                        continue;
                    }
                    Operator::CallIndirect {
                        type_index,
                        table_index,
                    } => (type_index, Some(table_index), false),
                    Operator::CallRef { type_index } => (type_index, None, false),
                    Operator::ReturnCallIndirect {
                        type_index,
                        table_index,
                    } => (type_index, Some(table_index), true),
                    Operator::ReturnCallRef { type_index } => (type_index, None, true),
                    ref other => {
                        written.extend(slots::writes_table(other));
                        continue;
                    }
                };
                indirect_sites.push((d, own.len(), type_index, table));
                own.push(Site {
                    at,
                    next,
                    kind: SiteKind::Indirect { number: 0, tail },
                });
            }
            sites.push(own);
        }
        // Each indirect site: by slot where its table never changes (and the caller can
        // take a local), else announced to its callee, by its caller's column among the
        // type's callers (the matrix's number, if it is made).
        let fixed = match (&keys, layout.go) {
            (Some(_), false) => Some(slots::FixedTables::of(layout, &written)?),
            _ => None,
        };
        let mut slot_blocks = slots::SlotBlocks::default();
        // Per function with a site that may count by slot: its added local and locals'
        // declarations, if it can take one.
        let mut scratch: HashMap<usize, Option<(u32, Vec<u8>)>> = HashMap::new();
        // How a call of function `d`, of type key `key` through `table`, counts by slot, if
        // it can.
        let mut by_slot = |d: usize, table: Option<u32>, key: Option<u32>| {
            let (Some(fixed), Some(keys), Some(table), Some(key)) = (&fixed, &keys, table, key)
            else {
                return Ok(None);
            };
            let Some(table_slots) = fixed.slots(table) else {
                return Ok(None);
            };
            let local = match scratch.entry(d) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => new.insert(slots::scratch_local(layout, d)?),
            };
            let Some((local, _)) = local else {
                return Ok(None);
            };
            let caller = imports + d as u32;
            let block = slot_blocks.block(fixed, (table, table_slots), key, keys, caller);
            Ok::<_, AgentError>(block.map(|block| SiteKind::Slot {
                block,
                local: *local,
            }))
        };
        for &(d, i, type_index, table) in &indirect_sites {
            let caller = imports + d as u32;
            let key = keys
                .as_ref()
                .and_then(|k| k.get(type_index as usize).copied());
            if let Some(kind) = by_slot(d, table, key)? {
                sites[d][i].kind = kind;
                continue;
            }
            let column = match key {
                Some(key) => *column_of.entry((key, caller)).or_insert_with(|| {
                    let list = callers.entry(key).or_default();
                    list.push(caller);
                    list.len() as u32 - 1
                }),
                None => 0,
            };
            if let SiteKind::Indirect { number, .. } = &mut sites[d][i].kind {
                *number = 8 * (column + 1);
            }
        }
        // The locals' declarations of the functions with a site counted by slot.
        let locals: Vec<Option<Vec<u8>>> = sites
            .iter()
            .enumerate()
            .map(|(d, own)| {
                let slotted = own.iter().any(|s| matches!(s.kind, SiteKind::Slot { .. }));
                let found = scratch.remove(&d).flatten();
                found.filter(|_| slotted).map(|(_, header)| header)
            })
            .collect();
        let indirect = sites
            .iter()
            .flatten()
            .any(|s| matches!(s.kind, SiteKind::Indirect { .. }));
        // The matrix: a row per function a table reaches whose type some site calls.
        let mut rows = Vec::new();
        let mut columns = Vec::new();
        let mut looks = vec![Look::None; defined];
        let mut matrix = keys.is_some() && indirect;
        if matrix {
            let keys = keys.as_ref().expect("checked");
            let mut first_of: HashMap<u32, u32> = HashMap::new();
            let mut total_cells = 0u64;
            for (d, func) in layout.defined_funcs.iter().enumerate() {
                if !taken[d] {
                    continue;
                }
                let key = keys[func.type_index as usize];
                let Some(list) = callers.get(&key) else {
                    continue;
                };
                let first = *first_of.entry(key).or_insert_with(|| {
                    columns.extend_from_slice(list);
                    (columns.len() - list.len()) as u32
                });
                rows.push((
                    d,
                    Row {
                        callee: imports + d as u32,
                        first,
                        columns: list.len() as u32,
                        cell: 0,
                    },
                ));
                total_cells += list.len() as u64;
            }
            matrix = total_cells <= MATRIX_CELLS;
        }
        let slots::SlotBlocks {
            kinds, mut blocks, ..
        } = slot_blocks;
        let mut table = EdgeTable {
            direct: pairs.len() as u32,
            kinds: kinds.len() as u32,
            blocks: blocks.len() as u32,
            callees: kinds.iter().map(|k| k.callees.len() as u32).sum(),
            block_cells: blocks.iter().map(|b| kinds[b.kind as usize].cells()).sum(),
            ..EdgeTable::default()
        };
        if matrix {
            table.rows = rows.len() as u32;
            table.columns = columns.len() as u32;
            table.cells = rows.iter().map(|(_, r)| r.columns).sum();
            let mut cell = table.matrix_at();
            for (d, row) in &mut rows {
                row.cell = u32::try_from(cell).map_err(|_| too_large())?;
                looks[*d] = Look::Matrix(row.cell);
                cell += 8 * u64::from(row.columns);
            }
        } else if indirect && taken.iter().any(|&t| t) {
            // Room for four pairs per function a table reaches, at least 256 slots, at most
            // 2^18 (4 MiB).
            let reachable = taken.iter().filter(|&&t| t).count();
            table.slots = (4 * reachable).next_power_of_two().clamp(256, 1 << 18) as u32;
            for (d, look) in looks.iter_mut().enumerate() {
                if taken[d] {
                    *look = Look::Pairs;
                }
            }
            // A site announces its function: id + 1.
            for (d, own) in sites.iter_mut().enumerate() {
                for site in own {
                    if let SiteKind::Indirect { number, .. } = &mut site.kind {
                        *number = imports + d as u32 + 1;
                    }
                }
            }
            rows.clear();
            columns.clear();
        }
        if looks.iter().all(|l| *l == Look::None) {
            // Nothing reaches an entry's look: the sites need not set the global.
            for own in &mut sites {
                own.retain(|s| !matches!(s.kind, SiteKind::Indirect { .. }));
            }
        }
        if table.bytes() > u64::from(u32::MAX) {
            return Err(too_large());
        }
        let mut cell = table.block_cells_at();
        for block in &mut blocks {
            block.cell = cell as u32;
            cell += 8 * u64::from(kinds[block.kind as usize].cells());
        }
        // A function a table reaches but no site's type can call is entered by no call of
        // the module's.
        let counted = (0..defined)
            .map(|d| layout.go || outside.entered[d] || looks[d] == Look::Pairs)
            .collect();
        Ok(EdgePlan {
            sites,
            pairs,
            kinds,
            blocks,
            looks,
            rows: rows.into_iter().map(|(_, r)| r).collect(),
            columns,
            counted,
            locals,
            table,
        })
    }

    /// Whether an indirect site sets the global (and so the module has it).
    pub fn counts_indirect(&self) -> bool {
        self.looks.iter().any(|l| *l != Look::None)
    }

    /// Whether the module has `arc` and the table of pairs.
    pub fn has_arc(&self) -> bool {
        self.table.slots > 0
    }
}

fn too_large() -> AgentError {
    AgentError::Unsupported {
        what: "a module whose edge counters would pass 4 GiB".to_string(),
        offset: 0,
    }
}

/// What reaches a module's functions from outside its own call sites.
struct Outside {
    /// Per defined function: named by an element segment or a global's initializer.
    taken: Vec<bool>,
    /// Per defined function: exported, or the start function.
    entered: Vec<bool>,
}

impl Outside {
    fn of(bytes: &[u8], imports: u32, defined: usize) -> Result<Self, AgentError> {
        let mut out = Outside {
            taken: vec![false; defined],
            entered: vec![false; defined],
        };
        let mark = |list: &mut Vec<bool>, id: u32| {
            if let Some(t) = id
                .checked_sub(imports)
                .and_then(|d| list.get_mut(d as usize))
            {
                *t = true;
            }
        };
        let in_expression = |expr: &wasmparser::ConstExpr<'_>, taken: &mut Vec<bool>| {
            for operator in expr.get_operators_reader() {
                if let Operator::RefFunc { function_index } = operator? {
                    mark(taken, function_index);
                }
            }
            Ok::<_, AgentError>(())
        };
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            match payload? {
                wasmparser::Payload::ElementSection(reader) => {
                    for element in reader {
                        match element?.items {
                            wasmparser::ElementItems::Functions(functions) => {
                                for f in functions {
                                    mark(&mut out.taken, f?);
                                }
                            }
                            wasmparser::ElementItems::Expressions(_, expressions) => {
                                for e in expressions {
                                    in_expression(&e?, &mut out.taken)?;
                                }
                            }
                        }
                    }
                }
                wasmparser::Payload::GlobalSection(reader) => {
                    for global in reader {
                        in_expression(&global?.init_expr, &mut out.taken)?;
                    }
                }
                wasmparser::Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == wasmparser::ExternalKind::Func {
                            mark(&mut out.entered, export.index);
                        }
                    }
                }
                wasmparser::Payload::StartSection { func, .. } => mark(&mut out.entered, func),
                wasmparser::Payload::CodeSectionStart { .. } => break,
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A key per type index such that a call through type `t` can reach a function of type `u`
/// only if their keys are equal (their parameters and results); `None` when the module has
/// types that may be subtypes of others (a rec group of several types, a supertype, a
/// type not final), where the table of pairs counts instead.
fn type_keys(bytes: &[u8]) -> Result<Option<Vec<u32>>, AgentError> {
    let mut keys = Vec::new();
    let mut known: HashMap<(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>), u32> =
        HashMap::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let wasmparser::Payload::TypeSection(reader) = payload? {
            for group in reader {
                let group = group?;
                let mut types = group.types();
                let (Some(sub), None) = (types.next(), types.next()) else {
                    return Ok(None);
                };
                if !sub.is_final || sub.supertype_idx.is_some() {
                    return Ok(None);
                }
                let key = match &sub.composite_type.inner {
                    wasmparser::CompositeInnerType::Func(f) if !sub.composite_type.shared => {
                        let next = known.len() as u32;
                        *known
                            .entry((f.params().to_vec(), f.results().to_vec()))
                            .or_insert(next)
                    }
                    // Not a function: no call goes through it.
                    _ => u32::MAX,
                };
                keys.push(key);
            }
            return Ok(Some(keys));
        }
    }
    Ok(Some(keys))
}
