//! The call stack at a tick, read by the signal handler from the interrupted thread's frame
//! pointers, and kept beside the tick (see [`crate::run::interrupt`]) until the reader
//! takes it.
//!
//! wasmtime's compiled code keeps a frame pointer in every function (its own backtraces
//! walk them), and wprof and its dependencies are built with frame pointers as well
//! (`.cargo/config.toml`): each frame's pointer register names two words, the caller's
//! frame pointer and the return address into the caller. Following them from the
//! interrupted registers gives every return address up to the thread's first frame, which
//! is what `perf record --call-graph fp` reads, without a probe in the program.
//!
//! The walk trusts nothing it reads: a frame pointer must lie on the thread's stack, above
//! the interrupted stack pointer, aligned, and above the previous one (a frame of code
//! built without frame pointers, such as the C library's, leaves the register holding
//! anything; the walk stops there). Every address it reads is then between the stack
//! pointer and the stack's top, memory the thread owns. The stack pointer itself must be on
//! the thread's stack: the tick may have interrupted a signal handler running on another
//! stack (wasmtime's, handling a trap, runs on the thread's alternate signal stack), from
//! where the range up to the thread's top would span memory that is not the thread's; such
//! a tick records its program counter alone.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::SLOTS_KEPT;

/// The most frames a tick records: the interrupted program counter and this many return
/// addresses less one. A deeper stack keeps its innermost frames (see [`Stack::truncated`]).
pub const DEPTH: usize = 192;

/// One tick's frames.
struct FrameSlot {
    /// When the tick was taken, on the monotonic clock, in nanoseconds.
    at_ns: AtomicU64,
    /// The CPU time the thread had used then, in nanoseconds.
    cpu_ns: AtomicU64,
    /// How many of `pcs` the tick filled, plus [`TRUNCATED`] when the walk stopped at
    /// [`DEPTH`] rather than at the stack's first frame.
    len: AtomicUsize,
    /// The interrupted program counter, then the return addresses, innermost first.
    pcs: [AtomicUsize; DEPTH],
    /// Where the interrupted function's return address is while it has no frame of its
    /// own (see [`Stack::unframed`]).
    unframed: [AtomicUsize; 2],
}

/// Set in [`FrameSlot::len`] when the stack went deeper than [`DEPTH`].
const TRUNCATED: usize = 1 << 20;

/// A session's frames, slot by slot as its ticks (zero until used: pages never touched by
/// a session that does not walk). All zero is a valid value.
pub(crate) struct Frames([FrameSlot; SLOTS_KEPT]);

/// Where the interrupted thread's stack is, for the walk.
#[derive(Debug, Clone, Copy, Default)]
pub struct Registers {
    /// The interrupted program counter.
    pub pc: usize,
    /// Its frame pointer register.
    pub fp: usize,
    /// Its stack pointer.
    pub sp: usize,
}

/// The bounds of the calling thread's stack, as the thread library knows them: its lowest
/// address to its top (highest address, exclusive). `None` where it cannot say.
pub fn stack_of_this_thread() -> Option<Range<usize>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: pthread_getattr_np fills the zeroed attribute for the calling thread,
        // which is destroyed after reading its stack.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
                return None;
            }
            let mut base: *mut libc::c_void = std::ptr::null_mut();
            let mut size: libc::size_t = 0;
            let got = libc::pthread_attr_getstack(&attr, &mut base, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            (got == 0 && !base.is_null()).then(|| base as usize..base as usize + size)
        }
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Follows the frame pointers from `registers` on the thread's `stack`, writing the
/// program counter and then each return address into `out`; how many it wrote and whether
/// it stopped for want of room. `read` reads one aligned word at an address the walk has
/// checked lies in `[registers.sp, stack.end)`. With a stack pointer off `stack`, the
/// program counter alone.
pub fn walk(
    registers: Registers,
    stack: Range<usize>,
    out: &mut [usize],
    read: impl Fn(usize) -> usize,
) -> (usize, bool) {
    const WORD: usize = std::mem::size_of::<usize>();
    if out.is_empty() {
        return (0, false);
    }
    out[0] = registers.pc;
    let mut len = 1;
    if !stack.contains(&registers.sp) {
        return (len, false);
    }
    let top = stack.end;
    let mut fp = registers.fp;
    // The lowest address the next frame may start at.
    let mut floor = registers.sp;
    while fp >= floor
        && fp.is_multiple_of(WORD)
        && fp.checked_add(2 * WORD).is_some_and(|end| end <= top)
    {
        if len == out.len() {
            return (len, true);
        }
        let caller_fp = read(fp);
        let return_address = read(fp + WORD);
        if return_address == 0 {
            break;
        }
        out[len] = return_address;
        len += 1;
        floor = fp + 2 * WORD;
        fp = caller_fp;
    }
    (len, false)
}

