//! Running the program and the host side of the probes.
//!
//! [`engine`] is the wasmtime configuration every module is compiled and run with;
//! [`runner`] runs a WASI command (exit codes, traps, [`backtrace`]s in original offsets),
//! with a store whose state and probe imports are [`host_state`]'s, calling `_start` through
//! [`start`], each thread of the program with its WASI context from [`wasi_ctx`]; a threaded
//! program's spawned threads run through [`threads`].
//! Time mode's probes log events ([`time::probe_log`], read with [`clock`]) that a thread
//! replays into the [`collector`], less the probe cost [`time::calibrate`] measured; the inline modes count
//! in module memory, read back by [`inline_tree`] and replayed by [`replay`]; in sample mode [`sampler`] charges time
//! to where the program is, asking its thread ([`interrupt`]) for the program counter, which
//! [`code_map`] names, [`address_map`] places in the module's bytes (a probe's, or the
//! original's) and [`attribution`] places in the tree. With live probes, [`switches`] turns
//! the module's switches from any thread and logs when. [`host_calls`] wraps the WASI
//! functions the module imports: the host's time and bytes per call ([`host_meter`]), and
//! `--inject`. With `--allocs`, [`allocs`] keeps the blocks the module's allocator reports.
//! In adaptive mode, [`adaptive`] times
//! the activations its walker selects along the hot paths, on top of sample mode.
//! [`to_profile`] turns a finished run into its profile.
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
pub mod runner;
pub mod stacks;
pub mod start;
pub mod switches;
pub mod threads;
pub mod time;
pub mod to_profile;
pub mod wasi_ctx;

pub use to_profile::profile_of_run;
