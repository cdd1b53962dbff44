//! Which function of the instrumented module a machine address belongs to: the compiled
//! functions' address ranges, taken from wasmtime once the module is loaded, and what each
//! instrumented function is in the original (one of its functions, or one of wprof's).

use wprof_agent::{ContextArena, FunctionIndices, Indexed, ProbeImports, ProbeMode, SwitchTable};

use crate::run::code::address_map::ArtifactAddressMap;

/// How far back [`CodeMap::nearest_module_offsets`] looks for a mapped instruction.
const NEAREST_WITHIN: usize = 256;

/// What runs at an address of the module's compiled code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Running {
    /// Function `id` of the original module.
    Function(u32),
    /// Code wprof added: the node finder.
    Probe,
    /// Not the module's own functions: the engine, a host function, a trampoline.
    Outside,
}

/// The address ranges of a loaded module's compiled functions, sorted.
#[derive(Debug, Clone, Default)]
pub struct CodeMap {
    /// Where the module's compiled code starts.
    text: usize,
    /// (start, end, instrumented function index), sorted by start, not overlapping.
    ranges: Vec<(usize, usize, u32)>,
    /// How the instrumented module numbers its functions.
    indices: FunctionIndices,
    /// The module is an original, not instrumented: its indices are the functions' ids.
    original: bool,
}

impl CodeMap {
    /// The map of `module`, an instrumented module of `mode`, as loaded (its code stays where
    /// it is for as long as the module lives).
    pub fn of(module: &wasmtime::Module, mode: ProbeMode) -> Self {
        let text = module.text().as_ptr() as usize;
        let mut ranges: Vec<(usize, usize, u32)> = module
            .functions()
            .map(|f| (text + f.offset, text + f.offset + f.len, f.index.as_u32()))
            .collect();
        ranges.sort_unstable();
        CodeMap {
            text,
            ranges,
            indices: indices_of(module, mode),
            original: false,
        }
    }

    /// The map of `module`, a module as it was given (not instrumented), or with entry
    /// counters (see [`wprof_agent::entry_counts`]), as loaded. A counted module's functions
    /// after the original's (as many as an export's name says) are wprof's.
    pub fn of_original(module: &wasmtime::Module) -> Self {
        use wprof_agent::entry_counts::FUNCTIONS_PREFIX;
        let imports = module
            .imports()
            .filter(|i| matches!(i.ty(), wasmtime::ExternType::Func(_)))
            .count() as u32;
        let counted = module
            .exports()
            .find_map(|e| e.name().strip_prefix(FUNCTIONS_PREFIX)?.parse::<u32>().ok());
        CodeMap {
            original: true,
            indices: FunctionIndices {
                imports,
                functions: counted
                    .map_or(imports + module.functions().len() as u32, |last| last + 1),
                ..FunctionIndices::default()
            },
            ..Self::of(module, ProbeMode::Sample)
        }
    }

    /// The map of an instrumented module whose functions were found elsewhere (a
    /// component's, see [`crate::run::component::code`]): `(start, end, instrumented function
    /// index)`, and how the module numbers its functions.
    pub fn from_ranges(mut ranges: Vec<(usize, usize, u32)>, indices: FunctionIndices) -> Self {
        ranges.sort_unstable();
        CodeMap {
            text: ranges.first().map_or(0, |r| r.0),
            ranges,
            indices,
            original: false,
        }
    }

    /// An original module's map of `(start, end, function id)` ranges, for tests.
    #[cfg(test)]
    pub(crate) fn original_of_ranges(mut ranges: Vec<(usize, usize, u32)>) -> Self {
        ranges.sort_unstable();
        CodeMap {
            text: ranges.first().map_or(0, |r| r.0),
            ranges,
            indices: FunctionIndices::default(),
            original: true,
        }
    }

    /// Functions the original module imports: function ids below this are imports.
    pub fn imports(&self) -> u32 {
        self.indices.imports
    }

