//! The command-line reference, `docs/reference.md`: every command's `--help` as clap renders
//! it from the definitions in this folder (flags, their defaults and variables, and each
//! command's closing sections: examples, the `WPROF_*` table of
//! [`crate::settings::environment`], the exit status), one section per command. The page is
//! checked in so that it reads on any forge; a test fails when it and `--help` disagree,
//! and writes it anew with `WPROF_WRITE_REFERENCE=1`.

use clap::CommandFactory;

/// The width the reference's help is wrapped at: fixed, whatever the terminal.
const WIDTH: usize = 100;

/// The reference page.
pub fn markdown() -> String {
    let mut root = fixed(super::Cli::command());
    root.build();
    let mut page = String::from(
        "# Command-line reference\n\n\
         Every command's `--help`, generated from wprof's own definitions (do not edit: \
         `WPROF_WRITE_REFERENCE=1 cargo test -p wprof --lib reference` writes it anew, and \
         the test fails while it differs). The [user guide](README.md) says what each is \
         for.\n\n",
    );
    let mut sections = Vec::new();
    collect(&mut root, &mut Vec::new(), &mut sections);
    for (path, _) in &sections {
        page.push_str(&format!("- [`{path}`](#{})\n", anchor(path)));
    }
    for (path, help) in sections {
        page.push_str(&format!(
            "\n## {path}\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    }
    page
}

/// `command` and its subcommands as the reference shows them whatever the machine: wrapped
/// at [`WIDTH`], and the variables' names without this process's values.
fn fixed(command: clap::Command) -> clap::Command {
    command
        .term_width(WIDTH)
        .max_term_width(WIDTH)
        .mut_args(|a| a.hide_env_values(true))
        .mut_subcommands(fixed)
}

/// Every visible command under `command` (itself first), as its path (`wprof cache gc`)
/// and its long help.
fn collect(command: &mut clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
    path.push(command.get_name().to_string());
    let help = command.render_long_help().to_string();
    out.push((path.join(" "), help));
    for sub in command.get_subcommands_mut() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        collect(sub, path, out);
    }
    path.pop();
}

/// The anchor a Markdown renderer gives the heading `text`.
fn anchor(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_reference_page_is_the_help() {
        let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.md");
        let made = super::markdown();
        if std::env::var_os("WPROF_WRITE_REFERENCE").is_some() {
            std::fs::write(&page, &made).unwrap();
        }
        let checked_in = std::fs::read_to_string(&page).unwrap_or_default();
        assert!(
            checked_in == made,
            "docs/reference.md is not what `--help` says: write it anew with \
             `WPROF_WRITE_REFERENCE=1 cargo test -p wprof --lib reference`"
        );
    }

    #[test]
    fn every_command_has_its_section() {
        let page = super::markdown();
        for command in ["wprof run", "wprof report", "wprof cache gc", "wprof bench"] {
            assert!(page.contains(&format!("\n## {command}\n")), "{command}");
        }
        assert!(page.contains("WPROF_SAMPLE_PERIOD_US"));
        // The same page whatever this process's variables say.
        assert!(page.contains("[env: WPROF_MODE]"), "{page}");
    }
}
