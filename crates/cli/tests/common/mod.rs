//! What the CLI's test files share: the binary, scratch directories, and
//! asking a running mount for its state.

#![allow(dead_code)] // each test file uses its own part

use std::path::Path;
use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_fusebox");

/// The direct-mode library as cargo built it for these tests (a
/// dev-dependency of this crate), beside the binary.
pub fn direct_preload() -> std::path::PathBuf {
    let lib = Path::new(BIN)
        .parent()
        .unwrap()
        .join("deps/libfusebox_direct_preload.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

/// A directory in /dev/shm removed when dropped; `fusebox-cli-` names it
/// for the suite's leftover check.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("fusebox-cli-{tag}-"))
        .tempdir_in("/dev/shm")
        .unwrap()
}

pub fn is_mounted(p: &Path) -> bool {
    let canon = std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    fusebox::mount::fuse_mounts()
        .iter()
        .any(|m| m.mountpoint == canon)
}

/// `fusebox stats --json` of `mnt`, if a daemon answers.
pub fn try_snapshot(mnt: &Path) -> Option<fusebox::stats::Snapshot> {
    let out = Command::new(BIN)
        .args(["stats", "--json"])
        .arg(mnt)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// `try_snapshot`, waiting up to 10 s: a supervised mount has no stats
/// socket for the few milliseconds between two servers.
pub fn snapshot(mnt: &Path) -> fusebox::stats::Snapshot {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(s) = try_snapshot(mnt) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stats from {}",
            mnt.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
