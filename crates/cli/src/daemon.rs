//! Starting a command again as a background daemon and waiting until it
//! is ready, so that its errors (a busy mountpoint, a missing file) still
//! reach the terminal that started it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Run this program again with its own arguments, then `extra` and
/// `--notify-ready`, detached in its own process group; wait for the
/// `ready ...` line it prints once serving and return what follows
/// `ready `. Its stderr goes to `log_file`, or back here if it fails.
pub fn start(extra: &[&str], log_file: Option<&Path>) -> Result<String> {
    let exe = std::env::current_exe().context("locating the fusebox binary")?;
    let stderr = match log_file {
        Some(p) => Stdio::from(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        ),
        None => Stdio::piped(),
    };
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .args(extra)
        .arg("--notify-ready")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("starting the background daemon")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    if let Some(rest) = line.trim().strip_prefix("ready ") {
        return Ok(rest.to_string());
    }
    let status = child.wait()?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).ok();
    }
    // The daemon's own error line (`fusebox: ...`) is the reason; log
    // lines before it are not.
    let reason = err
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("fusebox: "))
        .map(str::to_string)
        .unwrap_or_else(|| err.trim().to_string());
    if reason.is_empty() {
        match log_file {
            Some(log) => bail!(
                "the background daemon exited ({status}) before serving; its log is {}",
                log.display()
            ),
            None => {
                bail!("the background daemon exited ({status}) before serving, and said nothing")
            }
        }
    }
    bail!("{reason}")
}
