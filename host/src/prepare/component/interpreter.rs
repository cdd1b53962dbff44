//! The interpreter among a component's core modules, whose script's frames sample and
//! adaptive mode read as they do in a core module's run (see [`crate::languages`]).
//!
//! A component splits what a module keeps together. componentize-py's Python component
//! links CPython dynamically: the eval loop is in `libpython3.x.so`, which imports its
//! linear memory, and the interpreter's memory as it stood after start-up (a snapshot,
//! `_PyRuntime` and its `_Py_DebugOffsets` in it) is the data of the module that defines
//! the memory. So the interpreter is the module whose name section names an eval loop
//! (only by name here: a component's other modules hold CPython's strings too, and a
//! guess by shape could name one of their functions), its layout is read from its own
//! data or DWARF or, for a CPython that describes itself, from another module's data, and
//! its language's frames are read in the memory of the module that defines it: its own,
//! or the one whose data described it.

use std::sync::Arc;

use crate::components::ComponentLayout;
use crate::languages::Interpreter;

/// An interpreter found in a component.
#[derive(Debug, Clone)]
pub struct ComponentInterpreter {
    /// The position of its module among the component's core modules.
    pub position: usize,
    /// The interpreter, in its module's function ids.
    pub interpreter: Arc<Interpreter>,
    /// The position of the module whose memory 0 is the interpreter's linear memory.
    pub memory_of: usize,
}

/// The first interpreter among the instrumented core modules of the component `bytes`
/// (laid out as `layout`) whose eval loop is named: `None` if there is none, or why its
/// frames cannot be read, with the module's name.
pub fn find(
    bytes: &[u8],
    layout: &ComponentLayout,
) -> Option<Result<ComponentInterpreter, (String, String)>> {
    let cores: Vec<&[u8]> = layout
        .modules
        .iter()
        .map(|m| &bytes[m.range.clone()])
        .collect();
    let (position, core) = cores.iter().enumerate().find(|&(position, core)| {
        let defined = crate::components::imported_functions(core).ok();
        layout.modules[position].probed
            && crate::languages::named_eval_loop(core)
                .zip(defined)
                .is_some_and(|(eval, imported)| eval >= imported)
    })?;
    let name = layout.modules[position].name.clone();
    // The others' data, the module's own left out (it was read first).
    let others: Vec<&[u8]> = cores
        .iter()
        .enumerate()
        .map(|(p, core)| if p == position { &[][..] } else { *core })
        .collect();
    let (found, described_by) = crate::languages::find_among(core, &others)?;
    let interpreter = match found {
        Ok(interpreter) => interpreter,
        Err(why) => return Some(Err((name, why))),
    };
    let imports_memory = |p: usize| crate::components::imports_memory(cores[p]).unwrap_or(true);
    let memory_of = match (imports_memory(position), described_by) {
        (false, _) => position,
        (true, Some(other)) if !imports_memory(other) => other,
        _ => {
            return Some(Err((
                name,
                "an interpreter whose linear memory another module defines, which wprof \
                 cannot tell"
                    .to_string(),
            )))
        }
    };
    Some(Ok(ComponentInterpreter {
        position,
        interpreter: Arc::new(interpreter),
        memory_of,
    }))
}
