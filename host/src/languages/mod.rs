//! The frames of interpreted languages (Lua, JavaScript and Python) running in a module:
//! an interpreter's structures located in linear memory from its DWARF ([`layout`]), and
//! the language's call stack read from them ([`lua`], [`quickjs`], [`cpython`]), so
//! that a profile can show the script's functions where the interpreter's eval loop ran
//! them.
//!
//! An interpreter is recognised by its eval loop's name ([`find`]); stack mode's module
//! then keeps the loop's state argument at each of its entries (a capture, see
//! [`wprof_agent::entry_counts::Capture`]), and so do sample and adaptive mode's probes
//! (see [`wprof_agent::StateCapture`]), from where each tick walks the language's stack.
//!
//! Reading is a bounded walk of memory the program may be rewriting at that instant:
//! every address is checked against the memory's size, every chain has a depth limit, and
//! a chain that does not hold together ends the walk, counted as truncated, never a trap.

pub mod cpython;
pub mod layout;
pub mod lua;
pub mod memory;
pub mod quickjs;

use wprof_agent::entry_counts::Capture;

/// An interpreter found in a module: its eval loop and how to read its language's stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interpreter {
    /// The eval loop, by function id: its native frames are where the language's stand.
    pub eval: u32,
    /// The language and the layout of its interpreter's structures.
    pub language: Language,
    /// How the eval loop was found, where no name said it (see
    /// [`cpython::unnamed`]): the run says so.
    pub guessed: Option<String>,
}

/// A language whose frames wprof reads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Language {
    /// Lua 5.4: `luaV_execute(lua_State *L, CallInfo *ci)`.
    Lua(lua::LuaLayout),
    /// QuickJS-ng: `JS_CallInternal(JSContext *caller_ctx, ...)`, once per call, and the
    /// native functions that push or hand on a call (see [`quickjs::placing`]).
    QuickJs(quickjs::QuickJsLayout, quickjs::placing::Calls),
    /// CPython 3.11 to 3.15: `_PyEval_EvalFrameDefault(PyThreadState *tstate, ...)`, once
    /// per call from C into Python.
    Python(cpython::PythonLayout),
}

impl Language {
    /// The language's name, as profiles label its functions.
    pub fn name(&self) -> &'static str {
        match self {
            Language::Lua(_) => "lua",
            Language::QuickJs(..) => "js",
            Language::Python(_) => "py",
        }
    }
}

/// A script's function as a profile names it: the name the interpreter knows it by, if it
/// keeps one (JavaScript's; a Lua function has none); its source (Lua's `@bench.lua` for a
/// file, as Lua writes it; JavaScript's file); the lines it is defined at and ends at (0
/// for a Lua main chunk; JavaScript keeps the column it starts at instead of the last
/// line); and its size in instructions or bytes, which tells apart two functions defined
/// on the same lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScriptFunction {
    pub name: Option<String>,
    pub source: String,
    pub line_defined: i32,
    pub last_line_defined: i32,
    pub size_code: i32,
}

impl ScriptFunction {
    /// The file (a Lua source `@name` is the file `name`; any other source is a string
    /// chunk, shown as Lua shows it).
    pub fn file(&self) -> &str {
        self.source
            .strip_prefix('@')
            .or_else(|| self.source.strip_prefix('='))
            .unwrap_or(&self.source)
    }

    /// The name a profile shows: the function's `name` (given, if its source says it; else
    /// its own; an empty one is `<anonymous>`) and where it is defined, `fib (bench.lua:12)`; without one, as Lua's
    /// traceback names a function by where it is defined, `function <bench.lua:12>`;
    /// `main chunk <bench.lua>`.
    pub fn display(&self, name: Option<&str>) -> String {
        // A JavaScript function without a name is anonymous, as QuickJS's backtraces say.
        let name = name
            .or(self.name.as_deref())
            .map(|n| if n.is_empty() { "<anonymous>" } else { n });
        match (self.line_defined, name) {
            (-1, Some(name)) => name.to_string(),
            (-1, None) => "[a Lua function being called]".to_string(),
            (0, _) => format!("main chunk <{}>", self.file()),
            (line, Some(name)) => format!("{name} ({}:{line})", self.file()),
            (line, None) => format!("function <{}:{line}>", self.file()),
        }
    }
}

