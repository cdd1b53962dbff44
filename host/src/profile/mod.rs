//! The profile: what one run measured, as a file and as the model every report reads.
//!
//! This room uses no other room of wprof: `run/` builds a [`Profile`] from a finished run,
//! `report/` and `commands/` read it. Its invariants (Σ self = total; self ≤ inclusive for
//! every function, edge and context; exact calls) are kept by whoever builds one.

pub mod context_tree;
pub mod coverage;
mod file;
mod invariants;
mod model;
pub mod threads;
pub mod trace;

pub use file::{write_bytes, write_with};
pub use model::*;
