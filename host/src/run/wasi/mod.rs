//! WASI preview 1 for a module's run: the context its threads run with, made from the
//! run's settings ([`context`]).

pub mod context;
