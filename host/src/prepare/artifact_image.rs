//! A compiled artifact as stored and as loaded: wasmtime's serialized module, compressed with
//! zstd in independent frames, and expanded at load time into an anonymous in-memory file
//! that wasmtime maps.
//!
//! Machine code compresses about 4x (a 246 MB artifact of a 69 MB C++ module: 65 MB at
//! level 1), and the artifact was most of a cached module's footprint. Independent frames of
//! [`FRAME_BYTES`] each let every core compress and expand its share, and the stored file is
//! still a plain zstd stream (`zstd -d` reads it).
//!
//! Expanding into a sealed memfd (Linux; an unlinked temporary file elsewhere) rather than
//! mapping the cache's file has a second benefit: the bytes wasmtime maps are the bytes whose
//! MAC was checked, held by this process alone, so nothing can swap them between the check
//! and the mapping.

use std::fs::File;
use std::io;
use std::ops::Range;

/// Bytes of serialized module per zstd frame.
pub const FRAME_BYTES: usize = 4 << 20;

/// zstd's level for artifacts: its fastest, since a cold start waits for it (level 3 saves a
/// further 8% for 30% more time).
const LEVEL: i32 = 1;

/// The most an artifact may expand to (a sanity bound on what the frames declare).
const MAX_EXPANDED: u64 = 64 << 30;

/// `bytes` compressed: one zstd frame per [`FRAME_BYTES`], each declaring its size, made on
/// every core.
pub fn compress(bytes: &[u8]) -> io::Result<Vec<u8>> {
    let chunks: Vec<&[u8]> = bytes.chunks(FRAME_BYTES).collect();
    let frames = on_every_core(chunks, |chunk| zstd::bulk::compress(chunk, LEVEL))?;
    Ok(frames.concat())
}

/// One frame of a stored artifact: where it is, and where its bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    compressed: Range<usize>,
    expanded: Range<usize>,
}

/// The frames of `stored`, each with its declared size; an error for anything that is not a
/// sequence of whole frames that declare their sizes.
fn frames(stored: &[u8]) -> io::Result<Vec<Frame>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut frames = Vec::new();
    let (mut at, mut out) = (0usize, 0u64);
    while at < stored.len() {
        let rest = &stored[at..];
        let len = zstd::zstd_safe::find_frame_compressed_size(rest)
            .map_err(|_| bad("a damaged zstd frame"))?;
        let size = zstd::zstd_safe::get_frame_content_size(rest)
            .ok()
            .flatten()
            .ok_or_else(|| bad("a zstd frame without its size"))?;
        let end = out
            .checked_add(size)
            .filter(|&e| e <= MAX_EXPANDED)
            .ok_or_else(|| bad("frames larger than any artifact"))?;
        frames.push(Frame {
            compressed: at..at + len,
            expanded: out as usize..end as usize,
        });
        at += len;
        out = end;
    }
    if frames.is_empty() {
        return Err(bad("no zstd frame"));
    }
    Ok(frames)
}

/// `stored` (see [`compress`]) expanded into an anonymous file private to this process, on
/// every core, and sealed against change where the system allows. The file is positioned
/// at its start.
pub fn expand(stored: &[u8]) -> io::Result<File> {
    let frames = frames(stored)?;
    let size = frames.last().map_or(0, |f| f.expanded.end);
    let file = anonymous_file()?;
    file.set_len(size as u64)?;
    {
        // SAFETY: the file was just created by this process and nothing else has it; the
        // mapping is dropped before the file is handed on.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }?;
        let mut jobs = Vec::with_capacity(frames.len());
        let mut rest: &mut [u8] = &mut map[..];
        for frame in &frames {
            let (head, tail) = rest.split_at_mut(frame.expanded.len());
            jobs.push((&stored[frame.compressed.clone()], head));
            rest = tail;
        }
        on_every_core(jobs, |(source, destination)| {
            let want = destination.len();
            let got = zstd::bulk::decompress_to_buffer(source, destination)?;
            if got != want {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a zstd frame shorter than it declares",
                ));
            }
            Ok(())
        })?;
    }
    seal(&file);
    Ok(file)
}

/// Runs `work` on every item, on as many threads as there are cores (at most one per item),
/// each taking a contiguous share; the results in order, or the first error.
fn on_every_core<I: Send, T: Send>(
    items: Vec<I>,
    work: impl Fn(I) -> io::Result<T> + Sync,
) -> io::Result<Vec<T>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len())
        .max(1);
    if threads == 1 {
        return items.into_iter().map(work).collect();
    }
    let per_thread = items.len().div_ceil(threads);
    let mut shares: Vec<Vec<I>> = Vec::with_capacity(threads);
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        shares.push(items.by_ref().take(per_thread).collect());
    }
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .into_iter()
            .map(|share| {
                scope.spawn(move || share.into_iter().map(work).collect::<io::Result<Vec<T>>>())
            })
            .collect();
        let mut out = Vec::new();
        for handle in handles {
            let part = handle
                .join()
                .map_err(|_| io::Error::other("a compression thread panicked"))??;
            out.extend(part);
        }
        Ok(out)
    })
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
    fn round_trips_across_frames() {
        // Three frames and a bit, with enough structure to compress.
        let bytes: Vec<u8> = (0..3 * FRAME_BYTES + 12_345)
            .map(|i| (i % 251) as u8 ^ (i / 4096) as u8)
            .collect();
        let stored = compress(&bytes).unwrap();
        assert!(stored.len() < bytes.len() / 4, "{}", stored.len());
        assert_eq!(frames(&stored).unwrap().len(), 4);
        assert_eq!(contents(expand(&stored).unwrap()), bytes);
        // A plain zstd stream: the crate's streaming decoder reads it whole.
        assert_eq!(zstd::stream::decode_all(&stored[..]).unwrap(), bytes);
    }

    #[test]
    fn small_and_empty_inputs() {
        assert_eq!(contents(expand(&compress(b"x").unwrap()).unwrap()), b"x");
        assert!(expand(&compress(b"").unwrap_or_default()).is_err());
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let bytes = vec![7u8; FRAME_BYTES + 10];
        let stored = compress(&bytes).unwrap();
        for cut in [1, stored.len() / 2, stored.len() - 1] {
            assert!(expand(&stored[..cut]).is_err(), "cut at {cut}");
        }
        assert!(expand(b"not zstd at all").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_expanded_file_cannot_change() {
        use std::io::Write;
        let mut file = expand(&compress(b"sealed").unwrap()).unwrap();
        assert!(file.write_all(b"x").is_err());
        assert!(file.set_len(1).is_err());
    }
}
