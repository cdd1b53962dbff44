//! Instrumenting a module with every hook the agent can add besides the probes, for the
//! tests that check semantics (the spec testsuite, differential fuzzing): every defined
//! function whose signature allows it is an allocator (`malloc`'s role where it takes and
//! returns an integer and makes no tail call, since an allocator's tail calls become calls,
//! which the scripts' tail-call loops a million deep would not survive; else `free`'s where
//! its first parameter is an integer), and every function asks whether its calls are
//! injected into (with a value to return where it returns one number). The tests' hosts
//! answer every question with 0: the hooks must change nothing.

use std::collections::{BTreeMap, BTreeSet};

use wprof_agent::{
    AgentError, AllocRole, InjectedValue, InstrumentedModule, Instrumenter, ProbePlan,
};

/// `bytes` instrumented for `plan` with every hook (see the module docs).
pub fn instrument_with_hooks(
    bytes: &[u8],
    plan: &ProbePlan,
) -> Result<InstrumentedModule, AgentError> {
    let plan = ProbePlan {
        allocators: Some(Default::default()),
        injections: Some(Default::default()),
        ..plan.clone()
    };
    let mut instrumenter = Instrumenter::new(bytes, &plan)?;
    let first = instrumenter.imported_function_count();
    let ids = first..first + instrumenter.defined_function_count();
    let tail_calling = tail_calling(bytes);
    let alloc = ids
        .clone()
        .filter(|id| !tail_calling.contains(&(id - first)))
        .map(|id| (id, AllocRole::Alloc { size: 0 }))
        .collect();
    let mut not_alloc: BTreeSet<u32> = instrumenter
        .profile_allocations(alloc)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    not_alloc.extend(tail_calling.iter().map(|d| d + first));
    let roles = ids
        .clone()
        .map(|id| match not_alloc.contains(&id) {
            true => (id, AllocRole::Free { ptr: 0 }),
            false => (id, AllocRole::Alloc { size: 0 }),
        })
        .collect();
    instrumenter.profile_allocations(roles);
    let targets: BTreeMap<u32, Option<InjectedValue>> = ids
        .map(|id| {
            use wasmparser::ValType as W;
            let value = match instrumenter.results(id).as_deref() {
                Some([W::I32]) => Some(InjectedValue::I32(-1)),
                Some([W::I64]) => Some(InjectedValue::I64(7)),
                Some([W::F32]) => Some(InjectedValue::F32(1.5f32.to_bits())),
                Some([W::F64]) => Some(InjectedValue::F64(2.5f64.to_bits())),
                _ => None,
            };
            (id, value)
        })
        .collect();
    instrumenter.inject(targets);
    let bodies = (0..instrumenter.defined_function_count())
        .map(|i| instrumenter.instrument_function(i))
        .collect::<Result<Vec<_>, _>>()?;
    instrumenter.assemble(&bodies)
}

/// The defined functions (from 0) of `bytes` whose bodies make tail calls.
fn tail_calling(bytes: &[u8]) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let mut defined = 0;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(wasmparser::Payload::CodeSectionEntry(body)) = payload else {
            continue;
        };
        if let Ok(mut ops) = body.get_operators_reader() {
            while let Ok(op) = ops.read() {
                if matches!(
                    op,
                    wasmparser::Operator::ReturnCall { .. }
                        | wasmparser::Operator::ReturnCallIndirect { .. }
                        | wasmparser::Operator::ReturnCallRef { .. }
                ) {
                    out.insert(defined);
                    break;
                }
            }
        }
        defined += 1;
    }
    out
}
