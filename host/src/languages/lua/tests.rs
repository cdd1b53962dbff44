//! The walk on a real Lua: the benchmark set's `lua.wasm` (Lua 5.4.8 built by zig) runs a
//! script under wasmtime, and when the script writes a marker, its `lua_State` is found in
//! memory and its stack walked, as the profiler's tick would.

use std::sync::{Arc, Mutex};

use super::*;
use crate::languages::layout::Layout;

/// A stack as walked: the Lua frames, innermost first, and whether the walk stopped
/// before the base (a chain that did not hold together, or deeper than `MAX_DEPTH`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LuaStack {
    frames: Vec<LuaFrame>,
    truncated: bool,
}

/// Walks the call stack of the `lua_State` at `state`.
fn walk(layout: &LuaLayout, memory: &(impl Memory + ?Sized), state: u32) -> LuaStack {
    let mut stack = LuaStack::default();
    stack.truncated = !walk_into(layout, memory, state, &mut |frame| {
        stack.frames.push(frame);
        true
    });
    stack
}

/// The main `lua_State`: the thread object (`tt` a Lua thread, 8) whose global state
/// (`l_G`) follows it in the same allocation (`LG`: an `LX` then a `global_State`).
fn find_state(bytes: &[u8], memory: &[u8]) -> Option<u32> {
    let layout = Layout::read(bytes, &["lua_State", "LX"], &[]);
    let tt = layout.offset("lua_State", "tt")? as u32;
    let l_g = layout.offset("lua_State", "l_G")? as u32;
    let l_in_lx = layout.offset("LX", "l")? as u32;
    let lx = layout.size("LX")? as u32;
    (8..memory.len() as u32 - 64).step_by(4).find(|&at| {
        memory.u8(at + tt) == Some(0x08) && memory.u32(at + l_g) == Some(at - l_in_lx + lx)
    })
}

const SCRIPT: &str = "local function leaf(n)
  io.write('MARK\\n')
  return n
end
local function mid(n)
  return leaf(n) + 1
end
function top()
  return mid(1) + 1
end
top()
";

/// A walk as the test saw it: each frame's function, line and whether it is fresh,
/// innermost first; whether the walk was truncated; the name each frame's caller gives it.
type Walked = (
    Vec<(crate::languages::ScriptFunction, Option<i32>, bool)>,
    bool,
    Vec<Option<String>>,
);

