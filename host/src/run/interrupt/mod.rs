//! Asking the thread that runs the program where it is: a timer of that thread interrupts it
//! every period with `SIGPROF`, and a handler running on it records the interrupted program
//! counter and the module's current-node cell, the two facts that say which function runs
//! and in which calling context. Each interruption is a tick; the sampler thread reads the
//! ticks since its previous reading.
//!
//! Where the signal comes from decides whether the answer is true. A signal sent from
//! another thread (`pthread_kill`, what wprof did before) reaches a thread running on another
//! core through an interrupt between the cores, which takes 10-40 µs on a virtual machine;
//! if the thread enters the kernel meanwhile (a page fault on fresh memory), the signal is
//! delivered there, so code that faults answers far more often than its time says (a loop
//! touching one fresh page every 20 µs of work: 10% of the time, 42% of the answers). The
//! thread's own timer (`timer_create` on the monotonic clock, delivered to this thread)
//! fires on the core the thread runs on, and the handler arms it for the next tick from that
//! thread, so the kernel keeps it there: the signal is taken on the way back to the
//! interrupted instruction, wherever that is (the same loop: 7.6% of the time, 7.5% of the
//! answers). The time to the next tick is drawn between half and one and a half periods,
//! so that ticks never keep step with a loop that repeats at the period.
//!
//! Every thread of the program that runs wasm (wasi-threads spawns more) has its own
//! session: its own timer, its own ring of ticks, and its own cells, found by the handler
//! through a thread-local index into a fixed array of states, so a worker thread's time is
//! located by its program counter as the first thread's is.
//!
//! The handler does nothing but read that thread-local, atomic loads and stores into static
//! slots and `timer_settime`, so it is async-signal-safe. It is installed once per process,
//! with `SA_RESTART` (an interrupted system call resumes) and `SA_ONSTACK` (it runs on the
//! signal stack wasmtime gives every thread that enters wasm, so a program deep in
//! recursion cannot overflow its stack), and stays installed: a late signal finds no
//! session and returns.
//!
//! Up to [`SESSIONS`] threads of a process can be sampled this way at once ([`Session::begin`]
//! says `None` to more, which then fall back to reading the cell alone), as on a platform
//! other than Linux on x86-64 or AArch64, or when something else already handles `SIGPROF`.

pub mod frames;
mod timer;

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// How many threads can be interrupted at once: a thread that begins a session while this
/// many are alive is read by its cell alone.
pub const SESSIONS: usize = 32;
/// How many cells besides the first a tick can record.
pub const MORE_CELLS: usize = 31;
/// How many ticks are kept: the sampler must read a tick before this many more come
/// (6.4 ms at the default period; older ones are lost and their time goes to the others).
pub const SLOTS_KEPT: usize = 64;

/// Every session's state, one per thread being interrupted. All of it zero until a session
/// claims it, so the array takes no room in the binary.
static STATES: [State; SESSIONS] = [const { State::new() }; SESSIONS];
/// Where the next claim starts looking, so that a state just given up is not taken again
/// at once (a reader of the session that ended may still be finishing its last ticks).
static NEXT_CLAIM: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The state of the session interrupting this thread, plus one (0: none). A `const`
    /// thread-local of a type without destructor: a plain access to the thread's own
    /// memory, which the signal handler may make.
    static MINE: Cell<usize> = const { Cell::new(0) };
}

/// One thread's session: what its handler writes and its sampler reads.
struct State {
    /// Whether a session owns this state.
    claimed: AtomicBool,
    /// Counts the claims, so that a [`Target`] of an earlier session reads nothing here.
    generation: AtomicU64,
    /// The cell the handler reads.
    cell: AtomicPtr<u32>,
    /// More cells the handler reads, up to the first null (a component's other core
    /// modules).
    more: [AtomicPtr<u32>; MORE_CELLS],
    /// The number of the last tick recorded (ticks count from 1; only the handler writes
    /// it).
    ticks: AtomicU64,
    /// Ticks by number modulo their count.
    slots: [Slot; SLOTS_KEPT],
    /// Whether the handler arms the timer for the next tick (false while paused or ending).
    rearm: AtomicBool,
    /// The session's timer, for the handler to arm.
    timer: AtomicUsize,
    /// The mean time between ticks, in nanoseconds.
    period_ns: AtomicU64,
    /// The state of the generator of the time to the next tick (xorshift64, never 0 while
    /// claimed).
    random: AtomicU64,
    /// The top of the thread's stack when each tick walks its frame pointers (see
    /// [`crate::run::interrupt::frames`]); 0 when ticks record the program counter alone.
    walk_top: AtomicUsize,
}

