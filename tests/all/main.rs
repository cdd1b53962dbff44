//! Integration tests: the real `wprof` binary on real modules.

mod bad_input;
mod report;
mod run;
mod support;
