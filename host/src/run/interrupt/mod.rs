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
//! The ticks keep a schedule of their own: each is due a drawn time after the one before
//! was due, not after it was taken. A tick that comes due while the thread works in the
//! kernel (a system call the signal does not interrupt, such as creating a file) is taken
//! only as the call returns; were the next one drawn from there, the half period after
//! every such call would never be sampled, and the code that runs between the calls would
//! lose its time (2,400 files written with `fprintf`: `printf_core` 5.4% of the module's
//! time against perf's 19.5%). A late tick also stands for the time it was due: its
//! timestamps are moved back by its lateness (see [`frames::TickClocks::when_due`]), so that
//! the time the call went on after it is the next tick's, as perf's schedule has it.
//!
//! Every thread of the program that runs wasm (wasi-threads spawns more) has its own
//! session: its own timer, its own ring of ticks, and its own cells, in a record of its own
//! found by the handler through a thread-local pointer, so a worker thread's time is
//! located by its program counter as the first thread's is. There are as many records as
//! threads interrupted at once ([`records`]: chunks added as needed, never freed, so that a
//! [`Target`] that outlives its session still points at memory it may read, and learns
//! from the record's generation that the record is no longer its session's).
//!
//! The handler ([`handler`]) does nothing but read that thread-local, atomic loads and
//! stores into the record and `timer_settime`, so it is async-signal-safe; it keeps
//! `errno` as it found it, and takes for a tick only the signal of the thread's own timer
//! (a `SIGPROF` sent by anything else, `kill` or `setitimer`, is not one). It is installed
//! once per process, with `SA_RESTART` (an interrupted system call resumes) and
//! `SA_ONSTACK` (it runs on the signal stack wasmtime gives every thread that enters wasm,
//! so a program deep in recursion cannot overflow its stack), and stays installed: a late
//! signal finds no session and returns.
//!
//! Any number of threads of a process can be sampled this way at once. A thread is refused
//! a session ([`Session::begin`] says `None`, and the caller reads the cell alone or says
//! the thread went unsampled) only when the system refuses its timer (`timer_create` is
//! limited by `RLIMIT_SIGPENDING`) or memory for its record, as on a platform other than
//! Linux on x86-64 or AArch64, or when something else already handles `SIGPROF`.

pub mod frames;
mod handler;
pub mod language;
mod records;
mod timer;

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use records::Record;

/// How many cells besides the first a tick can record.
pub const MORE_CELLS: usize = 31;
/// How many ticks are kept: the sampler must read a tick before this many more come
/// (6.4 ms at the default period; older ones are lost and their time goes to the others).
pub const SLOTS_KEPT: usize = 64;

thread_local! {
    /// The record of the session interrupting this thread (null: none). A `const`
    /// thread-local of a type without destructor: a plain access to the thread's own
    /// memory, which the signal handler may make.
    static MINE: Cell<*const Record> = const { Cell::new(std::ptr::null()) };
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

/// The right to interrupt the thread that began it, for as long as it lives. Not `Send`:
/// it is dropped on the thread it targets, so no signal can be handled while it ends.
#[derive(Debug)]
pub struct Session {
    target: Target,
    _on_this_thread: PhantomData<*const ()>,
}

/// What the sampler thread needs to read the ticks and pause the timer. It may outlive its
/// session: it then reads the ticks the session recorded until another session takes the
/// record, and its pauses and resumptions do nothing.
#[derive(Clone, Copy)]
pub struct Target {
    timer: timer::ThreadTimer,
    record: &'static Record,
    generation: u64,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("timer", &self.timer)
            .field("record", &(self.record as *const Record))
            .field("generation", &self.generation)
            .finish()
    }
}

