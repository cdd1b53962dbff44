//! Time mode's probe log: each probe reads the clock and appends an event to a buffer; full
//! buffers go to a worker thread that replays them into the [`Collector`]. The program pays
//! for a host call, a clock read and a store per probe, while the collector's bookkeeping
//! (shadow stack, edges, calling contexts) runs on another core.
//!
//! # Exactness
//!
//! Handing a buffer over happens inside a probe, after its clock read: its duration (and a
//! wait, if the worker falls behind) is measured and subtracted from every later reading,
//! so no frame is charged for it. A catching function's frame token is a number the log
//! assigns (the worker finds the frame holding it when an exception lands), so probes never
//! wait for the collector.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread::JoinHandle;

use crate::run::clock::Clock;
use crate::run::collector::Collector;
use crate::run::host_calls::meter::HostCall;
use crate::run::time::ticks::{TickReader, READ_EVERY};
use wprof_agent::ProbeImports;

mod events;

use events::{apply, Event, Kind, TOKEN_MASK};

/// The test hook behind `wprof bench --accuracy`'s time-mode floor: with it set, a run's
/// time-mode probes read the clock and do nothing else (`called`, which reads none, does
/// nothing), so the run costs what its probes' host calls and clock reads cost. Its profile
/// holds no calls.
pub const FLOOR_VARIABLE: &str = "WPROF_TEST_TIME_FLOOR";

/// Events per buffer (1 MiB): more than the probe-overhead calibration makes, so that it
/// measures probes, never a hand-over.
const CAPACITY: usize = 1 << 16;
/// Full buffers that may wait for the worker before a probe blocks (and pauses the clock).
const IN_FLIGHT: usize = 8;

/// Functions whose last `called` event the log remembers, by id modulo this (see
/// [`ProbeLog::called`]).
const FOLD_SLOTS: usize = 64;

/// An empty buffer whose pages are already mapped: the first events written to a fresh
/// allocation would otherwise page-fault inside the frames being timed.
fn fresh_buffer() -> Vec<Event> {
    let mut buffer = vec![Event::EMPTY; CAPACITY];
    buffer.clear();
    buffer
}

struct Worker {
    full: SyncSender<Vec<Event>>,
    /// Where the run's ticks go, once the program's thread is interrupted.
    ticks: Sender<TickReader>,
    empty: Receiver<Vec<Event>>,
    thread: JoinHandle<Collector>,
}

/// The probes' side of time mode: see the module docs.
pub struct ProbeLog {
    clock: Clock,
    buffer: Vec<Event>,
    /// Picoseconds spent handing buffers over, excluded from every reading.
    paused: u64,
    next_token: u32,
    /// A tail call was announced and no function entered since: a `called` then ends the
    /// announcing frame, and needs the clock.
    tail_announced: bool,
    /// The replaying thread; `None` where it could not be started (events are then
    /// replayed here, their time excluded the same way).
    worker: Option<Worker>,
    /// The collector, while no worker holds it.
    local: Option<Collector>,
    /// The id of the waits (`memory.atomic.wait32`/`wait64`): the one after the
    /// module's last function (see [`ProbeLog::function`]).
    wait_id: u32,
    /// Where in the buffer the run of `called`s without a reading that ends it starts:
    /// every event from there on is one (see [`ProbeLog::called`]).
    run_start: usize,
    /// By function id modulo [`FOLD_SLOTS`]: where the function's last `called` went in
    /// the buffer (it may since have been handed over: the event there is checked).
    fold_slots: [u32; FOLD_SLOTS],
    /// The number of events logged so far, modulo 2^32, where the tick handler reads it
    /// (see [`crate::run::time::ticks`]); boxed, so that its address stays put.
    logged: Box<AtomicU32>,
}

impl std::fmt::Debug for ProbeLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeLog")
            .field("buffered", &self.buffer.len())
            .field("paused", &self.paused)
            .field("threaded", &self.worker.is_some())
            .finish_non_exhaustive()
    }
}

