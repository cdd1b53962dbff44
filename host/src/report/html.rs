//! `--format html`: one self-contained HTML file (no network requests: the styles, the
//! script and the data are inside) with four views, switched by the URL's fragment:
//!
//! - `#table`: the flat profile, sortable by any column and filtered by a regex
//!   (`#table?sort=calls:desc&filter=^lz_` preselects both), and under it the host calls
//!   (wall, on-CPU and off-CPU time in WASI's functions, bytes moved);
//! - `#f<id>`: one page per function with its numbers and its callers and callees, each a
//!   link to that function's page (the browser's back button goes back), and, for a
//!   cost-mode profile with block counts, its source with each line's instructions;
//! - `#graph/<id>?min=<pct>`: a layered call graph from a root function (any function can be
//!   the root), showing at first about the 30 functions with the largest inclusive cost;
//!   "more"/"fewer" or the minimum inclusive % change that; each arc is as wide as the
//!   logarithm of the callee's inclusive cost along it, relative to the root's;
//! - `#flame/<node>`: an icicle of the calling-context tree; a click zooms into a box.
//!
//! The page is a minijinja template (`html/report.html`); the table rows are rendered here,
//! the function pages (when first shown), the graph and the icicle by the small hand-written
//! script `html/report.js` from the JSON data the template embeds, where each name appears
//! once: the file grows with the functions and edges, not with functions times their
//! neighbours (a 1,478-function C++ program with 225-character names: 5.5 MB before).

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Serialize;

use super::callgrind::subtree_costs;
use super::percent;
use super::source::Symbols;
use crate::display::format_amount;
use crate::profile::Profile;

const TEMPLATE: &str = include_str!("html/report.html");
const SCRIPT: &str = include_str!("html/report.js");
const STYLE: &str = include_str!("html/report.css");

#[derive(Serialize)]
struct Page<'a> {
    module: &'a str,
    mode: &'a str,
    unit_word: &'a str,
    total_text: String,
    calls: u64,
    outcome: String,
    /// Lines under the summary: functions left without probes, live switching.
    notes: Vec<String>,
    functions: Vec<FunctionRow>,
    /// What the host did in the program's calls to WASI, by import.
    host: Vec<HostRow>,
    /// The host's times were measured (every mode but cost).
    host_timed: bool,
    /// Allocation profiling: the allocator's contexts, most bytes first.
    allocs: Vec<AllocRow>,
    /// Allocation profiling: the run's totals and the allocator (one line).
    allocs_summary: Option<String>,
    data: String,
    css: &'a str,
    js: &'a str,
}

#[derive(Serialize)]
struct AllocRow {
    /// The function that called the allocator, for the link.
    caller: Option<u32>,
    path: String,
    bytes: String,
    objects: u64,
    live_bytes: String,
    live_objects: u64,
}

#[derive(Serialize)]
struct FunctionRow {
    id: u32,
    name: String,
    source: Option<String>,
    import: bool,
    calls: u64,
    self_cost: u64,
    inclusive: u64,
    min_self: u64,
    max_self: u64,
    self_text: String,
    self_pct: String,
    incl_text: String,
    incl_pct: String,
    min_text: String,
    max_text: String,
}

/// One row of the host calls' table, as the page shows it.
#[derive(Serialize)]
struct HostRow {
    id: u32,
    name: String,
    calls: u64,
    wall: String,
    cpu: String,
    off_cpu: String,
    bytes: String,
}

/// The data the script draws from: short keys, arrays for the big tables.
#[derive(Serialize)]
struct Data<'a> {
    unit: &'a str,
    total: u64,
    functions: Vec<DataFunction<'a>>,
    /// `[caller (-1 for the root), callee, calls, inclusive, inclusive as text]`, call sites
    /// merged.
    edges: Vec<(i64, u32, u64, u64, String)>,
    /// `[parent (-1 for the outermost), function, calls, self, subtree cost]`.
    contexts: Vec<(i64, u32, u64, u64, u64)>,
}

