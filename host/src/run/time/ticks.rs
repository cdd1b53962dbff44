//! Time mode's program-counter ticks: where the time of the short functions it counts but
//! does not time goes.
//!
//! A short function (see `wprof run --short-max`) has no clock probes: timing a few
//! instructions would mostly measure the probes. Its time is inside its caller's exact self
//! time. To tell the two apart, the program's thread is interrupted every period by its own
//! timer (as in sample mode, [`crate::run::interrupt`]); each tick records the interrupted
//! program counter and how many events the probe log held then (the log keeps that count in
//! a cell the handler reads). The collector, replaying the log, takes each tick at its place
//! among the events: the frame on top then is the timed activation running, and the
//! program counter says whether it ran its own instructions or those of a short function it
//! called. At the end each context's exact self time is shared between it and its short
//! callees' contexts in proportion to those ticks (see
//! [`crate::run::collector::Collector::share_sampled`]); ticks anywhere else (the probes'
//! own instructions, told apart by the module's `wprof.probe-code` section; their host
//! calls; the engine) say nothing and are not counted. What a tick costs the thread is
//! measured when the ticks start ([`measure_cost`]) and taken out of every later reading.
//!
//! While the program's thread waits (blocked in the host: reading its input, sleeping),
//! a tick would only wake it: the reader stops the timer when the thread used under a
//! quarter of the CPU for [`IDLE_CHECKS`] checks in a row, and starts it again at the first
//! check that finds it running (its CPU-time clock, read from the collector's thread).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wprof_agent::ProbeCode;

use crate::run::clock::{Clock, ThreadCpuClock};
use crate::run::code::address_map::ArtifactAddressMap;
use crate::run::code::map::{CodeMap, Running};
use crate::run::component::code::ComponentCode;
use crate::run::interrupt::{Session, Target};

/// The mean time between ticks: about 2,000 a second, each costing the thread ~15 µs in
/// the kernel on a virtual machine (3%, on every function alike, so shares do not move).
pub const PERIOD: Duration = Duration::from_micros(500);

/// How often the collector's thread reads the ticks when no events arrive: well inside
/// the [`crate::run::interrupt::SLOTS_KEPT`] ticks the handler keeps.
pub const READ_EVERY: Duration = Duration::from_millis(4);

/// Checks in a row, [`READ_EVERY`] or more apart, that find the program's thread using
/// under a quarter of the CPU before the timer stops.
pub const IDLE_CHECKS: u32 = 2;

/// The period while a tick's cost is measured (see [`measure_cost`]).
const MEASURE_PERIOD: Duration = Duration::from_micros(50);
/// Ticks whose cost is measured.
const MEASURED_TICKS: usize = 64;
/// The longest a measurement takes.
const MEASURE_AT_MOST: Duration = Duration::from_millis(20);

/// A gap between two readings of a loop that does nothing else (tens of nanoseconds
/// apart) longer than this is an interruption.
const INTERRUPTION_PS: u64 = 300_000;

/// What one tick costs the thread it interrupts, in picoseconds of `clock`: the median gap
/// an interruption leaves between two consecutive clock readings of a loop that does
/// nothing else (the kernel's entry, the handler, re-arming the timer, the return),
/// measured on the calling thread, the session's, at a faster period for a few
/// milliseconds (at that period nearly every interruption is a tick). Every tick's cost is
/// taken out of the times as a probe hand-over's is, so that the ticks, which land mostly
/// inside the probes, do not add to the frames around the probes. `0` if no tick came.
pub fn measure_cost(target: &Target, clock: &Clock) -> u64 {
    target.set_period(MEASURE_PERIOD);
    let mut gaps = Vec::with_capacity(MEASURED_TICKS);
    let started = clock.now_ps();
    let limit = MEASURE_AT_MOST.as_nanos() as u64 * 1000;
    let first = target.ticks();
    let mut last = clock.now_ps();
    while target.ticks() - first < MEASURED_TICKS as u64 && last - started < limit {
        let now = clock.now_ps();
        if now - last > INTERRUPTION_PS {
            gaps.push(now - last);
        }
        last = now;
    }
    target.set_period(PERIOD);
    if target.ticks() == first {
        return 0;
    }
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied().unwrap_or(0)
}

