//! `poll_oneoff` for a threaded program, whose threads share one WASI context (see
//! [`super::shared`]): a sleep, and a wait for input on stdin, do not hold the context
//! while they wait.
//!
//! A sleep is what wasmtime-wasi answers with a plain sleep of the calling thread: one
//! subscription, to a clock, with a relative timeout (what wasi-libc's `nanosleep`,
//! `usleep` and `sleep` make). It is answered here the same way, without the context:
//! the thread sleeps, then the one clock event is written.
//!
//! A wait for stdin is a poll of reads of descriptor 0 alone, with at most one relative
//! clock (what `poll` and `select` on stdin make, with or without a timeout), while
//! descriptor 0 is the process's stdin (see [`super::stdio`]). The thread waits here,
//! without the context, until stdin holds data or the timeout passes: then the clock's
//! event is written, as wasmtime-wasi would; on data, the poll is wasmtime-wasi's own and
//! finds stdin ready at once. Every other poll (an absolute deadline, another descriptor) is
//! wasmtime-wasi's own, made with the context held.

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
/// The union's tag of a wait for a descriptor to be readable; its `fd` at 16.
const TAG_FD_READ: u8 = 1;
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
        let answerable = fits(events, EVENT) && fits(nevents, 4);
        if let Some((userdata, timeout)) = lone_relative_clock(cells, subs, count) {
            if answerable {
                std::thread::sleep(Duration::from_nanos(timeout));
                return Ok(clock_heard(cells, userdata, events, nevents));
            }
        } else if answerable && caller.data_mut().wasi().is_process_stdio(0) {
            if let Some(clock) = stdin_wait(cells, subs, count) {
                let timeout = clock.map(|(_, ns)| Duration::from_nanos(ns));
                let ready = super::stdin::wait_for_stdin_within(timeout);
                if let (false, Some((userdata, _))) = (ready, clock) {
                    return Ok(clock_heard(cells, userdata, events, nevents));
                }
            }
        }
    }
    super::real::call(&mut caller, |ctx, memory| {
        use wasmtime_wasi::p1::wasi_snapshot_preview1::poll_oneoff;
        wasmtime_wasi::runtime::in_tokio(poll_oneoff(ctx, memory, subs, events, count, nevents))
    })
}

/// Writes the one event of a clock subscription (`userdata`) that timed out at `events`,
/// and 1 at `nevents` (both checked to fit): the poll's errno, success.
fn clock_heard(cells: &[UnsafeCell<u8>], userdata: u64, events: i32, nevents: i32) -> i32 {
    let mut event = [0u8; EVENT];
    event[..8].copy_from_slice(&userdata.to_le_bytes());
    event[16..24].copy_from_slice(&1u64.to_le_bytes());
    let written = write(cells, events as u32 as usize, &event)
        .and_then(|()| write(cells, nevents as u32 as usize, &1u32.to_le_bytes()));
    debug_assert!(written.is_some(), "checked to fit");
    0
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

/// A wait for stdin: `Some` when the `count` subscriptions are reads of descriptor 0 (at
/// least one) and at most one relative clock, with the clock's userdata and timeout in
/// nanoseconds if there is one.
#[allow(clippy::option_option)]
fn stdin_wait(cells: &[UnsafeCell<u8>], subs: i32, count: i32) -> Option<Option<(u64, u64)>> {
    let mut clock = None;
    let mut reads = 0;
    for k in 0..usize::try_from(count).ok()? {
        let mut sub = [0u8; SUBSCRIPTION];
        read(
            cells,
            (subs as u32 as usize).checked_add(k * SUBSCRIPTION)?,
            &mut sub,
        )?;
        let word = |at: usize| u64::from_le_bytes(sub[at..at + 8].try_into().expect("8 bytes"));
        match sub[8] {
            TAG_CLOCK if clock.is_none() => {
                let flags = u16::from_le_bytes([sub[40], sub[41]]);
                if flags & ABSTIME != 0 {
                    return None;
                }
                clock = Some((word(0), word(24)));
            }
            TAG_FD_READ if u32::from_le_bytes(sub[16..20].try_into().expect("4 bytes")) == 0 => {
                reads += 1
            }
            _ => return None,
        }
    }
    (reads > 0).then_some(clock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::wasi::memory::cells;

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

    #[test]
    fn only_reads_of_stdin_and_one_relative_clock_wait_for_stdin() {
        let mut memory = vec![0u8; 512];
        let mut read0 = subscription(TAG_FD_READ, 0, 0);
        read0[16..20].copy_from_slice(&0u32.to_le_bytes());
        memory[0..48].copy_from_slice(&read0);
        memory[48..96].copy_from_slice(&subscription(TAG_CLOCK, 9_000, 0));
        assert_eq!(stdin_wait(cells(&mut memory), 0, 2), Some(Some((7, 9_000))));
        assert_eq!(stdin_wait(cells(&mut memory), 0, 1), Some(None));
        // A clock alone is a sleep, not a wait for stdin.
        assert_eq!(stdin_wait(cells(&mut memory), 48, 1), None);
        // Another descriptor, or an absolute deadline: wasmtime-wasi's own.
        memory[16..20].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(stdin_wait(cells(&mut memory), 0, 2), None);
        memory[16..20].copy_from_slice(&0u32.to_le_bytes());
        memory[48..96].copy_from_slice(&subscription(TAG_CLOCK, 9_000, ABSTIME));
        assert_eq!(stdin_wait(cells(&mut memory), 0, 2), None);
        // Past the end: not read.
        assert_eq!(stdin_wait(cells(&mut memory), 480, 1), None);
    }
}
