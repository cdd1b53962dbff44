//! Time per source line from the samples: the sampled CPU time at each offset of the
//! module's code (stack mode's [`crate::run::stacks::StackSamples::at_offset`]) turned into
//! source lines by the module's DWARF line table (a Go module's: Go's own, through
//! [`crate::report::go_lines`]) when the profile is made, and kept in it
//! ([`LinesRecord`]), so that `wprof annotate` shows time per line as `perf annotate`
//! does, from any directory and without the module.

use std::collections::HashMap;

use crate::profile::{LineTime, LinesRecord};
use crate::report::go_lines::TimeByLine;
use crate::report::source::ModuleDwarf;

/// The sampled time of each source line of the module `bytes`, from the time at each of its
/// code's offsets (`at_offset`, file offsets); `None` when the module has neither DWARF
/// nor Go's line table, or nothing was sampled.
/// `dwarf`: the module's DWARF, read (none if it has none or it could not be read).
/// `unmapped_ns`: the sampled time at machine code of no wasm instruction.
pub fn record(
    bytes: &[u8],
    dwarf: Option<&ModuleDwarf<'_>>,
    at_offset: &HashMap<u32, u64>,
    unmapped_ns: u64,
) -> Option<LinesRecord> {
    if at_offset.is_empty() {
        return None;
    }
    if let Some(dwarf) = dwarf {
        return Some(of_offsets(dwarf, at_offset, unmapped_ns));
    }
    let mut offsets: Vec<u32> = at_offset.keys().copied().collect();
    offsets.sort_unstable();
    match crate::report::go_lines::go_lines_at(bytes, &offsets) {
        Ok(Some(go)) => {
            let charged = go.charge(at_offset);
            Some(LinesRecord {
                lines: to_records(charged.lines),
                unlined_ns: charged.unlined_ns,
                unmapped_ns,
                dispatch_ns: charged.dispatch_ns,
            })
        }
        Ok(None) => None,
        Err(e) => {
            tracing::debug!("no Go lines: {e}");
            None
        }
    }
}

/// [`record`], with the module's DWARF read.
fn of_offsets(
    dwarf: &ModuleDwarf<'_>,
    at_offset: &HashMap<u32, u64>,
    unmapped_ns: u64,
) -> LinesRecord {
    let mut lines = TimeByLine::new();
    let mut unlined_ns = 0;
    for (&offset, &ns) in at_offset {
        let function = dwarf
            .bodies
            .partition_point(|body| body.end <= offset as usize);
        let within = dwarf
            .bodies
            .get(function)
            .is_some_and(|body| body.contains(&(offset as usize)));
        let address = (offset as usize).saturating_sub(dwarf.code_start) as u64;
        let location = dwarf.context.find_location(address).ok().flatten();
        match (within, location.and_then(|l| Some((l.file?, l.line?)))) {
            (true, Some((file, line))) if line > 0 => {
                let id = dwarf.imported + function as u32;
                *lines.entry((id, file.to_string(), line)).or_default() += ns;
            }
            _ => unlined_ns += ns,
        }
    }
    LinesRecord {
        lines: to_records(lines),
        unlined_ns,
        unmapped_ns,
        dispatch_ns: 0,
    }
}

/// The profile's records of `lines`.
fn to_records(lines: TimeByLine) -> Vec<LineTime> {
    lines
        .into_iter()
        .map(|((function, file, line), self_ns)| LineTime {
            function,
            file,
            line,
            self_ns,
        })
        .collect()
}