/// Walks a chain of frames linked from the innermost (`first`; `None` if it could not be
/// read) outwards, handing each frame `read` makes of an address (with the next one's
/// address, 0 past the outermost) to `push`, until it says no more or `max_depth` frames
/// were walked; whether the walk reached the end of the chain. Allocates nothing: the
/// signal handler walks with it.
pub fn walk_chain<F>(
    first: Option<u32>,
    max_depth: usize,
    mut read: impl FnMut(u32) -> Option<(F, u32)>,
    push: &mut dyn FnMut(F) -> bool,
) -> bool {
    let Some(mut at) = first else {
        return false;
    };
    for _ in 0..max_depth {
        if at == 0 {
            return true;
        }
        let Some((frame, next)) = read(at) else {
            return false;
        };
        if !push(frame) {
            return false;
        }
        at = next;
    }
    false
}

/// The slot of the capture page the eval loop's state is kept in.
pub const STATE_SLOT: u32 = 0;

/// The eval loop's parameter that is its state (the first, in every language read).
pub const STATE_PARAM: u32 = 0;

impl Interpreter {
    /// What sample and adaptive mode's probes keep at each entry of the eval loop: its
    /// state argument.
    pub fn state_capture(&self) -> wprof_agent::StateCapture {
        wprof_agent::StateCapture {
            function: self.eval,
            param: STATE_PARAM,
        }
    }

    /// What stack mode's module keeps at each entry of the eval loop: its state argument
    /// (sample and adaptive mode's probes keep it too, see [`Interpreter::state_capture`]).
    pub fn captures(&self) -> Vec<Capture> {
        vec![Capture {
            function: self.eval,
            param: STATE_PARAM,
            slot: STATE_SLOT,
        }]
    }
}

/// The eval loops of the interpreters whose frames wprof reads, by name: Lua's, QuickJS's,
/// CPython's.
pub const EVAL_LOOPS: [&str; 3] = [
    "luaV_execute",
    "JS_CallInternal",
    "_PyEval_EvalFrameDefault",
];

/// The interpreter the module `bytes` is, if it is one wprof reads the frames of: `None`
/// for any other module, `Some(Err(why))` for an interpreter whose structures cannot be
/// read (its frames are then the interpreter's native ones).
pub fn find(bytes: &[u8]) -> Option<Result<Interpreter, String>> {
    find_among(bytes, &[]).map(|(found, _)| found)
}

/// [`find`] for a core module of a component, whose linear memory another module may
/// define and fill: a CPython that describes itself (3.13 and later) whose
/// `_Py_DebugOffsets` is not in its own data is looked for in the data of `others`
/// (componentize-py links `libpython3.x.so` dynamically and keeps the interpreter's
/// initialised memory in the data of the module that defines the memory). With the
/// interpreter, the index in `others` of the module whose data described it, if not its own.
pub fn find_among(
    bytes: &[u8],
    others: &[&[u8]],
) -> Option<(Result<Interpreter, String>, Option<usize>)> {
    // A CPython that names no function has its eval loop found by its shape.
    let (eval, name, guessed) = match function_named(bytes, &EVAL_LOOPS) {
        Some((eval, name)) => (eval, name, None),
        None => {
            let (eval, how) = cpython::unnamed::eval_loop(bytes)?;
            (eval, 2, Some(how))
        }
    };
    let mut described_by = None;
    let language = match name {
        0 => lua::LuaLayout::from_dwarf(bytes)
            .map(Language::Lua)
            .map_err(|why| format!("a Lua interpreter ({why})")),
        // 3.13 and later describe themselves; 3.11 and 3.12 are read from their DWARF.
        2 => cpython::debug_offsets::layout(bytes)
            .or_else(|| {
                others.iter().enumerate().find_map(|(i, other)| {
                    let layout = cpython::debug_offsets::layout(other)?;
                    described_by = Some(i);
                    Some(layout)
                })
            })
            .unwrap_or_else(|| cpython::PythonLayout::from_dwarf(bytes))
            .map(Language::Python)
            .map_err(|why| format!("a CPython interpreter ({why})")),
        _ => quickjs::QuickJsLayout::from_dwarf(bytes)
            .and_then(|layout| {
                let calls = quickjs::placing::Calls::named(&functions_named(
                    bytes,
                    quickjs::placing::Calls::NAMES,
                ))?;
                Ok(Language::QuickJs(layout, calls))
            })
            .map_err(|why| format!("a QuickJS interpreter ({why})")),
    };
    let found = language.map(|language| Interpreter {
        eval,
        language,
        guessed,
    });
    Some((found, described_by))
}

