//! The host's side of a component's probe instances: each instrumented module's probe
//! imports (see [`crate::components::rewrite`]) defined in the component's linker, reporting
//! to time mode's log, adaptive mode's stopwatches, fault injection and `--allocs`, ids moved
//! by the module's offset in the component.

use wasmtime::component::Linker;
use wasmtime::StoreContextMut;
use wprof_agent::{ProbeImports as P, ProbeMode};

use crate::components::{probe_function_name, probe_instance_name};
use crate::run::adaptive::stopwatch::Stopwatch;
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::time::probe_log::ProbeLog;

/// Defines probe instance `k` (see [`probe_instance_name`]) for `module`: time mode's log
/// entries, ids moved by the module's offset; in adaptive mode, module `k`'s stopwatch.
pub(crate) fn define_probes(
    linker: &mut Linker<ComponentState>,
    k: usize,
    module: &ModuleProbes,
) -> wasmtime::Result<()> {
    /// Time mode's log; the inline modes import the probes but never call them.
    fn with_log(store: &mut StoreContextMut<'_, ComponentState>, f: impl FnOnce(&mut ProbeLog)) {
        if let Some(log) = store.data_mut().log.as_mut() {
            f(log);
        }
    }
    /// Adaptive mode: module `k`'s stopwatch.
    fn stopwatch<'s>(
        store: &'s mut StoreContextMut<'_, ComponentState>,
        k: usize,
    ) -> Option<&'s mut Stopwatch> {
        store.data_mut().stopwatches.get_mut(k)?.as_mut()
    }
    // Adaptive mode's `enter_catching` and `exit` are its timers; decided here, not at
    // every call.
    let timed = module.indices.mode == ProbeMode::Adaptive;
    let mut instance = linker.instance(&probe_instance_name(k))?;
    let offset = module.offset;
    for probe in &module.imports {
        let name = probe_function_name(&probe.name);
        match probe.name.as_str() {
            P::ENTER => instance.func_wrap(&name, move |mut s, (id,): (u32,)| {
                with_log(&mut s, |l| l.enter(in_component(offset, id)));
                Ok(())
            })?,
            P::EXIT if timed => instance.func_wrap(&name, move |mut s, (token,): (u32,)| {
                if let Some(watch) = stopwatch(&mut s, k) {
                    watch.stop(token);
                }
                Ok(())
            })?,
            P::EXIT => instance.func_wrap(&name, move |mut s, (id,): (u32,)| {
                with_log(&mut s, |l| l.exit(in_component(offset, id)));
                Ok(())
            })?,
            P::TAIL => instance.func_wrap(&name, move |mut s, (id,): (u32,)| {
                with_log(&mut s, |l| l.tail(offset + id));
                Ok(())
            })?,
            P::CALLED => instance.func_wrap(&name, move |mut s, (id,): (u32,)| {
                with_log(&mut s, |l| l.called(offset + id));
                Ok(())
            })?,
            P::ENTER_CATCHING if timed => {
                instance.func_wrap(&name, move |mut s, (node,): (u32,)| {
                    Ok((stopwatch(&mut s, k).map_or(0, |watch| watch.start(node)),))
                })?
            }
            P::ENTER_CATCHING => instance.func_wrap(&name, move |mut s, (id,): (u32,)| {
                let mut token = 0;
                with_log(&mut s, |l| token = l.enter_catching(offset + id));
                Ok((token,))
            })?,
            P::UNWIND => instance.func_wrap(&name, |mut s, (token,): (u32,)| {
                with_log(&mut s, |l| l.unwind(token));
                Ok(())
            })?,
            P::SITE => instance.func_wrap(&name, |mut s, (site,): (u32,)| {
                with_log(&mut s, |l| l.site(site));
                Ok(())
            })?,
            P::INJECT => instance.func_wrap(&name, move |s, (id,): (u32,)| {
                s.data().injected.ask(offset + id).map(|v| (v as u32,))
            })?,
            P::ALLOC => instance.func_wrap(
                &name,
                move |mut s, (id, kind, a, b, result, node): (u32, u32, u64, u64, u64, u32)| {
                    let state = s.data_mut();
                    let Some(allocs) = state.allocs.as_mut() else {
                        return Ok(());
                    };
                    let started = state.log.as_ref().map(ProbeLog::now_ps);
                    let logged =
                        allocs.report(k, offset, id, (kind, a, b, result), node, started.is_some());
                    if let (Some(log), Some(started)) = (state.log.as_mut(), started) {
                        log.allocs(logged.freed, logged.allocated, started);
                    }
                    Ok(())
                },
            )?,
            other => wasmtime::bail!("unknown probe wprof::{other}"),
        }
    }
    Ok(())
}

/// A module's function id in the component's id space; a wait's id
/// ([`P::WAIT_ID`]) stays as it is, for the log to place. (A component's memories are not
/// shared, so its waits trap; the probes still must not name another module's function.)
fn in_component(offset: u32, id: u32) -> u32 {
    if id == P::WAIT_ID {
        id
    } else {
        offset + id
    }
}