/// [`Stack::unframed`] of `registers`, reading the thread's `stack` with `read`, which is
/// given aligned addresses in `[registers.sp, stack.end)` only (none with a stack pointer
/// off `stack`).
pub fn unframed_words(
    registers: Registers,
    stack: Range<usize>,
    read: impl Fn(usize) -> usize,
) -> [usize; 2] {
    const WORD: usize = std::mem::size_of::<usize>();
    if !cfg!(target_arch = "x86_64") || !stack.contains(&registers.sp) {
        return [0, 0];
    }
    let (sp, top) = (registers.sp, stack.end);
    let readable = |at: usize| {
        at.is_multiple_of(WORD) && at >= sp && at.checked_add(WORD).is_some_and(|end| end <= top)
    };
    let word = |at: usize| if readable(at) { read(at) } else { 0 };
    [word(sp), sp.checked_add(WORD).map_or(0, word)]
}

/// The signal handler, on the interrupted thread: records the stack of tick `tick` of a
/// session in its slot of `frames`, walking the thread's `stack`, and the clocks `at` (the
/// tick's time, see [`TickClocks`]). Async-signal-safe: plain loads and stores.
pub(crate) fn record(
    frames: &Frames,
    tick: u64,
    registers: Registers,
    stack: Range<usize>,
    at: TickClocks,
) {
    let slot = &frames.0[tick as usize % SLOTS_KEPT];
    let mut pcs = [0usize; DEPTH];
    let read = |address| {
        // SAFETY: `walk` and `unframed_words` read only aligned words between the
        // interrupted stack pointer, on this thread's stack, and the top of that stack,
        // which is mapped while the thread lives.
        unsafe { std::ptr::read_volatile(address as *const usize) }
    };
    let (len, truncated) = walk(registers, stack.clone(), &mut pcs, read);
    for (to, &pc) in slot.pcs.iter().zip(&pcs[..len]) {
        to.store(pc, Ordering::Relaxed);
    }
    let unframed = unframed_words(registers, stack, read);
    for (to, word) in slot.unframed.iter().zip(unframed) {
        to.store(word, Ordering::Relaxed);
    }
    slot.len.store(
        len | if truncated { TRUNCATED } else { 0 },
        Ordering::Relaxed,
    );
    slot.at_ns.store(at.monotonic_ns, Ordering::Relaxed);
    slot.cpu_ns.store(at.cpu_ns, Ordering::Relaxed);
}

/// The clocks of a tick: the monotonic clock and the thread's CPU time, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TickClocks {
    pub monotonic_ns: u64,
    pub cpu_ns: u64,
}

impl TickClocks {
    /// The clocks as they were when a tick taken at `now` (the clocks read then) was due,
    /// `late_ns` earlier, given the clocks as the last tick read them (`last`, zero for
    /// none). The thread's CPU clock is taken to have run for the lateness less the time
    /// the thread was off its core since the last tick: a tick is late because the kernel
    /// worked on (a system call's own work, on the thread's CPU time) or because the thread
    /// waited (for a core, or in an uninterruptible sleep), and a wait is what delays it.
    pub fn when_due(now: TickClocks, last: TickClocks, late_ns: u64) -> TickClocks {
        let off_core = match last.monotonic_ns {
            0 => 0,
            _ => now
                .monotonic_ns
                .saturating_sub(last.monotonic_ns)
                .saturating_sub(now.cpu_ns.saturating_sub(last.cpu_ns)),
        };
        TickClocks {
            monotonic_ns: now.monotonic_ns.saturating_sub(late_ns),
            cpu_ns: now.cpu_ns.saturating_sub(late_ns.saturating_sub(off_core)),
        }
    }
}

