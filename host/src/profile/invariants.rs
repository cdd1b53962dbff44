//! The promises every profile keeps, checked: self ≤ inclusive for every function and
//! context, an edge's inclusive ≤ its callee's, Σ self = total, min_self ≤ max_self, and
//! every context and edge names a function the profile lists (pprof has no location
//! without one). A
//! report of what a profile breaks, for tests and `wprof bench --accuracy`.

use super::Profile;

impl Profile {
    /// Every broken promise, one line each (empty for a consistent profile).
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let name = |id: u32| {
            self.function(id)
                .map(|f| f.name.clone())
                .unwrap_or_else(|| format!("#{id}"))
        };
        for f in &self.functions {
            if f.self_time > f.inclusive {
                out.push(format!(
                    "function {}: self {} > inclusive {}",
                    f.name, f.self_time, f.inclusive
                ));
            }
            if let (Some(min), Some(max)) = (f.min_self, f.max_self) {
                if min > max {
                    out.push(format!(
                        "function {}: min_self {min} > max_self {max}",
                        f.name
                    ));
                }
            }
        }
        for e in &self.edges {
            for id in e.caller.into_iter().chain([e.callee]) {
                if self.function(id).is_none() {
                    out.push(format!("edge: function #{id} not listed"));
                }
            }
            if let Some(callee) = self.function(e.callee) {
                if e.inclusive > callee.inclusive {
                    out.push(format!(
                        "edge {} -> {}: inclusive {} > the callee's {}",
                        e.caller.map_or_else(|| "root".to_string(), name),
                        callee.name,
                        e.inclusive,
                        callee.inclusive
                    ));
                }
            }
        }
        for c in &self.contexts {
            if self.function(c.function).is_none() {
                out.push(format!(
                    "context {}: function #{} not listed",
                    c.id, c.function
                ));
            }
            if c.self_time > c.inclusive {
                out.push(format!(
                    "context {} ({}): self {} > inclusive {}",
                    c.id,
                    name(c.function),
                    c.self_time,
                    c.inclusive
                ));
            }
        }
        let sum: u64 = self.functions.iter().map(|f| f.self_time).sum();
        if sum != self.total {
            out.push(format!("Σ self {sum} != total {}", self.total));
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::profile::*;

    /// A small consistent time-mode profile: `f0` (self 6) calls `f1` (self 4) once.
    pub(crate) fn profile() -> Profile {
        let f = |id, self_time, inclusive| FunctionRecord {
            id,
            name: format!("f{id}"),
            kind: "local".into(),
            calls: 1,
            self_time,
            inclusive,
            min_self: Some(self_time),
            max_self: Some(self_time),
        };
        Profile {
            format_version: FORMAT_VERSION,
            tool: "test".into(),
            module: ModuleRef {
                path: "m.wasm".into(),
                blake3: String::new(),
            },
            mode: "time".into(),
            unit: "ns".into(),
            exit_code: 0,
            outcome: "exit".into(),
            trap: None,
            wall_time: None,
            total: 10,
            instrumentation: Default::default(),
            excluded_ns: None,
            cpu_wait_ns: None,
            unprobed: Vec::new(),
            untimed: Vec::new(),
            untimed_samples: None,
            ticks: None,
            probe_overhead: None,
            functions: vec![f(0, 6, 10), f(1, 4, 4)],
            edges: vec![EdgeRecord {
                caller: Some(0),
                callee: 1,
                site: None,
                calls: 1,
                inclusive: 4,
            }],
            contexts: vec![ContextRecord {
                id: 0,
                parent: None,
                function: 0,
                calls: 1,
                self_time: 6,
                inclusive: 10,
                host: None,
                allocs: None,
                thread: None,
            }],
            sampling: None,
            live: None,
            adaptive: None,
            injections: Vec::new(),
            coverage: None,
            host_calls: Vec::new(),
            allocations: None,
            threads: None,
            symbols: None,
            lines: None,
        }
    }

    #[test]
    fn a_consistent_profile_breaks_nothing() {
        assert_eq!(profile().violations(), Vec::<String>::new());
    }

    #[test]
    fn each_broken_promise_is_one_line() {
        let mut p = profile();
        p.functions[1].self_time = 5; // self > inclusive, and Σ self != total
        p.functions[0].min_self = Some(9);
        p.edges[0].inclusive = 11;
        p.contexts[0].self_time = 12;
        let v = p.violations();
        assert_eq!(v.len(), 5, "{v:#?}");
        assert!(v[0].contains("f0: min_self 9 > max_self 6"), "{v:#?}");
        assert!(v[1].contains("f1: self 5 > inclusive 4"), "{v:#?}");
        assert!(v[2].contains("edge f0 -> f1"), "{v:#?}");
        assert!(v[3].contains("context 0 (f0)"), "{v:#?}");
        assert!(v[4].contains("Σ self 11 != total 10"), "{v:#?}");
    }

    #[test]
    fn a_context_or_edge_naming_an_unlisted_function_is_broken() {
        let mut p = profile();
        p.functions.remove(0);
        let v = p.violations();
        assert!(
            v.iter().any(|l| l == "edge: function #0 not listed"),
            "{v:#?}"
        );
        assert!(
            v.iter().any(|l| l == "context 0: function #0 not listed"),
            "{v:#?}"
        );
    }
}
