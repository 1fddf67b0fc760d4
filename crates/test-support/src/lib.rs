//! What the workspace's test suites share (a dev-dependency only).
//!
//! - [`FuseDeviceOpen`]: /dev/fuse opened to every user for a test's
//!   duration, as desktop distributions have it, so tests can run the real
//!   commands as an ordinary user.
//! - [`skipped`]: a test that cannot run here says so by name. libtest
//!   counts it as passed whatever it prints, and hides what a passing test
//!   prints, so the name also goes to the file `FUSEBOX_SKIPPED_LOG` names:
//!   the suite's summary lists every skipped test from it.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::Mutex;

/// /dev/fuse open to every user while any holder lives, its mode put back
/// after the last: tests in one binary run in parallel, and each saving and
/// restoring the mode on its own would leave it open when two overlap.
pub struct FuseDeviceOpen(());

/// Holders now, and the mode to put back after the last.
static HOLDERS: Mutex<(usize, u32)> = Mutex::new((0, 0));

impl FuseDeviceOpen {
    /// Open /dev/fuse to users (mode 0666) until the last holder drops.
    /// Needs root.
    #[allow(clippy::new_without_default)] // a side effect, not a value
    pub fn new() -> FuseDeviceOpen {
        let mut held = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
        if held.0 == 0 {
            held.1 = std::fs::metadata("/dev/fuse")
                .expect("/dev/fuse")
                .permissions()
                .mode()
                & 0o7777;
            std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666))
                .expect("chmod /dev/fuse (needs root)");
        }
        held.0 += 1;
        FuseDeviceOpen(())
    }
}

impl Drop for FuseDeviceOpen {
    fn drop(&mut self) {
        let mut held = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            let mode = std::fs::Permissions::from_mode(held.1);
            let _ = std::fs::set_permissions("/dev/fuse", mode);
        }
    }
}

/// The variable naming the file skipped tests are listed in.
pub const SKIPPED_LOG_VAR: &str = "FUSEBOX_SKIPPED_LOG";

/// The calling test (or the part of it named by `part`) cannot run on this
/// machine, because `why`: said on stderr, and listed by name in the file
/// [`SKIPPED_LOG_VAR`] names, for the suite's summary. libtest names each
/// test's thread after the test.
pub fn skipped(part: Option<&str>, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| {
            n.rsplit_once('-')
                .map_or(n.clone(), |(name, _hash)| name.to_owned())
        })
        .unwrap_or_default();
    let name = match part {
        Some(part) => format!("{binary}::{test} ({part})"),
        None => format!("{binary}::{test}"),
    };
    eprintln!("SKIPPED {name}: {why}");
    if let Some(log) = std::env::var_os(SKIPPED_LOG_VAR) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
        {
            // One write per line: parallel tests append whole lines.
            let _ = f.write_all(format!("{name}: {why}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_skipped_test_is_listed_by_its_name() {
        let log = std::env::temp_dir().join(format!("fusebox-skipped-{}", std::process::id()));
        std::env::set_var(super::SKIPPED_LOG_VAR, &log);
        super::skipped(Some("its second half"), "not on this machine");
        let listed = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(
            listed,
            "fusebox_test_support::tests::a_skipped_test_is_listed_by_its_name (its second half): not on this machine\n"
        );
    }
}
