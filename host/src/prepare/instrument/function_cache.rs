//! The function-level cache: the packs of instrumented bodies, one per lineage, and the
//! lookups of a start whose module manifest missed, each defined function's body by its key.

use wprof_agent::{InstrumentedBody, Instrumenter};
use wprof_cache::Kind;

use crate::prepare::cache_values::{self, FunctionEntry};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::prepare::{pack, referenced};

/// What a pack of instrumented bodies starts with (see [`crate::prepare::pack`]).
pub(super) const BODIES_MAGIC: &[u8; 8] = b"wpbpack1";

/// The bodies (encoded [`FunctionEntry`]s by function key) of a stored pack; `None` if it
/// is not one. A pack stored against the original module its bodies were made from (see
/// [`super::instrument`]) is expanded with the bytes `original` gives for that module's digest.
pub fn unpack_bodies<'r>(
    stored: &[u8],
    original: impl FnOnce(&[u8; 32]) -> Option<std::borrow::Cow<'r, [u8]>>,
) -> Option<pack::Values> {
    match referenced::reference(stored) {
        None => pack::unpack(BODIES_MAGIC, stored),
        Some(named) => pack::decode(
            BODIES_MAGIC,
            &referenced::decode(stored, &original(&named.locator)?)?,
        ),
    }
}

/// The original module of digest `digest` for [`unpack_bodies`]: `module` itself, or as
/// the cache holds it (a changed module's bodies are stored against its previous version).
fn original_module<'m>(
    module: &'m LoadedModule,
    cache: &mut CacheSession,
    digest: &[u8; 32],
) -> Option<std::borrow::Cow<'m, [u8]>> {
    if digest == &module.digest {
        return Some(std::borrow::Cow::Borrowed(&module.bytes[..]));
    }
    let stored = cache.get(Kind::Module, digest)?;
    cache_values::decode_module(&stored, digest).map(std::borrow::Cow::Owned)
}

/// The per-function cache lookups of a start whose module manifest missed (a module seen
/// for the first time, or changed).
#[derive(Debug)]
pub struct FunctionLookups {
    /// Every function of the module, imports first (from [`Instrumenter::functions`]).
    pub summaries: Vec<wprof_agent::FunctionSummary>,
    /// The cache key of each defined function's instrumented body.
    pub keys: Vec<[u8; 32]>,
    /// Each defined function's instrumented body, where the cache has it.
    pub cached: Vec<Option<InstrumentedBody>>,
    /// How many bodies the lineage's pack held.
    pub pack_len: usize,
    /// The original module the pack is stored against, if it is.
    pub pack_against: Option<[u8; 32]>,
}

/// Computes every defined function's key (a digest of its body and everything the
/// instrumented body depends on) and looks each one up in the pack of bodies of `lineage`
/// (the module's previous version). This is all the function-level cache work of a start;
/// `wprof bench` times it.
pub fn function_lookups(
    instrumenter: &Instrumenter<'_>,
    module: &LoadedModule,
    cache: &mut CacheSession,
    lineage: &[u8; 32],
) -> FunctionLookups {
    let summaries = instrumenter.functions();
    let first_defined = instrumenter.imported_function_count() as usize;
    let keys: Vec<[u8; 32]> = summaries[first_defined..]
        .iter()
        .map(|s| s.key.expect("defined functions have keys"))
        .collect();
    let stored = cache.get(Kind::Function, lineage);
    let pack_against = stored
        .as_deref()
        .and_then(referenced::reference)
        .map(|r| r.locator);
    let earlier = stored
        .and_then(|stored| unpack_bodies(&stored, |d| original_module(module, cache, d)))
        .unwrap_or_default();
    let cached = keys
        .iter()
        .map(|key| {
            earlier
                .get(key)
                .and_then(|bytes| FunctionEntry::decode(bytes))
                .map(|e| e.body)
        })
        .collect();
    FunctionLookups {
        summaries,
        keys,
        cached,
        pack_len: earlier.len(),
        pack_against,
    }
}
