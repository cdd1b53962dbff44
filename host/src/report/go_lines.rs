//! Go's source lines of a Go module's code, by file offset: what coverage's lcov maps its
//! blocks through in a Go module, which has no DWARF, and what stack mode's sampled
//! instructions become lines through ([`crate::report::lines`]).
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

/// What a stretch of a Go function's code is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Code of the function's lines.
    Code {
        /// Whether the function's jumps go to it (through the dispatch).
        jumped_to: bool,
    },
    /// The dispatch: the blocks' starts and the `br_table` on `PC_B`, through which the
    /// function is entered, resumed, and jumps from one of its blocks to another (Go
    /// compiles every jump to a block that is not the next one as `PC_B = k`, a branch
    /// back to the loop around the dispatch, and the dispatch to block `k`).
    Dispatch,
    /// The exit that unwinds the stack (`return 1`).
    Exit,
}

/// A stretch of a Go function's code.
#[derive(Debug)]
struct Stretch {
    /// Its file offsets.
    range: Range<usize>,
    /// Its function's id.
    function: u32,
    kind: Kind,
    /// Its lines, in the order of their `PC_B` values.
    lines: Vec<Line>,
}

/// Source lines of stretches of a Go module's code.
#[derive(Debug, Default)]
pub struct GoLines {
    /// Sorted, not overlapping; a function's stretches are next to each other.
    stretches: Vec<Stretch>,
}

/// Sampled time per `(function id, file, line)`, in nanoseconds (also what
/// [`crate::report::lines`] gathers from DWARF).
pub type TimeByLine = std::collections::BTreeMap<(u32, String, u32), u64>;

/// Sampled time charged to Go's lines ([`GoLines::charge`]).
#[derive(Debug, Default)]
pub struct Charged {
    pub lines: TimeByLine,
    /// Time at offsets of no line's code, or of no Go function.
    pub unlined_ns: u64,
    /// Time at the functions' dispatches, shared among the lines jumped to (included in
    /// `lines`).
    pub dispatch_ns: u64,
}

impl GoLines {
    /// The lines of the code in file offsets `start..end`, each once.
    pub fn lines(&self, start: u32, end: u32) -> Vec<(String, u32)> {
        let (start, end) = (start as usize, end as usize);
        let first = self.stretches.partition_point(|s| s.range.end <= start);
        let mut out: Vec<(String, u32)> = Vec::new();
        for stretch in &self.stretches[first..] {
            if stretch.range.start >= end {
                break;
            }
            for l in &stretch.lines {
                if !out.contains(l) {
                    out.push(l.clone());
                }
            }
        }
        out
    }

    /// The index of the stretch at file offset `offset`.
    fn at(&self, offset: u32) -> Option<usize> {
        let offset = offset as usize;
        let i = self.stretches.partition_point(|s| s.range.end <= offset);
        let stretch = self.stretches.get(i)?;
        stretch.range.contains(&offset).then_some(i)
    }

    /// The sampled time at the code's file offsets (`at_offset`), charged to lines:
    /// - a stretch's time to its lines. Go's table tells which lines a stretch between two
    ///   resume points runs, not which of its instructions is which line's, so a stretch of
    ///   several lines shares its time among them equally (the remainder to the first), as
    ///   a loop's time is spread over its lines;
    /// - a function's dispatch's time to the stretches its jumps go to, in proportion to
    ///   their own sampled time: a loop's every turn passes through it, and it is the cost
    ///   of that loop's jump back (in a tight loop, most of the loop's time);
    /// - the unwinding exit's time, and a dispatch's in a function none of whose jumped-to
    ///   stretches was sampled, to no line.
    pub fn charge(&self, at_offset: &std::collections::HashMap<u32, u64>) -> Charged {
        let mut out = Charged::default();
        let mut by_stretch: std::collections::BTreeMap<usize, u64> = Default::default();
        let mut dispatches: std::collections::BTreeMap<usize, u64> = Default::default();
        for (&offset, &ns) in at_offset {
            match self.at(offset).map(|i| (i, &self.stretches[i])) {
                Some((i, s)) if matches!(s.kind, Kind::Code { .. }) && !s.lines.is_empty() => {
                    *by_stretch.entry(i).or_default() += ns;
                }
                Some((i, s)) if s.kind == Kind::Dispatch => {
                    *dispatches.entry(i).or_default() += ns;
                }
                _ => out.unlined_ns += ns,
            }
        }
        // Each dispatch's time, shared among its function's jumped-to stretches.
        let mut shared: std::collections::BTreeMap<usize, u64> = Default::default();
        for (i, ns) in dispatches {
            let function = self.stretches[i].function;
            let targets: Vec<(usize, u64)> = (i..self.stretches.len())
                .take_while(|&j| self.stretches[j].function == function)
                .filter(|&j| self.stretches[j].kind == Kind::Code { jumped_to: true })
                .filter_map(|j| Some((j, *by_stretch.get(&j)?)))
                .collect();
            let weight: u64 = targets.iter().map(|t| t.1).sum();
            if weight == 0 {
                out.unlined_ns += ns;
                continue;
            }
            out.dispatch_ns += ns;
            let mut given = 0;
            for (k, &(j, w)) in targets.iter().enumerate() {
                let part = match k + 1 == targets.len() {
                    true => ns - given,
                    false => (ns as u128 * w as u128 / weight as u128) as u64,
                };
                given += part;
                *shared.entry(j).or_default() += part;
            }
        }
        for (j, ns) in shared {
            *by_stretch.entry(j).or_default() += ns;
        }
        for (i, ns) in by_stretch {
            let stretch = &self.stretches[i];
            let n = stretch.lines.len() as u64;
            let (share, rest) = (ns / n, ns % n);
            for (k, (file, line)) in stretch.lines.iter().enumerate() {
                let ns = if k == 0 { share + rest } else { share };
                let key = (stretch.function, file.clone(), *line);
                *out.lines.entry(key).or_default() += ns;
            }
        }
        out
    }
}

