//! wprof's host: the engine, the compile interception (cache lookup -> agent -> compile),
//! the collector behind the probes, profile files, reports and the command line.
//!
//! The `wprof` binary is a thin shell over [`cli`]; everything it does is reachable from
//! here, one module per concern.

pub mod artifacts;
pub mod backtrace;
pub mod cache_model;
pub mod cache_values;
pub mod calibrate;
pub mod cli;
pub mod clock;
pub mod collector;
pub mod commands;
pub mod compiled;
pub mod context_tree;
pub mod engine;
pub mod exit;
pub mod inline_tree;
pub mod instrument;
pub mod loader;
pub mod logging;
pub mod probe_log;
pub mod profile;
pub mod report;
pub mod runner;
pub mod sampler;
pub mod secret;
pub mod settings;
pub mod stats;
