//! Frames' packing, names from the source, and the layout read from a real QuickJS's DWARF
//! (the benchmark set's `qjs.wasm`, when built).

use super::*;

#[test]
fn frames_keep_their_bytecode_position_and_kind_when_packed() {
    for frame in [
        JsFrame {
            bytecode: 0xdead_beef,
            pc: -1,
            native: false,
        },
        JsFrame {
            bytecode: 0,
            pc: 0x3fff_fffe,
            native: true,
        },
    ] {
        assert_eq!(JsFrame::unpack(frame.pack()), frame);
    }
}

#[test]
fn the_benchmark_sets_quickjs_describes_itself_in_its_dwarf() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench/qjs.wasm");
    let Ok(bytes) = std::fs::read(&path) else {
        assert!(
            std::env::var_os("WPROF_REQUIRE_TOOLS").is_none(),
            "{} is required: bash bench/programs/build.sh --small",
            path.display()
        );
        return;
    };
    let layout = QuickJsLayout::from_dwarf(&bytes).unwrap();
    // QuickJS-ng 0.16.2 on wasm32 (its JSValue 64 bits, NaN-boxed).
    assert_eq!(layout.context_runtime, 8);
    assert_eq!(layout.frame_function, 8);
    assert_eq!(layout.string_data, 16);
    assert_eq!(layout.bytecode_classes.len(), 4);
    // QuickJS-ng 0.16 keeps only the list's link in the object's own header.
    assert_eq!(layout.bytecode_link, Some(0));
    let found = crate::languages::find(&bytes).unwrap().unwrap();
    assert!(matches!(
        found.language,
        crate::languages::Language::QuickJs(..)
    ));
    // Bellard's QuickJS keeps its reference count and kind before the link.
    let bellard = path.with_file_name("qjs_bellard.wasm");
    let bytes = std::fs::read(&bellard).unwrap();
    let layout = QuickJsLayout::from_dwarf(&bytes).unwrap();
    assert!(layout.bytecode_link.is_some());
}

#[test]
fn a_method_is_named_by_its_source_and_an_arrow_function_is_not() {
    let line = "class Round { run(n) { return 1; } static of(x) {} get size() {} }";
    let at = |what: &str| line.find(what).unwrap() as i32 + 1;
    assert_eq!(name_at(line, at("run(")), Some("run".to_string()));
    assert_eq!(name_at(line, at("static")), Some("of".to_string()));
    assert_eq!(name_at(line, at("get ")), Some("size".to_string()));
    let arrow = "xs.sort((a, b) => a - b);";
    assert_eq!(name_at(arrow, arrow.find("(a").unwrap() as i32 + 1), None);
    assert_eq!(name_at(arrow, arrow.find("sort").unwrap() as i32 + 1), None);
    let expression = "const f = function (x) { return x; };";
    assert_eq!(name_at(expression, 11), None);
    assert_eq!(name_at(expression, 0), None);
    assert_eq!(name_at(expression, 1000), None);
}

/// A layout with the bytecode's fields at small offsets, its link in the runtime's list
/// checked (`link`: where it is) or not.
fn small_layout(link: Option<u32>) -> QuickJsLayout {
    QuickJsLayout {
        context_runtime: 0,
        runtime_current_frame: 0,
        runtime_atom_array: 0,
        runtime_atom_size: 4,
        frame_previous: 0,
        frame_function: 4,
        frame_pc: 12,
        object_class: 0,
        object_bytecode: 4,
        bytecode_classes: vec![13],
        bytecode_code: 8,
        bytecode_code_len: 12,
        bytecode_name: 16,
        bytecode_file: 20,
        bytecode_link: link,
        defined: Defined::Fields {
            line: 24,
            column: 28,
        },
        string_data: 16,
        string_kind: true,
    }
}

#[test]
fn a_bytecode_freed_before_the_reader_reads_it_names_no_function() {
    // A bytecode at 256, linked (at 256 + 4) in a list whose head is at 100, then its name
    // and file atoms and the line and column it is defined at.
    let mut memory = vec![0u8; 1024];
    let put = |memory: &mut Vec<u8>, at: usize, value: u32| {
        memory[at..at + 4].copy_from_slice(&value.to_le_bytes())
    };
    for (at, value) in [(100, 260), (104, 260), (260, 100), (264, 100)] {
        put(&mut memory, at, value);
    }
    put(&mut memory, 256 + 16, 7);
    put(&mut memory, 256 + 20, 9);
    put(&mut memory, 256 + 24, 3);
    put(&mut memory, 256 + 28, 5);
    let checked = small_layout(Some(4));
    let key = function_key(&checked, &memory[..], 256);
    assert_eq!(key, Some((7u32.rotate_left(16) ^ 9, 3 * 4096 + 5)));
    // Its names are not read here (no atoms), but the check lets them be.
    assert!(is_bytecode(&checked, &memory[..], 256));
    // Freed: unlinked, its link cleared. Its key, unchanged, is still the function read
    // before; no names are read from it.
    put(&mut memory, 100, 100);
    put(&mut memory, 104, 100);
    put(&mut memory, 260, 0);
    put(&mut memory, 264, 0);
    assert_eq!(function_key(&checked, &memory[..], 256), key);
    assert!(!is_bytecode(&checked, &memory[..], 256));
    assert!(function(&checked, &memory[..], 0, 256).is_none());
    // Its memory taken by another object, whose words there point anywhere.
    put(&mut memory, 260, 100);
    put(&mut memory, 264, 512);
    assert!(!is_bytecode(&checked, &memory[..], 256));
    assert!(function(&checked, &memory[..], 0, 256).is_none());
    // Where the DWARF does not say where the link is, nothing is checked.
    assert!(is_bytecode(&small_layout(None), &memory[..], 256));
    // A link past the memory's end is none.
    assert!(!is_bytecode(&checked, &memory[..], 1020));
}
