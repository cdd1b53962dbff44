//! `--format speedscope`: speedscope's file format (its published
//! `file-format-schema.json`), one "sampled" profile (a threaded program: one per thread)
//! whose samples are the stacks of the
//! calling-context tree, weighted by their self time (or cost). Recursion is collapsed in
//! the contexts, as in [`super::folded`].

use serde_json::json;

use super::source::Symbols;
use super::stacks;
use crate::profile::Profile;

/// The speedscope JSON text.
pub fn render(profile: &Profile, symbols: &Symbols) -> anyhow::Result<String> {
    // Frames: one per function that ran, in the profile's order; samples refer to them by
    // position.
    let index: std::collections::HashMap<u32, usize> = profile
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| (f.id, i))
        .collect();
    let frames: Vec<_> = profile
        .functions
        .iter()
        .map(|f| match symbols.sources.get(&f.id) {
            Some(s) => json!({ "name": f.name, "file": s.file, "line": s.line }),
            None => json!({ "name": f.name, "file": profile.module.path }),
        })
        .collect();
    let unit = if profile.unit == "ns" {
        "nanoseconds"
    } else {
        "none"
    };
    // One profile, or one per thread of a threaded program.
    let threads: Vec<Option<u32>> = match &profile.threads {
        Some(t) => t.threads.iter().map(|t| Some(t.id)).collect(),
        None => vec![None],
    };
    let all = stacks(profile);
    let profiles: Vec<_> = threads
        .iter()
        .map(|&thread| {
            let (samples, weights): (Vec<Vec<usize>>, Vec<u64>) = all
                .iter()
                .filter(|s| s.self_time > 0 && s.thread == thread)
                .filter_map(|s| {
                    let frames: Option<Vec<usize>> = s
                        .functions
                        .iter()
                        .map(|id| index.get(id).copied())
                        .collect();
                    Some((frames?, s.self_time))
                })
                .unzip();
            let total: u64 = weights.iter().sum();
            let name = match thread {
                Some(id) => format!(
                    "{} thread #{id} ({} mode)",
                    profile.module.path, profile.mode
                ),
                None => format!("{} ({} mode)", profile.module.path, profile.mode),
            };
            json!({
                "type": "sampled",
                "name": name,
                "unit": unit,
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })
        })
        .collect();
    let file = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": profile.tool,
        "name": format!("{} ({})", profile.module.path, profile.unit),
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": profiles,
    });
    let mut out = serde_json::to_string(&file)?;
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::report::tests::sample_profile;

    #[test]
    fn samples_are_stacks_weighted_by_self_cost() {
        let v: serde_json::Value =
            serde_json::from_str(&super::render(&sample_profile(), &Default::default()).unwrap())
                .unwrap();
        let p = &v["profiles"][0];
        assert_eq!(p["samples"][2], serde_json::json!([0, 1, 2]));
        assert_eq!(p["weights"], serde_json::json!([10, 40, 30, 20]));
        assert_eq!(p["endValue"], 100);
        assert_eq!(v["shared"]["frames"][2]["name"], "b;x");
    }
}
