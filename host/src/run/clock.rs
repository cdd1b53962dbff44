//! The clock behind time-mode probes: the CPU's time-stamp counter where it is invariant,
//! read between two `lfence`s (see `read_tsc`), else the monotonic clock. Readings are
//! picoseconds since the clock was made. Also a thread's CPU-time clock, which another
//! thread can read ([`ThreadCpuClock`]: whether the program's thread runs or waits).
//!
//! # Accuracy
//!
//! The TSC rate is calibrated against the monotonic clock over at least two milliseconds:
//! the relative error of a reading is about 1e-5. The interval starts when `wprof run`
//! starts ([`start_calibrating`]), so that reading and compiling the module are the
//! calibration's wait, and the clock made later (at the program's first WASI call) waits
//! only for what is left of the two milliseconds, mostly nothing. It is used only when
//! `/proc/cpuinfo` says the counter is constant and does not stop (`constant_tsc` and
//! `nonstop_tsc`), so it ticks at one rate across frequency changes and sleep states.

use std::time::{Duration, Instant};

/// Where the TSC's calibration starts: both clocks read once (see [`start_calibrating`]).
#[cfg(target_arch = "x86_64")]
static CALIBRATION_START: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();

/// Starts the TSC's calibration now, if it has not started: the first [`Clock`] made then
/// waits only for what is left of its interval.
pub fn start_calibrating() {
    #[cfg(target_arch = "x86_64")]
    CALIBRATION_START.get_or_init(|| (Instant::now(), read_tsc()));
}

/// A monotonic clock in picoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    source: Source,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Monotonic(Instant),
    /// TSC at creation, and picoseconds per tick as a 32.32 fixed-point number.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Tsc {
        base: u64,
        ps_per_tick_q32: u64,
    },
}

/// The time-stamp counter, read in program order: `lfence` before it, so that every
/// instruction before the probe has finished (a load that missed the cache included), and
/// after it, so that none after the probe starts early. Without them the out-of-order core
/// runs a short function's work, or waits on its cache misses, under the probe's own
/// instructions, and how much it hides varies from function to function, so no one
/// subtracted estimate fits them all. Measured 2026-11-24 with `wprof bench --accuracy
/// --runs 3` on five real programs: time mode's distance to perf 18.8-28.2% unfenced,
/// 11.1-24.6% fenced (sqlite 28.2% -> 15.0%), for 1.3-1.5x its cost.
#[cfg(target_arch = "x86_64")]
fn read_tsc() -> u64 {
    // SAFETY: `lfence` and `rdtsc` are available on every x86_64 CPU (SSE2 is part of
    // x86_64) and have no preconditions.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let ticks = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        ticks
    }
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        has("constant_tsc") && has("nonstop_tsc")
    })
}

impl Clock {
    /// The best clock this machine has, calibrated once per process (readings count from
    /// the first call).
    pub fn new() -> Self {
        static SHARED: std::sync::OnceLock<Clock> = std::sync::OnceLock::new();
        *SHARED.get_or_init(Self::detect)
    }

    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if invariant_tsc() {
            if let Some(clock) = Self::calibrated_tsc() {
                return clock;
            }
        }
        Self::monotonic()
    }

    /// The monotonic clock (`Instant`).
    pub fn monotonic() -> Self {
        Self {
            source: Source::Monotonic(Instant::now()),
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn calibrated_tsc() -> Option<Self> {
        start_calibrating();
        let (t0, c0) = *CALIBRATION_START.get()?;
        while t0.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let (t1, c1) = (Instant::now(), read_tsc());
        let ticks = c1.checked_sub(c0).filter(|&t| t > 0)?;
        let ps = (t1 - t0).as_nanos() * 1000;
        let ps_per_tick_q32 = u64::try_from((ps << 32) / u128::from(ticks)).ok()?;
        Some(Self {
            source: Source::Tsc {
                base: c1,
                ps_per_tick_q32,
            },
        })
    }

    /// Whether this clock reads the time-stamp counter.
    pub fn is_tsc(&self) -> bool {
        matches!(self.source, Source::Tsc { .. })
    }

    /// Picoseconds since the clock was made.
    #[inline]
    pub fn now_ps(&self) -> u64 {
        match self.source {
            Source::Monotonic(epoch) => epoch.elapsed().as_nanos() as u64 * 1000,
            #[cfg(target_arch = "x86_64")]
            Source::Tsc {
                base,
                ps_per_tick_q32,
            } => {
                let ticks = read_tsc().saturating_sub(base);
                ((u128::from(ticks) * u128::from(ps_per_tick_q32)) >> 32) as u64
            }
            #[cfg(not(target_arch = "x86_64"))]
            Source::Tsc { .. } => unreachable!("the TSC is only used on x86_64"),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// The CPU time of one thread, readable from another thread (Linux's per-thread CPU-time
/// clock).
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpuClock(libc::clockid_t);

impl ThreadCpuClock {
    /// The calling thread's clock; `None` where there is none.
    pub fn of_this_thread() -> Option<Self> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `pthread_self` names a live thread (this one); `id` is written on success.
        let ok = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) } == 0;
        ok.then_some(ThreadCpuClock(id))
    }

    /// The thread's CPU time in picoseconds; `None` once it cannot be read.
    pub fn now_ps(&self) -> Option<u64> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write.
        if unsafe { libc::clock_gettime(self.0, &mut ts) } != 0 {
            return None;
        }
        Some(ts.tv_sec as u64 * 1_000_000_000_000 + ts.tv_nsec as u64 * 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_monotonic_clock() {
        let clock = Clock::new();
        let start = Instant::now();
        let a = clock.now_ps();
        std::thread::sleep(Duration::from_millis(20));
        let b = clock.now_ps();
        let elapsed_ps = start.elapsed().as_nanos() as u64 * 1000;
        assert!(b > a);
        // Within 5% of the monotonic clock over 20 ms (generous: machines are noisy).
        let diff = (b - a).abs_diff(elapsed_ps);
        assert!(
            diff < elapsed_ps / 20,
            "{} vs {elapsed_ps} ps (tsc: {})",
            b - a,
            clock.is_tsc()
        );
    }
}
