//! Link settings of the `wprof` binary: its debug information (line tables, so that a
//! panic's backtrace names its lines) is stored compressed, which the standard library's
//! backtraces read as they are (README "Install").
//!
//! And the digest of the code that learns a module's facts (`src/prepare/facts.rs` and
//! what it calls: the interpreters' readers, the functions' sources), which keys them in
//! the cache: a build that reads a module differently never takes an older build's facts.

#[path = "../build_support/source_digest.rs"]
mod source_digest;

/// The code a module's facts come from.
const FACTS_CODE: &[&str] = &[
    "src/languages",
    "src/prepare/facts.rs",
    "src/report/source.rs",
];

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let digest = source_digest::source_digest(FACTS_CODE);
    println!("cargo:rustc-env=WPROF_FACTS_CODE={digest}");
}
