//! Stack mode: the original with an entry counter per function (see
//! [`crate::run::stacks::entry_counts`]), each thread's stacks walked at each tick of its
//! timer (see [`crate::run::stacks`]). The host's wrappers count WASI's calls and read no
//! clock: their time is sampled as the rest.

use wasmtime::Module;
use wprof_agent::ProbeMode;

use super::{Entered, EntryCall, HostFigures, ReadCall, Readings, ThreadMode};
use crate::exit::Failure;
use crate::run::code::map::CodeMap;
use crate::run::start::Entry;

/// Stack mode.
#[derive(Debug)]
pub struct Stack {
    /// Where the module's functions are, for each spawned thread's reader.
    code: CodeMap,
}

impl Stack {
    /// Stack mode over `module`, the counted original.
    pub fn new(module: &Module) -> Self {
        Stack {
            code: CodeMap::of_original(module),
        }
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
        if call.entry == Entry::Start {
            return crate::run::start::call_plain(&mut call);
        }
        let period = call.settings.sample_period;
        // The walk ends with the entry: what the thread does after it (telling the
        // program's other threads it is done, which may wait for a lock) is wprof's.
        let (entered, stacks) = crate::run::stacks::while_walking(&self.code, period, |end| {
            crate::run::start::call_plain_then(&mut call, &|| end.mark())
        });
        Ok(Entered {
            unsampled: stacks.is_none(),
            stacks,
            ..entered?
        })
    }

    fn read(&self, read: ReadCall<'_>) -> Readings {
        Readings {
            entry_counts: crate::run::stacks::entry_counts::read(read.store, read.instance),
            ..Readings::default()
        }
    }
}
