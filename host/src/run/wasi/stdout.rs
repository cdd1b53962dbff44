//! `fd_write` to stdout and stderr for a threaded program, whose threads share one WASI
//! context (see [`super::shared`]): a thread whose write waits for a slow reader (a pipe
//! left full) does not hold the context while it waits, so the program's other threads
//! go on calling WASI, as under wasi-threads' own implementation.
//!
//! While descriptor 1 or 2 is the process's stdout or stderr (see [`super::stdio`]), the
//! write is made here, without the context, exactly as wasmtime-wasi makes it: only the
//! first non-empty buffer of the iovecs is written, in pieces of 4 KiB, each written whole
//! through Rust's `std::io::stdout()` (or `stderr()`) and flushed; the same allowance of
//! bytes a call may copy applies. Anything else (the iovecs or the result out of bounds, an
//! allowance exceeded, an unshared memory) is left to wasmtime-wasi's own, with the context
//! held, which then answers as it always does.

use std::cell::UnsafeCell;
use std::io::Write;

use wasmtime::{AsContextMut, Caller, Extern, Linker};

use super::memory::{read, write};
use super::real::MODULE;
use super::HoldsWasi;

/// `ciovec`: 8 bytes, the buffer's address at 0 and its length at 4.
const CIOVEC: usize = 8;
/// The size of the pieces wasmtime-wasi writes a buffer to stdio in.
const PIECE: usize = 4096;

/// Replaces the linker's `fd_write` (the linker of a threaded program's stores, WASI
/// already in it).
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    super::real::replace(linker, |linker| {
        linker.func_wrap(MODULE, "fd_write", fd_write::<T>)?;
        Ok(())
    })
}

fn fd_write<T: HoldsWasi>(
    mut caller: Caller<'_, T>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nwritten: i32,
) -> wasmtime::Result<i32> {
    if (fd == 1 || fd == 2) && caller.data_mut().wasi().is_process_stdio(fd) {
        let allowance = caller.as_context_mut().hostcall_fuel();
        if let Some(Extern::SharedMemory(memory)) = caller.get_export("memory") {
            let cells = memory.data();
            let result_fits = (nwritten as u32 as usize)
                .checked_add(4)
                .is_some_and(|end| end <= cells.len());
            if let (true, Some(bytes)) = (
                result_fits,
                first_non_empty(cells, iovs, iovs_len, allowance),
            ) {
                let errno = write_out(fd, &bytes);
                if errno == 0 {
                    let len = u32::try_from(bytes.len()).expect("a buffer of a 32-bit memory");
                    let written = write(cells, nwritten as u32 as usize, &len.to_le_bytes());
                    debug_assert!(written.is_some(), "checked to fit");
                }
                return Ok(errno);
            }
        }
    }
    super::real::call(&mut caller, |ctx, memory| {
        use wasmtime_wasi::p1::wasi_snapshot_preview1::fd_write;
        wasmtime_wasi::runtime::in_tokio(fd_write(ctx, memory, fd, iovs, iovs_len, nwritten))
    })
}

/// A copy of the first non-empty buffer of the `count` iovecs at `iovs` (empty if all
/// are), when the iovecs and that buffer are in bounds and their bytes within `allowance`
/// (as wasmtime-wasi counts them: the iovecs, then the buffer); `None` otherwise.
fn first_non_empty(
    cells: &[UnsafeCell<u8>],
    iovs: i32,
    count: i32,
    allowance: usize,
) -> Option<Vec<u8>> {
    let count = count as u32 as usize;
    let left = allowance.checked_sub(count.checked_mul(CIOVEC)?)?;
    for k in 0..count {
        let mut iov = [0u8; CIOVEC];
        read(
            cells,
            (iovs as u32 as usize).checked_add(k * CIOVEC)?,
            &mut iov,
        )?;
        let at = u32::from_le_bytes(iov[..4].try_into().expect("4 bytes")) as usize;
        let len = u32::from_le_bytes(iov[4..].try_into().expect("4 bytes")) as usize;
        if len == 0 {
            continue;
        }
        if len > left {
            return None;
        }
        let mut bytes = vec![0; len];
        read(cells, at, &mut bytes)?;
        return Some(bytes);
    }
    Some(Vec::new())
}

