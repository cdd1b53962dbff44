//! The collector's accounting, checked on hand-made probe sequences.

use super::*;

fn edge(c: &Collector, caller: u32, callee: u32) -> EdgeTotals {
    *c.edges()
        .iter()
        .find(|e| e.caller == caller && e.callee == callee)
        .unwrap()
}

#[test]
fn nested_calls_split_self_and_inclusive() {
    let mut c = Collector::new(3);
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    c.exit_at(1, 40);
    c.enter_at(2, 50);
    c.exit_at(2, 55);
    c.exit_at(0, 100);
    let f = c.functions();
    assert_eq!((f[0].calls, f[0].self_time, f[0].inclusive), (1, 65, 100));
    assert_eq!((f[1].self_time, f[1].inclusive), (30, 30));
    assert_eq!((f[2].min_self, f[2].max_self), (5, 5));
    assert_eq!(edge(&c, ROOT, 0).inclusive, 100);
    assert_eq!(edge(&c, 0, 1).calls, 1);
    assert_eq!(c.root_inclusive(), 100);
}

#[test]
fn recursion_counts_outermost_activation_once() {
    let mut c = Collector::new(1);
    c.enter_at(0, 0);
    c.enter_at(0, 10);
    c.enter_at(0, 20);
    c.exit_at(0, 30);
    c.exit_at(0, 40);
    c.exit_at(0, 50);
    let f = c.functions()[0];
    assert_eq!((f.calls, f.inclusive, f.self_time), (3, 50, 50));
    // The recursive edge 0 -> 0 counts its outermost activation: 10..40.
    assert_eq!(edge(&c, 0, 0).inclusive, 30);
    assert_eq!(edge(&c, 0, 0).calls, 2);
}

#[test]
fn tail_call_keeps_caller_open_until_callee_returns() {
    let mut c = Collector::new(3);
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    c.tail(1);
    c.enter_at(2, 20);
    c.exit_at(2, 50); // closes 2, then 1 with it
    assert_eq!(c.depth(), 1);
    c.exit_at(0, 60);
    let f = c.functions();
    assert_eq!(f[1].inclusive, 40);
    assert_eq!(f[1].self_time, 10);
    assert_eq!(f[2].inclusive, 30);
    assert_eq!(edge(&c, 1, 2).calls, 1);
    assert_eq!(f[0].self_time, 20);
}

#[test]
fn loops_of_tail_calls_reenter_their_frame_instead_of_stacking() {
    let mut c = Collector::new(4);
    let mut t = 0;
    let mut tick = || {
        t += 10;
        t
    };
    c.enter_at(0, tick());
    // 1 tail-calls itself 1000 times.
    c.enter_at(1, tick());
    for _ in 0..1000 {
        c.tail(1);
        c.enter_at(1, tick());
        assert_eq!(c.depth(), 2);
    }
    c.exit_at(1, tick());
    // 2 and 3 tail-call each other: at most one frame of each.
    c.enter_at(2, tick());
    for _ in 0..500 {
        c.tail(2);
        c.enter_at(3, tick());
        c.tail(3);
        c.enter_at(2, tick());
        assert!(c.depth() <= 3);
    }
    c.exit_at(2, tick());
    c.exit_at(0, tick());
    assert_eq!(c.depth(), 0);
    let f = c.functions();
    assert_eq!((f[1].calls, f[2].calls, f[3].calls), (1001, 501, 500));
    assert_eq!(edge(&c, 1, 1).calls, 1000);
    assert_eq!((edge(&c, 2, 3).calls, edge(&c, 3, 2).calls), (500, 500));
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
    assert_eq!(f[0].inclusive, c.root_inclusive());
    let context_calls: u64 = c.contexts().nodes().iter().map(|n| n.calls).sum();
    assert_eq!(context_calls, 1 + 1001 + 501 + 500);
}

