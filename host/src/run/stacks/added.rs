//! Frames of the functions the counted module added (the table of pairs' `arc`, which a
//! callee reached through a table calls to count its caller's call) taken out of the
//! stacks: they are wprof's counters, not the program's, and have no name in the original
//! module (their index is past its functions, where a script's first function or time
//! mode's waits would be named).

use std::collections::HashMap;

use super::{languages::LANGUAGE_FUNCTION, Path, StackSamples};

impl StackSamples {
    /// Takes the frames of functions from `first_added` on (the original module's count
    /// of functions) out of every stack: a stack whose innermost function is one gives its
    /// time to [`StackSamples::counters_ns`] (a tick in a counter's own instructions);
    /// a frame further out is dropped, its callee then standing under its caller. Call it
    /// after [`StackSamples::locate_addresses`].
    pub fn leave_out_added(&mut self, first_added: u32) {
        let added = |f: u32| f & LANGUAGE_FUNCTION == 0 && f >= first_added;
        let any =
            |map: &HashMap<Path, u64>| map.keys().any(|(path, _)| path.iter().any(|&f| added(f)));
        if !any(&self.time) && !any(&self.waited) {
            return;
        }
        for ((mut path, call), ns) in std::mem::take(&mut self.time) {
            if path.last().is_some_and(|&f| added(f)) {
                self.counters_ns += ns;
                continue;
            }
            path.retain(|&f| !added(f));
            *self.time.entry((path, call)).or_default() += ns;
        }
        for ((mut path, call), ns) in std::mem::take(&mut self.waited) {
            if path.last().is_some_and(|&f| added(f)) {
                continue;
            }
            path.retain(|&f| !added(f));
            *self.waited.entry((path, call)).or_default() += ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_functions_frames_leave_the_stacks_and_its_ticks_are_the_counters() {
        let mut samples = StackSamples::default();
        // Functions 0 to 9 are the module's; 10 is the counters' `arc`.
        samples.time.insert((vec![1, 2, 10], None), 300);
        samples.time.insert((vec![1, 2], None), 500);
        samples.time.insert((vec![1, 10, 3], None), 70);
        let script = LANGUAGE_FUNCTION | 4;
        samples.time.insert((vec![1, script], None), 40);
        samples.counters_ns = 5;
        samples.leave_out_added(10);
        assert_eq!(samples.counters_ns, 305);
        assert_eq!(samples.time[&(vec![1, 2], None)], 500);
        assert_eq!(samples.time[&(vec![1, 3], None)], 70);
        assert_eq!(samples.time[&(vec![1, script], None)], 40);
        assert_eq!(samples.time.len(), 3);
    }
}
