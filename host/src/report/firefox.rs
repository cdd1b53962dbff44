//! `--format firefox`: the Firefox Profiler's processed profile format, written with the
//! `fxprof-processed-profile` crate; load it at https://profiler.firefox.com.
//!
//! One process with one thread: the module (a threaded program: one thread per thread of
//! the program, each with its own calling-context tree). Each context of the calling-context tree
//! with a non-zero self time (or cost) becomes one sample whose weight is that self value,
//! placed one after the other on the timeline (the timeline is synthetic: wprof counts,
//! it does not sample). The call tree, flame graph and inverted tree then show exact self
//! and running totals. Wasm functions are in the category `wasm`, imports in `import`.
//! Recursion is collapsed in the contexts, as in [`super::folded`].

use std::collections::HashMap;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    Profile as FxProfile, ReferenceTimestamp, SamplingInterval, Timestamp,
};

use super::stacks;
use crate::profile::Profile;

/// The processed profile's JSON text.
pub fn render(profile: &Profile) -> anyhow::Result<String> {
    let time = profile.unit == "ns";
    let mut fx = FxProfile::new(
        &format!("wprof {}", profile.module.path),
        ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
        SamplingInterval::from_nanos(1),
    );
    let process = fx.add_process(
        &profile.module.path,
        1,
        Timestamp::from_nanos_since_reference(0),
    );
    let wasm: CategoryPairHandle = fx.add_category("wasm", CategoryColor::Yellow).into();
    let import: CategoryPairHandle = fx.add_category("import", CategoryColor::Blue).into();
    // One thread, or a threaded program's threads in the profile's order.
    let threads: Vec<Option<u32>> = match &profile.threads {
        Some(t) => t.threads.iter().map(|t| Some(t.id)).collect(),
        None => vec![None],
    };
    let mut handles = HashMap::new();
    for (k, &id) in threads.iter().enumerate() {
        let handle = fx.add_thread(
            process,
            k as u32 + 1,
            Timestamp::from_nanos_since_reference(0),
            k == 0,
        );
        let name = match id {
            Some(id) => format!("thread #{id} ({}, {})", profile.mode, profile.unit),
            None => format!("{} ({})", profile.mode, profile.unit),
        };
        fx.set_thread_name(handle, &name);
        handles.insert(id, (handle, HashMap::new(), 0u64));
    }
    let mut stack_of_node = HashMap::new();
    let mut end = 0;
    for s in stacks(profile) {
        let Some((thread, frames, at)) = handles.get_mut(&s.thread) else {
            continue;
        };
        let thread = *thread;
        let Some(&id) = s.functions.last() else {
            continue;
        };
        let Some(f) = profile.function(id) else {
            continue;
        };
        // Frames belong to a thread: each thread interns the functions it ran.
        let frame = *frames.entry(id).or_insert_with(|| {
            let name = fx.intern_string(&f.name);
            fx.intern_frame(
                thread,
                FrameInfo {
                    frame: Frame::Label(name),
                    category_pair: if f.kind == "import" { import } else { wasm },
                    flags: FrameFlags::empty(),
                },
            )
        });
        let parent = profile.contexts[s.node as usize]
            .parent
            .and_then(|p| stack_of_node.get(&p).copied());
        let stack = fx.intern_stack(thread, parent, frame);
        stack_of_node.insert(s.node, stack);
        // Weights are i32: a larger value is split over several samples.
        let mut left = s.self_time;
        while left > 0 {
            let part = left.min(i32::MAX as u64);
            let cpu = if time {
                CpuDelta::from_nanos(part)
            } else {
                CpuDelta::ZERO
            };
            fx.add_sample(
                thread,
                Timestamp::from_nanos_since_reference(*at),
                Some(stack),
                cpu,
                part as i32,
            );
            *at += part;
            left -= part;
        }
        end = end.max(*at);
    }
    for (thread, _, at) in handles.values() {
        fx.set_thread_end_time(*thread, Timestamp::from_nanos_since_reference(*at));
    }
    let at = end;
    fx.set_process_end_time(process, Timestamp::from_nanos_since_reference(at));
    let mut out = serde_json::to_string(&fx)?;
    out.push('\n');
    Ok(out)
}
