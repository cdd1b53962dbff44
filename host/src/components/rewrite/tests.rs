//! The rewrite checked on small components: indices moved, probes imported, lowered and
//! passed, down into nested components.

use super::*;

fn valid(bytes: &[u8]) {
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(bytes)
        .unwrap_or_else(|e| panic!("invalid component: {e}"));
}

#[test]
fn probes_are_imported_lowered_and_passed_and_every_index_moves() {
    // Module 1 stands in for an instrumented module: it imports a probe. The
    // original's types, instances, functions and a nested component's outer alias
    // must all still point where they did.
    let original = wat::parse_str(
        r#"(component
            (type $t (func (param "x" u32)))
            (import "host" (instance $host (export "f" (func (type $t)))))
            (core module $m0 (func (export "g")))
            (core module $m1 (import "env" "f" (func (param i32))) (func (export "run")))
            (core func $f (canon lower (func $host "f")))
            (core instance $env (export "f" (func $f)))
            (core instance $i0 (instantiate $m0))
            (core instance $i1 (instantiate $m1 (with "env" (instance $env))))
            (component $nested (alias outer 1 $t (type $outer)) (import "h" (func (type $outer))))
            (func $run (canon lift (core func $i1 "run")))
            (export "run" (func $run)))"#,
    )
    .unwrap();
    valid(&original);
    let probed = wat::parse_str(
        r#"(module
            (import "env" "f" (func (param i32)))
            (import "wprof" "enter" (func (param i32)))
            (import "wprof" "enter_catching" (func (param i32) (result i32)))
            (func (export "run") i32.const 7 call 1))"#,
    )
    .unwrap();
    let probes = crate::components::probe_imports(&probed).unwrap();
    assert_eq!(probes.len(), 2);
    let layout = crate::components::ComponentLayout::read(&original).unwrap();
    let out = rewrite(
        &original,
        &layout.components,
        &[Replacement {
            component: 0,
            module_index: 1,
            bytes: probed.clone(),
            probes,
        }],
    )
    .unwrap();
    valid(&out);
    let layout = crate::components::ComponentLayout::read(&out).unwrap();
    assert_eq!(&out[layout.modules[1].range.clone()], &probed[..]);
    // The host instance is the first import.
    let text = wasmprinter::print_bytes(&out).unwrap();
    assert!(text.contains("wprof:probes/module0"), "{text}");
    assert!(text.contains("enter-catching"), "{text}");
}

#[test]
fn a_nested_components_module_gets_its_probes_through_the_components_around_it() {
    // Module 0 of nested component 1 stands in for an instrumented module. The nested
    // component's own types and functions move; a component nested deeper still names
    // the type it aliases from it.
    let original = wat::parse_str(
        r#"(component
            (type $t (func (param "x" u32)))
            (import "host" (instance $host (export "f" (func (type $t)))))
            (component $app
                (type $t2 (func (param "x" u32)))
                (import "host" (instance $h (export "f" (func (type $t2)))))
                (core module $m (import "env" "f" (func (param i32))) (func (export "run")))
                (core func $f (canon lower (func $h "f")))
                (core instance $env (export "f" (func $f)))
                (core instance $i (instantiate $m (with "env" (instance $env))))
                (component $deep (alias outer 1 $t2 (type $o)) (import "g" (func (type $o))))
                (func $run (canon lift (core func $i "run")))
                (export "run" (func $run)))
            (instance $a (instantiate $app (with "host" (instance $host))))
            (alias export $a "run" (func $run))
            (export "run" (func $run)))"#,
    )
    .unwrap();
    valid(&original);
    let probed = wat::parse_str(
        r#"(module
            (import "env" "f" (func (param i32)))
            (import "wprof" "enter" (func (param i32)))
            (func (export "run") i32.const 7 call 1))"#,
    )
    .unwrap();
    let layout = crate::components::ComponentLayout::read(&original).unwrap();
    assert!(layout.modules[0].probed);
    let out = rewrite(
        &original,
        &layout.components,
        &[Replacement {
            component: 1,
            module_index: 0,
            bytes: probed.clone(),
            probes: crate::components::probe_imports(&probed).unwrap(),
        }],
    )
    .unwrap();
    valid(&out);
    let after = crate::components::ComponentLayout::read(&out).unwrap();
    assert_eq!(&out[after.modules[0].range.clone()], &probed[..]);
    assert_eq!(after.instantiations, [Some(0)]);
    // Imported at the top level and by the nested component, passed from one to the
    // other.
    let text = wasmprinter::print_bytes(&out).unwrap();
    assert_eq!(
        text.matches("(import \"wprof:probes/module0\"").count(),
        2,
        "{text}"
    );
    assert!(text.contains("(with \"wprof:probes/module0\""), "{text}");
}

#[test]
fn a_component_without_replacements_is_unchanged_in_meaning() {
    let original = wat::parse_str(
        r#"(component (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "f" (func $f)))"#,
    )
    .unwrap();
    let layout = crate::components::ComponentLayout::read(&original).unwrap();
    let out = rewrite(&original, &layout.components, &[]).unwrap();
    valid(&out);
    assert_eq!(
        wasmprinter::print_bytes(&out).unwrap(),
        wasmprinter::print_bytes(&original).unwrap()
    );
}
