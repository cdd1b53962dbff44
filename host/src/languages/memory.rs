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