/// Whether the module's name section names an eval loop wprof knows (see [`EVAL_LOOPS`]):
/// the function's id, imports counted.
pub fn named_eval_loop(bytes: &[u8]) -> Option<u32> {
    function_named(bytes, &EVAL_LOOPS).map(|(id, _)| id)
}

/// The id of the first function the module's name section names one of `wanted`, and
/// which of them.
fn function_named(bytes: &[u8], wanted: &[&str]) -> Option<(u32, usize)> {
    let mut first: Option<(u32, usize)> = None;
    each_function_name(
        bytes,
        &mut |index, name| match wanted.iter().position(|&n| n == name) {
            Some(which) => {
                first = Some((index, which));
                false
            }
            None => true,
        },
    );
    first
}

/// The ids of the functions the module's name section names `wanted`, in that order
/// (`None` for a name it does not have).
fn functions_named(bytes: &[u8], wanted: &[&str]) -> Vec<Option<u32>> {
    let mut found = vec![None; wanted.len()];
    each_function_name(bytes, &mut |index, name| {
        if let Some(which) = wanted.iter().position(|&n| n == name) {
            found[which].get_or_insert(index);
        }
        true
    });
    found
}

/// Hands each function name of the module's name section to `named` (its index and
/// name) until it says no more. Only the section headers are read on the way to it: on a
/// 69 MB module, parsing every function body's header took 30 ms.
fn each_function_name(bytes: &[u8], named: &mut dyn FnMut(u32, &str) -> bool) {
    each_custom_section(bytes, &mut |section| {
        let wasmparser::KnownCustom::Name(names) = section.as_known() else {
            return true;
        };
        for names in names.into_iter().flatten() {
            if let wasmparser::Name::Function(map) = names {
                for naming in map.into_iter().flatten() {
                    if !named(naming.index, naming.name) {
                        return false;
                    }
                }
            }
        }
        false
    });
}

/// Hands each custom section of the module `bytes` to `visit`, in order, until it says no
/// more; only the other sections' headers are read on the way. A module that cannot be
/// read ends the visit where it stops making sense.
pub(crate) fn each_custom_section(
    bytes: &[u8],
    visit: &mut dyn FnMut(&wasmparser::CustomSectionReader<'_>) -> bool,
) {
    let _ = each_custom_section_or_none(bytes, visit);
}

fn each_custom_section_or_none(
    bytes: &[u8],
    visit: &mut dyn FnMut(&wasmparser::CustomSectionReader<'_>) -> bool,
) -> Option<()> {
    let mut reader = wasmparser::BinaryReader::new(bytes.get(8..)?, 8);
    while !reader.eof() {
        let id = reader.read_u8().ok()?;
        let size = reader.read_var_u32().ok()? as usize;
        let start = reader.original_position();
        let contents = bytes.get(start..start.checked_add(size)?)?;
        reader.skip(|r| r.read_bytes(size).map(|_| ())).ok()?;
        if id != 0 {
            continue;
        }
        let Ok(section) =
            wasmparser::CustomSectionReader::new(wasmparser::BinaryReader::new(contents, start))
        else {
            continue;
        };
        if !visit(&section) {
            return Some(());
        }
    }
    Some(())
}

/// The benchmark set's Lua (`bash bench/programs/build.sh --small`), for tests, if built;
/// required where the tools are (`WPROF_REQUIRE_TOOLS`, as `.ci/run` sets it).
#[cfg(test)]
pub(crate) fn bench_lua() -> Option<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench/lua.wasm");
    let bytes = std::fs::read(&path).ok();
    if bytes.is_none() && std::env::var_os("WPROF_REQUIRE_TOOLS").is_some() {
        panic!(
            "{} is required: bash bench/programs/build.sh --small",
            path.display()
        );
    }
    bytes
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_function_is_found_by_its_name_in_the_name_section() {
        let wasm = wat::parse_str(
            r#"(module (func $first) (func $luaV_execute (param i32)) (func $last))"#,
        )
        .unwrap();
        assert_eq!(
            super::function_named(&wasm, &["luaV_execute"]),
            Some((1, 0))
        );
        assert_eq!(
            super::function_named(&wasm, &["JS_CallInternal", "luaV_execute"]),
            Some((1, 1))
        );
        assert_eq!(super::function_named(&wasm, &["missing"]), None);
        assert_eq!(super::function_named(&wasm[..20], &["luaV_execute"]), None);
        assert!(super::find(&wasm).is_some_and(|found| found.is_err()));
    }
}
