//! The names and sources a profile keeps of the module's functions (see
//! [`crate::report::source::record_symbols`]), with the functions' sources learnt once per
//! module and kept in the cache (see [`crate::prepare::facts`]): from the module's DWARF
//! the first time, from the cache after.

use std::collections::HashMap;
use std::path::Path;

use crate::prepare::facts::{self, Sources};
use crate::prepare::loader::LoadedModule;
use crate::profile::Profile;
use crate::report::source::{self, ModuleDwarf, Source};
use crate::timings::Timings;

/// Keeps in `profile` the names and sources the reports show, as the phase `symbols`;
/// `dwarf`: the module's DWARF, if the mode read it already (for its sampled lines, or
/// beside the run).
pub(super) fn record(
    loaded: &LoadedModule,
    path: &Path,
    timings: &mut Timings,
    profile: &mut Profile,
    dwarf: Option<&ModuleDwarf<'_>>,
) {
    timings.time("symbols", || {
        let sources = facts::sources(loaded, || learn(&loaded.bytes, dwarf));
        let of = |wanted: &std::collections::HashSet<u32>| {
            let found = wanted.iter().filter_map(|&id| {
                let (file, line) = sources.get(id)?;
                let file = file.to_string();
                Some((id, Source { file, line }))
            });
            Ok(found.collect::<HashMap<_, _>>())
        };
        source::record_symbols_with(profile, &loaded.bytes, path, &of)
    });
}

/// Whether a mode whose run `sampled` offsets of the module's code should read its DWARF:
/// for the functions' sources, unless they are known; for the sampled lines, unless the
/// sources give no function a line (no offset has one then).
pub(super) fn dwarf_needed(loaded: &LoadedModule, sampled: bool) -> bool {
    facts::known_sources(loaded).is_none_or(|s| sampled && s.any())
}

/// Every defined function's source, from `dwarf`, or from the DWARF of the module `bytes`
/// read now; none where it has none or it cannot be read.
fn learn(bytes: &[u8], dwarf: Option<&ModuleDwarf<'_>>) -> Sources {
    match dwarf {
        Some(dwarf) => sources_in(dwarf),
        None => match source::module_dwarf(bytes) {
            Ok(Some(dwarf)) => sources_in(&dwarf),
            Ok(None) => Sources::default(),
            Err(e) => {
                tracing::debug!("no sources: {e:#}");
                Sources::default()
            }
        },
    }
}

/// Every defined function's source in `dwarf`.
fn sources_in(dwarf: &ModuleDwarf<'_>) -> Sources {
    match source::sources_in(dwarf, None) {
        Ok(found) => Sources::new(
            dwarf.imported,
            dwarf.bodies.len(),
            found.into_iter().map(|(id, s)| (id, s.file, s.line)),
        ),
        Err(e) => {
            tracing::debug!("no sources: {e:#}");
            Sources::default()
        }
    }
}
