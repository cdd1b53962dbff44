//! Assembling the instrumented module: the original sections, renumbered for the probe
//! imports, with the probe types and imports appended and the instrumented bodies in place
//! of the originals.

use wasm_encoder::reencode::Reencode;
use wasm_encoder::Module;
use wasmparser::{Parser, Payload};

use crate::layout::ModuleLayout;
use crate::probe_map::ProbeLayout;
use crate::renumber::Renumber;
use crate::{
    AgentError, ContextArena, FunctionProbes, InstrumentedBody, InstrumentedModule, ProbeMap,
};

pub(crate) fn assemble(
    layout: &ModuleLayout<'_>,
    probes: &ProbeLayout,
    bodies: &[InstrumentedBody],
) -> Result<InstrumentedModule, AgentError> {
    if bodies.len() != layout.defined_funcs.len() {
        return Err(AgentError::BodyCount {
            expected: layout.defined_funcs.len(),
            got: bodies.len(),
        });
    }
    let counters = if probes.arena().is_some() {
        bodies
            .iter()
            .map(|b| b.counter_sites.len() as u64)
            .sum::<u64>()
    } else {
        0
    };
    if counters > u64::from(ContextArena::MAX_COUNTERS) {
        return Err(AgentError::Unsupported {
            what: format!(
                "coverage of {counters} basic blocks (at most {} are counted)",
                ContextArena::MAX_COUNTERS
            ),
            offset: 0,
        });
    }
    let indices = probes.indices();
    let names = if indices.copies() > 0 {
        let mut names: Vec<(u32, String)> = layout
            .names
            .iter()
            .map(|(&id, name)| (id, name.clone()))
            .collect();
        names.sort_unstable();
        names
    } else {
        Vec::new()
    };
    let mut renumber = Renumber {
        probes,
        bodies,
        types: layout.defined_funcs.iter().map(|f| f.type_index).collect(),
        params: layout
            .defined_funcs
            .iter()
            .map(|f| layout.signature(f.type_index).params.len() as u32)
            .collect(),
        names,
        counters: counters as u32,
        retries: bodies
            .iter()
            .enumerate()
            .filter(|(_, b)| b.retry_site.is_some())
            .map(|(defined, _)| defined)
            .collect(),
        wrote_types: false,
        wrote_imports: false,
        wrote_globals: false,
        wrote_memories: false,
        wrote_exports: false,
    };
    let mut module = Module::new();
    renumber
        .parse_core_module(&mut module, Parser::new(0), layout.bytes)
        .map_err(|e| match e {
            wasm_encoder::reencode::Error::UserError(e) => e,
            wasm_encoder::reencode::Error::ParseError(e) => AgentError::Parse(e),
            other => AgentError::Encode(other.to_string()),
        })?;
    let mut bytes = module.finish();

    let mut placed = Vec::with_capacity(bodies.len());
    for payload in Parser::new(0).parse_all(&bytes) {
        if let Payload::CodeSectionEntry(body) = payload? {
            placed.push(body.range());
        }
    }
    if probes.arena().is_some() && !placed.is_empty() {
        // The node finder's body comes first.
        placed.remove(0);
    }
    // The probed copies follow the module's functions.
    let copies: Vec<std::ops::Range<usize>> = if indices.copies() > 0 {
        placed
            .get(bodies.len()..2 * bodies.len())
            .unwrap_or_default()
            .to_vec()
    } else {
        Vec::new()
    };
    placed.truncate(bodies.len());
    let mut probe_map = ProbeMap::default();
    let mut placements = Vec::with_capacity(bodies.len());
    let imports = layout.imported_funcs.len() as u32;
    for id in 0..imports {
        probe_map.functions.push(FunctionProbes {
            id,
            name: layout.display_name(id),
            kind: crate::FunctionKind::Import,
            original_body: None,
            instrumented_body: None,
            probed_body: None,
            offsets: Vec::new(),
            blocks: Vec::new(),
        });
    }
    for (defined, ((func, body), new_range)) in layout
        .defined_funcs
        .iter()
        .zip(bodies)
        .zip(placed)
        .enumerate()
    {
        let id = imports + defined as u32;
        let old = func.body.start as u32;
        let placement = Placement {
            own: new_range.start as u32,
            probed: body
                .probed_at
                .zip(copies.get(defined))
                .map(|(at, copy)| (at, copy.start as u32)),
        };
        probe_map.functions.push(FunctionProbes {
            id,
            name: layout.display_name(id),
            kind: crate::FunctionKind::Local,
            original_body: Some(old..func.body.end as u32),
            instrumented_body: Some(new_range.start as u32..new_range.end as u32),
            probed_body: placement
                .probed
                .and_then(|_| copies.get(defined))
                .map(|r| r.start as u32..r.end as u32),
            offsets: body
                .offsets
                .iter()
                .map(|&(o, n)| (old + o, placement.at(n)))
                .collect(),
            blocks: body.blocks.clone(),
        });
        placements.push(placement);
    }
    // Sample mode's sampler and time mode's ticks tell the probes' instructions apart.
    let probe_code = (probes.arena().is_some_and(|a| a.sampled)
        || probes.mode == crate::ProbeMode::Time)
        .then(|| append_probe_code(&mut bytes, &placements, bodies));
    Ok(InstrumentedModule {
        bytes,
        probe_map,
        probe_code,
    })
}

/// Where a body's bytes landed in the instrumented module.
#[derive(Debug, Clone, Copy)]
struct Placement {
    /// Where the function's own body starts.
    own: u32,
    /// With live probes: where the probed copy starts in the body's bytes, and where it
    /// landed.
    probed: Option<(u32, u32)>,
}

impl Placement {
    /// The module offset of the body's byte `at`.
    fn at(&self, at: u32) -> u32 {
        match self.probed {
            Some((split, copy)) if at >= split => copy + (at - split),
            _ => self.own + at,
        }
    }
}

/// Appends the `wprof.probe-code` section (see [`crate::probe_code`]): at the end, so no
/// body moves. What it says.
fn append_probe_code(
    bytes: &mut Vec<u8>,
    placements: &[Placement],
    bodies: &[InstrumentedBody],
) -> crate::probe_code::ProbeCode {
    // A range never spans the two bodies of a live function: each ends where its body does.
    // The probed copies come after every function's own body: sorted here.
    let mut ranges: Vec<(u32, u32)> = placements
        .iter()
        .zip(bodies)
        .flat_map(|(placement, body)| {
            body.probe_code.iter().map(move |&(start, end)| {
                (placement.at(start), placement.at(start) + (end - start))
            })
        })
        .collect();
    ranges.sort_unstable();
    let code = crate::probe_code::ProbeCode::new(ranges);
    let section = wasm_encoder::CustomSection {
        name: crate::probe_code::SECTION.into(),
        data: code.encode().into(),
    };
    wasm_encoder::Section::append_to(&section, bytes);
    code
}
