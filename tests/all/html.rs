//! `wprof report --format html`: the page is loaded in headless Chromium and the DOM its
//! script builds is checked: table rows, function pages and their links, the call graph's
//! nodes and arcs, the icicle's boxes and zoom.

use std::path::Path;
use std::process::Command;

use regex::Regex;
use serde_json::Value;

use crate::formats::{cost_profile, report_to};
use crate::support::*;
use crate::tools::tool;

const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

struct Browser {
    chromium: std::path::PathBuf,
    profile_dir: tempfile::TempDir,
}

impl Browser {
    fn new() -> Option<Self> {
        let chromium = tool("chromium", "loading --format html in a browser")?;
        Some(Self {
            chromium,
            profile_dir: tempfile::tempdir().unwrap(),
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.chromium);
        cmd.args(CHROMIUM_FLAGS).arg(format!(
            "--user-data-dir={}",
            self.profile_dir.path().display()
        ));
        cmd
    }

    /// The DOM after the page's script ran, for `file` with URL fragment `fragment`.
    fn dom(&self, file: &Path, fragment: &str) -> String {
        let o = self
            .command()
            .arg("--dump-dom")
            .arg("--window-size=1280,800")
            .arg(format!("file://{}#{fragment}", file.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "chromium failed: {}", stderr(&o));
        let dom = stdout(&o);
        assert!(dom.contains("</html>"), "no DOM: {dom}");
        dom
    }

    fn screenshot(&self, file: &Path, fragment: &str, png: &Path) {
        let o = self
            .command()
            .arg("--window-size=1400,900")
            .arg(format!("--screenshot={}", png.display()))
            .arg(format!("file://{}#{fragment}", file.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "chromium failed: {}", stderr(&o));
    }
}

fn id_of(p: &Value, name: &str) -> u64 {
    function(p, name)["id"].as_u64().unwrap()
}

/// The value of `attr` on the element with id `element`.
fn attr(dom: &str, element: &str, attr: &str) -> String {
    let re = Regex::new(&format!(r#"<[^>]*\bid="{element}"[^>]*>"#)).unwrap();
    let tag = re
        .find(dom)
        .unwrap_or_else(|| panic!("no #{element}"))
        .as_str();
    let re = Regex::new(&format!(r#"\b{attr}="([^"]*)""#)).unwrap();
    re.captures(tag)
        .unwrap_or_else(|| panic!("no {attr} on {tag}"))[1]
        .to_string()
}

/// The names of the table rows, in DOM order, that are not hidden.
fn visible_rows(dom: &str) -> Vec<String> {
    let re = Regex::new(r#"<tr class="row"([^>]*)>"#).unwrap();
    let name = Regex::new(r#"data-name="([^"]*)""#).unwrap();
    re.captures_iter(dom)
        .filter(|c| !c[1].contains("hidden"))
        .map(|c| name.captures(&c[1]).unwrap()[1].to_string())
        .collect()
}

/// The section of the DOM from the element with id `element` to the end of that section.
fn section<'a>(dom: &'a str, element: &str) -> &'a str {
    let start = dom
        .find(&format!(r#"id="{element}""#))
        .unwrap_or_else(|| panic!("no #{element}"));
    let end = dom[start..].find("</section>").unwrap();
    &dom[start..start + end]
}

#[test]
fn html_report_is_self_contained() {
    let s = Scratch::new();
    cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    let html = String::from_utf8(report_to(&s, "c.wprof", "html", "report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Source lines from the module's DWARF, on the rows and pages.
    assert!(
        html.contains(r#"<span class="src">compress.c:"#),
        "sources shown"
    );
    // Nothing is loaded from elsewhere: no external script, style, image, font or fetch.
    for needle in [
        "src=\"http",
        "src=\"//",
        "href=\"http",
        "href=\"//",
        "url(",
        "@import",
        "fetch(",
        "XMLHttpRequest",
        "<link",
        "<img",
        "<iframe",
    ] {
        assert!(
            !html.contains(needle),
            "the report refers to something outside: {needle}"
        );
    }
}

#[test]
fn html_report_renders_in_chromium() {
    let s = Scratch::new();
    let p = cost_profile(&s, "compress.wasm", &["1"], "c.wprof");
    report_to(&s, "c.wprof", "html", "report.html");
    let Some(browser) = Browser::new() else {
        return;
    };
    let file = s.path("report.html");
    let functions = p["functions"].as_array().unwrap();

    // The flat table: a row per function, each a link to its page, self order by default.
    let dom = browser.dom(&file, "table");
    assert_eq!(attr(&dom, "view-table", "class"), "view");
    let rows = visible_rows(&dom);
    assert_eq!(rows.len(), functions.len());
    assert_eq!(rows[0], "find_match");
    for f in functions {
        assert!(
            dom.contains(&format!(r##"<a href="#f{}">"##, f["id"])),
            "{}",
            f["name"]
        );
    }
    // Sorting and filtering, as the controls do them.
    let dom = browser.dom(
        &file,
        "table?sort=calls:desc&filter=^(crc32|find_match|flush_literals)$",
    );
    assert_eq!(
        visible_rows(&dom),
        ["find_match", "flush_literals", "crc32"]
    );
    assert_eq!(attr(&dom, "flat", "data-sort"), "calls:desc");
    assert!(dom.contains(&format!("3 of {} functions", functions.len())));
    let dom = browser.dom(&file, "table?sort=name:asc");
    let names = visible_rows(&dom);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_ne!(names, rows, "name order differs from self order");

    // A function's page: its callers and callees link to their pages.
    let (lz, find, main) = (
        id_of(&p, "lz_compress"),
        id_of(&p, "find_match"),
        id_of(&p, "main"),
    );
    let dom = browser.dom(&file, &format!("f{lz}"));
    assert_eq!(attr(&dom, &format!("view-f{lz}"), "class"), "view fn");
    let page = section(&dom, &format!("view-f{lz}"));
    assert!(
        !page[..page.find('>').unwrap()].contains("hidden"),
        "the page is shown"
    );
    assert!(
        page.contains(&format!(r##"<a href="#f{find}">find_match</a>"##)),
        "{page}"
    );
    assert!(
        page.contains(&format!(r##"<a href="#f{main}">main</a>"##)),
        "{page}"
    );
    let calls = edge_calls(&p, Some("lz_compress"), "find_match");
    assert!(page.contains(&format!("<td>{calls}</td>")), "{page}");
    let table = section(&dom, "view-table");
    assert!(
        table[..table.find('>').unwrap()].contains("hidden"),
        "the table is not shown"
    );

    // The call graph: about 30 functions at first, arcs wider for more inclusive cost.
    let dom = browser.dom(&file, "graph");
    let nodes: usize = attr(&dom, "graph", "data-nodes").parse().unwrap();
    assert!((20..=31).contains(&nodes), "{nodes} nodes");
    assert_eq!(dom.matches(r#"<g class="node"#).count(), nodes);
    assert_eq!(
        attr(&dom, "graph", "data-root"),
        id_of(&p, "_start").to_string()
    );
    let arc = |from: u64, to: u64| -> f64 {
        let re = Regex::new(&format!(
            r#"<path [^>]*stroke-width="([0-9.]+)" data-from="{from}" data-to="{to}""#
        ))
        .unwrap();
        re.captures(&dom)
            .unwrap_or_else(|| panic!("no arc {from} -> {to}"))[1]
            .parse()
            .unwrap()
    };
    let wide = arc(lz, find);
    let narrow = arc(lz, id_of(&p, "flush_literals"));
    assert!(wide > narrow + 1.0, "{wide} vs {narrow}");
    // Any function as the root; everything shown with min=0.
    let dom = browser.dom(&file, &format!("graph/{lz}?min=0"));
    assert_eq!(attr(&dom, "graph", "data-root"), lz.to_string());
    assert_eq!(
        attr(&dom, "graph", "data-nodes"),
        "3",
        "lz_compress, find_match, flush_literals"
    );
    // A higher minimum shows fewer.
    let dom = browser.dom(&file, "graph?min=5");
    let few: usize = attr(&dom, "graph", "data-nodes").parse().unwrap();
    let expected = functions
        .iter()
        .filter(|f| f["inclusive"].as_u64().unwrap() * 100 >= 5 * p["total"].as_u64().unwrap())
        .count();
    assert_eq!(few, expected);

    // The icicle: boxes for the contexts, zoom into one.
    let dom = browser.dom(&file, "flame");
    let cells: usize = attr(&dom, "flame", "data-cells").parse().unwrap();
    assert!(cells >= 8, "{cells}");
    assert_eq!(attr(&dom, "flame", "data-zoom"), "-1");
    let lz_node = p["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["function"].as_u64() == Some(lz))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let dom = browser.dom(&file, &format!("flame/{lz_node}"));
    assert_eq!(attr(&dom, "flame", "data-zoom"), lz_node.to_string());
    let zoomed = section(&dom, "view-flame");
    let first_cell = Regex::new(r#"<div class="cell"[^>]*>([^<]*)</div>"#).unwrap();
    let names: Vec<&str> = first_cell
        .captures_iter(zoomed)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert_eq!(names[0], "lz_compress");
    assert!(names.contains(&"find_match"));
    assert!(!names.contains(&"crc32"), "outside the zoomed box");
    assert!(
        zoomed.contains(r##"<a href="#flame/0">_start</a>"##),
        "breadcrumbs"
    );

    let png = s.path("graph.png");
    browser.screenshot(&file, "graph", &png);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 10_000, "a drawn page, not a blank one");
}

/// A program of thousands of functions with long C++-like names: the file grows with the
/// functions (each name once in the data, once in its table row), not with functions times
/// their callers and callees; the page still renders every row, and a function's page is
/// made when it is opened.
#[test]
fn a_report_of_thousands_of_long_named_functions_stays_small_and_renders() {
    let s = Scratch::new();
    let n = 2_000;
    let name = |i: usize| {
        format!(
            "{}::Template<std::vector<int>>::method_{i}",
            "namespace_with_a_long_name::".repeat(6)
        )
    };
    let mut wat = String::from("(module (memory (export \"memory\") 1)\n");
    for i in 0..n {
        wat += &format!("(func ${} (result i32) (i32.const {i}))\n", name(i));
    }
    wat += "(func (export \"_start\")\n";
    for i in 0..n {
        wat += &format!("(drop (call ${}))\n", name(i));
    }
    wat += "))";
    let app = s.wat_module("big.wasm", &wat);
    let out = s.run(&["run", "-q", "--mode", "cost", app.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    report_to(&s, "big.wprof", "html", "big.html");
    let size = std::fs::metadata(s.path("big.html")).unwrap().len() as usize;
    let names: usize = (0..n).map(|i| name(i).len()).sum();
    // About three copies of each name (data, row link, row sort key) and a few hundred
    // bytes of numbers per function; a page per function would be twice that.
    assert!(
        size < 3 * names + 600 * n,
        "{size} bytes for {names} bytes of names"
    );

    let Some(browser) = Browser::new() else {
        return;
    };
    let file = s.path("big.html");
    let dom = browser.dom(&file, "table");
    assert_eq!(visible_rows(&dom).len(), n + 1);
    // Every control inside a 1280-pixel window, long names or not.
    let outside = |dom: &str| {
        Regex::new(r#"<body[^>]*\bdata-controls-outside="([^"]*)""#)
            .unwrap()
            .captures(dom)
            .map(|c| c[1].to_string())
            .unwrap_or_default()
    };
    assert_eq!(outside(&dom), "0");
    let p = s.profile("big.wprof");
    let id = id_of(&p, &name(1234));
    let dom = browser.dom(&file, &format!("f{id}"));
    let page = section(&dom, &format!("view-f{id}"));
    let start = id_of(&p, "_start");
    assert!(
        page.contains(&format!(r##"<a href="#f{start}">_start</a>"##)),
        "{page}"
    );
    let escaped = name(1234).replace('<', "&lt;").replace('>', "&gt;");
    assert!(page.contains(&escaped), "{page}");
    assert_eq!(outside(&dom), "0");
    // The call graph from _start shows a few dozen functions, not thousands.
    let dom = browser.dom(&file, &format!("graph/{start}"));
    let nodes = dom.matches(r#"<g class="node"#).count();
    assert!((2..=40).contains(&nodes), "{nodes} nodes");
    assert_eq!(outside(&dom), "0");
}

#[test]
fn a_function_page_shows_its_source_with_each_lines_instructions() {
    let s = Scratch::new();
    crate::annotate::coverage_run(&s, "cost", "c.wprof", "wasi_storm.wasm", &[]);
    let p = s.profile("c.wprof");
    // What `wprof annotate` says of the line.
    let annotation = crate::annotate::annotate(&s, &["c.wprof", "__original_main"]);
    let (_, wanted) = crate::annotate::row(&annotation, "line(i);");
    report_to(&s, "c.wprof", "html", "report.html");
    let Some(browser) = Browser::new() else {
        return;
    };
    let main = id_of(&p, "__original_main");
    let dom = browser.dom(&s.path("report.html"), &format!("f{main}"));
    let page = section(&dom, &format!("view-f{main}"));
    assert!(page.contains(r#"<table class="source">"#), "{page}");
    let row = page
        .split("<tr")
        .find(|r| r.contains(r#"<td class="code">"#) && r.contains("line(i);"))
        .unwrap_or_else(|| panic!("{page}"));
    let cell = Regex::new(r#"^ class="ran"><td>(\d+)</td>"#).unwrap();
    let found = cell.captures(row).unwrap_or_else(|| panic!("{row}"));
    assert_eq!(found[1].parse::<u64>().unwrap(), wanted);
}