impl ProbeLog {
    /// Starts a log feeding `collector`, on a worker thread when one can be started.
    pub fn start(collector: Collector) -> Self {
        let wait_id = collector.functions().len() as u32;
        let clock = Clock::new();
        let (full, full_rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(IN_FLIGHT);
        let (empty_tx, empty) = std::sync::mpsc::channel::<Vec<Event>>();
        // The collector goes to the thread once it runs, so a failed start keeps it here.
        let (handover, collector_rx) = std::sync::mpsc::channel::<Collector>();
        let (ticks, ticks_rx) = std::sync::mpsc::channel::<TickReader>();
        let spawned = std::thread::Builder::new()
            .name("wprof-collector".to_string())
            .spawn(move || {
                let mut collector = collector_rx.recv().unwrap_or_else(|_| Collector::new(0));
                let mut reader: Option<TickReader> = None;
                let mut replayed = 0u64;
                loop {
                    let received = full_rx.recv_timeout(READ_EVERY);
                    if reader.is_none() {
                        reader = ticks_rx.try_recv().ok();
                    }
                    if let Some(r) = reader.as_mut() {
                        r.catch_up();
                    }
                    let mut events = match received {
                        Ok(events) => events,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    };
                    apply(&mut collector, &events, replayed, reader.as_mut());
                    replayed += events.len() as u64;
                    events.clear();
                    // The log may be gone already: then the buffer is just dropped.
                    let _ = empty_tx.send(events);
                }
                // Ticks after the last event: the frames open at the end.
                if let Some(r) = reader.as_mut() {
                    r.catch_up();
                    while let Some(tick) = r.next_before(u64::MAX) {
                        collector.tick(tick.running, r.cost_ps);
                    }
                    collector.ticks_ended(r.lost, r.pauses());
                }
                collector
            });
        let (worker, local) = match spawned {
            Ok(thread) => match handover.send(collector) {
                Ok(()) => (
                    Some(Worker {
                        full,
                        ticks,
                        empty,
                        thread,
                    }),
                    None,
                ),
                Err(returned) => (None, Some(returned.0)),
            },
            Err(e) => {
                tracing::warn!("cannot start the collector thread ({e}); replaying inline");
                (None, Some(collector))
            }
        };
        Self {
            clock,
            buffer: fresh_buffer(),
            paused: 0,
            next_token: 0,
            tail_announced: false,
            run_start: 0,
            fold_slots: [u32::MAX; FOLD_SLOTS],
            worker,
            local,
            logged: Box::new(AtomicU32::new(0)),
            wait_id,
        }
    }

    /// The clock the probes read.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Where the tick handler reads how many events were logged (see
    /// [`crate::run::time::ticks`]); valid for as long as the log lives.
    pub fn logged_cell(&self) -> *const u32 {
        self.logged.as_ptr()
    }

    /// Hands the run's ticks to the collector's thread, which takes each at its place
    /// among the events. Without that thread, ticks are not read.
    pub fn read_ticks(&self, reader: TickReader) {
        if let Some(w) = &self.worker {
            let _ = w.ticks.send(reader);
        }
    }

    /// The current reading, pauses excluded.
    #[inline]
    fn now(&self) -> u64 {
        self.clock.now_ps().saturating_sub(self.paused)
    }

    /// Appends an event read at the clock's current reading.
    #[inline]
    fn record(&mut self, kind: Kind, arg: u32, token: u32) {
        let time = self.now();
        self.push(time, kind, arg, token);
    }

    #[inline]
    fn push(&mut self, time: u64, kind: Kind, arg: u32, token: u32) {
        self.buffer.push(Event {
            time,
            arg,
            kind_token: kind as u32 | (token & TOKEN_MASK) << 8,
        });
        // Later `called`s start a new run (see [`ProbeLog::called`]).
        self.run_start = self.buffer.len();
        self.count_pushed();
    }

    /// Counts the event just pushed, and hands the buffer over when it is full.
    #[inline]
    fn count_pushed(&mut self) {
        // Only this thread writes it; the handler that reads it runs on this thread too.
        let logged = self.logged.load(Ordering::Relaxed).wrapping_add(1);
        self.logged.store(logged, Ordering::Relaxed);
        if self.buffer.len() == CAPACITY {
            self.hand_over();
        }
    }

    /// Gives the full buffer to the worker (or replays it here) and excludes the time
    /// that took from every later reading.
    #[cold]
    fn hand_over(&mut self) {
        let started = self.clock.now_ps();
        match &self.worker {
            Some(w) => {
                let fresh = w.empty.try_recv().unwrap_or_else(|_| fresh_buffer());
                let full = std::mem::replace(&mut self.buffer, fresh);
                if let Err(returned) = w.full.send(full) {
                    // The worker died (a panic in the collector): its events are lost;
                    // the buffer is reused.
                    self.buffer = returned.0;
                    self.buffer.clear();
                }
            }
            None => {
                if let Some(c) = self.local.as_mut() {
                    apply(c, &self.buffer, 0, None);
                }
                self.buffer.clear();
            }
        }
        self.run_start = 0;
        self.paused += self.clock.now_ps().saturating_sub(started);
    }

    /// The benchmark's floor (see [`FLOOR_VARIABLE`]): a probe that reads the clock and
    /// does nothing else.
    #[inline]
    pub fn read_clock(&self) -> u64 {
        std::hint::black_box(self.now())
    }

    /// Probe: function `id` starts.
    #[inline]
    pub fn enter(&mut self, id: u32) {
        self.tail_announced = false;
        let id = self.function(id);
        self.record(Kind::Enter, id, 0);
    }

    /// Probe: function `id` returns.
    #[inline]
    pub fn exit(&mut self, id: u32) {
        self.tail_announced = false;
        let id = self.function(id);
        self.record(Kind::Exit, id, 0);
    }

    /// The id a probe reported, with a wait's ([`ProbeImports::WAIT_ID`]) made the one
    /// past the module's functions, which the profile names `memory.atomic.wait`.
    #[inline]
    fn function(&self, id: u32) -> u32 {
        if id == ProbeImports::WAIT_ID {
            self.wait_id
        } else {
            id
        }
    }

    /// Probe: function `id` is about to tail-call.
    pub fn tail(&mut self, id: u32) {
        self.tail_announced = true;
        self.record(Kind::Tail, id, 0);
    }

    /// Probe: function `id` was called, and is counted, not timed (see
    /// [`wprof_agent::ProbePlan::short_max`]). No clock is read, unless a tail call was
    /// announced: then the announcing frame ends now.
    #[inline]
    pub fn called(&mut self, id: u32) {
        if std::mem::take(&mut self.tail_announced) {
            let time = self.now();
            self.push(time, Kind::Called, id, 0);
            return;
        }
        // Calls logged since the last other event all come from the frame running now, so
        // their order does not matter: a `called` of a function already among them is
        // added to its event (the token counts the calls beyond the first). A loop calling
        // a few short functions by turns so logs one event for each, not one per call (on
        // tiny_calls, 72 million fewer for the collector to replay). The event count the
        // ticks are placed by does not move, as no event is added.
        let len = self.buffer.len();
        let slot = &mut self.fold_slots[id as usize % FOLD_SLOTS];
        // Nothing to look at when the last event is not a `called` (the common case in
        // code that mixes short and timed callees).
        if len > self.run_start {
            let at = *slot as usize;
            if at >= self.run_start && at < len {
                let e = &mut self.buffer[at];
                let more = e.kind_token >> 8;
                if e.arg == id && more < TOKEN_MASK {
                    e.kind_token = Kind::Called as u32 | (more + 1) << 8;
                    return;
                }
            }
        }
        *slot = len as u32;
        self.buffer.push(Event {
            time: 0,
            arg: id,
            kind_token: Kind::Called as u32,
        });
        self.count_pushed();
    }

    /// Probe: a function that catches starts; returns its frame token.
    pub fn enter_catching(&mut self, id: u32) -> u32 {
        self.tail_announced = false;
        let token = self.next_token;
        self.next_token = (self.next_token + 1) & TOKEN_MASK;
        self.record(Kind::EnterCatching, id, token);
        token
    }

    /// Probe: an exception was caught in the frame holding `token`.
    pub fn unwind(&mut self, token: u32) {
        self.record(Kind::Unwind, token, 0);
    }

    /// Probe: the next call is made from `offset` in the caller's body.
    pub fn site(&mut self, offset: u32) {
        self.record(Kind::Site, offset, 0);
    }

    /// An allocator's report (see [`crate::run::allocs`]): a block of number `freed` taken
    /// back, then one of size `allocated` handed out by the frame on top. The time since
    /// `started_ps` (a [`ProbeLog::now_ps`] reading: the report's own work) is excluded
    /// from every later reading.
    pub fn allocs(&mut self, freed: Option<u64>, allocated: Option<u64>, started_ps: u64) {
        if self.buffer.len() + 2 > CAPACITY {
            self.hand_over();
        }
        if let Some(number) = freed {
            self.push(number, Kind::Freed, 0, 0);
        }
        if let Some(size) = allocated {
            self.push(size, Kind::Allocated, 0, 0);
        }
        self.paused += self.now().saturating_sub(started_ps);
    }

    /// The clock's reading, pauses excluded (for [`ProbeLog::allocs`]).
    #[inline]
    pub fn now_ps(&self) -> u64 {
        self.now()
    }

    /// A call to import `id`, measured by its wrapper (see [`crate::run::host_calls`]): its
    /// figures go to the import's frame, and the wrapper's own `overhead_ps` is excluded
    /// from every later reading.
    pub fn host(&mut self, id: u32, call: &HostCall, overhead_ps: u64) {
        if self.buffer.len() + 2 > CAPACITY {
            self.hand_over();
        }
        let io = u32::from(call.bytes.is_some());
        self.push(call.wall_ns, Kind::HostWall, id, io);
        self.push(call.cpu_ns, Kind::HostCpu, call.bytes.unwrap_or(0), 0);
        self.paused += overhead_ps;
    }

    /// Go modules: goroutine `g` runs from the next event on (no clock read).
    pub fn go_switch(&mut self, g: u32) {
        self.push(0, Kind::GoSwitch, g, 0);
    }

    /// Replays what is left and returns the collector, with the reading at which the run
    /// ended (in the collector's time base) for closing the frames left open.
    pub fn finish(mut self) -> (Collector, u64) {
        let end = self.now();
        let events = std::mem::take(&mut self.buffer);
        let mut collector = match self.worker.take() {
            Some(w) => {
                let _ = w.full.send(events);
                drop(w.full);
                match w.thread.join() {
                    Ok(c) => c,
                    Err(_) => Collector::new(0),
                }
            }
            None => {
                let mut c = self.local.take().unwrap_or_else(|| Collector::new(0));
                apply(&mut c, &events, 0, None);
                c
            }
        };
        let ticks = collector.ticks_excluded();
        collector.finish_at(end.saturating_sub(ticks));
        collector.share_sampled();
        collector.add_excluded(self.paused + ticks);
        (collector, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_across_buffers_in_order_with_tokens() {
        let mut log = ProbeLog::start(Collector::new(3));
        log.enter(0);
        // More events than one buffer holds: hand-overs happen mid-run.
        for _ in 0..CAPACITY {
            log.enter(1);
            log.exit(1);
        }
        let token = log.enter_catching(2);
        log.enter(1);
        log.enter(1);
        log.unwind(token); // the two frames of 1 above it close
        log.exit(2);
        log.exit(0);
        let (c, _) = log.finish();
        assert_eq!(c.functions()[1].calls, CAPACITY as u64 + 2);
        assert_eq!(c.functions()[2].calls, 1);
        assert_eq!(c.depth(), 0);
        assert_eq!(c.unmatched_exits(), 0);
        let self_sum: i64 = c.functions().iter().map(|f| f.self_time).sum();
        assert_eq!(self_sum, c.root_inclusive());
    }

    #[test]
    fn calls_of_short_functions_by_turns_fold_into_one_event_each() {
        let mut log = ProbeLog::start(Collector::new(6 + FOLD_SLOTS));
        log.enter(0);
        for _ in 0..1000 {
            for id in 1..=5 {
                log.called(id);
            }
        }
        log.enter(4);
        log.called(1); // a new frame runs: not folded into the caller's
        log.exit(4);
        log.called(1); // the caller's again: a new run
                       // Two functions the log remembers in the same place, by turns: not folded.
        let twin = 5 + FOLD_SLOTS as u32;
        for _ in 0..10 {
            log.called(5);
            log.called(twin);
        }
        log.exit(0);
        let logged = 1 + 5 + 1 + 1 + 1 + 1 + 20 + 1;
        assert_eq!(log.buffer.len(), logged);
        // SAFETY: the cell is the log's own, alive while the log is.
        assert_eq!(unsafe { *log.logged_cell() }, logged as u32);
        let (c, _) = log.finish();
        let calls = |id: u32| c.functions()[id as usize].calls;
        let untimed = |id: u32| c.functions()[id as usize].untimed_calls;
        assert_eq!(
            [1, 2, 3, 4, 5, twin].map(calls),
            [1002, 1000, 1000, 1001, 1010, 10]
        );
        assert_eq!(
            [1, 2, 3, 4, 5, twin].map(untimed),
            [1002, 1000, 1000, 1000, 1010, 10]
        );
        let edge_calls = |caller: u32, callee: u32| -> u64 {
            c.edges()
                .iter()
                .filter(|e| (e.caller, e.callee) == (caller, callee))
                .map(|e| e.calls)
                .sum()
        };
        assert_eq!(edge_calls(0, 1), 1001);
        assert_eq!(edge_calls(4, 1), 1);
        assert_eq!(edge_calls(0, 4), 1001);
        assert_eq!(edge_calls(0, twin), 10);
        assert_eq!(c.unmatched_exits(), 0);
    }

    #[test]
    fn a_called_after_an_announced_tail_call_is_not_folded() {
        let mut log = ProbeLog::start(Collector::new(3));
        log.enter(0);
        log.called(1);
        log.enter(2);
        log.tail(2);
        log.called(1); // counted under frame 2, which it ends: a reading
        log.called(1); // under frame 0 again: a new event
        log.exit(0);
        assert_eq!(log.buffer.len(), 7);
        let (c, _) = log.finish();
        assert_eq!(c.functions()[1].calls, 3);
        assert_eq!(c.depth(), 0);
        assert_eq!(c.unmatched_exits(), 0);
    }

    #[test]
    fn frames_left_open_close_at_the_end() {
        let mut log = ProbeLog::start(Collector::new(2));
        log.enter(0);
        log.enter(1);
        let (c, end) = log.finish();
        assert_eq!(c.depth(), 0);
        assert!(end > 0);
        assert_eq!(c.functions()[0].inclusive as u64, c.root_inclusive() as u64);
    }
}
