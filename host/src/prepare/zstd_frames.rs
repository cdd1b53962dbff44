//! zstd in independent frames, made and expanded on every core: how wprof compresses what it
//! stores in bulk (compiled artifacts, modules, packs of bodies and of compiled functions).
//!
//! Each [`FRAME_BYTES`] of input is its own frame and declares its size, so that the frames
//! are compressed and expanded in parallel, each straight into its place in the output; the
//! whole is still a plain zstd stream (`zstd -d` reads it). 1 MiB frames cost about 1% of
//! the ratio of 4 MiB ones and keep both cores busy to the end of a 10 MB artifact (a
//! 2 MB module's) instead of one expanding two frames while the other waits. Level 3, zstd's default: on what
//! a 69 MB C++ module leaves in the cache (a 246 MB compiled artifact, 282 MB of compiled
//! functions, 205 MB of bodies) level 1 gives 65, 137 and 95 MB, level 3 60, 122 and 80 MB
//! for about a second more of a cold start of 100 s on 2 cores, level 6 115 and 71 MB for
//! three seconds more. Expanding takes the same time at every level.

use std::io;
use std::ops::Range;

/// Input bytes per zstd frame.
pub const FRAME_BYTES: usize = 1 << 20;

/// zstd's compression level.
const LEVEL: i32 = 3;

/// The most anything stored may expand to (a bound on what damaged frames may declare).
const MAX_EXPANDED: u64 = 64 << 30;

/// `bytes` compressed: one frame per [`FRAME_BYTES`], each declaring its size, made on every
/// core. Empty input gives empty output.
pub fn compress(bytes: &[u8]) -> io::Result<Vec<u8>> {
    compress_at(bytes, LEVEL)
}

/// Like [`compress`], at zstd level `level`: for what is compressed while nothing waits
/// for it (a compiled artifact, stored while the program runs).
pub fn compress_at(bytes: &[u8], level: i32) -> io::Result<Vec<u8>> {
    let chunks: Vec<&[u8]> = bytes.chunks(FRAME_BYTES).collect();
    let frames = on_every_core(chunks, |chunk| zstd::bulk::compress(chunk, level))?;
    Ok(frames.concat())
}

/// `bytes` compressed as one frame that declares its size, on the calling thread (for a
/// caller that is already one of several working threads).
pub fn frame(bytes: &[u8]) -> io::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, LEVEL)
}

/// One frame: where it is, and where its bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    compressed: Range<usize>,
    expanded: Range<usize>,
}

