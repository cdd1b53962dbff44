//! Interpreters inside WASI 0.2 command components, through the binary: Lua made a
//! component with the preview 1 adapter, and CPython 3.14 as componentize-py links it
//! (`libpython3.14.so` a module of its own, its memory and `_Py_DebugOffsets` another
//! module's). The script's frames stand where the eval loop ran them, with their shares,
//! in sample mode (a component's default) and adaptive mode; an interpreter whose
//! structures cannot be read is its native frames, with one warning.

use std::path::PathBuf;

use crate::languages::{
    assert_lua_scripts_functions_and_shares_in, assert_lua_shown_native,
    assert_python_scripts_functions_and_shares, lua_wasm, without_dwarf, Python,
};
use crate::support::{componentize, Scratch};

/// The benchmark set's Python component (`bench/programs/components.sh python`), if built.
fn python_component() -> Option<Python> {
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/bench/components/python_component.wasm");
    if !wasm.exists() {
        let why = "no .tools/bench/components/python_component.wasm \
                   (bash bench/programs/components.sh python)";
        assert!(std::env::var_os("WPROF_REQUIRE_TOOLS").is_none(), "{why}");
        crate::tools::skip(why);
        return None;
    }
    Some(Python {
        wasm,
        before: Vec::new(),
        // The script runs through `exec`, from the component's `run`.
        key_under_module: false,
        printed_after: "",
        eval: "libpython3.14.so!_PyEval_EvalFrameDefault",
    })
}

#[test]
fn a_lua_component_has_its_scripts_frames_read_in_sample_and_adaptive_mode() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    let component = s.path("lua_component.wasm");
    std::fs::write(&component, componentize(&lua)).unwrap();
    for mode in [&[][..], &["--mode", "adaptive"]] {
        assert_lua_scripts_functions_and_shares_in(&component, mode, "main!luaV_execute");
    }
}

#[test]
fn a_python_components_frames_are_read_though_libpython_and_its_memory_are_two_modules() {
    if let Some(python) = python_component() {
        assert_python_scripts_functions_and_shares(&python, &[]);
    }
}

#[test]
fn a_component_whose_interpreter_cannot_be_read_shows_its_native_frames_with_one_warning() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    let s = Scratch::new();
    let stripped = s.path("lua-stripped.wasm");
    std::fs::write(&stripped, without_dwarf(&std::fs::read(&lua).unwrap())).unwrap();
    let component = s.path("lua_component.wasm");
    std::fs::write(&component, componentize(&stripped)).unwrap();
    assert_lua_shown_native(
        &s,
        &component,
        &[],
        "lua_component.wasm#main is a Lua interpreter (no `lua_State.ci`",
        "main!luaV_execute",
    );
}