#[test]
fn skipped_frames_close_at_the_catching_exit_and_finish_closes_all() {
    let mut c = Collector::new(3);
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    c.enter_at(2, 20);
    c.exit_at(0, 40); // 2 and 1 never ran their exit probes
    assert_eq!(c.depth(), 0);
    assert_eq!(c.functions()[2].inclusive, 20);
    c.exit_at(1, 50);
    assert_eq!(c.unmatched_exits(), 1);
    c.enter_at(0, 60);
    c.enter_at(1, 70);
    c.finish_at(100);
    assert_eq!(c.depth(), 0);
    assert_eq!(c.functions()[0].inclusive, 80);
}

#[test]
fn unwind_closes_down_to_the_exact_catching_activation() {
    let mut c = Collector::new(2);
    c.enter_at(0, 0);
    c.enter_with_token_at(1, 7, 10); // rec depth 1 (catches)
    c.enter_with_token_at(1, 8, 20); // rec depth 2 (does not catch this time)
    c.enter_at(1, 30); // rec depth 3, throws
    c.unwind_to_token_at(7, 50); // caught at depth 1
    assert_eq!(c.depth(), 2);
    c.exit_at(1, 60);
    c.exit_at(0, 70);
    let f = c.functions()[1];
    assert_eq!(f.calls, 3);
    assert_eq!(f.inclusive, 50);
    assert_eq!(c.unmatched_exits(), 0);
    let total: i64 = c.functions().iter().map(|f| f.self_time).sum();
    assert_eq!(total, 70);
}

#[test]
fn overhead_is_subtracted_consistently() {
    let o = ProbeOverhead {
        inside: 2,
        outside: 3,
        ..ProbeOverhead::default()
    };
    let mut c = Collector::new(3).with_overhead(o);
    // _start(0) calls f(1) twice; f calls g(2) once each time.
    c.enter_at(0, 0);
    for base in [10, 100] {
        c.enter_at(1, base);
        c.enter_at(2, base + 20);
        c.exit_at(2, base + 30);
        c.exit_at(1, base + 50);
    }
    c.exit_at(0, 200);
    let f = c.functions();
    // g: raw self 10 - inside 2.
    assert_eq!(f[2].self_time, 2 * 8);
    // f: raw self 40, minus inside 2 and one child call's outside 3.
    assert_eq!(f[1].self_time, 2 * 35);
    // f inclusive: raw 50 - inside 2 - 1 descendant × 5.
    assert_eq!(f[1].inclusive, 2 * 43);
    // _start: raw 200, minus 2, minus 4 descendants × 5.
    assert_eq!(f[0].inclusive, 178);
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
}

#[test]
fn an_estimate_above_what_a_frame_measured_costs_it_its_own_time_only() {
    let o = ProbeOverhead {
        inside: 20,
        outside: 3,
        ..ProbeOverhead::default()
    };
    let mut c = Collector::new(3).with_overhead(o);
    // _start(0) -> f(1) -> g(2), g shorter than the estimate.
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    c.enter_at(2, 30);
    c.exit_at(2, 40);
    c.exit_at(1, 100);
    c.exit_at(0, 200);
    let f = c.functions();
    assert_eq!((f[2].self_time, f[2].inclusive), (0, 0));
    // f: raw 90 - g's raw 10 - 20 - 3.
    assert_eq!((f[1].self_time, f[1].inclusive), (57, 57));
    // _start: raw 200 - f's raw 90 - 20 - 3.
    assert_eq!(f[0].self_time, 87);
    assert_eq!(f[0].inclusive, 87 + 57);
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
    assert!(f
        .iter()
        .all(|f| f.self_time >= 0 && f.self_time <= f.inclusive));
    assert!(c
        .edges()
        .iter()
        .all(|e| e.inclusive <= f[e.callee as usize].inclusive));
}

