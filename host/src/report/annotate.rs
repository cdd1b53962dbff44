//! `wprof annotate`: a function's source lines with how often each ran and how many wasm
//! instructions it executed, in the manner of `callgrind_annotate` and `perf annotate`,
//! from a profile's block counts (`wprof run --coverage`) and the module's DWARF.
//!
//! Each instruction of a function's body belongs to one basic block, whose count the
//! profile holds, and to one source line, by the DWARF line table; a line's instructions
//! are the counts of its instructions added up (as cost mode counts: `end` is free, so a
//! function's lines add up to its self cost in a cost-mode profile), and its runs the count of the most frequent
//! block holding code of it (as lcov counts a line). Without the source file, the lines are
//! shown by number; without DWARF, by block: offsets, counts and instructions.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use crate::profile::coverage::FunctionCoverage;
use crate::report::source::{LineCosts, ModuleDwarf};

/// A source line's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineCost {
    /// How many times it ran: the count of the most frequent block holding code of it.
    pub runs: u64,
    /// The wasm instructions of it that ran, each as often as its block.
    pub instructions: u64,
}

/// One block, for a module without DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockText {
    /// Its first byte, as an offset in the module.
    pub offset: u32,
    /// How many times it ran.
    pub count: u64,
    /// Its instructions, as wasmparser names them, each with its offset.
    pub instructions: Vec<(u32, String)>,
}

/// A function, annotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLines {
    /// Its id.
    pub id: u32,
    /// Wasm instructions of it that ran.
    pub instructions: u64,
    /// By file and line.
    pub lines: BTreeMap<(String, u32), LineCost>,
    /// Instructions that ran and belong to no line.
    pub unlined: u64,
    /// Its blocks (kept when there is no DWARF).
    pub blocks: Vec<BlockText>,
}

/// Annotates function `f` of `module` (its original bytes), by `dwarf`'s lines when there
/// are some.
pub fn function_lines(
    module: &[u8],
    f: &FunctionCoverage,
    dwarf: Option<&ModuleDwarf<'_>>,
) -> anyhow::Result<FunctionLines> {
    let (start, end) = (f.body.0 as usize, f.body.1 as usize);
    let bytes = module
        .get(start..end)
        .ok_or_else(|| anyhow::anyhow!("{}'s body is outside the module", f.name))?;
    let body = wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(bytes, start));
    let mut ops = body.get_operators_reader()?;
    let mut out = FunctionLines {
        id: f.id,
        instructions: 0,
        lines: BTreeMap::new(),
        unlined: 0,
        blocks: Vec::new(),
    };
    while !ops.eof() {
        let (op, offset) = ops.read_with_offset()?;
        let offset = offset as u32;
        let block = f
            .starts
            .partition_point(|&s| f.body.0 + s <= offset)
            .saturating_sub(1);
        let count = f.counts.get(block).copied().unwrap_or(0);
        // Counted as cost mode counts them (`end` is free).
        let executed = count * wprof_agent::instruction_weight(&op);
        out.instructions += executed;
        let location = match dwarf {
            Some(d) => {
                let address = (offset as usize).saturating_sub(d.code_start) as u64;
                d.context
                    .find_location(address)?
                    .and_then(|l| Some((l.file?.to_string(), l.line.filter(|&n| n > 0)?)))
            }
            None => None,
        };
        match location {
            Some(at) => {
                let line = out.lines.entry(at).or_default();
                line.runs = line.runs.max(count);
                line.instructions += executed;
            }
            None => out.unlined += executed,
        }
        if dwarf.is_none() {
            let first = f.body.0 + f.starts.get(block).copied().unwrap_or(0);
            if out.blocks.last().is_none_or(|b| b.offset != first) {
                out.blocks.push(BlockText {
                    offset: first,
                    count,
                    instructions: Vec::new(),
                });
            }
            if let Some(b) = out.blocks.last_mut() {
                b.instructions.push((offset, format!("{op:?}")));
            }
        }
    }
    Ok(out)
}

