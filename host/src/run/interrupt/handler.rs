//! The `SIGPROF` handler: on the interrupted thread, it finds the thread's record through
//! the thread-local pointer and, when the signal is the tick of the thread's own timer,
//! records where the thread was and arms the timer for the next tick.
//!
//! A tick is a signal whose `siginfo` says a POSIX timer sent it (`SI_TIMER`) with the
//! value the session gave its timer (the record's address). Anything else is foreign: a
//! `kill -PROF`, `setitimer`'s `ITIMER_PROF`, a signal queued by hand. It records nothing,
//! but since a standard signal already pending is not queued a second time, the timer's own
//! signal may have been lost to it, leaving the timer idle for the rest of the session: if
//! the session wants ticks and its timer is idle, the handler arms it again (at worst one
//! tick comes early).
//!
//! Whatever it calls, the handler leaves `errno` as it found it: the interrupted code may
//! be between a failed call and its reading of `errno`.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use super::frames::{Registers, TickClocks};
use super::records::Record;
use super::{timer, MINE, SLOTS_KEPT};

/// The value a session's timer sends with each tick: its record's address.
pub(super) fn cookie(record: &Record) -> usize {
    record as *const Record as usize
}

/// What the handler does with a signal whose `siginfo` has code `code` and value `value`
/// (the timer's, for a tick), keeping `errno`.
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    allow(dead_code)
)]
pub(super) fn handle(code: i32, value: usize, registers: Registers) {
    let saved = errno::get();
    take(code, value, registers);
    errno::set(saved);
}

fn take(code: i32, value: usize, registers: Registers) {
    // Async-signal-safe: a const thread-local without destructor is read in place.
    let record = MINE.get();
    if record.is_null() {
        return;
    }
    // SAFETY: records are never freed.
    let record: &Record = unsafe { &*record };
    if code != SI_TIMER || value != cookie(record) {
        foreign(record);
        return;
    }
    tick(record, registers, super::frames::monotonic_ns());
}

/// `siginfo`'s code for a signal a POSIX timer sent.
#[cfg(target_os = "linux")]
pub(super) const SI_TIMER: i32 = libc::SI_TIMER;
#[cfg(not(target_os = "linux"))]
pub(super) const SI_TIMER: i32 = -2;
#[cfg(test)]
pub(super) use self::errno::{get as errno_get, set as errno_set};

/// A `SIGPROF` that is not the thread's tick: the timer armed again if it should tick and
/// is idle (its own signal may have been merged into this one).
fn foreign(record: &Record) {
    if record.rearm.load(Ordering::Acquire) {
        let timer = record.timer.load(Ordering::Relaxed);
        if timer::ThreadTimer::idle(timer) {
            // A new schedule: the lost tick's is gone.
            record.due_ns.store(0, Ordering::Relaxed);
            let now = super::frames::monotonic_ns();
            let _ = timer::ThreadTimer::arm_at(timer, advance(record, now).next_ns);
        }
    }
}

/// Records a tick on the interrupted thread, taken at `now` on the monotonic clock.
fn tick(record: &Record, registers: Registers, now: u64) {
    let cell = record.cell.load(Ordering::Acquire);
    if cell.is_null() {
        return;
    }
    // Only this handler, on the one target thread, writes the count.
    let tick = record.ticks.load(Ordering::Relaxed) + 1;
    let slot = &record.slots[tick as usize % SLOTS_KEPT];
    let schedule = advance(record, now);
    // SAFETY: non-null only during a session, whose creator promised the cell is valid;
    // the session is dropped on this very thread, never while this handler runs.
    let value = unsafe { AtomicU32::from_ptr(cell).load(Ordering::Relaxed) };
    slot.tick.store(0, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    slot.pc.store(registers.pc, Ordering::Relaxed);
    slot.cell.store(value, Ordering::Relaxed);
    for (i, more) in record.more.iter().enumerate() {
        let more = more.load(Ordering::Acquire);
        if more.is_null() {
            break;
        }
        // SAFETY: as for the first cell.
        let value = unsafe { AtomicU32::from_ptr(more).load(Ordering::Relaxed) };
        slot.more[i].store(value, Ordering::Relaxed);
    }
    let top = record.walk_top.load(Ordering::Acquire);
    if top != 0 {
        let stack: Range<usize> = record.walk_low.load(Ordering::Acquire)..top;
        let now = TickClocks {
            monotonic_ns: now,
            cpu_ns: super::frames::thread_cpu_ns(),
        };
        let last = TickClocks {
            monotonic_ns: record
                .last_read_ns
                .swap(now.monotonic_ns, Ordering::Relaxed),
            cpu_ns: record.last_cpu_ns.swap(now.cpu_ns, Ordering::Relaxed),
        };
        let at = TickClocks::when_due(now, last, schedule.late_ns);
        super::frames::record(&record.frames, tick, registers, stack, at);
    }
    let language = record.language.load(Ordering::Acquire);
    if !language.is_null() {
        // SAFETY: set by this thread's session for as long as the walk's memory lives,
        // and taken back on this thread before it goes (see `Session::walk_language`).
        let language = unsafe { &*language };
        language.record(&record.languages.0[tick as usize % SLOTS_KEPT], tick);
    }
    slot.tick.store(tick, Ordering::Release);
    record.ticks.store(tick, Ordering::Release);
    if record.rearm.load(Ordering::Acquire) {
        // A refusal leaves the timer idle: the sampler then charges by the cell alone.
        let timer = record.timer.load(Ordering::Relaxed);
        let _ = timer::ThreadTimer::arm_at(timer, schedule.next_ns);
    }
}

/// How many periods behind its schedule a tick may be taken and the schedule still be
/// kept; past it (the thread was paused, or a system call went on for long), the schedule
/// starts again at the tick.
const CATCH_UP_PERIODS: u64 = 64;

/// Where a tick taken at some time stands in its thread's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    /// How long before the tick was taken the last schedule point that had passed came:
    /// the time the tick stands for.
    late_ns: u64,
    /// When the next tick is due (after the tick was taken).
    next_ns: u64,
}

