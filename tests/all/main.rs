//! Integration tests: the real `wprof` binary on real modules.

mod adaptive;
mod attribution;
mod bad_input;
mod bench;
mod cache_fill;
mod cache_inspect;
mod cache_maint;
mod cache_safety;
mod config;
mod cost;
mod diff;
mod formats;
mod fuzz;
mod html;
mod live;
mod names;
mod progress;
mod real_programs;
mod report;
mod run;
mod sample;
mod selective;
mod short;
mod spec;
mod support;
mod tools;
