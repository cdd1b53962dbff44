//! Sample mode's sampler: a thread that, while the program runs, wakes at a fixed period
//! and charges the time since its previous wake to where the program is.
//!
//! Where the program is takes two facts: the module's current-node cell (see
//! [`wprof_agent::ContextArena::CURRENT`]), which names the calling context the probes last
//! entered, and the program counter of the thread running it, which names the function
//! really running (the probes store the cell at a function's entry, not when a call
//! returns to it, and wprof's node finder runs before the entry's store). A timer of the
//! program's thread records both at every tick ([`crate::run::interrupt`]); the sampler
//! reads the ticks since its previous reading. While the cell names an import (the host
//! runs, perhaps blocked in a system call) for a few readings, the sampler stops the timer
//! and the cell alone decides, as it does where no timer can be had.
//! [`crate::run::inline::attribution`] turns the two facts into a node of the tree.
//!
//! Every picosecond between the start and the end of the run is charged to exactly one
//! tick or reading: an interval goes to the ticks taken in it, the usual sampling estimate. Calls are never sampled: the module counts them exactly.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use wprof_agent::ContextArena;

use crate::run::clock::{Clock, ThreadCpuClock};
use crate::run::code::map::{CodeMap, Running};
use crate::run::inline::scripts::{ScriptStacks, ScriptTicks, Scripted};
use crate::run::interrupt::{Target, Where};

use crate::settings::sample_period::SamplePeriod;
pub use crate::settings::sample_period::DEFAULT_PERIOD;

/// Module time waits this many readings for a tick; then the cell read alone takes it.
const PATIENCE: u64 = 16;

/// After this many readings in a row outside the module's code (the program waits in the
/// host), the thread's timer is stopped until the module runs again: a program that sleeps
/// is not woken every period.
const PAUSE_AFTER: u32 = 8;

/// Where the module keeps its current node: four bytes of its tree memory, a 32-bit
/// memory inside a full 4 GiB reservation (see [`crate::run::engine::MEMORY_RESERVATION`]), so
/// the address stays valid, however the memory grows, for as long as the store owns it;
/// and how many bytes of that memory the sampler may read (the nodes the cell names).
#[derive(Debug, Clone, Copy)]
pub struct CurrentCell {
    cell: *const u32,
    /// A size the memory has at least (see [`crate::run::adaptive::live_tree::prepare`]).
    readable: u64,
}

// SAFETY: the cell is only read, with atomic loads, while the store owning the memory is
// alive (the sampler runs inside a scope the run does not leave before joining it).
unsafe impl Send for CurrentCell {}

impl CurrentCell {
    /// The cell of the tree memory whose data starts at `memory` and holds `readable`
    /// bytes.
    ///
    /// # Safety
    ///
    /// `memory` must point to the data of a linear memory holding at least `readable`
    /// bytes, and at least `ContextArena::CURRENT + 4`, whose base never moves, and the
    /// cell must not be read after its store is dropped.
    pub unsafe fn new(memory: *const u8, readable: u64) -> Self {
        CurrentCell {
            cell: memory.wrapping_add(ContextArena::CURRENT as usize).cast(),
            readable,
        }
    }

    /// The cell's address, for [`crate::run::interrupt::Session::begin`].
    pub fn as_ptr(self) -> *const u32 {
        self.cell
    }

    fn read(self) -> u32 {
        Self::load(self.cell)
    }

    /// The function id of the node at `node`, if it names one; `None` for a field past the
    /// memory's size.
    fn function_of(self, node: u32) -> Option<u32> {
        let at = node.checked_add(ContextArena::FUNCTION)?;
        if node < ContextArena::ROOT + 32
            || !at.is_multiple_of(4)
            || u64::from(at) + 4 > self.readable
        {
            return None;
        }
        let base = self
            .cell
            .cast::<u8>()
            .wrapping_sub(ContextArena::CURRENT as usize);
        Some(
            (Self::load(base.wrapping_add(at as usize).cast()) & !ContextArena::TIMED)
                .checked_sub(1),
        )
        .flatten()
    }