    /// What runs at `pc`.
    pub fn running(&self, pc: usize) -> Running {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= pc);
        match after.checked_sub(1).map(|i| self.ranges[i]) {
            Some((_, end, index)) if pc < end => self.classify(index),
            _ => Running::Outside,
        }
    }

    /// Where the compiled function whose code holds `pc` starts.
    pub fn function_start(&self, pc: usize) -> Option<usize> {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= pc);
        let (start, end, _) = self.ranges[after.checked_sub(1)?];
        (pc < end).then_some(start)
    }

    /// The byte offset in the wasm module of the instruction each of `pcs` (sorted) is part
    /// of: looked up in `artifact`'s address map when given, else through `module`'s (the
    /// module this map was made of), which is read whole; `None` where the map has no
    /// offset, or `module` no map.
    pub fn module_offsets(
        &self,
        module: &wasmtime::Module,
        artifact: Option<&ArtifactAddressMap>,
        pcs: &[usize],
    ) -> Vec<Option<u32>> {
        if let Some(map) = artifact {
            return pcs
                .iter()
                .map(|&pc| map.file_offset(pc.wrapping_sub(self.text)))
                .collect();
        }
        let Some(entries) = module.address_map() else {
            return vec![None; pcs.len()];
        };
        // One pass over the map and the sorted addresses together: the entry that covers an
        // address is the last one starting at or before it.
        let mut entries = entries.peekable();
        let mut covering: Option<u32> = None;
        pcs.iter()
            .map(|&pc| {
                let at = pc.wrapping_sub(self.text);
                while let Some(&(start, offset)) = entries.peek() {
                    if start > at {
                        break;
                    }
                    covering = offset;
                    entries.next();
                }
                covering
            })
            .collect()
    }

    /// Like [`CodeMap::module_offsets`], but an address the compiler's map gives no wasm
    /// offset (code it added: a prologue, a spill, a move between registers) takes the
    /// offset of the nearest instruction before it in the same function that has one, up
    /// to [`NEAREST_WITHIN`] bytes back: the source line whose work it serves.
    pub fn nearest_module_offsets(
        &self,
        module: &wasmtime::Module,
        artifact: Option<&ArtifactAddressMap>,
        pcs: &[usize],
    ) -> Vec<Option<u32>> {
        let entries: Vec<(usize, Option<u32>)> = match artifact {
            Some(_) => Vec::new(),
            None => match module.address_map() {
                Some(entries) => entries.collect(),
                None => return vec![None; pcs.len()],
            },
        };
        let lookup = |at: usize| -> Option<u32> {
            match artifact {
                Some(map) => map.file_offset(at),
                None => {
                    let after = entries.partition_point(|&(start, _)| start <= at);
                    entries[after.checked_sub(1)?].1
                }
            }
        };
        pcs.iter()
            .map(|&pc| {
                let start = self.function_start(pc)?;
                let lowest = start.max(pc.saturating_sub(NEAREST_WITHIN));
                (lowest..=pc)
                    .rev()
                    .find_map(|address| lookup(address.wrapping_sub(self.text)))
            })
            .collect()
    }

    /// What the instrumented module's function `index` is: a probed copy runs its
    /// function.
    fn classify(&self, index: u32) -> Running {
        if self.original {
            return match self.indices.functions > 0 && index >= self.indices.functions {
                true => Running::Probe,
                false => Running::Function(index),
            };
        }
        match self.indices.what(index) {
            Indexed::Function(id) | Indexed::ProbedCopy(id) => Running::Function(id),
            Indexed::Probe => Running::Probe,
        }
    }
}

