//! Unit tests of the rewriter: every output validates, probes sit where the crate docs say.

use crate::{
    instrument, key_agent, FunctionKind, Instrumenter, ProbeImports, ProbePlan, AGENT_CODE,
    AGENT_FORMAT_VERSION,
};

pub(crate) fn validate(bytes: &[u8]) {
    let mut v = wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all());
    if let Err(e) = v.validate_all(bytes) {
        panic!("instrumented module does not validate: {e}");
    }
}

fn instrument_wat(wat: &str) -> crate::InstrumentedModule {
    let wasm = wat::parse_str(wat).unwrap();
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(&wasm)
        .expect("test module is valid");
    let out = instrument(&wasm, &ProbePlan::default()).unwrap();
    validate(&out.bytes);
    out
}

/// The names a module exports, in order.
fn export_names(bytes: &[u8]) -> Vec<String> {
    wasmparser::Parser::new(0)
        .parse_all(bytes)
        .filter_map(|p| match p.unwrap() {
            wasmparser::Payload::ExportSection(r) => Some(
                r.into_iter()
                    .map(|e| e.unwrap().name.to_string())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The instrumented module printed as text, for assertions on its shape.
pub(crate) fn text(bytes: &[u8]) -> String {
    let mut out = String::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload.unwrap() {
            let mut ops = body.get_operators_reader().unwrap();
            while !ops.eof() {
                out.push_str(&format!("{:?}\n", ops.read().unwrap()));
            }
            out.push_str("--\n");
        }
    }
    out
}

#[test]
fn probes_every_exit_path() {
    let out = instrument_wat(
        r#"(module
          (import "env" "host" (func $host (param i32)))
          (func $f (param i32) (result i32)
            (br_if 0 (i32.const 7) (local.get 0))
            drop
            block (result i32)
              i32.const 1
              local.get 0
              br_table 0 1 0
            end
            return)
          (func $g (result i32 i64)
            i32.const 1
            i64.const 2
            br 0)
          (func $h (call $host (i32.const 3)) (call $h))
        )"#,
    );
    let t = text(&out.bytes);
    let bodies: Vec<&str> = t.split("--\n").collect();
    // $f: enter, wrapper block, ..., exit before `return` and after the wrapper.
    assert!(bodies[0].starts_with("I32Const { value: 1 }\nCall { function_index: 1 }\nBlock"));
    assert_eq!(bodies[0].matches("Call { function_index: 2 }").count(), 2);
    // $g returns two values through a wrapper block of an appended function type.
    assert!(bodies[1].contains("Block { blockty: FuncType("));
    // $h: the import call is bracketed with its own id (0); the recursive call is
    // renumbered past the probe imports (3 -> 6).
    assert!(bodies[2].contains(
        "I32Const { value: 0 }\nCall { function_index: 1 }\nCall { function_index: 0 }\nI32Const { value: 0 }\nCall { function_index: 2 }"
    ));
    assert!(bodies[2].contains(&format!(
        "Call {{ function_index: {} }}",
        3 + ProbeImports::COUNT
    )));
}

#[test]
fn names_and_kinds() {
    let out = instrument_wat(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
          (func $named)
          (func (export "exported"))
          (func))"#,
    );
    let names: Vec<_> = out
        .probe_map
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("wasi_snapshot_preview1::fd_write", FunctionKind::Import),
            ("named", FunctionKind::Local),
            ("exported", FunctionKind::Local),
            ("func[3]", FunctionKind::Local),
        ]
    );
}

#[test]
fn names_given_fill_only_what_the_name_section_leaves() {
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "f" (func))
          (func $named)
          (func (export "exported"))
          (func))"#,
    )
    .unwrap();
    let plan = ProbePlan::default();
    let mut instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
    assert_eq!(instrumenter.unnamed_functions(), [2, 3]);
    instrumenter.name_unnamed([
        (0, "import".to_string()),
        (1, "other".to_string()),
        (2, "from_dwarf".to_string()),
        (3, "also".to_string()),
        (9, "none".to_string()),
    ]);
    let names = instrumenter.function_names();
    assert_eq!(names, ["env::f", "named", "from_dwarf", "also"]);
    // Only shown: the instrumented module is the same, and so are its names.
    let bodies: Vec<_> = (0..3)
        .map(|d| instrumenter.instrument_function(d).unwrap())
        .collect();
    let out = instrumenter.assemble(&bodies).unwrap();
    assert_eq!(out.bytes, instrument(&wasm, &plan).unwrap().bytes);
    let shown: Vec<_> = out.probe_map.functions.iter().map(|f| &f.name).collect();
    assert_eq!(shown, names.iter().collect::<Vec<_>>());
}

