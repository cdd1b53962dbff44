//! The compile interception: from the original bytes to the instrumented module, taking
//! whatever it can from the cache (the whole module, or function by function) and having
//! the agent instrument only the rest ([`crate::prepare::compile`] then makes its machine
//! code).
//!
//! # Sharing the cache between processes
//!
//! The store takes no lock on values (see `wprof_cache`): any number of runs use one cache
//! at once. Two runs that instrument the same module at the same time both do the work and
//! write the same content-addressed values; nothing conflicts. A cache that cannot be used
//! at all (unreadable, of another format) is one warning, and the run goes on without it.

use std::path::Path;

use wprof_agent::{InstrumentedBody, Instrumenter, ProbeCode, ProbePlan, AGENT_FORMAT_VERSION};

use crate::progress::Progress;
use wprof_cache::Kind;

use crate::prepare::cache_values::{
    self, FunctionEntry, Manifest, ManifestFunction, MANIFEST_VERSION,
};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::prepare::{pack, referenced};
use crate::profile::{FunctionInfo, InstrumentationStats};
use crate::settings::FunctionFilter;
use wprof_cache::hex;

pub mod dwarf_names;
mod function_cache;
mod parallel;

use function_cache::BODIES_MAGIC;
pub use function_cache::{function_lookups, unpack_bodies, FunctionLookups};
use parallel::instrument_missing;

/// The instrumented module, ready to compile.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Its bytes: in memory after instrumenting; from the cache, as stored (compressed, its
    /// envelope checked) until something needs them, since a run whose compiled code is
    /// cached never does.
    module: InstrumentedBytes,
    /// blake3 of its bytes.
    pub digest: [u8; 32],
    /// Every function of the original module, in id order.
    pub functions: Vec<FunctionInfo>,
    /// Where it came from.
    pub stats: InstrumentationStats,
    /// The key of its compiled functions' pack (see [`crate::prepare::compiled::lineage`]).
    pub lineage: [u8; 32],
    /// Sample mode: which of its bytes are probes.
    pub probe_code: Option<ProbeCode>,
    /// Coverage: the block map of every function with counters.
    pub blocks: Option<crate::profile::coverage::Coverage>,
    /// Allocation profiling: the allocator functions (no calls yet).
    pub allocators: Vec<crate::profile::AllocatorRecord>,
}

#[derive(Debug, Clone)]
enum InstrumentedBytes {
    Expanded(Vec<u8>),
    Stored(Vec<u8>, std::sync::OnceLock<Option<Vec<u8>>>),
}

impl Prepared {
    /// The instrumented module's bytes, expanded from the cache on first use (against
    /// `original`, the module it was made from); `None` if the stored module does not expand
    /// to the module of its digest (then it must not be used).
    pub fn bytes(&self, original: &LoadedModule) -> Option<&[u8]> {
        match &self.module {
            InstrumentedBytes::Expanded(bytes) => Some(bytes),
            InstrumentedBytes::Stored(stored, expanded) => expanded
                .get_or_init(|| {
                    cache_values::decode_module_with(stored, &self.digest, |digest| {
                        (digest == &original.digest)
                            .then_some(std::borrow::Cow::Borrowed(&original.bytes[..]))
                    })
                })
                .as_deref(),
        }
    }
}

/// The kind a manifest and a profile give a defined function left without probes (the
/// others are `local` or `import`).
pub const EXCLUDED_KIND: &str = "excluded";

/// Per function, whether live probes can switch it: defined and probed (not an import, not
/// left out).
pub fn switchable(functions: &[FunctionInfo]) -> Vec<bool> {
    functions
        .iter()
        .map(|f| f.kind != "import" && f.kind != EXCLUDED_KIND)
        .collect()
}

/// The key of a module's manifest: the module's digest, the probe plan and the agent
/// version.
pub fn manifest_key(module_digest: &[u8; 32], plan: &ProbePlan) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof manifest v1\0");
    h.update(module_digest);
    h.update(&plan.digest());
    wprof_agent::key_agent(&mut h);
    *h.finalize().as_bytes()
}

