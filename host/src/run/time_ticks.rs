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
//! host calls, the engine) say nothing and are not counted.

use std::collections::VecDeque;
use std::time::Duration;

use crate::run::code_map::{CodeMap, Running};
use crate::run::interrupt::Target;

/// The mean time between ticks: about 2,000 a second, each costing the thread ~15 µs in
/// the kernel on a virtual machine (3%, on every function alike, so shares do not move).
pub const PERIOD: Duration = Duration::from_micros(500);

/// How often the collector's thread reads the ticks when no events arrive: well inside
/// the [`crate::run::interrupt::SLOTS_KEPT`] ticks the handler keeps.
pub const READ_EVERY: Duration = Duration::from_millis(4);

/// One tick: the number of events logged before it, and what ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub events: u64,
    pub running: Running,
}

/// Reads the ticks of one session in order, widening the log's 32-bit event count.
#[derive(Debug)]
pub struct TickReader {
    target: Target,
    code: CodeMap,
    /// The next tick number to read.
    next: u64,
    /// The widened event count of the last tick read.
    events: u64,
    pending: VecDeque<Tick>,
    /// Ticks the handler overwrote before they were read.
    pub lost: u64,
}

impl TickReader {
    pub fn new(target: Target, code: CodeMap) -> Self {
        Self {
            target,
            code,
            next: 1,
            events: 0,
            pending: VecDeque::new(),
            lost: 0,
        }
    }

    /// Reads every tick recorded since the last call.
    pub fn catch_up(&mut self) {
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