impl State {
    const fn new() -> Self {
        State {
            claimed: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            cell: AtomicPtr::new(std::ptr::null_mut()),
            more: [const { AtomicPtr::new(std::ptr::null_mut()) }; MORE_CELLS],
            ticks: AtomicU64::new(0),
            slots: [const { Slot::new() }; SLOTS_KEPT],
            rearm: AtomicBool::new(false),
            timer: AtomicUsize::new(0),
            period_ns: AtomicU64::new(0),
            random: AtomicU64::new(0),
            walk_top: AtomicUsize::new(0),
        }
    }

    /// A free state, now claimed for a new session, and its index; `None` if all are taken.
    fn claim() -> Option<(usize, u64)> {
        let from = NEXT_CLAIM.fetch_add(1, Ordering::Relaxed);
        (0..SESSIONS).map(|i| (from + i) % SESSIONS).find_map(|i| {
            let state = &STATES[i];
            state
                .claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .ok()?;
            // A new generation first: a reader of the last session sees it before any
            // slot is reset.
            let generation = state.generation.fetch_add(1, Ordering::AcqRel) + 1;
            state.ticks.store(0, Ordering::Relaxed);
            for slot in &state.slots {
                slot.tick.store(0, Ordering::Relaxed);
            }
            let seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (generation << 8 | i as u64);
            state.random.store(seed | 1, Ordering::Relaxed);
            Some((i, generation))
        })
    }

    fn clear_cells(&self) {
        self.cell.store(std::ptr::null_mut(), Ordering::Release);
        for slot in &self.more {
            slot.store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// Where the thread was at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Where {
    /// The interrupted program counter.
    pub pc: usize,
    /// The value of the current-node cell at that moment.
    pub cell: u32,
    /// The values of the session's other cells at that moment (0 past the last).
    pub more: [u32; MORE_CELLS],
}

struct Slot {
    /// The tick recorded here (0: none yet). Written last, read first and last (a seqlock).
    tick: AtomicU64,
    pc: AtomicUsize,
    cell: AtomicU32,
    more: [AtomicU32; MORE_CELLS],
}

impl Slot {
    const fn new() -> Self {
        Slot {
            tick: AtomicU64::new(0),
            pc: AtomicUsize::new(0),
            cell: AtomicU32::new(0),
            more: [const { AtomicU32::new(0) }; MORE_CELLS],
        }
    }
}

/// The right to interrupt the thread that began it, for as long as it lives. Not `Send`:
/// it is dropped on the thread it targets, so no signal can be handled while it ends.
#[derive(Debug)]
pub struct Session {
    target: Target,
    _on_this_thread: PhantomData<*const ()>,
}

/// What the sampler thread needs to read the ticks and pause the timer.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    timer: timer::ThreadTimer,
    index: usize,
    generation: u64,
}

impl Session {
    /// Installs the handler if needed and arms a timer that interrupts the calling thread
    /// every `period` on average, with `cell` the address of the current-node cell. `None` where
    /// interrupting is unsupported or the timer cannot be made, while this thread has a
    /// session already, or while [`SESSIONS`] threads of this process have one.
    ///
    /// # Safety
    ///
    /// `cell` must stay valid for 4-byte atomic loads until the session is dropped.
    pub unsafe fn begin(cell: *const u32, period: Duration) -> Option<Session> {
        // SAFETY: as promised by the caller, and no more cells.
        unsafe { Self::begin_with(cell, &[], period) }
    }

    /// [`Session::begin`] with more cells (at most [`MORE_CELLS`] are read; the rest are
    /// not), each read at every tick as the first is.
    ///
    /// # Safety
    ///
    /// Every cell must stay valid for 4-byte atomic loads until the session is dropped.
    pub unsafe fn begin_with(
        cell: *const u32,
        more: &[*const u32],
        period: Duration,
    ) -> Option<Session> {
        // SAFETY: as promised by the caller.
        unsafe { Self::begin_on(cell, more, period, 0) }
    }

