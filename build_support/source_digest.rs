//! The digest of a crate's source files, for its build script: `wprof-agent`'s (its sources,
//! in every cache key of what it writes) and `wprof`'s (the code that learns a module's
//! facts). Included by each build script with `#[path]`; it prints the `rerun-if-changed`
//! lines of what it reads.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// The digest, in 16 hex digits, of the files at or under `paths` (relative to the crate):
/// their names and contents, in the order of their names.
pub fn source_digest(paths: &[&str]) -> String {
    let mut files = Vec::new();
    for path in paths {
        println!("cargo:rerun-if-changed={path}");
        files_under(Path::new(path), &mut files);
    }
    files.sort();
    // SipHash with fixed keys: the same sources give the same digest in every build by
    // the same compiler (another compiler's builds only miss what the digest keys once).
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    for file in files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(&file).unwrap_or_default());
    }
    format!("{:016x}", hasher.finish())
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
