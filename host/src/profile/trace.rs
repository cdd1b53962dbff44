//! A call trace: the last calls of a run, each with when it started and ended, kept in a
//! bounded ring per thread, and written as Chrome's trace-event JSON (read by Perfetto,
//! Chrome's DevTools and `chrome://tracing`, speedscope).
//!
//! The ring holds calls as they end, so a call is kept whole or not at all, and the
//! outermost calls, which end last, are the last ones it would lose. Every call the ring
//! lets go of is counted ([`CallTrace::dropped`]): a trace never loses calls silently.

use std::collections::VecDeque;
use std::io::Write;

/// One call, in picoseconds since the run started (the probes' cost taken out, as in the
/// profile's times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracedCall {
    /// The function's id.
    pub id: u32,
    /// Frames open below it when it ran (0: called by the engine).
    pub depth: u32,
    /// The track it ran on: 0, or in a Go module the goroutine (its `g`), so that each
    /// goroutine's calls nest on a track of their own.
    pub track: u32,
    /// When it started.
    pub start_ps: u64,
    /// When it ended (never before it started).
    pub end_ps: u64,
}

/// The calls of one thread, the latest [`CallTrace::capacity`] of them.
#[derive(Debug, Clone)]
pub struct CallTrace {
    calls: VecDeque<TracedCall>,
    capacity: usize,
    dropped: u64,
}

impl CallTrace {
    /// An empty trace that keeps at most `capacity` calls (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            // Grown as calls come: most runs trace far fewer calls than the bound.
            calls: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity,
            dropped: 0,
        }
    }

    /// Keeps `call`; the oldest call kept goes when the ring is full.
    #[inline]
    pub fn push(&mut self, call: TracedCall) {
        if self.calls.len() == self.capacity {
            self.calls.pop_front();
            self.dropped += 1;
        }
        self.calls.push_back(call);
    }

    /// The calls kept, in the order they ended.
    pub fn calls(&self) -> impl ExactSizeIterator<Item = &TracedCall> {
        self.calls.iter()
    }

    /// Calls kept.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// No call kept.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The most calls kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Calls recorded and let go of to make room for later ones.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// What a trace file says besides its calls.
#[derive(Debug, Clone)]
pub struct TraceHeader<'a> {
    /// The process shown (the module's file name).
    pub process: &'a str,
    /// The process id shown.
    pub pid: u32,
    /// Facts stored under `otherData` (module, blake3, counts), as strings.
    pub facts: Vec<(&'a str, String)>,
}

/// Writes `trace` as Chrome's trace-event JSON (the object form): one complete event
/// (`"ph":"X"`) per call, named by `name_of(id)` (a name and whether the function is an
/// import: category `import`), times in microseconds with nanosecond
/// digits. Each track is a thread of its own (tid 1, 2, ... in order of first call), named
/// by `track_name`.
pub fn write_chrome_json<'n>(
    out: &mut (impl Write + ?Sized),
    header: &TraceHeader,
    trace: &CallTrace,
    track_name: impl Fn(u32) -> String,
    name_of: impl Fn(u32) -> (&'n str, bool),
) -> std::io::Result<()> {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".to_string());
    let pid = header.pid;
    write!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{")?;
    for (i, (key, value)) in header.facts.iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        write!(out, "{comma}{}:{}", text(key), text(value))?;
    }
    writeln!(out, "}},\"traceEvents\":[")?;
    write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":{}}}}}",
        text(header.process)
    )?;
    // Names escaped once per function, not once per call.
    let mut escaped: std::collections::HashMap<u32, (String, bool)> = Default::default();
    let mut tids: std::collections::HashMap<u32, usize> = Default::default();
    for call in trace.calls() {
        if !tids.contains_key(&call.track) {
            let tid = tids.len() + 1;
            tids.insert(call.track, tid);
            write!(
                out,
                ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
                text(&track_name(call.track))
            )?;
        }
    }
    let calls: Vec<TracedCall> = trace.calls().copied().collect();
    let durations = written_durations(&calls);
    for (call, &dur_ns) in calls.iter().zip(&durations) {
        let tid = tids[&call.track];
        let (name, import) = escaped.entry(call.id).or_insert_with(|| {
            let (name, import) = name_of(call.id);
            (text(name), import)
        });
        // Only imports carry a category: a plain function's event is a fifth shorter
        // without one, and viewers need none.
        let cat = if *import { ",\"cat\":\"import\"" } else { "" };
        // Both ends in whole nanoseconds, so that a call within another stays within it
        // once rounded.
        let start_ns = call.start_ps / 1000;
        write!(
            out,
            ",\n{{\"ph\":\"X\",\"name\":{name}{cat},\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid}}}",
            Micros(start_ns),
            Micros(dur_ns)
        )?;
    }
    write!(out, "\n]}}\n")
}

