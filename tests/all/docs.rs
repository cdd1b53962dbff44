//! The pages a reader follows: every relative link of README.md, ARCHITECTURE.md and docs/
//! leads to a file that exists and, where it names an `#anchor`, to a heading of that page
//! (as a Markdown renderer such as GitHub's makes them from the heading's text); and every
//! `--flag` they name is one that some `--help` of wprof shows, or another program's; and every
//! `WPROF_*` variable they name is one the code reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The pages checked.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside its fenced code blocks.
fn outside_code(text: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    text.lines().filter(move |line| {
        let fence = line.trim_start().starts_with("```");
        in_code ^= fence;
        !fence && !in_code
    })
}

/// The anchors of `text`'s headings: lower case, punctuation dropped, spaces as hyphens, a
/// repeated one numbered (`-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in outside_code(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(match *n {
            0 => slug.clone(),
            k => format!("{slug}-{k}"),
        });
        *n += 1;
    }
    out
}

/// Every relative link of `text` outside code blocks: its target and anchor.
fn links(text: &str) -> Vec<(String, Option<String>)> {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut out = Vec::new();
    for line in outside_code(text) {
        for c in link.captures_iter(line) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p.to_string(), Some(a.to_string())),
                None => (target.to_string(), None),
            };
            out.push((path, anchor));
        }
    }
    out
}

#[test]
fn every_link_of_the_pages_leads_somewhere() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (path, anchor) in links(&text) {
            checked += 1;
            let target = match path.is_empty() {
                true => page.clone(),
                false => page.parent().unwrap().join(&path),
            };
            let shown = format!(
                "{}: ({path}#{})",
                page.display(),
                anchor.as_deref().unwrap_or("")
            );
            if !target.exists() {
                broken.push(format!("{shown}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let headings = anchors(&std::fs::read_to_string(&target).unwrap());
            if !headings.contains(&anchor) {
                broken.push(format!("{shown}: no such heading"));
            }
        }
    }
    assert!(checked > 100, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_renderers_make_them() {
    let made =
        anchors("# A page\n## `wprof run` flags\n```\n# not a heading\n```\n## Flags\n## Flags\n");
    let want: BTreeSet<String> = ["a-page", "wprof-run-flags", "flags", "flags-1"]
        .map(String::from)
        .into();
    assert_eq!(made, want);
    assert_eq!(
        links("[a](b.md#c) [d](https://x/y) [e](#f)"),
        [
            ("b.md".to_string(), Some("c".to_string())),
            (String::new(), Some("f".to_string()))
        ]
    );
}

/// Flags the pages give to other programs (cargo, git, zstd, callgrind_annotate, wasmtime,
/// wasm-tools, the benchmark scripts), not to wprof.
const OTHER_PROGRAMS_FLAGS: &[&str] = &[
    "--against",
    "--adapt",
    "--auto",
    "--bin",
    "--doc",
    "--follow",
    "--invoke",
    "--locked",
    "--patch-from",
    "--path",
    "--release",
    "--sanitizer",
    "--show",
    "--small",
    "--workspace",
    "--wprof",
];

#[test]
fn every_flag_the_pages_name_is_one_of_wprof() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The reference is every command's `--help` (a unit test keeps it so).
    let reference = std::fs::read_to_string(root.join("docs/reference.md")).unwrap();
    let flag = regex::Regex::new(r"(?:^|[^\w-])(--[a-z][a-z0-9-]*)").unwrap();
    let known: BTreeSet<&str> = flag
        .captures_iter(&reference)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(known.contains("--mode") && known.contains("--sample-period-us"));
    let mut unknown = Vec::new();
    for page in pages() {
        if page.ends_with("reference.md") {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        for c in flag.captures_iter(&text) {
            let name = c.get(1).unwrap().as_str();
            if !known.contains(name) && !OTHER_PROGRAMS_FLAGS.contains(&name) {
                unknown.push(format!("{}: {name}", page.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags that no `--help` of wprof shows:\n{}",
        unknown.join("\n")
    );
}

/// The text of every file under `dir` whose name ends with one of `endings`.
fn texts_under(dir: &Path, endings: &[&str], out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && name != "node_modules" && name != "target" {
            texts_under(&path, endings, out);
        } else if endings.iter().any(|e| name.ends_with(e)) {
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

#[test]
fn every_variable_the_pages_name_is_read_by_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut code = String::new();
    for dir in [
        "host/src",
        "agent/src",
        "cache/src",
        "tests",
        "bench",
        ".ci",
    ] {
        texts_under(&root.join(dir), &[".rs", ".sh", ".py", "run"], &mut code);
    }
    let variable = regex::Regex::new(r"WPROF_[A-Z0-9_]*[A-Z0-9]").unwrap();
    let mut unread = BTreeSet::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for m in variable.find_iter(&text) {
            if !code.contains(m.as_str()) {
                unread.insert(format!("{}: {}", page.display(), m.as_str()));
            }
        }
    }
    assert!(
        unread.is_empty(),
        "variables no code reads:\n{}",
        unread.into_iter().collect::<Vec<_>>().join("\n")
    );
}