#[derive(Serialize)]
struct DataFunction<'a> {
    id: u32,
    name: &'a str,
    calls: u64,
    #[serde(rename = "self")]
    self_cost: u64,
    incl: u64,
    /// Self, self %, inclusive, inclusive %, min self, max self, as the page shows them.
    t: [String; 6],
    #[serde(skip_serializing_if = "Option::is_none")]
    src: Option<String>,
    /// The module's own (mangled) name, when the shown one is demangled.
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    imp: bool,
    /// A cost-mode profile with block counts: the function's source, `[line, instructions,
    /// text]` from its first line to its last (the page shows it annotated).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ann: Vec<(u32, u64, &'a str)>,
    /// The file of `ann`.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
}

/// The HTML text.
pub fn render(profile: &Profile, symbols: &Symbols) -> anyhow::Result<String> {
    let unit = profile.unit.as_str();
    let amount = |v: u64| format_amount(v, unit);
    let pct = |v: u64| format!("{:.2}%", percent(v, profile.total));
    // Edges with call sites merged: (caller, callee) -> (calls, inclusive).
    let mut edges: BTreeMap<(Option<u32>, u32), (u64, u64)> = BTreeMap::new();
    for e in &profile.edges {
        let entry = edges.entry((e.caller, e.callee)).or_default();
        entry.0 += e.calls;
        entry.1 += e.inclusive;
    }
    let mut functions: Vec<FunctionRow> = super::matching(profile, &super::Options::default())
        .into_iter()
        .map(|f| FunctionRow {
            id: f.id,
            name: f.name.clone(),
            source: symbols.sources.get(&f.id).map(|s| s.short()),
            import: f.kind == "import",
            calls: f.calls,
            self_cost: f.self_time,
            inclusive: f.inclusive,
            min_self: f.min_self.unwrap_or(0),
            max_self: f.max_self.unwrap_or(0),
            self_text: amount(f.self_time),
            self_pct: pct(f.self_time),
            incl_text: amount(f.inclusive),
            incl_pct: pct(f.inclusive),
            min_text: f.min_self.map_or("-".to_string(), amount),
            max_text: f.max_self.map_or("-".to_string(), amount),
        })
        .collect();
    functions.shrink_to_fit();

    let subtree = subtree_costs(profile);
    let data = Data {
        unit,
        total: profile.total,
        functions: profile
            .functions
            .iter()
            .map(|f| DataFunction {
                id: f.id,
                name: &f.name,
                calls: f.calls,
                self_cost: f.self_time,
                incl: f.inclusive,
                t: [
                    amount(f.self_time),
                    pct(f.self_time),
                    amount(f.inclusive),
                    pct(f.inclusive),
                    f.min_self.map_or("-".to_string(), amount),
                    f.max_self.map_or("-".to_string(), amount),
                ],
                src: symbols.sources.get(&f.id).map(|s| s.short()),
                raw: symbols.raw_names.get(&f.id).map(String::as_str),
                imp: f.kind == "import",
                ann: annotated_source(symbols, f.id),
                file: symbols
                    .lines
                    .get(&f.id)
                    .filter(|l| !l.source.is_empty())
                    .map(|l| l.main_file.as_str()),
            })
            .collect(),
        edges: edges
            .iter()
            .map(|(&(caller, callee), &(calls, incl))| {
                (
                    caller.map_or(-1, i64::from),
                    callee,
                    calls,
                    incl,
                    amount(incl),
                )
            })
            .collect(),
        contexts: profile
            .contexts
            .iter()
            .zip(&subtree)
            .map(|(c, &width)| {
                (
                    c.parent.map_or(-1, i64::from),
                    c.function,
                    c.calls,
                    c.self_time,
                    width,
                )
            })
            .collect(),
    };
    // Inside <script>, `</` could end the element early: JSON allows `<\/` instead.
    let data = serde_json::to_string(&data)?.replace("</", "<\\/");

    let page = Page {
        module: &profile.module.path,
        mode: &profile.mode,
        unit_word: if unit == "ns" { "time" } else { "cost" },
        total_text: amount(profile.total),
        calls: profile.functions.iter().map(|f| f.calls).sum(),
        outcome: match &profile.trap {
            Some(t) => format!("trapped: {t}"),
            None => format!("exit code {}", profile.exit_code),
        },
        notes: notes(profile),
        functions,
        host: super::host_time::by_wall_time(profile)
            .into_iter()
            .map(|h| HostRow {
                id: h.function,
                name: h.name.clone(),
                calls: h.figures.calls,
                wall: crate::display::format_ns(h.figures.wall_ns),
                cpu: crate::display::format_ns(h.figures.cpu_ns),
                off_cpu: crate::display::format_ns(h.figures.off_cpu_ns()),
                bytes: h
                    .figures
                    .bytes
                    .map_or_else(|| "-".to_string(), crate::display::format_size),
            })
            .collect(),
        host_timed: unit == "ns",
        allocs: super::allocations::rows(profile)
            .into_iter()
            .map(|r| AllocRow {
                caller: r.caller,
                path: r.path.join(" > "),
                bytes: crate::display::format_size(r.figures.bytes),
                objects: r.figures.objects,
                live_bytes: crate::display::format_size(r.figures.live_bytes),
                live_objects: r.figures.live_objects,
            })
            .collect(),
        allocs_summary: super::allocations::summary_line(profile),
        data,
        css: STYLE,
        js: SCRIPT,
    };
    let mut env = minijinja::Environment::new();
    // The name ends in .html: every value is HTML-escaped unless marked `safe`.
    env.add_template("report.html", TEMPLATE)
        .context("the HTML template does not parse")?;
    let html = env
        .get_template("report.html")?
        .render(minijinja::Value::from(minijinja::value::Serde(&page)))
        .context("failed to render the HTML report")?;
    Ok(html)
}

