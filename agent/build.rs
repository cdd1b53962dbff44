//! The digest of the agent's own sources, which every cache key of what the agent writes
//! holds beside its format version (`AGENT_CODE`, see `src/lib.rs`): a build whose agent
//! writes differently never takes an older build's instrumented bodies or modules from a
//! cache, even where the version was not bumped.

#[path = "../build_support/source_digest.rs"]
mod source_digest;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let digest = source_digest::source_digest(&["src"]);
    println!("cargo:rustc-env=WPROF_AGENT_CODE={digest}");
}
