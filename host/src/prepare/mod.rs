//! Preparing a module: from the original bytes on disk to a compiled, instrumented module,
//! through the cache.
//!
//! [`loader`] reads and checks the program; [`instrument`] runs the cache session (the
//! module's manifest, then function by function) and hands the rest to the agent;
//! [`compile`] makes machine code of the result (or of the original, profiling off);
//! [`cache_values`] and [`cache_model`] are what wprof stores in the cache and how it reads
//! it back; [`artifacts`] and [`compiled`] keep compiled code (whole modules, compressed
//! by [`artifact_image`], and Cranelift's per-function incremental cache), authenticated with the key of [`secret`];
//! [`facts`] keeps what was learnt of a module by reading it (the interpreter it is, its
//! functions' sources).
//!
//! May use: `run` (only the engine configuration, [`crate::run::engine`]) and `profile`
//! (the function names and instrumentation stats a profile records). A cache failure is a
//! warning and a fallback here, never an error: the program still runs; so is a panic in
//! the agent or the cache ([`guard`]).

pub mod artifact_image;
pub mod artifacts;
pub mod cache_model;
pub mod cache_values;
pub mod compile;
pub mod compiled;
pub mod component;
pub mod counted;
pub mod facts;
pub mod guard;
pub mod heap;
pub mod injections;
pub mod instrument;
pub mod loader;
pub mod pack;
pub mod pack_stream;
pub mod referenced;
pub mod secret;
pub mod session;
pub mod zstd_frames;
