//! Which of a module's functions are its allocator, for allocation profiling (`wprof run
//! --allocs`): found by their names, or named by the configuration file's `allocators`.
//!
//! By name, wprof knows C's `malloc`, `calloc`, `realloc`, `free`, `aligned_alloc`,
//! `memalign`, `posix_memalign`, `valloc` and `pvalloc` (zig's libc names some
//! `c.malloc.free`), C++'s `operator new`/`new[]` and `operator delete`/`delete[]` (every
//! variant: sized, aligned, nothrow), and Rust's `__rust_alloc`, `__rust_alloc_zeroed`,
//! `__rust_realloc` and `__rust_dealloc`. A module with any of C's takes those only:
//! `operator new` and Rust's allocator functions call `malloc` there, and a block would
//! otherwise be counted twice (the profile shows `operator new` as `malloc`'s caller).

use std::collections::BTreeMap;

use wprof_agent::AllocRole;

use crate::settings::patterns::FunctionPattern;

/// The roles a configuration names, each with the signature of the function it is named
/// after (parameters from 0).
pub const ROLES: [(&str, AllocRole); 9] = [
    ("malloc", AllocRole::Alloc { size: 0 }),
    ("calloc", AllocRole::Calloc { count: 0, size: 1 }),
    ("realloc", AllocRole::Realloc { ptr: 0, size: 1 }),
    ("free", AllocRole::Free { ptr: 0 }),
    ("aligned_alloc", AllocRole::Alloc { size: 1 }),
    ("posix_memalign", AllocRole::AllocAt { out: 0, size: 2 }),
    ("rust_alloc", AllocRole::Alloc { size: 0 }),
    ("rust_realloc", AllocRole::Realloc { ptr: 0, size: 3 }),
    ("rust_dealloc", AllocRole::Free { ptr: 0 }),
];

/// How the allocator functions are chosen.
#[derive(Debug, Clone, Default)]
pub enum AllocatorRules {
    /// By the names wprof knows (see the module docs).
    #[default]
    Known,
    /// Exactly the functions these `ROLE=PATTERN` specs match (the configuration file's
    /// `allocators`), in their order: the first that matches a function gives its role.
    Named(Vec<AllocatorSpec>),
}

/// One `ROLE=PATTERN` of the configuration file's `allocators`.
#[derive(Debug, Clone)]
pub struct AllocatorSpec {
    /// As written.
    pub text: String,
    /// The role's name (one of [`ROLES`]).
    pub role_name: &'static str,
    /// What the function does.
    pub role: AllocRole,
    /// Which functions (see [`FunctionPattern`]).
    pub pattern: FunctionPattern,
}

impl AllocatorSpec {
    /// Parses `ROLE=PATTERN`, ROLE one of [`ROLES`].
    pub fn parse(text: &str) -> Result<Self, String> {
        let names = || ROLES.map(|(n, _)| n).join(", ");
        let Some((role, pattern)) = text.split_once('=') else {
            return Err(format!(
                "{text:?} is not ROLE=FUNCTION (ROLE one of {})",
                names()
            ));
        };
        let Some(&(role_name, role)) = ROLES.iter().find(|(n, _)| *n == role.trim()) else {
            return Err(format!(
                "{:?} is not a role (one of {})",
                role.trim(),
                names()
            ));
        };
        Ok(Self {
            text: text.to_string(),
            role_name,
            role,
            pattern: FunctionPattern::parse(pattern.trim())?,
        })
    }
}

