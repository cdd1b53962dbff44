//! Integration tests: the real `wprof` binary on real modules.

mod bad_input;
mod bench;
mod report;
mod run;
mod spec;
mod support;
