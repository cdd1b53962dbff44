//! The host's reads and writes of a threaded program's shared memory, which its other
//! threads may be writing at the same moment: byte by byte with atomic (relaxed) accesses,
//! as the program's own racy loads and stores would be, never plain ones, which would race
//! with the writers.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};

/// Copies the memory's bytes at `at` into `out`; `None` out of bounds.
pub(crate) fn read(cells: &[UnsafeCell<u8>], at: usize, out: &mut [u8]) -> Option<()> {
    let range = cells.get(at..at.checked_add(out.len())?)?;
    for (byte, cell) in out.iter_mut().zip(range) {
        // SAFETY: in bounds of the memory, which lives as long as `cells`; every access of
        // another thread to it is the engine's (atomic or racy wasm loads and stores),
        // never a Rust reference.
        *byte = unsafe { AtomicU8::from_ptr(cell.get()) }.load(Ordering::Relaxed);
    }
    Some(())
}

/// Writes `bytes` at `at` in the memory; `None` out of bounds (nothing written).
pub(crate) fn write(cells: &[UnsafeCell<u8>], at: usize, bytes: &[u8]) -> Option<()> {
    let range = cells.get(at..at.checked_add(bytes.len())?)?;
    for (cell, &byte) in range.iter().zip(bytes) {
        // SAFETY: as in `read`.
        unsafe { AtomicU8::from_ptr(cell.get()) }.store(byte, Ordering::Relaxed);
    }
    Some(())
}

/// `bytes` as a shared memory's cells (for tests of the host's accesses).
#[cfg(test)]
pub(crate) fn cells(bytes: &mut [u8]) -> &[UnsafeCell<u8>] {
    // SAFETY: `UnsafeCell<u8>` has the layout of `u8`, and the borrow is exclusive.
    unsafe { &*(std::ptr::from_mut(bytes) as *const [UnsafeCell<u8>]) }
}
