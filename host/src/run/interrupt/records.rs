//! The records sessions keep their ticks in, one per thread being interrupted, as many as
//! there are such threads at once.
//!
//! Records come in chunks that are never freed: a chunk is allocated (zeroed, so that the
//! pages a session never writes, such as the frames of one that does not walk, cost
//! nothing) when every record is taken, linked at the end of a list with a compare-and-swap,
//! and kept for the life of the process. So a record's address stays valid for ever: the
//! signal handler reaches its thread's record through a thread-local pointer, and a
//! [`super::Target`] that outlives its session still points at memory it may read. What
//! tells a session's record from a later session's is the record's generation, counted at
//! every claim.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::frames::Frames;
use super::{MORE_CELLS, SLOTS_KEPT};

/// Records per chunk.
const CHUNK: usize = 16;

/// One thread's session: what its handler writes and its sampler reads. All of it zero
/// until a session claims it (zero is a valid value of every field).
pub(super) struct Record {
    /// Whether a session owns this record.
    pub claimed: AtomicBool,
    /// Counts the claims (from 1), so that a [`super::Target`] of an earlier session reads
    /// nothing here.
    pub generation: AtomicU64,
    /// The generation of the session that owns the record while it lives, 0 once it ended:
    /// what a target checks before it touches the timer (see [`Record::lease`]).
    pub live: AtomicU64,
    /// Targets acting on the timer now; the session's end waits for them.
    pub leases: AtomicU32,
    /// The cell the handler reads.
    pub cell: AtomicPtr<u32>,
    /// More cells the handler reads, up to the first null (a component's other core
    /// modules).
    pub more: [AtomicPtr<u32>; MORE_CELLS],
    /// The number of the last tick recorded (ticks count from 1; only the handler writes
    /// it).
    pub ticks: AtomicU64,
    /// Ticks by number modulo their count.
    pub slots: [Slot; SLOTS_KEPT],
    /// Whether the handler arms the timer for the next tick (false while paused or ending).
    pub rearm: AtomicBool,
    /// The session's timer, for the handler to arm.
    pub timer: AtomicUsize,
    /// The mean time between ticks, in nanoseconds.
    pub period_ns: AtomicU64,
    /// The state of the generator of the time to the next tick (xorshift64, never 0 while
    /// claimed).
    pub random: AtomicU64,
    /// When the next tick is due, on the monotonic clock in nanoseconds (0: no schedule
    /// yet, the next tick starts one). See [`super::handler`].
    pub due_ns: AtomicU64,
    /// The clocks as the last tick read them, in walking sessions: the monotonic clock (0:
    /// none yet) and the thread's CPU time, in nanoseconds.
    pub last_read_ns: AtomicU64,
    pub last_cpu_ns: AtomicU64,
    /// The lowest address of the thread's stack when each tick walks its frame pointers
    /// (see [`super::frames`]).
    pub walk_low: AtomicUsize,
    /// The top of the thread's stack (exclusive) when each tick walks its frame pointers;
    /// 0 when ticks record the program counter alone.
    pub walk_top: AtomicUsize,
    /// The ticks' frames, when the session walks.
    pub frames: Frames,
    /// How each tick walks an interpreted language's frames (null: it does not).
    pub language: AtomicPtr<super::language::LanguageWalk>,
    /// The ticks' language frames, when it does.
    pub languages: super::language::LanguageFrames,
}

/// Where the thread was at one tick (the frames aside).
pub(super) struct Slot {
    /// The tick recorded here (0: none yet). Written last, read first and last (a seqlock).
    pub tick: AtomicU64,
    pub pc: AtomicUsize,
    pub cell: AtomicU32,
    pub more: [AtomicU32; MORE_CELLS],
}

/// A target's right to act on a live session's timer; the session does not end while one
/// is held.
pub(super) struct Lease(&'static Record);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.leases.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Chunk {
    records: [Record; CHUNK],
    /// The next chunk (null: this is the last).
    next: AtomicPtr<Chunk>,
}