#[test]
fn call_sites_split_edges() {
    let mut c = Collector::new(2);
    c.enter_at(0, 0);
    for (site, t) in [(0x10, 10), (0x10, 20), (0x1c, 30)] {
        c.site(site);
        c.enter_at(1, t);
        c.exit_at(1, t + 5);
    }
    c.exit_at(0, 50);
    let sites: Vec<_> = c
        .edges()
        .iter()
        .filter(|e| e.callee == 1)
        .map(|e| (e.site, e.calls, e.inclusive))
        .collect();
    assert_eq!(sites, [(Some(0x10), 2, 10), (Some(0x1c), 1, 5)]);
    assert_eq!(c.functions()[1].calls, 3);
}

#[test]
fn self_times_add_up_to_root_inclusive() {
    let mut c = Collector::new(4);
    let mut t = 0;
    let mut tick = || {
        t += 7;
        t
    };
    c.enter_at(0, tick());
    for _ in 0..3 {
        c.enter_at(1, tick());
        c.enter_at(2, tick());
        c.enter_at(1, tick());
        c.exit_at(1, tick());
        c.exit_at(2, tick());
        c.enter_at(3, tick());
        c.exit_at(3, tick());
        c.exit_at(1, tick());
    }
    c.exit_at(0, tick());
    let total: i64 = c.functions().iter().map(|f| f.self_time).sum();
    assert_eq!(total, c.root_inclusive());
}

#[test]
fn recursion_with_overhead_stays_consistent() {
    let o = ProbeOverhead {
        inside: 38,
        outside: 43,
        ..ProbeOverhead::default()
    };
    let mut c = Collector::new(2).with_overhead(o);
    let mut t = 0;
    c.enter_at(0, t);
    // fib-like: 0 calls 1, which recurses as a binary tree of depth 3.
    fn rec(c: &mut Collector, t: &mut u64, depth: u32) {
        *t += 40;
        c.enter_at(1, *t);
        if depth > 0 {
            rec(c, t, depth - 1);
            rec(c, t, depth - 1);
        }
        *t += 40;
        c.exit_at(1, *t);
    }
    rec(&mut c, &mut t, 12);
    t += 10;
    c.exit_at(0, t);
    let f = c.functions();
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
    assert_eq!(f[1].inclusive, f[1].self_time);
}

#[test]
fn whole_nanoseconds_add_up_to_the_total() {
    let o = ProbeOverhead {
        inside: 1_234,
        outside: 567,
        ..ProbeOverhead::default()
    };
    let mut c = Collector::new(3).with_overhead(o).with_quantum(PS_PER_NS);
    let mut t = 0u64;
    c.enter_at(0, t);
    for i in 0..50u64 {
        t += 3_333 + i * 17;
        c.enter_at(1, t);
        t += 2_111;
        c.enter_at(2, t);
        t += 1_999 + i;
        c.exit_at(2, t);
        t += 777;
        c.exit_at(1, t);
    }
    t += 4_321;
    c.exit_at(0, t);
    let f = c.functions();
    assert!(f
        .iter()
        .all(|f| f.self_time % 1000 == 0 && f.inclusive % 1000 == 0));
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
    // Within a nanosecond of the exact figure (raw minus every estimate).
    let exact = t as i64 - 101 * 1_234 - 100 * 567;
    assert!((exact - self_sum).abs() < 1000, "{exact} vs {self_sum}");
}

#[test]
fn counted_calls_are_exact_and_their_time_is_the_callers() {
    let o = ProbeOverhead {
        inside: 2,
        outside: 3,
        called: 1,
    };
    let mut c = Collector::new(3).with_overhead(o);
    // _start(0) calls f(1), which calls the short g(2) three times; g is counted, not timed.
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    for _ in 0..3 {
        c.called_at(2, 0);
    }
    c.exit_at(1, 50);
    c.called_at(2, 0);
    c.exit_at(0, 100);
    let f = c.functions();
    assert_eq!((f[2].calls, f[2].untimed_calls), (4, 4));
    assert_eq!((f[2].self_time, f[2].inclusive), (0, 0));
    // f: raw 40, minus inside 2 and three counted calls at 1.
    assert_eq!(f[1].self_time, 35);
    assert_eq!(edge(&c, 1, 2).calls, 3);
    assert_eq!(edge(&c, 0, 2).calls, 1);
    // Contexts: g under f and under _start.
    let g: Vec<u64> = c
        .contexts()
        .nodes()
        .iter()
        .filter(|n| n.function == 2)
        .map(|n| n.calls)
        .collect();
    assert_eq!(g, vec![3, 1]);
    let self_sum: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(self_sum, c.root_inclusive());
}

