//! `--format folded`: the calling-context tree as folded stacks, one line per context with
//! a non-zero self time (or cost): `_start;main;compress;hash 1234`. inferno, flamegraph.pl
//! and speedscope read it.
//!
//! Recursion is collapsed in the contexts (a function entered while it is already on the
//! path is charged to the node on the path), so a function appears at most once per line:
//! `fib` recursing 25 deep is one `_start;fib` line holding all of fib's self time.

use std::fmt::Write;

use super::{frame_name, names, stacks};
use crate::profile::Profile;

/// One folded line per stack with a non-zero value, in the profile's context order.
pub fn lines(profile: &Profile) -> Vec<String> {
    let names = names(profile);
    stacks(profile)
        .into_iter()
        .filter(|s| s.self_time > 0)
        .map(|s| {
            let mut line = String::new();
            for (i, id) in s.functions.iter().enumerate() {
                if i > 0 {
                    line.push(';');
                }
                match names.get(id) {
                    Some(name) => line.push_str(&frame_name(name)),
                    None => {
                        let _ = write!(line, "func[{id}]");
                    }
                }
            }
            let _ = write!(line, " {}", s.self_time);
            line
        })
        .collect()
}

/// The folded text.
pub fn render(profile: &Profile) -> String {
    let mut out = String::new();
    for line in lines(profile) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::report::tests::sample_profile;

    #[test]
    fn one_line_per_context_with_self_cost() {
        let out = super::render(&sample_profile());
        assert_eq!(
            out,
            "_start 10\n_start;a 40\n_start;a;b:x 30\n_start;b:x 20\n"
        );
    }
}
