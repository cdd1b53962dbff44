//! Which core module of a compiled component, and which of its functions, a machine
//! address belongs to: the function symbols wasmtime writes into a compiled component
//! (`wasm[M]::function[N]`, `M` the core module in the order the component defines them,
//! `N` the function's index in it), read from its serialized image, placed where the
//! component's image is loaded; and, in sample mode, whether an address is in wprof's
//! probes (the image's address map gives the module byte, the module's `wprof.probe-code`
//! section says whose it is), so that their time is left out as it is for a module.

use object::{Object, ObjectSection, ObjectSymbol};
use wprof_agent::{FunctionIndices, ProbeMode};

use wprof_agent::ProbeCode;

use crate::run::code::address_map::ArtifactAddressMap;
use crate::run::code::map::{CodeMap, Running};

/// The compiled functions of a component's core modules, by address.
#[derive(Debug, Default)]
pub struct ComponentCode {
    /// (start, end, module), sorted by start: which module's code a range is.
    ranges: Vec<(usize, usize, usize)>,
    /// Per module: its functions' ranges and what each is in the original module.
    modules: Vec<CodeMap>,
    /// Per module: which of its bytes are wprof's probes (sample mode's
    /// `wprof.probe-code` section), with the image's address map to find an address's byte.
    probes: Vec<Option<ProbeCode>>,
    /// The image's map from `.text` offsets to module byte offsets.
    address_map: Option<ArtifactAddressMap>,
    /// Where `.text` is loaded.
    text: usize,
}

impl ComponentCode {
    /// The map of `component` as loaded, for its first core modules, each given as how
    /// it numbers its functions (`None`: a module without probes, whose indices are taken
    /// as shifted by `mode`'s probe imports). `None` when the image cannot be read.
    pub fn of(
        component: &wasmtime::component::Component,
        indices: &[Option<FunctionIndices>],
        probes: Vec<Option<ProbeCode>>,
        mode: ProbeMode,
    ) -> Option<Self> {
        let image = crate::run::code::image::component_image(component);
        let elf = object::File::parse(image).ok()?;
        let text = elf.section_by_name(".text")?;
        let (text_offset, _) = text.file_range()?;
        let base = component.image_range().start as usize + text_offset as usize;
        let mut per_module: Vec<Vec<(usize, usize, u32)>> = vec![Vec::new(); indices.len()];
        for symbol in elf.symbols() {
            let Some((module, function)) = symbol.name().ok().and_then(parse_symbol) else {
                continue;
            };
            let Some(ranges) = per_module.get_mut(module) else {
                continue;
            };
            let start = base + symbol.address() as usize;
            ranges.push((start, start + symbol.size() as usize, function));
        }
        let mut ranges = Vec::new();
        let mut modules = Vec::new();
        for (k, functions) in per_module.into_iter().enumerate() {
            ranges.extend(functions.iter().map(|&(s, e, _)| (s, e, k)));
            let indices = indices[k].unwrap_or(FunctionIndices {
                imports: 0,
                functions: u32::MAX / 2,
                mode,
                live: false,
            });
            modules.push(CodeMap::from_ranges(functions, indices));
        }
        ranges.sort_unstable();
        let address_map = probes
            .iter()
            .any(Option::is_some)
            .then(|| ArtifactAddressMap::of_bytes(image))
            .flatten();
        Some(ComponentCode {
            ranges,
            modules,
            probes,
            address_map,
            text: base,
        })
    }

    /// The module and function running at `pc`; `None` outside every module's code (the
    /// engine, a host function, a trampoline).
    pub fn running(&self, pc: usize) -> Option<(usize, Running)> {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= pc);
        let (_, end, module) = self.ranges[after.checked_sub(1)?];
        if pc >= end {
            return None;
        }
        let running = self.modules[module].running(pc);
        let in_probe = || {
            let probes = self.probes.get(module)?.as_ref()?;
            let offset = self.address_map.as_ref()?.file_offset(pc - self.text)?;
            Some(probes.contains(offset))
        };
        match running {
            Running::Function(_) if in_probe() == Some(true) => Some((module, Running::Probe)),
            _ => Some((module, running)),
        }
    }
}

/// `wasm[M]::function[N]` or `wasm[M]::function[N]::name` as `(M, N)`.
fn parse_symbol(name: &str) -> Option<(usize, u32)> {
    let rest = name.strip_prefix("wasm[")?;
    let (module, rest) = rest.split_once("]::function[")?;
    let function = rest.split(']').next()?;
    Some((module.parse().ok()?, function.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_name_module_and_function() {
        assert_eq!(parse_symbol("wasm[0]::function[16]::_start"), Some((0, 16)));
        assert_eq!(parse_symbol("wasm[3]::function[2]"), Some((3, 2)));
        assert_eq!(
            parse_symbol("component-trampolines[0]-wasm-call-component-resource-drop[0]"),
            None
        );
        assert_eq!(parse_symbol("wasm[x]::function[2]"), None);
    }

    #[test]
    fn a_compiled_components_functions_are_found_by_address() {
        let engine = crate::run::engine::new_engine().unwrap();
        let bytes = wat::parse_str(
            r#"(component
                (core module $a (func $f (export "f") (result i32) i32.const 1))
                (core module $b (func $g (export "g") (result i32) i32.const 2)
                                (func $h (export "h") (result i32) i32.const 3))
                (core instance $ia (instantiate $a))
                (core instance $ib (instantiate $b))
                (func (export "f") (result u32) (canon lift (core func $ia "f")))
                (func (export "h") (result u32) (canon lift (core func $ib "h"))))"#,
        )
        .unwrap();
        let component = wasmtime::component::Component::new(&engine, &bytes).unwrap();
        // Not instrumented: what each function is does not matter here, only which
        // module's it is.
        let code = ComponentCode::of(&component, &[None, None], vec![None, None], ProbeMode::Time)
            .unwrap();
        let mut found: Vec<(usize, Running)> = code
            .ranges
            .iter()
            .map(|&(start, _, _)| code.running(start).unwrap())
            .collect();
        found.sort_by_key(|&(m, r)| (m, format!("{r:?}")));
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found.iter().filter(|(m, _)| *m == 1).count(), 2);
        let range = component.image_range();
        assert!(code
            .ranges
            .iter()
            .all(|&(s, e, _)| s >= range.start as usize && e <= range.end as usize));
        assert_eq!(code.running(0), None);
    }
}
