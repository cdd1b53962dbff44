//! The walk of CPython's frames over made-up memory, and its location tables.

use super::*;

/// A 3.12 layout of small offsets (frames of 16 bytes: code, previous, instruction,
/// owner; code objects with their type at 4 and their units at 8), for walks over
/// made-up memory.
fn layout_312() -> PythonLayout {
    PythonLayout {
        current_frame: CurrentFrame::ThroughCFrame {
            state_cframe: 0,
            cframe_current: 0,
        },
        frame_code: 0,
        frame_previous: 4,
        frame_instruction: 8,
        run_start: RunStart::ShimBelow {
            owner: 12,
            cstack: 3,
        },
        object_type: 4,
        code_type: 900,
        code_qualname: 16,
        code_filename: 20,
        code_first_line: 24,
        code_line_table: 28,
        code_units: 64,
        bytes_data: 16,
        bytes_size: 8,
        string_length: 8,
        string_state: 12,
        ascii_data: 16,
        compact_data: 24,
    }
}

fn put(memory: &mut [u8], at: u32, value: u32) {
    memory[at as usize..at as usize + 4].copy_from_slice(&value.to_le_bytes());
}

/// A frame at `at` of code `code` at instruction `pc`, over `previous`, owned by
/// `owner`.
fn frame(memory: &mut [u8], at: u32, code: u32, pc: u32, previous: u32, owner: u8) {
    put(memory, at, code);
    put(memory, at + 4, previous);
    put(memory, at + 8, code + 64 + 2 * pc);
    memory[at as usize + 12] = owner;
}

/// Memory holding the thread state at 100 (its cframe at 200, whose current frame is
/// `current`) and two runs of the eval loop: frame 300 (code 600, instruction 3) over
/// its run's frame of the C stack at 340, over frame 380 (code 500, instruction 1) over
/// the outer run's at 420.
fn two_runs(current: u32) -> Vec<u8> {
    let mut memory = vec![0u8; 1024];
    put(&mut memory, 100, 200);
    put(&mut memory, 200, current);
    for code in [500, 600] {
        put(&mut memory, code + 4, 900);
        put(&mut memory, code + 8, 10);
    }
    frame(&mut memory, 300, 600, 3, 340, 0);
    frame(&mut memory, 340, 500, 0, 380, 3);
    frame(&mut memory, 380, 500, 1, 420, 0);
    frame(&mut memory, 420, 500, 0, 0, 3);
    memory
}

fn walk(memory: &[u8]) -> (Vec<(u32, i32, bool)>, bool) {
    let mut frames = Vec::new();
    let whole = walk_into(&layout_312(), memory, 100, &mut |f| {
        frames.push((f.proto, f.pc, f.fresh));
        true
    });
    (frames, whole)
}

#[test]
fn a_312_walk_steps_over_the_c_stacks_frames_and_ends_a_run_at_each() {
    assert_eq!(
        walk(&two_runs(300)),
        (vec![(600, 3, true), (500, 1, true)], true)
    );
    // Caught as a run began: its own frame first, not yet over a frame of the script.
    assert_eq!(walk(&two_runs(340)), (vec![(500, 1, true)], true));
}

#[test]
fn a_frame_whose_code_is_not_a_code_object_ends_the_walk() {
    let mut memory = two_runs(300);
    put(&mut memory, 600 + 4, 901);
    assert_eq!(walk(&memory), (vec![], false));
    // Below a real frame: the frames read so far, cut short.
    let mut memory = two_runs(300);
    put(&mut memory, 500 + 4, 0);
    assert_eq!(walk(&memory), (vec![(600, 3, true)], false));
}

#[test]
fn a_code_object_freed_before_the_reader_reads_it_names_no_function() {
    // Code 600 with its names (a qualified name and a file, compact ASCII strings) and
    // first line 7.
    let mut memory = two_runs(300);
    for (at, text) in [(700u32, &b"run"[..]), (760, &b"a.py"[..])] {
        put(&mut memory, at + 8, text.len() as u32);
        put(&mut memory, at + 12, (1 << 2) | (1 << 5) | (1 << 6));
        let data = at as usize + 16;
        memory[data..data + text.len()].copy_from_slice(text);
    }
    put(&mut memory, 600 + 16, 700);
    put(&mut memory, 600 + 20, 760);
    put(&mut memory, 600 + 24, 7);
    let layout = layout_312();
    let read = function(&layout, &memory[..], 600).unwrap();
    assert_eq!(
        (read.name.as_deref(), read.source.as_str()),
        (Some("run"), "a.py")
    );
    assert!(function_key(&layout, &memory[..], 600).is_some());
    // Freed and its memory taken by an object of another type: nothing is read from it.
    put(&mut memory, 600 + 4, 901);
    assert!(function(&layout, &memory[..], 600).is_none());
    assert!(function_key(&layout, &memory[..], 600).is_none());
    assert_eq!(line(&layout, &memory[..], 600, 0), None);
}

#[test]
fn a_location_table_gives_each_code_units_line() {
    // From line 10: 2 units at line 10 (short form 0, one column byte), 1 unit at line
    // 12 (no column: +2), 3 units at line 9 (long form: -3 and three numbers), 1 unit of
    // no location, 1 unit at line 10 (one-line form 11: +1, two column bytes).
    let table = [
        0x80 | 1,
        5,
        0x80 | (13 << 3),
        4,
        0x80 | (14 << 3) | 2,
        7,
        0,
        1,
        2,
        0x80 | (15 << 3),
        0x80 | (11 << 3),
        1,
        2,
    ];
    let lines: Vec<Option<i32>> = (0..9).map(|pc| decode_line(&table, 10, pc)).collect();
    assert_eq!(
        lines,
        [
            Some(10),
            Some(10),
            Some(12),
            Some(9),
            Some(9),
            Some(9),
            None,
            Some(10),
            None
        ]
    );
    // A table cut short, or not at an entry, says nothing.
    assert_eq!(decode_line(&table[..3], 10, 2), None);
    assert_eq!(decode_line(&[5], 10, 0), None);
}
