//! The probe log's events, 16 bytes each (a clock reading or a figure, an argument, a kind
//! and a token), and their replay into the [`Collector`], taking the ticks at their places
//! among them.

use crate::profile::HostFigures;
use crate::run::collector::Collector;
use crate::run::time::ticks::TickReader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Enter,
    Exit,
    Tail,
    EnterCatching,
    Unwind,
    Site,
    Called,
    GoSwitch,
    /// A call to an import measured by its wrapper: the wall time (ns) and the import's
    /// id; the token's low bit says whether bytes follow. Always followed by a `HostCpu`.
    HostWall,
    /// The on-CPU time (ns) and bytes of the `HostWall` before it.
    HostCpu,
    /// The frame on top handed out a block: its size (in the time field); it takes the
    /// next number (see `collector::allocs`).
    Allocated,
    /// The block of this number (in the time field) was taken back.
    Freed,
}

impl Kind {
    /// Whether the event's time field is a clock reading (else a figure: host call
    /// times, a block's size or number; or 0 for a `called` that read no clock).
    fn is_reading(self) -> bool {
        matches!(
            self,
            Kind::Enter | Kind::Exit | Kind::EnterCatching | Kind::Unwind | Kind::Called
        )
    }
}

/// 16 bytes: picoseconds (pauses excluded), an argument, and the kind with, for an
/// `EnterCatching`, a 24-bit frame token (for a `called`, a count).
#[derive(Debug, Clone, Copy)]
pub(super) struct Event {
    pub(super) time: u64,
    /// A function id, a frame token (unwind) or a call-site offset (site).
    pub(super) arg: u32,
    /// `kind | token << 8`.
    pub(super) kind_token: u32,
}

/// Frame tokens are 24 bits: they only have to tell apart the catching frames open at
/// once, and they wrap. A `called`'s token is the number of calls it stands for beyond
/// the first (see [`super::ProbeLog::called`]).
pub(super) const TOKEN_MASK: u32 = 0xff_ffff;

impl Event {
    pub(super) const EMPTY: Event = Event {
        time: 0,
        arg: 0,
        kind_token: 0,
    };

    fn kind(self) -> Kind {
        match self.kind_token & 0xff {
            0 => Kind::Enter,
            1 => Kind::Exit,
            2 => Kind::Tail,
            3 => Kind::EnterCatching,
            4 => Kind::Unwind,
            5 => Kind::Site,
            6 => Kind::Called,
            7 => Kind::GoSwitch,
            8 => Kind::HostWall,
            9 => Kind::HostCpu,
            10 => Kind::Allocated,
            _ => Kind::Freed,
        }
    }
}

/// Replays `events`, the first of which is the log's event number `first`, taking each
/// tick `ticks` holds at its place among them.
pub(super) fn apply(
    collector: &mut Collector,
    events: &[Event],
    first: u64,
    mut ticks: Option<&mut TickReader>,
) {
    let mut next_tick = ticks
        .as_ref()
        .and_then(|t| t.next_place())
        .unwrap_or(u64::MAX);
    // The ticks' cost so far, taken out of every later reading.
    let mut offset = collector.ticks_excluded();
    let mut i = 0;
    while i < events.len() {
        let number = first + i as u64;
        if number >= next_tick {
            if let Some(ticks) = ticks.as_deref_mut() {
                while let Some(tick) = ticks.next_before(number) {
                    collector.tick(tick.running, ticks.cost_ps);
                }
                next_tick = ticks.next_place().unwrap_or(u64::MAX);
                offset = collector.ticks_excluded();
            }
        }
        let mut e = events[i];
        i += 1;
        if e.time != 0 && e.kind().is_reading() {
            e.time = e.time.saturating_sub(offset);
        }
        match e.kind() {
            Kind::Enter => collector.enter_at(e.arg, e.time),
            Kind::Exit => collector.exit_at(e.arg, e.time),
            Kind::Tail => collector.tail(e.arg),
            Kind::EnterCatching => collector.enter_with_token_at(e.arg, e.kind_token >> 8, e.time),
            Kind::Unwind => collector.unwind_to_token_at(e.arg, e.time),
            Kind::Site => collector.site(e.arg),
            Kind::Called => {
                collector.called_times_at(e.arg, 1 + u64::from(e.kind_token >> 8), e.time)
            }
            Kind::GoSwitch => collector.go_switch(e.arg),
            Kind::HostWall => {
                // Pushed together, never split between buffers.
                if let Some(&cpu) = events.get(i) {
                    i += 1;
                    let figures = HostFigures {
                        calls: 1,
                        wall_ns: e.time,
                        cpu_ns: cpu.time,
                        bytes: (e.kind_token >> 8 & 1 == 1).then_some(u64::from(cpu.arg)),
                    };
                    collector.add_host(e.arg, &figures);
                }
            }
            // Read with its `HostWall`.
            Kind::HostCpu => {}
            Kind::Allocated => collector.allocated(e.time),
            Kind::Freed => collector.freed(e.time),
        }
    }
}
