//! The layout's rules, checked: which room may use which (see `ARCHITECTURE.md` and the
//! crate's doc), and no circle of `use` between sibling modules.
//!
//! The check reads this crate's sources and follows every `crate::…`, `super::…` and
//! `self::…` path outside comments. A module's own ancestors and descendants are not
//! counted as circles (a folder's `mod.rs` is its front door), and code after a file's
//! `#[cfg(test)]` is left out of the circle check (tests may reach into their parent).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms, and what each may use besides the shared helpers.
const ROOMS: &[(&str, &[&str])] = &[
    (
        "commands",
        &["prepare", "run", "report", "profile", "config", "live"],
    ),
    ("live", &["run", "config"]),
    ("prepare", &["run::engine", "run::code::image", "profile"]),
    ("run", &["profile"]),
    ("report", &["profile"]),
    ("profile", &[]),
    ("config", &[]),
];

/// Helpers at the crate's root: every room may use them; they use no room.
const HELPERS: &[&str] = &[
    "components",
    "demangle",
    "display",
    "exit",
    "go_symbols",
    "languages",
    "logging",
    "settings",
    "progress",
    "stats",
    "timings",
];

/// One module: its path (`run::collector`) and its code, comments stripped.
struct Source {
    module: Vec<String>,
    file: PathBuf,
    code: String,
    /// The code before the first `#[cfg(test)]`.
    non_test: String,
}

/// This crate's modules.
fn sources() -> Vec<Source> {
    sources_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The modules of the crate whose sources are under `root`.
fn sources_in(root: &Path) -> Vec<Source> {
    let root = root.to_path_buf();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let non_test = code.split("#[cfg(test)]").next().unwrap_or("").to_string();
            out.push(Source {
                module,
                file: rel.to_path_buf(),
                code,
                non_test,
            });
        }
    }
    out
}

/// Every path `code` names, made absolute (`["run", "collector", "Collector"]`), for a file
/// whose module is `module`. `use a::{b, c::d}` groups are expanded one level deep.
fn paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        // A path starts here: read `ident(::ident)*` and perhaps a `::{...}` group.
        let start = i;
        let mut end = i;
        while end < bytes.len() && (is_ident(bytes[end]) || code[end..].starts_with("::")) {
            end += if bytes[end] == b':' { 2 } else { 1 };
        }
        let text = code[start..end].trim_end_matches("::");
        let segments: Vec<&str> = text.split("::").collect();
        let absolute: Option<Vec<String>> = match segments[0] {
            "crate" => Some(segments[1..].iter().map(|s| s.to_string()).collect()),
            "super" | "self" => {
                let mut base = module.to_vec();
                let mut rest = &segments[..];
                while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (*h, t)) {
                    base.pop();
                    rest = tail;
                }
                if rest.first() == Some(&"self") {
                    rest = &rest[1..];
                }
                base.extend(rest.iter().map(|s| s.to_string()));
                Some(base)
            }
            _ => None,
        };
        if let Some(base) = absolute {
            if code[end..].starts_with('{') && code[..end].ends_with("::") {
                let close = code[end..].find('}').map_or(code.len(), |c| end + c);
                for item in code[end + 1..close].split(',') {
                    let item = item.trim();
                    if item.is_empty() || item == "self" {
                        out.push(base.clone());
                        continue;
                    }
                    let mut p = base.clone();
                    p.extend(item.split("::").map(|s| s.trim().to_string()));
                    out.push(p);
                }
                i = close;
                continue;
            }
            out.push(base);
        }
        i = end.max(i + 1);
    }
    out
}