/// Moves the record's schedule past a tick taken at `now` (see the module's
/// documentation): every point that passed before `now` came while the thread was in the
/// kernel (a pending signal is taken on the first return to the program), so the tick
/// stands for all of them, and for the last one's time.
fn advance(record: &Record, now: u64) -> Schedule {
    let period = record.period_ns.load(Ordering::Relaxed).max(2);
    let due = record.due_ns.load(Ordering::Relaxed);
    let kept = due != 0 && due <= now && now - due <= CATCH_UP_PERIODS * period;
    let mut passed = if kept { due } else { now };
    let mut next = passed + next_delay(record);
    while next <= now {
        passed = next;
        next += next_delay(record);
    }
    record.due_ns.store(next, Ordering::Relaxed);
    Schedule {
        late_ns: now - passed,
        next_ns: next,
    }
}

/// The time to the next tick: uniform between half and one and a half periods, so that
/// ticks never keep step with a program that repeats itself at the period (a strictly
/// periodic timer sampled one loop's every activation at the same point, or none of them).
fn next_delay(record: &Record) -> u64 {
    let mut x = record.random.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    record.random.store(x, Ordering::Relaxed);
    let period = record.period_ns.load(Ordering::Relaxed).max(2);
    period / 2 + x % period
}

/// The calling thread's `errno`.
mod errno {
    #[cfg(target_os = "linux")]
    pub(crate) fn get() -> i32 {
        // SAFETY: the thread's own errno, always valid (async-signal-safe).
        unsafe { *libc::__errno_location() }
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn set(value: i32) {
        // SAFETY: as in `get`.
        unsafe { *libc::__errno_location() = value }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn get() -> i32 {
        0
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn set(_: i32) {}
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(super) use os::install;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod os {
    use std::sync::OnceLock;

    use crate::run::interrupt::frames::Registers;

    /// Installs the `SIGPROF` handler once; false if it cannot be, or if another handler
    /// was there first.
    pub fn install() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(|| {
            // SAFETY: plain libc calls on zeroed, then filled, sigaction structures.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction != libc::SIG_DFL
                {
                    return false;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) == 0
            }
        })
    }

    extern "C" fn on_signal(
        _: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        if info.is_null() || context.is_null() {
            return;
        }
        // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO
        // handler; the value is read as the pointer it is for every code (garbage, never
        // a record's address, for a signal that carries none).
        let (code, value, registers) = unsafe {
            let info = &*info;
            (
                info.si_code,
                info.si_value().sival_ptr as usize,
                registers(&*context.cast::<libc::ucontext_t>()),
            )
        };
        super::handle(code, value, registers);
    }

    #[cfg(target_arch = "x86_64")]
    fn registers(context: &libc::ucontext_t) -> Registers {
        let gregs = &context.uc_mcontext.gregs;
        Registers {
            pc: gregs[libc::REG_RIP as usize] as usize,
            fp: gregs[libc::REG_RBP as usize] as usize,
            sp: gregs[libc::REG_RSP as usize] as usize,
        }
    }

    #[cfg(target_arch = "aarch64")]
    fn registers(context: &libc::ucontext_t) -> Registers {
        let mcontext = &context.uc_mcontext;
        Registers {
            pc: mcontext.pc as usize,
            fp: mcontext.regs[29] as usize,
            sp: mcontext.sp as usize,
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) fn install() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_tick_stands_for_the_last_point_of_the_schedule_it_was_late_for() {
        // SAFETY: zeroed memory is a valid record (atomics and null pointers).
        let record: Box<Record> = unsafe { Box::new_zeroed().assume_init() };
        record.period_ns.store(1_000, Ordering::Relaxed);
        record
            .random
            .store(0x2545_f491_4f6c_dd1d, Ordering::Relaxed);
        let first = advance(&record, 10_000);
        assert_eq!(
            first.late_ns, 0,
            "no schedule yet: the first tick starts one"
        );
        assert!((10_500..11_500).contains(&first.next_ns), "{first:?}");

        // Taken 3 ns after it was due: the next is drawn from when it was due.
        let on_time = advance(&record, first.next_ns + 3);
        assert_eq!(on_time.late_ns, 3);
        assert!((first.next_ns + 500..first.next_ns + 1_500).contains(&on_time.next_ns));

        // Five periods late (in the kernel all along): it stands for the last point that
        // passed, and the schedule goes on from there, not from when it was taken.
        let now = on_time.next_ns + 5_000;
        let late = advance(&record, now);
        assert!(late.late_ns < 1_500, "{late:?}");
        assert!(late.next_ns > now && late.next_ns - (now - late.late_ns) >= 500);
        assert!(late.next_ns - (now - late.late_ns) < 1_500, "{late:?}");

        // Far behind (a pause): a new schedule from the tick.
        let now = late.next_ns + 1_000_000;
        let again = advance(&record, now);
        assert_eq!(again.late_ns, 0);
        assert!((now + 500..now + 1_500).contains(&again.next_ns));
        assert_eq!(record.due_ns.load(Ordering::Relaxed), again.next_ns);
    }
}