#[test]
fn module_without_types_or_imports() {
    let out = instrument_wat("(module (memory 1) (data (i32.const 0) \"x\"))");
    assert!(out.probe_map.functions.is_empty());
    instrument_wat("(module)");
}

#[test]
fn tables_exports_start_and_ref_func_are_renumbered() {
    instrument_wat(
        r#"(module
          (type $t (func (result i32)))
          (table 2 funcref)
          (elem (i32.const 0) $a $b)
          (elem declare func $b)
          (global funcref (ref.func $a))
          (func $a (result i32) i32.const 1)
          (func $b (result i32) (call_indirect (type $t) (i32.const 0)))
          (func $c (drop (ref.func $b)) (return_call $d))
          (func $d)
          (start $d)
          (export "b" (func $b)))"#,
    );
}

#[test]
fn offset_map_covers_every_instruction_in_order() {
    let wasm = wat::parse_str(
        "(module (func $f (param i32) (result i32) local.get 0 i32.const 1 i32.add))",
    )
    .unwrap();
    let out = instrument(&wasm, &ProbePlan::default()).unwrap();
    let f = &out.probe_map.functions[0];
    // local.get, i32.const, i32.add, end
    assert_eq!(f.offsets.len(), 4);
    assert!(f
        .offsets
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    // Each copied instruction has the same bytes at both offsets.
    for &(old, new) in &f.offsets[..3] {
        assert_eq!(wasm[old as usize], out.bytes[new as usize]);
    }
}

#[test]
fn keys_change_only_with_the_function() {
    let a =
        wat::parse_str("(module (func $f i32.const 1 drop) (func $g i32.const 2 drop))").unwrap();
    let b =
        wat::parse_str("(module (func $f i32.const 1 drop) (func $g i32.const 3 drop))").unwrap();
    let plan = ProbePlan::default();
    let ka: Vec<_> = Instrumenter::new(&a, &plan)
        .unwrap()
        .functions()
        .into_iter()
        .map(|f| f.key)
        .collect();
    let kb: Vec<_> = Instrumenter::new(&b, &plan)
        .unwrap()
        .functions()
        .into_iter()
        .map(|f| f.key)
        .collect();
    assert_eq!(ka[0], kb[0]);
    assert_ne!(ka[1], kb[1]);
}

#[test]
fn components_are_refused() {
    let component = wat::parse_str("(component)").unwrap();
    assert!(matches!(
        instrument(&component, &ProbePlan::default()),
        Err(crate::AgentError::Component)
    ));
}

#[test]
fn every_sample_instruments_and_validates() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let wasm = std::fs::read(&path).unwrap();
            if wasmparser::Parser::is_component(&wasm) {
                // The host instruments a component's core modules one by one.
                continue;
            }
            let out = instrument(&wasm, &ProbePlan::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            validate(&out.bytes);
            seen += 1;
        }
    }
    assert!(seen >= 5);
}