/// The longest prefix of `path` that is a module of the crate.
fn module_of(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

fn allowed(from: &[String], to: &[String]) -> bool {
    let (Some(from_room), Some(to_top)) = (from.first(), to.first()) else {
        return true;
    };
    if from_room == to_top || HELPERS.contains(&to_top.as_str()) {
        return true;
    }
    if HELPERS.contains(&from_room.as_str()) {
        return false;
    }
    let Some((_, may)) = ROOMS.iter().find(|(room, _)| room == from_room) else {
        // Files at the root that are neither rooms nor helpers (this check, the binary).
        return true;
    };
    let target = to.join("::");
    may.iter()
        .any(|m| target == *m || target.starts_with(&format!("{m}::")))
}

#[test]
fn rooms_use_only_the_rooms_below_them() {
    let sources = sources();
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut wrong = Vec::new();
    for s in &sources {
        if s.module.first().map(String::as_str) == Some("architecture") {
            continue;
        }
        for p in paths(&s.module, &s.code) {
            if let Some(target) = module_of(&p, &modules) {
                if !allowed(&s.module, &target) {
                    wrong.push(format!("{} uses {}", s.file.display(), p.join("::")));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "arrows against the flow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_module_circles() {
    assert_no_circles(&sources());
}

/// The agent's modules too: its body's emitter and the files of each kind of probe.
#[test]
fn no_module_circles_in_the_agent() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src");
    assert_no_circles(&sources_in(&agent));
}

/// Panics naming a circle of modules that use each other, if `sources` has one.
fn assert_no_circles(sources: &[Source]) {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for s in sources {
        for p in paths(&s.module, &s.non_test) {
            let Some(target) = module_of(&p, &modules) else {
                continue;
            };
            let related = target.starts_with(&s.module) || s.module.starts_with(&target);
            if !related {
                edges.entry(s.module.clone()).or_default().insert(target);
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, bool>,
        path: &mut Vec<String>,
    ) -> Option<String> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                path.push(node.join("::"));
                return Some(path.join(" -> "));
            }
            None => {}
        }
        state.insert(node.clone(), false);
        path.push(node.join("::"));
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, state, path) {
                return Some(circle);
            }
        }
        path.pop();
        state.insert(node.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        let mut path = Vec::new();
        if let Some(circle) = visit(node, &edges, &mut state, &mut path) {
            panic!("modules use each other in a circle: {circle}");
        }
    }
}

/// The most source files a folder holds directly: past it, a folder is a corridor whose
/// files no longer show which job each does; its parts want folders of their own.
const MOST_FILES_IN_A_FOLDER: usize = 20;

#[test]
fn no_folder_holds_more_than_twenty_source_files() {
    let mut per_folder: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for s in sources() {
        let folder = s
            .file
            .parent()
            .expect("a file is in a folder")
            .to_path_buf();
        *per_folder.entry(folder).or_default() += 1;
    }
    let crowded: Vec<String> = per_folder
        .iter()
        .filter(|(_, &n)| n > MOST_FILES_IN_A_FOLDER)
        .map(|(folder, n)| format!("{} holds {n}", folder.display()))
        .collect();
    assert!(
        crowded.is_empty(),
        "folders with more than {MOST_FILES_IN_A_FOLDER} source files (give their parts \
         folders of their own, see ARCHITECTURE.md):\n{}",
        crowded.join("\n")
    );
}

/// The most lines of source a file holds (its unit tests aside): past it, a file usually
/// does more than one job. A file that does one thing at greater length says so in its
/// `//!` header with [`LONG_BY_DESIGN`], and why.
const MOST_LINES_IN_A_FILE: usize = 600;

/// The words a long file's header says it with.
const LONG_BY_DESIGN: &str = "long by design";

/// Files of the workspace's crates longer than [`MOST_LINES_IN_A_FILE`] without saying why,
/// as `path: lines`; test files (`tests.rs`, and a file's code after its first
/// `#[cfg(test)]`) are not counted.
fn long_files() -> Vec<String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut long = Vec::new();
    for krate in ["host", "agent", "cache"] {
        let root = workspace.join(krate).join("src");
        for source in sources_in(&root) {
            if source.file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(root.join(&source.file)).unwrap();
            if let Some(lines) = too_long(&text) {
                long.push(format!("{krate}/src/{}: {lines}", source.file.display()));
            }
        }
    }
    long
}

/// How many lines of source (before the first `#[cfg(test)]`) `text` holds, if more than
/// [`MOST_LINES_IN_A_FILE`] and its header does not say it is [`LONG_BY_DESIGN`].
fn too_long(text: &str) -> Option<usize> {
    let lines = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or("")
        .lines()
        .count();
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    (lines > MOST_LINES_IN_A_FILE && !header.contains(LONG_BY_DESIGN)).then_some(lines)
}

#[test]
fn no_source_file_is_longer_than_six_hundred_lines() {
    let long = long_files();
    assert!(
        long.is_empty(),
        "source files over {MOST_LINES_IN_A_FILE} lines (split them by job, or say in the \
         header that the file is {LONG_BY_DESIGN:?} and why):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checker_sees_arrows_and_circles() {
    let module = vec!["run".to_string(), "runner".to_string()];
    let found = paths(
        &module,
        "use crate::prepare::loader::{self, load};\nuse super::clock::Clock;\nlet x = crate::display::format_ns(1);",
    );
    let joined: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "prepare::loader",
            "prepare::loader::load",
            "run::clock::Clock",
            "display::format_ns"
        ]
    );
    let run = |m: &str| m.split("::").map(str::to_string).collect::<Vec<_>>();
    assert!(!allowed(&run("run::runner"), &run("prepare::loader")));
    assert!(!allowed(&run("profile"), &run("run::collector")));
    assert!(!allowed(&run("display"), &run("profile")));
    assert!(allowed(&run("prepare::artifacts"), &run("run::engine")));
    assert!(!allowed(&run("prepare::artifacts"), &run("run::runner")));
    assert!(allowed(&run("commands::run"), &run("prepare::instrument")));
    assert!(allowed(&run("report::text"), &run("display")));
    // A long file is seen, its tests aside, unless its header says why.
    let body = "fn f() {}\n".repeat(MOST_LINES_IN_A_FILE);
    assert_eq!(too_long(&format!("//! A file.\n{body}")), Some(601));
    assert_eq!(
        too_long(&format!("//! A file, {LONG_BY_DESIGN}.\n{body}")),
        None
    );
    assert_eq!(
        too_long(&format!("//! A file.\n#[cfg(test)]\n{body}")),
        None
    );
}