/// Runs `script` (as the file `/s/script.lua`) and walks the stack when it writes `MARK`: the functions
/// and lines walked, innermost first, and whether each started a run of `luaV_execute`.
fn walked(bytes: &[u8], script: &str) -> Walked {
    use wasmtime::{Caller, Engine, Extern, Linker, Module, Store};
    use wasmtime_wasi::p1::WasiP1Ctx;
    let layout = LuaLayout::from_dwarf(bytes).unwrap();
    let engine = Engine::default();
    let module = Module::new(&engine, bytes).unwrap();
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |c| c).unwrap();
    linker.allow_shadowing(true);
    let seen = Arc::new(Mutex::new(None));
    let found = seen.clone();
    let module_bytes = bytes.to_vec();
    linker
        .func_wrap(
            "wasi_snapshot_preview1",
            "fd_write",
            move |mut caller: Caller<'_, WasiP1Ctx>, _fd: i32, iovs: i32, n: i32, out: i32| {
                let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
                    return 8;
                };
                let data = memory.data_mut(&mut caller);
                let mut total = 0u32;
                let mut text = Vec::new();
                for k in 0..n as u32 {
                    let iov = iovs as u32 + k * 8;
                    let at = data.u32(iov).unwrap();
                    let len = data.u32(iov + 4).unwrap();
                    text.extend_from_slice(&data[at as usize..(at + len) as usize]);
                    total += len;
                }
                if text.windows(4).any(|w| w == b"MARK") {
                    let state = find_state(&module_bytes, data).expect("a lua_State");
                    let stack = walk(&layout, &data[..], state);
                    let frames = stack
                        .frames
                        .iter()
                        .map(|f| {
                            (
                                function(&layout, &data[..], f.proto).unwrap(),
                                line(&layout, &data[..], f.proto, f.pc),
                                f.fresh,
                            )
                        })
                        .collect();
                    // A prototype freed before the reader read it, its memory another
                    // object's (a short string's tag): no function is read from it.
                    if let Some(innermost) = stack.frames.first() {
                        let mut freed = data.to_vec();
                        freed[(innermost.proto + layout.proto_tag) as usize] = TAG_SHORT_STRING;
                        assert!(function(&layout, &freed[..], innermost.proto).is_none());
                        assert!(function_key(&layout, &freed[..], innermost.proto).is_none());
                    }
                    // The name each frame's caller gives it.
                    let naming = layout
                        .naming()
                        .expect("Lua 5.4.8's DWARF names its opcodes");
                    let called = stack
                        .frames
                        .windows(2)
                        .map(|pair| match pair[0].called_from_lua {
                            true => names::called_at(
                                naming,
                                &layout,
                                &data[..],
                                pair[1].proto,
                                pair[1].pc,
                            ),
                            // A tail call: its record's caller gave it up.
                            false => None,
                        })
                        .collect();
                    *found.lock().unwrap() = Some((frames, stack.truncated, called));
                }
                data[out as usize..out as usize + 4].copy_from_slice(&total.to_le_bytes());
                0
            },
        )
        .unwrap();
    let dir = std::env::temp_dir().join(format!("wprof-lua-walk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("script.lua"), script).unwrap();
    let ctx = wasmtime_wasi::WasiCtxBuilder::new()
        .args(&["lua", "/s/script.lua"])
        .preopened_dir(&dir, "/s", wasmtime_wasi::FsPerms::ReadWrite)
        .unwrap()
        .build_p1();
    let mut store = Store::new(&engine, ctx);
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let start = instance
        .get_typed_func::<(), ()>(&mut store, "_start")
        .unwrap();
    if let Err(e) = start.call(&mut store, ()) {
        eprintln!("lua ended: {e:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let walked = seen
        .lock()
        .unwrap()
        .take()
        .expect("the script wrote its marker");
    walked
}

#[test]
fn the_stack_of_a_real_lua_is_walked_with_its_lines() {
    let Some(bytes) = crate::languages::bench_lua() else {
        eprintln!("skipped: .tools/bench/lua.wasm is not built (bench/programs/build.sh)");
        return;
    };
    let (frames, truncated, called) = walked(&bytes, SCRIPT);
    assert!(!truncated);
    // As Lua's traceback says: leaf and mid are upvalues of their callers, top a global.
    assert_eq!(
        called,
        [
            Some("upvalue 'leaf'".to_string()),
            Some("upvalue 'mid'".to_string()),
            Some("global 'top'".to_string())
        ]
    );
    let lines: Vec<(i32, i32)> = frames
        .iter()
        .map(|(f, _, _)| (f.line_defined, f.last_line_defined))
        .collect();
    // leaf, at its call of io.write; mid, at its call of leaf; top; the chunk, called from
    // C (luaL_dofile).
    assert_eq!(lines, [(1, 4), (5, 7), (8, 10), (0, 0)]);
    let at: Vec<(Option<i32>, bool)> = frames.iter().map(|(_, l, f)| (*l, *f)).collect();
    assert_eq!(
        at,
        [
            (Some(2), false),
            (Some(6), false),
            (Some(9), false),
            (Some(11), true)
        ]
    );
    assert!(frames
        .iter()
        .all(|(f, _, _)| f.source == "@/s/script.lua" && f.size_code > 0));
    assert_eq!(frames[0].0.display(Some("leaf")), "leaf (/s/script.lua:1)");
    assert_eq!(frames[0].0.display(None), "function </s/script.lua:1>");
    assert_eq!(frames[3].0.display(None), "main chunk </s/script.lua>");
}

#[test]
fn a_function_called_in_a_tail_call_is_not_named_by_the_caller_it_replaced() {
    let Some(bytes) = crate::languages::bench_lua() else {
        return;
    };
    // `via` tail-calls `leaf`: leaf's record replaces via's, and the record below it is
    // top's, whose instruction called `via`, not `leaf`.
    let script = "local function leaf(n)
  io.write('MARK\\n')
  return n
end
function via(n) return leaf(n) end
local function top()
  local r = via(1)
  return r
end
top()
";
    let (frames, truncated, called) = walked(&bytes, script);
    assert!(!truncated);
    let lines: Vec<i32> = frames.iter().map(|(f, _, _)| f.line_defined).collect();
    assert_eq!(lines, [1, 6, 0]);
    // As Lua's traceback: leaf unnamed (a tail call), top a local of the chunk.
    assert_eq!(called, [None, Some("local 'top'".to_string())]);
}

#[test]
fn a_broken_chain_ends_the_walk_without_a_fault() {
    let Some(bytes) = crate::languages::bench_lua() else {
        return;
    };
    let layout = LuaLayout::from_dwarf(&bytes).unwrap();
    // A state whose `ci` points past the memory, or at zeros, or at itself.
    let mut memory = vec![0u8; 4096];
    memory[100 + layout.state_ci as usize..][..4].copy_from_slice(&5000u32.to_le_bytes());
    let walked = walk(&layout, &memory[..], 100);
    assert!(walked.truncated && walked.frames.is_empty());
    memory[100 + layout.state_ci as usize..][..4].copy_from_slice(&2000u32.to_le_bytes());
    assert!(walk(&layout, &memory[..], 100).truncated);
    // A record that is its own previous: cut at the depth limit.
    let ci = 2000u32;
    memory[(ci + layout.ci_previous) as usize..][..4].copy_from_slice(&ci.to_le_bytes());
    memory[(ci + layout.ci_callstatus) as usize..][..2].copy_from_slice(&CIST_C.to_le_bytes());
    let walked = walk(&layout, &memory[..], 100);
    assert!(walked.truncated);
    assert!(walk(&layout, &memory[..], u32::MAX - 2).truncated);
    assert_eq!(line(&layout, &memory[..], 4090, 3), None);
}

#[test]
fn a_module_without_luas_structures_says_what_is_missing() {
    let fib = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/nbody.wasm"),
    )
    .unwrap();
    let e = LuaLayout::from_dwarf(&fib).unwrap_err();
    assert_eq!(e, "no `lua_State.ci` in the module's DWARF");
}

#[test]
fn a_function_is_named_by_the_line_that_defines_it() {
    let cases = [
        (
            "local function fib(n) if n < 2 then return n end",
            Some("fib"),
        ),
        (
            "function Vec.new(x, y) return setmetatable({}, Vec) end",
            Some("Vec.new"),
        ),
        ("function Vec:add(o)", Some("Vec:add")),
        ("local inc = function(x) return x + 1 end", Some("inc")),
        (
            "M.handler = function (req) -- the handler",
            Some("M.handler"),
        ),
        ("  return function(step) c = c + step; return c end", None),
        (
            "local function compose(f, g) return function(x) return f(g(x)) end end",
            None,
        ),
        ("table.sort(words, function(a, b) return a > b end)", None),
        ("local functional = 1 -- function f()", None),
    ];
    for (line, name) in cases {
        assert_eq!(name_in_source(line).as_deref(), name, "{line}");
    }
}
