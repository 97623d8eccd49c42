//! `optio man`: manual pages generated from the same definitions as `--help` (clap_mangen).

use std::path::PathBuf;

use anyhow::{Context, Result};

/// Prints optio(1), or writes a page per command into `dir`.
pub fn run(command: clap::Command, dir: Option<PathBuf>) -> Result<()> {
    let Some(dir) = dir else {
        return clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .context("cannot write the manual page");
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = 0;
    write_pages(&command, command.get_name(), &dir, &mut written)?;
    eprintln!("wrote {written} manual pages in {}", dir.display());
    Ok(())
}

/// Writes `command`'s page as `NAME.1` and its subcommands' as `NAME-SUB.1`, recursively.
fn write_pages(
    command: &clap::Command,
    name: &str,
    dir: &std::path::Path,
    written: &mut usize,
) -> Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    let named = command.clone().bin_name(name.replace('-', " ")).display_name(name.to_string());
    clap_mangen::Man::new(named)
        .title(name.to_uppercase())
        .render(&mut page)
        .context("cannot render a manual page")?;
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    *written += 1;
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