/// A tick's stack as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stack {
    /// When it was taken, on the monotonic clock, in nanoseconds.
    pub at_ns: u64,
    /// The CPU time its thread had used then, in nanoseconds.
    pub cpu_ns: u64,
    /// The program counter, then the return addresses, innermost first.
    pub pcs: Vec<usize>,
    /// The stack went deeper than [`DEPTH`]: its outermost frames are missing.
    pub truncated: bool,
    /// Where the interrupted function's return address is if it has no frame of its own
    /// at the interrupted instruction (its first ones, before it saved the frame pointer,
    /// or its return, after it restored it): then the frame pointer is still its caller's,
    /// and the walk skips the caller. On x86-64 the two words at the stack pointer (the
    /// return address at the first instruction and at the return, behind the saved frame
    /// pointer at the second). 0 where unreadable, and on AArch64 (not looked for there).
    pub unframed: [usize; 2],
    /// An interpreted language's frames at the tick, innermost first, packed (see
    /// [`crate::run::interrupt::language`]), and whether their walk was truncated; `None`
    /// when the tick walked none.
    pub language: Option<(Vec<u64>, bool)>,
}

/// The reader: the frames of tick `tick` of a session, from its `frames`, into `stack`. The
/// caller checks afterwards that the tick still owns its slot (a seqlock: the handler
/// clears the slot's tick before writing and sets it after).
pub(crate) fn read(frames: &Frames, tick: u64, stack: &mut Stack) {
    let slot = &frames.0[tick as usize % SLOTS_KEPT];
    let len = slot.len.load(Ordering::Relaxed);
    stack.truncated = len & TRUNCATED != 0;
    let len = (len & !TRUNCATED).min(DEPTH);
    stack.pcs.clear();
    stack
        .pcs
        .extend(slot.pcs[..len].iter().map(|pc| pc.load(Ordering::Relaxed)));
    for (to, word) in stack.unframed.iter_mut().zip(&slot.unframed) {
        *to = word.load(Ordering::Relaxed);
    }
    stack.at_ns = slot.at_ns.load(Ordering::Relaxed);
    stack.cpu_ns = slot.cpu_ns.load(Ordering::Relaxed);
}

