//! Link settings of the `wprof` binary: its debug information (line tables, so that a
//! panic's backtrace names its lines) is stored compressed, which the standard library's
//! backtraces read as they are (README "Install").

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
