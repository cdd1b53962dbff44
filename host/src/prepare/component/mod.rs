//! Preparing a WASI 0.2 command component: which of its core modules' functions must stay
//! without host-calling probes ([`callbacks`]), and the rewrite that puts instrumented core
//! modules in place of the originals and links their probes to the host ([`rewrite`]).
//! What a component holds is read by [`crate::components`].

pub mod callbacks;
pub mod compile;
pub mod rewrite;