#[test]
fn inline_modes_validate_and_count_call_sites() {
    use crate::{ContextArena, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "host" (func $host (param i32)))
          (type $t (func (result i32)))
          (table 1 funcref)
          (elem (i32.const 0) $g)
          (tag $e)
          (func $f (param i32) (result i32)
            (call $host (i32.const 3))
            (drop (call $g))
            (drop (call_indirect (type $t) (i32.const 0)))
            (block $h
              (try_table (catch $e $h) (throw $e)))
            (return_call $g))
          (func $g (result i32) (i32.const 1))
          (func (export "_start") (drop (call $f (i32.const 1)))))"#,
    )
    .unwrap();
    for (mode, call_sites) in [
        (ProbeMode::Cost, false),
        (ProbeMode::Sample, false),
        (ProbeMode::Sample, true),
    ] {
        let plan = ProbePlan {
            mode,
            call_sites,
            ..ProbePlan::default()
        };
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        // The node finder comes first; $f's entry asks it for a node with a slot per call
        // site, or (without call sites) per direct callee and indirect site: the call
        // and the tail call to $g share one.
        assert!(bodies[0].contains("MemoryGrow"));
        let slots = if call_sites { 4 } else { 3 };
        assert!(bodies[1].contains(&format!(
            "I32Const {{ value: 2 }}\nI32Const {{ value: {slots} }}\nCall"
        )));
        // Every call sets the slot global to its slot.
        let first = ContextArena::SLOTS as i32;
        let expected: &[i32] = if call_sites {
            &[first, first + 4, first + 8, first + 12]
        } else {
            &[first, first + 4, first + 8, first + 4]
        };
        let set: Vec<i32> = bodies[1]
            .lines()
            .collect::<Vec<_>>()
            .windows(3)
            .filter(|w| w[1] == "I32Add" && w[2].starts_with("GlobalSet"))
            .filter_map(|w| {
                w[0].strip_prefix("I32Const { value: ")?
                    .strip_suffix(" }")?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(set, expected, "{mode:?}");
        for slot in expected {
            assert!(
                bodies[1].contains(&format!("I32Const {{ value: {slot} }}\nI32Add\nGlobalSet")),
                "{mode:?}: slot {slot}"
            );
        }
        // No host call but to the import itself and the finder.
        let calls: Vec<&str> = bodies[1]
            .lines()
            .filter(|l| l.starts_with("Call {"))
            .collect();
        assert!(calls.iter().all(|c| !c.contains("function_index: 1 }")));
        let exports: Vec<String> = wasmparser::Parser::new(0)
            .parse_all(&out.bytes)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::ExportSection(s) => Some(
                    s.into_iter()
                        .map(|e| e.unwrap().name.to_string())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(exports.contains(&ContextArena::MEMORY.to_string()));
        // Sample mode keeps the node entered last in the tree's memory: at entry, the
        // import's around the import call and its own again after it, and where the catch
        // lands. Not after the two calls to module functions return: the sampler's program
        // counter says when this function runs again. Cost mode names the import's node
        // before the import call and empties the cell after it (for the host's
        // measurements).
        let current = format!("offset: {},", ContextArena::CURRENT);
        let stores = bodies[1]
            .lines()
            .filter(|l| l.starts_with("I32Store") && l.contains(&current))
            .count();
        assert_eq!(stores, if mode == ProbeMode::Sample { 4 } else { 2 });
        // Offset maps point into the module's own bodies, not the finder's.
        let f = &out.probe_map.functions[1];
        assert_eq!(f.name, "f");
        assert!(f.instrumented_body.as_ref().unwrap().start > 0);
    }
}

/// The probe-code section of a sample-mode module covers exactly what the agent added:
/// a body's code without those bytes is the original's instructions (function indices
/// renumbered), and nothing of the original is marked.
#[test]
fn probe_code_section_marks_exactly_the_added_instructions() {
    use crate::ProbeMode;
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "host" (func $host (param i32)))
          (type $t (func (param i32) (result i32)))
          (table 2 funcref)
          (elem (i32.const 0) func $leaf $twice)
          (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
          (func $twice (param i32) (result i32)
            (call $host (local.get 0))
            (call $leaf (call $leaf (local.get 0))))
          (func $loop (param i32) (result i32)
            (loop $l
              (local.set 0 (call_indirect (type $t) (local.get 0) (i32.const 1)))
              (br_if $l (i32.lt_u (local.get 0) (i32.const 100))))
            (drop (ref.func $leaf))
            (return_call $leaf (local.get 0)))
          (export "loop" (func $loop))
        )"#,
    )
    .unwrap();
    // Live probes: both bodies of each function hold the original's instructions and
    // probes only.
    for live in [false, true] {
        let plan = ProbePlan {
            mode: ProbeMode::Sample,
            live,
            ..ProbePlan::default()
        };
        let checked = probe_code_is_all_but_the_original(&wasm, &plan);
        assert_eq!(checked, if live { 6 } else { 3 });
    }
}

/// Checks that the non-probe code of every body of `wasm` instrumented by `plan` is the
/// original's code: how many bodies it checked.
fn probe_code_is_all_but_the_original(wasm: &[u8], plan: &ProbePlan) -> usize {
    use crate::{ProbeCode, ProbeMode};
    let out = instrument(wasm, plan).unwrap();
    validate(&out.bytes);
    let code = ProbeCode::of_module(&out.bytes).expect("sample mode writes the section");
    assert_eq!(
        out.probe_code.as_ref(),
        Some(&code),
        "what the agent says it wrote"
    );
    assert!(!code.ranges().is_empty());
    let shift = ProbeImports::shift(ProbeMode::Sample);
    let ops = |bytes: &[u8], base: usize| -> Vec<String> {
        let mut reader =
            wasmparser::OperatorsReader::new(wasmparser::BinaryReader::new(bytes, base));
        let mut out = Vec::new();
        while !reader.eof() {
            out.push(format!("{:?}", reader.read().unwrap()));
        }
        out
    };
    let mut checked = 0;
    for f in out
        .probe_map
        .functions
        .iter()
        .filter(|f| f.kind == FunctionKind::Local)
    {
        let original = f.original_body.clone().unwrap();
        assert_eq!(f.probed_body.is_some(), plan.live, "function {}", f.name);
        for instrumented in [f.instrumented_body.clone(), f.probed_body.clone()]
            .into_iter()
            .flatten()
        {
            let code_start = |bytes: &[u8], range: std::ops::Range<u32>| {
                let body = wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(
                    &bytes[range.start as usize..range.end as usize],
                    range.start as usize,
                ));
                body.get_operators_reader().unwrap().original_position() as u32
            };
            let start = code_start(&out.bytes, instrumented.clone());
            let kept: Vec<u8> = (start..instrumented.end)
                .filter(|&at| !code.contains(at))
                .map(|at| out.bytes[at as usize])
                .collect();
            let expected: Vec<String> = ops(
                &wasm[code_start(wasm, original.clone()) as usize..original.end as usize],
                0,
            )
            .into_iter()
            .map(|op| {
                // Defined functions move past the probe imports and the node finder.
                let renumbered = ["Call", "ReturnCall", "RefFunc"].iter().find_map(|name| {
                    let rest = op.strip_prefix(&format!("{name} {{ function_index: "))?;
                    let index: u32 = rest.strip_suffix(" }")?.parse().ok()?;
                    Some(format!(
                        "{name} {{ function_index: {} }}",
                        if index < 1 { index } else { index + shift }
                    ))
                });
                renumbered.unwrap_or(op)
            })
            .collect();
            assert_eq!(ops(&kept, 0), expected, "function {}", f.name);
            checked += 1;
        }
    }
    checked
}

