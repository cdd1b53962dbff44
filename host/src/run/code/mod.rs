//! The compiled code a run executes, as the samplers read it: which of the module's
//! functions a machine address is in ([`map`]), where in the module's bytes a program
//! counter is, from the artifact's address map ([`address_map`]), and a compiled module's
//! or component's image in memory, read in place ([`image`]; also how `prepare` stores
//! artifacts).

pub mod address_map;
pub mod image;
pub mod map;
