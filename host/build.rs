//! Link settings of the `wprof` binary: its debug information (line tables, so that a
//! panic's backtrace names its lines) is stored compressed, which the standard library's
//! backtraces read as they are (README "Install").
//!
//! And the digest of the code that learns a module's facts (`src/prepare/facts.rs` and
//! what it calls: the interpreters' readers, the functions' sources), which keys them in
//! the cache: a build that reads a module differently never takes an older build's facts.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// The code a module's facts come from.
const FACTS_CODE: &[&str] = &[
    "src/languages",
    "src/prepare/facts.rs",
    "src/report/source.rs",
];

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let mut files = Vec::new();
    for path in FACTS_CODE {
        println!("cargo:rerun-if-changed={path}");
        files_under(Path::new(path), &mut files);
    }
    files.sort();
    // SipHash with fixed keys: the same sources give the same digest in every build by
    // the same compiler (another compiler's builds only miss the facts once).
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    for file in files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(&file).unwrap_or_default());
    }
    println!("cargo:rustc-env=WPROF_FACTS_CODE={:016x}", hasher.finish());
}

/// The files at or under `path`.
fn files_under(path: &Path, out: &mut Vec<PathBuf>) {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                files_under(&entry.path(), out);
            }
        }
        Err(_) if path.is_file() => out.push(path.to_path_buf()),
        Err(_) => {}
    }
}
