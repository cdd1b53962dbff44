//! Sample mode's sampler: a thread that, while the program runs, reads the module's
//! current-node cell (see [`wprof_agent::ContextArena::CURRENT`]) at a fixed period and
//! charges the time since its previous reading to the node it finds there.
//!
//! Every picosecond between the start and the end of the run is charged to exactly one
//! node, so the samples add up to the run's time; which node gets an interval is decided by
//! where the program was at the interval's end, the usual sampling estimate. Calls are
//! never sampled: the module counts them exactly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::run::clock::Clock;

/// The default time between two readings.
pub const DEFAULT_PERIOD: Duration = Duration::from_micros(100);

/// Where the module keeps its current node: four bytes of its tree memory, a 32-bit
/// memory inside a full 4 GiB reservation (see [`crate::run::engine::MEMORY_RESERVATION`]), so
/// the address stays valid, however the memory grows, for as long as the store owns it.
#[derive(Debug, Clone, Copy)]
pub struct CurrentCell(*const u32);

// SAFETY: the cell is only read, with atomic loads, while the store owning the memory is
// alive (the sampler runs inside a scope the run does not leave before joining it).
unsafe impl Send for CurrentCell {}

impl CurrentCell {
    /// The cell at the start of `memory`'s data.
    ///
    /// # Safety
    ///
    /// `memory` must point to 4 aligned bytes of a linear memory whose base never moves,
    /// and the cell must not be read after its store is dropped.
    pub unsafe fn new(memory: *const u8) -> Self {
        CurrentCell(memory.cast())
    }

    fn read(self) -> u32 {
        // SAFETY: aligned (wasm memories are page-aligned), in bounds and alive (see
        // `new`); the module writes the cell with plain aligned 4-byte stores, which an
        // atomic load never observes torn.
        unsafe { AtomicU32::from_ptr(self.0.cast_mut()).load(Ordering::Relaxed) }
    }
}

/// Time charged per node address, in picoseconds, and how many readings were taken.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Picoseconds per node address.
    pub time: HashMap<u32, u64>,
    /// Readings taken.
    pub readings: u64,
}

/// Reads `cell` every `period` until `stop` is set, then once more. Whoever sets `stop`
/// should unpark the sampling thread, which then takes its last reading at once instead of
/// at the end of its period.
pub fn sample(cell: CurrentCell, clock: &Clock, period: Duration, stop: &AtomicBool) -> Samples {
    let mut samples = Samples::default();
    let mut last = clock.now_ps();
    let mut take = |samples: &mut Samples| {
        let now = clock.now_ps();
        *samples.time.entry(cell.read()).or_default() += now.saturating_sub(last);
        samples.readings += 1;
        last = now;
    };
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(period);
        take(&mut samples);
    }
    take(&mut samples);
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interval_goes_to_the_node_read_at_its_end() {
        let cell = Box::new(AtomicU32::new(7));
        let clock = Clock::new();
        let stop = AtomicBool::new(false);
        let started = clock.now_ps();
        let samples = std::thread::scope(|s| {
            // SAFETY: the box outlives the scope and is never moved.
            let reader = unsafe { CurrentCell::new(cell.as_ptr().cast()) };
            let (clock, stop) = (&clock, &stop);
            let sampler = s.spawn(move || sample(reader, clock, Duration::from_micros(50), stop));
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
        assert!(samples.time.contains_key(&9));
        assert!(samples.time.keys().all(|k| [7, 9].contains(k)));
        assert!(samples.readings >= 1);
    }
}