/// Writes `bytes` to this process's stdout (`fd` 1) or stderr (2) as wasmtime-wasi does:
/// the errno of the write, WASI's numbering, 0 for success.
fn write_out(fd: i32, bytes: &[u8]) -> i32 {
    let mut out: Box<dyn Write> = match fd {
        1 => Box::new(std::io::stdout()),
        _ => Box::new(std::io::stderr()),
    };
    for piece in bytes.chunks(PIECE) {
        if let Err(e) = out.write_all(piece).and_then(|()| out.flush()) {
            return errno_of(&e);
        }
    }
    0
}

/// WASI's errno for a failed write to stdio, as wasmtime-wasi tells it: a closed pipe is
/// an I/O error, as is any error it has no errno of its own for.
fn errno_of(e: &std::io::Error) -> i32 {
    const ACCES: i32 = 2;
    const BADF: i32 = 8;
    const FBIG: i32 = 22;
    const INTR: i32 = 27;
    const INVAL: i32 = 28;
    const IO: i32 = 29;
    const NOMEM: i32 = 48;
    const NOSPC: i32 = 51;
    const PERM: i32 = 63;
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return IO;
    }
    match e.raw_os_error() {
        Some(libc::EACCES) => ACCES,
        Some(libc::EBADF) => BADF,
        Some(libc::EFBIG) => FBIG,
        Some(libc::EINTR) => INTR,
        Some(libc::EINVAL) => INVAL,
        Some(libc::ENOMEM) => NOMEM,
        Some(libc::ENOSPC) => NOSPC,
        Some(libc::EPERM) => PERM,
        _ if e.kind() == std::io::ErrorKind::PermissionDenied => PERM,
        _ if e.kind() == std::io::ErrorKind::InvalidInput => INVAL,
        _ => IO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::wasi::memory::cells;

    fn iovec(memory: &mut [u8], at: usize, buf: u32, len: u32) {
        memory[at..at + 4].copy_from_slice(&buf.to_le_bytes());
        memory[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
    }

    #[test]
    fn the_first_non_empty_buffer_is_written_within_bounds_and_allowance() {
        let mut memory = vec![0u8; 256];
        memory[100..105].copy_from_slice(b"hello");
        iovec(&mut memory, 0, 200, 0);
        iovec(&mut memory, 8, 100, 5);
        iovec(&mut memory, 16, 110, 3);
        let m = cells(&mut memory);
        assert_eq!(first_non_empty(m, 0, 3, 1 << 20), Some(b"hello".to_vec()));
        // All empty: nothing to write, successfully.
        assert_eq!(first_non_empty(m, 0, 1, 1 << 20), Some(Vec::new()));
        assert_eq!(first_non_empty(m, 0, 0, 1 << 20), Some(Vec::new()));
        // The iovecs (24 bytes) then the buffer (5) count against the allowance.
        assert_eq!(first_non_empty(m, 0, 3, 29), Some(b"hello".to_vec()));
        assert_eq!(first_non_empty(m, 0, 3, 28), None);
        assert_eq!(first_non_empty(m, 0, 3, 23), None);
        // Out of bounds, the iovecs or the buffer: left to wasmtime-wasi.
        assert_eq!(first_non_empty(m, 252, 1, 1 << 20), None);
        assert_eq!(first_non_empty(m, -8, 1, 1 << 20), None);
        iovec(&mut memory, 8, 254, 5);
        assert_eq!(first_non_empty(cells(&mut memory), 0, 3, 1 << 20), None);
    }

    #[test]
    fn a_failed_write_has_wasmtime_wasis_errno() {
        use std::io::{Error, ErrorKind};
        assert_eq!(errno_of(&Error::from_raw_os_error(libc::EPIPE)), 29);
        assert_eq!(errno_of(&Error::from(ErrorKind::BrokenPipe)), 29);
        assert_eq!(errno_of(&Error::from_raw_os_error(libc::ENOSPC)), 51);
        assert_eq!(errno_of(&Error::from_raw_os_error(libc::EBADF)), 8);
        assert_eq!(errno_of(&Error::from_raw_os_error(libc::EAGAIN)), 29);
        assert_eq!(errno_of(&Error::from(ErrorKind::Other)), 29);
    }
}