/// What chooses functions by their names, when a module is instrumented.
#[derive(Debug, Clone, Copy)]
pub struct FunctionRules<'a> {
    /// With a selection in the plan (see [`FunctionFilter::selection`]): the functions
    /// left without probes.
    pub filter: &'a FunctionFilter,
    /// With allocators in the plan: the allocator functions.
    pub allocators: &'a crate::settings::allocators::AllocatorRules,
    /// With a selection in the plan: more functions left without probes, whatever the
    /// filter says (a component's allocation callbacks in time mode, see
    /// [`crate::prepare::component::callbacks`]).
    pub left_out: Option<&'a std::collections::BTreeSet<u32>>,
}

impl FunctionRules<'static> {
    /// Every function probed; the allocators wprof knows by name.
    pub fn all() -> Self {
        static FILTER: FunctionFilter = FunctionFilter {
            only: Vec::new(),
            exclude: Vec::new(),
        };
        static KNOWN: crate::settings::allocators::AllocatorRules =
            crate::settings::allocators::AllocatorRules::Known;
        FunctionRules {
            filter: &FILTER,
            allocators: &KNOWN,
            left_out: None,
        }
    }
}

/// Produces the instrumented module for `module`, using and filling `cache`.
pub fn prepare(
    module: &LoadedModule,
    path: &Path,
    plan: &ProbePlan,
    rules: &FunctionRules<'_>,
    cache: &mut CacheSession,
    progress: &Progress,
) -> Result<Prepared, wprof_agent::AgentError> {
    match from_cache(module, path, plan, cache) {
        Some(hit) => Ok(hit),
        None => instrument(module, path, plan, rules, cache, progress),
    }
}

/// The instrumented module for `module` and `plan` when the cache holds it whole (its
/// manifest, and the module the manifest names, both intact).
pub fn from_cache(
    module: &LoadedModule,
    path: &Path,
    plan: &ProbePlan,
    cache: &mut CacheSession,
) -> Option<Prepared> {
    let hit = from_manifest(&manifest_key(&module.digest, plan), plan, cache, path)?;
    tracing::debug!("instrumented module taken from the cache");
    Some(hit)
}

