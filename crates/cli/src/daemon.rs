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
    match log_file {
        Some(log) => {
            // Its reason went to the log: the end of it.
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            err = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        }
        None => {
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).ok();
            }
        }
    }
    bail!("{}", failure_reason(&err, &status.to_string()))
}

/// Why a background daemon failed, in one line: its own error lines
/// (`fusebox: ...`, a server's before its supervisor's, which only says
/// the server did not start), each once; else the exit status and the
/// last line it wrote (a panic's message, say).
fn failure_reason(stderr: &str, status: &str) -> String {
    let mut reasons: Vec<&str> = Vec::new();
    for l in stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("fusebox: "))
    {
        if !reasons.contains(&l) {
            reasons.push(l);
        }
    }
    // A server that told its supervisor why it failed is quoted in the
    // supervisor's line: say it once, the longer way.
    let all = reasons.clone();
    reasons.retain(|r| !all.iter().any(|o| o != r && o.contains(r)));
    if !reasons.is_empty() {
        return reasons.join("; ");
    }
    match stderr.lines().map(str::trim).rfind(|l| !l.is_empty()) {
        Some(last) => format!("the background daemon exited ({status}) before serving: {last}"),
        None => format!("the background daemon exited ({status}) before serving, and said nothing"),
    }
}

#[cfg(test)]
mod tests {
    use super::failure_reason;

    #[test]
    fn the_first_reason_comes_first() {
        let stderr = "fusebox: --exclusive applies to stackfs only\n2026 WARN something\nfusebox: supervising the mount: the first server did not start\n";
        assert_eq!(
            failure_reason(stderr, "exit status: 1"),
            "--exclusive applies to stackfs only; supervising the mount: the first server did not start"
        );
        assert_eq!(
            failure_reason("thread 'main' panicked at x.rs:1:1:\nboom\n", "signal: 6"),
            "the background daemon exited (signal: 6) before serving: boom"
        );
        assert!(failure_reason("", "exit status: 1").contains("said nothing"));
    }
}