/// Each call's duration as written, in whole nanoseconds (both ends rounded down): its own,
/// except that a call ending in the same nanosecond as the call around it (on its track)
/// ends as many nanoseconds earlier as it takes for `ts + dur`, computed in doubles as
/// readers do, not to pass the enclosing call's. A decimal sum can round up past another
/// that is equal in decimal (one pair in six), and Chrome DevTools then leaves the inner
/// call out of the tree; with the probes' cost taken out of the clock, a call that returns
/// right after its last callee can end in the same nanosecond. A call that also starts in
/// its caller's nanosecond (a caller doing nothing but calling it) ends a nanosecond
/// earlier, so that readers, which order events starting together by their length, do not
/// take it for the caller's caller.
fn written_durations(calls: &[TracedCall]) -> Vec<u64> {
    let start = |c: &TracedCall| c.start_ps / 1000;
    let mut durations: Vec<u64> = calls
        .iter()
        .map(|c| (c.end_ps / 1000).saturating_sub(start(c)))
        .collect();
    // What a reader computes as the end of call `i`.
    let read_end = |i: usize, durations: &[u64]| {
        start(&calls[i]) as f64 / 1000.0 + durations[i] as f64 / 1000.0
    };
    // Outer calls before the calls inside them: by track, then start, longest first.
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| {
        let c = &calls[i];
        (c.track, start(c), std::cmp::Reverse(durations[i]), c.depth)
    });
    // The calls around the current one, in nanoseconds as measured.
    let mut around: Vec<(usize, u64, u64)> = Vec::new();
    let mut track = None;
    for i in order {
        let c = &calls[i];
        let (from, to) = (start(c), start(c) + durations[i]);
        if track != Some(c.track) {
            around.clear();
            track = Some(c.track);
        }
        let mut closed = Vec::new();
        while let Some(&(done, _, _)) = around.last().filter(|&&(_, s, e)| !(s <= from && to <= e))
        {
            closed.push(done);
            around.pop();
        }
        // The calls that ended before this one (each inside the one after it in `closed`):
        // a reader must see each end before this one starts, although a decimal sum can
        // round past a start equal to it in decimal (a call ending in the nanosecond its
        // next sibling starts, which the probes' cost taken out can make), and inside the
        // call around it, as before.
        let mut bound = start(c) as f64 / 1000.0;
        for &done in closed.iter().rev() {
            while durations[done] > 0 && read_end(done, &durations) > bound {
                durations[done] -= 1;
            }
            bound = read_end(done, &durations);
        }
        if let Some(&(parent, _, _)) = around.last() {
            // A call starting with its caller must also end before it: readers order
            // events that start together by duration, and two of the same length either
            // way round.
            let same_start = start(c) == start(&calls[parent]);
            while durations[i] > 0
                && (read_end(i, &durations) > read_end(parent, &durations)
                    || (same_start && durations[i] >= durations[parent]))
            {
                durations[i] -= 1;
            }
        }
        around.push((i, from, to));
    }
    durations
}

