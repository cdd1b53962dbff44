//! Go's source lines of a Go module's code, by file offset: what coverage's lcov maps its
//! blocks through in a Go module, which has no DWARF.
//!
//! Go's line table is indexed by "pc": for wasm, `PC_B`, the resume point a function goes
//! on from. The Go compiler lays a function out as nested blocks closed one after the other,
//! a `br_table` on `PC_B` (its parameter, local 0) jumping to the end of one of them: the code
//! after the `t`-th block's `end` runs with the `PC_B` values the table sends to `t`. So each
//! such stretch of code has the lines of its `PC_B` values; a function without the table
//! (no call that can resume) is one stretch with all of its lines. The dispatch itself, and
//! the code after the blocks that wrap it (the exit that unwinds, `return 1`), are no
//! line's: they run at every re-entry and unwinding, not once per pass over a line.

use std::collections::BTreeSet;
use std::ops::Range;

use wasmparser::{BinaryReader, FunctionBody, Operator};

use crate::go_symbols::{decoded, Decoded, Record};

/// A source line: file and line number.
type Line = (String, u32);

/// Source lines of stretches of a Go module's code.
#[derive(Debug, Default)]
pub struct GoLines {
    /// `(file offsets, lines)`, sorted, not overlapping.
    stretches: Vec<(Range<usize>, Vec<Line>)>,
}

impl GoLines {
    /// The lines of the code in file offsets `start..end`, each once.
    pub fn lines(&self, start: u32, end: u32) -> Vec<(String, u32)> {
        let (start, end) = (start as usize, end as usize);
        let first = self.stretches.partition_point(|(r, _)| r.end <= start);
        let mut out: Vec<(String, u32)> = Vec::new();
        for (range, lines) in &self.stretches[first..] {
            if range.start >= end {
                break;
            }
            for l in lines {
                if !out.contains(l) {
                    out.push(l.clone());
                }
            }
        }
        out
    }
}

/// The lines of a Go module's code; `None` if it is not a Go module.
pub fn go_lines(bytes: &[u8]) -> Result<Option<GoLines>, String> {
    let Some((table, bodies, imported)) = decoded(bytes)? else {
        return Ok(None);
    };
    let mut out = GoLines::default();
    for record in &table.records {
        let Some(body) = bodies.get((record.id - imported) as usize) else {
            continue;
        };
        if record.pcln == 0 {
            continue;
        }
        let lines = PcLines::of(&table, record)?;
        for (range, pcs) in stretches(bytes, body.clone())? {
            let mut found: Vec<(String, u32)> = Vec::new();
            for pc in pcs.resolve(lines.end()) {
                if let Some(line) = lines.at(pc) {
                    if !found.contains(&line) {
                        found.push(line);
                    }
                }
            }
            out.stretches.push((range, found));
        }
    }
    out.stretches.sort_by_key(|(r, _)| r.start);
    Ok(Some(out))
}

/// One function's file and line per pc.
struct PcLines {
    lines: Vec<(u32, i64)>,
    files: Vec<(u32, String)>,
}

impl PcLines {
    fn of(table: &Decoded, record: &Record) -> Result<Self, String> {
        let lines = table.rows(record.pcln)?;
        let mut files = Vec::new();
        if let (Some(unit), true) = (Decoded::unit(record), record.pcfile != 0) {
            for (end, index) in table.rows(record.pcfile)? {
                files.push((end, table.file(unit, index)?));
            }
        }
        Ok(PcLines { lines, files })
    }

    /// The pc past the last row.
    fn end(&self) -> u32 {
        self.lines.last().map_or(0, |(end, _)| *end)
    }

    fn at(&self, pc: u32) -> Option<(String, u32)> {
        let row = |end: &u32| *end > pc;
        let line = self.lines.iter().find(|(end, _)| row(end))?.1;
        let file = self.files.iter().find(|(end, _)| row(end))?.1.clone();
        (line > 0).then_some((file, line as u32))
    }
}

/// The `PC_B` values a stretch of code runs with.
enum Pcs {
    Some(BTreeSet<u32>),
    All,
}

impl Pcs {
    fn resolve(&self, end: u32) -> Vec<u32> {
        match self {
            Pcs::Some(set) => set.iter().copied().collect(),
            Pcs::All => (0..end.min(1 << 16)).collect(),
        }
    }
}

/// The stretches of a Go function's body (file offsets `body`) and their `PC_B` values.
fn stretches(bytes: &[u8], body: Range<usize>) -> Result<Vec<(Range<usize>, Pcs)>, String> {
    let bad = |e: wasmparser::BinaryReaderError| format!("a function body cannot be read: {e}");
    let function = FunctionBody::new(BinaryReader::new(&bytes[body.clone()], body.start));
    let mut ops = function.get_operators_reader().map_err(bad)?;
    let mut depth = 0u32;
    let mut after_pc_b = false;
    // The br_table's depth (the innermost block it closes), its targets, and the depth of
    // the next of its blocks to close.
    let mut dispatch: Option<(u32, Vec<u32>, u32)> = None;
    // The dispatch itself (the blocks' starts and the br_table) is no line's code.
    let mut starts: Vec<(usize, Pcs)> = vec![(body.start, Pcs::Some(BTreeSet::new()))];
    while !ops.eof() {
        let op = ops.read().map_err(bad)?;
        let after = ops.original_position();
        match &op {
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Try { .. }
            | Operator::TryTable { .. } => depth += 1,
            Operator::BrTable { targets } if dispatch.is_none() && after_pc_b => {
                let mut all: Vec<u32> = targets.targets().collect::<Result<_, _>>().map_err(bad)?;
                all.push(targets.default());
                dispatch = Some((depth, all, depth));
            }
            Operator::End => {
                if let Some((innermost, targets, next)) = &mut dispatch {
                    let blocks = targets.iter().max().map_or(0, |m| m + 1);
                    if depth + blocks <= *innermost {
                        // Past the dispatch's blocks: the unwinding exit (`return 1`),
                        // whose count is no line's.
                        starts.push((after, Pcs::Some(BTreeSet::new())));
                    } else if depth == *next {
                        let t = *innermost - depth;
                        let pcs = targets
                            .iter()
                            .enumerate()
                            .filter(|(_, &to)| to == t)
                            .map(|(v, _)| v as u32)
                            .collect();
                        starts.push((after, Pcs::Some(pcs)));
                        *next -= 1;
                    }
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        after_pc_b = matches!(op, Operator::LocalGet { local_index: 0 });
    }
    if dispatch.is_none() {
        return Ok(vec![(body, Pcs::All)]);
    }
    let mut out = Vec::with_capacity(starts.len());
    let mut starts = starts.into_iter().peekable();
    while let Some((start, pcs)) = starts.next() {
        let end = starts.peek().map_or(body.end, |(next, _)| *next);
        out.push((start..end, pcs));
    }
    Ok(out)
}
