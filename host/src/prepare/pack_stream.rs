//! Packs written while their values come, compressed as they fill, and read back without a
//! copy per value: how the compiled functions of a lineage are kept (see
//! [`crate::prepare::compiled`]).
//!
//! `magic (8) | (key (32) | u32 len | value)*`, in [`zstd_frames`]' frames: the magic is a
//! frame of its own, then each frame holds whole records (the order of the frames after the
//! first does not matter, nor that of the records). A compile of a 69 MB module makes 282 MB
//! of compiled functions; held as they came and packed at the end (a [`crate::prepare::pack`])
//! they cost that twice over, plus the compressed pack, at the cold start's peak of memory.
//! Written this way only the compressed frames (122 MB) and one frame's worth of records are
//! held. The cache's envelope checks the whole; [`Records::read`] rejects anything malformed
//! rather than returning part of it. The frames go straight to where the pack is stored (a
//! value of the cache written in parts), so not even they are held.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::ops::Range;

use crate::prepare::zstd_frames;

/// A pack being written: records gather in a chunk, and each chunk of a frame's size becomes
/// a frame (compressed by whoever added the record that filled it, outside any lock the
/// writer sits behind: [`Writer::add`] hands the full chunk back, [`Writer::push_frame`]
/// takes its frame).
#[derive(Debug)]
pub struct Writer<W: Write> {
    chunk: Vec<u8>,
    /// Where the frames go.
    out: W,
    keys: HashSet<[u8; 32]>,
    failed: bool,
}

impl<W: Write> Writer<W> {
    /// An empty pack of `magic` (what kind of pack it is, with its version), written to `out`.
    pub fn new(magic: &[u8; 8], out: W) -> Self {
        let mut writer = Writer {
            chunk: Vec::new(),
            out,
            keys: HashSet::new(),
            failed: false,
        };
        writer.push_frame(frame(magic));
        writer
    }

    /// Adds `value` under `key`, unless the pack has it already (false then). When that
    /// fills a chunk, the chunk to compress (with [`frame`]) and give to
    /// [`Writer::push_frame`].
    pub fn add(&mut self, key: [u8; 32], value: &[u8]) -> (bool, Option<Vec<u8>>) {
        if !self.keys.insert(key) {
            return (false, None);
        }
        self.chunk.extend_from_slice(&key);
        self.chunk
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.chunk.extend_from_slice(value);
        let full =
            (self.chunk.len() >= zstd_frames::FRAME_BYTES).then(|| std::mem::take(&mut self.chunk));
        (true, full)
    }

    /// Whether the pack holds `key`.
    pub fn contains(&self, key: &[u8; 32]) -> bool {
        self.keys.contains(key)
    }

    /// How many values the pack holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// A frame of records made from a chunk [`Writer::add`] handed back; a failed one spoils
    /// the pack (it would lack values it says it has).
    pub fn push_frame(&mut self, frame: io::Result<Vec<u8>>) {
        let written = frame.and_then(|frame| self.out.write_all(&frame));
        if written.is_err() {
            self.failed = true;
        }
    }

    /// Where the whole pack went; an error if a frame could not be made or written.
    pub fn finish(mut self) -> io::Result<W> {
        if !self.chunk.is_empty() {
            let last = frame(&self.chunk);
            self.push_frame(last);
        }
        if self.failed {
            return Err(io::Error::other(
                "a frame of the pack could not be made or written",
            ));
        }
        Ok(self.out)
    }
}

/// `chunk` compressed as one frame that declares its size, on the calling thread (a
/// compiling thread: the others are busy compiling).
pub fn frame(chunk: &[u8]) -> io::Result<Vec<u8>> {
    zstd_frames::frame(chunk)
}

/// A pack read back: its bytes expanded once, and where each value is in them.
#[derive(Debug, Default)]
pub struct Records {
    bytes: Vec<u8>,
    index: HashMap<[u8; 32], Range<usize>>,
}