    fn load(at: *const u32) -> u32 {
        // SAFETY: aligned (wasm memories are page-aligned, fields checked 4-aligned), in
        // bounds (the cell, or a field checked to lie inside the size the memory has) and
        // alive (see `new`); the module writes with plain aligned 4-byte stores, which an
        // atomic load never observes torn.
        unsafe { AtomicU32::from_ptr(at.cast_mut()).load(Ordering::Relaxed) }
    }
}

/// Where the sampler hands a copy of its readings to whoever asked (after its next
/// reading).
/// (A component's sampler hands over its readings per module.)
#[derive(Debug, Default)]
pub struct SampleDesk<T = Samples> {
    wanted: AtomicBool,
    reply: Mutex<Option<mpsc::SyncSender<T>>>,
}

impl<T: Clone> SampleDesk<T> {
    /// The sampler, after each reading: hands `samples` over if someone asked.
    pub fn offer(&self, samples: &T) {
        if !self.wanted.swap(false, Ordering::AcqRel) {
            return;
        }
        if let Some(reply) = self.reply.lock().ok().and_then(|mut r| r.take()) {
            let _ = reply.try_send(samples.clone());
        }
    }

    /// A copy of the sampler's readings, within `patience` (`None`: the sampler has
    /// stopped).
    pub(crate) fn ask(&self, patience: Duration) -> Option<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        *self.reply.lock().ok()? = Some(reply);
        self.wanted.store(true, Ordering::Release);
        answer.recv_timeout(patience).ok()
    }
}

/// A reading: the current-node cell and, when the thread answered, what ran.
pub type Reading = (u32, Option<Running>);

/// Time charged per reading, in picoseconds, and how the readings went.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Picoseconds per (cell, what ran); `None`: the cell alone decided.
    pub time: HashMap<Reading, u64>,
    /// Picoseconds per (cell, program counter) of the readings whose program counter was
    /// in one of the module's functions, until [`Samples::resolve`] says whether in its
    /// original instructions or in a probe, and moves them to `time`.
    pub located: HashMap<(u32, usize), u64>,
    /// The ticks that walked an interpreted language's frames (see
    /// [`crate::run::inline::scripts`]): their time (part of `time` as well) and number
    /// per reading and language stack ([`ScriptStacks::stacks`], by index + 1).
    pub scripted: HashMap<(Reading, u32), Scripted>,
    /// The same, per (cell, program counter) and language stack, until
    /// [`Samples::resolve`] moves them to `scripted`.
    pub located_scripted: HashMap<((u32, usize), u32), Scripted>,
    /// The language stacks the ticks walked, once the sampler has stopped.
    pub script_stacks: Option<std::sync::Arc<ScriptStacks>>,
    /// Readings taken.
    pub readings: u64,
    /// Ticks of the program's thread read, each with its program counter.
    pub answered: u64,
    /// Picoseconds during which every live switch was off: charged to no context, and not
    /// sampled (the timer sleeps, so that a program with every probe off runs as without
    /// wprof).
    pub off_ps: u64,
}

impl Samples {
    /// Moves the `located` readings to `time`: those at a program counter in `probes` as
    /// wprof's code, the others as the function `code` says ran there.
    pub fn resolve(&mut self, code: &CodeMap, probes: &HashSet<usize>) {
        let running = |pc: usize| match probes.contains(&pc) {
            true => Running::Probe,
            false => code.running(pc),
        };
        for ((cell, pc), ps) in self.located.drain() {
            *self.time.entry((cell, Some(running(pc)))).or_default() += ps;
        }
        for (((cell, pc), stack), figures) in self.located_scripted.drain() {
            let running = running(pc);
            self.scripted
                .entry(((cell, Some(running)), stack))
                .or_default()
                .add(figures);
        }
    }

