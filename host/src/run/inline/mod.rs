//! The inline modes' host side (sample, cost and adaptive mode, whose probes count in a
//! calling-context tree the module keeps in its own memory): the [`tree`] read back when a
//! thread ends and [`replay`]ed into its collector; in sample and adaptive mode the
//! [`sampler`] thread that charges time to where the program is, each reading placed in the
//! tree by [`attribution`]; the block counters of `--coverage` ([`coverage`]); and the
//! windows of a running program that `--serve` answers with ([`window`]); in an
//! interpreter, its language's frames in the contexts ([`scripts`]).

pub mod attribution;
pub mod coverage;
pub mod replay;
pub mod sampler;
pub mod scripts;
pub mod tree;
pub mod window;
