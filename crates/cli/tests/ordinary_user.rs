//! Everything an ordinary user does with fusebox, done as one (nobody,
//! with /dev/fuse opened to users as desktop distributions do): mounts of
//! stackfs, pathfs and memfs through fusermount3, applications on them
//! compared with a native copy, `fusebox stats`, a server killed and
//! replaced, `fusebox upgrade` and `fusebox umount` on the user's own
//! mount; and `fusebox run --fs stackfs:...` with no extra flag.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{
    as_nobody_with, direct_preload, is_mounted, nobody_ok, snapshot, try_snapshot, MountGuard, BIN,
};

const NOBODY: u32 = 65534;

/// A scratch directory nobody can use: `src` and `mnt` (and `native`)
/// inside, owned by nobody.
fn user_scratch(tag: &str) -> tempfile::TempDir {
    let dir = common::scratch(&format!("user-{tag}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for sub in ["src", "mnt", "native"] {
        let p = dir.path().join(sub);
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    dir
}

fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// What an application run by the user sees of `dir`: listing, contents,
/// modes and sizes, after a copy, renames, links, a truncate and removals.
fn workload(dir: &Path) -> String {
    let script = r#"set -e
cd "$1"
cp -a /usr/share/doc/fuse3 doc
mkdir -p deep/a/b/c && echo deep > deep/a/b/c/f
mv deep/a renamed && mv doc/changelog.Debian.gz doc/moved.gz
ln doc/copyright hard && ln -s doc/copyright soft
chmod 600 hard && truncate -s 10 hard
exec 3<renamed/b/c/f && rm renamed/b/c/f && cat <&3 && exec 3<&-
python3 - <<'PY'
import os
with open("sparse", "wb") as f:
    f.truncate(1 << 20)
    f.seek(4096)
    f.write(b"x" * 100)
os.rename("sparse", "sparse2")
PY
rm -r deep
find . -printf '%p %y %m %s\n' | sort
find . -type f -print0 | sort -z | xargs -0 sha256sum
cat soft | head -3
"#;
    let out = common::as_nobody(&["sh", "-c", script, "sh", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "workload in {} as nobody: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `fs` mounted by nobody through fusermount3; its daemon and mount are
/// the user's.
fn user_mount(fs: &str, dir: &Path) -> MountGuard {
    let mnt = dir.join("mnt");
    let src = dir.join("src");
    let mut args = vec![BIN, "mount", fs];
    if fs != "memfs" {
        args.push(src.to_str().unwrap());
    }
    args.push(mnt.to_str().unwrap());
    let out = nobody_ok(&args);
    let daemon: u32 = out
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out:?}"));
    let g = MountGuard { mnt, daemon };
    assert_eq!(uid_of(daemon), Some(NOBODY), "the daemon is the user's");
    let m = fusebox::mount::fuse_mount_at(&std::fs::canonicalize(&g.mnt).unwrap()).unwrap();
    assert_eq!(m.user_id, Some(NOBODY), "the mount is the user's");
    g
}

/// The whole round for one filesystem: mount, applications against a
/// native directory, stats, a killed server (not memfs, whose files die
/// with it), an upgrade, and umount, every command run by the user.
fn round(fs: &str) {
    let _dev = fusebox_test_support::FuseDeviceOpen::new();
    let dir = user_scratch(fs);
    let g = user_mount(fs, dir.path());
    let mnt = g.mnt.to_str().unwrap().to_owned();
    assert_eq!(workload(&g.mnt), workload(&dir.path().join("native")));
    let stats = nobody_ok(&[BIN, "stats", &mnt]);
    assert!(stats.contains("LOOKUP"), "{stats}");
    // What the user made, read back after each replacement of the server.
    let listing = || {
        nobody_ok(&[
            "sh",
            "-c",
            &format!("cd '{mnt}' && ls -lR && cat renamed/b/c/../../../hard"),
        ])
    };
    let before = listing();
    let generation = || snapshot(&g.mnt).recovery.expect("supervised").generation;
    if fs != "memfs" {
        // Killed with nodes and an open file the kernel still holds: the
        // next server finds them again as this user (stackfs by path).
        // Opens the file, waits for a line on stdin, then reads through
        // the descriptor it opened before the kill: the new server must
        // have taken that open over (stackfs reopens it by path).
        let mut holder = Command::new("timeout")
            .args([
                "60",
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .args(["sh", "-c"])
            .arg(format!("exec 3<'{mnt}/hard'; read go; cat <&3"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let first = snapshot(&g.mnt);
        let gen0 = first.recovery.clone().expect("supervised").generation;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(first.pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let replaced = try_snapshot(&g.mnt)
                .and_then(|s| s.recovery)
                .is_some_and(|r| r.generation > gen0);
            if replaced {
                break;
            }
            assert!(Instant::now() < deadline, "no server after the kill");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(listing(), before, "after a kill");
        {
            use std::io::Write;
            let mut go = holder.stdin.take().unwrap();
            go.write_all(b"go\n").unwrap();
        }
        let out = holder.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the held file after a kill: {}",
            out.status
        );
        assert_eq!(
            out.stdout.len(),
            10,
            "the held file after a kill: {:?}",
            out.stdout
        );
    }
    let gen_before = generation();
    nobody_ok(&[BIN, "upgrade", &mnt]);
    assert!(generation() > gen_before, "upgrade made no new server");
    assert_eq!(listing(), before, "after an upgrade");
    nobody_ok(&[BIN, "umount", &mnt]);
    assert!(!is_mounted(&g.mnt));
    drop(g);
}

#[test]
fn stackfs_as_an_ordinary_user() {
    round("stackfs");
}

#[test]
fn pathfs_as_an_ordinary_user() {
    round("pathfs");
}

#[test]
fn memfs_as_an_ordinary_user() {
    round("memfs");
}

/// Direct mode with no flag: where call-site rewriting needs root, the run
/// says so in one line and catches calls with syscall user dispatch.
#[test]
fn run_with_stackfs_needs_no_flag() {
    let dir = user_scratch("run");
    let src = dir.path().join("src");
    std::fs::write(src.join("hello"), "hello\n").unwrap();
    std::os::unix::fs::chown(src.join("hello"), Some(NOBODY), Some(NOBODY)).unwrap();
    let at = dir.path().join("at");
    let lib = direct_preload();
    let spec = format!("stackfs:{}", src.display());
    let script = format!(
        "cd '{at}' && cat hello && mkdir d && echo x > d/f && mv d e && cat e/f && ls",
        at = at.display()
    );
    let out = as_nobody_with(
        &[
            BIN,
            "run",
            "--fs",
            &spec,
            "--at",
            at.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        &[("FUSEBOX_DIRECT_PRELOAD", lib.to_str().unwrap())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nx\ne\nhello\n");
    assert_eq!(std::fs::read_to_string(src.join("e/f")).unwrap(), "x\n");
    let rewriting_needs_root =
        std::fs::read_to_string("/proc/sys/vm/mmap_min_addr").is_ok_and(|v| v.trim() != "0");
    if rewriting_needs_root {
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("syscall user dispatch"))
            .collect();
        assert_eq!(said.len(), 1, "one line saying why: {err}");
    }
}
