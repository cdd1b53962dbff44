//! The line table's decoding, frames' packing, and the layout read from a real QuickJS's
//! DWARF (the benchmark set's `qjs.wasm`, when built).

use super::*;

#[test]
fn a_line_table_gives_the_line_of_the_last_entry_at_or_before_a_position() {
    // From line 10: a short entry (pc +1, line +1), a long one (pc +40, line -3), a short
    // one (pc +0, line +2); each with a column step (zigzag 2 = +1).
    let short =
        |pc: i32, line: i32| PC2LINE_OP_FIRST + ((line - PC2LINE_BASE) + pc * PC2LINE_RANGE) as u8;
    let table = [short(1, 1), 2, 0, 40, 5, 2, short(0, 2), 2];
    assert_eq!(decode_line(&table, 10, 0), 10);
    assert_eq!(decode_line(&table, 10, 1), 11);
    assert_eq!(decode_line(&table, 10, 40), 11);
    assert_eq!(decode_line(&table, 10, 41), 10);
    assert_eq!(decode_line(&table, 10, 1000), 10);
    // A table cut short ends the decoding where it is.
    assert_eq!(decode_line(&table[..4], 10, 100), 11);
}

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
        crate::languages::Language::QuickJs(_)
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
