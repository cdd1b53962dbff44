//! `--format callgrind`: the Callgrind profile format, for `callgrind_annotate` and
//! KCachegrind.
//!
//! One cost event: `Instr` (executed wasm instructions) in cost mode, `ns` in time mode
//! (a cost-mode profile with block counts, `--coverage`, has each function's instructions
//! line by line, for `callgrind_annotate --auto=yes`);
//! with host calls, more: `HostWall` and `HostCpu` (nanoseconds in WASI's functions, wall
//! and the program thread's on-CPU; not in cost mode) and `HostBytes` (bytes the I/O
//! functions moved), an import's own and, on call lines, its callers' inclusive.
//! Each function's block holds its self cost, then one call line per callee: `calls=` the
//! exact number of calls along that edge, and on the next line the callee's inclusive cost
//! caused by this caller. That cost comes from the calling-context tree: the callee's
//! subtree (its self cost plus its descendants'), summed over every context where this
//! caller calls it. A call back into a function already on the stack (recursion) is
//! collapsed into the frame on the stack, so it carries its calls but no cost of its own:
//! adding call costs to self costs (`callgrind_annotate --inclusive=yes`) then counts every
//! instruction once, recursion included.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use super::source::Symbols;
use super::stacks;
use crate::profile::{HostFigures, Profile};

/// Subtree cost of every context: its self cost plus its descendants'.
pub fn subtree_costs(profile: &Profile) -> Vec<u64> {
    let mut cost: Vec<u64> = profile.contexts.iter().map(|c| c.self_time).collect();
    // Children come after their parents: add each node into its parent, last first.
    for (i, c) in profile.contexts.iter().enumerate().rev() {
        if let Some(p) = c.parent {
            if (p as usize) < i {
                cost[p as usize] += cost[i];
            }
        }
    }
    cost
}

/// The host events of a profile: name, description, and the value of a context's figures.
type HostEvent = (&'static str, &'static str, fn(&HostFigures) -> u64);

fn host_events(profile: &Profile) -> &'static [HostEvent] {
    const TIMED: &[HostEvent] = &[
        (
            "HostWall",
            "Wall time in WASI's functions (nanoseconds)",
            |h| h.wall_ns,
        ),
        (
            "HostCpu",
            "On-CPU time in WASI's functions (nanoseconds)",
            |h| h.cpu_ns,
        ),
        ("HostBytes", "Bytes WASI's I/O functions moved", |h| {
            h.bytes.unwrap_or(0)
        }),
    ];
    match (profile.host_calls.is_empty(), profile.unit == "ns") {
        (true, _) => &[],
        (false, true) => TIMED,
        (false, false) => &TIMED[2..],
    }
}

/// Every context's host figures, its descendants' added (what the calls along each path
/// made the host do).
fn subtree_host(profile: &Profile) -> Vec<HostFigures> {
    let mut host: Vec<HostFigures> = profile
        .contexts
        .iter()
        .map(|c| c.host.unwrap_or_default())
        .collect();
    for (i, c) in profile.contexts.iter().enumerate().rev() {
        if let Some(p) = c.parent {
            if (p as usize) < i {
                let child = host[i];
                host[p as usize].add(&child);
            }
        }
    }
    host
}

