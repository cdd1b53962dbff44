//! Sample mode's period: the mean time between two ticks of the program thread's timer, and
//! between two readings of the sampler.
//!
//! A period the user chose (`--sample-period-us`, its variable or the configuration file)
//! stays as it is for the whole run. The default is dense while the program is young, so
//! that a run of a fraction of a second still gets thousands of samples, and stretches as
//! it goes on: each tick costs the program an interrupt (about 25 µs on the virtual machines
//! wprof is measured on), which at 200 µs is a tenth of the run, and a run of a minute does
//! not need 300,000 samples. The period is [`DEFAULT_PERIOD`] for the first
//! [`STRETCH_AFTER`], then grows in proportion to the time the program has run, up to
//! [`LONGEST`] (reached after ten seconds): 5,000 samples in the first second, about 11,500
//! more by the tenth, then 500 a second. Each reading charges the time that really passed
//! since the previous one, so a tick of a later, sparser stretch weighs more and the
//! estimate stays unbiased.

use std::time::Duration;

/// The period at the start of a run when none is chosen: 5,000 ticks a second, more than
/// the 4,000 of the `perf record -F 4000` wprof's accuracy is measured against. At 100 µs
/// sample mode cost 1.45-1.73x of `WPROF=0` on real programs on the measuring machine, at
/// 200 µs 1.25-1.49x, for distances to perf within run-to-run noise of each other
/// (2026-11-24).
pub const DEFAULT_PERIOD: Duration = Duration::from_micros(200);

/// How long the default period stays as it is.
pub const STRETCH_AFTER: Duration = Duration::from_secs(1);

/// The longest the default period stretches to: 500 samples a second.
pub const LONGEST: Duration = Duration::from_millis(2);

/// The period of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplePeriod {
    /// The period at the start.
    pub base: Duration,
    /// Whether it stretches as the program runs on (the default) or stays (chosen).
    pub stretches: bool,
}

impl Default for SamplePeriod {
    fn default() -> Self {
        SamplePeriod {
            base: DEFAULT_PERIOD,
            stretches: true,
        }
    }
}

impl SamplePeriod {
    /// A period that stays `base` for the whole run.
    pub fn fixed(base: Duration) -> Self {
        SamplePeriod {
            base,
            stretches: false,
        }
    }

    /// The period once the program has run for `running`.
    pub fn at(&self, running: Duration) -> Duration {
        if !self.stretches || running <= STRETCH_AFTER {
            return self.base;
        }
        let factor = running.as_secs_f64() / STRETCH_AFTER.as_secs_f64();
        self.base.mul_f64(factor).min(self.longest())
    }

    /// The longest the period gets.
    pub fn longest(&self) -> Duration {
        match self.stretches {
            true => LONGEST.max(self.base),
            false => self.base,
        }
    }
}

/// For the profile: the longest period a run of `wall` reached with `period`, in
/// nanoseconds, if it stretched at all; else 0.
pub fn longest_reached(period: SamplePeriod, wall: Duration) -> u64 {
    let reached = period.at(wall);
    match reached > period.base {
        true => reached.as_nanos() as u64,
        false => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_stretches_after_a_second_up_to_the_longest() {
        let p = SamplePeriod::default();
        let ms = |m: u64| Duration::from_millis(m);
        assert_eq!(p.at(Duration::ZERO), DEFAULT_PERIOD);
        assert_eq!(p.at(ms(1000)), DEFAULT_PERIOD);
        assert_eq!(p.at(ms(2000)), Duration::from_micros(400));
        assert_eq!(p.at(ms(5000)), Duration::from_micros(1000));
        assert_eq!(p.at(ms(10_000)), LONGEST);
        assert_eq!(p.at(ms(600_000)), LONGEST);
        assert_eq!(p.longest(), LONGEST);
    }

    #[test]
    fn a_chosen_period_stays() {
        let p = SamplePeriod::fixed(Duration::from_micros(100));
        assert_eq!(p.at(Duration::from_secs(60)), Duration::from_micros(100));
        assert_eq!(p.longest(), Duration::from_micros(100));
        // A default period longer than the longest never shortens.
        let slow = SamplePeriod {
            base: Duration::from_millis(5),
            stretches: true,
        };
        assert_eq!(slow.at(Duration::from_secs(60)), Duration::from_millis(5));
    }
}