/// Instruments `module` for `plan`, function by function, taking the bodies the cache
/// holds and storing the rest, the module and its manifest. The caller has looked for the
/// whole module in the cache ([`from_cache`]) and validated `module`. `rules` choose the
/// functions the plan's selection leaves without probes, and its allocators, by the
/// module's names.
pub fn instrument(
    module: &LoadedModule,
    path: &Path,
    plan: &ProbePlan,
    rules: &FunctionRules<'_>,
    cache: &mut CacheSession,
    progress: &Progress,
) -> Result<Prepared, wprof_agent::AgentError> {
    let manifest_key = manifest_key(&module.digest, plan);
    let lineage = crate::prepare::compiled::lineage(path, &plan.body_digest());

    let mut instrumenter = Instrumenter::new(&module.bytes, plan)?;
    crate::prepare::instrument::dwarf_names::name_unnamed(&mut instrumenter, &module.bytes);
    let mut excluded = std::collections::BTreeSet::new();
    let mut allocators = std::collections::BTreeMap::new();
    if plan.selection.is_some() || plan.allocators.is_some() {
        let names = instrumenter.function_names();
        let shown = crate::go_symbols::shown_names(&module.bytes, &names);
        let first_defined = instrumenter.imported_function_count();
        if plan.selection.is_some() {
            excluded = rules.filter.excluded(&names, &shown, first_defined);
            excluded.extend(rules.left_out.into_iter().flatten().copied());
            instrumenter.exclude(excluded.clone());
        }
        if plan.allocators.is_some() {
            let roles = rules.allocators.roles(&names, &shown, first_defined);
            let name = |id: u32| names.get(id as usize).map_or("?", String::as_str);
            let (left_out, roles): (std::collections::BTreeMap<_, _>, _) =
                roles.into_iter().partition(|(id, _)| excluded.contains(id));
            for id in left_out.keys() {
                crate::say!(
                    "wprof: warning: the allocator {} has no probes (--only/--exclude), so its blocks are not profiled",
                    name(*id)
                );
            }
            allocators = roles.clone();
            for (id, why) in instrumenter.profile_allocations(roles) {
                crate::say!(
                    "wprof: warning: {} is not profiled as an allocator: {why}",
                    name(id)
                );
                allocators.remove(&id);
            }
        }
    }
    let FunctionLookups {
        summaries,
        keys,
        cached,
        pack_len,
        pack_against,
    } = function_lookups(&instrumenter, module, cache, &lineage);
    let mut stats = InstrumentationStats {
        functions_total: instrumenter.defined_function_count(),
        ..Default::default()
    };
    progress.step("instrumenting functions", Some(keys.len() as u64));
    stats.functions_from_cache = cached.iter().filter(|b| b.is_some()).count() as u32;
    progress.advance(u64::from(stats.functions_from_cache));
    // Silent panics (the hook is swapped here, on this thread, for all the workers).
    let fresh = crate::prepare::guard::quietly(|| {
        instrument_missing(&instrumenter, &summaries, &cached, progress)
    })
    .map_err(|message| wprof_agent::AgentError::Panicked {
        function: "(the instrumenting threads)".to_string(),
        message,
    })??;
    stats.functions_instrumented = fresh.len() as u32;
    let mut fresh = fresh.into_iter();
    let bodies: Vec<InstrumentedBody> = cached
        .into_iter()
        .map(|body| body.or_else(|| fresh.next()))
        .collect::<Option<_>>()
        .expect("every body missing from the cache was instrumented");
    let out = instrumenter.assemble(&bodies)?;
    tracing::debug!(
        instrumented = stats.functions_instrumented,
        from_cache = stats.functions_from_cache,
        "module instrumented"
    );

    let instrumented_digest = *blake3::hash(&out.bytes).as_bytes();
    let probe_code = out.probe_code;
    let manifest = Manifest {
        manifest_version: MANIFEST_VERSION,
        module_digest: module.digest_hex(),
        instrumented_digest: hex(&instrumented_digest),
        original_size: module.bytes.len() as u64,
        instrumented_size: out.bytes.len() as u64,
        agent_version: AGENT_FORMAT_VERSION,
        mode: plan.mode.name().to_string(),
        call_sites: plan.call_sites,
        short_max: plan.short_max,
        coverage: plan.counts_blocks(),
        live: plan.live,
        path: shown_path(path),
        probe_code: probe_code.as_ref().map(|code| hex(&code.encode())),
        compiled_digest: None,
        counter_offsets: None,
        functions: out
            .probe_map
            .functions
            .iter()
            .zip(&summaries)
            .map(|(f, s)| ManifestFunction {
                id: f.id,
                name: f.name.clone(),
                kind: if excluded.contains(&f.id) {
                    EXCLUDED_KIND.to_string()
                } else {
                    f.kind.name().to_string()
                },
                key: s.key,
                original_body: f.original_body.as_ref().map(|r| (r.start, r.end)),
                instrumented_body: f.instrumented_body.as_ref().map(|r| (r.start, r.end)),
                probed_body: f.probed_body.as_ref().map(|r| (r.start, r.end)),
                blocks: f
                    .blocks
                    .iter()
                    .map(|&(start, how)| (start, how.code()))
                    .collect(),
                allocator: allocators.get(&f.id).map(|role| role.to_bytes()),
            })
            .collect(),
    };
    progress.step("storing in the cache", None);
    // The original, then the bodies and the instrumented module (both stored against it),
    // then the manifest that points to them: a process killed anywhere in between leaves
    // values nothing points to yet, never a dangling manifest or a value whose original is
    // not stored. The original only when absent (compressing 69 MB takes a second).
    if cache.with(|c| c.contains(Kind::Module, &module.digest)) == Some(false) {
        cache.put_encoded(
            Kind::Module,
            &module.digest,
            cache_values::encode_module(&module.bytes),
        );
    }
    // The lineage's pack becomes this version's bodies, unless it holds exactly them
    // against this very module: stored against it, since the bodies are mostly its bytes
    // (nextpnr's: 1.24 MB alone, 0.80 MB against it).
    if stats.functions_instrumented > 0
        || pack_len != keys.len()
        || pack_against != Some(module.digest)
    {
        let values: pack::Values = keys
            .iter()
            .zip(&bodies)
            .map(|(key, body)| (*key, FunctionEntry::encode_body(body)))
            .collect();
        let plain = pack::encode(BODIES_MAGIC, &values);
        drop(values);
        cache.put_encoded(
            Kind::Function,
            &lineage,
            referenced::encode(&plain, module.digest, &module.bytes),
        );
    }
    // The instrumented module always, replacing a damaged one.
    cache.put_encoded(
        Kind::Module,
        &instrumented_digest,
        cache_values::encode_module_against(&out.bytes, module.digest, &module.bytes),
    );
    cache.put_encoded(Kind::Manifest, &manifest_key, manifest.encode());
    let note = shown_path(path);
    cache.with(|c| c.set_note(Kind::Manifest, &manifest_key, note.as_bytes()));

    Ok(Prepared {
        lineage,
        probe_code,
        module: InstrumentedBytes::Expanded(out.bytes),
        digest: instrumented_digest,
        blocks: blocks_of(&manifest),
        allocators: allocators_of(&manifest),
        functions: functions_of(&manifest),
        stats,
    })
}

