//! Integration tests: the real `wprof` binary on real modules.

mod attribution;
mod bad_input;
mod bench;
mod cost;
mod diff;
mod formats;
mod report;
mod run;
mod spec;
mod support;
mod tools;
