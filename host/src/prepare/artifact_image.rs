//! A compiled artifact as stored and as loaded: wasmtime's serialized module, compressed with
//! zstd in independent frames, and expanded at load time into an anonymous in-memory file
//! that wasmtime maps.
//!
//! Machine code compresses about 4x (a 246 MB artifact of a 69 MB C++ module: 60 MB), and
//! the artifact was most of a cached module's footprint. The frames are made and expanded on
//! every core ([`zstd_frames`]), and the stored file is a plain zstd stream (`zstd -d` reads
//! it).
//!
//! Expanding into a sealed memfd (Linux; an unlinked temporary file elsewhere) rather than
//! mapping the cache's file has a second benefit: the bytes wasmtime maps are the bytes whose
//! MAC was checked, held by this process alone, so nothing can swap them between the check
//! and the mapping.

use std::fs::File;
use std::io;

use crate::prepare::zstd_frames;

/// `stored` (a serialized module compressed by [`zstd_frames::compress`]) expanded into an anonymous file private to this process, on
/// every core, and sealed against change where the system allows. The file is positioned
/// at its start.
pub fn expand(stored: &[u8]) -> io::Result<File> {
    let size = zstd_frames::expanded_len(stored)?;
    if size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "an empty artifact",
        ));
    }
    let file = anonymous_file()?;
    file.set_len(size as u64)?;
    {
        // SAFETY: the file was just created by this process and nothing else has it; the
        // mapping is dropped before the file is handed on.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }?;
        zstd_frames::expand_into(stored, &mut map)?;
    }
    seal(&file);
    Ok(file)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn anonymous_file() -> io::Result<File> {
    memfd::MemfdOptions::new()
        .allow_sealing(true)
        .create("wprof-artifact")
        .map(|m| m.into_file())
        .map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn anonymous_file() -> io::Result<File> {
    tempfile::tempfile()
}

/// Forbids any further change of the file's contents or size (Linux); best effort, since
/// only this process holds the file anyway.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn seal(file: &File) {
    use memfd::FileSeal;
    let Ok(file) = file.try_clone() else {
        return;
    };
    if let Ok(memfd) = memfd::Memfd::try_from_file(file) {
        let _ = memfd.add_seals(&[
            FileSeal::SealShrink,
            FileSeal::SealGrow,
            FileSeal::SealWrite,
            FileSeal::SealSeal,
        ]);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn seal(_file: &File) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn contents(mut file: File) -> Vec<u8> {
        let mut out = Vec::new();
        file.read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn expands_what_was_compressed_into_a_file() {
        let bytes: Vec<u8> = (0..2 * zstd_frames::FRAME_BYTES + 7)
            .map(|i| (i % 13) as u8)
            .collect();
        assert_eq!(
            contents(expand(&zstd_frames::compress(&bytes).unwrap()).unwrap()),
            bytes
        );
        assert!(expand(b"").is_err());
        assert!(expand(b"not zstd").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_expanded_file_cannot_change() {
        use std::io::Write;
        let mut file = expand(&zstd_frames::compress(b"sealed").unwrap()).unwrap();
        assert!(file.write_all(b"x").is_err());
        assert!(file.set_len(1).is_err());
    }
}
