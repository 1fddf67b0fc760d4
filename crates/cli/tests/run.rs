//! `fusebox run`: an unchanged Debian program (squashfuse_ll) on the
//! libfuse3 drop-in, over each transport, with `fusebox stats` on its
//! mount; and the errors a user can meet.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The drop-in as cargo built it for these tests (a dev-dependency).
fn library() -> PathBuf {
    let deps = Path::new(BIN).parent().unwrap().join("deps/libfuse3.so");
    assert!(deps.exists(), "{} not built", deps.display());
    deps
}

fn wait_mounted(mnt: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_mounted(mnt) {
        if let Some(s) = child.try_wait().unwrap() {
            panic!("the program exited ({s}) before mounting");
        }
        assert!(Instant::now() < deadline, "no mount at {}", mnt.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn run_serves_an_unchanged_program_over_each_transport() {
    let s = scratch("run");
    let src = s.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(
            src.join(format!("d/f{i}")),
            format!("file {i}\n").repeat(i * 100),
        )
        .unwrap();
    }
    let img = s.path().join("img");
    let st = Command::new("mksquashfs")
        .arg(&src)
        .arg(&img)
        .args(["-quiet", "-noappend", "-no-progress"])
        .status()
        .expect("mksquashfs (squashfs-tools: scripts/setup.sh)");
    assert!(st.success());
    let uring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y");
    let mut transports = vec!["classic"];
    if uring {
        transports.push("uring");
    }
    for transport in transports {
        let mnt = s.path().join(format!("mnt-{transport}"));
        std::fs::create_dir_all(&mnt).unwrap();
        let mut child = Command::new(BIN)
            .args(["run", "--transport", transport, "--library"])
            .arg(library())
            .args(["--", "squashfuse_ll", "-f"])
            .arg(&img)
            .arg(&mnt)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let guard = MountGuard(&mnt);
        wait_mounted(&mnt, &mut child);
        for i in 0..20 {
            assert_eq!(
                std::fs::read(mnt.join(format!("d/f{i}"))).unwrap(),
                std::fs::read(src.join(format!("d/f{i}"))).unwrap()
            );
        }
        let snap = snapshot(&mnt);
        assert_eq!(snap.transport, transport);
        assert!(snap.ops.iter().any(|o| o.name == "READ" && o.count > 0));
        assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
        let status = child.wait().unwrap();
        assert!(status.success(), "{transport}: {status}");
        drop(guard);
    }
}

#[test]
fn run_says_what_is_wrong() {
    let out = Command::new(BIN)
        .args(["run", "--library", "/nonexistent/libfuse3.so", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/libfuse3.so"), "{err}");
    let out = Command::new(BIN)
        .args(["run", "--library"])
        .arg(library())
        .args(["--", "/nonexistent-program"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("running /nonexistent-program"));
    let out = Command::new(BIN)
        .args(["run", "--poll", "sometimes", "--library"])
        .arg(library())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--poll"));
}

#[test]
fn run_hands_its_settings_to_the_program_through_the_environment() {
    let out = Command::new(BIN)
        .args(["run", "--no-readdirplus-lookups", "--no-stats", "--library"])
        .arg(library())
        .args([
            "--",
            "sh",
            "-c",
            "echo $FUSEBOX_READDIRPLUS_LOOKUPS $FUSEBOX_STATS",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0 0");
}

/// Unmounts (aborting the connection first) if a test fails midway.
struct MountGuard<'a>(&'a Path);

impl Drop for MountGuard<'_> {
    fn drop(&mut self) {
        if let Some(m) = fusebox::mount::fuse_mount_at(self.0) {
            let _ = fusebox::mount::abort_connection(m.connection);
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}