/// Every function of a cost-mode profile with block counts, by line: what callgrind,
/// pprof and the HTML report carry as per-line costs (a cost-mode function's lines add up
/// to its self cost exactly; other modes' times are not split by line), with its main
/// file's text (looked for as DWARF names it, else in `module_dir`). Empty without block
/// counts, in another mode, or without DWARF.
pub fn line_costs(
    profile: &crate::profile::Profile,
    module: &[u8],
    dirs: &[&Path],
) -> anyhow::Result<std::collections::HashMap<u32, LineCosts>> {
    let mut out = std::collections::HashMap::new();
    let Some(coverage) = profile.coverage.as_ref().filter(|_| profile.mode == "cost") else {
        return Ok(out);
    };
    let Some(dwarf) = crate::report::source::module_dwarf(module)? else {
        return Ok(out);
    };
    let mut texts: std::collections::HashMap<String, Option<Vec<String>>> =
        std::collections::HashMap::new();
    for f in &coverage.functions {
        let lines = function_lines(module, f, Some(&dwarf))?;
        if lines.lines.is_empty() {
            continue;
        }
        let (main, span) = main_file(&lines);
        let text = texts.entry(main.clone()).or_insert_with(|| {
            let path = crate::report::coverage::resolve(&main, dirs);
            std::fs::read_to_string(path)
                .ok()
                .map(|t| t.lines().map(str::to_string).collect())
        });
        let source = match text {
            Some(text) => span
                .map(|n| {
                    let line = text.get(n as usize - 1).cloned().unwrap_or_default();
                    (n, line)
                })
                .collect(),
            _ => Vec::new(),
        };
        let costs = LineCosts {
            lines: lines
                .lines
                .into_iter()
                .filter(|(_, c)| c.instructions > 0)
                .map(|(at, c)| (at, c.instructions))
                .collect(),
            unlined: lines.unlined,
            main_file: main,
            source,
        };
        out.insert(f.id, costs);
    }
    Ok(out)
}

/// The file where most of a function's instructions are (ties: the first in order), and
/// the span of its lines there, first to last.
fn main_file(f: &FunctionLines) -> (String, std::ops::RangeInclusive<u32>) {
    let mut by_file: BTreeMap<&str, u64> = BTreeMap::new();
    for ((file, _), cost) in &f.lines {
        *by_file.entry(file).or_default() += cost.instructions + 1;
    }
    let mut best: Option<(&str, u64)> = None;
    for (file, n) in by_file {
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((file, n));
        }
    }
    let main = best.map(|(f, _)| f.to_string()).unwrap_or_default();
    let mut numbers = f
        .lines
        .keys()
        .filter(|(file, _)| *file == main)
        .map(|(_, n)| *n);
    let first = numbers.next().unwrap_or(0);
    let last = numbers.next_back().unwrap_or(first);
    (main, first..=last)
}

