//! wprof's host: the command line, preparing a module (cache lookup → agent → compile),
//! running it with the host side of the probes, the profile model and its reports.
//!
//! The code lives in rooms, one concern each, and data flows one way: commands → prepare →
//! run → profile → report. What each room may use is fixed (see `ARCHITECTURE.md`; a test
//! checks it):
//!
//! - [`commands`]: the command line, one module per subcommand; uses every room.
//! - [`prepare`]: from the original bytes to a compiled, instrumented module and its cache;
//!   uses `profile` and the engine configuration of `run`.
//! - [`run`]: running the program, the host side of the probes, and its [`profile::Profile`];
//!   uses `profile`.
//! - [`report`]: one module per output format; uses `profile`.
//! - [`profile`]: the profile model and file; uses no room.
//! - [`config`]: the configuration file and where each setting comes from; uses no room.
//! - [`live`]: turning a running program's probes on and off (the control socket, the
//!   configuration file watched); uses `run` and `config`.
//!
//! Beside them, helpers every room may use and that use no room: [`exit`], [`settings`],
//! [`demangle`], [`settings::allocators`], [`go_symbols`], [`logging`], [`settings::patterns`], [`display`], [`stats`] and [`timings`].

pub mod commands;
pub mod config;
pub mod live;
pub mod prepare;
pub mod profile;
pub mod progress;
pub mod report;
pub mod run;

pub mod components;
pub mod demangle;
pub mod display;
pub mod exit;
pub mod go_symbols;
pub mod languages;
pub mod logging;
pub mod settings;
pub mod stats;
pub mod timings;

#[cfg(test)]
mod architecture;