/// The monotonic clock in nanoseconds (the clock the tick times are on).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The CPU time the calling thread has used, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe and writes the timespec given.
    unsafe {
        libc::clock_gettime(clock, &mut now);
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_ticks_clocks_go_back_to_when_it_was_due() {
        let clocks = |monotonic_ns, cpu_ns| TickClocks {
            monotonic_ns,
            cpu_ns,
        };
        let last = clocks(1_000_000, 500_000);
        // On its core since the last tick (a system call's work): both clocks go back.
        let busy = TickClocks::when_due(clocks(1_300_000, 800_000), last, 100_000);
        assert_eq!(busy, clocks(1_200_000, 700_000));
        // 80 µs of the 100 µs off its core (waiting for it): the CPU clock ran 20 µs.
        let waited = TickClocks::when_due(clocks(1_300_000, 720_000), last, 100_000);
        assert_eq!(waited, clocks(1_200_000, 700_000));
        // Off its core longer than it was late: the CPU clock stays.
        let slept = TickClocks::when_due(clocks(1_300_000, 600_000), last, 100_000);
        assert_eq!(slept, clocks(1_200_000, 600_000));
        // On time, or the first tick: as read.
        let now = clocks(1_300_000, 800_000);
        assert_eq!(TickClocks::when_due(now, last, 0), now);
        assert_eq!(
            TickClocks::when_due(now, TickClocks::default(), 1_000),
            clocks(1_299_000, 799_000)
        );
    }

    /// A fake stack: words at addresses from `base`, 8 bytes apart.
    fn reader(base: usize, words: &[usize]) -> impl Fn(usize) -> usize + '_ {
        move |address| words[(address - base) / 8]
    }

    #[test]
    fn a_chain_of_frames_gives_every_return_address_innermost_first() {
        let base = 0x1000;
        // Frames at 0x1010 -> 0x1030 -> 0x1050 (the last has a zero return address: the
        // thread's first frame).
        let mut words = vec![0usize; 12];
        words[2] = 0x1030; // [0x1010] caller's fp
        words[3] = 0xaaa; // [0x1018] return address
        words[6] = 0x1050;
        words[7] = 0xbbb;
        words[10] = 0;
        words[11] = 0;
        let registers = Registers {
            pc: 0x999,
            fp: 0x1010,
            sp: 0x1000,
        };
        let mut out = [0; 8];
        let (len, truncated) = walk(
            registers,
            base..base + 12 * 8,
            &mut out,
            reader(base, &words),
        );
        assert_eq!(&out[..len], &[0x999, 0xaaa, 0xbbb]);
        assert!(!truncated);
    }

    #[test]
    fn the_walk_stops_at_a_frame_pointer_off_the_stack_or_going_down() {
        let base = 0x1000;
        let mut words = vec![0usize; 8];
        words[2] = 0x1008; // points below itself: a register used for something else
        words[3] = 0xaaa;
        let registers = Registers {
            pc: 0x999,
            fp: 0x1010,
            sp: 0x1000,
        };
        let mut out = [0; 8];
        let (len, _) = walk(
            registers,
            base..base + 8 * 8,
            &mut out,
            reader(base, &words),
        );
        assert_eq!(&out[..len], &[0x999, 0xaaa]);
        // Below the stack pointer, misaligned, or past the top: the program counter alone.
        for fp in [0x0ff8, 0x1011, base + 8 * 8] {
            let registers = Registers { fp, ..registers };
            let (len, _) = walk(registers, base..base + 8 * 8, &mut out, |_| unreachable!());
            assert_eq!(len, 1, "{fp:#x}");
        }
    }

    #[test]
    fn a_walk_from_a_stack_pointer_off_the_threads_stack_records_the_program_counter_alone() {
        // The tick interrupted a handler on the alternate signal stack (below or above the
        // thread's stack): nothing between its stack pointer and the thread's top is read,
        // however good the frame pointer looks.
        let stack = 0x10_0000..0x10_1000;
        let mut out = [0; 8];
        for sp in [0x8000, 0x20_0000, stack.end] {
            let registers = Registers {
                pc: 0x999,
                fp: 0x10_0800,
                sp,
            };
            let (len, truncated) = walk(registers, stack.clone(), &mut out, |_| unreachable!());
            assert_eq!((&out[..len], truncated), (&[0x999][..], false), "{sp:#x}");
        }
    }

    #[test]
    fn a_stack_deeper_than_the_room_keeps_its_innermost_frames() {
        let base = 0x1000;
        // Every frame 16 bytes above the last, each returning to its own address.
        let words: Vec<usize> = (0..64)
            .map(|i| {
                if i % 2 == 0 {
                    base + (i + 2) * 8
                } else {
                    0x5000 + i
                }
            })
            .collect();
        let registers = Registers {
            pc: 0x999,
            fp: base,
            sp: base,
        };
        let mut out = [0; 4];
        let (len, truncated) = walk(
            registers,
            base..base + 64 * 8,
            &mut out,
            reader(base, &words),
        );
        assert_eq!(&out[..len], &[0x999, 0x5001, 0x5003, 0x5005]);
        assert!(truncated);
    }

    #[inline(never)]
    fn innermost(depth: u32) -> (usize, bool) {
        if depth > 0 {
            return std::hint::black_box(innermost(depth - 1));
        }
        let mut out = [0usize; 64];
        let fp: usize;
        let sp: usize;
        // SAFETY: reads two registers.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("mov {}, rbp", "mov {}, rsp", out(reg) fp, out(reg) sp);
        }
        #[cfg(target_arch = "aarch64")]
        unsafe {
            std::arch::asm!("mov {}, x29", "mov {}, sp", out(reg) fp, out(reg) sp);
        }
        let stack = stack_of_this_thread().expect("this thread's stack");
        let registers = Registers { pc: 1, fp, sp };
        let (len, _) = walk(registers, stack, &mut out, |a| unsafe {
            std::ptr::read_volatile(a as *const usize)
        });
        (len, len > 10)
    }

    #[test]
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    fn this_threads_own_frames_are_walked_to_its_first() {
        // Built with frame pointers (`.cargo/config.toml`): twelve nested calls give at
        // least ten return addresses, and the walk ends on its own on the thread's stack.
        let (len, deep) = innermost(12);
        assert!(deep, "{len} frames");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_words_at_the_stack_pointer_are_read_only_on_the_stack() {
        let base = 0x1000;
        let words = [0xaaa, 0xbbb, 0xccc];
        let at = |sp| Registers {
            pc: 0x999,
            fp: 0,
            sp,
        };
        let top = base + 3 * 8;
        assert_eq!(
            unframed_words(at(base), base..top, reader(base, &words)),
            [0xaaa, 0xbbb]
        );
        // One word left on the stack; none; a misaligned pointer.
        assert_eq!(
            unframed_words(at(base + 16), base..top, reader(base, &words)),
            [0xccc, 0]
        );
        assert_eq!(
            unframed_words(at(top), base..top, reader(base, &words)),
            [0, 0]
        );
        assert_eq!(
            unframed_words(at(base + 3), base..top, reader(base, &words)),
            [0, 0]
        );
        // A stack pointer below the thread's stack (another stack: a signal handler's).
        assert_eq!(
            unframed_words(at(base - 0x100), base..top, |_| unreachable!()),
            [0, 0]
        );
    }
}
