//! The `wprof` command: parses the command line and hands over to [`wprof::commands`].

fn main() {
    wprof::prepare::heap::one_arena_per_core();
    std::process::exit(wprof::commands::main());
}
