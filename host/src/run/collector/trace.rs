//! Time mode's call trace (`wprof run --trace`): each frame, as it closes, becomes a call
//! with its start and end in a bounded ring (see [`crate::profile::trace`]).
//!
//! # Accuracy
//!
//! The trace's clock is the probes' clock with their calibrated cost taken out, as the
//! profile's times are: each entry takes out the caller's share of a call's probe cost
//! (`outside`) before its start is read and the callee's own (`inside`) after, each call
//! counted but not timed takes out its `called` cost. A call's duration is thus its
//! inclusive time as the profile reckons it, and the trace's end is about the profile's
//! total. Where the estimate exceeds what the clock measured, no more is taken out than
//! keeps the times in order.

use super::stack::Frame;
use super::totals::ProbeOverhead;
use super::Collector;
use crate::profile::trace::{CallTrace, TracedCall};

/// What a trace keeps (see [`crate::settings::TraceSettings`]).
#[derive(Debug)]
pub struct Tracer {
    calls: CallTrace,
    /// Calls at most this many frames deep are kept (1: the outermost only).
    max_depth: u32,
    /// Per function id, whether its calls are kept; `None`: every function's.
    selected: Option<Vec<bool>>,
    /// The probes' cost taken out of the clock so far.
    taken_out: u64,
    /// The latest time given out: times never go back.
    latest: u64,
}

impl Tracer {
    /// A trace keeping the latest `capacity` calls at most `max_depth` frames deep, of the
    /// functions `selected` says (by id; `None`: all).
    pub fn new(capacity: usize, max_depth: u32, selected: Option<Vec<bool>>) -> Self {
        Self {
            calls: CallTrace::new(capacity),
            max_depth,
            selected,
            taken_out: 0,
            latest: 0,
        }
    }

    /// The time `now` (raw) on the trace's clock, having taken out `cost` more.
    fn stamp(&mut self, now: u64, cost: u64) -> u64 {
        self.taken_out += cost;
        let t = now.saturating_sub(self.taken_out);
        if t < self.latest {
            // The estimate ran ahead of the clock: take out only what keeps order.
            self.taken_out = now.saturating_sub(self.latest);
            return self.latest;
        }
        self.latest = t;
        t
    }

    /// A frame is entered at `now`: its start on the trace's clock.
    fn entered(&mut self, now: u64, o: &ProbeOverhead) -> u64 {
        let start = self.stamp(now, o.outside);
        self.taken_out += o.inside;
        start
    }

    /// A frame closes at `now` with `depth` frames below it.
    fn closed(&mut self, frame: &Frame, now: u64, depth: usize) {
        let end = self.stamp(now, 0).max(frame.trace_start);
        let wanted = (depth as u64) < u64::from(self.max_depth)
            && self
                .selected
                .as_ref()
                .is_none_or(|s| s.get(frame.id as usize).copied().unwrap_or(false));
        if wanted {
            self.calls.push(TracedCall {
                id: frame.id,
                depth: depth as u32,
                track: frame.g,
                start_ps: frame.trace_start,
                end_ps: end,
            });
        }
    }
}

impl Collector {
    /// Keeps a trace of the calls (time mode).
    pub fn with_trace(mut self, tracer: Tracer) -> Self {
        self.trace = Some(Box::new(tracer));
        self
    }

    /// The trace kept, once the run is over.
    pub fn take_trace(&mut self) -> Option<CallTrace> {
        self.trace.take().map(|t| t.calls)
    }

    /// A frame entered at `now`: its start on the trace's clock (0 without a trace).
    #[inline]
    pub(super) fn trace_entered(&mut self, now: u64) -> u64 {
        let overhead = self.overhead;
        self.trace.as_mut().map_or(0, |t| t.entered(now, &overhead))
    }

    /// A call counted, not timed: its probe's cost leaves the trace's clock.
    #[inline]
    pub(super) fn trace_called(&mut self, calls: u64) {
        if let Some(t) = &mut self.trace {
            t.taken_out += calls * self.overhead.called;
        }
    }

