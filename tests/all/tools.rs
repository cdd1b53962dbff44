//! The outside tools that read wprof's reports (go tool pprof, callgrind_annotate, node with
//! speedscope's schema, chromium). A test whose tool is missing is skipped with a note,
//! unless `WPROF_REQUIRE_TOOLS` is set (`.ci/run` sets it): then it fails.

use std::path::{Path, PathBuf};

/// `name` on the PATH, if there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// Says on stderr that the running test cannot do its work here (`why`). A test that may
/// skip must be among those the default profile of `.config/nextest.toml` leaves out, so
/// that nextest counts it as skipped instead of passed: if it is not, this fails, naming
/// it. (A skip on a thread the test spawned, which libtest does not name, is not checked.)
pub fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or_default()
        .to_string();
    if !test.is_empty() && test != "main" {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.config/nextest.toml");
        let listed = std::fs::read_to_string(&config).unwrap_or_default();
        let module = test.split("::").next().unwrap_or_default();
        assert!(
            listed.contains(&format!("test(={test})"))
                || listed.contains(&format!("test(/^{module}::/)")),
            "{test} needs what is missing here ({why}): add it to the tests that need \
             outside tools in .config/nextest.toml"
        );
    }
    eprintln!("skipped: {why}");
}

/// The tool, or `None` (test skipped) when it is missing and not required.
pub fn tool(name: &str, why: &str) -> Option<PathBuf> {
    let found = on_path(name);
    if found.is_none() {
        if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
            panic!("{name} is required (WPROF_REQUIRE_TOOLS) for {why}, but it is not on PATH");
        }
        skip(&format!("{name} is not installed ({why})"));
    }
    found
}

/// Brendan Gregg's `flamegraph.pl`: `FLAMEGRAPH_PL` (`.ci/run` sets it), else on the PATH.
pub fn flamegraph_pl() -> Option<PathBuf> {
    let found = std::env::var_os("FLAMEGRAPH_PL")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| on_path("flamegraph.pl"));
    if found.is_none() || on_path("perl").is_none() {
        if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
            panic!("perl and flamegraph.pl (FLAMEGRAPH_PL) are required (WPROF_REQUIRE_TOOLS) for reading --format folded");
        }
        skip("perl or flamegraph.pl (FLAMEGRAPH_PL) not found");
        return None;
    }
    found
}

/// The node_modules folder `.ci/run` fills (`.tools/node/node_modules`, or
/// `WPROF_NODE_MODULES`), if it holds `package`.
pub fn node_modules(package: &str, why: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("WPROF_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/node/node_modules")
        });
    let ok = dir.join(package).is_dir() && on_path("node").is_some();
    if !ok {
        if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
            panic!(
                "node and the npm package {package} in {} are required (WPROF_REQUIRE_TOOLS) for {why}",
                dir.display()
            );
        }
        skip(&format!(
            "node or {package} not installed in {} ({why})",
            dir.display()
        ));
        return None;
    }
    Some(dir)
}

/// `go tool pprof` with `args`, run in `s`'s folder, or `None` (test skipped) when go is
/// missing and not required. Its home is the scratch folder (pprof writes there), but its
/// build cache stays the user's: recent Go builds `pprof` on first use into that cache,
/// about 30 s on two cores, which a fresh home would repeat at every call.
pub fn go_pprof(
    s: &crate::support::Scratch,
    why: &str,
    args: &[&str],
) -> Option<std::process::Command> {
    static BUILD_CACHE: std::sync::OnceLock<Option<std::ffi::OsString>> =
        std::sync::OnceLock::new();
    let go = tool("go", why)?;
    let cache = BUILD_CACHE.get_or_init(|| {
        std::env::var_os("GOCACHE").or_else(|| {
            let o = std::process::Command::new(&go)
                .args(["env", "GOCACHE"])
                .output()
                .ok()?;
            let dir = String::from_utf8(o.stdout).ok()?.trim().to_string();
            (o.status.success() && !dir.is_empty()).then(|| dir.into())
        })
    });
    let mut cmd = std::process::Command::new(go);
    cmd.current_dir(s.dir.path())
        .arg("tool")
        .arg("pprof")
        .args(args)
        .env("HOME", s.dir.path())
        .env("PPROF_TMPDIR", s.dir.path());
    if let Some(cache) = cache {
        cmd.env("GOCACHE", cache);
    }
    Some(cmd)
}

/// `go tool pprof -top` rows: name -> (flat, cum), in the profile's unit (or the one `-unit`
/// asks for, shown whole).
pub fn pprof_top(
    s: &crate::support::Scratch,
    file: &str,
    extra: &[&str],
) -> Option<std::collections::BTreeMap<String, (u64, u64)>> {
    let mut cmd = go_pprof(
        s,
        "reading --format pprof with `go tool pprof`",
        &[
            "-top",
            "-nodecount=1000",
            "-nodefraction=0",
            "-edgefraction=0",
        ],
    )?;
    cmd.args(extra).arg(file);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "go tool pprof failed: {}",
        crate::support::stderr(&o)
    );
    let text = crate::support::stdout(&o);
    let mut rows = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 {
            continue;
        }
        // A unit, when asked for (`-unit=ns`: `51234722ns`), follows the number.
        let n = |s: &str| {
            s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{line}"))
        };
        rows.insert(fields[5..].join(" "), (n(fields[0]), n(fields[3])));
    }
    assert!(!rows.is_empty(), "{text}");
    Some(rows)
}

/// `go tool pprof -lines` rows of function `function`: `(name file:line, flat
/// nanoseconds)`; `None` without Go.
pub fn pprof_lines_of(
    s: &crate::support::Scratch,
    file: &str,
    function: &str,
) -> Option<Vec<(String, u64)>> {
    let by_line = pprof_top(s, file, &["-lines", "-unit=ns"])?;
    let prefix = format!("{function} ");
    Some(
        by_line
            .into_iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(name, (flat, _))| (name, flat))
            .collect(),
    )
}

/// `callgrind_annotate` rows: function name -> cost (self, or inclusive with
/// `--inclusive=yes`), of the first event shown (`extra` may choose it: `--show=HostBytes`).
pub fn annotate(
    s: &crate::support::Scratch,
    extra: &[&str],
    file: &str,
    inclusive: bool,
) -> Option<std::collections::BTreeMap<String, u64>> {
    let tool = tool("callgrind_annotate", "reading --format callgrind")?;
    let o = std::process::Command::new(tool)
        .current_dir(s.dir.path())
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg("--threshold=100")
        .arg("--auto=no")
        .args(extra)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "callgrind_annotate failed: {}",
        crate::support::stderr(&o)
    );
    let text = crate::support::stdout(&o);
    // Rows look like `1,234 (12.34%)  file:function` (older versions: `1,234  file:function`).
    let mut rows = std::collections::BTreeMap::new();
    let table = text
        .split("file:function")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    for line in table.lines() {
        let line = line.trim();
        let Some((number, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(cost) = number.replace(',', "").parse::<u64>() else {
            continue;
        };
        let rest = rest.trim_start();
        let rest = if rest.starts_with('(') {
            rest.split_once(')').unwrap().1.trim_start()
        } else {
            rest
        };
        let Some((_, function)) = rest.split_once(':') else {
            continue;
        };
        let function = function.split(" [").next().unwrap().trim();
        rows.insert(function.to_string(), cost);
    }
    assert!(!rows.is_empty(), "{text}");
    Some(rows)
}