/// Live probes: a function's own body reads its switch and, on, tail-calls its probed copy
/// with its arguments; nothing else of it is wprof's. The copies follow the module's
/// functions in the same order, named after them, and are what the function indices say.
#[test]
fn a_live_function_dispatches_to_its_probed_copy() {
    use crate::{FunctionIndices, Indexed, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "host" (func $host (param i32)))
          (func $add (param i32 i64) (result i32) (i32.add (local.get 0) (i32.const 1)))
          (func $main (export "_start") (call $host (call $add (i32.const 1) (i64.const 2))))
        )"#,
    )
    .unwrap();
    for mode in [ProbeMode::Time, ProbeMode::Sample, ProbeMode::Cost] {
        let plan = ProbePlan {
            mode,
            live: true,
            ..ProbePlan::default()
        };
        let instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        let indices = instrumenter.indices();
        let shift = ProbeImports::shift(mode);
        assert_eq!(
            indices,
            FunctionIndices {
                imports: 1,
                functions: 3,
                mode,
                live: true
            }
        );
        assert_eq!(indices.probed_copy(1), Some(3 + shift));
        assert_eq!(indices.probed_copy(0), None);
        assert_eq!(indices.what(1 + shift), Indexed::Function(1));
        assert_eq!(indices.what(3 + shift), Indexed::ProbedCopy(1));
        assert_eq!(indices.what(4 + shift), Indexed::ProbedCopy(2));
        assert_eq!(indices.what(5 + shift), Indexed::Probe);
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        // The node finder's body comes first in the inline modes.
        let first = usize::from(mode.counts_inline());
        let add = bodies[first];
        let lines: Vec<&str> = add.lines().collect();
        assert_eq!(
            &lines[..6],
            &[
                "I32Const { value: 0 }",
                lines[1],
                "I32Eqz",
                "If { blockty: Empty }",
                "LocalGet { local_index: 0 }",
                "LocalGet { local_index: 1 }",
            ],
            "{add}"
        );
        assert!(lines[1].starts_with("I32Load8U"), "{add}");
        assert_eq!(
            lines[6],
            format!("ReturnCall {{ function_index: {} }}", 3 + shift)
        );
        assert_eq!(
            &lines[7..],
            &[
                "End",
                "LocalGet { local_index: 0 }",
                "I32Const { value: 1 }",
                "I32Add",
                "End"
            ],
            "{add}"
        );
        // The copy of $add is the probed one: it reports (a call to a probe import in time
        // mode, stores to the tree in the inline modes).
        let copy = bodies[first + 2];
        assert!(copy.contains("I32Add"), "{copy}");
        assert!(copy.lines().count() > 6, "{copy}");
        // Named after their functions.
        let names: Vec<(u32, String)> = wasmparser::Parser::new(0)
            .parse_all(&out.bytes)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::CustomSection(c) => match c.as_known() {
                    wasmparser::KnownCustom::Name(names) => Some(names),
                    _ => None,
                },
                _ => None,
            })
            .flatten()
            .filter_map(|sub| match sub.unwrap() {
                wasmparser::Name::Function(map) => Some(map),
                _ => None,
            })
            .flatten()
            .map(|n| {
                let n = n.unwrap();
                (n.index, n.name.to_string())
            })
            .collect();
        assert!(names.contains(&(3 + shift, "add".to_string())), "{names:?}");
        assert!(
            names.contains(&(4 + shift, "main".to_string())),
            "{names:?}"
        );
        // $main's probed copy calls $add's probed copy or its own body, as $add's switch
        // says.
        let main_copy = bodies[first + 3];
        let call_add = format!(
            "If {{ blockty: FuncType(1) }}\nCall {{ function_index: {} }}\nElse\nCall {{ function_index: {} }}\nEnd",
            3 + shift,
            1 + shift
        );
        assert!(main_copy.contains(&call_add), "{main_copy}");
    }
    // Time mode counts $add, not times it: it has no switch of its own, and its copy passes
    // the call on to its own body.
    let plan = ProbePlan {
        mode: ProbeMode::Time,
        live: true,
        short_max: 40,
        ..ProbePlan::default()
    };
    let out = instrument(&wasm, &plan).unwrap();
    validate(&out.bytes);
    let t = text(&out.bytes);
    let bodies: Vec<&str> = t.split("--\n").collect();
    let shift = ProbeImports::shift(ProbeMode::Time);
    assert!(!bodies[0].contains("ReturnCall"), "{}", bodies[0]);
    assert_eq!(
        bodies[2],
        format!(
            "LocalGet {{ local_index: 0 }}\nLocalGet {{ local_index: 1 }}\nReturnCall {{ function_index: {} }}\nEnd\n",
            1 + shift
        )
    );
}