impl Session {
    /// Installs the handler if needed and arms a timer that interrupts the calling thread
    /// every `period` on average, with `cell` the address of the current-node cell. `None` where
    /// interrupting is unsupported or the timer cannot be made, or while this thread has a
    /// session already.
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
        unsafe { Self::begin_on(cell, more, period, 0..0) }
    }

    /// A session whose every tick also records the thread's call stack, walked through its
    /// frame pointers (see [`crate::run::interrupt::frames`]; read with [`Target::stack_at`]).
    /// `None` as for [`Session::begin`], and where the thread's stack cannot be found.
    pub fn begin_walking(period: Duration) -> Option<Session> {
        /// The cell such a session reads: nothing writes it.
        static NO_CELL: AtomicU32 = AtomicU32::new(0);
        let stack = crate::run::interrupt::frames::stack_of_this_thread()?;
        // SAFETY: a static cell is valid for ever.
        unsafe { Self::begin_on(NO_CELL.as_ptr(), &[], period, stack) }
    }

    /// # Safety
    ///
    /// As for [`Session::begin_with`]. `walk`: the thread's stack, empty when ticks do not
    /// walk.
    unsafe fn begin_on(
        cell: *const u32,
        more: &[*const u32],
        period: Duration,
        walk: std::ops::Range<usize>,
    ) -> Option<Session> {
        if !MINE.get().is_null() || !handler::install() {
            return None;
        }
        let (record, generation) = Record::claim()?;
        let Some(timer) = timer::ThreadTimer::create(period, handler::cookie(record)) else {
            record.release();
            return None;
        };
        // Everything the handler reads is in place before the first tick can come.
        record.timer.store(timer.id(), Ordering::Relaxed);
        record
            .period_ns
            .store(period.as_nanos() as u64, Ordering::Relaxed);
        for (i, slot) in record.more.iter().enumerate() {
            let p = more.get(i).copied().unwrap_or(std::ptr::null());
            slot.store(p.cast_mut(), Ordering::Release);
        }
        record.walk_low.store(walk.start, Ordering::Release);
        record.walk_top.store(walk.end, Ordering::Release);
        record.cell.store(cell.cast_mut(), Ordering::Release);
        record.rearm.store(true, Ordering::Release);
        record.live.store(generation, Ordering::SeqCst);
        MINE.set(record);
        let session = Session {
            target: Target {
                timer,
                record,
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

/// From now on, each tick of the session interrupting this thread (if there is one) also
/// walks the interpreted language `walk` says: until [`stop_walking_language`] on this
/// thread, which must come before the memories `walk` reads go. Whether there was a
/// session.
pub fn walk_language(walk: &'static language::LanguageWalk) -> bool {
    let record = MINE.get();
    if record.is_null() {
        return false;
    }
    // SAFETY: records are never freed.
    let record: &Record = unsafe { &*record };
    record
        .language
        .store(std::ptr::from_ref(walk).cast_mut(), Ordering::Release);
    true
}

/// Ends [`walk_language`] on this thread, before the memories it reads go: no tick after
/// this returns walks them, nor does the sampler read them (it may still name the frames
/// it read before).
pub fn stop_walking_language() {
    let record = MINE.get();
    if record.is_null() {
        return;
    }
    // SAFETY: records are never freed.
    let record: &Record = unsafe { &*record };
    let walk = record.language.load(Ordering::Acquire);
    if !walk.is_null() {
        // SAFETY: a walk given to `walk_language` is `'static`.
        unsafe { &*walk }.retire();
    }
}

impl Target {
    /// The language walk the session's ticks make, if any (see [`walk_language`]).
    pub fn language(&self) -> Option<&'static language::LanguageWalk> {
        let walk = self.record.language.load(Ordering::Acquire);
        // SAFETY: a walk given to `walk_language` is `'static`.
        (!walk.is_null() && self.current()).then(|| unsafe { &*walk })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // First, so that a signal taken while this runs finds no session.
        MINE.set(std::ptr::null());
        let record = self.target.record;
        // No target acts on the timer once this returns.
        record.end();
        record.rearm.store(false, Ordering::Release);
        self.target.timer.delete();
        record.release();
    }
}

impl Target {
    /// Whether the session is still the record's (a later one may have claimed it).
    fn current(&self) -> bool {
        self.record.generation.load(Ordering::Acquire) == self.generation
    }

    /// The number of the last tick (0: none yet, or the record is another session's now).
    pub fn ticks(&self) -> u64 {
        let ticks = self.record.ticks.load(Ordering::Acquire);
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
        let slot = &self.record.slots[tick as usize % SLOTS_KEPT];
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
        let slot = &self.record.slots[tick as usize % SLOTS_KEPT];
        if slot.tick.load(Ordering::Acquire) != tick {
            return false;
        }
        crate::run::interrupt::frames::read(&self.record.frames, tick, stack);
        if self.record.language.load(Ordering::Acquire).is_null() {
            stack.language = None;
        } else {
            let slot = &self.record.languages.0[tick as usize % SLOTS_KEPT];
            let (mut frames, _) = stack.language.take().unwrap_or_default();
            let truncated = language::read(slot, tick, &mut frames);
            stack.language = truncated.map(|t| (frames, t));
        }
        std::sync::atomic::fence(Ordering::Acquire);
        slot.tick.load(Ordering::Relaxed) == tick && self.current()
    }

    /// The language frames tick `tick` walked (see [`walk_language`]), into `frames`:
    /// `None` if it walked none or a later tick took its slot, else whether the walk was
    /// truncated.
    pub fn language_at(&self, tick: u64, frames: &mut Vec<u64>) -> Option<bool> {
        if tick == 0 || self.record.language.load(Ordering::Acquire).is_null() {
            return None;
        }
        let slot = &self.record.languages.0[tick as usize % SLOTS_KEPT];
        let truncated = language::read(slot, tick, frames)?;
        std::sync::atomic::fence(Ordering::Acquire);
        (language::owns(slot, tick) && self.current()).then_some(truncated)
    }

    /// Stops the timer while ticks are not wanted (the program waits in the host: a tick
    /// would only wake it). Nothing once the session has ended.
    pub fn pause(&self) {
        let Some(_lease) = self.record.lease(self.generation) else {
            return;
        };
        self.record.rearm.store(false, Ordering::Release);
        // A handler running now may still arm one more tick, whose handler then stops.
        self.timer.set(None);
    }

    /// Makes `period` the mean time to the next ticks (the handler draws each from it).
    /// Nothing once the session has ended.
    pub fn set_period(&self, period: Duration) {
        if let Some(_lease) = self.record.lease(self.generation) {
            let ns = period.as_nanos().max(2) as u64;
            self.record.period_ns.store(ns, Ordering::Relaxed);
        }
    }

    /// Starts the timer again after [`Target::pause`]. The kernel arms it on the core of the
    /// thread that asks, so its first tick may come from another core, late; the later ones
    /// are re-armed on the target's own. Nothing once the session has ended.
    pub fn resume(&self) {
        let Some(_lease) = self.record.lease(self.generation) else {
            return;
        };
        self.record.rearm.store(true, Ordering::Release);
        // A new schedule from the first tick: the old one's ticks did not come.
        self.record.due_ns.store(0, Ordering::Relaxed);
        self.record.last_read_ns.store(0, Ordering::Relaxed);
        let period = Duration::from_nanos(self.record.period_ns.load(Ordering::Relaxed));
        self.timer.set(Some(period));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUPPORTED: bool = cfg!(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ));

    /// A session on this thread; `None` only where sessions are unsupported.
    fn session(cell: &AtomicU32, period: Duration) -> Option<Session> {
        // SAFETY: the caller's cell outlives the session, which ends within its test.
        let session = unsafe { Session::begin(cell.as_ptr(), period) };
        assert!(
            session.is_some() || !SUPPORTED,
            "no session on a platform that supports them"
        );
        session
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

    /// Claims records until `wanted` is taken again: its new generation (`None` if memory
    /// ran out first). The others claimed meanwhile are given back.
    fn claim_again(wanted: &'static Record) -> Option<u64> {
        let mut held = Vec::new();
        let taken = loop {
            match Record::claim() {
                Some((record, generation)) if std::ptr::eq(record, wanted) => {
                    break Some(generation)
                }
                Some((record, _)) => held.push(record),
                None => break None,
            }
        };
        for record in held {
            record.release();
        }
        taken
    }

    #[test]
    fn a_target_reads_nothing_once_its_record_is_claimed_again() {
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
        claim_again(old.record).expect("the record is claimed again");
        old.record.release();
        assert_eq!(old.ticks(), 0);
        assert_eq!(old.at(last), None);
    }

    /// What a target could change in a record.
    fn controls(record: &Record) -> (bool, u64, usize, u64) {
        (
            record.rearm.load(Ordering::SeqCst),
            record.period_ns.load(Ordering::SeqCst),
            record.timer.load(Ordering::SeqCst),
            record.leases.load(Ordering::SeqCst).into(),
        )
    }

    #[test]
    fn a_dropped_sessions_target_changes_no_record() {
        let cell = Box::new(AtomicU32::new(5));
        let Some(session) = session(&cell, Duration::from_secs(60)) else {
            return;
        };
        let old = session.target();
        drop(session);
        // Ended, not claimed again: pausing, resuming or a new period touches nothing (the
        // timer is deleted: its id may be another's now).
        let ended = controls(old.record);
        old.resume();
        old.set_period(Duration::from_micros(7));
        old.pause();
        assert_eq!(controls(old.record), ended);
        // Claimed by another session since, ticking: the old target stops nothing.
        let generation = claim_again(old.record).expect("the record is claimed again");
        let record = old.record;
        record.rearm.store(true, Ordering::SeqCst);
        record.period_ns.store(1_000_000, Ordering::SeqCst);
        record.live.store(generation, Ordering::SeqCst);
        let claimed = controls(record);
        old.pause();
        old.set_period(Duration::from_micros(7));
        old.resume();
        assert_eq!(controls(record), claimed);
        record.end();
        record.release();
    }

    #[test]
    fn a_session_ends_only_once_a_targets_pause_is_done() {
        // A lease taken while the session lives holds its end back until given up; one
        // asked for after the end is refused.
        let cell = Box::new(AtomicU32::new(5));
        let Some(session) = session(&cell, Duration::from_secs(60)) else {
            return;
        };
        let target = session.target();
        let lease = target.record.lease(target.generation).expect("alive");
        let ended = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let ended = &ended;
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                assert!(!ended.load(Ordering::SeqCst), "ended under a lease");
                drop(lease);
            });
            drop(session);
            ended.store(true, Ordering::SeqCst);
        });
        assert!(target.record.lease(target.generation).is_none());
    }

    #[test]
    fn more_threads_than_a_chunk_each_get_their_own_session() {
        // Far more threads at once than the records there were: each still gets its own
        // session, and its ticks record its own cell.
        const THREADS: u32 = 100;
        let barrier = std::sync::Barrier::new(THREADS as usize);
        let seen: Vec<Option<bool>> = std::thread::scope(|s| {
            let spawned: Vec<_> = (1..=THREADS)
                .map(|value| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let cell = Box::new(AtomicU32::new(value));
                        let session = session(&cell, Duration::from_micros(500));
                        // Every session begun before any ends.
                        barrier.wait();
                        let session = session?;
                        let target = session.target();
                        let last = spin_for(target, 2);
                        target.pause();
                        let own = (1..=last)
                            .filter_map(|t| target.at(t))
                            .all(|w| w.cell == value);
                        barrier.wait();
                        drop(session);
                        Some(own && last >= 2)
                    })
                })
                .collect();
            spawned.into_iter().map(|t| t.join().unwrap()).collect()
        });
        if !SUPPORTED {
            return;
        }
        assert!(seen.iter().all(|s| *s == Some(true)), "{seen:?}");
        assert!(Record::count() >= THREADS as usize);
    }

    /// Sends `SIGPROF` to this thread with `code` and `value` in its `siginfo`, as
    /// `sigqueue` would from another process.
    #[cfg(target_os = "linux")]
    fn queue_sigprof(code: i32, value: usize) {
        // SAFETY: a zeroed siginfo, then filled; rt_tgsigqueueinfo to this thread.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = libc::SIGPROF;
            info.si_code = code;
            // The value sits after two ints in the kernel's `_rt` and `_timer` layouts.
            let fields = (&mut info as *mut libc::siginfo_t)
                .cast::<u8>()
                .add(std::mem::size_of::<i32>() * 4);
            fields.add(8).cast::<usize>().write_unaligned(value);
            let got = libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                libc::getpid(),
                libc::gettid(),
                libc::SIGPROF,
                &info as *const libc::siginfo_t,
            );
            assert_eq!(got, 0, "{}", std::io::Error::last_os_error());
        }
    }

    #[test]
    fn a_foreign_sigprof_is_not_a_tick() {
        let cell = Box::new(AtomicU32::new(5));
        // No tick of its own for a minute.
        let Some(session) = session(&cell, Duration::from_secs(60)) else {
            return;
        };
        let target = session.target();
        let record = target.record;
        // `kill -PROF`, `raise`, a timer's code with another value, the handler's own
        // test of a tick.
        // SAFETY: the handler is installed (the session began).
        unsafe {
            libc::raise(libc::SIGPROF);
            libc::kill(libc::getpid(), libc::SIGPROF);
        }
        #[cfg(target_os = "linux")]
        {
            queue_sigprof(libc::SI_QUEUE, handler::cookie(record));
            queue_sigprof(handler::SI_TIMER, handler::cookie(record) + 8);
        }
        // `kill` may reach another thread of this process first: wait for it.
        std::thread::sleep(Duration::from_millis(20));
        let foreign = target.ticks();
        handler::handle(
            handler::SI_TIMER,
            handler::cookie(record),
            frames::Registers::default(),
        );
        let own = target.ticks();
        drop(session);
        assert_eq!((foreign, own), (0, 1));
    }

    #[test]
    fn the_handler_leaves_errno_as_it_found_it() {
        let cell = Box::new(AtomicU32::new(5));
        let Some(session) = session(&cell, Duration::from_secs(60)) else {
            return;
        };
        let target = session.target();
        let record = target.record;
        // A timer deleted: arming it fails and sets errno, in a tick and in a foreign
        // signal alike.
        let deleted = timer::ThreadTimer::create(Duration::from_secs(1), 0).unwrap();
        deleted.delete();
        let own = record.timer.swap(deleted.id(), Ordering::SeqCst);
        let mut found = Vec::new();
        for code in [handler::SI_TIMER, 0] {
            handler::errno_set(1234);
            handler::handle(code, handler::cookie(record), frames::Registers::default());
            found.push(handler::errno_get());
        }
        record.timer.store(own, Ordering::SeqCst);
        let ticks = target.ticks();
        drop(session);
        assert_eq!(ticks, 1);
        assert_eq!(found, [1234, 1234]);
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
