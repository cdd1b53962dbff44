//! The `wprof` command: parses the command line and hands over to [`wprof::commands`].

fn main() {
    std::process::exit(wprof::commands::main());
}