#[test]
fn a_tail_call_into_a_counted_function_counts_under_the_caller_and_ends_it() {
    let mut c = Collector::new(3);
    c.enter_at(0, 0);
    c.enter_at(1, 10);
    c.tail(1);
    // g counts under f, the frame that tail-called it, and f's frame ends at 30, when g
    // is entered.
    c.called_at(2, 30);
    c.exit_at(0, 100);
    let f = c.functions();
    assert_eq!((f[1].calls, f[1].inclusive), (1, 20));
    assert_eq!(edge(&c, 1, 2).calls, 1);
    assert_eq!(c.depth(), 0);
    assert_eq!(f[0].self_time, 80);
}

/// A goroutine (g 1) of a Go module switched out inside `mcall` and resumed: its frames are
/// re-entered, not called again, and every stretch of time is charged once.
#[test]
fn go_frames_switched_out_and_reentered_are_one_call_each() {
    use wprof_agent::GoTimeFlags as F;
    const LOOP: u32 = 4;
    // worker, step, mcall, park (on g0)
    const W: u32 = 0;
    const S: u32 = 1;
    const M: u32 = 2;
    const P: u32 = 3;
    let mut c = Collector::new(5).with_go(None);
    c.enter_at(LOOP, 0);
    c.go_switch(1);
    c.enter_at(W, 0);
    c.enter_at(S, 10);
    c.enter_at(M, 20);
    c.go_switch(100);
    c.enter_at(P, 25);
    // Another goroutine is picked: every frame unwinds.
    for (id, at) in [(P, 30), (M, 31), (S, 32), (W, 33)] {
        c.exit_at(id | F::UNWINDING, at);
    }
    assert_eq!(c.depth(), 1);
    c.go_switch(1);
    // The scheduler's loop calls the innermost frame that goes on, then its caller.
    c.enter_at(S | F::REENTRY, 50);
    c.exit_at(S, 60);
    c.enter_at(W | F::REENTRY, 61);
    c.exit_at(W, 70);
    c.exit_at(LOOP, 80);
    c.finish_at(80);
    let f = c.functions();
    let calls: Vec<u64> = f.iter().map(|f| f.calls).collect();
    assert_eq!(calls, [1, 1, 1, 1, 1]);
    // W ran 0..33 and 61..70, S inside it 10..32; S ran 10..32 and 50..60, M 20..31, P
    // (the scheduler's) 25..30.
    assert_eq!((f[W as usize].self_time, f[W as usize].inclusive), (20, 47));
    assert_eq!((f[S as usize].self_time, f[S as usize].inclusive), (21, 27));
    assert_eq!((f[M as usize].self_time, f[M as usize].inclusive), (6, 6));
    assert_eq!(f[P as usize].self_time, 5);
    assert_eq!(f[LOOP as usize].self_time, 28);
    let selfs: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(selfs, 80);
    assert_eq!(c.root_inclusive(), 80);
    // Resumed work stays under its real caller.
    assert!(c
        .edges()
        .iter()
        .all(|e| !(e.caller == LOOP && e.callee == S)));
    assert_eq!(edge(&c, W, S).inclusive, 27);
}