    /// A session whose every tick also records the thread's call stack, walked through its
    /// frame pointers (see [`crate::run::interrupt::frames`]; read with [`Target::stack_at`]).
    /// `None` as for [`Session::begin`], and where the thread's stack cannot be found.
    pub fn begin_walking(period: Duration) -> Option<Session> {
        /// The cell such a session reads: nothing writes it.
        static NO_CELL: AtomicU32 = AtomicU32::new(0);
        let top = crate::run::interrupt::frames::stack_top_of_this_thread()?;
        // SAFETY: a static cell is valid for ever.
        unsafe { Self::begin_on(NO_CELL.as_ptr(), &[], period, top) }
    }

    /// # Safety
    ///
    /// As for [`Session::begin_with`].
    unsafe fn begin_on(
        cell: *const u32,
        more: &[*const u32],
        period: Duration,
        walk_top: usize,
    ) -> Option<Session> {
        if MINE.get() != 0 || !handler::install() {
            return None;
        }
        let (index, generation) = State::claim()?;
        let state = &STATES[index];
        let Some(timer) = timer::ThreadTimer::create(period) else {
            state.claimed.store(false, Ordering::Release);
            return None;
        };
        // Everything the handler reads is in place before the first tick can come.
        state.timer.store(timer.id(), Ordering::Relaxed);
        state
            .period_ns
            .store(period.as_nanos() as u64, Ordering::Relaxed);
        for (i, slot) in state.more.iter().enumerate() {
            let p = more.get(i).copied().unwrap_or(std::ptr::null());
            slot.store(p.cast_mut(), Ordering::Release);
        }
        state.walk_top.store(walk_top, Ordering::Release);
        state.cell.store(cell.cast_mut(), Ordering::Release);
        state.rearm.store(true, Ordering::Release);
        MINE.set(index + 1);
        let session = Session {
            target: Target {
                timer,
                index,
                generation,
            },
            _on_this_thread: PhantomData,
        };
        // Dropping the session undoes all of the above if the timer cannot be armed.
        session.target.timer.set(Some(period)).then_some(session)
    }

    /// The handle the sampler thread uses.
    pub fn target(&self) -> Target {
        self.target
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // First, so that a signal taken while this runs finds no session.
        MINE.set(0);
        let state = self.target.state();
        state.rearm.store(false, Ordering::Release);
        self.target.timer.delete();
        state.clear_cells();
        state.claimed.store(false, Ordering::Release);
    }
}

impl Target {
    fn state(&self) -> &'static State {
        &STATES[self.index]
    }

    /// Whether the session is still the state's (a later one may have claimed it).
    fn current(&self) -> bool {
        self.state().generation.load(Ordering::Acquire) == self.generation
    }

    /// The number of the last tick (0: none yet, or the state is another session's now).
    pub fn ticks(&self) -> u64 {
        let ticks = self.state().ticks.load(Ordering::Acquire);
        if self.current() {
            ticks
        } else {
            0
        }
    }

    /// Where the thread was at tick `tick`, unless a later tick took its slot.
    pub fn at(&self, tick: u64) -> Option<Where> {
        if tick == 0 {
            return None;
        }
        let slot = &self.state().slots[tick as usize % SLOTS_KEPT];
        if slot.tick.load(Ordering::Acquire) != tick {
            return None;
        }
        let found = Where {
            pc: slot.pc.load(Ordering::Relaxed),
            cell: slot.cell.load(Ordering::Relaxed),
            more: std::array::from_fn(|i| slot.more[i].load(Ordering::Relaxed)),
        };
        std::sync::atomic::fence(Ordering::Acquire);
        (slot.tick.load(Ordering::Relaxed) == tick && self.current()).then_some(found)
    }

    /// The call stack the thread had at tick `tick` of a [`Session::begin_walking`]
    /// session, into `stack`; false if a later tick took its slot.
    pub fn stack_at(&self, tick: u64, stack: &mut crate::run::interrupt::frames::Stack) -> bool {
        if tick == 0 {
            return false;
        }
        let slot = &self.state().slots[tick as usize % SLOTS_KEPT];
        if slot.tick.load(Ordering::Acquire) != tick {
            return false;
        }
        crate::run::interrupt::frames::read(self.index, tick, stack);
        std::sync::atomic::fence(Ordering::Acquire);
        slot.tick.load(Ordering::Relaxed) == tick && self.current()
    }

