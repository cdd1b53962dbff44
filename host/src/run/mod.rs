//! Running the program and the host side of the probes: a folder per mode's machinery and
//! per shared concern, and at the top what every run goes through.
//!
//! [`engine`] is the wasmtime configuration every module is compiled and run with;
//! [`runner`] runs a WASI command (exit codes, traps, [`backtrace`]s in original offsets),
//! with a store whose state and probe imports are [`host_state`]'s, each thread of the
//! program with its WASI context from [`wasi`]; a threaded program's spawned threads run
//! through [`threads`]. What a mode links, starts and stops around a thread's entry
//! function and reads once it returned is its module in `modes` (one trait, `ThreadMode`,
//! asked by the runner and the spawned threads alike), which calls the entry through
//! [`start`]. Every mode's measurements are
//! replayed into a [`collector`], which [`to_profile`] turns into the run's profile.
//!
//! The modes' machinery: [`time`] (probes that log clock readings, read with [`clock`]),
//! [`inline`] (sample, cost and adaptive mode: the tree the module counts in, and sample
//! mode's [`inline::sampler`]), [`adaptive`] (timers along the hot paths, on top of sample
//! mode) and [`stacks`] (stack mode: call stacks walked at each tick). Shared by several:
//! [`interrupt`] (the program thread's timer and `SIGPROF` handler), [`code`] (which
//! function a program counter is in), [`host_calls`] (the WASI functions wrapped: calls,
//! bytes, time, `--inject`), [`component`] (a WASI 0.2 component's run), [`allocs`]
//! (`--allocs`) and [`switches`] (live probes).
//!
//! May use: `profile` only. Nothing here touches the cache; the agent is called only to
//! instrument the calibration module and to map trap offsets back to the original.

pub mod adaptive;
pub mod allocs;
pub mod backtrace;
pub mod clock;
pub mod code;
pub mod collector;
pub mod component;
pub mod engine;
pub mod host_calls;
pub mod host_state;
pub mod inline;
pub mod interrupt;
pub(crate) mod modes;
pub mod outcome;
pub mod probes;
pub mod runner;
pub mod stacks;
pub mod start;
pub mod switches;
pub mod threads;
pub mod time;
pub mod to_profile;
pub mod wasi;

pub use to_profile::profile_of_run;