/// An excluded function keeps no probe of its own: no entry, exit or tail probe, no node
/// and no count; in the inline modes it points the slot global back at the slot it was
/// reached through before each call, and in sample mode it stores that slot in the current
/// cell at entry and after each call. Its calls to imports keep their probes.
#[test]
fn excluded_functions_are_transparent_in_every_mode() {
    use crate::{ContextArena, ProbeMode, Selection};
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "host" (func $host (param i32)))
          (func $leaf (result i32) (i32.const 1))
          (func $middle (result i32)
            (call $host (i32.const 3))
            (drop (call $leaf))
            (return_call $leaf))
          (func $outer (result i32) (drop (call $middle)) (return_call $middle))
          (func (export "_start") (drop (call $outer))))"#,
    )
    .unwrap();
    // $middle is function 2 (after the import).
    let selection = std::sync::Arc::new(Selection {
        spec: [7; 32],
        excluded: [2].into(),
        silent: false,
    });
    for mode in ProbeMode::ALL {
        let all = ProbePlan {
            mode,
            ..ProbePlan::default()
        };
        let plan = ProbePlan {
            selection: Some(selection.clone()),
            ..all.clone()
        };
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let full = instrument(&wasm, &all).unwrap();
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        let full_text = text(&full.bytes);
        let full_bodies: Vec<&str> = full_text.split("--\n").collect();
        let first = usize::from(mode.counts_inline());
        let (leaf, middle, outer) = (bodies[first], bodies[first + 1], bodies[first + 2]);
        // The excluded body is smaller than its probed form; the others are unchanged but
        // for the time mode's tail call into it.
        assert!(middle.len() < full_bodies[first + 1].len(), "{mode:?}");
        assert_eq!(leaf, full_bodies[first], "{mode:?}");
        let calls = |body: &str| -> Vec<String> {
            body.lines()
                .filter(|l| l.starts_with("Call {"))
                .map(str::to_string)
                .collect()
        };
        match mode {
            ProbeMode::Time => {
                // Only the import's enter/exit around the call to it, and the two calls.
                let c = calls(middle);
                assert_eq!(c.len(), 4, "{c:?}");
                // $outer's tail call into it closes $outer's frame (exit, not tail).
                assert_ne!(outer, full_bodies[first + 2]);
            }
            _ => {
                // The node finder for the import's node only (none for its own), the
                // import and $leaf.
                let c = calls(middle);
                assert_eq!(c.len(), 3, "{mode:?}: {c:?}");
                // One count: the import's call; none of its own, no instructions.
                let adds = middle.lines().filter(|l| *l == "I64Add").count();
                assert_eq!(adds, 1, "{mode:?}");
                // The slot global restored before each of its three calls.
                let restores = middle
                    .lines()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .filter(|w| w[0].starts_with("LocalGet") && w[1].starts_with("GlobalSet"))
                    .count();
                assert_eq!(restores, 3, "{mode:?}");
                assert_eq!(outer, full_bodies[first + 2], "{mode:?}");
                let current = format!("offset: {},", ContextArena::CURRENT);
                let stores = middle
                    .lines()
                    .filter(|l| l.starts_with("I32Store") && l.contains(&current))
                    .count();
                // Entry, the import's node and after it, after the call to $leaf; cost
                // mode the import's node and the emptied cell after the import.
                let want = if mode.samples() { 4 } else { 2 };
                assert_eq!(stores, want, "{mode:?}");
            }
        }
        // Keys: the selection changes every key (the set is part of each).
        let a = crate::Instrumenter::new(&wasm, &all).unwrap().functions();
        let b = crate::Instrumenter::new(&wasm, &plan).unwrap().functions();
        assert_ne!(a[1].key, b[1].key);
    }
}