    /// Stops the timer while ticks are not wanted (the program waits in the host: a tick
    /// would only wake it).
    pub fn pause(&self) {
        if !self.current() {
            return;
        }
        self.state().rearm.store(false, Ordering::Release);
        // A handler running now may still arm one more tick, whose handler then stops.
        self.timer.set(None);
    }

    /// Makes `period` the mean time to the next ticks (the handler draws each from it).
    pub fn set_period(&self, period: Duration) {
        if self.current() {
            let ns = period.as_nanos().max(2) as u64;
            self.state().period_ns.store(ns, Ordering::Relaxed);
        }
    }

    /// Starts the timer again after [`Target::pause`]. The kernel arms it on the core of the
    /// thread that asks, so its first tick may come from another core, late; the later ones
    /// are re-armed on the target's own.
    pub fn resume(&self) {
        if !self.current() {
            return;
        }
        let state = self.state();
        state.rearm.store(true, Ordering::Release);
        let period = Duration::from_nanos(state.period_ns.load(Ordering::Relaxed));
        self.timer.set(Some(period));
    }
}

/// Records a tick on the interrupted thread: what the handler does.
fn record(registers: crate::run::interrupt::frames::Registers) {
    let pc = registers.pc;
    // Async-signal-safe: a const thread-local without destructor is read in place.
    let Some(index) = MINE.get().checked_sub(1) else {
        return;
    };
    let state = &STATES[index];
    let cell = state.cell.load(Ordering::Acquire);
    if cell.is_null() {
        return;
    }
    // Only this handler, on the one target thread, writes the count.
    let tick = state.ticks.load(Ordering::Relaxed) + 1;
    let slot = &state.slots[tick as usize % SLOTS_KEPT];
    // SAFETY: non-null only during a session, whose creator promised the cell is valid;
    // the session is dropped on this very thread, never while this handler runs.
    let value = unsafe { AtomicU32::from_ptr(cell).load(Ordering::Relaxed) };
    slot.tick.store(0, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    slot.pc.store(pc, Ordering::Relaxed);
    slot.cell.store(value, Ordering::Relaxed);
    for (i, more) in state.more.iter().enumerate() {
        let more = more.load(Ordering::Acquire);
        if more.is_null() {
            break;
        }
        // SAFETY: as for the first cell.
        let value = unsafe { AtomicU32::from_ptr(more).load(Ordering::Relaxed) };
        slot.more[i].store(value, Ordering::Relaxed);
    }
    let top = state.walk_top.load(Ordering::Acquire);
    if top != 0 {
        crate::run::interrupt::frames::record(index, tick, registers, top);
    }
    slot.tick.store(tick, Ordering::Release);
    state.ticks.store(tick, Ordering::Release);
    if state.rearm.load(Ordering::Acquire) {
        // A refusal leaves the timer idle: the sampler then charges by the cell alone.
        let timer = state.timer.load(Ordering::Relaxed);
        let _ = timer::ThreadTimer::arm_once(timer, next_delay(state));
    }
}

/// The time to the next tick: uniform between half and one and a half periods, so that
/// ticks never keep step with a program that repeats itself at the period (a strictly
/// periodic timer sampled one loop's every activation at the same point, or none of them).
fn next_delay(state: &State) -> u64 {
    let mut x = state.random.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    state.random.store(x, Ordering::Relaxed);
    let period = state.period_ns.load(Ordering::Relaxed).max(2);
    period / 2 + x % period
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod handler {
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

    extern "C" fn on_signal(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
        if context.is_null() {
            return;
        }
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let registers = unsafe { registers(&*context.cast::<libc::ucontext_t>()) };
        super::record(registers);
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
mod handler {
    pub fn install() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session on this thread, waiting while other tests of this process hold every
    /// state; `None` only where sessions are unsupported.
    fn session(cell: &AtomicU32, period: Duration) -> Option<Session> {
        let supported = cfg!(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ));
        for _ in 0..500 {
            // SAFETY: the caller's cell outlives the session, which ends within its test.
            if let Some(session) = unsafe { Session::begin(cell.as_ptr(), period) } {
                return Some(session);
            }
            if !supported {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no session on a platform that supports them");
    }

    /// Spins on this thread until `ticks` more ticks came (or ten seconds passed).
    fn spin_for(target: Target, ticks: u64) -> u64 {
        let from = target.ticks();
        let began = std::time::Instant::now();
        while target.ticks() < from + ticks && began.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        target.ticks()
    }

    #[test]
    fn the_threads_timer_records_its_program_counter_and_cell() {
        let cell = Box::new(AtomicU32::new(1234));
        let Some(session) = session(&cell, Duration::from_micros(500)) else {
            return;
        };
        let target = session.target();
        let last = spin_for(target, 3);
        cell.store(99, Ordering::Relaxed);
        let later = spin_for(target, 2);
        target.pause();
        let at = target.at(last);
        let at_later = target.at(later);
        // Only recorded ticks are read: not one to come in the same slot, nor tick 0.
        assert_eq!(target.at(target.ticks() + SLOTS_KEPT as u64), None);
        assert_eq!(target.at(0), None);
        drop(session);
        assert!(last >= 3, "{last} ticks");
        let at = at.expect("the last tick is kept");
        assert_eq!(at.cell, 1234);
        assert_ne!(at.pc, 0);
        assert_eq!(at_later.map(|w| w.cell), Some(99));
    }

    #[test]
    fn every_thread_has_its_own_ticks_and_a_thread_one_session() {
        // Two threads at once, each spinning under its own timer with its own cell: each
        // session's ticks record its own thread's cell only.
        // Per thread: its cell's value, and (where sessions are supported) its ticks and
        // the cells they recorded.
        type Seen = (u32, Option<(u64, Vec<u32>)>);
        let cells: Vec<Seen> = std::thread::scope(|s| {
            let spawned: Vec<_> = [11_u32, 22]
                .into_iter()
                .map(|value| {
                    s.spawn(move || {
                        let cell = Box::new(AtomicU32::new(value));
                        let session = session(&cell, Duration::from_micros(300))?;
                        // SAFETY: the same cell, while the first session lives.
                        let second = unsafe { Session::begin(cell.as_ptr(), MEASURE) };
                        assert!(second.is_none(), "a second session on one thread");
                        let target = session.target();
                        let last = spin_for(target, 8);
                        target.pause();
                        let seen = (1..=last).filter_map(|t| target.at(t)).map(|w| w.cell);
                        let seen = seen.collect();
                        drop(session);
                        Some((last, seen))
                    })
                })
                .collect();
            let joined = spawned.into_iter().map(|t| t.join().unwrap());
            [11, 22].into_iter().zip(joined).collect()
        });
        for (value, ran) in cells {
            let Some((ticks, seen)) = ran else { return };
            assert!(ticks >= 8, "{ticks} ticks");
            assert!(!seen.is_empty());
            assert!(seen.iter().all(|&c| c == value), "{value}: {seen:?}");
        }
    }

    /// Any period: the second session is refused before its timer is made.
    const MEASURE: Duration = Duration::from_millis(1);

    #[test]
    fn a_target_reads_nothing_once_its_state_is_claimed_again() {
        let cell = Box::new(AtomicU32::new(5));
        let Some(session) = session(&cell, Duration::from_micros(200)) else {
            return;
        };
        let old = session.target();
        let last = spin_for(old, 2);
        drop(session);
        assert!(
            old.at(last).is_some(),
            "read after its session, before a claim"
        );
        // Claim every state in turn until the old one is taken again.
        let mut held = Vec::new();
        let taken = loop {
            match State::claim() {
                Some((index, generation)) if index == old.index => break Some(generation),
                Some((index, _)) => held.push(index),
                None => break None,
            }
        };
        for index in held {
            STATES[index].claimed.store(false, Ordering::Release);
        }
        if taken.is_some() {
            STATES[old.index].claimed.store(false, Ordering::Release);
            assert_eq!(old.ticks(), 0);
            assert_eq!(old.at(last), None);
        }
    }

    #[test]
    fn a_paused_timer_does_not_tick_until_resumed() {
        let cell = Box::new(AtomicU32::new(7));
        let Some(session) = session(&cell, Duration::from_micros(200)) else {
            return;
        };
        let target = session.target();
        spin_for(target, 2);
        target.pause();
        // A tick already on its way may still land.
        let paused = target.ticks() + 1;
        std::thread::sleep(Duration::from_millis(20));
        let after_pause = target.ticks();
        target.resume();
        let resumed = spin_for(target, 2);
        drop(session);
        assert!(after_pause <= paused, "{after_pause} ticks after {paused}");
        assert!(resumed >= after_pause + 2);
    }
}
