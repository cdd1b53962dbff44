//! Go's symbol table decoded from tables laid out by hand as the Go linker lays them out.

use super::*;

#[test]
fn a_module_without_go_buildid_is_not_go() {
    let wasm = wat::parse_str("(module (func (export \"_start\")))").unwrap();
    assert!(matches!(read(&wasm), GoTable::NotGo));
    assert!(!is_go(&wasm));
    assert!(is_go(&go_module(0, &[("a", "a.go", 1)])));
}

/// A table as the Go linker lays it out, for `functions` (name, file, line) at entries
/// `0x1000, 0x1001, ...`, placed at memory address 64 in two segments split by a gap
/// of zeros (as the linker splits them).
fn go_module(imports: u32, functions: &[(&str, &str, u32)]) -> Vec<u8> {
    let mut names = Vec::new();
    let mut files = Vec::new();
    let mut units = Vec::new();
    let mut values = vec![0u8];
    let mut records = Vec::new();
    for (name, file, _) in functions {
        records.push((
            names.len() as u32,
            values.len() as u32,
            units.len() as u32 / 4,
        ));
        names.extend_from_slice(name.as_bytes());
        names.push(0);
        units.extend_from_slice(&(files.len() as u32).to_le_bytes());
        files.extend_from_slice(file.as_bytes());
        files.push(0);
        // File 0 from pc 0 to 1: value delta +1 (zig-zag 2), pc delta 1, end.
        values.extend_from_slice(&[2, 1, 0]);
    }
    let n = functions.len();
    let names_at = HEADER;
    let units_at = names_at + names.len();
    let files_at = units_at + units.len();
    let values_at = files_at + files.len();
    let functab_at = values_at + values.len();
    let records_at = 8 * (n + 1);
    let mut table = Vec::new();
    table.extend_from_slice(&MAGIC.to_le_bytes());
    table.extend_from_slice(&[0, 0, 1, 8]);
    for word in [n, n, 0, names_at, units_at, files_at, values_at, functab_at] {
        table.extend_from_slice(&(word as u64).to_le_bytes());
    }
    for part in [&names, &units, &files, &values] {
        table.extend_from_slice(part);
    }
    for k in 0..=n {
        let entry = FUNC_VALUE_OFFSET + k as u32;
        table.extend_from_slice(&entry.to_le_bytes());
        table.extend_from_slice(&((records_at + k * FUNC_RECORD) as u32).to_le_bytes());
    }
    for (k, (name, pcfile, unit)) in records.iter().enumerate() {
        let line = functions[k].2;
        for field in [
            FUNC_VALUE_OFFSET + k as u32,
            *name,
            0,
            0,
            0,
            *pcfile,
            0,
            0,
            *unit,
            line,
        ] {
            table.extend_from_slice(&field.to_le_bytes());
        }
    }
    // The linker leaves zeros out: split where the header's zero padding is.
    let hex = |b: &[u8]| b.iter().map(|b| format!("\\{b:02x}")).collect::<String>();
    let wat = format!(
        r#"(module (@custom "go:buildid" (before first) "x")
             {}
             (memory 1)
             (data (i32.const 64) "{}") (data (i32.const {}) "{}")
             {})"#,
        (0..imports)
            .map(|i| format!("(import \"env\" \"f{i}\" (func))"))
            .collect::<String>(),
        hex(&table[..4]),
        64 + 6,
        hex(&table[6..]),
        "(func (result i32) i32.const 0)".repeat(n + 1),
    );
    wat::parse_str(wat).unwrap()
}

#[test]
fn reads_names_files_and_lines_by_function_id() {
    let wasm = go_module(
        2,
        &[
            ("main.(*T).m", "x/main.go", 7),
            ("regexp.(*machine).add", "regexp/exec.go", 120),
        ],
    );
    let GoTable::Functions(f) = read(&wasm) else {
        panic!("{:?}", read(&wasm));
    };
    assert_eq!(f.len(), 2);
    assert_eq!(
        f[&2],
        GoFunction {
            name: "main.(*T).m".into(),
            file: Some("x/main.go".into()),
            line: 7
        }
    );
    assert_eq!(f[&3].name, "regexp.(*machine).add");
    assert_eq!(f[&3].file.as_deref(), Some("regexp/exec.go"));
    assert_eq!(f[&3].line, 120);
}

#[test]
fn more_functions_than_the_module_defines_is_unreadable() {
    let mut wasm = go_module(0, &[("a", "a.go", 1)]);
    // The function count (the header's first word, after the quantum and pointer
    // size): 1 -> 9.
    let pattern = [1u8, 8, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    let at = wasm.windows(11).position(|w| w == pattern).unwrap();
    wasm[at + 2] = 9;
    match read(&wasm) {
        GoTable::Unreadable(why) => assert!(why.contains("lists 9 functions"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_go_module_without_a_table_is_unreadable_not_an_error() {
    let wasm = wat::parse_str(
        r#"(module (memory 1) (data (i32.const 16) "\fb\ff\ff\ff\00\00\01\08")
                   (@custom "go:buildid" (before first) "x") (func (export "_start")))"#,
    )
    .unwrap();
    match read(&wasm) {
        GoTable::Unreadable(why) => assert!(why.contains("Go 1.20"), "{why}"),
        other => panic!("{other:?}"),
    }
}
