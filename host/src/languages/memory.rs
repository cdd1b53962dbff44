//! Reads of a program's linear memory by a frame reader: every read is checked against the
//! memory's bounds and fails (`None`) outside them, so that a pointer the program is
//! rewriting at that instant gives no trap, only a walk that ends.

/// Linear memory as a frame reader sees it.
pub trait Memory {
    /// Copies the bytes at `at` into `out`; `None` out of bounds.
    fn read(&self, at: u32, out: &mut [u8]) -> Option<()>;

    fn u8(&self, at: u32) -> Option<u8> {
        let mut b = [0; 1];
        self.read(at, &mut b)?;
        Some(b[0])
    }

    fn u16(&self, at: u32) -> Option<u16> {
        let mut b = [0; 2];
        self.read(at, &mut b)?;
        Some(u16::from_le_bytes(b))
    }

    fn u32(&self, at: u32) -> Option<u32> {
        let mut b = [0; 4];
        self.read(at, &mut b)?;
        Some(u32::from_le_bytes(b))
    }

    fn i32(&self, at: u32) -> Option<i32> {
        self.u32(at).map(|v| v as i32)
    }
}

impl Memory for [u8] {
    fn read(&self, at: u32, out: &mut [u8]) -> Option<()> {
        let at = at as usize;
        out.copy_from_slice(self.get(at..at.checked_add(out.len())?)?);
        Some(())
    }
}

/// Where a data segment initialises the first memory, and with what: `None` for a passive
/// segment, another memory's, or one placed by anything but a constant.
pub fn active_segment<'a>(data: &wasmparser::Data<'a>) -> Option<(u32, &'a [u8])> {
    let wasmparser::DataKind::Active {
        memory_index: 0,
        offset_expr,
    } = &data.kind
    else {
        return None;
    };
    match offset_expr.get_operators_reader().read() {
        Ok(wasmparser::Operator::I32Const { value }) => Some((value as u32, data.data)),
        _ => None,
    }
}

/// Linear memory as a module's data segments initialise it, before it runs: the active
/// segments of its first memory at their constant addresses, zeros between them (the
/// linker and `wasm-opt` leave runs of zeros out of the segments).
#[derive(Debug, Default)]
pub struct InitialMemory<'a> {
    /// `(address, bytes)`, by address.
    segments: Vec<(u32, &'a [u8])>,
}

impl<'a> InitialMemory<'a> {
    /// The initial memory of the module `bytes` (empty if it has no data it can read).
    pub fn of(bytes: &'a [u8]) -> Self {
        let mut segments = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let Ok(payload) = payload else { break };
            let wasmparser::Payload::DataSection(reader) = payload else {
                continue;
            };
            segments.extend(
                reader
                    .into_iter()
                    .flatten()
                    .filter_map(|d| active_segment(&d)),
            );
        }
        segments.sort_by_key(|(address, _)| *address);
        InitialMemory { segments }
    }

    /// The segments, `(address, bytes)`, by address.
    pub fn segments(&self) -> &[(u32, &'a [u8])] {
        &self.segments
    }

    /// The address of the first occurrence of `needle` inside one segment.
    pub fn find(&self, needle: &[u8]) -> Option<u32> {
        self.segments.iter().find_map(|(address, data)| {
            let at = data.windows(needle.len()).position(|w| w == needle)?;
            address.checked_add(u32::try_from(at).ok()?)
        })
    }
}

impl Memory for InitialMemory<'_> {
    fn read(&self, at: u32, out: &mut [u8]) -> Option<()> {
        let start = u64::from(at);
        let end = start + out.len() as u64;
        if end > 1 << 32 {
            return None;
        }
        out.fill(0);
        // The segments that may overlap (they do not overlap each other): those ending
        // after `start` and starting before `end`.
        let first = self
            .segments
            .partition_point(|(address, data)| u64::from(*address) + data.len() as u64 <= start);
        let last = self
            .segments
            .partition_point(|(address, _)| u64::from(*address) < end);
        for (address, data) in self.segments.get(first..last).unwrap_or_default() {
            let (from, to) = (u64::from(*address), u64::from(*address) + data.len() as u64);
            let (lo, hi) = (from.max(start), to.min(end));
            if lo < hi {
                out[(lo - start) as usize..(hi - start) as usize]
                    .copy_from_slice(&data[(lo - from) as usize..(hi - from) as usize]);
            }
        }
        Some(())
    }
}
