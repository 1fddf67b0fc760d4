//! Shell completions and man pages, generated from the clap definitions
//! so they cannot drift from what the binary accepts. The copies shipped
//! in `packaging/` are checked against these by `tests/install.rs`.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::Cli;

/// The command tree as documentation sees it: the package version only
/// (not the commit), so generated files change with releases, not with
/// every commit.
fn command() -> clap::Command {
    Cli::command().version(env!("CARGO_PKG_VERSION"))
}

pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut command(), "fusebox", out);
}

/// fusebox.1, fusebox-COMMAND.1 for every visible command, and
/// mount.fusebox.8 for the mount(8) helper.
pub fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = command();
    cmd.build();
    write_page(dir, "fusebox", cmd.clone(), "1")?;
    write_page(dir, "mount.fusebox", crate::helper::command(), "8")?;
    // clap's own `help` command needs no page.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("fusebox-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .version(env!("CARGO_PKG_VERSION"));
        write_page(dir, &name, page, "1")?;
    }
    Ok(())
}

fn write_page(dir: &Path, name: &str, cmd: clap::Command, section: &str) -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd)
        .section(section)
        .render(&mut buf)
        .with_context(|| format!("rendering {name}.{section}"))?;
    let path = dir.join(format!("{name}.{section}"));
    std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))
}
