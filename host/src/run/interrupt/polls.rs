//! Ticks without interrupts: the program polls for them (`wprof run --polls`).
//!
//! On a virtual machine an interrupt can cost the interrupted thread tens of microseconds
//! (see `docs/measurements.md`, "What a tick costs"). A polling counted module (see
//! [`wprof_agent::entry_counts::polls`]) reads a cell of its own at each function's entry
//! and before each way out of it; the sampler thread, on another core, sets the cell
//! whenever a tick comes due on the session's schedule ([`Target::nap_polling`]), and the
//! poll that finds it set calls [`at_entry`] or [`inside`], which clear it and take the
//! tick on the program's thread as the signal handler would: the same record, schedule,
//! clocks and frame-pointer walk, from the host function's own frame. The walk's first
//! address says where the tick was taken ([`AT_ENTRY_PC`], [`INSIDE_PC`]), so that the
//! reader charges it to the right function (see [`crate::run::stacks::found`]).
//!
//! A WASI call is polled around by the host's wrapper ([`before_import`],
//! [`after_import`]): a tick due while the program waited in it is taken as it returns,
//! and charged to the import, as a timer's tick taken there would be.
//!
//! The cell lies in the thread's instance's memory, which goes before the session does: it
//! is published once the instance's poll table holds the host functions ([`publish`]) and
//! taken back before the instance goes ([`withdraw`]), which waits for a sampler writing
//! it at that moment.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use super::frames::Registers;
use super::records::Record;
use super::{Target, MINE};

/// The first address of a tick taken at a function's entry poll: not code (the reader
/// charges it to the caller, whose code ran up to the call).
pub const AT_ENTRY_PC: usize = 1;

/// The first address of a tick taken at any other poll of a function: not code (the reader
/// charges it to the function, with no line).
pub const INSIDE_PC: usize = 2;

/// The record of this thread's polling session, if there is one.
fn polling_record() -> Option<&'static Record> {
    let record = MINE.get();
    // SAFETY: records are never freed.
    let record: &'static Record = unsafe { record.as_ref()? };
    record.polled.load(Ordering::Relaxed).then_some(record)
}

/// Makes `cell` the cell the sampler sets for the polling session of this thread, if there
/// is one; whether there is. The caller has made every poll of the module able to call
/// [`at_entry`] and [`inside`].
///
/// # Safety
///
/// `cell` must stay valid for 4-byte atomic stores until [`withdraw`] on this thread.
pub unsafe fn publish(cell: *mut u32) -> bool {
    let Some(record) = polling_record() else {
        return false;
    };
    record.poll_cell.store(cell, Ordering::SeqCst);
    true
}