#[test]
fn a_function_that_calls_nothing_leaves_for_its_retry_function_instead_of_calling_the_finder() {
    use crate::{ContextArena, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (memory 1)
          (func $leaf (param i32 i64) (result i32)
            (loop $l (br_if $l (i32.eqz (local.get 0))))
            (i32.add (local.get 0) (i32.wrap_i64 (local.get 1))))
          (func $caller (result i32) (call $leaf (i32.const 1) (i64.const 2)))
          (func $grows (result i32) (memory.grow (i32.const 0)))
          (func (export "_start") (drop (call $caller)) (drop (call $grows))))"#,
    )
    .unwrap();
    for mode in ProbeMode::ALL {
        let plan = ProbePlan {
            mode,
            ..ProbePlan::default()
        };
        let instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        let sites: Vec<Option<u32>> = (0..4)
            .map(|d| instrumenter.instrument_function(d).unwrap().retry_site)
            .collect();
        let retries = matches!(mode, ProbeMode::Sample | ProbeMode::Cost);
        // Only $leaf: $caller calls, $grows asks the engine to grow the memory.
        assert_eq!(sites[0].is_some(), retries, "{mode:?}");
        assert!(sites[1..].iter().all(Option::is_none), "{mode:?}");
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        if !retries {
            continue;
        }
        // The finder, the four functions, then $leaf's retry function.
        let finder = ProbeImports::COUNT;
        let leaf = finder + 1;
        let retry = leaf + 4;
        assert_eq!(bodies.len(), 6 + 1, "{t}");
        assert!(!bodies[1].contains(&format!("Call {{ function_index: {finder} }}")));
        assert!(bodies[1].contains(&format!("ReturnCall {{ function_index: {retry} }}")));
        // $caller keeps the call to the finder.
        assert!(bodies[2].contains(&format!("Call {{ function_index: {finder} }}")));
        // The retry function: the finder, the node where the slot global then points, and
        // $leaf again with both its arguments.
        let r = bodies[5];
        assert!(
            r.contains(&format!("Call {{ function_index: {finder} }}")),
            "{r}"
        );
        assert!(
            r.contains(&format!("offset: {}", ContextArena::RETRY)),
            "{r}"
        );
        assert!(
            r.contains(&format!("I32Const {{ value: {} }}", ContextArena::RETRY)),
            "{r}"
        );
        assert!(
            r.contains("LocalGet { local_index: 0 }\nLocalGet { local_index: 1 }\nReturnCall"),
            "{r}"
        );
        assert!(
            r.contains(&format!("ReturnCall {{ function_index: {leaf} }}")),
            "{r}"
        );
        let exports: Vec<String> = export_names(&out.bytes);
        assert!(
            exports.contains(&format!("{}1", ContextArena::ADDED)),
            "{exports:?}"
        );
        // The retry function is wprof's, not the module's.
        let indices = instrumenter.indices();
        assert_eq!(indices.what(retry), crate::Indexed::Probe);
        assert_eq!(indices.what(leaf), crate::Indexed::Function(0));
    }
}

