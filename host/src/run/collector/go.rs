//! Go modules in time mode: goroutine switches.
//!
//! Go switches goroutines by unwinding every wasm frame up to its scheduler loop (each
//! function returns 1) and later calls the frames of the goroutine it resumes again, one at
//! a time, innermost first (see [`wprof_agent::ContextArena::go_table`]). The probes flag
//! those exits and re-entries ([`wprof_agent::GoTimeFlags`]) and say which goroutine runs:
//!
//! - an unwinding exit takes the frame off the stack without closing it: it waits, with the
//!   time it ran so far, among its goroutine's parked frames, and no longer counts as open
//!   (for the outermost-activation rule and the calling-context path);
//! - a re-entry takes its frame back from its goroutine's parked frames (the frames inside
//!   it, which never resume, close then); so does an entry at `PC_B` 0 when the goroutine
//!   stopped in `runtime.morestack` (the frame starts over). Neither is a call;
//! - when a re-entered frame returns, its time goes to its caller, the next parked frame of
//!   its goroutine, not to the scheduler's frame below it, which only sees that stretch;
//! - the first call of a goroutine (made from a frame of another goroutine) ends whatever an
//!   earlier goroutine with the same `g` left parked, as do the end of the run.
//!
//! Every stretch of time is still charged to exactly one frame's self time, so the
//! invariants hold; a goroutine's time while it is switched out is nobody's.

use std::collections::{HashMap, VecDeque};

use wprof_agent::GoTimeFlags;

use super::stack::Frame;
use super::Collector;

/// The goroutines' frames switched out.
#[derive(Debug, Default)]
pub(super) struct GoState {
    /// The goroutine running (the address of its `g`), as the probes last said.
    pub(super) running: u32,
    /// Per goroutine, its frames unwound at a switch, innermost (deepest) first.
    parked: HashMap<u32, VecDeque<Frame>>,
    /// `runtime.morestack`'s id.
    morestack: Option<u32>,
}

/// What is still parked of a closing frame's goroutine.
#[derive(Debug, Default)]
pub(super) struct Outer {
    /// An activation of the same function.
    pub(super) function: bool,
    /// An activation along the same edge.
    pub(super) edge: bool,
    /// An activation charged to the same context.
    pub(super) node: bool,
    /// The frame's caller (its goroutine has parked frames).
    pub(super) caller: bool,
}

impl Collector {
    /// A Go module in time mode, whose `runtime.morestack` has id `morestack`.
    pub fn with_go(mut self, morestack: Option<u32>) -> Self {
        self.go = Some(Box::new(GoState {
            morestack,
            ..GoState::default()
        }));
        self
    }

    /// Probe: goroutine `g` runs from now on.
    pub fn go_switch(&mut self, g: u32) {
        if let Some(go) = &mut self.go {
            go.running = g;
        }
    }

    fn go_state(&mut self) -> &mut GoState {
        self.go
            .as_mut()
            .expect("Go probes come with a Go collector")
    }

    /// An entry in a Go module: a re-entry resumes its parked frame; anything else is a
    /// call.
    pub(super) fn go_enter_at(&mut self, flagged: u32, now: u64) {
        let id = flagged & GoTimeFlags::ID;
        let go = self.go_state();
        let g = go.running;
        let parked = go.parked.get(&g);
        let restart = flagged & GoTimeFlags::REENTRY == 0
            && go
                .morestack
                .is_some_and(|m| parked.and_then(|p| p.front()).is_some_and(|f| f.id == m));
        let found = (flagged & GoTimeFlags::REENTRY != 0 || restart)
            .then(|| parked.and_then(|p| p.iter().position(|f| f.id == id)))
            .flatten();
        if let Some(at) = found {
            self.last = now;
            self.pending_site = None;
            // The frames inside it never resume.
            for _ in 0..at {
                let inner = self.take_parked(g).expect("counted above");
                self.close_parked(inner, now);
            }
            let mut frame = self.take_parked(g).expect("found above");
            self.unpark(&frame);
            frame.start = now;
            frame.resumed = true;
            self.stack.push(frame);
            return;
        }
        // A goroutine's first call, from the scheduler: an earlier goroutine of this `g`
        // is over.
        let from_elsewhere = self.stack.last().is_some_and(|top| top.g != g);
        if from_elsewhere {
            while let Some(stale) = self.take_parked(g) {
                self.close_parked(stale, now);
            }
        }
        self.enter_counted_at(id, 1, now);
    }