/// The lines of a Go module's code; `None` if it is not a Go module.
pub fn go_lines(bytes: &[u8]) -> Result<Option<GoLines>, String> {
    go_lines_of(bytes, |_| true)
}

/// The lines of the functions of a Go module's code that hold any of the file offsets
/// `offsets` (sorted): what sampled lines need, in a fraction of the time (on a 4 MB module,
/// every function's lines take 0.2 s).
pub fn go_lines_at(bytes: &[u8], offsets: &[u32]) -> Result<Option<GoLines>, String> {
    go_lines_of(bytes, |body| {
        let i = offsets.partition_point(|&o| (o as usize) < body.start);
        offsets.get(i).is_some_and(|&o| (o as usize) < body.end)
    })
}

/// The lines of the functions of a Go module whose bodies `wanted` takes.
fn go_lines_of(
    bytes: &[u8],
    wanted: impl Fn(&Range<usize>) -> bool,
) -> Result<Option<GoLines>, String> {
    let Some((table, bodies, imported)) = decoded(bytes)? else {
        return Ok(None);
    };
    let mut out = GoLines::default();
    for record in &table.records {
        let Some(body) = bodies.get((record.id - imported) as usize) else {
            continue;
        };
        if record.pcln == 0 || !wanted(body) {
            continue;
        }
        let lines = PcLines::of(&table, record)?;
        for (range, kind, pcs) in stretches(bytes, body.clone())? {
            let mut found: Vec<(String, u32)> = Vec::new();
            for pc in pcs.resolve(lines.end()) {
                if let Some(line) = lines.at(pc) {
                    if !found.contains(&line) {
                        found.push(line);
                    }
                }
            }
            out.stretches.push(Stretch {
                range,
                function: record.id,
                kind,
                lines: found,
            });
        }
    }
    out.stretches.sort_by_key(|s| s.range.start);
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

    /// The file and line at `pc`: the first row that ends past it (rows are in the order
    /// of their ends).
    fn at(&self, pc: u32) -> Option<(String, u32)> {
        let line = self.lines[self.lines.partition_point(|(end, _)| *end <= pc)..]
            .first()?
            .1;
        let file = &self.files[self.files.partition_point(|(end, _)| *end <= pc)..]
            .first()?
            .1;
        (line > 0).then(|| (file.clone(), line as u32))
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

/// The stretches of a Go function's body (file offsets `body`), what each is, and their
/// `PC_B` values.
fn stretches(bytes: &[u8], body: Range<usize>) -> Result<Vec<(Range<usize>, Kind, Pcs)>, String> {
    let bad = |e: wasmparser::BinaryReaderError| format!("a function body cannot be read: {e}");
    let function = FunctionBody::new(BinaryReader::new(&bytes[body.clone()], body.start));
    let mut ops = function.get_operators_reader().map_err(bad)?;
    let mut depth = 0u32;
    let mut after_pc_b = false;
    // The `PC_B` values the function's jumps set (`i32.const k`, `local.set 0`).
    let mut jumped_to: BTreeSet<u32> = BTreeSet::new();
    let mut constant: Option<i32> = None;
    // The br_table's depth (the innermost block it closes), the `PC_B` values it sends to
    // each of its blocks (by relative depth; the default's is the one past its targets),
    // and the depth of the next of its blocks to close.
    let mut dispatch: Option<(u32, Vec<BTreeSet<u32>>, u32)> = None;
    // The dispatch itself (the blocks' starts and the br_table) is no line's code.
    let mut starts: Vec<(usize, Kind, Pcs)> =
        vec![(body.start, Kind::Dispatch, Pcs::Some(BTreeSet::new()))];
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
                let blocks = all.iter().max().map_or(0, |m| m + 1) as usize;
                let mut by_block = vec![BTreeSet::new(); blocks];
                for (value, to) in all.into_iter().enumerate() {
                    by_block[to as usize].insert(value as u32);
                }
                dispatch = Some((depth, by_block, depth));
            }
            Operator::End => {
                if let Some((innermost, by_block, next)) = &mut dispatch {
                    if depth + by_block.len() as u32 <= *innermost {
                        // Past the dispatch's blocks: the unwinding exit (`return 1`),
                        // whose count is no line's.
                        starts.push((after, Kind::Exit, Pcs::Some(BTreeSet::new())));
                    } else if depth == *next {
                        let t = (*innermost - depth) as usize;
                        let pcs = std::mem::take(&mut by_block[t]);
                        let code = Kind::Code { jumped_to: false };
                        starts.push((after, code, Pcs::Some(pcs)));
                        *next -= 1;
                    }
                }
                depth = depth.saturating_sub(1);
            }
            Operator::LocalSet { local_index: 0 } => {
                if let Some(k) = constant.and_then(|k| u32::try_from(k).ok()) {
                    jumped_to.insert(k);
                }
            }
            _ => {}
        }
        after_pc_b = matches!(op, Operator::LocalGet { local_index: 0 });
        constant = match op {
            Operator::I32Const { value } => Some(value),
            _ => None,
        };
    }
    if dispatch.is_none() {
        return Ok(vec![(body, Kind::Code { jumped_to: false }, Pcs::All)]);
    }
    let mut out = Vec::with_capacity(starts.len());
    let mut starts = starts.into_iter().peekable();
    while let Some((start, mut kind, pcs)) = starts.next() {
        let end = starts.peek().map_or(body.end, |(next, _, _)| *next);
        if let (Kind::Code { jumped_to: to }, Pcs::Some(set)) = (&mut kind, &pcs) {
            *to = set.iter().any(|pc| jumped_to.contains(pc));
        }
        out.push((start..end, kind, pcs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stretch(range: Range<usize>, kind: Kind, lines: &[u32]) -> Stretch {
        Stretch {
            range,
            function: 7,
            kind,
            lines: lines.iter().map(|&l| ("f.go".to_string(), l)).collect(),
        }
    }

    #[test]
    fn a_dispatchs_time_goes_to_the_lines_jumped_to_in_proportion() {
        let jumped = Kind::Code { jumped_to: true };
        let go = GoLines {
            stretches: vec![
                stretch(0..10, Kind::Dispatch, &[]),
                stretch(10..20, Kind::Code { jumped_to: false }, &[3]),
                stretch(20..30, jumped, &[4, 5]),
                stretch(30..40, jumped, &[8]),
                stretch(40..50, jumped, &[9]),
                stretch(50..60, Kind::Exit, &[]),
            ],
        };
        let at_offset = [(2, 1000), (15, 50), (25, 101), (35, 300), (55, 7), (99, 3)]
            .into_iter()
            .collect();
        let charged = go.charge(&at_offset);
        let at = |line: u32| charged.lines.get(&(7, "f.go".to_string(), line)).copied();
        // 1,000 ns at the dispatch: 101 / 401 of it (251) to the stretch of lines 4 and 5,
        // whose 352 ns are split equally; the rest (749) to line 8; nothing to line 9,
        // which no sample found, nor to line 3, which no jump goes to.
        assert_eq!(charged.dispatch_ns, 1000);
        assert_eq!((at(4), at(5)), (Some(176), Some(176)));
        assert_eq!(at(8), Some(300 + 749));
        assert_eq!((at(3), at(9)), (Some(50), None));
        // The unwinding exit and an offset of no function are no line's.
        assert_eq!(charged.unlined_ns, 10);
        let total: u64 = charged.lines.values().sum();
        assert_eq!(total + charged.unlined_ns, 1000 + 50 + 101 + 300 + 7 + 3);
    }

    #[test]
    fn a_dispatch_with_no_sampled_target_is_no_lines() {
        let go = GoLines {
            stretches: vec![
                stretch(0..10, Kind::Dispatch, &[]),
                stretch(10..20, Kind::Code { jumped_to: true }, &[3]),
            ],
        };
        let charged = go.charge(&[(1, 40)].into_iter().collect());
        assert_eq!((charged.dispatch_ns, charged.unlined_ns), (0, 40));
        assert!(charged.lines.is_empty());
    }
}
