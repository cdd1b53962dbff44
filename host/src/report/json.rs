//! `--format json`: the profile itself, pretty-printed (the schema is [`crate::profile`]).

use crate::profile::Profile;

/// The profile as JSON text.
pub fn render(profile: &Profile) -> String {
    let mut out = serde_json::to_string_pretty(profile).expect("a profile always serializes");
    out.push('\n');
    out
}
