//! The `wprof` command: parses the command line and hands over to [`wprof::cli`].

fn main() {
    std::process::exit(wprof::cli::main());
}
