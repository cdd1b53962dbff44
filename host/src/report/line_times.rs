//! `wprof annotate` on a profile with sampled time per line (stack mode's
//! [`crate::profile::LinesRecord`]): each chosen function's source lines with the time the
//! samples found at them, in the manner of `perf annotate`. The lines are in the profile;
//! only the source text is read, from the path the line table recorded, else under the
//! directories given (the module's, `--source-path`; see
//! [`crate::report::source::find_source`]). The same lines become the per-line costs the
//! formats that carry lines write ([`line_costs`]: pprof's line locations, callgrind's lines,
//! the HTML report's annotated source).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

use crate::display::format_ns;
use crate::profile::{LinesRecord, Profile};
use crate::report::source::LineCosts;

/// Lines of source shown around the sampled ones.
const CONTEXT: u32 = 2;

/// One function's sampled time by file and line, in nanoseconds.
pub type SampledLines<'a> = BTreeMap<(&'a str, u32), u64>;

/// Each function's sampled lines and their sum, by function id.
pub fn by_function(lines: &LinesRecord) -> HashMap<u32, (SampledLines<'_>, u64)> {
    let mut functions: HashMap<u32, (SampledLines<'_>, u64)> = HashMap::new();
    for l in &lines.lines {
        let (by_line, total) = functions.entry(l.function).or_default();
        *by_line.entry((l.file.as_str(), l.line)).or_default() += l.self_ns;
        *total += l.self_ns;
    }
    functions
}

/// Function `name`'s sampled lines as text: a header with its sampled time and share of
/// the profile's `total`, then each file's sampled lines with [`CONTEXT`] lines around them
/// (an inlined function's lines may be far from the function's own), each with its time
/// and share of the function's.
pub fn render(
    name: &str,
    by_line: &SampledLines<'_>,
    function_ns: u64,
    total: u64,
    dirs: &[&Path],
) -> String {
    let mut out = String::new();
    let share = |ns: u64, of: u64| match of {
        0 => 0.0,
        _ => ns as f64 * 100.0 / of as f64,
    };
    let _ = writeln!(
        out,
        "{name}: {} sampled at its lines ({:.1}% of the profile)",
        format_ns(function_ns),
        share(function_ns, total)
    );
    let mut files: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
    for (&(file, line), &ns) in by_line {
        files.entry(file).or_default().push((line, ns));
    }
    for (file, lines) in files {
        let text = read_source(file, dirs);
        let source_lines: Option<Vec<&str>> = text.as_ref().map(|t| t.lines().collect());
        let _ = writeln!(out, "  {file}");
        let at: BTreeMap<u32, u64> = lines.into_iter().collect();
        // Each sampled line with its neighbours; a gap between two such windows is `...`.
        let mut shown: Vec<u32> = Vec::new();
        for &line in at.keys() {
            let from = line.saturating_sub(CONTEXT).max(1);
            for number in from..=line + CONTEXT {
                if shown.last().is_none_or(|&l| l < number) {
                    shown.push(number);
                }
            }
        }
        let mut previous = None;
        for number in shown {
            let source = source_lines
                .as_ref()
                .and_then(|t| t.get(number as usize - 1).copied());
            let ns = at.get(&number);
            if ns.is_none() && (text.is_none() || source.is_none()) {
                // Without the file, only the sampled lines.
                continue;
            }
            if previous.is_some_and(|p: u32| p + 1 < number) {
                let _ = writeln!(out, "  {:>10} {:>6} {:>6}", "", "", "...");
            }
            previous = Some(number);
            let source = source.unwrap_or("");
            match ns {
                Some(&ns) => {
                    let _ = writeln!(
                        out,
                        "  {:>10} {:>5.1}% {number:>6}: {source}",
                        format_ns(ns),
                        share(ns, function_ns)
                    );
                }
                None => {
                    let _ = writeln!(out, "  {:>10} {:>6} {number:>6}: {source}", "", "");
                }
            }
        }
        if text.is_none() {
            let _ = writeln!(out, "  (source not found: lines by number)");
        }
    }
    out
}

/// The text of source `file`, where [`crate::report::source::find_source`] finds it.
fn read_source(file: &str, dirs: &[&Path]) -> Option<String> {
    std::fs::read_to_string(crate::report::source::find_source(file, dirs)?).ok()
}

/// Each function's self time by source line, from `profile`'s sampled lines: the self time
/// split over the lines in the proportions the samples found (so that a function's lines
/// add up to its self time in every report), what no line holds as `unlined`, and the text
/// of its main file (the one most of its time is in) from its first sampled line to its
/// last, when the file is found (see [`render`] for where it is looked for).
pub fn line_costs(profile: &Profile, dirs: &[&Path]) -> HashMap<u32, LineCosts> {
    let Some(lines) = profile.lines.as_ref() else {
        return HashMap::new();
    };
    let mut texts: HashMap<&str, Option<Vec<String>>> = HashMap::new();
    // Each function's first line (where its compiler put its first instructions: its head),
    // by id, when the profile records it.
    let heads: HashMap<u32, (&str, u32)> = profile
        .symbols
        .iter()
        .flat_map(|s| &s.functions)
        .filter_map(|f| Some((f.id, (f.file.as_deref()?, f.line?))))
        .collect();
    let mut out = HashMap::new();
    for (id, (by_line, sampled)) in by_function(lines) {
        let Some(f) = profile
            .function(id)
            .filter(|f| f.self_time > 0 && sampled > 0)
        else {
            continue;
        };
        let mut weights: Vec<u64> = by_line.values().copied().collect();
        let unlined_weight = f.self_time.saturating_sub(sampled);
        weights.push(unlined_weight);
        let costs = crate::report::pprof::split_weights(f.self_time, &weights);
        let mut by_file: BTreeMap<&str, u64> = BTreeMap::new();
        for (&(file, _), &ns) in &by_line {
            *by_file.entry(file).or_default() += ns;
        }
        let main = by_file
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&file, _)| file)
            .unwrap_or_default();
        let numbers: Vec<u32> = by_line
            .keys()
            .filter(|(file, _)| *file == main)
            .map(|&(_, n)| n)
            .collect();
        let text = texts.entry(main).or_insert_with(|| {
            read_source(main, dirs).map(|t| t.lines().map(str::to_string).collect())
        });
        // The page opens at the function's head, when it is in that file, even where no tick
        // landed on it.
        let head = heads
            .get(&id)
            .filter(|(file, _)| *file == main)
            .map(|&(_, line)| line);
        let first = numbers.first().map(|&n| head.map_or(n, |h| h.min(n)));
        let source = match (text, first.as_ref(), numbers.last()) {
            // The file's lines only (a line number past its end is no line of it).
            (Some(text), Some(&first), Some(&last)) => (first.max(1)..=last)
                .take_while(|&n| n as usize <= text.len())
                .map(|n| (n, text[n as usize - 1].clone()))
                .collect(),
            _ => Vec::new(),
        };
        out.insert(
            id,
            LineCosts {
                lines: by_line
                    .keys()
                    .zip(&costs)
                    .filter(|(_, &c)| c > 0)
                    .map(|(&(file, n), &c)| ((file.to_string(), n), c))
                    .collect(),
                unlined: costs.last().copied().unwrap_or(0),
                main_file: main.to_string(),
                source,
            },
        );
    }
    out
}