/// The text of one annotated function: `name` (as shown), called `calls` times; its
/// main file's lines with the source beside them when the file is found (looked for as
/// DWARF names it, else under `dirs`: see [`crate::report::source::find_source`]), then
/// lines of other files.
pub fn render(name: &str, calls: u64, f: &FunctionLines, dirs: &[&Path]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: {calls} calls, {} wasm instructions ran",
        f.instructions
    );
    if f.lines.is_empty() {
        if f.blocks.is_empty() {
            let _ = writeln!(out, "  (no source lines)");
            return out;
        }
        let _ = writeln!(out, "  (no DWARF: by basic block)");
        let _ = writeln!(out, "{:>12}  offset    instruction", "runs");
        for b in &f.blocks {
            for (i, (offset, text)) in b.instructions.iter().enumerate() {
                let runs = if i == 0 {
                    b.count.to_string()
                } else {
                    String::new()
                };
                let _ = writeln!(out, "{runs:>12}  {offset:#08x}  {text}");
            }
        }
        return out;
    }
    let (main, span) = main_file(f);
    let path = crate::report::coverage::resolve(&main, dirs);
    let source = std::fs::read_to_string(&path).ok();
    let _ = writeln!(
        out,
        "-- {}{}",
        path,
        if source.is_some() {
            ""
        } else {
            " (not found: lines by number)"
        }
    );
    let _ = writeln!(out, "{:>12} {:>14}  line", "runs", "instructions");
    let text: Vec<&str> = source
        .as_deref()
        .map_or_else(Vec::new, |s| s.lines().collect());
    for n in span {
        let cost = f.lines.get(&(main.clone(), n));
        if source.is_none() && cost.is_none() {
            continue;
        }
        let (runs, instructions) = cost.map_or((String::new(), String::new()), |c| {
            (c.runs.to_string(), c.instructions.to_string())
        });
        let line_text = text.get(n as usize - 1).copied().unwrap_or("");
        let _ = writeln!(out, "{runs:>12} {instructions:>14}  {n:>4} | {line_text}");
    }
    let others: Vec<_> = f
        .lines
        .iter()
        .filter(|((file, _), _)| *file != main)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(out, "-- other files (inlined code)");
        for ((file, n), c) in others {
            let _ = writeln!(out, "{:>12} {:>14}  {file}:{n}", c.runs, c.instructions);
        }
    }
    if f.unlined > 0 {
        let _ = writeln!(out, "{:>12} {:>14}  (no line)", "", f.unlined);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(func (param i32) (result i32) local.get 0 if (result i32) i32.const 1 else
    /// i32.const 2 end)` with blocks at its start, the `then` and the `else`.
    fn module_and_coverage() -> (Vec<u8>, FunctionCoverage) {
        let wasm = wat::parse_str(
            "(module (func (param i32) (result i32)
               local.get 0
               if (result i32) i32.const 1 else i32.const 2 end))",
        )
        .unwrap();
        let mut body = None;
        for payload in wasmparser::Parser::new(0).parse_all(&wasm) {
            if let wasmparser::Payload::CodeSectionEntry(b) = payload.unwrap() {
                body = Some(b.range());
            }
        }
        let body = body.unwrap();
        let mut ops = wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(
            &wasm[body.clone()],
            body.start,
        ))
        .get_operators_reader()
        .unwrap();
        let mut offsets = Vec::new();
        while !ops.eof() {
            offsets.push(ops.read_with_offset().unwrap().1 as u32 - body.start as u32);
        }
        // local.get, if | i32.const 1 | else, i32.const 2, end, end
        let f = FunctionCoverage {
            id: 0,
            name: "f".into(),
            body: (body.start as u32, body.end as u32),
            starts: vec![0, offsets[2], offsets[3]],
            counts: vec![10, 7, 3],
            calls: Some(10),
            kinds: Vec::new(),
        };
        (wasm, f)
    }

    #[test]
    fn without_dwarf_each_block_lists_its_instructions_and_count() {
        let (wasm, f) = module_and_coverage();
        let lines = function_lines(&wasm, &f, None).unwrap();
        // 2 x 10 + 1 x 7 + 2 x 3 (`end` is free, as in cost mode).
        assert_eq!(lines.instructions, 33);
        assert_eq!(lines.unlined, 33);
        assert_eq!(lines.blocks.len(), 3);
        assert_eq!(lines.blocks[1].count, 7);
        assert_eq!(lines.blocks[1].instructions.len(), 1);
        assert!(lines.blocks[1].instructions[0].1.starts_with("I32Const"));
        let text = render("f", 10, &lines, &[]);
        assert!(text.contains("no DWARF"), "{text}");
        assert!(
            text.lines().any(|l| l.trim_start().starts_with("7 ")),
            "{text}"
        );
    }
}
