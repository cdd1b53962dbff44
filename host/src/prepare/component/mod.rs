//! Preparing a WASI 0.2 command component: which of its core modules' functions must stay
//! without host-calling probes ([`callbacks`]), the interpreter among them
//! ([`interpreter`]), and its compiled code through the cache ([`compile`]). What a
//! component holds, and the rewrite that puts instrumented core modules in its place, are
//! [`crate::components`]'s.

pub mod callbacks;
pub mod compile;
pub mod interpreter;