    /// `frame` closed at `now`, the frames below it still open.
    #[inline]
    pub(super) fn trace_closed(&mut self, frame: &Frame, now: u64) {
        let depth = self.stack.len();
        if let Some(t) = &mut self.trace {
            t.closed(frame, now, depth);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids_and_times(c: &mut Collector) -> Vec<(u32, u32, u64, u64)> {
        c.take_trace()
            .unwrap()
            .calls()
            .map(|t| (t.id, t.depth, t.start_ps, t.end_ps))
            .collect()
    }

    #[test]
    fn calls_end_in_order_with_the_probes_cost_taken_out() {
        let overhead = ProbeOverhead {
            inside: 10,
            outside: 20,
            called: 5,
        };
        let mut c = Collector::new(3)
            .with_overhead(overhead)
            .with_trace(Tracer::new(100, u32::MAX, None));
        c.enter_at(0, 1000); // start 1000 - 20 = 980, then 30 out
        c.enter_at(1, 1100); // 1100 - 50 = 1050, then 60 out
        c.called_at(2, 1150); // 65 out
        c.exit_at(1, 1200); // 1200 - 65 = 1135
        c.exit_at(0, 1300); // 1235
        assert_eq!(
            ids_and_times(&mut c),
            [(1, 1, 1050, 1135), (0, 0, 980, 1235)]
        );
    }

    #[test]
    fn the_trace_agrees_with_the_profile_on_inclusive_time() {
        let overhead = ProbeOverhead {
            inside: 10,
            outside: 20,
            called: 0,
        };
        let mut c = Collector::new(2)
            .with_overhead(overhead)
            .with_trace(Tracer::new(100, u32::MAX, None));
        c.enter_at(0, 1000);
        for i in 0..3 {
            c.enter_at(1, 2000 + i * 1000);
            c.exit_at(1, 2500 + i * 1000);
        }
        c.exit_at(0, 9000);
        let calls = ids_and_times(&mut c);
        let outer = calls.last().unwrap();
        assert_eq!(outer.0, 0);
        assert_eq!((outer.3 - outer.2) as i64, c.functions()[0].inclusive);
        let inner: u64 = calls[..3].iter().map(|t| t.3 - t.2).sum();
        assert_eq!(inner as i64, c.functions()[1].inclusive);
    }

    #[test]
    fn an_estimate_above_the_clock_never_turns_time_back() {
        let overhead = ProbeOverhead {
            inside: 500,
            outside: 500,
            called: 0,
        };
        let mut c = Collector::new(2)
            .with_overhead(overhead)
            .with_trace(Tracer::new(100, u32::MAX, None));
        c.enter_at(0, 1000);
        c.enter_at(1, 1010);
        c.exit_at(1, 1020);
        c.exit_at(0, 1030);
        let calls = ids_and_times(&mut c);
        for t in &calls {
            assert!(t.2 <= t.3, "{calls:?}");
        }
        // The inner call lies within the outer one.
        assert!(
            calls[1].2 <= calls[0].2 && calls[0].3 <= calls[1].3,
            "{calls:?}"
        );
    }

    #[test]
    fn depth_and_function_filters_and_unwinding() {
        let mut c =
            Collector::new(3).with_trace(Tracer::new(100, 2, Some(vec![true, true, false])));
        c.enter_at(0, 0);
        c.enter_with_token_at(1, 7, 10);
        c.enter_at(1, 20); // depth 2: left out
        c.enter_at(2, 30); // not selected
        c.unwind_to_token_at(7, 40); // closes 2 and the inner 1 at 40
        c.exit_at(1, 50);
        c.exit_at(0, 60);
        assert_eq!(ids_and_times(&mut c), [(1, 1, 10, 50), (0, 0, 0, 60)]);
    }

    #[test]
    fn no_trace_without_asking() {
        let mut c = Collector::new(1);
        c.enter_at(0, 0);
        c.exit_at(0, 1);
        assert!(c.take_trace().is_none());
    }
}