/// The callgrind text.
pub fn render<'a>(profile: &'a Profile, symbols: &'a Symbols) -> String {
    let (event, long) = if profile.unit == "ns" {
        ("ns", "Time (nanoseconds)")
    } else {
        ("Instr", "Executed wasm instructions")
    };
    let host_events = host_events(profile);
    let host_values = |h: &HostFigures| -> String {
        host_events
            .iter()
            .map(|(_, _, value)| format!(" {}", value(h)))
            .collect()
    };
    let subtree = subtree_costs(profile);
    let subtree_host = subtree_host(profile);
    // An import's own host figures, over its contexts.
    let mut own_host: HashMap<u32, HostFigures> = HashMap::new();
    for c in profile.contexts.iter() {
        if let Some(h) = &c.host {
            own_host.entry(c.function).or_default().add(h);
        }
    }
    // caller -> callee -> (calls, inclusive cost, inclusive host figures)
    let mut calls: BTreeMap<u32, BTreeMap<u32, (u64, u64, HostFigures)>> = BTreeMap::new();
    for e in &profile.edges {
        if let Some(caller) = e.caller {
            calls
                .entry(caller)
                .or_default()
                .entry(e.callee)
                .or_default()
                .0 += e.calls;
        }
    }
    for s in stacks(profile) {
        if let [.., caller, callee] = s.functions[..] {
            let call = calls.entry(caller).or_default().entry(callee).or_default();
            call.1 += subtree[s.node as usize];
            call.2.add(&subtree_host[s.node as usize]);
        }
    }

    let mut out = String::new();
    let _ = writeln!(out, "# callgrind format");
    let _ = writeln!(out, "version: 1");
    let _ = writeln!(out, "creator: {}", profile.tool);
    let _ = writeln!(out, "cmd: {}", profile.module.path);
    let _ = writeln!(out, "part: 1");
    let _ = writeln!(out, "positions: line");
    let _ = writeln!(out, "event: {event} : {long}");
    let mut events = event.to_string();
    for (name, description, _) in host_events {
        let _ = writeln!(out, "event: {name} : {description}");
        events.push(' ');
        events.push_str(name);
    }
    let _ = writeln!(out, "events: {events}");
    let mut host_total = HostFigures::default();
    for h in &profile.host_calls {
        host_total.add(&h.figures);
    }
    let _ = writeln!(
        out,
        "summary: {}{}",
        profile.total,
        host_values(&host_total)
    );
    let _ = writeln!(out, "totals: {}{}", profile.total, host_values(&host_total));
    let _ = writeln!(out);
    let _ = writeln!(out, "ob=(1) {}", profile.module.path);
    // Files and functions are named once, `fl=(n) name`, then referred to as `fl=(n)`.
    // Without a known source file: `???`, as valgrind writes it (a `.wasm` path would make
    // callgrind_annotate try to annotate the binary as source).
    let mut files: HashMap<&str, usize> = HashMap::new();
    let mut file_named = |out: &mut String, key: &str, path: &'a str| {
        let next = files.len() + 1;
        match files.entry(path) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let _ = writeln!(out, "{key}=({})", e.get());
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(next);
                let _ = writeln!(out, "{key}=({next}) {path}");
            }
        }
    };
    let mut named = HashSet::new();
    let mut name = |out: &mut String, key: &str, id: u32| {
        let label = profile.function(id).map(|f| f.name.as_str()).unwrap_or("?");
        if named.insert(id) {
            let _ = writeln!(out, "{key}=({}) {label}", id + 1);
        } else {
            let _ = writeln!(out, "{key}=({})", id + 1);
        }
    };
    let line = |id: u32| symbols.sources.get(&id).map_or(0, |s| s.line);
    let path_of = |id: u32| symbols.sources.get(&id).map_or("???", |s| s.file.as_str());
    for f in &profile.functions {
        let _ = writeln!(out);
        let main = path_of(f.id);
        file_named(&mut out, "fl", main);
        name(&mut out, "fn", f.id);
        match symbols.lines.get(&f.id) {
            // Cost mode with block counts: the self cost line by line (code inlined from
            // another file under `fi=`), and what has no line at line 0.
            Some(lines) => {
                let mut current = main;
                for ((path, n), cost) in &lines.lines {
                    if path.as_str() != current {
                        let key = if path.as_str() == main { "fe" } else { "fi" };
                        file_named(&mut out, key, path);
                        current = path;
                    }
                    let _ = writeln!(out, "{n} {cost}");
                }
                if current != main {
                    file_named(&mut out, "fe", main);
                }
                if lines.unlined > 0 {
                    let _ = writeln!(out, "0 {}", lines.unlined);
                }
            }
            None => {
                let own = own_host.get(&f.id).copied().unwrap_or_default();
                let _ = writeln!(out, "{} {}{}", line(f.id), f.self_time, host_values(&own));
            }
        }
        for (&callee, (n, cost, host)) in calls.get(&f.id).into_iter().flatten() {
            file_named(&mut out, "cfi", path_of(callee));
            name(&mut out, "cfn", callee);
            let _ = writeln!(out, "calls={n} {}", line(callee));
            let _ = writeln!(out, "{} {cost}{}", line(f.id), host_values(host));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::report::source::Symbols;
    use crate::report::tests::sample_profile;

    #[test]
    fn call_lines_carry_calls_and_subtree_cost() {
        let p = sample_profile();
        assert_eq!(super::subtree_costs(&p), vec![100, 70, 30, 20]);
        let out = super::render(&p, &Symbols::default());
        // _start calls a (twice, 70) and b (once, 20); b's recursion has calls, no cost.
        let start = "fl=(1) ???\nfn=(1) _start\n0 10\n\
                     cfi=(1)\ncfn=(2) a\ncalls=2 0\n0 70\n\
                     cfi=(1)\ncfn=(3) b;x\ncalls=1 0\n0 20\n";
        assert!(out.contains(start), "{out}");
        assert!(
            out.contains("fn=(3)\n0 50\ncfi=(1)\ncfn=(3)\ncalls=1 0\n0 0\n"),
            "{out}"
        );
    }

    #[test]
    fn sources_give_files_and_lines() {
        let p = sample_profile();
        let mut symbols = Symbols::default();
        symbols.sources.insert(
            1,
            crate::report::source::Source {
                file: "/src/a.c".into(),
                line: 7,
            },
        );
        let out = super::render(&p, &symbols);
        assert!(
            out.contains("cfi=(2) /src/a.c\ncfn=(2) a\ncalls=2 7\n0 70\n"),
            "{out}"
        );
        assert!(out.contains("fl=(2)\nfn=(2)\n7 40\n"), "{out}");
    }
}