    /// The program counters of the `located` readings, sorted, each once.
    pub fn located_pcs(&self) -> Vec<usize> {
        let mut pcs: Vec<usize> = self.located.keys().map(|&(_, pc)| pc).collect();
        pcs.sort_unstable();
        pcs.dedup();
        pcs
    }
}

/// The program counter side of sampling: whom to ask and how to read the answers.
#[derive(Debug, Clone, Copy)]
pub struct Asking<'a> {
    /// The thread running the program.
    pub target: Target,
    /// The module's compiled code.
    pub code: &'a CodeMap,
    /// Live probes: the switches. A reading in a function whose switch is off gets its cell
    /// tagged (bit 0): that function is part of the cell's context, whatever nodes it has
    /// from when it was on (see [`crate::run::inline::attribution`]).
    pub switches: Option<&'a crate::run::switches::Switchboard>,
}

/// Who else learns where the program is, on the sampler's thread (adaptive mode's walker).
pub trait Watch {
    /// A reading found function `function` running for `ps` picoseconds while the cell
    /// named `cell`.
    fn ran(&mut self, cell: u32, function: u32, ps: u64);
    /// After each reading: the clock's time.
    fn tick(&mut self, now_ps: u64);
}

/// Module time read while no tick had come yet (the timer was resumed, or is late): it goes
/// to the next ticks.
#[derive(Default)]
struct Owed {
    ps: u64,
    /// The cell read when it began, which gets it if no tick comes in time.
    cell: u32,
    readings: u64,
}

/// When and how long the sampler reads (see [`sample`]).
#[derive(Debug, Clone, Copy)]
pub struct Timing<'a> {
    /// The clock it reads.
    pub clock: &'a Clock,
    /// The time between two readings (and, when asking, between two ticks).
    pub period: SamplePeriod,
    /// Set when the program has ended.
    pub stop: &'a AtomicBool,
    /// When the program started, on `clock`.
    pub started: u64,
    /// A threaded program: the program thread's CPU-time clock and its reading when the
    /// program started. Each reading then charges the CPU time the thread used since the
    /// previous one instead of the time that passed, so that a thread waiting for another
    /// (in `memory.atomic.wait`, or in the host) is charged nothing, as `perf` sees it.
    pub cpu: Option<(ThreadCpuClock, u64)>,
}

/// Reads where the program is every `period` until `stop` is set, then once more; the first
/// interval starts at `started` (a [`Clock::now_ps`] reading taken when the program started,
/// so that a sampling thread scheduled late loses no time). Whoever sets `stop` should unpark
/// the sampling thread, which then takes its last reading at once instead of at the end of
/// its period. `watch` learns of every located tick and every reading; `desk` (`--serve`)
/// gets a copy of the readings so far when someone asked.
///
/// Each reading's interval goes, in equal parts, to the ticks of the program's thread since
/// the previous reading (see [`crate::run::interrupt`]); with none, to the cell read then
/// when it names an import or nothing (the timer sleeps while the host waits), or to the next
/// ticks when it names one of the module's functions (the timer is late).
pub fn sample(
    cell: CurrentCell,
    asking: Option<Asking<'_>>,
    timing: Timing<'_>,
    mut watch: Option<&mut dyn Watch>,
    desk: Option<&SampleDesk>,
) -> Samples {
    let Timing {
        clock,
        period,
        stop,
        started,
        cpu,
    } = timing;
    let mut samples = Samples::default();
    let mut last = started;
    let mut last_cpu = cpu.map_or(0, |(_, at)| at);
    let mut ticks = asking.map(|a| Ticks::new(a, cell));
    let mut now_period = period.base;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let target = ticks.as_ref().map(|t| t.asking.target);
        let period = period_now(period, clock, started, &mut now_period, target);
        if !stopping {
            let idle = ticks.as_ref().is_some_and(Ticks::all_off);
            std::thread::park_timeout(if idle {
                period.max(ALL_OFF_NAP)
            } else {
                period
            });
        }
        let now = clock.now_ps();
        let mut interval = now.saturating_sub(last);
        last = now;
        // With the CPU clock: the thread used under a quarter of the time that passed, so
        // it mostly waited.
        let mut waiting = false;
        if let Some((thread, _)) = cpu {
            let now_cpu = thread.now_ps().unwrap_or(last_cpu);
            let used = now_cpu.saturating_sub(last_cpu);
            waiting = used.saturating_mul(4) < interval;
            interval = used;
            last_cpu = now_cpu;
        }
        samples.readings += 1;
        let node = cell.read();
        match ticks.as_mut() {
            None => *samples.time.entry((node, None)).or_default() += interval,
            Some(t) => t.reading(
                &mut samples,
                ReadingAt {
                    node,
                    interval,
                    waiting,
                    stopping,
                },
                watch.as_deref_mut(),
            ),
        }
        if let Some(watch) = watch.as_deref_mut() {
            watch.tick(now);
        }
        if let Some(desk) = desk {
            desk.offer(&samples);
        }
        if stopping {
            let scripts = ticks.and_then(|t| t.scripts).map(ScriptTicks::finish);
            samples.script_stacks = scripts.map(std::sync::Arc::new);
            return samples;
        }
    }
}