/// The path the cache records for a module: absolute (as support will want it), else as
/// given.
fn shown_path(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The block map a manifest records, if its module counts blocks (`None` as well if a
/// block's kind is unknown: then no counts can be trusted).
fn blocks_of(manifest: &Manifest) -> Option<crate::profile::coverage::Coverage> {
    if !manifest.coverage {
        return None;
    }
    let functions = manifest
        .functions
        .iter()
        .filter(|f| !f.blocks.is_empty())
        .map(|f| {
            let (start, end) = f.original_body?;
            let kinds = f
                .blocks
                .iter()
                .map(|&(_, code)| wprof_agent::BlockCount::from_code(code))
                .collect::<Option<Vec<_>>>()?;
            Some(crate::profile::coverage::FunctionCoverage {
                id: f.id,
                name: f.name.clone(),
                body: (start, end),
                starts: f.blocks.iter().map(|&(start, _)| start).collect(),
                counts: vec![0; f.blocks.len()],
                kinds,
                calls: None,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(crate::profile::coverage::Coverage { functions })
}

fn allocators_of(manifest: &Manifest) -> Vec<crate::profile::AllocatorRecord> {
    manifest
        .functions
        .iter()
        .filter_map(|f| {
            let role = wprof_agent::AllocRole::from_bytes(f.allocator?)?;
            Some(crate::profile::AllocatorRecord {
                function: f.id,
                name: f.name.clone(),
                kind: crate::settings::allocators::kind_name(role).to_string(),
                calls: 0,
            })
        })
        .collect()
}

/// The functions a manifest records, as profiles name them.
pub(crate) fn functions_of(manifest: &Manifest) -> Vec<FunctionInfo> {
    manifest
        .functions
        .iter()
        .map(|f| FunctionInfo {
            id: f.id,
            name: f.name.clone(),
            kind: f.kind.clone(),
        })
        .collect()
}

fn from_manifest(
    key: &[u8; 32],
    plan: &ProbePlan,
    cache: &mut CacheSession,
    path: &Path,
) -> Option<Prepared> {
    let manifest = Manifest::decode(&cache.get(Kind::Manifest, key)?)?;
    let module_key = wprof_cache::key_from_hex(&manifest.instrumented_digest)?;
    // Its envelope is checked here (a damaged module is a miss now, and replaced); it is
    // expanded only if the run needs it.
    let stored = cache.get(Kind::Module, &module_key)?;
    let probe_code = match &manifest.probe_code {
        Some(hex) => Some(ProbeCode::decode(&wprof_cache::bytes_from_hex(hex)?)?),
        None => None,
    };
    let note = shown_path(path);
    cache.with(|c| c.set_note(Kind::Manifest, key, note.as_bytes()));
    let defined = manifest
        .functions
        .iter()
        .filter(|f| f.kind != "import")
        .count() as u32;
    Some(Prepared {
        lineage: crate::prepare::compiled::lineage(path, &plan.body_digest()),
        module: InstrumentedBytes::Stored(stored, Default::default()),
        probe_code,
        digest: module_key,
        blocks: blocks_of(&manifest),
        allocators: allocators_of(&manifest),
        functions: functions_of(&manifest),
        stats: InstrumentationStats {
            functions_total: defined,
            functions_instrumented: 0,
            functions_from_cache: defined,
            module_from_cache: true,
            ..Default::default()
        },
    })
}
