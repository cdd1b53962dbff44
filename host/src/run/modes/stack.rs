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
        let language = self.language_walk(call.store, call.instance);
        let start_walking = || {
            if let Some(language) = language {
                crate::run::interrupt::walk_language(language);
            }
        };
        if call.entry == Entry::Start {
            start_walking();
            let entered = crate::run::start::call_plain(&mut call);
            crate::run::interrupt::stop_walking_language();
            return entered;
        }
        let period = call.settings.sample_period;
        // The walk ends with the entry: what the thread does after it (telling the
        // program's other threads it is done, which may wait for a lock) is wprof's.
        let (entered, stacks) = crate::run::stacks::while_walking(&self.code, period, |end| {
            start_walking();
            let entered = crate::run::start::call_plain_then(&mut call, &|| end.mark());
            crate::run::interrupt::stop_walking_language();
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