    /// An exit in a Go module flagged as unwinding: the frame leaves the stack, parked.
    /// Returns false for a plain exit.
    pub(super) fn go_unwind_at(&mut self, flagged: u32, now: u64) -> bool {
        if flagged & GoTimeFlags::UNWINDING == 0 {
            return false;
        }
        let id = flagged & GoTimeFlags::ID;
        self.last = now;
        self.pending_site = None;
        let Some(depth) = self.stack.iter().rposition(|f| f.id == id) else {
            self.unmatched_exits += 1;
            return true;
        };
        while self.stack.len() > depth + 1 {
            self.close_top(now);
        }
        let mut frame = self.stack.pop().expect("found above");
        let stretch = now.saturating_sub(frame.start);
        frame.elapsed += stretch;
        if let Some(below) = self.stack.last_mut() {
            below.children += stretch;
        }
        self.functions[frame.id as usize].active -= 1;
        self.edges[frame.edge as usize].active -= 1;
        self.contexts.park(frame.node);
        // Innermost first: inside the frames its goroutine left parked earlier.
        let parked = self.go_state().parked.entry(frame.g).or_default();
        let at = parked
            .iter()
            .position(|f| f.depth < frame.depth)
            .unwrap_or(parked.len());
        parked.insert(at, frame);
        true
    }

    /// The run ended: goroutines still switched out end `now`.
    pub(super) fn go_finish(&mut self, now: u64) {
        let Some(go) = &self.go else { return };
        let mut gs: Vec<u32> = go.parked.keys().copied().collect();
        gs.sort_unstable();
        for g in gs {
            while let Some(frame) = self.take_parked(g) {
                self.close_parked(frame, now);
            }
        }
    }

    fn take_parked(&mut self, g: u32) -> Option<Frame> {
        self.go.as_mut()?.parked.get_mut(&g)?.pop_front()
    }

    /// A parked frame counts as open again.
    fn unpark(&mut self, frame: &Frame) {
        self.functions[frame.id as usize].active += 1;
        self.edges[frame.edge as usize].active += 1;
        self.contexts.unpark(frame.node);
    }

    /// Closes a frame taken from the parked ones: its time goes to the next parked frame
    /// of its goroutine (its caller), or to the root.
    fn close_parked(&mut self, mut frame: Frame, now: u64) {
        self.unpark(&frame);
        // Its last stretch ended when it was parked.
        frame.start = now;
        frame.resumed = true;
        let (inclusive, to_caller) = self.account(&frame, now);
        match to_caller {
            Some(inclusive) => self.charge_parked_caller(&frame, inclusive),
            None => {
                self.root_inclusive += inclusive;
                self.contexts.add_root(inclusive);
            }
        }
    }

    /// What of a closing re-entered frame's goroutine is still parked.
    pub(super) fn parked_outer(&self, frame: &Frame) -> Outer {
        let Some(parked) = self.go.as_ref().and_then(|go| go.parked.get(&frame.g)) else {
            return Outer::default();
        };
        let mut outer = Outer {
            caller: !parked.is_empty(),
            ..Outer::default()
        };
        for f in parked {
            outer.function |= f.id == frame.id;
            outer.edge |= f.edge == frame.edge;
            outer.node |= f.node == frame.node;
        }
        outer
    }

    /// A re-entered frame's inclusive time goes to its caller, parked.
    pub(super) fn charge_parked_caller(&mut self, frame: &Frame, inclusive: i64) {
        let g = frame.g;
        if let Some(caller) = self
            .go
            .as_mut()
            .and_then(|go| go.parked.get_mut(&g))
            .and_then(|p| p.front_mut())
        {
            caller.children_inclusive += inclusive;
            caller.child_calls += 1;
        }
    }
}