/// Nanoseconds shown as microseconds with three decimals.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: u32, start_ps: u64, end_ps: u64) -> TracedCall {
        TracedCall {
            id,
            depth: 0,
            track: 0,
            start_ps,
            end_ps,
        }
    }

    #[test]
    fn a_call_ending_with_its_caller_ends_within_it_as_readers_add() {
        // Find a caller and a callee that end in the same nanosecond, where adding start
        // and duration in doubles puts the callee's end after the caller's.
        let us = |ns: u64| ns as f64 / 1000.0;
        let (outer, inner) = (1..1_000_000u64)
            .map(|k| (1_000_003 * k, 1_000_003 * k + 777 * k % 997 + 1))
            .find(|&(outer, inner)| {
                let end = outer + 5_000_123;
                us(inner) + us(end - inner) > us(outer) + us(end - outer)
            })
            .expect("such a pair");
        let end = outer + 5_000_123;
        let calls = [
            TracedCall {
                depth: 1,
                ..call(1, inner * 1000, end * 1000)
            },
            call(0, outer * 1000, end * 1000),
        ];
        let durations = written_durations(&calls);
        assert_eq!(durations[1], end - outer);
        assert_eq!(durations[0], end - inner - 1);
        assert!(us(inner) + us(durations[0]) <= us(outer) + us(durations[1]));
        // Calls that end apart keep their durations.
        let apart = [call(1, 2_000, 3_000), call(0, 1_000, 9_000)];
        assert_eq!(written_durations(&apart), [1, 8]);
        // A call that starts and ends with its caller ends a nanosecond earlier.
        let together = [
            call(0, 1_000, 9_000),
            TracedCall {
                depth: 1,
                ..call(1, 1_000, 9_000)
            },
        ];
        assert_eq!(written_durations(&together), [8, 7]);
    }

    #[test]
    fn a_call_ending_where_its_next_sibling_starts_ends_before_it_as_readers_add() {
        // Find a call ending in the nanosecond the next starts, where adding start and
        // duration in doubles puts its end after that start.
        let us = |ns: u64| ns as f64 / 1000.0;
        let (first, next) = (1..1_000_000u64)
            .map(|k| {
                (
                    36_000_000 + 1_009 * k,
                    36_000_000 + 1_009 * k + 173 + k % 89,
                )
            })
            .find(|&(first, next)| us(first) + us(next - first) > us(next))
            .expect("such a pair");
        let depth1 = |id, from: u64, to: u64| TracedCall {
            depth: 1,
            ..call(id, from * 1000, to * 1000)
        };
        let calls = [
            call(0, (first - 10) * 1000, (next + 500) * 1000),
            depth1(1, first, next),
            depth1(2, next, next + 100),
        ];
        let durations = written_durations(&calls);
        assert_eq!(durations[1], next - first - 1);
        assert!(us(first) + us(durations[1]) <= us(next));
        assert_eq!((durations[0], durations[2]), (next + 510 - first, 100));
        // Siblings with time between them keep their durations.
        let apart = [call(0, 0, 100_000), depth1(1, 10, 20), depth1(2, 21, 30)];
        assert_eq!(written_durations(&apart), [100, 10, 9]);
    }

    #[test]
    fn a_full_ring_lets_the_oldest_go_and_counts_it() {
        let mut t = CallTrace::new(2);
        for i in 0..5 {
            t.push(call(i, 0, 1));
        }
        assert_eq!(t.len(), 2);
        assert_eq!(t.dropped(), 3);
        let ids: Vec<u32> = t.calls().map(|c| c.id).collect();
        assert_eq!(ids, [3, 4]);
        assert_eq!(CallTrace::new(0).capacity(), 1);
    }

    #[test]
    fn chrome_json_has_one_complete_event_per_call() {
        let mut t = CallTrace::new(10);
        t.push(call(1, 2_000_500, 3_001_000));
        t.push(call(0, 1_000_000, 9_000_000));
        let header = TraceHeader {
            process: "a \"b\".wasm",
            pid: 7,
            facts: vec![("dropped", "0".into())],
        };
        // A third call on a track of its own (a goroutine).
        t.push(TracedCall {
            track: 0xc000,
            ..call(0, 9_500_000, 9_600_000)
        });
        let mut out = Vec::new();
        let track = |g: u32| match g {
            0 => "main".to_string(),
            g => format!("goroutine {g:#x}"),
        };
        write_chrome_json(&mut out, &header, &t, track, |id| match id {
            0 => ("_start", false),
            _ => ("wasi::fd_write", true),
        })
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["otherData"]["dropped"], "0");
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["args"]["name"], "a \"b\".wasm");
        assert_eq!(events[1]["args"]["name"], "main");
        assert_eq!(events[2]["args"]["name"], "goroutine 0xc000");
        assert_eq!(events[2]["tid"], 2);
        let events = &events[3..];
        assert_eq!(events[0]["name"], "wasi::fd_write");
        assert_eq!(events[0]["cat"], "import");
        assert_eq!(events[0]["ts"].as_f64().unwrap(), 2.0);
        // Ends rounded down to whole nanoseconds: 2000.5 -> 3001 ns.
        assert_eq!(events[0]["dur"].as_f64().unwrap(), 1.001);
        assert!(events[1].get("cat").is_none());
        assert_eq!(events[1]["dur"].as_f64().unwrap(), 8.0);
        assert_eq!(events[1]["tid"], 1);
        assert_eq!(events[1]["pid"], 7);
        assert_eq!(events[2]["tid"], 2);
    }
}
