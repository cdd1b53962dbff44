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
    let found = crate::languages::find(&bytes).unwrap().unwrap();
    assert!(matches!(
        found.language,
        crate::languages::Language::QuickJs(..)
    ));
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