/// Takes back the cell [`publish`] gave: once this returns, nothing writes it.
pub fn withdraw() {
    if let Some(record) = polling_record() {
        record
            .poll_cell
            .store(std::ptr::null_mut(), Ordering::SeqCst);
        // A sampler that found the cell holds a lease while it writes (see
        // `Target::nap_polling`).
        while record.leases.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// Called by a function's entry poll that found the cell set: the tick, charged to the
/// caller.
pub fn at_entry() {
    take(AT_ENTRY_PC);
}

/// Called by any other poll that found the cell set: the tick, charged to the function.
pub fn inside() {
    take(INSIDE_PC);
}

/// Before the host runs a WASI function: a tick due since the caller's last poll is the
/// caller's.
pub fn before_import() {
    take(INSIDE_PC);
}

/// After the host ran a WASI function: a tick due meanwhile is the import's (the walk
/// finds the direct call of it, from a host address).
pub fn after_import() {
    take(after_import as fn() as usize);
}

/// Takes a tick on this thread if its session polls and the cell is set, with `pc` as the
/// walk's first address.
#[inline(never)]
fn take(pc: usize) {
    let Some(record) = polling_record() else {
        return;
    };
    let cell = record.poll_cell.load(Ordering::Relaxed);
    if cell.is_null() {
        return;
    }
    // SAFETY: published by this thread, valid until it withdraws it.
    let cell = unsafe { AtomicU32::from_ptr(cell) };
    if cell.swap(0, Ordering::Acquire) == 0 {
        return;
    }
    let (fp, sp) = frame_and_stack_pointers();
    super::handler::tick(
        record,
        Registers { pc, fp, sp },
        super::frames::monotonic_ns(),
    );
}

/// The caller's frame pointer and stack pointer registers (0 where not known): the walk
/// starts at this function's frame, whose chain leads through the host's frames (built
/// with frame pointers) into the module's.
#[inline(always)]
fn frame_and_stack_pointers() -> (usize, usize) {
    let (fp, sp): (usize, usize);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads two registers.
    unsafe {
        std::arch::asm!("mov {}, rbp", "mov {}, rsp", out(reg) fp, out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads two registers.
    unsafe {
        std::arch::asm!("mov {}, x29", "mov {}, sp", out(reg) fp, out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        (fp, sp) = (0, 0);
    }
    (fp, sp)
}

/// Makes this thread's sleeps end when asked, not up to 50 µs later (Linux's default timer
/// slack), once: a polling sampler's sleeps are its ticks' schedule.
fn precise_sleeps() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !DONE.replace(true) {
        #[cfg(target_os = "linux")]
        // SAFETY: sets the calling thread's timer slack, in nanoseconds.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
        }
    }
}

impl Target {
    /// Whether the session's ticks come from polls.
    pub fn polls(&self) -> bool {
        self.record.polled.load(Ordering::Relaxed)
    }

    /// Waits `nap` (less if `stop` is set and this thread unparked), setting the polling
    /// session's cell whenever its next tick is due. The sampler keeps the schedule the
    /// handler keeps for a timer (see [`super::handler`]): each tick is due a drawn time
    /// after the one before was due, and a tick the program has not taken yet when the
    /// next comes due (a long loop, a WASI call) stands for the later one. So it wakes
    /// once a period, on its own core.
    pub fn nap_polling(&self, nap: Duration, stop: &AtomicBool) {
        precise_sleeps();
        let until = super::frames::monotonic_ns().saturating_add(nap.as_nanos() as u64);
        loop {
            let now = super::frames::monotonic_ns();
            if now >= until || stop.load(Ordering::Acquire) {
                return;
            }
            let wake = match self.record.lease(self.generation) {
                Some(_lease) => self.ask(now).unwrap_or(until).min(until),
                None => until,
            };
            std::thread::park_timeout(Duration::from_nanos(wake.saturating_sub(now)));
        }
    }

    /// Sets the cell if a tick is due at `now`: when to look again (`None`: nothing to
    /// ask, no cell or paused). The caller holds a lease.
    fn ask(&self, now: u64) -> Option<u64> {
        let record = self.record;
        let cell = record.poll_cell.load(Ordering::SeqCst);
        if cell.is_null() || !record.rearm.load(Ordering::Acquire) {
            return None;
        }
        let period = record.period_ns.load(Ordering::Relaxed).max(2);
        let due = record.due_ns.load(Ordering::Relaxed);
        // None yet, or far behind (this thread was not run): a new schedule from now.
        let mut due =
            match due == 0 || now.saturating_sub(due) > super::handler::CATCH_UP_PERIODS * period {
                true => now,
                false => due,
            };
        if due > now {
            return Some(due);
        }
        let mut next = due + super::handler::next_delay(record);
        while next <= now {
            due = next;
            next += super::handler::next_delay(record);
        }
        record.due_ns.store(next, Ordering::Relaxed);
        record.poll_due_ns.store(due, Ordering::Release);
        // SAFETY: published, and not withdrawn while the caller's lease is held.
        unsafe { AtomicU32::from_ptr(cell) }.store(1, Ordering::Release);
        Some(next)
    }
}