/// Starts the ticks on the calling thread, the program's: interrupts it, measures a
/// tick's cost on `clock`, and hands `read` (the probe log's collector) a reader of the
/// ticks that finds what ran by `code`. The ticks stop when the session is dropped. `None`
/// where the thread cannot be interrupted.
///
/// # Safety
///
/// `logged` (the probe log's event count, see the module docs) must stay valid for
/// 4-byte atomic loads until the session is dropped.
pub unsafe fn start(
    logged: *const u32,
    clock: Clock,
    code: TickCode,
    read: impl FnOnce(TickReader),
) -> Option<Session> {
    // SAFETY: as promised by the caller.
    let session = unsafe { Session::begin(logged, PERIOD) }?;
    // Measured once per process, on the first thread that ticks: a spawned thread's ticks
    // cost what the first thread's do, and each measurement spins for about 4 ms.
    static MEASURED_COST: AtomicU64 = AtomicU64::new(0);
    let cost = match MEASURED_COST.load(Ordering::Relaxed) {
        0 => {
            let cost = measure_cost(&session.target(), &clock);
            MEASURED_COST.store(cost, Ordering::Relaxed);
            cost
        }
        cost => cost,
    };
    tracing::debug!(cost_ns = cost / 1000, "time mode: a tick's cost");
    read(TickReader::new(
        session.target(),
        code,
        cost,
        ThreadCpuClock::of_this_thread(),
        clock,
    ));
    Some(session)
}

/// One tick: the number of events logged before it, and what ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub events: u64,
    pub running: Running,
}

/// Which machine addresses of a module's code are its probes' instructions: the module's
/// `wprof.probe-code` section, and its address map (from its serialized image when it was
/// loaded from one, else the engine's, copied once).
#[derive(Debug)]
pub struct ProbeFinder {
    code: ProbeCode,
    text: usize,
    map: AddressMap,
}

#[derive(Debug)]
enum AddressMap {
    Artifact(ArtifactAddressMap),
    /// The engine's map, copied at the first lookup (on the collector's thread, not the
    /// program's at its start) as (offset in `.text`, module offset or `u32::MAX` for
    /// none), sorted: 8 bytes an entry (about 32 MB for a 70 MB module).
    Engine(wasmtime::Module, std::cell::OnceCell<Vec<(u32, u32)>>),
}

impl ProbeFinder {
    /// The finder of `module`'s probes; `image` is its serialized form, if it was loaded
    /// from one.
    pub fn new(module: &wasmtime::Module, code: ProbeCode, image: Option<&std::fs::File>) -> Self {
        let map = match image.and_then(ArtifactAddressMap::open) {
            Some(map) => AddressMap::Artifact(map),
            None => AddressMap::Engine(module.clone(), std::cell::OnceCell::new()),
        };
        Self {
            code,
            text: module.text().as_ptr() as usize,
            map,
        }
    }

    /// Whether the instruction at `pc` is a probe's.
    fn is_probe(&self, pc: usize) -> bool {
        let at = pc.wrapping_sub(self.text);
        let offset = match &self.map {
            AddressMap::Artifact(map) => map.file_offset(at),
            AddressMap::Engine(module, copied) => {
                let entries = copied.get_or_init(|| {
                    module.address_map().map_or_else(Vec::new, |entries| {
                        entries
                            .filter_map(|(at, offset)| {
                                Some((u32::try_from(at).ok()?, offset.unwrap_or(u32::MAX)))
                            })
                            .collect()
                    })
                });
                let at = u32::try_from(at).unwrap_or(u32::MAX);
                let after = entries.partition_point(|&(start, _)| start <= at);
                after
                    .checked_sub(1)
                    .map(|i| entries[i].1)
                    .filter(|&o| o != u32::MAX)
            }
        };
        offset.is_some_and(|o| self.code.contains(o))
    }
}

/// What a tick's program counter says ran, in the collector's function ids.
#[derive(Debug)]
pub enum TickCode {
    /// A module: its functions' address ranges, and where its probes' instructions are.
    Module {
        code: CodeMap,
        probes: Option<ProbeFinder>,
    },
    /// A component: its core modules' code (which tells their probes apart itself), and by
    /// position among them, each module's first id in the collector (`None`: no probes).
    Component {
        code: ComponentCode,
        offsets: Vec<Option<u32>>,
    },
}

impl TickCode {
    /// What ran at `pc`.
    fn running(&self, pc: usize) -> Running {
        match self {
            TickCode::Module { code, probes } => match code.running(pc) {
                Running::Function(_) if probes.as_ref().is_some_and(|p| p.is_probe(pc)) => {
                    Running::Probe
                }
                running => running,
            },
            TickCode::Component { code, offsets } => match code.running(pc) {
                Some((module, Running::Function(id))) => {
                    match offsets.get(module).copied().flatten() {
                        Some(offset) => Running::Function(offset + id),
                        None => Running::Outside,
                    }
                }
                Some((_, running)) => running,
                None => Running::Outside,
            },
        }
    }
}

