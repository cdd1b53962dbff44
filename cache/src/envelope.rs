//! The envelope every stored value travels in: a header, the value's digest, the value.
//!
//! ```text
//! "WPC" version(1) kind(1) | blake3(kind, key, value) (32) | value
//! ```
//!
//! The digest covers the key and the kind too, so a value copied under another key or into
//! another keyspace fails the check just like a damaged one. Bookkeeping records (usage,
//! counters) use the same envelope with tags of their own.

const MAGIC: &[u8; 3] = b"WPC";
const VERSION: u8 = 1;
/// Bytes before the value.
pub(crate) const HEADER: usize = MAGIC.len() + 2 + 32;

fn digest(kind: u8, key: &[u8], value: &[u8]) -> [u8; 32] {
    let mut h = Digester::new(kind, key);
    h.update(value);
    h.digest()
}

/// The envelope of a value given in parts: [`Digester::header`] is [`header`] of their
/// concatenation.
#[derive(Debug)]
pub(crate) struct Digester {
    kind: u8,
    hasher: blake3::Hasher,
}

impl Digester {
    pub(crate) fn new(kind: u8, key: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"wprof-cache value v1\0");
        hasher.update(&[kind]);
        hasher.update(key);
        Digester { kind, hasher }
    }

    pub(crate) fn update(&mut self, part: &[u8]) {
        self.hasher.update(part);
    }

    fn digest(&self) -> [u8; 32] {
        *self.hasher.finalize().as_bytes()
    }

    pub(crate) fn header(&self) -> [u8; HEADER] {
        header_of(self.kind, &self.digest())
    }
}

/// Wraps `value` for storage under `key`.
pub(crate) fn seal(kind: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + value.len());
    out.extend_from_slice(&header(kind, key, value));
    out.extend_from_slice(value);
    out
}

/// What [`seal`] puts before `value`: written followed by the value itself, a large value
/// is stored without a sealed copy of it in memory.
pub(crate) fn header(kind: u8, key: &[u8], value: &[u8]) -> [u8; HEADER] {
    header_of(kind, &digest(kind, key, value))
}

fn header_of(kind: u8, digest: &[u8; 32]) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    out[..3].copy_from_slice(MAGIC);
    out[3] = VERSION;
    out[4] = kind;
    out[5..].copy_from_slice(digest);
    out
}

/// The value inside `raw` if the envelope is intact and belongs to `key`, else `None`.
pub(crate) fn open<'a>(kind: u8, key: &[u8], raw: &'a [u8]) -> Option<&'a [u8]> {
    if raw.len() < HEADER || &raw[..3] != MAGIC || raw[3] != VERSION || raw[4] != kind {
        return None;
    }
    let (stored, value) = raw[5..].split_at(32);
    (stored == digest(kind, key, value)).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_under_their_key_and_kind() {
        let raw = seal(1, b"key", b"value");
        assert_eq!(open(1, b"key", &raw), Some(&b"value"[..]));
        assert_eq!(open(2, b"key", &raw), None);
        assert_eq!(open(1, b"other", &raw), None);
        assert_eq!(open(1, b"key", &raw[..HEADER - 1]), None);
    }
}
