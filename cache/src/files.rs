//! Files, the store's only medium: every value, usage record and companion file is a file
//! of its own, written aside (a private temporary file in the same folder) and renamed into
//! place. A reader sees a whole file or none; a process killed mid-write leaves at most a
//! temporary file, which readers ignore and `gc` removes.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Temporary files start with this.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// Lowercase hex of a key.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses a 64-digit hex key.
pub fn key_from_hex(s: &str) -> Option<[u8; 32]> {
    bytes_from_hex(s)?.try_into().ok()
}

/// The bytes of a hex string (two digits a byte); `None` if it is not one.
pub fn bytes_from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A temporary name beside `path` (its folder, [`TEMP_PREFIX`], `what`), unique among
/// processes (pid), threads of one (a counter), and runs reusing a pid (the clock).
fn temp_beside(path: &Path, what: &str) -> PathBuf {
    let dir = path.parent().expect("cache paths live in a folder");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!(
        "{TEMP_PREFIX}{what}{}-{nanos}-{n}-{}",
        std::process::id(),
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ))
}

/// A new private temporary file in `path`'s folder, to be renamed over `path` when whole.
pub(crate) fn create_temp_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let temp = temp_beside(path, "");
    let file = options.open(&temp)?;
    Ok((temp, file))
}

/// Writes `bytes` to `path` atomically: a private temporary file in the same folder, then
/// renamed over `path`. Not synced: a killed process leaves the whole file or none (the
/// kernel has it either way); after a power loss a file may be short or damaged, which its
/// recorded length and digest (and the host's MAC) reveal, so it is never used.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_parts(path, &[bytes])
}

/// [`write_atomic`] of the concatenation of `parts`, without making it.
pub(crate) fn write_atomic_parts(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let (temp, file) = create_temp_beside(path)?;
    let result = (|| {
        let mut file = file;
        for part in parts {
            file.write_all(part)?;
        }
        drop(file);
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// blake3 and length of a file's contents.
pub(crate) fn digest_file(path: &Path) -> io::Result<([u8; 32], u64)> {
    let mut file = File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((*hasher.finalize().as_bytes(), len))
}

/// The contents of `path`, or `None` if there is no such file.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `path`; whether it was there.
pub(crate) fn remove_optional(path: &Path) -> io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes the file or folder at `path`, if there is one: renamed to a unique temporary
/// name beside it first (so that processes removing it at once do not fail on each other's
/// half-removed tree), then removed.
pub(crate) fn remove_aside(path: &Path) -> io::Result<()> {
    let aside = temp_beside(path, "removed-");
    match fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    if aside.is_dir() {
        fs::remove_dir_all(&aside)
    } else {
        fs::remove_file(&aside)
    }
}

/// Bytes of the file at `path`, or of every file under the folder at `path` (0 for what
/// cannot be read).
pub(crate) fn size_of(path: &Path) -> u64 {
    match fs::read_dir(path) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => size_of(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum(),
        Err(_) => fs::metadata(path).map_or(0, |m| m.len()),
    }
}

/// Creates `dir` and its parents, private to the user (0700 on Unix).
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Every file in `dir` (none if it does not exist): `(name, path)`.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two!").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two!");
        assert_eq!(list(dir.path()).unwrap().len(), 1, "no temporary file left");
        let (d, len) = digest_file(&path).unwrap();
        assert_eq!((d, len), (*blake3::hash(b"two!").as_bytes(), 4));
    }

    #[test]
    fn hex_keys() {
        let k = *blake3::hash(b"x").as_bytes();
        assert_eq!(key_from_hex(&hex(&k)), Some(k));
        assert_eq!(key_from_hex("00"), None);
        assert_eq!(bytes_from_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(bytes_from_hex("0"), None);
        assert_eq!(bytes_from_hex("zz"), None);
    }
}
