//! Adaptive mode's timers (see [`crate::ContextArena::TIMED`]): an activation whose node
//! the host has armed when it enters calls the host at entry and on every way out.

use wasm_encoder::{BlockType, Instruction};

use super::emitter::{Emitter, InlineLocals};

impl Emitter<'_> {
    /// Adaptive mode, in the entry probe's slow path, after the node finder returned into
    /// `local`: clears the bit that says the node is armed and, when it was set and this is
    /// the function's own node (`timed`), has the host start timing the activation (the
    /// token it returns goes to the timer local). Not emitted in the other modes, whose
    /// nodes are never armed.
    pub(super) fn untag_node(&mut self, local: u32, timed: bool) {
        if !self.probes.timed() {
            return;
        }
        // An import's node, or a function without probes (no timer local): untagged only.
        let token = self
            .inline
            .and_then(|(_, locals)| locals.timer)
            .filter(|_| timed);
        let Some(token) = token else {
            self.instrs(&[
                Instruction::LocalGet(local),
                Instruction::I32Const(-8),
                Instruction::I32And,
                Instruction::LocalSet(local),
            ]);
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(local),
            Instruction::I32Const(1),
            Instruction::I32And,
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(local),
            Instruction::I32Const(-8),
            Instruction::I32And,
            Instruction::LocalTee(local),
            Instruction::Call(self.probes.enter_catching()),
            Instruction::LocalSet(token),
            Instruction::End,
        ]);
    }

    /// Wherever the activation ends (an exit, a tail call): a timed one stops its timer.
    pub(super) fn stop_timer(&mut self) {
        let Some((
            _,
            InlineLocals {
                timer: Some(token), ..
            },
        )) = self.inline
        else {
            return;
        };
        self.instrs(&[
            Instruction::LocalGet(token),
            Instruction::If(BlockType::Empty),
            Instruction::LocalGet(token),
            Instruction::Call(self.probes.exit()),
            Instruction::End,
        ]);
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{text, validate};
    use crate::{instrument, ContextArena, ProbeImports, ProbeMode, ProbePlan, Selection};

    /// Every way out of a timed activation stops its timer: the end, a `return`, a branch
    /// to the function's label (which lands on the end) and a tail call; an excluded
    /// function has no timer.
    #[test]
    fn every_way_out_stops_the_timer() {
        let wasm = wat::parse_str(
            r#"(module
              (func $leaf (param i32) (result i32)
                (if (local.get 0) (then (return (i32.const 1))))
                (br_if 0 (i32.const 2) (local.get 0))
                (return_call $other (local.get 0)))
              (func $other (param i32) (result i32) (local.get 0))
              (func (export "_start") (drop (call $leaf (i32.const 0)))))"#,
        )
        .unwrap();
        let plan = ProbePlan {
            mode: ProbeMode::Adaptive,
            selection: Some(std::sync::Arc::new(Selection {
                spec: [1; 32],
                excluded: [1].into(),
                silent: false,
            })),
            ..ProbePlan::default()
        };
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let t = text(&out.bytes);
        // Bodies: the node finder, then the module's three.
        let bodies: Vec<&str> = t.split("--\n").collect();
        let (leaf, other) = (bodies[1], bodies[2]);
        // No imports in the original: the probes are functions 0.. of the new module.
        let start = format!("Call {{ function_index: {} }}", 3);
        let stop = format!("Call {{ function_index: {} }}", 1);
        let count = |body: &str, what: &str| body.lines().filter(|l| *l == what).count();
        assert_eq!(ProbeImports::NAMES[3], ProbeImports::ENTER_CATCHING);
        assert_eq!(count(leaf, &start), 1);
        // The `return`, the tail call, and the end (where the `br_if` lands).
        assert_eq!(count(leaf, &stop), 3, "{leaf}");
        // The quick path of the entry is sample mode's: the timer is in the slow path only.
        let sample = instrument(
            &wasm,
            &ProbePlan {
                mode: ProbeMode::Sample,
                ..plan.clone()
            },
        )
        .unwrap();
        let sample_text = text(&sample.bytes);
        let sample_leaf = sample_text.split("--\n").nth(1).unwrap();
        let prefix = |body: &str| -> Vec<String> {
            body.lines()
                .take_while(|l| !l.starts_with("Call"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(prefix(leaf), prefix(sample_leaf));
        // The finder matches an armed node by its id without the bit.
        let mask = format!("I32Const {{ value: {} }}", !ContextArena::TIMED as i32);
        assert!(bodies[0].contains(&mask), "{}", bodies[0]);
        // The excluded function: neither.
        assert_eq!(count(other, &start) + count(other, &stop), 0);
        // With live probes (a component's modules are instrumented so): $leaf's probed copy
        // times as its body did above; its own body (every probe off) has no timer.
        let live = instrument(&wasm, &ProbePlan { live: true, ..plan }).unwrap();
        validate(&live.bytes);
        let t = text(&live.bytes);
        // The node finder, the module's three functions, then their probed copies.
        let bodies: Vec<&str> = t.split("--\n").collect();
        let (own, copy) = (bodies[1], bodies[4]);
        assert_eq!(count(copy, &start), 1, "{copy}");
        assert_eq!(count(copy, &stop), 3, "{copy}");
        assert_eq!(count(own, &start), 0, "{own}");
    }
}
