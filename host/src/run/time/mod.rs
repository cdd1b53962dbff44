//! Time mode's host side: each probe appends a clock reading to the [`probe_log`], which a
//! worker replays into the run's collector less what a probe costs, as [`calibrate`]
//! measured it at start-up; the functions too short to time are sampled by the program
//! counter's [`ticks`].

pub mod calibrate;
pub mod probe_log;
pub mod ticks;
