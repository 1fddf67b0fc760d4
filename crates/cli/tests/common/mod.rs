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

/// `args` run as nobody (uid and gid 65534, no other groups), with no
/// runtime directory of root's and a home it can write; 120 s at most.
pub fn as_nobody(args: &[&str]) -> std::process::Output {
    as_nobody_with(args, &[])
}

/// `as_nobody` with variables set.
pub fn as_nobody_with(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    Command::new("timeout")
        .args([
            "120",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["env", "-u", "XDG_RUNTIME_DIR", "HOME=/tmp"])
        .args(vars.iter().map(|(k, v)| format!("{k}={v}")))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// `as_nobody`, which must succeed: its standard output.
pub fn nobody_ok(args: &[&str]) -> String {
    let out = as_nobody(args);
    assert!(
        out.status.success(),
        "{args:?} as nobody: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A mount a test made: aborted and unmounted on drop, even when the test
/// failed (a blocked application thread then gets ENOTCONN instead of
/// hanging the suite), and its daemon (the supervisor, or the server that
/// serves itself) gone after.
pub struct MountGuard {
    pub mnt: std::path::PathBuf,
    pub daemon: u32,
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        // Again if the first attempt failed: a supervisor killed below
        // with its mount still there would leave its server serving it.
        for _ in 0..3 {
            if !is_mounted(&self.mnt) {
                break;
            }
            let _ = Command::new(BIN)
                .args(["umount", "--abort"])
                .arg(&self.mnt)
                .status();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while alive(self.daemon) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if alive(self.daemon) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(self.daemon as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

/// Whether `pid` runs; a zombie is gone for our purposes (its status is
/// all that is left).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The mount's server killed (SIGKILL) and, once its supervisor has
/// started the next one, returns (within 20 s, or the test fails). A
/// mount between servers is skipped: false.
#[allow(dead_code)]
pub fn kill_server_and_wait(mnt: &Path) -> bool {
    let Some(s) = try_snapshot(mnt) else {
        return false;
    };
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(s.pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while try_snapshot(mnt).is_none_or(|n| n.pid == s.pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "no server after a kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// `fusebox upgrade MNT`, which must succeed.
#[allow(dead_code)]
pub fn upgrade(mnt: &Path) {
    let out = Command::new(BIN).arg("upgrade").arg(mnt).output().unwrap();
    assert!(
        out.status.success(),
        "upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
