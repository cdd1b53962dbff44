//! The progress bar of a first start: drawn on a terminal (a pseudo-terminal from util-linux
//! `script`) and cleared before the program writes; never with `-q`, never when stderr is
//! not a terminal.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{sample, stderr, wprof_bin, Scratch};

fn script() -> Option<PathBuf> {
    let found = ["/usr/bin/script", "/bin/script"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
            panic!("util-linux `script` is required (WPROF_REQUIRE_TOOLS)");
        }
        eprintln!("skipped: no util-linux `script` to give wprof a terminal");
    }
    found
}

/// Runs `wprof ARGS` with a pseudo-terminal for stdin, stdout and stderr, the bar's delay 0,
/// and returns everything written to the terminal.
fn on_terminal(script: &Path, s: &Scratch, args: &[&str]) -> String {
    let quoted: Vec<String> = std::iter::once(wprof_bin())
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let log = s.path("terminal.log");
    let status = Command::new(script)
        .current_dir(s.dir.path())
        .args(["-qec", &quoted.join(" ")])
        .arg(&log)
        .env_remove("WPROF")
        .env_remove("WPROF_OUT")
        .env_remove("WPROF_LOG")
        .env("WPROF_CACHE_DIR", s.cache_dir())
        .env("XDG_CONFIG_HOME", s.path("config"))
        .env("WPROF_PROGRESS_DELAY_MS", "0")
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned()
}

#[test]
fn a_first_start_shows_progress_on_a_terminal_and_clears_it_before_the_program() {
    let Some(script) = script() else { return };
    let s = Scratch::new();
    let module = sample("interp.wasm");
    let log = on_terminal(
        &script,
        &s,
        &["run", "-o", "p.wprof", module.to_str().unwrap()],
    );
    let drawn = ["wprof: instrumenting functions", "compiling"]
        .iter()
        .filter_map(|step| log.rfind(step))
        .max()
        .unwrap_or_else(|| panic!("no progress drawn:\n{log}"));
    // The bar's last drawing is erased, and the program's output comes after it.
    let cleared = log[drawn..]
        .find("\x1b[2K")
        .map(|at| drawn + at)
        .unwrap_or_else(|| panic!("the bar is never cleared:\n{log}"));
    let output = log
        .find("checksum=396fec6446cb8568")
        .unwrap_or_else(|| panic!("no program output:\n{log}"));
    assert!(cleared < output, "{log}");
}

#[test]
fn no_progress_when_quiet_or_without_a_terminal() {
    let Some(script) = script() else { return };
    let module = sample("interp.wasm");
    let s = Scratch::new();
    let log = on_terminal(
        &script,
        &s,
        &["run", "-q", "-o", "p.wprof", module.to_str().unwrap()],
    );
    assert!(!log.contains("wprof: "), "{log}");
    assert!(log.contains("checksum=396fec6446cb8568"), "{log}");

    let s = Scratch::new();
    let out = s
        .wprof(&["run", "-o", "p.wprof", module.to_str().unwrap()])
        .env("WPROF_PROGRESS_DELAY_MS", "0")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(
        !err.contains("instrumenting functions") && !err.contains("compiling"),
        "{err}"
    );
}