#[test]
fn coverage_counts_every_block_and_maps_where_each_starts() {
    use crate::{ContextArena, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (func $f (param i32) (result i32)
            (local $i i32)
            (block $out
              (loop $again
                (br_if $out (i32.ge_u (local.get $i) (local.get 0)))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br $again)))
            (if (result i32) (local.get $i) (then (i32.const 1)) (else (i32.const 2))))
          (func (export "_start") (drop (call $f (i32.const 3)))))"#,
    )
    .unwrap();
    for mode in [ProbeMode::Sample, ProbeMode::Cost, ProbeMode::Adaptive] {
        let plan = ProbePlan {
            mode,
            coverage: true,
            ..ProbePlan::default()
        };
        let instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        let body = instrumenter.instrument_function(0).unwrap();
        let out = instrumenter
            .assemble(&[body.clone(), instrumenter.instrument_function(1).unwrap()])
            .unwrap();
        validate(&out.bytes);
        // Blocks start at the first instruction, after `loop`, after the `br_if`, after
        // the `br`... (every instruction that ends a basic block), each a real
        // instruction of the original body, in order.
        use crate::BlockCount::{AsPrevious, Counter, Never};
        let original: Vec<u32> = body.offsets.iter().map(|&(o, _)| o).collect();
        let starts: Vec<u32> = body.blocks.iter().map(|&(s, _)| s).collect();
        assert_eq!(starts[0], original[0]);
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert!(starts.iter().all(|b| original.contains(b)));
        // `block` (its inside runs as often as it), `loop` (a counter: its head is
        // reached again), the loop's test, the `br_if`'s fall-through, after the `br`
        // (never), after the loop's `end` (as the block before), the `if`'s arms, after
        // the `if`.
        let kinds: Vec<crate::BlockCount> = body.blocks.iter().map(|&(_, k)| k).collect();
        assert_eq!(
            kinds,
            vec![
                Counter, AsPrevious, Counter, Counter, Never, AsPrevious, Counter, Counter,
                Counter, Counter
            ],
            "{:?}",
            body.blocks
        );
        let counted = kinds.iter().filter(|&&k| k == Counter).count();
        // One counter increment per block, each on a u64 of its own in the tree's memory,
        // placed by the assembler from the counters' start: $f's first, then _start's;
        // nothing exported for them.
        assert_eq!(body.counter_sites.len(), counted);
        let t = text(&out.bytes);
        let f = t.split("--\n").nth(1).unwrap();
        let increments = f
            .matches("I32Const { value: 0 }\nI32Const { value: 0 }\nI64Load")
            .count();
        assert_eq!(increments, counted, "{mode:?}");
        for k in 0..counted as u32 {
            let address = ContextArena::counters(2) + 8 * k;
            assert!(f.contains(&format!("offset: {address}, memory: 0")), "{f}");
        }
        let exports: Vec<String> = export_names(&out.bytes);
        assert!(
            exports
                .iter()
                .all(|e| e == "_start" || e.starts_with("wprof:")),
            "{exports:?}"
        );
        // $f calls nothing: in sample and cost mode it has a retry function, which the
        // module counts in one more export's name.
        let retries = usize::from(mode != ProbeMode::Adaptive);
        assert_eq!(exports.len(), 4 + retries, "{exports:?}");
        let added = format!("{}1", ContextArena::ADDED);
        assert_eq!(exports.contains(&added), retries == 1, "{exports:?}");
        assert_eq!(out.probe_map.functions[0].blocks, body.blocks);
    }
    // Without coverage: no block map, no counters; time mode ignores it.
    for plan in [
        ProbePlan {
            mode: ProbeMode::Sample,
            ..ProbePlan::default()
        },
        ProbePlan {
            coverage: true,
            ..ProbePlan::default()
        },
    ] {
        let instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        assert!(instrumenter
            .instrument_function(0)
            .unwrap()
            .blocks
            .is_empty());
    }
}

#[test]
fn keys_follow_the_number_of_functions_only_where_bodies_do() {
    let key =
        |wasm: &[u8], plan: &ProbePlan| Instrumenter::new(wasm, plan).unwrap().function_key(0);
    let one = wat::parse_str("(module (func $f (nop)))").unwrap();
    let two = wat::parse_str("(module (func $f (nop)) (func $g))").unwrap();
    let sample = ProbePlan {
        mode: crate::ProbeMode::Sample,
        ..ProbePlan::default()
    };
    // Coverage numbers a body's counters from 0 (the assembler places them): $f's body is
    // the same whatever follows it, and not the body without coverage.
    let covered = ProbePlan {
        coverage: true,
        ..sample.clone()
    };
    assert_eq!(key(&one, &covered), key(&two, &covered));
    assert_ne!(key(&one, &covered), key(&one, &sample));
    assert_eq!(key(&one, &sample), key(&two, &sample));
    // A live body reads its switch at an address that follows the number of functions.
    let live = ProbePlan {
        live: true,
        ..sample.clone()
    };
    assert_ne!(key(&one, &live), key(&two, &live));
}