/// Reads the ticks of one session in order, widening the log's 32-bit event count.
#[derive(Debug)]
pub struct TickReader {
    target: Target,
    /// What each tick's program counter says ran (ticks in the probes' instructions say
    /// nothing of the program).
    code: TickCode,
    /// The next tick number to read.
    next: u64,
    /// The widened event count of the last tick read.
    events: u64,
    pending: VecDeque<Tick>,
    /// Ticks the handler overwrote before they were read.
    pub lost: u64,
    /// What one tick costs, in picoseconds (see [`measure_cost`]).
    pub cost_ps: u64,
    /// Stops the timer while the program's thread waits.
    idle: IdleWatch,
}

/// Whether the program's thread is waiting, from its CPU-time clock: the timer stops while
/// it is (see the module docs).
#[derive(Debug)]
struct IdleWatch {
    /// The program thread's CPU-time clock (none: the timer never stops).
    cpu: Option<ThreadCpuClock>,
    clock: Clock,
    /// The last check: (time, the thread's CPU time), in picoseconds.
    last: Option<(u64, u64)>,
    /// Checks in a row that found the thread waiting.
    idle: u32,
    paused: bool,
    /// How many times the timer stopped.
    pauses: u64,
}

impl IdleWatch {
    /// Looks again if [`READ_EVERY`] has passed since the last look, and stops or starts
    /// the timer.
    fn check(&mut self, target: &Target) {
        let Some(cpu) = self.cpu else {
            return;
        };
        let now = self.clock.now_ps();
        if let Some((then, _)) = self.last {
            if now.saturating_sub(then) < READ_EVERY.as_nanos() as u64 * 1000 {
                return;
            }
        }
        // A clock that can no longer be read stops no more: the timer runs on.
        let Some(used) = cpu.now_ps() else {
            self.cpu = None;
            return self.run(target);
        };
        let Some((then, used_then)) = self.last.replace((now, used)) else {
            return;
        };
        let waiting = used.saturating_sub(used_then).saturating_mul(4) < now - then;
        if !waiting {
            self.idle = 0;
            return self.run(target);
        }
        self.idle += 1;
        if self.idle >= IDLE_CHECKS && !self.paused {
            target.pause();
            self.paused = true;
            self.pauses += 1;
        }
    }

    /// The timer runs (again).
    fn run(&mut self, target: &Target) {
        if self.paused {
            target.resume();
            self.paused = false;
        }
    }
}

impl TickReader {
    /// A reader of the ticks from now on (those taken while the cost was measured are
    /// skipped); `thread` is the CPU-time clock of the thread the ticks interrupt, read
    /// against `clock` to stop the timer while that thread waits.
    pub fn new(
        target: Target,
        code: TickCode,
        cost_ps: u64,
        thread: Option<ThreadCpuClock>,
        clock: Clock,
    ) -> Self {
        Self {
            idle: IdleWatch {
                cpu: thread,
                clock,
                last: None,
                idle: 0,
                paused: false,
                pauses: 0,
            },
            target,
            code,
            next: target.ticks() + 1,
            events: 0,
            pending: VecDeque::new(),
            lost: 0,
            cost_ps,
        }
    }

    /// How many times the timer stopped while the program's thread waited.
    pub fn pauses(&self) -> u64 {
        self.idle.pauses
    }

    /// Reads every tick recorded since the last call, and stops or starts the timer as the
    /// program's thread waits or runs.
    pub fn catch_up(&mut self) {
        self.idle.check(&self.target);
        let last = self.target.ticks();
        while self.next <= last {
            match self.target.at(self.next) {
                Some(at) => {
                    self.events = widen(self.events, at.cell);
                    self.pending.push_back(Tick {
                        events: self.events,
                        running: self.code.running(at.pc),
                    });
                }
                None => self.lost += 1,
            }
            self.next += 1;
        }
    }

    /// The next tick taken before `events` events were logged, if any.
    pub fn next_before(&mut self, events: u64) -> Option<Tick> {
        if self.pending.front()?.events <= events {
            self.pending.pop_front()
        } else {
            None
        }
    }

    /// Where the next tick goes: the number of events logged before it.
    pub fn next_place(&self) -> Option<u64> {
        self.pending.front().map(|t| t.events)
    }
}

/// The full count whose low 32 bits are `low`, given the full count `last` of an earlier
/// tick: the count only grows, by less than 2^32 between two ticks.
fn widen(last: u64, low: u32) -> u64 {
    last + u64::from(low.wrapping_sub(last as u32))
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn the_event_count_widens_across_wraps() {
        assert_eq!(widen(0, 5), 5);
        assert_eq!(widen(5, 5), 5);
        assert_eq!(widen(0xffff_fff0, 0x10), 0x1_0000_0010);
        assert_eq!(widen(0x3_ffff_ffff, 2), 0x4_0000_0002);
    }
}
