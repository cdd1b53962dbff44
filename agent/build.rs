//! The digest of the agent's own sources, which every cache key of what the agent writes
//! holds beside its format version (`AGENT_CODE`, see `src/lib.rs`): a build whose agent
//! writes differently never takes an older build's instrumented bodies or modules from a
//! cache, even where the version was not bumped.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    files_under(Path::new("src"), &mut files);
    files.sort();
    // SipHash with fixed keys: the same sources give the same digest in every build by the
    // same compiler (another compiler's builds only instrument each function once more).
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    for file in files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(&file).unwrap_or_default());
    }
    println!("cargo:rustc-env=WPROF_AGENT_CODE={:016x}", hasher.finish());
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