/// How `module`, instrumented for `mode`, numbers its functions, read from the module
/// itself: the probe imports follow the original's imports; a live module exports its
/// switches and holds two bodies per defined function (see [`SwitchTable`]), besides the
/// node finder of the inline modes.
fn indices_of(module: &wasmtime::Module, mode: ProbeMode) -> FunctionIndices {
    let imported = module
        .imports()
        .filter(|i| matches!(i.ty(), wasmtime::ExternType::Func(_)))
        .count() as u32;
    let imports = imported.saturating_sub(ProbeImports::COUNT);
    let live = module.exports().any(|e| e.name() == SwitchTable::MEMORY);
    // The node finder, and the functions appended after the module's (see
    // `ContextArena::RETRY`), which the module counts in an export's name.
    let appended = module
        .exports()
        .find_map(|e| {
            e.name()
                .strip_prefix(ContextArena::ADDED)?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    let added = u32::from(mode.counts_inline()) + appended;
    let defined = (module.functions().len() as u32).saturating_sub(added);
    FunctionIndices {
        imports,
        functions: imports + if live { defined / 2 } else { defined },
        mode,
        live,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_original_functions_and_probes() {
        // One import, the probe imports, the finder, then the module's two functions.
        let map = CodeMap {
            text: 0,
            ranges: vec![(100, 150, 10), (150, 200, 11), (260, 300, 12)],
            indices: FunctionIndices {
                imports: 1,
                functions: 3,
                mode: ProbeMode::Sample,
                live: false,
            },
            original: false,
        };
        assert_eq!(ProbeImports::shift(ProbeMode::Sample), 10);
        assert_eq!(map.running(99), Running::Outside);
        assert_eq!(map.running(100), Running::Probe);
        assert_eq!(map.running(150), Running::Function(1));
        assert_eq!(map.running(199), Running::Function(1));
        assert_eq!(map.running(200), Running::Outside);
        assert_eq!(map.running(299), Running::Function(2));
        assert_eq!(map.running(300), Running::Outside);
    }

    #[test]
    fn a_loaded_module_maps_its_own_code() {
        let wat = r#"(module
            (import "wprof" "enter" (func (param i32)))
            (import "wprof" "exit" (func (param i32)))
            (import "wprof" "tail" (func (param i32)))
            (import "wprof" "enter_catching" (func (param i32) (result i32)))
            (import "wprof" "unwind" (func (param i32)))
            (import "wprof" "site" (func (param i32)))
            (import "wprof" "called" (func (param i32)))
            (import "wprof" "alloc" (func (param i32 i32 i64 i64 i64 i32)))
            (import "wprof" "inject" (func (param i32) (result i32)))
            (func $finder)
            (func $a (result i32) i32.const 1)
            (func $b (result i32) i32.const 2))"#;
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat).unwrap();
        let map = CodeMap::of(&module, ProbeMode::Sample);
        assert_eq!(map.ranges.len(), 3);
        let found: Vec<Running> = map.ranges.iter().map(|r| map.running(r.0)).collect();
        assert_eq!(
            found,
            [Running::Probe, Running::Function(0), Running::Function(1)]
        );
        assert_eq!(map.running(map.ranges[2].1), Running::Outside);
        // Every instruction of $b's body maps into $b's body in the module's bytes.
        let bytes = wat::parse_str(wat).unwrap();
        let bodies: Vec<std::ops::Range<usize>> = wasmparser::Parser::new(0)
            .parse_all(&bytes)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::CodeSectionEntry(body) => Some(body.range()),
                _ => None,
            })
            .collect();
        let b_body = bodies[2].clone();
        let (b_start, b_end, _) = map.ranges[2];
        let pcs: Vec<usize> = (b_start..b_end).collect();
        let offsets = map.module_offsets(&module, None, &pcs);
        assert!(offsets.iter().flatten().count() > 0);
        for offset in offsets.into_iter().flatten() {
            assert!(
                b_body.contains(&(offset as usize)),
                "{offset} outside {b_body:?}"
            );
        }
    }

    #[test]
    fn an_original_modules_functions_are_its_own_ids() {
        // Imports named as wprof's probes are the program's own in a module as given.
        let wat = r#"(module
            (import "wprof" "enter" (func (param i32)))
            (import "env" "f" (func))
            (func $a (result i32) i32.const 1)
            (func $b (result i32) i32.const 2))"#;
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat).unwrap();
        let map = CodeMap::of_original(&module);
        assert_eq!(map.imports(), 2);
        let found: Vec<Running> = map.ranges.iter().map(|r| map.running(r.0)).collect();
        assert_eq!(found, [Running::Function(2), Running::Function(3)]);
    }

    #[test]
    fn functions_the_agent_appends_are_probes() {
        // A leaf in sample mode gets a retry function after the module's own.
        let original = wat::parse_str(
            r#"(module
                (func $leaf (result i32) i32.const 1)
                (func (export "_start") (drop (call $leaf))))"#,
        )
        .unwrap();
        let plan = wprof_agent::ProbePlan {
            mode: ProbeMode::Sample,
            ..Default::default()
        };
        let out = wprof_agent::instrument(&original, &plan).unwrap();
        let engine = crate::run::engine::new_engine().unwrap();
        let module = wasmtime::Module::new(&engine, &out.bytes).unwrap();
        let map = CodeMap::of(&module, ProbeMode::Sample);
        // The finder, $leaf, _start, $leaf's retry function.
        let mut by_index: Vec<(u32, Running)> =
            map.ranges.iter().map(|r| (r.2, map.running(r.0))).collect();
        by_index.sort_unstable_by_key(|r| r.0);
        let found: Vec<Running> = by_index.into_iter().map(|r| r.1).collect();
        assert_eq!(
            found,
            [
                Running::Probe,
                Running::Function(0),
                Running::Function(1),
                Running::Probe
            ]
        );
        assert_eq!(map.indices.functions, 2);
    }

    #[test]
    fn a_live_modules_probed_copies_run_their_functions() {
        let original = wat::parse_str(
            r#"(module
                (import "env" "f" (func))
                (func $a (result i32) i32.const 1)
                (func $b (export "b") (result i32) call $a))"#,
        )
        .unwrap();
        for (mode, coverage) in [
            (ProbeMode::Sample, false),
            (ProbeMode::Cost, true),
            (ProbeMode::Time, false),
        ] {
            let plan = wprof_agent::ProbePlan {
                mode,
                live: true,
                coverage,
                ..Default::default()
            };
            let out = wprof_agent::instrument(&original, &plan).unwrap();
            let engine = crate::run::engine::new_engine().unwrap();
            let module = wasmtime::Module::new(&engine, &out.bytes).unwrap();
            let map = CodeMap::of(&module, mode);
            assert_eq!(
                map.indices,
                wprof_agent::Instrumenter::new(&original, &plan)
                    .unwrap()
                    .indices(),
                "{mode:?}"
            );
            let mut found: Vec<Running> = map.ranges.iter().map(|r| map.running(r.0)).collect();
            found.sort_by_key(|r| format!("{r:?}"));
            let mut expected = vec![Running::Function(1), Running::Function(1)];
            expected.extend([Running::Function(2), Running::Function(2)]);
            // The node finder (coverage adds no function).
            expected.extend(std::iter::repeat_n(
                Running::Probe,
                usize::from(mode.counts_inline()),
            ));
            expected.sort_by_key(|r| format!("{r:?}"));
            assert_eq!(found, expected, "{mode:?}");
        }
    }
}