/// The period `period` has reached since `started` (on `clock`); when it differs from
/// `current` (then updated), the thread's timer `target`, if any, is told.
pub(crate) fn period_now(
    period: SamplePeriod,
    clock: &Clock,
    started: u64,
    current: &mut Duration,
    target: Option<Target>,
) -> Duration {
    let running = Duration::from_nanos(clock.now_ps().saturating_sub(started) / 1000);
    let now = period.at(running);
    if now != *current {
        *current = now;
        if let Some(target) = target {
            target.set_period(now);
        }
    }
    now
}

/// How long the sampler sleeps between readings while every live switch is off and the
/// timer sleeps: nothing is being profiled, and waking 5,000 times a second takes a core
/// from a program that has threads or shares the machine. A switch turned on is noticed
/// within this (its time until then counts as off).
const ALL_OFF_NAP: Duration = Duration::from_millis(5);

/// The sampler's side of the program thread's ticks: which it has read, the time owed to
/// the next ones, and whether the timer sleeps.
struct Ticks<'a> {
    asking: Asking<'a>,
    cell: CurrentCell,
    /// The last tick read.
    read: u64,
    /// The ticks of the current reading, each with its language stack (0: none; kept to
    /// reuse its allocation).
    found: Vec<(Where, u32)>,
    /// Once the thread's ticks walk an interpreted language's frames.
    scripts: Option<ScriptTicks>,
    owed: Owed,
    /// Readings in a row that found the cell outside the module's code.
    outside: u32,
    paused: bool,
}

impl<'a> Ticks<'a> {
    fn new(asking: Asking<'a>, cell: CurrentCell) -> Self {
        Ticks {
            read: asking.target.ticks(),
            asking,
            cell,
            found: Vec::new(),
            scripts: None,
            owed: Owed::default(),
            outside: 0,
            paused: false,
        }
    }

    /// Whether the timer sleeps because every live switch is off.
    fn all_off(&self) -> bool {
        self.paused && self.asking.switches.is_some_and(|b| b.all_off())
    }