/// Function `id`'s source lines with their instructions, when the profile has them.
fn annotated_source(symbols: &Symbols, id: u32) -> Vec<(u32, u64, &str)> {
    let Some(lines) = symbols.lines.get(&id) else {
        return Vec::new();
    };
    let cost: std::collections::HashMap<u32, u64> = lines
        .lines
        .iter()
        .filter(|((file, _), _)| *file == lines.main_file)
        .map(|((_, n), c)| (*n, *c))
        .collect();
    lines
        .source
        .iter()
        .map(|(n, text)| (*n, cost.get(n).copied().unwrap_or(0), text.as_str()))
        .collect()
}

/// What the header says besides the summary.
fn notes(profile: &crate::profile::Profile) -> Vec<String> {
    let mut notes = Vec::new();
    if !profile.unprobed.is_empty() {
        notes.push(format!(
            "{} functions without probes (part of their callers)",
            profile.unprobed.len()
        ));
    }
    if !profile.untimed.is_empty() {
        notes.push(format!(
            "{} short functions counted, not timed ({})",
            profile.untimed.len(),
            crate::report::text::untimed_time(profile)
        ));
    }
    if let Some(live) = &profile.live {
        notes.extend(
            crate::report::text::live_summary(live)
                .lines()
                .map(|l| l.trim().to_string()),
        );
    }
    if let Some(adaptive) = &profile.adaptive {
        notes.extend(crate::report::hot_paths::notes(profile, adaptive));
    }
    notes
}

#[cfg(test)]
mod tests {
    use crate::report::tests::sample_profile;

    #[test]
    fn live_switching_is_in_the_header() {
        let mut p = sample_profile();
        p.live = Some(crate::profile::LiveRecord {
            changes: vec![crate::profile::SwitchChange {
                at_ns: 5_000_000,
                on: false,
                what: "work<T>".into(),
                source: "ctl".into(),
                functions: 1,
            }],
            switched: vec![crate::profile::SwitchedFunction {
                name: "work<T>".into(),
                on: vec![[0, 5_000_000]],
                on_ns: 5_000_000,
            }],
        });
        let html = super::render(&p, &Default::default()).unwrap();
        assert!(html.contains("live probes: 1 change; 1 function off part of the run"));
        assert!(html.contains("work&lt;T&gt; on for 5.00 ms"), "{html}");
    }

    #[test]
    fn names_are_escaped_and_the_data_cannot_close_the_script() {
        let mut p = sample_profile();
        p.functions[1].name = "a</script><b>".to_string();
        let html = super::render(&p, &Default::default()).unwrap();
        assert!(
            html.contains("a&lt;&#x2f;script&gt;&lt;b&gt;")
                || html.contains("a&lt;/script&gt;&lt;b&gt;"),
            "escaped in the page"
        );
        assert_eq!(
            html.matches("</script>").count(),
            2,
            "only the two real script ends"
        );
        assert!(html.contains(r##"<a href="#f1">"##));
        // Each name once in the data, once in its table row (link text and sort key).
        assert_eq!(html.matches("a&lt;").count(), 2, "{html}");
    }
}
