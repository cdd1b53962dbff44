//! Time mode's short functions: counted, not timed.
//!
//! A time-mode probe is a host call and a clock read at entry and again at exit, tens of
//! nanoseconds; a function of a few straight-line instructions runs in a few. Timing it
//! would mostly measure the probes, and the estimate subtracted for them would decide its
//! time. So a function whose body is straight-line work of at most
//! [`ProbePlan::short_max`] instructions (see [`super::scan::BodyFacts::straight_length`]:
//! no loop, no call, no exception handling, nothing whose cost grows with its operands) gets
//! one probe: `called(id)` at entry, which counts the call in the host's shadow stack
//! without reading the clock. It has no exit probe; its time stays in its caller's frame,
//! and the host subtracts the `called` probe's own cost from that frame.
//!
//! Only the body decides, so its key in the cache covers the decision; a caller does not
//! need to know whether its callee is counted (a tail call into a counted function ends the
//! caller's frame in the host when `called` arrives).

use super::scan::BodyFacts;
use crate::ProbePlan;

/// Whether function `id`, whose body `facts` describe, is counted but not timed.
pub(super) fn is_counted(plan: &ProbePlan, facts: &BodyFacts, id: u32) -> bool {
    plan.counts_short()
        && !plan.excludes(id)
        && facts
            .straight_length
            .is_some_and(|length| length <= plan.short_max)
}

#[cfg(test)]
mod tests {
    use crate::tests::{text, validate};
    use crate::{instrument, ProbeImports, ProbeMode, ProbePlan};

    /// `called`'s index in a module without imports of its own.
    fn called_index() -> usize {
        ProbeImports::NAMES
            .iter()
            .position(|&n| n == ProbeImports::CALLED)
            .unwrap()
    }

    const MODULE: &str = r#"(module
      (memory 1)
      (func $short (param i32) (result i32)
        (if (result i32) (local.get 0)
          (then (i32.add (local.get 0) (i32.const 1)))
          (else (i32.load (i32.const 8)))))
      (func $looping (param i32)
        (loop $l (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1))))))
      (func $bulk (memory.fill (i32.const 0) (i32.const 0) (i32.const 16)))
      (func $calls (drop (call $short (i32.const 1))))
      (func $long (result i32)
        i32.const 1 i32.const 2 i32.add i32.const 3 i32.add i32.const 4 i32.add
        i32.const 5 i32.add i32.const 6 i32.add)
      (func (export "run") (result i32)
        (call $looping (i32.const 3))
        (call $bulk)
        (call $calls)
        (drop (call $long))
        (return_call $short (i32.const 0)))
    )"#;

    fn bodies(plan: &ProbePlan) -> Vec<String> {
        let wasm = wat::parse_str(MODULE).unwrap();
        let out = instrument(&wasm, plan).unwrap();
        validate(&out.bytes);
        text(&out.bytes)
            .split("--\n")
            .filter(|b| !b.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn short_straight_bodies_are_counted_and_the_rest_timed() {
        let called = format!("Call {{ function_index: {} }}", called_index());
        let enter = "Call { function_index: 0 }";
        let exit = "Call { function_index: 1 }";
        let plan = ProbePlan {
            short_max: 10,
            ..ProbePlan::default()
        };
        let b = bodies(&plan);
        // $short (7 instructions, a branch): `called` at entry and nothing else.
        assert!(
            b[0].starts_with(&format!("I32Const {{ value: 0 }}\n{called}\n")),
            "{}",
            b[0]
        );
        assert_eq!(b[0].matches("Call {").count(), 1, "{}", b[0]);
        // A loop, a bulk operation, a call, or more instructions than the bound: timed.
        for (i, what) in [(1, "$looping"), (2, "$bulk"), (3, "$calls"), (4, "$long")] {
            assert!(
                b[i].contains(enter) && b[i].contains(exit),
                "{what}: {}",
                b[i]
            );
            assert!(!b[i].contains(&called), "{what}: {}", b[i]);
        }
        // The export's tail call into $short announces itself as it would for any callee.
        assert!(
            b[5].contains("Call { function_index: 2 }\nReturnCall"),
            "{}",
            b[5]
        );
        // With a bound that covers $long, it is counted too.
        let wide = bodies(&ProbePlan {
            short_max: 11,
            ..ProbePlan::default()
        });
        assert!(
            wide[4].contains(&called) && !wide[4].contains(exit),
            "{}",
            wide[4]
        );
    }

    #[test]
    fn an_allocation_or_a_wake_is_timed() {
        let wasm = wat::parse_str(
            r#"(module
              (type $pair (struct (field i32) (field i32)))
              (memory 1 1 shared)
              (func $alloc (result (ref $pair)) (struct.new $pair (i32.const 1) (i32.const 2)))
              (func $wake (result i32) (memory.atomic.notify (i32.const 0) (i32.const 1)))
              (func $plain (result i32) (i32.const 7)))"#,
        )
        .unwrap();
        let plan = ProbePlan {
            short_max: 100,
            ..ProbePlan::default()
        };
        let out = instrument(&wasm, &plan).unwrap();
        validate(&out.bytes);
        let called = format!("Call {{ function_index: {} }}", called_index());
        let t = text(&out.bytes);
        let b: Vec<&str> = t.split("--\n").collect();
        assert!(!b[0].contains(&called), "{}", b[0]);
        assert!(!b[1].contains(&called), "{}", b[1]);
        assert!(b[2].contains(&called), "{}", b[2]);
    }

    #[test]
    fn a_bound_of_zero_and_other_modes_time_as_before() {
        let plain = bodies(&ProbePlan::default());
        for plan in [
            ProbePlan {
                short_max: 0,
                ..ProbePlan::default()
            },
            ProbePlan {
                mode: ProbeMode::Time,
                ..ProbePlan::default()
            },
        ] {
            assert_eq!(bodies(&plan), plain);
        }
        for mode in [ProbeMode::Cost, ProbeMode::Sample, ProbeMode::Adaptive] {
            let without = bodies(&ProbePlan {
                mode,
                ..ProbePlan::default()
            });
            let with = bodies(&ProbePlan {
                mode,
                short_max: 1000,
                ..ProbePlan::default()
            });
            assert_eq!(with, without, "{}", mode.name());
        }
    }

    #[test]
    fn live_probes_count_behind_the_switch() {
        let b = bodies(&ProbePlan {
            short_max: 10,
            live: true,
            ..ProbePlan::default()
        });
        let called = format!("Call {{ function_index: {} }}", called_index());
        // The switch byte, then the call only when it is on (0).
        assert!(
            b[0].starts_with("I32Const { value: 0 }\nI32Load8U"),
            "{}",
            b[0]
        );
        assert!(
            b[0].contains(&format!(
                "I32Eqz\nIf {{ blockty: Empty }}\nI32Const {{ value: 0 }}\n{called}\nEnd"
            )),
            "{}",
            b[0]
        );
    }
}
