//! `poll_oneoff` for a threaded program, whose threads share one WASI context (see
//! [`super::shared`]): a sleep does not hold the context while it sleeps.
//!
//! A sleep is what wasmtime-wasi answers with a plain sleep of the calling thread: one
//! subscription, to a clock, with a relative timeout (what wasi-libc's `nanosleep`,
//! `usleep` and `sleep` make). It is answered here the same way, without the context:
//! the thread sleeps, then the one clock event is written. Every other poll (several
//! subscriptions, an absolute deadline, a descriptor's readiness) is wasmtime-wasi's own,
//! made with the context held.

use std::cell::UnsafeCell;
use std::time::Duration;

use wasmtime::{Caller, Extern, Linker};

use super::memory::{read, write};
use super::real::MODULE;
use super::HoldsWasi;

/// `subscription`: 48 bytes; its `userdata` at 0, the union's tag at 8 (0: a clock) and
/// the clock's `timeout` at 24 and `flags` at 40 (bit 0: an absolute deadline).
const SUBSCRIPTION: usize = 48;
const TAG_CLOCK: u8 = 0;
const ABSTIME: u16 = 1;
/// `event`: 32 bytes; `userdata` at 0, `error` at 8, `type` at 10 (0: a clock), and
/// `fd_readwrite`'s `nbytes` at 16 and `flags` at 24.
const EVENT: usize = 32;

/// Replaces the linker's `poll_oneoff` (the linker of a threaded program's stores, WASI
/// already in it).
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    super::real::replace(linker, |linker| {
        linker.func_wrap(MODULE, "poll_oneoff", poll_oneoff::<T>)?;
        Ok(())
    })
}

fn poll_oneoff<T: HoldsWasi>(
    mut caller: Caller<'_, T>,
    subs: i32,
    events: i32,
    count: i32,
    nevents: i32,
) -> wasmtime::Result<i32> {
    let memory = caller.get_export("memory");
    if let Some(Extern::SharedMemory(memory)) = &memory {
        let cells = memory.data();
        let fits = |at: i32, len: usize| (at as u32 as usize).saturating_add(len) <= cells.len();
        // Out of bounds, wasmtime-wasi's own says which error (and sleeps only then).
        let sleep = lone_relative_clock(cells, subs, count)
            .filter(|_| fits(events, EVENT) && fits(nevents, 4));
        if let Some((userdata, timeout)) = sleep {
            std::thread::sleep(Duration::from_nanos(timeout));
            let mut event = [0u8; EVENT];
            event[..8].copy_from_slice(&userdata.to_le_bytes());
            event[16..24].copy_from_slice(&1u64.to_le_bytes());
            let written = write(cells, events as u32 as usize, &event)
                .and_then(|()| write(cells, nevents as u32 as usize, &1u32.to_le_bytes()));
            debug_assert!(written.is_some(), "checked to fit");
            return Ok(0);
        }
    }
    super::real::call(&mut caller, |ctx, memory| {
        use wasmtime_wasi::p1::wasi_snapshot_preview1::poll_oneoff;
        wasmtime_wasi::runtime::in_tokio(poll_oneoff(ctx, memory, subs, events, count, nevents))
    })
}

/// The subscription's userdata and relative timeout in nanoseconds, when `count` is one
/// and it is a relative clock.
fn lone_relative_clock(cells: &[UnsafeCell<u8>], subs: i32, count: i32) -> Option<(u64, u64)> {
    if count != 1 {
        return None;
    }
    let mut sub = [0u8; SUBSCRIPTION];
    read(cells, subs as u32 as usize, &mut sub)?;
    let flags = u16::from_le_bytes([sub[40], sub[41]]);
    if sub[8] != TAG_CLOCK || flags & ABSTIME != 0 {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(sub[at..at + 8].try_into().expect("8 bytes"));
    Some((word(0), word(24)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(bytes: &mut [u8]) -> &[UnsafeCell<u8>] {
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8`.
        unsafe { &*(std::ptr::from_mut(bytes) as *const [UnsafeCell<u8>]) }
    }

    fn subscription(tag: u8, timeout: u64, flags: u16) -> [u8; SUBSCRIPTION] {
        let mut sub = [0u8; SUBSCRIPTION];
        sub[..8].copy_from_slice(&7u64.to_le_bytes());
        sub[8] = tag;
        sub[24..32].copy_from_slice(&timeout.to_le_bytes());
        sub[40..42].copy_from_slice(&flags.to_le_bytes());
        sub
    }

    #[test]
    fn only_a_lone_relative_clock_is_a_sleep() {
        let mut memory = vec![0u8; 256];
        memory[64..112].copy_from_slice(&subscription(TAG_CLOCK, 5_000, 0));
        assert_eq!(
            lone_relative_clock(cells(&mut memory), 64, 1),
            Some((7, 5_000))
        );
        assert_eq!(lone_relative_clock(cells(&mut memory), 64, 2), None);
        memory[64..112].copy_from_slice(&subscription(TAG_CLOCK, 5_000, ABSTIME));
        assert_eq!(lone_relative_clock(cells(&mut memory), 64, 1), None);
        memory[64..112].copy_from_slice(&subscription(1, 5_000, 0));
        assert_eq!(lone_relative_clock(cells(&mut memory), 64, 1), None);
        // Past the end: not read.
        assert_eq!(lone_relative_clock(cells(&mut memory), 240, 1), None);
        assert_eq!(write(cells(&mut memory), 250, &[0; 8]), None);
        assert_eq!(write(cells(&mut memory), 248, &[9; 8]), Some(()));
        assert_eq!(memory[255], 9);
    }
}