/// A frame that `morestack` stopped starts over at `PC_B` 0: not a second call.
#[test]
fn go_frame_restarted_after_morestack_is_one_call() {
    use wprof_agent::GoTimeFlags as F;
    const LOOP: u32 = 0;
    const CALLER: u32 = 1;
    const GROWS: u32 = 2;
    const MORESTACK: u32 = 3;
    let mut c = Collector::new(4).with_go(Some(MORESTACK));
    c.enter_at(LOOP, 0);
    c.go_switch(1);
    c.enter_at(CALLER, 1);
    c.enter_at(GROWS, 2);
    c.enter_at(MORESTACK, 3);
    c.go_switch(100);
    for (id, at) in [(MORESTACK, 5), (GROWS, 6), (CALLER, 7)] {
        c.exit_at(id | F::UNWINDING, at);
    }
    c.go_switch(1);
    c.enter_at(GROWS, 9); // PC_B 0 again
    c.exit_at(GROWS, 12);
    c.enter_at(CALLER | F::REENTRY, 13);
    c.exit_at(CALLER, 14);
    c.exit_at(LOOP, 20);
    c.finish_at(20);
    let calls: Vec<u64> = c.functions().iter().map(|f| f.calls).collect();
    assert_eq!(calls, [1, 1, 1, 1]);
    assert_eq!(edge(&c, CALLER, GROWS).calls, 1);
    assert_eq!(c.root_inclusive(), 20);
}

/// Time mode's ticks: `0` calls the short function `1` (counted, not timed) and the timed
/// `2`; its self time is shared with `1` by the ticks taken while it was on top.
fn ticked(ticks_in_short: u64, ticks_own: u64) -> Collector {
    use crate::run::code::map::Running;
    let mut c = Collector::new(3).with_quantum(10);
    c.enter_at(0, 0);
    c.called_at(1, 0);
    for _ in 0..ticks_in_short {
        c.tick(Running::Function(1), 0);
    }
    for _ in 0..ticks_own {
        c.tick(Running::Function(0), 0);
    }
    // Neither the frame's function nor a short callee of it, or not the module's code:
    // these say nothing.
    c.tick(Running::Function(2), 0);
    c.tick(Running::Outside, 0);
    c.tick(Running::Probe, 0);
    c.enter_at(2, 600);
    c.tick(Running::Function(1), 0); // 1 was never called from 2
    c.exit_at(2, 800);
    c.exit_at(0, 1000);
    c.finish_at(1000);
    c.share_sampled();
    c
}

#[test]
fn ticks_share_a_contexts_self_time_with_its_short_callees() {
    let c = ticked(3, 1);
    let f = c.functions();
    // 0's own 800 (1000 less 2's 200): three quarters go to 1.
    assert_eq!((f[0].self_time, f[0].inclusive), (200, 1000));
    assert_eq!((f[1].self_time, f[1].inclusive), (600, 600));
    assert_eq!((f[2].self_time, f[2].inclusive), (200, 200));
    assert_eq!(edge(&c, 0, 1).inclusive, 600);
    assert_eq!(edge(&c, 0, 1).calls, 1);
    let nodes = c.contexts().nodes();
    let short = c.contexts().child(c.contexts().child(0, 0).unwrap(), 1);
    let short = &nodes[short.unwrap() as usize];
    assert_eq!(
        (short.self_time, short.inclusive, short.calls),
        (600, 600, 1)
    );
    let selfs: i64 = f.iter().map(|f| f.self_time).sum();
    assert_eq!(selfs, c.root_inclusive());
    let s = c.sampled();
    assert_eq!((s.ticks, s.placed, s.moved_ps), (8, 4, 600));
}

#[test]
fn without_ticks_in_a_short_callee_the_time_stays_with_the_caller() {
    let c = ticked(0, 5);
    assert_eq!(c.functions()[0].self_time, 800);
    assert_eq!(c.functions()[1].self_time, 0);
    assert_eq!(c.sampled().moved_ps, 0);
}

#[test]
fn shares_are_whole_quanta_and_nothing_is_lost() {
    // Two thirds of 800 is 533.3: 530 moves, 270 stays.
    let c = ticked(2, 1);
    assert_eq!(c.functions()[1].self_time, 530);
    assert_eq!(c.functions()[0].self_time, 270);
    let selfs: i64 = c.functions().iter().map(|f| f.self_time).sum();
    assert_eq!(selfs, c.root_inclusive());
}