/// The frames of `stored`, each with its declared size; an error for anything that is not a
/// sequence of whole frames that declare their sizes.
fn frames(stored: &[u8]) -> io::Result<Vec<Frame>> {
    let mut frames = Vec::new();
    let (mut at, mut out) = (0usize, 0u64);
    while at < stored.len() {
        let rest = &stored[at..];
        let len = zstd::zstd_safe::find_frame_compressed_size(rest)
            .map_err(|_| invalid("a damaged zstd frame"))?;
        let size = zstd::zstd_safe::get_frame_content_size(rest)
            .ok()
            .flatten()
            .ok_or_else(|| invalid("a zstd frame without its size"))?;
        let end = out
            .checked_add(size)
            .filter(|&e| e <= MAX_EXPANDED)
            .ok_or_else(|| invalid("zstd frames larger than anything stored"))?;
        frames.push(Frame {
            compressed: at..at + len,
            expanded: out as usize..end as usize,
        });
        at += len;
        out = end;
    }
    Ok(frames)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// How many bytes `stored` expands to, as its frames declare.
pub fn expanded_len(stored: &[u8]) -> io::Result<usize> {
    Ok(frames(stored)?.last().map_or(0, |f| f.expanded.end))
}

/// Expands `stored` into `out`, which must be [`expanded_len`] bytes long, on every core.
pub fn expand_into(stored: &[u8], out: &mut [u8]) -> io::Result<()> {
    expand_into_after(stored, out, None)
}

/// `bytes` compressed as [`compress`] does, but with `reference` before each frame as its
/// prefix (zstd's `--patch-from`): what also occurs in `reference` (an original module in
/// its instrumented version, a compiled artifact's code in its compiled functions) costs a
/// few bytes. Only [`expand_after`] with the same reference reads it back. Frames are of
/// one core's share (each loads the reference into its tables once), with checksums, since
/// a wrong reference would otherwise expand to wrong bytes unnoticed.
pub fn compress_after(bytes: &[u8], reference: &[u8]) -> io::Result<Vec<u8>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = bytes.len().div_ceil(cores).max(4 * FRAME_BYTES);
    let chunks: Vec<&[u8]> = bytes.chunks(share).collect();
    let frames = on_every_core(chunks, |chunk| {
        use zstd::zstd_safe::{CCtx, CParameter};
        let window = window_log(reference.len() + chunk.len());
        // Level 3's tables hold 128k places: a 10 MB artifact's code was found in 1 MB
        // frames no better than with no reference at all. A place per 4 to 8 bytes of the
        // reference (an eighth of the power of two above its size) finds nearly all of it
        // (nextpnr's compiled functions against their 10.6 MB artifact: 3.79 MB with 2^21
        // places, 3.74 MB with 2^22, 4.26 MB with 2^20), in tables of 8 MB there, 16 MB at
        // most.
        let places = (window_log(reference.len()).saturating_sub(3)).clamp(17, 22);
        let mut cctx = CCtx::create();
        for parameter in [
            CParameter::CompressionLevel(LEVEL),
            CParameter::WindowLog(window),
            CParameter::HashLog(places),
            CParameter::ChainLog(places.min(17)),
            CParameter::ChecksumFlag(true),
            CParameter::ContentSizeFlag(true),
        ] {
            cctx.set_parameter(parameter).map_err(zstd_error)?;
        }
        cctx.ref_prefix(reference).map_err(zstd_error)?;
        let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(chunk.len()));
        cctx.compress2(&mut frame, chunk).map_err(zstd_error)?;
        Ok(frame)
    })?;
    Ok(frames.concat())
}

/// `stored`, made by [`compress_after`] with `reference`, expanded; an error for anything
/// else (another reference fails the frames' checksums).
pub fn expand_after(stored: &[u8], reference: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; expanded_len(stored)?];
    expand_into_after(stored, &mut out, Some(reference))?;
    Ok(out)
}

/// The window (log2 bytes) that reaches from the end of `span` bytes back to their start.
fn window_log(span: usize) -> u32 {
    (usize::BITS - span.max(1 << 10).saturating_sub(1).leading_zeros()).min(MAX_WINDOW_LOG)
}

/// The largest window [`compress_after`] uses and [`expand_after`] accepts: references of
/// up to a gigabyte.
const MAX_WINDOW_LOG: u32 = 30;

fn zstd_error(code: usize) -> io::Error {
    invalid(zstd::zstd_safe::get_error_name(code))
}

fn expand_into_after(stored: &[u8], out: &mut [u8], reference: Option<&[u8]>) -> io::Result<()> {
    let frames = frames(stored)?;
    if frames.last().map_or(0, |f| f.expanded.end) != out.len() {
        return Err(invalid("zstd frames of another size"));
    }
    let mut jobs = Vec::with_capacity(frames.len());
    let mut rest = out;
    for frame in &frames {
        let (head, tail) = rest.split_at_mut(frame.expanded.len());
        jobs.push((&stored[frame.compressed.clone()], head));
        rest = tail;
    }
    on_every_core(jobs, |(source, destination)| {
        let want = destination.len();
        let got = match reference {
            None => zstd::bulk::decompress_to_buffer(source, destination)?,
            Some(reference) => {
                use zstd::zstd_safe::{DCtx, DParameter};
                let mut dctx = DCtx::create();
                dctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))
                    .map_err(zstd_error)?;
                dctx.ref_prefix(reference).map_err(zstd_error)?;
                dctx.decompress(destination, source).map_err(zstd_error)?
            }
        };
        if got != want {
            return Err(invalid("a zstd frame shorter than it declares"));
        }
        Ok(())
    })?;
    Ok(())
}

/// `stored` expanded into memory.
pub fn expand(stored: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; expanded_len(stored)?];
    expand_into(stored, &mut out)?;
    Ok(out)
}

