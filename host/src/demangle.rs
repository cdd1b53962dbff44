//! Demangled names: Rust (legacy and v0) and C++ (Itanium) symbols as people write them,
//! for reports and for matching functions by name (`--only`, `--exclude`).

/// A Rust (legacy or v0) or C++ (Itanium) mangled name, demangled; `None` for other names.
/// A component's `module!name` keeps its module: `module!demangled`.
pub fn demangle(name: &str) -> Option<String> {
    if let Some((module, inner)) = name.split_once('!') {
        return demangle_one(inner).map(|d| format!("{module}!{d}"));
    }
    demangle_one(name)
}

fn demangle_one(name: &str) -> Option<String> {
    let rust = name.starts_with("_R") || (name.starts_with("_ZN") && name.ends_with('E'));
    if rust {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // `{:#}` leaves out the hash suffix.
            return Some(format!("{d:#}"));
        }
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(text) = symbol.demangle() {
                return Some(text);
            }
        }
    }
    None
}