    /// Charges a reading's `interval`, the cell then naming `node` (see [`sample`]).
    fn reading<'w>(
        &mut self,
        samples: &mut Samples,
        reading: ReadingAt,
        watch: Option<&mut (dyn Watch + 'w)>,
    ) {
        let ReadingAt {
            node,
            interval,
            waiting,
            stopping,
        } = reading;
        let target = self.asking.target;
        let last = target.ticks();
        self.found.clear();
        if self.scripts.is_none() {
            self.scripts = target.language().map(ScriptTicks::new);
        }
        for tick in self.read + 1..=last {
            let Some(at) = target.at(tick) else {
                continue;
            };
            let stack = match self.scripts.as_mut() {
                Some(scripts) => scripts.stack_at(target, tick, self.asking.code.running(at.pc)),
                None => 0,
            };
            self.found.push((at, stack));
        }
        self.read = last;
        let in_module = self
            .cell
            .function_of(node)
            .is_some_and(|f| f >= self.asking.code.imports());
        let all_off = self.asking.switches.is_some_and(|b| b.all_off());
        if self.found.is_empty() && all_off {
            samples.off_ps += interval + std::mem::take(&mut self.owed).ps;
        } else if !self.found.is_empty() {
            let ps = interval + std::mem::take(&mut self.owed).ps;
            charge(samples, self.asking, &self.found, ps, watch);
        } else if in_module && !stopping && self.owed.readings < PATIENCE {
            if self.owed.readings == 0 {
                self.owed.cell = node;
            }
            self.owed.ps += interval;
            self.owed.readings += 1;
        } else {
            let owed = std::mem::take(&mut self.owed);
            if owed.ps > 0 {
                *samples.time.entry((owed.cell, None)).or_default() += owed.ps;
            }
            *samples.time.entry((node, None)).or_default() += interval;
        }
        // While the host waits, or the thread (its CPU clock says), the timer would only
        // wake it; while every switch is off, nothing is profiled.
        if in_module && !waiting && !all_off {
            self.outside = 0;
            if self.paused {
                target.resume();
                self.paused = false;
            }
        } else {
            self.outside += 1;
            if (all_off || self.outside >= PAUSE_AFTER) && !self.paused {
                target.pause();
                self.paused = true;
            }
        }
    }
}

/// One reading of the sampler.
struct ReadingAt {
    /// The node the cell named.
    node: u32,
    /// The time to charge: since the previous reading, or the CPU time the thread used.
    interval: u64,
    /// The thread used little of the CPU since the previous reading (a threaded program).
    waiting: bool,
    /// The program has ended: the last reading.
    stopping: bool,
}

