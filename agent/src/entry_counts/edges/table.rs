//! The edges' memory: its layout, which the counted module's data and code write, and the
//! counts the host reads back from it.

use super::EdgePlan;

/// The layout of [`EDGES_MEMORY`] (all `u32` but the counts):
///
/// | offset | holds |
/// |---|---|
/// | 0 | `u64` indirect calls the table of pairs had no room for |
/// | 8 | `D`, direct edges; `H`, slots of the table of pairs (0, or a power of two); `R`, rows of the matrix; `K`, columns of all rows; `M`, cells of the matrix; `G`, kinds of calls through tables that never change; `B`, their blocks; `L`, callees of all kinds; `Q`, cells of all blocks |
/// | 48 | `D` pairs (caller, callee), written by the module's data |
/// | 48 + 8D | `R` rows: callee, its first column in the list, its columns, its first cell's address |
/// | then | `K` callers: each row's columns in turn |
/// | then | `G` kinds: cells of its blocks, its first callee in the list |
/// | then | `B` blocks: caller, kind, first cell's address |
/// | then | `L` callees: each kind's in turn, one per slot and one past the end ([`super::NO_CALLEE`] where a call traps) |
/// | `C` (8-aligned) | `D` `u64` counts of the direct edges |
/// | `C` + 8D | `Q` `u64` cells of the blocks: per block, one per callee of its kind |
/// | `C` + 8D + 8Q | `M` `u64` cells of the matrix |
/// | `C` + 8D + 8Q + 8M | `H` slots: caller + 1 (0: free), callee, `u64` count |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeTable {
    /// Direct edges.
    pub direct: u32,
    /// Slots of the table of pairs.
    pub slots: u32,
    /// Rows of the matrix.
    pub rows: u32,
    /// Columns of all rows.
    pub columns: u32,
    /// Cells of the matrix.
    pub cells: u32,
    /// Kinds of calls through tables that never change, counted at the site.
    pub kinds: u32,
    /// Blocks of those kinds' cells, one per caller and kind.
    pub blocks: u32,
    /// Callees of all kinds.
    pub callees: u32,
    /// Cells of all blocks.
    pub block_cells: u32,
}

/// The counts an [`EDGES_MEMORY`] holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    /// `(caller, callee, calls)` of every edge called at least once; a pair called both
    /// directly and indirectly appears twice.
    pub edges: Vec<(u32, u32, u64)>,
    /// Indirect calls whose edge found no room in the table of pairs: counted by their
    /// callee's entry counter only.
    pub lost: u64,
}

impl EdgeTable {
    const HEADER: u32 = 48;

    fn pairs_at(self) -> u64 {
        u64::from(Self::HEADER)
    }

    fn rows_at(self) -> u64 {
        self.pairs_at() + 8 * u64::from(self.direct)
    }

    fn columns_at(self) -> u64 {
        self.rows_at() + 16 * u64::from(self.rows)
    }

    fn kinds_at(self) -> u64 {
        self.columns_at() + 4 * u64::from(self.columns)
    }

    fn blocks_at(self) -> u64 {
        self.kinds_at() + 8 * u64::from(self.kinds)
    }

    fn callees_at(self) -> u64 {
        self.blocks_at() + 12 * u64::from(self.blocks)
    }

    fn counts_at(self) -> u64 {
        (self.callees_at() + 4 * u64::from(self.callees)).next_multiple_of(8)
    }

    /// Where the blocks' cells start.
    pub(crate) fn block_cells_at(self) -> u64 {
        self.counts_at() + 8 * u64::from(self.direct)
    }

    /// Where the matrix starts.
    pub(crate) fn matrix_at(self) -> u64 {
        self.block_cells_at() + 8 * u64::from(self.block_cells)
    }

    pub(crate) fn slots_at(self) -> u64 {
        self.matrix_at() + 8 * u64::from(self.cells)
    }

    /// Where count `k` of the direct edges is.
    pub(crate) fn count(self, k: u32) -> u64 {
        self.counts_at() + 8 * u64::from(k)
    }

    /// Bytes the memory needs: with a row's worth of cells after the last, so that a
    /// number announced for a row of more columns (a call through a table that reached an
    /// import, which did not take the number back, and then the module again) stays in the
    /// memory.
    pub(crate) fn bytes(self) -> u64 {
        self.slots_at() + 16 * u64::from(self.slots) + 8 * u64::from(self.columns)
    }

    /// Pages of the memory (at least one).
    pub(crate) fn pages(self) -> u64 {
        self.bytes().div_ceil(65536).max(1)
    }

