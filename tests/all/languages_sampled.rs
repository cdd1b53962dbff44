//! Sample and adaptive mode in an interpreter: the script's frames stand in the calling
//! contexts the module counts, with the script's shares, and the native calls stay as the
//! module counted them.

use wprof::profile::Profile;

use crate::languages::{
    assert_javascript_scripts_functions, assert_lua_scripts_functions_and_shares,
    assert_python_scripts_functions_and_shares, lua_wasm, python311, qjs_wasm,
};

/// The calls of the module's function `name` in `profile`.
fn calls_of(profile: &Profile, name: &str) -> u64 {
    let f = profile.functions.iter().find(|f| f.name == name);
    f.unwrap_or_else(|| panic!("no {name}")).calls
}

#[test]
fn sample_and_adaptive_mode_put_a_lua_scripts_frames_in_the_counted_contexts() {
    let Some(lua) = lua_wasm() else {
        return;
    };
    for mode in ["sample", "adaptive"] {
        let (profile, native) = assert_lua_scripts_functions_and_shares(&lua, &["--mode", mode]);
        // The script's functions are sampled, not counted; the interpreter's calls are
        // the module's count, as in the native view of the same work.
        assert!(profile
            .functions
            .iter()
            .filter(|f| f.is_script())
            .all(|f| f.calls == 0));
        for name in ["luaD_precall", "luaH_resize"] {
            let calls = calls_of(&native, name);
            assert!(calls > 0, "{name}");
            assert_eq!(calls_of(&profile, name), calls, "{mode}: {name}");
        }
        assert_eq!(
            calls_of(&profile, "luaV_execute"),
            calls_of(&native, "luaV_execute")
        );
        // The native tree keeps its edges' calls: the eval loop entered from C, and the
        // script's functions standing in its place call on into the interpreter, with
        // no calls of their own.
        let edge_calls = |p: &Profile, caller: &str, callee: &str| {
            let id = |name: &str| p.functions.iter().find(|f| f.name == name).unwrap().id;
            let (caller, callee) = (id(caller), id(callee));
            p.edges
                .iter()
                .filter(|e| e.caller == Some(caller) && e.callee == callee)
                .map(|e| e.calls)
                .sum::<u64>()
        };
        let entered = edge_calls(&native, "luaD_callnoyield", "luaV_execute");
        assert!(entered > 0);
        assert_eq!(
            edge_calls(&profile, "luaD_callnoyield", "luaV_execute"),
            entered
        );
        let id = |name: &str| {
            let f = profile.functions.iter().find(|f| f.name.starts_with(name));
            f.unwrap_or_else(|| panic!("no {name}")).id
        };
        let (part_c, round) = (id("part_c "), id("round "));
        let into_part_c: Vec<_> = profile
            .edges
            .iter()
            .filter(|e| e.callee == part_c)
            .collect();
        assert!(
            into_part_c
                .iter()
                .any(|e| e.caller == Some(round) && e.inclusive > 0),
            "{into_part_c:?}"
        );
        assert!(into_part_c.iter().all(|e| e.calls == 0));
    }
}

#[test]
fn sample_mode_puts_a_javascript_programs_frames_in_the_counted_contexts() {
    if let Some(qjs) = qjs_wasm() {
        assert_javascript_scripts_functions(&qjs, &["--mode", "sample"]);
    }
}

#[test]
fn sample_mode_puts_a_python_programs_frames_in_the_counted_contexts() {
    if let Some(python) = python311() {
        assert_python_scripts_functions_and_shares(&python, &["--mode", "sample"]);
    }
}