/// Charges `ps` picoseconds to `found`, the ticks of one interval (each with its language
/// stack), in equal parts.
fn charge<'w>(
    samples: &mut Samples,
    asking: Asking<'_>,
    found: &[(Where, u32)],
    ps: u64,
    mut watch: Option<&mut (dyn Watch + 'w)>,
) {
    let count = found.len() as u64;
    for (i, (at, stack)) in found.iter().enumerate() {
        // The remainder goes to the last, so the parts add up to the interval.
        let part = ps / count + if i + 1 == found.len() { ps % count } else { 0 };
        samples.answered += 1;
        match asking.code.running(at.pc) {
            Running::Function(f) => {
                if let Some(watch) = watch.as_deref_mut() {
                    watch.ran(at.cell, f, part);
                }
                let off = asking.switches.is_some_and(|b| b.reads_off(f));
                let cell = at.cell | u32::from(off);
                *samples.located.entry((cell, at.pc)).or_default() += part;
                if *stack != 0 {
                    let scripted = samples.located_scripted.entry(((cell, at.pc), *stack));
                    scripted.or_default().add(Scripted::tick(part));
                }
            }
            running => {
                *samples.time.entry((at.cell, Some(running))).or_default() += part;
                if *stack != 0 {
                    let scripted = samples.scripted.entry(((at.cell, Some(running)), *stack));
                    scripted.or_default().add(Scripted::tick(part));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_read_only_inside_the_memorys_size() {
        // A node at 64 naming function 2; what a cell may name past the memory's end.
        let memory: Box<[AtomicU32; 64]> = Box::new([const { AtomicU32::new(0) }; 64]);
        memory[(64 + ContextArena::FUNCTION) as usize / 4].store(3, Ordering::Relaxed);
        // SAFETY: the box outlives the cells and is never moved; each size is at most its.
        let (whole, short) = unsafe {
            let base = memory.as_ptr().cast();
            (CurrentCell::new(base, 256), CurrentCell::new(base, 80))
        };
        assert_eq!(whole.function_of(64), Some(2));
        // Its field lies past what the memory holds: not read.
        assert_eq!(short.function_of(64), None);
        assert_eq!(whole.function_of(240), None);
        assert_eq!(whole.function_of(u32::MAX - 8), None);
        // Misaligned (not a node's or a slot's address).
        assert_eq!(whole.function_of(65), None);
    }

    #[test]
    fn every_interval_goes_to_the_node_read_at_its_end() {
        // The start of a tree memory: the cell at byte 8.
        let memory: Box<[AtomicU32; 16]> = Box::new([const { AtomicU32::new(0) }; 16]);
        let cell = &memory[ContextArena::CURRENT as usize / 4];
        cell.store(7, Ordering::Relaxed);
        let clock = Clock::new();
        let stop = AtomicBool::new(false);
        let started = clock.now_ps();
        let samples = std::thread::scope(|s| {
            // SAFETY: the box outlives the scope and is never moved.
            let reader = unsafe { CurrentCell::new(memory.as_ptr().cast(), 64) };
            let (clock, stop) = (&clock, &stop);
            let sampler = s.spawn(move || {
                sample(
                    reader,
                    None,
                    Timing {
                        clock,
                        period: SamplePeriod::fixed(Duration::from_micros(50)),
                        stop,
                        started,
                        cpu: None,
                    },
                    None,
                    None,
                )
            });
            std::thread::sleep(Duration::from_millis(5));
            cell.store(9, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
            stop.store(true, Ordering::Release);
            sampler.thread().unpark();
            sampler.join().unwrap()
        });
        let elapsed = clock.now_ps() - started;
        let total: u64 = samples.time.values().sum();
        assert!(total <= elapsed, "{total} > {elapsed}");
        // The last reading comes after the switch to 9; no other value was ever there.
        assert!(samples.time.contains_key(&(9, None)));
        assert!(samples
            .time
            .keys()
            .all(|k| [(7, None), (9, None)].contains(k)));
        assert!(samples.readings >= 1);
        assert_eq!(samples.answered, 0);
    }

    #[test]
    fn with_the_cpu_clock_a_waiting_thread_is_charged_nothing() {
        let memory: Box<[AtomicU32; 16]> = Box::new([const { AtomicU32::new(0) }; 16]);
        let cell = &memory[ContextArena::CURRENT as usize / 4];
        cell.store(7, Ordering::Relaxed);
        let clock = Clock::new();
        let stop = AtomicBool::new(false);
        let started = clock.now_ps();
        let thread = ThreadCpuClock::of_this_thread().expect("Linux has thread CPU clocks");
        let cpu_at_start = thread.now_ps().unwrap();
        let cpu = Some((thread, cpu_at_start));
        let samples = std::thread::scope(|s| {
            // SAFETY: the box outlives the scope and is never moved.
            let reader = unsafe { CurrentCell::new(memory.as_ptr().cast(), 64) };
            let (clock, stop) = (&clock, &stop);
            let sampler = s.spawn(move || {
                let timing = Timing {
                    clock,
                    period: SamplePeriod::fixed(Duration::from_micros(100)),
                    stop,
                    started,
                    cpu,
                };
                sample(reader, None, timing, None, None)
            });
            // Waiting as node 7, then working as node 9.
            std::thread::sleep(Duration::from_millis(20));
            cell.store(9, Ordering::Relaxed);
            let spin = std::time::Instant::now();
            let mut x = 0u64;
            while spin.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            stop.store(true, Ordering::Release);
            sampler.thread().unpark();
            sampler.join().unwrap()
        });
        let waited = samples.time.get(&(7, None)).copied().unwrap_or(0);
        let worked = samples.time.get(&(9, None)).copied().unwrap_or(0);
        assert!(waited < worked, "waiting {waited} ps, working {worked} ps");
        let used = thread.now_ps().unwrap() - cpu_at_start;
        assert!(waited + worked <= used, "{waited} + {worked} > {used}");
    }
}