    /// The active data that writes the header, the pairs, the rows and their columns.
    pub(in crate::entry_counts) fn data(self, plan: &EdgePlan) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.counts_at() as usize);
        out.extend_from_slice(&0u64.to_le_bytes());
        for n in [
            self.direct,
            self.slots,
            self.rows,
            self.columns,
            self.cells,
            self.kinds,
            self.blocks,
            self.callees,
            self.block_cells,
            0,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for &(caller, callee) in &plan.pairs {
            out.extend_from_slice(&caller.to_le_bytes());
            out.extend_from_slice(&callee.to_le_bytes());
        }
        for row in &plan.rows {
            for n in [row.callee, row.first, row.columns, row.cell] {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        for &caller in &plan.columns {
            out.extend_from_slice(&caller.to_le_bytes());
        }
        let mut first = 0u32;
        for kind in &plan.kinds {
            let callees = kind.callees.len() as u32;
            out.extend_from_slice(&callees.to_le_bytes());
            out.extend_from_slice(&first.to_le_bytes());
            first += callees;
        }
        for block in &plan.blocks {
            for n in [block.caller, block.kind, block.cell] {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        for &callee in plan.kinds.iter().flat_map(|k| &k.callees) {
            out.extend_from_slice(&callee.to_le_bytes());
        }
        out
    }

    /// The layout `memory`, an [`EDGES_MEMORY`]'s bytes, says it has; `None` if they are
    /// not one.
    pub fn read_layout(memory: &[u8]) -> Option<EdgeTable> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(memory.get(at..at + 4)?.try_into().ok()?));
        let table = EdgeTable {
            direct: u32_at(8)?,
            slots: u32_at(12)?,
            rows: u32_at(16)?,
            columns: u32_at(20)?,
            cells: u32_at(24)?,
            kinds: u32_at(28)?,
            blocks: u32_at(32)?,
            callees: u32_at(36)?,
            block_cells: u32_at(40)?,
        };
        (table.bytes() <= memory.len() as u64).then_some(table)
    }

    /// The counts in `memory`, an [`EDGES_MEMORY`]'s bytes; `None` if they are not one.
    pub fn read(memory: &[u8]) -> Option<EdgeCounts> {
        Self::read_skipping(memory, &|_| None)
    }

    /// [`EdgeTable::read`], skipping the counts that `blank_until(offset)` says were never
    /// written: for an offset in bytes known to be all zero, where they end (the next
    /// offset that may not be); else `None`. A matrix of millions of cells is mostly never
    /// written, and reading it whole would fault in every page of it.
    pub fn read_skipping(
        memory: &[u8],
        blank_until: &dyn Fn(u64) -> Option<u64>,
    ) -> Option<EdgeCounts> {
        let u32_at = |at: u64| -> Option<u32> {
            let at = usize::try_from(at).ok()?;
            Some(u32::from_le_bytes(memory.get(at..at + 4)?.try_into().ok()?))
        };
        let u64_at = |at: u64| -> Option<u64> {
            let at = usize::try_from(at).ok()?;
            Some(u64::from_le_bytes(memory.get(at..at + 8)?.try_into().ok()?))
        };
        // The counts from `first`, `len` of them, that are not 0, by index: the blank
        // stretches stepped over.
        let counted = |first: u64, len: u64, out: &mut Vec<(u64, u64)>| -> Option<()> {
            let mut i = 0;
            while i < len {
                let at = first + 8 * i;
                if let Some(end) = blank_until(at) {
                    i = (end.saturating_sub(first)).div_ceil(8).max(i + 1);
                    continue;
                }
                let calls = u64_at(at)?;
                if calls > 0 {
                    out.push((i, calls));
                }
                i += 1;
            }
            Some(())
        };
        let table = Self::read_layout(memory)?;
        let mut edges = Vec::new();
        let mut found = Vec::new();
        counted(table.count(0), u64::from(table.direct), &mut found)?;
        for &(k, calls) in &found {
            let pair = table.pairs_at() + 8 * k;
            edges.push((u32_at(pair)?, u32_at(pair + 4)?, calls));
        }
        for b in 0..u64::from(table.blocks) {
            let block = table.blocks_at() + 12 * b;
            let (caller, kind, cell) = (u32_at(block)?, u32_at(block + 4)?, u32_at(block + 8)?);
            let kind = table.kinds_at() + 8 * u64::from(kind);
            let (cells, first) = (u32_at(kind)?, u32_at(kind + 4)?);
            found.clear();
            counted(u64::from(cell), u64::from(cells), &mut found)?;
            for &(c, calls) in &found {
                let callee = u32_at(table.callees_at() + 4 * (u64::from(first) + c))?;
                // A call through a table that trapped (see `slots`): no call.
                if callee != super::NO_CALLEE {
                    edges.push((caller, callee, calls));
                }
            }
        }
        for r in 0..u64::from(table.rows) {
            let row = table.rows_at() + 16 * r;
            let (callee, first, columns, cell) = (
                u32_at(row)?,
                u32_at(row + 4)?,
                u32_at(row + 8)?,
                u32_at(row + 12)?,
            );
            found.clear();
            counted(u64::from(cell), u64::from(columns), &mut found)?;
            for &(c, calls) in &found {
                let caller = u32_at(table.columns_at() + 4 * (u64::from(first) + c))?;
                edges.push((caller, callee, calls));
            }
        }
        for s in 0..u64::from(table.slots) {
            let slot = table.slots_at() + 16 * s;
            if blank_until(slot).is_some_and(|end| end >= slot + 16) {
                continue;
            }
            let (caller, calls) = (u32_at(slot)?, u64_at(slot + 8)?);
            if caller > 0 && calls > 0 {
                edges.push((caller - 1, u32_at(slot + 4)?, calls));
            }
        }
        Some(EdgeCounts {
            edges,
            lost: u64_at(0)?,
        })
    }
}
