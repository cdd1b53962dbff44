//! Stack mode: the original with an entry counter per function (see
//! [`crate::run::stacks::entry_counts`]), each thread's stacks walked at each tick of its
//! timer (see [`crate::run::stacks`]), and in an interpreter its language's frames as well
//! (see [`crate::run::interrupt::language`]). The host's wrappers count WASI's calls and
//! read no clock: their time is sampled as the rest.

use std::sync::Arc;

use wasmtime::{Instance, Module, Store};
use wprof_agent::ProbeMode;

use super::{Entered, EntryCall, HostFigures, ReadCall, Readings, ThreadMode};
use crate::exit::Failure;
use crate::languages::Interpreter;
use crate::run::code::map::CodeMap;
use crate::run::host_state::HostState;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::start::Entry;

/// Stack mode.
#[derive(Debug)]
pub struct Stack {
    /// Where the module's functions are, for each spawned thread's reader.
    code: CodeMap,
    /// The interpreter the module is, whose language's frames the ticks read.
    interpreter: Option<Arc<Interpreter>>,
}

impl Stack {
    /// Stack mode over `module`, the counted original (`interpreter`: the one it is).
    pub fn new(module: &Module, interpreter: Option<Arc<Interpreter>>) -> Self {
        Stack {
            code: CodeMap::of_original(module),
            interpreter,
        }
    }

    /// How the ticks of a thread running `instance` walk the interpreter's language: from
    /// the eval loop's state its capture page keeps. `None` for a module that is no
    /// interpreter, or whose counted module keeps no state (it was made without).
    fn language_walk(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Option<&'static LanguageWalk> {
        use wprof_agent::entry_counts::CAPTURE_MEMORY;
        let state = (CAPTURE_MEMORY, crate::languages::STATE_SLOT as usize * 4);
        super::language_walk(store, instance, self.interpreter.as_ref()?, state)
    }
}

/// Makes the polls of a polling counted module's `instance` call wprof's (see
/// [`crate::run::interrupt::polls`]): the address of its poll cell; `None` for a module
/// that does not poll.
fn poll_cell(store: &mut Store<HostState>, instance: &Instance) -> Option<*mut u32> {
    use crate::run::interrupt::polls;
    use wprof_agent::entry_counts::{polls as module, CAPTURE_MEMORY};
    let table = instance.get_table(&mut *store, module::POLL_TABLE)?;
    let memory = instance.get_memory(&mut *store, CAPTURE_MEMORY)?;
    for (element, function) in [
        (module::AT_ENTRY, polls::at_entry as fn()),
        (module::INSIDE, polls::inside),
    ] {
        let function = wasmtime::Func::wrap(&mut *store, function);
        table
            .set(
                &mut *store,
                element.into(),
                wasmtime::Ref::Func(Some(function)),
            )
            .ok()?;
    }
    let at = usize::try_from(module::POLL_OFFSET).ok()?;
    (memory.data_size(&*store) >= at + 4)
        // SAFETY: within the memory, which is one page that cannot grow (it never moves).
        .then(|| unsafe { memory.data_ptr(&*store).add(at) }.cast())
}

impl ThreadMode for Stack {
    fn probes(&self) -> Option<ProbeMode> {
        None
    }

    fn host_figures(&self) -> HostFigures {
        HostFigures::Counted
    }

    fn enter(&self, mut call: EntryCall<'_>) -> Result<Entered, Failure> {
        // The first thread is walked over the whole run, from before its instance is made
        // (see `commands::run::modes::stack`); a spawned thread over its entry.
        // The interpreter's frames are walked while the entry runs, and no longer once it
        // returned: the thread's instance, whose memories the walk reads, goes after.
        // So is the cell the program polls (see `crate::run::interrupt::polls`).
        let language = self.language_walk(call.store, call.instance);
        let cell = match call.settings.polls {
            true => poll_cell(call.store, call.instance),
            false => None,
        };
        let start_walking = || {
            if let Some(language) = language {
                crate::run::interrupt::walk_language(language);
            }
            if let Some(cell) = cell {
                // SAFETY: the instance's memory lives until after `stop_walking`.
                unsafe { crate::run::interrupt::polls::publish(cell) };
            }
        };
        let stop_walking = || {
            crate::run::interrupt::polls::withdraw();
            crate::run::interrupt::stop_walking_language();
        };
        if call.entry == Entry::Start {
            start_walking();
            let entered = crate::run::start::call_plain(&mut call);
            stop_walking();
            return entered;
        }
        let period = call.settings.sample_period;
        // The walk ends with the entry: what the thread does after it (telling the
        // program's other threads it is done, which may wait for a lock) is wprof's.
        let polls = cell.is_some();
        let (entered, stacks) =
            crate::run::stacks::while_walking(&self.code, period, polls, |end| {
                start_walking();
                let entered = crate::run::start::call_plain_then(&mut call, &|| end.mark());
                stop_walking();
                entered
            });
        Ok(Entered {
            unsampled: stacks.is_none(),
            stacks,
            ..entered?
        })
    }

    fn read(&self, read: ReadCall<'_>) -> Readings {
        Readings {
            entry_counts: crate::run::stacks::entry_counts::read(
                read.store,
                read.instance,
                self.code.imports(),
            ),
            ..Readings::default()
        }
    }
}