#[test]
fn allocators_report_before_every_exit_in_every_mode() {
    use crate::{AllocRole, Allocators, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (global $top (mut i32) (i32.const 1024))
          (func $inner (param i32) (result i32) (local.get 0))
          (func $malloc (param i32) (result i32)
            (local i32)
            (local.set 1 (global.get $top))
            (global.set $top (i32.add (global.get $top) (local.get 0)))
            (local.set 0 (i32.const 99))
            (if (i32.eqz (local.get 1)) (then (return (i32.const 0))))
            (return_call $inner (local.get 1)))
          (func $free (param i32))
          (func $calloc (param i64 i64) (result i64) (i64.mul (local.get 0) (local.get 1)))
          (func $bad (param f32) (result i32) (i32.const 0))
        )"#,
    )
    .unwrap();
    let roles: std::collections::BTreeMap<u32, AllocRole> = [
        (1, AllocRole::Alloc { size: 0 }),
        (2, AllocRole::Free { ptr: 0 }),
        (3, AllocRole::Calloc { count: 0, size: 1 }),
        (4, AllocRole::Alloc { size: 0 }),
        (9, AllocRole::Free { ptr: 0 }),
    ]
    .into();
    for mode in ProbeMode::ALL {
        let plan = ProbePlan {
            mode,
            allocators: Some(std::sync::Arc::new(Allocators {
                spec: [7; 32],
                roles: Default::default(),
            })),
            ..ProbePlan::default()
        };
        let mut instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        let plain_key = instrumenter.function_key(1);
        let rejected: Vec<u32> = instrumenter
            .profile_allocations(roles.clone())
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        // A float parameter cannot be a size; 9 is no function.
        assert_eq!(rejected, [4, 9], "{mode:?}");
        // Only the allocators' keys change; the others' bodies are shared.
        assert_ne!(instrumenter.function_key(1), plain_key);
        assert_eq!(
            instrumenter.function_key(0),
            Instrumenter::new(
                &wasm,
                &ProbePlan {
                    mode,
                    ..ProbePlan::default()
                }
            )
            .unwrap()
            .function_key(0)
        );
        let bodies: Vec<_> = (0..instrumenter.defined_function_count())
            .map(|i| instrumenter.instrument_function(i).unwrap())
            .collect();
        let out = instrumenter.assemble(&bodies).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        let finder = usize::from(mode.counts_inline());
        let alloc = format!("Call {{ function_index: {} }}", 7);
        // $inner and $bad report nothing; $malloc at its return, its tail call (now a
        // call) and its end; $free and $calloc at their ends.
        assert_eq!(bodies[finder].matches(&alloc).count(), 0, "{mode:?}");
        assert_eq!(bodies[finder + 1].matches(&alloc).count(), 3, "{mode:?}");
        assert!(!bodies[finder + 1].contains("ReturnCall"), "{mode:?}");
        assert_eq!(bodies[finder + 2].matches(&alloc).count(), 1, "{mode:?}");
        assert_eq!(bodies[finder + 3].matches(&alloc).count(), 1, "{mode:?}");
        assert_eq!(bodies[finder + 4].matches(&alloc).count(), 0, "{mode:?}");
        // The id, the kind, no `a`, the size kept at entry: malloc is function 1, kind 0.
        assert!(
            bodies[finder + 1].contains(
                "I32Const { value: 1 }\nI32Const { value: 0 }\nI64Const { value: 0 }\nLocalGet"
            ),
            "{mode:?}: {}",
            bodies[finder + 1]
        );
    }
}

#[test]
fn injected_functions_ask_the_host_first_in_every_mode() {
    use crate::{InjectedValue, Injections, ProbeMode};
    let wasm = wat::parse_str(
        r#"(module
          (func $f (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
          (func $g (call $f (i32.const 2)) drop)
          (func $h (result f64) (f64.const 1.5))
        )"#,
    )
    .unwrap();
    for mode in ProbeMode::ALL {
        let plan = ProbePlan {
            mode,
            injections: Some(std::sync::Arc::new(Injections {
                spec: [3; 32],
                targets: Default::default(),
            })),
            ..ProbePlan::default()
        };
        let mut instrumenter = Instrumenter::new(&wasm, &plan).unwrap();
        let plain = instrumenter.function_key(0);
        let rejected: Vec<u32> = instrumenter
            .inject(
                [
                    (0, Some(InjectedValue::I32(-5))),
                    (1, None),
                    (2, Some(InjectedValue::I32(1))),
                    (7, None),
                ]
                .into(),
            )
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        // $h returns an f64, not an i32; there is no function 7.
        assert_eq!(rejected, [2, 7], "{mode:?}");
        assert_ne!(instrumenter.function_key(0), plain);
        assert_eq!(
            instrumenter.results(2),
            Some(vec![wasmparser::ValType::F64])
        );
        let bodies: Vec<_> = (0..instrumenter.defined_function_count())
            .map(|i| instrumenter.instrument_function(i).unwrap())
            .collect();
        let out = instrumenter.assemble(&bodies).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        let bodies: Vec<&str> = t.split("--\n").collect();
        let finder = usize::from(mode.counts_inline());
        let ask = "Call { function_index: 8 }";
        // $f returns -5 when told to; $g only asks (the host traps); $h does not ask.
        let f = bodies[finder];
        assert!(
            f.contains(&format!(
                "I32Const {{ value: 0 }}\n{ask}\nIf {{ blockty: Empty }}\nI32Const {{ value: -5 }}"
            )),
            "{mode:?}: {f}"
        );
        assert!(bodies[finder + 1].contains(&format!("I32Const {{ value: 1 }}\n{ask}\nDrop")));
        assert!(!bodies[finder + 2].contains(ask), "{mode:?}");
    }
}

#[test]
fn the_agents_identity_holds_the_digest_of_its_sources() {
    // `build.rs` hashed the sources: 64 bits in hex.
    assert_eq!(AGENT_CODE.len(), 16, "{AGENT_CODE}");
    assert!(AGENT_CODE.chars().all(|c| c.is_ascii_hexdigit()));
    // A key holds it beside the version: the version alone gives another key.
    let mut with = blake3::Hasher::new();
    key_agent(&mut with);
    let mut version_only = blake3::Hasher::new();
    version_only.update(&AGENT_FORMAT_VERSION.to_le_bytes());
    assert_ne!(with.finalize(), version_only.finalize());
}