impl AllocatorRules {
    /// The rules as one line (`known`, or the specs joined by commas).
    pub fn describe(&self) -> String {
        match self {
            Self::Known => "known".to_string(),
            Self::Named(specs) => specs
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The plan's allocators for these rules, the set yet to be chosen by the module's
    /// names (see [`AllocatorRules::roles`]).
    pub fn plan(&self) -> wprof_agent::Allocators {
        let mut h = blake3::Hasher::new();
        h.update(b"wprof allocators v1\0");
        h.update(self.describe().as_bytes());
        wprof_agent::Allocators {
            spec: *h.finalize().as_bytes(),
            roles: BTreeMap::new(),
        }
    }

    /// The allocator functions among the defined ones (ids from `first_defined` on;
    /// `names` every function's name by id, `shown` the name wprof shows where it differs,
    /// see [`crate::go_symbols::shown_names`]), with their roles.
    pub fn roles(
        &self,
        names: &[String],
        shown: &[Option<String>],
        first_defined: u32,
    ) -> BTreeMap<u32, AllocRole> {
        let defined = (first_defined..names.len() as u32).map(|id| {
            let other = shown.get(id as usize).and_then(Option::as_deref);
            (id, names[id as usize].as_str(), other)
        });
        match self {
            Self::Named(specs) => defined
                .filter_map(|(id, name, other)| {
                    let demangled = other
                        .map(str::to_string)
                        .or_else(|| crate::demangle::demangle(name));
                    specs
                        .iter()
                        .find(|s| s.pattern.matches(id, name, demangled.as_deref()))
                        .map(|s| (id, s.role))
                })
                .collect(),
            Self::Known => {
                let mut c = BTreeMap::new();
                let mut others = BTreeMap::new();
                for (id, name, _) in defined {
                    match known_role(name) {
                        Some((Family::C, role)) => {
                            c.insert(id, role);
                        }
                        Some((Family::Other, role)) => {
                            others.insert(id, role);
                        }
                        None => {}
                    }
                }
                if c.is_empty() {
                    others
                } else {
                    c
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// C's allocator, which the others call.
    C,
    /// C++'s and Rust's.
    Other,
}

/// The role of a function named `name` by the module, if wprof knows it.
fn known_role(name: &str) -> Option<(Family, AllocRole)> {
    let c_name = name.strip_prefix("c.malloc.").unwrap_or(name);
    let c = match c_name {
        "malloc" | "valloc" | "pvalloc" => Some(AllocRole::Alloc { size: 0 }),
        "calloc" => Some(AllocRole::Calloc { count: 0, size: 1 }),
        "realloc" => Some(AllocRole::Realloc { ptr: 0, size: 1 }),
        "free" => Some(AllocRole::Free { ptr: 0 }),
        "aligned_alloc" | "memalign" => Some(AllocRole::Alloc { size: 1 }),
        "posix_memalign" => Some(AllocRole::AllocAt { out: 0, size: 2 }),
        _ => None,
    };
    if let Some(role) = c {
        return Some((Family::C, role));
    }
    let demangled = crate::demangle::demangle(name);
    let readable = demangled.as_deref().unwrap_or(name);
    let other = if readable.starts_with("operator new(") || readable.starts_with("operator new[](")
    {
        Some(AllocRole::Alloc { size: 0 })
    } else if readable.starts_with("operator delete(") || readable.starts_with("operator delete[](")
    {
        Some(AllocRole::Free { ptr: 0 })
    } else {
        match readable.rsplit("::").next().unwrap_or(readable) {
            "__rust_alloc" | "__rust_alloc_zeroed" => Some(AllocRole::Alloc { size: 0 }),
            "__rust_realloc" => Some(AllocRole::Realloc { ptr: 0, size: 3 }),
            "__rust_dealloc" => Some(AllocRole::Free { ptr: 0 }),
            _ => None,
        }
    };
    other.map(|role| (Family::Other, role))
}

/// The name of `role`'s kind, as reports show it (`alloc`, `calloc`, `realloc`, `free`,
/// `alloc_at`).
pub fn kind_name(role: AllocRole) -> &'static str {
    match role {
        AllocRole::Alloc { .. } => "alloc",
        AllocRole::Calloc { .. } => "calloc",
        AllocRole::Realloc { .. } => "realloc",
        AllocRole::Free { .. } => "free",
        AllocRole::AllocAt { .. } => "alloc_at",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn c_allocators_win_over_the_ones_that_call_them() {
        let n = names(&[
            "fd_write",
            "malloc",
            "c.malloc.free",
            "c.malloc.realloc",
            "operator new(unsigned long)",
            "_ZdlPv",
            "main",
        ]);
        let roles = AllocatorRules::Known.roles(&n, &[], 1);
        assert_eq!(
            roles,
            BTreeMap::from([
                (1, AllocRole::Alloc { size: 0 }),
                (2, AllocRole::Free { ptr: 0 }),
                (3, AllocRole::Realloc { ptr: 0, size: 1 })
            ])
        );
        // Without C's: C++'s (demangled or mangled) and Rust's (mangled or plain).
        let n = names(&[
            "operator new(unsigned long)",
            "_ZdlPvm",
            "_ZnamSt11align_val_t",
            "__rust_alloc",
            "_RNvCs691rhTbG0Ee_7___rustc14___rust_realloc",
            "__rustc::__rust_dealloc",
            "my_malloc",
        ]);
        let roles = AllocatorRules::Known.roles(&n, &[], 0);
        assert_eq!(
            roles,
            BTreeMap::from([
                (0, AllocRole::Alloc { size: 0 }),
                (1, AllocRole::Free { ptr: 0 }),
                (2, AllocRole::Alloc { size: 0 }),
                (3, AllocRole::Alloc { size: 0 }),
                (4, AllocRole::Realloc { ptr: 0, size: 3 }),
                (5, AllocRole::Free { ptr: 0 }),
            ])
        );
        // Imports are never allocators.
        assert!(AllocatorRules::Known
            .roles(&names(&["malloc"]), &[], 1)
            .is_empty());
    }

    #[test]
    fn named_rules_replace_the_known_names() {
        let specs = ["malloc=my_*", "free=/^release$/", "calloc=#3"]
            .iter()
            .map(|s| AllocatorSpec::parse(s).unwrap())
            .collect();
        let rules = AllocatorRules::Named(specs);
        let n = names(&["malloc", "my_alloc", "release", "zeroed", "my_free"]);
        assert_eq!(
            rules.roles(&n, &[], 0),
            BTreeMap::from([
                (1, AllocRole::Alloc { size: 0 }),
                (2, AllocRole::Free { ptr: 0 }),
                (3, AllocRole::Calloc { count: 0, size: 1 }),
                (4, AllocRole::Alloc { size: 0 }),
            ])
        );
        assert_ne!(rules.plan().spec, AllocatorRules::Known.plan().spec);
        for bad in ["malloc", "grab=x", "free=", "free=/(/"] {
            assert!(AllocatorSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