impl Records {
    /// The pack `stored` of `magic`; `None` for anything malformed or of another magic.
    pub fn read(magic: &[u8; 8], stored: &[u8]) -> Option<Records> {
        Records::parse(magic, zstd_frames::expand(stored).ok()?)
    }

    /// The pack of `magic` whose frames `bytes` expanded to; `None` for anything malformed
    /// or of another magic.
    pub fn parse(magic: &[u8; 8], bytes: Vec<u8>) -> Option<Records> {
        if !bytes.starts_with(magic) {
            return None;
        }
        let mut index = HashMap::new();
        let mut at = magic.len();
        while at < bytes.len() {
            let key: [u8; 32] = bytes.get(at..at + 32)?.try_into().ok()?;
            let len = bytes.get(at + 32..at + 36)?;
            let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
            let start = at + 36;
            let end = start.checked_add(len).filter(|&e| e <= bytes.len())?;
            index.insert(key, start..end);
            at = end;
        }
        Some(Records { bytes, index })
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8; 32]) -> Option<&[u8]> {
        self.index.get(key).map(|r| &self.bytes[r.clone()])
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every value, in no order.
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        self.index.values().map(|r| &self.bytes[r.clone()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(values: &[([u8; 32], Vec<u8>)]) -> Vec<u8> {
        let mut w = Writer::new(b"testpak3", Vec::new());
        for (key, value) in values {
            let (_, full) = w.add(*key, value);
            if let Some(chunk) = full {
                w.push_frame(frame(&chunk));
            }
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trip_across_frames_and_rejects() {
        // Values of 100 KB: a frame every ten or so.
        let values: Vec<([u8; 32], Vec<u8>)> = (0..40u8)
            .map(|i| ([i; 32], (0..100_000).map(|j| (j as u8) ^ i).collect()))
            .collect();
        let stored = written(&values);
        let records = Records::read(b"testpak3", &stored).unwrap();
        assert_eq!(records.len(), 40);
        for (key, value) in &values {
            assert_eq!(records.get(key), Some(&value[..]));
        }
        assert!(Records::read(b"otherpk3", &stored).is_none());
        assert!(Records::read(b"testpak3", &stored[..stored.len() - 1]).is_none());
        assert!(Records::read(b"testpak3", b"not zstd").is_none());
        // A record cut short inside a frame.
        let mut plain = zstd_frames::expand(&stored).unwrap();
        plain.truncate(plain.len() - 5);
        let cut = zstd_frames::compress(&plain).unwrap();
        assert!(Records::read(b"testpak3", &cut).is_none());
        // Empty, and a key added twice is kept once.
        let empty = Records::read(b"testpak3", &written(&[])).unwrap();
        assert!(empty.is_empty());
        let mut w = Writer::new(b"testpak3", Vec::new());
        assert!(w.add([1; 32], b"a").0);
        assert!(!w.add([1; 32], b"b").0);
        assert!(w.contains(&[1; 32]) && w.len() == 1);
        let once = Records::read(b"testpak3", &w.finish().unwrap()).unwrap();
        assert_eq!(once.get(&[1; 32]), Some(&b"a"[..]));
    }

    #[test]
    fn frames_in_any_order_after_the_magic_read_the_same() {
        let mut w = Writer::new(b"testpak3", Vec::new());
        let mut chunks = Vec::new();
        for i in 0..30u8 {
            if let (_, Some(chunk)) = w.add([i; 32], &vec![i; 200_000]) {
                chunks.push(chunk);
            }
        }
        assert!(chunks.len() >= 3);
        // Compressed by several threads, the frames land in another order.
        for chunk in chunks.iter().rev() {
            w.push_frame(frame(chunk));
        }
        let records = Records::read(b"testpak3", &w.finish().unwrap()).unwrap();
        assert_eq!(records.len(), 30);
        assert_eq!(records.get(&[7; 32]), Some(&vec![7; 200_000][..]));
    }
}
