//! sftpfs end to end, against a real OpenSSH server on loopback that each
//! test starts (throwaway keys and directory): what applications see
//! against a native directory, the remote tree compared byte for byte,
//! dropped and dead connections through a proxy, its server killed and
//! upgraded mid-copy, and every way a mount can be refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fusebox_bench::remote::{DelayProxy, Sshd, SshdConfig};

mod common;
use common::{is_mounted, snapshot, try_snapshot, BIN};

/// A server with a remote directory, and a mount point.
struct Remote {
    dir: tempfile::TempDir,
    sshd: Sshd,
}

impl Remote {
    fn start(tag: &str) -> Remote {
        let dir = common::scratch(&format!("sftp-{tag}"));
        let sshd = Sshd::start(&dir.path().join("sshd"), &SshdConfig::default()).unwrap();
        std::fs::create_dir(dir.path().join("remote")).unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        Remote { dir, sshd }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("remote")
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn spec(&self) -> String {
        format!("root@127.0.0.1:{}", self.root().display())
    }

    /// `fusebox mount sftpfs` of the remote directory (through `port`, the
    /// server's or a proxy's), with `-o extra` and `args`.
    fn mount_cmd(&self, port: u16, extra: &str, args: &[&str]) -> Command {
        let mut o = self.sshd.ssh_options(port);
        if !extra.is_empty() {
            o.push(',');
            o.push_str(extra);
        }
        let mut c = Command::new(BIN);
        c.args(["mount", "sftpfs"])
            .arg(self.spec())
            .arg(self.mnt())
            .arg("-o")
            .arg(o)
            .args(args);
        c
    }

    fn mount(&self, port: u16, extra: &str, args: &[&str]) -> Guard {
        let out = self.mount_cmd(port, extra, args).output().unwrap();
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let daemon: u32 = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {line:?}"));
        assert!(is_mounted(&self.mnt()));
        Guard {
            mnt: self.mnt(),
            daemon,
        }
    }
}

/// Aborts and unmounts on drop, even after a panic, and ends the daemon.
struct Guard {
    mnt: PathBuf,
    daemon: u32,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for _ in 0..3 {
            if !is_mounted(&self.mnt) {
                break;
            }
            let _ = Command::new(BIN)
                .args(["umount", "--abort"])
                .arg(&self.mnt)
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(self.daemon) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(self.daemon) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(self.daemon as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// `sh -c script` with a time limit: a hung mount fails the test
/// instead of hanging the suite.
fn sh(script: &str, limit: u32) -> Output {
    Command::new("timeout")
        .arg(format!("{limit}"))
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn sh_ok(script: &str, limit: u32) -> String {
    let out = sh(script, limit);
    assert!(
        out.status.success(),
        "{script}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// sha256 of every file below `dir`, by relative path.
fn tree_sums(dir: &Path) -> String {
    sh_ok(
        &format!(
            "cd '{}' && find . -type f -print0 | sort -z | xargs -0 -r sha256sum",
            dir.display()
        ),
        120,
    )
}

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sftpfs/workload.sh")
}

#[test]
fn applications_see_what_they_see_on_a_native_directory() {
    let r = Remote::start("apps");
    let _g = r.mount(r.sshd.port(), "", &[]);
    let native = common::scratch("sftp-native");
    let run = |dir: &Path| {
        let out = Command::new("timeout")
            .args(["300", "bash"])
            .arg(workload())
            .arg(dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).replace(&*dir.to_string_lossy(), "R");
        assert!(
            out.status.success(),
            "workload in {}: {}\n{text}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let want = run(native.path());
    let got = run(&r.mnt());
    assert_eq!(got, want);
    // What landed on the server is what the mount shows, byte for byte,
    // read again from the server after the kernel's cache is dropped ...
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches", 30);
    assert_eq!(tree_sums(&r.root()), tree_sums(&r.mnt()));
    // ... and what a native run leaves, but for what holds the time it
    // was made (the tar archive's headers, git's index, log and commits).
    let timeless = |d: &Path| {
        tree_sums(d)
            .lines()
            .filter(|l| !l.contains("./archive.tar") && !l.contains("/.git/"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(timeless(&r.root()), timeless(native.path()));
}

#[test]
fn rsync_and_git_clone_into_the_mount_give_the_same_tree() {
    let r = Remote::start("rsync");
    let _g = r.mount(r.sshd.port(), "", &[]);
    let src = common::scratch("sftp-src");
    sh_ok(
        &format!(
            "set -e; cd '{0}'; cp -a /usr/share/doc/git . ; mkdir repo; cd repo; git init -q; \
             for i in $(seq 1 30); do echo $i > f$i; mkdir -p d$((i % 5)); echo $i > d$((i % 5))/g$i; done; \
             git add .; git -c user.email=a@b -c user.name=t commit -qm one; \
             echo more >> f1; git -c user.email=a@b -c user.name=t commit -qam two",
            src.path().display()
        ),
        60,
    );
    let mnt = r.mnt();
    sh_ok(
        &format!(
            "rsync -a '{}/git/' '{}/rsynced/'",
            src.path().display(),
            mnt.display()
        ),
        120,
    );
    // A second run finds nothing to send (sizes and whole-second times).
    let again = sh_ok(
        &format!(
            "rsync -ai '{}/git/' '{}/rsynced/'",
            src.path().display(),
            mnt.display()
        ),
        120,
    );
    assert!(
        again.lines().all(|l| l.starts_with(".d")),
        "second rsync changed files:\n{again}"
    );
    assert_eq!(
        tree_sums(&r.root().join("rsynced")),
        tree_sums(&src.path().join("git"))
    );
    sh_ok(
        &format!(
            "git clone -q '{}/repo' '{}/clone' && cd '{}/clone' && git fsck --no-progress && git status --short",
            src.path().display(),
            mnt.display(),
            mnt.display()
        ),
        120,
    );
    let log = sh_ok(
        &format!("cd '{}/clone' && git log --format=%s", r.root().display()),
        30,
    );
    assert_eq!(log, "two\none\n");
    let co = |d: &Path| {
        sh_ok(
            &format!(
                "cd '{}' && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum",
                d.display()
            ),
            60,
        )
    };
    assert_eq!(co(&r.root().join("clone")), co(&src.path().join("repo")));
}

/// 96 MiB of random bytes in `dir/name`; its sha256.
fn random_file(dir: &Path, name: &str) -> String {
    sh_ok(
        &format!(
            "head -c 100663296 /dev/urandom > '{0}/{name}' && sha256sum < '{0}/{name}'",
            dir.display()
        ),
        60,
    )
}

#[test]
fn a_connection_cut_mid_copy_and_mid_listing_reconnects_with_the_right_bytes() {
    let r = Remote::start("cut");
    let proxy = DelayProxy::start(r.sshd.port(), Duration::from_millis(2)).unwrap();
    let _g = r.mount(proxy.port(), "timeout=20", &["--no-recovery"]);
    let local = common::scratch("sftp-cut-local");
    let sum = random_file(local.path(), "big");
    // A tree to list while the connection drops.
    sh_ok(
        &format!(
            "cd '{}' && for d in $(seq 1 20); do mkdir d$d; for f in $(seq 1 100); do : > d$d/f$f; done; done",
            r.root().display()
        ),
        60,
    );
    let mnt = r.mnt();
    let copy = {
        let (src, dst) = (local.path().join("big"), mnt.join("big"));
        std::thread::spawn(move || {
            sh(
                &format!("cp '{}' '{}' && sync", src.display(), dst.display()),
                120,
            )
        })
    };
    let list = {
        let mnt = mnt.clone();
        std::thread::spawn(move || {
            let mut n = Vec::new();
            for _ in 0..5 {
                n.push(sh(
                    &format!("ls -lR '{}' | grep -c ' f[0-9]'", mnt.display()),
                    60,
                ));
            }
            n
        })
    };
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(400));
        proxy.cut();
    }
    let out = copy.join().unwrap();
    assert!(
        out.status.success(),
        "copy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for out in list.join().unwrap() {
        assert!(
            out.status.success(),
            "ls -lR: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2000");
    }
    assert!(proxy.accepted() > 1, "the connection was never cut");
    // On the server, and read back through the mount.
    assert_eq!(
        sh_ok(&format!("sha256sum < '{}/big'", r.root().display()), 60),
        sum
    );
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches", 30);
    assert_eq!(
        sh_ok(&format!("sha256sum < '{}/big'", mnt.display()), 60),
        sum
    );
}

#[test]
fn a_server_gone_longer_than_the_timeout_fails_reads_in_time_and_unmounts() {
    let r = Remote::start("gone");
    let proxy = DelayProxy::start(r.sshd.port(), Duration::ZERO).unwrap();
    std::fs::write(r.root().join("f"), vec![7u8; 1 << 20]).unwrap();
    let g = r.mount(proxy.port(), "timeout=3", &["--no-recovery"]);
    let mnt = r.mnt();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap().len(), 1 << 20);
    // Gone without a word: nothing passes, new connections hang.
    proxy.silence(true);
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches", 30);
    let t = Instant::now();
    let out = sh(&format!("cat '{}/f' > /dev/null", mnt.display()), 30);
    let took = t.elapsed();
    assert!(
        !out.status.success(),
        "a read succeeded with the server gone"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Input/output error"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(8),
        "the read failed after {took:?}, timeout 3 s"
    );
    // Refusing outright is as good as gone.
    proxy.silence(false);
    proxy.refuse(true);
    proxy.cut();
    let t = Instant::now();
    let out = sh(&format!("stat '{}/other'", mnt.display()), 30);
    assert!(!out.status.success());
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    // Back: the mount serves again by itself.
    proxy.refuse(false);
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches", 30);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::fs::read(mnt.join("f")).is_ok_and(|d| d.len() == 1 << 20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no recovery after the server came back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // And unmounting works whatever state the link is in.
    proxy.silence(true);
    let st = Command::new("timeout")
        .args(["20", BIN, "umount"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!is_mounted(&mnt));
    drop(g);
}

#[test]
fn kill_and_upgrade_of_the_server_during_a_copy_and_a_listing_fail_nothing() {
    let r = Remote::start("replace");
    let g = r.mount(r.sshd.port(), "", &[]);
    let local = common::scratch("sftp-replace-local");
    let sum = random_file(local.path(), "big");
    sh_ok(
        &format!(
            "cd '{}' && for d in $(seq 1 10); do mkdir d$d; for f in $(seq 1 100); do : > d$d/f$f; done; done",
            r.root().display()
        ),
        60,
    );
    let mnt = r.mnt();
    let copies = {
        let (src, mnt) = (local.path().join("big"), mnt.clone());
        std::thread::spawn(move || {
            (0..3)
                .map(|i| {
                    sh(
                        &format!("cp '{}' '{}/big{i}'", src.display(), mnt.display()),
                        180,
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    let lists = {
        let mnt = mnt.clone();
        std::thread::spawn(move || {
            (0..10)
                .map(|_| {
                    sh(
                        &format!("ls -lR '{}' | grep -c ' f[0-9]'", mnt.display()),
                        60,
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    let mut replaced = 0;
    while !copies.is_finished() {
        std::thread::sleep(Duration::from_millis(700));
        if replaced % 2 == 0 {
            let s = snapshot(&mnt);
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(s.pid as i32).unwrap(),
                rustix::process::Signal::KILL,
            )
            .unwrap();
            // Wait for the next one, so kills stay under the crash limit.
            let deadline = Instant::now() + Duration::from_secs(20);
            while try_snapshot(&mnt).is_none_or(|n| n.pid == s.pid) {
                assert!(Instant::now() < deadline, "no server after a kill");
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            let out = Command::new(BIN).arg("upgrade").arg(&mnt).output().unwrap();
            assert!(
                out.status.success(),
                "upgrade: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        replaced += 1;
    }
    for (i, out) in copies.join().unwrap().into_iter().enumerate() {
        assert!(
            out.status.success(),
            "copy {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            sh_ok(&format!("sha256sum < '{}/big{i}'", r.root().display()), 60),
            sum,
            "copy {i}"
        );
    }
    for out in lists.join().unwrap() {
        assert!(
            out.status.success(),
            "ls -lR: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1000");
    }
    assert!(replaced >= 3, "only {replaced} replacements");
    let rec = snapshot(&mnt).recovery.expect("supervised");
    assert!(rec.generation as usize > replaced / 2, "{rec:?}");
    drop(g);
}

/// `fusebox mount` that must fail: its message and that nothing stays
/// mounted or running.
fn refused(r: &Remote, port: u16, extra: &str, want: &str) {
    let out = r.mount_cmd(port, extra, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted with {extra:?}");
    assert!(err.contains(want), "{extra:?}: {err:?} lacks {want:?}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err:?}");
    assert!(!is_mounted(&r.mnt()), "{extra:?} left a mount");
}

#[test]
fn bad_input_is_one_clear_line_and_no_mount() {
    let r = Remote::start("bad");
    let port = r.sshd.port();
    let known = r.sshd.dir().join("known_hosts");
    let with = |key: &Path, known: &Path| {
        let mut c = Command::new(BIN);
        c.args(["mount", "sftpfs"])
            .arg(r.spec())
            .arg(r.mnt())
            .arg("-o")
            .arg(r.sshd.ssh_options_with(port, key, known));
        let out = c.output().unwrap();
        assert!(!out.status.success(), "mounted");
        assert!(!is_mounted(&r.mnt()));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(err.trim().lines().count(), 1, "not one line: {err:?}");
        err
    };
    // A key the server does not know.
    let other = r.dir.path().join("otherkey");
    sh_ok(
        &format!("ssh-keygen -q -t ed25519 -N '' -f '{}'", other.display()),
        30,
    );
    let err = with(&other, &known);
    assert!(err.contains("Permission denied"), "{err}");
    // An unknown host key, checked strictly.
    let err = with(&r.sshd.key(), &r.sshd.dir().join("empty_known_hosts"));
    assert!(err.contains("Host key verification failed"), "{err}");
    // Nothing listening.
    let closed = fusebox_bench::remote::free_port().unwrap();
    let mut c = Command::new(BIN);
    c.args(["mount", "sftpfs"])
        .arg(r.spec())
        .arg(r.mnt())
        .arg("-o")
        .arg(format!("Port={closed},{}", r.sshd.ssh_options(port)));
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Connection refused"),
        "{err}"
    );
    assert!(!is_mounted(&r.mnt()));
    // A remote directory that is not there.
    let mut c = Command::new(BIN);
    c.args(["mount", "sftpfs", "root@127.0.0.1:/nonexistent/dir"])
        .arg(r.mnt())
        .arg("-o")
        .arg(r.sshd.ssh_options(port));
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no such directory"),
        "{err}"
    );
    assert!(!is_mounted(&r.mnt()));
    // sshfs options sftpfs does not have.
    refused(
        &r,
        port,
        "password_stdin",
        "sshfs has this option, sftpfs does not",
    );
    refused(
        &r,
        port,
        "workaround=truncate",
        "sshfs has this option, sftpfs does not",
    );
    refused(&r, port, "frobnicate", "unknown option");
}

/// /dev/fuse open to every user while it lives (as on a desktop
/// distribution), its mode restored after.
struct FuseDeviceOpen {
    mode: u32,
}

impl FuseDeviceOpen {
    fn new() -> FuseDeviceOpen {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
        FuseDeviceOpen { mode }
    }
}

impl Drop for FuseDeviceOpen {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.mode));
    }
}

/// `args` run as nobody (uid and gid 65534, no other groups).
fn as_nobody(args: &[&str]) -> Output {
    Command::new("timeout")
        .args([
            "120",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["env", "-u", "XDG_RUNTIME_DIR", "HOME=/tmp"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn nobody_ok(args: &[&str]) -> String {
    let out = as_nobody(args);
    assert!(
        out.status.success(),
        "{args:?} as nobody: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_ordinary_user_mounts_through_fusermount3_with_stats_upgrade_and_umount() {
    let _dev = FuseDeviceOpen::new();
    let r = Remote::start("user");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(r.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(r.mnt(), Some(65534), Some(65534)).unwrap();
    let key = r.sshd.key_for(65534, 65534).unwrap();
    // The server's login user (root) shows as the mounting user, as
    // sshfs users ask with idmap=user.
    let opts = format!(
        "idmap=user,{}",
        r.sshd
            .ssh_options_with(r.sshd.port(), &key, &r.sshd.dir().join("known_hosts"))
    );
    let mnt = r.mnt();
    let mnt_s = mnt.to_str().unwrap();
    let out = nobody_ok(&[BIN, "mount", "sftpfs", &r.spec(), mnt_s, "-o", &opts]);
    let daemon: u32 = out.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let g = Guard {
        mnt: mnt.clone(),
        daemon,
    };
    // The daemon is the user's, and so is the mount.
    let status = std::fs::read_to_string(format!("/proc/{daemon}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "{status}"
    );
    let m = fusebox::mount::fuse_mount_at(&std::fs::canonicalize(&mnt).unwrap()).unwrap();
    assert_eq!(m.user_id, Some(65534));
    std::fs::write(r.root().join("hello"), "from the server\n").unwrap();
    assert_eq!(
        nobody_ok(&["cat", &format!("{mnt_s}/hello")]),
        "from the server\n"
    );
    nobody_ok(&[
        "sh",
        "-c",
        &format!("cp -a /usr/share/doc/fuse3 {mnt_s}/doc && ls -lR {mnt_s} > /dev/null"),
    ]);
    assert_eq!(
        tree_sums(&r.root().join("doc")),
        tree_sums(Path::new("/usr/share/doc/fuse3"))
    );
    // Statistics and the supervisor's control socket, in the user's own
    // runtime directory; root finds them too.
    let stats = nobody_ok(&[BIN, "stats", mnt_s]);
    assert!(stats.contains("LOOKUP"), "{stats}");
    assert!(snapshot(&mnt).recovery.is_some());
    nobody_ok(&[BIN, "upgrade", mnt_s]);
    assert_eq!(
        nobody_ok(&["cat", &format!("{mnt_s}/hello")]),
        "from the server\n"
    );
    assert!(snapshot(&mnt).recovery.unwrap().generation >= 2);
    nobody_ok(&[BIN, "umount", mnt_s]);
    assert!(!is_mounted(&mnt));
    drop(g);
}