/// Runs `work` on every item, on as many threads as there are cores (at most one per
/// item), each taking the next item when it is done with one (frames expand at different
/// speeds: fixed shares left one core idle for a third of a 10 MB artifact's expansion);
/// the results in order, or the first error.
fn on_every_core<I: Send, T: Send>(
    items: Vec<I>,
    work: impl Fn(I) -> io::Result<T> + Sync,
) -> io::Result<Vec<T>> {
    let count = items.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count)
        .max(1);
    if threads == 1 {
        return items.into_iter().map(work).collect();
    }
    let queue = std::sync::Mutex::new(items.into_iter().enumerate());
    let next = || queue.lock().unwrap_or_else(|e| e.into_inner()).next();
    let (work, next) = (&work, &next);
    let mut done: Vec<(usize, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(move || {
                    let mut done = Vec::new();
                    while let Some((i, item)) = next() {
                        done.push((i, work(item)?));
                    }
                    Ok::<_, io::Error>(done)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for handle in handles {
            all.extend(
                handle
                    .join()
                    .map_err(|_| io::Error::other("a zstd thread panicked"))??,
            );
        }
        Ok::<_, io::Error>(all)
    })?;
    done.sort_unstable_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, t)| t).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_across_frames() {
        // Three frames and a bit, with enough structure to compress.
        let bytes: Vec<u8> = (0..3 * FRAME_BYTES + 12_345)
            .map(|i| (i % 251) as u8 ^ (i / 4096) as u8)
            .collect();
        let stored = compress(&bytes).unwrap();
        assert!(stored.len() < bytes.len() / 4, "{}", stored.len());
        assert_eq!(frames(&stored).unwrap().len(), 4);
        assert_eq!(expand(&stored).unwrap(), bytes);
        // A plain zstd stream: the crate's streaming decoder reads it whole.
        assert_eq!(zstd::stream::decode_all(&stored[..]).unwrap(), bytes);
    }

    #[test]
    fn small_and_empty_inputs() {
        assert_eq!(expand(&compress(b"x").unwrap()).unwrap(), b"x");
        assert_eq!(compress(b"").unwrap(), b"");
        assert_eq!(expand(b"").unwrap(), b"");
    }

    #[test]
    fn a_reference_makes_what_it_holds_cheap_and_only_it_expands_it() {
        let noise = |seed: u64, len: usize| -> Vec<u8> {
            let mut x = seed;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        // 12 MB of the reference's bytes, in pieces, taken from all over it: incompressible
        // alone, a few bytes per piece against it.
        let reference = noise(1, 6 << 20);
        let mut bytes = Vec::new();
        for i in 0..400usize {
            let at = (i * 7919 * 1031) % (reference.len() - 40_000);
            bytes.extend_from_slice(&reference[at..at + 30_000]);
            bytes.extend_from_slice(b"between");
        }
        let stored = compress_after(&bytes, &reference).unwrap();
        assert!(stored.len() < bytes.len() / 50, "{}", stored.len());
        assert!(compress(&bytes).unwrap().len() > bytes.len() / 2);
        assert_eq!(expand_after(&stored, &reference).unwrap(), bytes);
        // Another reference, or none: an error, never other bytes.
        let mut other = reference.clone();
        other[3 << 20] ^= 1;
        assert!(expand_after(&stored, &other).is_err());
        assert!(expand_after(&stored, &noise(2, 1000)).is_err());
        assert!(expand(&stored).is_err());
        assert!(expand_after(&stored[..stored.len() - 3], &reference).is_err());
        assert_eq!(
            expand_after(&compress_after(b"", &reference).unwrap(), b"").unwrap(),
            b""
        );
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let bytes = vec![7u8; FRAME_BYTES + 10];
        let stored = compress(&bytes).unwrap();
        for cut in [1, stored.len() / 2, stored.len() - 1] {
            assert!(expand(&stored[..cut]).is_err(), "cut at {cut}");
        }
        assert!(expand(b"not zstd at all").is_err());
        let mut short = vec![0u8; bytes.len() - 1];
        assert!(expand_into(&stored, &mut short).is_err());
    }
}