/// The first chunk (null until the first session).
static FIRST: AtomicPtr<Chunk> = AtomicPtr::new(std::ptr::null_mut());
/// Where the next claim starts looking, so that a record just given up is not taken again
/// at once (a reader of the session that ended may still be finishing its last ticks).
static NEXT_CLAIM: AtomicUsize = AtomicUsize::new(0);

/// Every record there is now, in order.
fn records() -> impl Iterator<Item = &'static Record> {
    let mut chunk = FIRST.load(Ordering::Acquire);
    std::iter::from_fn(move || {
        // SAFETY: a non-null chunk pointer is a chunk linked for ever (never freed).
        let this: &'static Chunk = unsafe { chunk.as_ref()? };
        chunk = this.next.load(Ordering::Acquire);
        Some(&this.records)
    })
    .flatten()
}

/// Links one more chunk of free records at the end of the list; false if no memory could
/// be had.
fn grow() -> bool {
    let layout = std::alloc::Layout::new::<Chunk>();
    // SAFETY: a chunk is not zero-sized; zeroed memory is a valid chunk (atomics and null
    // pointers), and it is never freed, so references to it live for ever.
    let new = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Chunk>();
    if new.is_null() {
        return false;
    }
    let mut link = &FIRST;
    loop {
        match link.compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return true,
            // SAFETY: as in `records`.
            Err(next) => link = unsafe { &(*next).next },
        }
    }
}

impl Record {
    /// A free record, now claimed for a new session, and its generation; `None` only if no
    /// memory could be had for more.
    pub fn claim() -> Option<(&'static Record, u64)> {
        loop {
            let all: Vec<&'static Record> = records().collect();
            if !all.is_empty() {
                let from = NEXT_CLAIM.fetch_add(1, Ordering::Relaxed) % all.len();
                let free = (0..all.len())
                    .map(|i| all[(from + i) % all.len()])
                    .find(|r| {
                        r.claimed
                            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                    });
                if let Some(record) = free {
                    return Some((record, record.prepare()));
                }
            }
            if !grow() {
                return None;
            }
        }
    }

    /// A claimed record made ready for its session: a new generation, no ticks.
    fn prepare(&self) -> u64 {
        // A new generation first: a reader of the last session sees it before any slot is
        // reset.
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.ticks.store(0, Ordering::Relaxed);
        for slot in &self.slots {
            slot.tick.store(0, Ordering::Relaxed);
        }
        let seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (generation << 8) ^ (self as *const _ as u64);
        self.random.store(seed | 1, Ordering::Relaxed);
        self.due_ns.store(0, Ordering::Relaxed);
        self.last_read_ns.store(0, Ordering::Relaxed);
        generation
    }

    /// Gives the record up (its session has ended, or never began).
    pub fn release(&self) {
        self.cell.store(std::ptr::null_mut(), Ordering::Release);
        // A language walked: its slots' marks go, so that no tick of the next session is
        // taken for one that walked.
        if !self
            .language
            .swap(std::ptr::null_mut(), Ordering::AcqRel)
            .is_null()
        {
            self.languages.forget();
        }
        for slot in &self.more {
            slot.store(std::ptr::null_mut(), Ordering::Release);
        }
        self.claimed.store(false, Ordering::Release);
    }

    /// The right to act on the timer of session `generation`, while it lives. A session's
    /// end says it ended (`live` to 0) and then waits for the leases taken, and a lease
    /// is counted and then checks that the session lives: with sequentially consistent
    /// operations on both sides, either the lease sees the end and is refused, or the end
    /// sees the lease and waits for it.
    pub fn lease(&'static self, generation: u64) -> Option<Lease> {
        self.leases.fetch_add(1, Ordering::SeqCst);
        let lease = Lease(self);
        (self.live.load(Ordering::SeqCst) == generation).then_some(lease)
    }

    /// Ends the live session: no lease is held once this returns, and none is given after.
    pub fn end(&self) {
        self.live.store(0, Ordering::SeqCst);
        while self.leases.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// How many records there are now (for tests: the chunks grow as needed).
    #[cfg(test)]
    pub fn count() -> usize {
        records().count()
    }
}
