//! Crash recovery end to end: `fusebox mount stackfs` runs under a
//! supervisor; its server is killed with SIGKILL while applications use
//! the mount, and they must see no error.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod common;
use common::{alive, is_mounted, snapshot, try_snapshot, MountGuard, BIN};

fn scratch(tag: &str) -> tempfile::TempDir {
    common::scratch(&format!("rec-{tag}"))
}

/// Mount stackfs of `src` at `mnt` in the background (supervised by
/// default); returns the supervisor's pid.
fn mount_supervised(src: &Path, mnt: &Path, extra: &[&str]) -> MountGuard {
    mount_supervised_with(src, mnt, extra, None)
}

/// `mount_supervised` with a failpoint armed in the first server.
fn mount_supervised_with(
    src: &Path,
    mnt: &Path,
    extra: &[&str],
    failpoint: Option<String>,
) -> MountGuard {
    mount_fs("stackfs", Some(src), mnt, extra, failpoint)
}

/// Mount filesystem `fs` (of `src`, for the passthrough ones) at `mnt` in
/// the background, supervised unless `extra` says otherwise.
fn mount_fs(
    fs: &str,
    src: Option<&Path>,
    mnt: &Path,
    extra: &[&str],
    failpoint: Option<String>,
) -> MountGuard {
    let mut cmd = Command::new(BIN);
    cmd.args(["mount", fs]).args(src).arg(mnt).args(extra);
    // Daemon logs for a failure to be explained: FUSEBOX_TEST_DAEMON_LOGS=DIR.
    if let Some(dir) = std::env::var_os("FUSEBOX_TEST_DAEMON_LOGS") {
        let name = mnt.parent().and_then(|p| p.file_name()).unwrap_or_default();
        cmd.arg("--log-file")
            .arg(Path::new(&dir).join(name).with_extension("log"))
            .env("RUST_LOG", "info");
    }
    if let Some(f) = failpoint {
        cmd.env(fusebox::recovery::failpoint::FAILPOINT_ENV, f);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let supervisor: u32 = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    assert!(is_mounted(mnt));
    MountGuard {
        mnt: mnt.to_path_buf(),
        daemon: supervisor,
    }
}

/// SIGKILL the serving process and wait until the next one serves.
fn kill_server(mnt: &Path) -> (u32, u64) {
    let before = snapshot(mnt);
    let rec = before
        .recovery
        .clone()
        .expect("a supervised mount reports recovery");
    sigkill(before.pid);
    poll_until("a new server after a kill", || {
        let s = try_snapshot(mnt)?;
        let generation = s.recovery.as_ref()?.generation;
        (s.pid != before.pid && generation > rec.generation).then_some((s.pid, generation))
    })
}

fn sigkill(pid: u32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

/// Ask `f` every 20 ms until it has an answer (20 s at most).
fn poll_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "waited 20 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
        if let Some(t) = f() {
            return t;
        }
    }
}

/// SIGKILL the serving process when the supervisor will not start another;
/// returns the status the mount then reports.
fn kill_for_good(mnt: &Path) -> String {
    sigkill(snapshot(mnt).pid);
    poll_until("a status after the last death", || {
        try_snapshot(mnt)
            .and_then(|s| s.recovery)
            .map(|r| r.status)
            .filter(|s| !s.is_empty())
    })
}

/// `fusebox umount` works, and the mount is gone.
fn umount(mnt: &Path) {
    let out = Command::new(BIN).arg("umount").arg(mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(mnt));
}

/// A stat of `path` fails at once with EIO (no server will answer).
fn assert_fails_eio(path: &Path) {
    let p = path.to_path_buf();
    let e = within(Duration::from_secs(10), move || {
        std::fs::metadata(p).unwrap_err()
    });
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::IO.raw_os_error()),
        "{e}"
    );
}

/// `fusebox upgrade` (to `binary`, if given); returns the new generation.
fn upgrade_server(mnt: &Path, binary: Option<&Path>) -> u64 {
    let before = snapshot(mnt).recovery.unwrap().generation;
    let mut cmd = Command::new(BIN);
    cmd.arg("upgrade").arg(mnt);
    if let Some(b) = binary {
        cmd.arg("--binary").arg(b);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "upgrade failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("upgraded: server generation"), "{text}");
    let after = snapshot(mnt).recovery.unwrap().generation;
    assert_eq!(after, before + 1);
    after
}

/// Run `f` on its own thread; fail (and let the guards abort the mount)
/// if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).expect("the application hung")
}

#[test]
fn killing_the_server_under_running_applications_fails_nothing() {
    kill_under_applications(Transport::Classic, &[], 1);
}

/// Over io_uring with one entry per queue and four applications, most
/// requests wait in the kernel for a free entry when the server dies;
/// others sit in entries, being served or answered and not yet committed.
#[test]
fn killing_the_server_under_running_applications_fails_nothing_over_io_uring() {
    kill_under_applications(Transport::Uring, &["--queue-depth", "1"], 4);
}

fn kill_under_applications(transport: Transport, extra: &[&str], apps: usize) {
    if !transport.available() {
        return;
    }
    let dir = scratch("kill");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let args: Vec<&str> = transport.args().iter().chain(extra).copied().collect();
    let guard = mount_supervised(&src, &mnt, &args);
    assert!(snapshot(&mnt).transport.starts_with(transport.name()));
    std::fs::create_dir(mnt.join("d")).unwrap();
    std::fs::write(mnt.join("d/notes"), b"line 1\n").unwrap();

    // Held across every crash: a file open for writing, one for reading,
    // a directory handle mid-listing.
    let mut held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(mnt.join("d/data"))
        .unwrap();
    let reader = std::fs::File::open(mnt.join("d/notes")).unwrap();
    for i in 0..50 {
        std::fs::write(mnt.join(format!("d/f{i}")), i.to_string()).unwrap();
    }
    let mut listing = std::fs::read_dir(mnt.join("d")).unwrap();
    let first = listing.next().unwrap().unwrap();

    // Applications that never stop: writes, stats, lists, creates.
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..apps)
        .map(|app| {
            let (mnt, stop) = (mnt.clone(), stop.clone());
            std::thread::spawn(move || -> Result<u64, String> {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(mnt.join(format!("d/busy{app}")))
                    .map_err(|e| format!("open: {e}"))?;
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let block = [(n % 251) as u8; 4096];
                    f.write_all_at(&block, (n % 256) * 4096)
                        .map_err(|e| format!("write {n}: {e}"))?;
                    std::fs::metadata(mnt.join(format!("d/f{}", n % 50)))
                        .map_err(|e| format!("stat {n}: {e}"))?;
                    if n.is_multiple_of(10) {
                        std::fs::read_dir(mnt.join("d"))
                            .map_err(|e| format!("readdir {n}: {e}"))?
                            .count();
                        // Requests that must not be applied twice: an O_EXCL
                        // create, a rename, an unlink of what was made.
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(mnt.join(format!("d/new{app}-{n}")))
                            .and_then(|mut f| f.write_all(b"x"))
                            .map_err(|e| format!("exclusive create {n}: {e}"))?;
                        std::fs::rename(
                            mnt.join(format!("d/new{app}-{n}")),
                            mnt.join(format!("d/kept{app}-{n}")),
                        )
                        .map_err(|e| format!("rename {n}: {e}"))?;
                        if n >= 20 {
                            std::fs::remove_file(mnt.join(format!("d/kept{app}-{}", n - 20)))
                                .map_err(|e| format!("unlink {n}: {e}"))?;
                        }
                    }
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();

    let mut generations = Vec::new();
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        let (_, g) = kill_server(&mnt);
        generations.push(g);
        // The held files go on working through the new server.
        let mnt2 = mnt.clone();
        let mut h = held.try_clone().unwrap();
        let mut r = reader.try_clone().unwrap();
        within(Duration::from_secs(30), move || {
            h.write_all(format!("round {round}\n").as_bytes()).unwrap();
            r.seek(SeekFrom::Start(0)).unwrap();
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            assert_eq!(s, "line 1\n");
            std::fs::metadata(mnt2.join("d/data")).unwrap();
        });
    }
    stop.store(true, Ordering::Release);
    for worker in workers {
        let ops = within(Duration::from_secs(60), move || worker.join().unwrap())
            .expect("an application saw an error across server crashes");
        assert!(ops > 0);
    }
    assert_eq!(generations, vec![2, 3, 4]);

    // What was written through the held fd is all there, in order.
    held.flush().unwrap();
    let text = std::fs::read_to_string(src.join("d/data")).unwrap();
    assert_eq!(text, "round 0\nround 1\nround 2\n");
    // The listing started before the crashes finishes after them.
    let rest: Vec<_> = listing.map(|e| e.unwrap().file_name()).collect();
    assert!(
        rest.len() >= 50,
        "{} entries after {:?}",
        rest.len(),
        first.file_name()
    );
    // The mount shows what the source holds.
    let mut seen: Vec<_> = std::fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut native: Vec<_> = std::fs::read_dir(src.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    seen.sort();
    native.sort();
    assert_eq!(seen, native);
    let rec = snapshot(&mnt).recovery.unwrap();
    assert_eq!((rec.generation, rec.restarts), (4, 3), "{rec:?}");
    assert!(rec.last_pause_us > 0 && rec.status.is_empty(), "{rec:?}");
    drop(held);
    drop(guard);
    assert!(!is_mounted(&mnt));
}

#[test]
fn a_crash_loop_stops_at_the_limit_and_the_mount_still_unmounts() {
    crash_loop(Transport::Classic);
}

/// Over io_uring the supervisor answers what reaches the rings it holds.
#[test]
fn a_crash_loop_over_io_uring_stops_at_the_limit_and_the_mount_still_unmounts() {
    crash_loop(Transport::Uring);
}

fn crash_loop(transport: Transport) {
    if !transport.available() {
        return;
    }
    let dir = scratch("loop");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    // Every death counts, however slow this host is to kill.
    let args: Vec<&str> = [
        "--max-restarts",
        "2",
        "--restart-window",
        "60s",
        "--settled-after",
        "60s",
    ]
    .iter()
    .chain(transport.args())
    .copied()
    .collect();
    let guard = mount_supervised(&src, &mnt, &args);
    assert!(snapshot(&mnt).transport.starts_with(transport.name()));
    kill_server(&mnt);
    kill_server(&mnt);
    // The third death is past the limit: no new server.
    let status = kill_for_good(&mnt);
    assert!(
        status.contains("not serving") && status.contains("3 times"),
        "{status}"
    );
    // Requests now fail at once, with EIO, rather than hang: from every
    // CPU (over io_uring each CPU's requests go to its own queue).
    for cpu in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
        let f = mnt.join("f");
        within(Duration::from_secs(20), move || {
            let mut set = rustix::thread::CpuSet::new();
            set.set(cpu);
            let _ = rustix::thread::sched_setaffinity(None, &set);
            assert_fails_eio(&f);
            let e = std::fs::read_dir(f.parent().unwrap()).map(|d| d.count());
            assert_eq!(
                e.err().and_then(|e| e.raw_os_error()),
                Some(rustix::io::Errno::IO.raw_os_error())
            );
        });
    }
    // So does an upgrade: nothing is left to upgrade.
    let out = Command::new("timeout")
        .args(["20", BIN, "upgrade"])
        .arg(&mnt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() != Some(124) && !out.status.success() && said.contains("not serving"),
        "{:?}: {said}",
        out.status
    );
    let text = String::from_utf8_lossy(
        &Command::new(BIN)
            .arg("stats")
            .arg(&mnt)
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(text.contains("not serving"), "{text}");
    // And a plain unmount works; the supervisor then leaves.
    umount(&mnt);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(guard.daemon) {
        assert!(
            Instant::now() < deadline,
            "the supervisor outlived its mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Servers killed after they served a while are no crash loop: the
/// mount outlives more kills than --max-restarts allows a loop.
#[test]
fn servers_killed_after_they_settled_are_restarted_past_the_limit() {
    let dir = scratch("settled");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let guard = mount_supervised(
        &src,
        &mnt,
        &[
            "--max-restarts",
            "2",
            "--restart-window",
            "60s",
            "--settled-after",
            "100ms",
        ],
    );
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(300));
        kill_server(&mnt);
    }
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"x");
    let rec = snapshot(&mnt).recovery.expect("supervised");
    assert!(rec.status.is_empty() && rec.restarts >= 5, "{rec:?}");
    drop(guard);
    assert!(!is_mounted(&mnt));
}

#[test]
fn no_recovery_mounts_serve_without_a_supervisor_and_io_uring_mounts_with_one() {
    let dir = scratch("off");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_supervised(&src, &mnt, &["--no-recovery"]);
    let s = snapshot(&mnt);
    assert!(s.recovery.is_none(), "{s:?}");
    assert_eq!(s.pid, guard.daemon, "the daemon serves itself");
    drop(guard);
    assert!(!is_mounted(&mnt));
    // io_uring: supervised over the rings the supervisor holds, unless
    // told not to be.
    if uring_available() {
        let guard = mount_supervised(&src, &mnt, &["--transport", "uring"]);
        let s = snapshot(&mnt);
        assert!(s.transport.starts_with("uring"), "{s:?}");
        assert!(s.recovery.is_some(), "{s:?}");
        assert_ne!(s.pid, guard.daemon, "a server serves, not the supervisor");
        drop(guard);
        assert!(!is_mounted(&mnt));
        let guard = mount_supervised(&src, &mnt, &["--transport", "uring", "--no-recovery"]);
        let s = snapshot(&mnt);
        assert!(s.transport.starts_with("uring"), "{s:?}");
        assert!(s.recovery.is_none(), "{s:?}");
        assert_eq!(s.pid, guard.daemon, "the daemon serves itself");
        drop(guard);
        assert!(!is_mounted(&mnt));
    } else {
        fusebox_test_support::skipped(Some("the io_uring half"), "enable_uring is off");
    }
}

/// One non-idempotent request, and what it must have done.
struct Case {
    op: &'static str,
    /// Native preparation in the source directory.
    prepare: fn(&Path),
    /// The application's call through the mount; must succeed.
    act: fn(&Path) -> std::io::Result<()>,
    /// The source directory afterwards.
    check: fn(&Path),
}

fn cases() -> Vec<Case> {
    use std::os::unix::fs::MetadataExt;
    vec![
        Case {
            op: "CREATE",
            prepare: |_| {},
            act: |m| {
                // O_EXCL: a create applied twice would fail EEXIST.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(m.join("new"))?;
                f.write_all(b"made once")
            },
            check: |s| assert_eq!(std::fs::read(s.join("new")).unwrap(), b"made once"),
        },
        Case {
            op: "MKNOD",
            prepare: |_| {},
            act: |m| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    m.join("fifo"),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o644),
                    0,
                )
                .map_err(Into::into)
            },
            check: |s| {
                use std::os::unix::fs::FileTypeExt;
                assert!(std::fs::symlink_metadata(s.join("fifo"))
                    .unwrap()
                    .file_type()
                    .is_fifo())
            },
        },
        Case {
            op: "MKDIR",
            prepare: |_| {},
            act: |m| std::fs::create_dir(m.join("dir")),
            check: |s| assert!(s.join("dir").is_dir()),
        },
        Case {
            op: "SYMLINK",
            prepare: |_| {},
            act: |m| std::os::unix::fs::symlink("target", m.join("link")),
            check: |s| {
                assert_eq!(
                    std::fs::read_link(s.join("link")).unwrap(),
                    Path::new("target")
                )
            },
        },
        Case {
            op: "LINK",
            prepare: |s| std::fs::write(s.join("a"), b"A").unwrap(),
            act: |m| std::fs::hard_link(m.join("a"), m.join("b")),
            check: |s| assert_eq!(std::fs::metadata(s.join("b")).unwrap().nlink(), 2),
        },
        Case {
            op: "UNLINK",
            prepare: |s| std::fs::write(s.join("a"), b"A").unwrap(),
            act: |m| std::fs::remove_file(m.join("a")),
            check: |s| assert!(!s.join("a").exists()),
        },
        Case {
            op: "RMDIR",
            prepare: |s| std::fs::create_dir(s.join("d")).unwrap(),
            act: |m| std::fs::remove_dir(m.join("d")),
            check: |s| assert!(!s.join("d").exists()),
        },
        Case {
            op: "RENAME",
            prepare: |s| std::fs::write(s.join("a"), b"A").unwrap(),
            act: |m| std::fs::rename(m.join("a"), m.join("c")),
            check: |s| {
                assert!(!s.join("a").exists());
                assert_eq!(std::fs::read(s.join("c")).unwrap(), b"A");
            },
        },
        Case {
            op: "SETATTR",
            prepare: |s| std::fs::write(s.join("t"), [7u8; 100]).unwrap(),
            act: |m| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(m.join("t"))?
                    .set_len(50)
            },
            check: |s| assert_eq!(std::fs::metadata(s.join("t")).unwrap().len(), 50),
        },
        Case {
            op: "WRITE",
            prepare: |s| std::fs::write(s.join("log"), b"1\n").unwrap(),
            act: |m| {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(m.join("log"))?;
                f.write_all(b"2\n")
            },
            // Appended exactly once.
            check: |s| assert_eq!(std::fs::read(s.join("log")).unwrap(), b"1\n2\n"),
        },
    ]
}

#[test]
fn a_crash_at_any_point_of_a_non_idempotent_request_gives_its_one_result_stackfs() {
    crash_at_every_point("stackfs", Transport::Classic);
}

#[test]
fn a_crash_at_any_point_of_a_non_idempotent_request_gives_its_one_result_pathfs() {
    crash_at_every_point("pathfs", Transport::Classic);
}

#[test]
fn a_crash_at_any_point_of_a_non_idempotent_request_gives_its_one_result_over_io_uring_stackfs() {
    crash_at_every_point("stackfs", Transport::Uring);
}

#[test]
fn a_crash_at_any_point_of_a_non_idempotent_request_gives_its_one_result_over_io_uring_pathfs() {
    crash_at_every_point("pathfs", Transport::Uring);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Classic,
    Uring,
}

impl Transport {
    fn args(self) -> &'static [&'static str] {
        match self {
            Transport::Classic => &["--transport", "classic"],
            Transport::Uring => &["--transport", "uring"],
        }
    }

    /// False (and the test reported skipped) where this kernel cannot
    /// serve it.
    fn available(self) -> bool {
        if self == Transport::Uring && !uring_available() {
            fusebox_test_support::skipped(None, "enable_uring is off");
            return false;
        }
        true
    }

    /// The name `fusebox stats` gives it.
    fn name(self) -> &'static str {
        match self {
            Transport::Classic => "classic",
            Transport::Uring => "uring",
        }
    }
}

/// Whether FUSE-over-io_uring is on (the README's test command turns it on).
fn uring_available() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y")
}

fn crash_at_every_point(fs: &str, transport: Transport) {
    if !transport.available() {
        return;
    }
    let mut points = vec!["after-read", "after-apply", "after-journal", "before-reply"];
    if transport == Transport::Uring {
        // An answer half-written over its request in the ring entry, and
        // one written whole but not committed.
        points.extend(["half-answered", "answered-uncommitted"]);
    }
    for case in cases() {
        for &point in &points {
            let dir = scratch("fail");
            let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
            std::fs::create_dir(&src).unwrap();
            std::fs::create_dir(&mnt).unwrap();
            (case.prepare)(&src);
            let failpoint = Some(format!("{point}:{}", case.op));
            let guard = mount_fs(fs, Some(&src), &mnt, transport.args(), failpoint);
            let (m, act) = (mnt.clone(), case.act);
            let result = within(Duration::from_secs(30), move || act(&m));
            let what = format!("{fs} over {transport:?}: {} killed {point}", case.op);
            assert!(result.is_ok(), "{what}: the application saw {result:?}");
            (case.check)(&src);
            let rec = snapshot(&mnt).recovery.unwrap();
            assert_eq!(
                rec.restarts, 1,
                "{what}: the failpoint did not fire: {rec:?}"
            );
            // Killed before its journal record, or a truncate killed before
            // its outcome was recorded: simply run again. Answered in the
            // ring entry but not committed: the next server commits that
            // answer, nothing runs again.
            let rerun = point == "after-read" || (case.op == "SETATTR" && point == "after-apply");
            let want = if rerun || point == "answered-uncommitted" {
                0
            } else {
                1
            };
            assert_eq!(rec.replays, want, "{what}: replays: {rec:?}");
            assert!(
                snapshot(&mnt).transport.starts_with(transport.name()),
                "{what}: served over {}",
                snapshot(&mnt).transport
            );
            drop(guard);
        }
    }
}

/// Replace the serving process every `every` until `stop`, by SIGKILL and
/// by `fusebox upgrade` in turn; returns (kills, upgrades).
fn keep_replacing(
    mnt: PathBuf,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u32, u32)> {
    std::thread::spawn(move || {
        let (mut kills, mut upgrades) = (0, 0);
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(every);
            if (kills + upgrades) % 2 == 1 {
                let out = Command::new(BIN).arg("upgrade").arg(&mnt).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                upgrades += 1;
            } else if let Some(s) = try_snapshot(&mnt).filter(|s| s.recovery.is_some()) {
                if rustix::process::kill_process(
                    rustix::process::Pid::from_raw(s.pid as i32).unwrap(),
                    rustix::process::Signal::KILL,
                )
                .is_ok()
                {
                    kills += 1;
                }
            }
        }
        (kills, upgrades)
    })
}

#[test]
fn fio_verify_passes_while_the_server_is_killed_and_upgraded_again_and_again() {
    fio_verify_through_replacements("stackfs", Transport::Classic);
}

#[test]
fn fio_verify_passes_while_the_server_is_killed_and_upgraded_over_io_uring_stackfs() {
    fio_verify_through_replacements("stackfs", Transport::Uring);
}

#[test]
fn fio_verify_passes_while_the_server_is_killed_and_upgraded_over_io_uring_pathfs() {
    fio_verify_through_replacements("pathfs", Transport::Uring);
}

fn fio_verify_through_replacements(fs: &str, transport: Transport) {
    if !transport.available() {
        return;
    }
    let dir = scratch("fio");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let args: Vec<&str> = ["--max-restarts", "100000"]
        .iter()
        .chain(transport.args())
        .copied()
        .collect();
    let guard = mount_fs(fs, Some(&src), &mnt, &args, None);
    assert!(snapshot(&mnt).transport.starts_with(transport.name()));
    let stop = Arc::new(AtomicBool::new(false));
    let replacer = keep_replacing(mnt.clone(), Duration::from_millis(150), stop.clone());
    // Random 4 KiB writes by 4 jobs, then every block read back and its
    // crc32c checked; any I/O error or mismatch fails fio.
    let m = mnt.clone();
    let out = within(Duration::from_secs(120), move || {
        Command::new("fio")
            .args([
                "--name=verify",
                "--rw=randwrite",
                "--bs=4k",
                "--size=48M",
                "--numjobs=4",
                "--verify=crc32c",
                // No verify-state files left in the working directory.
                "--verify_state_save=0",
                "--do_verify=1",
                "--verify_fatal=1",
                "--group_reporting",
            ])
            .arg(format!("--directory={}", m.display()))
            .output()
            .expect("fio (scripts/setup.sh installs it)")
    });
    stop.store(true, Ordering::Release);
    let (kills, upgrades) = replacer.join().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("err= 0"),
        "{fs} over {transport:?}: fio failed across {kills} kills and {upgrades} upgrades:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = snapshot(&mnt).recovery.unwrap();
    assert!(
        kills >= 2 && upgrades >= 2 && rec.restarts >= 2,
        "too few replacements to mean anything: {kills} kills, {upgrades} upgrades, {rec:?}"
    );
    drop(guard);
}

/// A shell working in `dir` that runs `commands` every 20 ms until a file
/// `stop` appears there, and exits 3 the first time they fail.
fn shell_in(dir: &Path, commands: &str) -> Reap {
    let script = format!("while [ ! -e stop ]; do {commands} || exit 3; sleep 0.02; done");
    Reap(
        Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir)
            .spawn()
            .unwrap(),
    )
}

/// Ends a child process however the test ends.
struct Reap(std::process::Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn tail_f_and_a_shell_inside_the_mount_live_through_alternating_upgrades_and_crashes_stackfs() {
    tail_and_shell_through_replacements("stackfs");
}

#[test]
fn tail_f_and_a_shell_inside_the_mount_live_through_alternating_upgrades_and_crashes_pathfs() {
    tail_and_shell_through_replacements("pathfs");
}

fn tail_and_shell_through_replacements(fs: &str) {
    use std::process::Stdio;
    let dir = scratch("tail");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_fs(fs, Some(&src), &mnt, &[], None);
    std::fs::create_dir(mnt.join("work")).unwrap();
    std::fs::write(mnt.join("work/log"), b"line 0\n").unwrap();
    let tail_out = dir.path().join("tail.out");
    let tail = Reap(
        Command::new("tail")
            .args(["-f", "-n", "+1", "log"])
            .current_dir(mnt.join("work"))
            .stdout(std::fs::File::create(&tail_out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // A shell whose working directory is inside the mount, using it.
    let mut shell = shell_in(&mnt.join("work"), "ls >/dev/null && cat log >/dev/null");
    // Another build of the binary to upgrade to (a copy is enough to be
    // another file the supervisor must start).
    let next = dir.path().join("fusebox-next");
    std::fs::copy(BIN, &next).unwrap();
    for round in 1..=6 {
        std::thread::sleep(Duration::from_millis(150));
        match round % 3 {
            0 => {
                kill_server(&mnt);
            }
            1 => {
                upgrade_server(&mnt, Some(&next));
            }
            _ => {
                upgrade_server(&mnt, None);
            }
        }
        let m = mnt.clone();
        within(Duration::from_secs(20), move || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(m.join("work/log"))
                .unwrap();
            writeln!(f, "line {round}").unwrap();
        });
        assert!(
            shell.0.try_wait().unwrap().is_none(),
            "the shell stopped after replacement {round}"
        );
    }
    std::fs::write(mnt.join("work/stop"), b"").unwrap();
    let status = within(Duration::from_secs(20), move || shell.0.wait().unwrap());
    assert!(status.success(), "the shell in the mount failed: {status}");
    // tail -f shows every line, once.
    let want: String = (0..=6).map(|i| format!("line {i}\n")).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = std::fs::read_to_string(&tail_out).unwrap();
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "tail -f shows {got:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(tail);
    let rec = snapshot(&mnt).recovery.unwrap();
    assert_eq!((rec.generation, rec.restarts), (7, 2), "{rec:?}");
    // An upgrade to something that is no server fails, says so, and the
    // server that was serving goes on.
    let out = Command::new(BIN)
        .args(["upgrade", "--binary", "/bin/false"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the old one goes on serving"), "{err}");
    let s = snapshot(&mnt);
    assert_eq!(s.recovery.unwrap().generation, 7);
    std::fs::metadata(mnt.join("work/log")).unwrap();
    drop(guard);
}

#[test]
fn statistics_carry_over_to_the_next_server() {
    let dir = scratch("stats");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_supervised(&src, &mnt, &[]);
    let creates = |from: u32, to: u32| {
        for i in from..to {
            std::fs::write(mnt.join(format!("f{i}")), b"x").unwrap();
        }
    };
    creates(0, 20);
    upgrade_server(&mnt, None);
    creates(20, 30);
    upgrade_server(&mnt, None);
    // An upgrade pauses the server with every request counted.
    let s = snapshot(&mnt);
    assert_eq!(
        s.op("CREATE").map(|o| o.count),
        Some(30),
        "{:?}",
        s.op("CREATE")
    );
    drop(guard);
}

mod stress;

/// The fsstress-like model check (tests/stress) in 3 workers for `secs`
/// while the server is killed and upgraded in turn every 200 ms; then the
/// mount and its source must show the same tree.
fn stress_through_replacements(fs: &str, secs: u64, transport: Transport) {
    if !transport.available() {
        return;
    }
    let dir = scratch("stress");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let args: Vec<&str> = ["--max-restarts", "100000"]
        .iter()
        .chain(transport.args())
        .copied()
        .collect();
    let guard = mount_fs(fs, Some(&src), &mnt, &args, None);
    assert!(snapshot(&mnt).transport.starts_with(transport.name()));
    let stop = Arc::new(AtomicBool::new(false));
    let replacer = keep_replacing(mnt.clone(), Duration::from_millis(200), stop.clone());
    let seed0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let workers: Vec<_> = (0..3u64)
        .map(|w| {
            let (d, st) = (mnt.join(format!("w{w}")), stop.clone());
            std::thread::spawn(move || stress::worker(d, seed0.wrapping_add(w * 7919), st))
        })
        .collect();
    // The workers stop with the replacer; a stuck one is a hang, which
    // `within` turns into a failure (the guard then aborts the mount).
    let results = within(Duration::from_secs(secs + 60), move || {
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Release);
        let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        (results, replacer.join().unwrap())
    });
    let (results, (kills, upgrades)) = results;
    let mut ops = 0;
    for r in results {
        ops += r.unwrap_or_else(|e| {
            panic!("{fs} over {transport:?}: across {kills} kills and {upgrades} upgrades: {e}")
        });
    }
    let entries =
        stress::same_tree(&mnt, &src).unwrap_or_else(|e| panic!("{fs}: mount vs source: {e}"));
    let rec = snapshot(&mnt).recovery.unwrap();
    eprintln!(
        "{fs}: {ops} operations, {entries} entries compared, {kills} kills, {upgrades} upgrades, {} replays",
        rec.replays
    );
    assert!(
        kills >= 3 && upgrades >= 3,
        "too few replacements to mean anything: {kills} kills, {upgrades} upgrades"
    );
    drop(guard);
}

#[test]
fn fsstress_results_hold_while_the_server_is_killed_and_upgraded_stackfs() {
    stress_through_replacements("stackfs", 8, Transport::Classic);
}

#[test]
fn fsstress_results_hold_while_the_server_is_killed_and_upgraded_over_io_uring_stackfs() {
    stress_through_replacements("stackfs", 8, Transport::Uring);
}

#[test]
fn fsstress_results_hold_while_the_server_is_killed_and_upgraded_over_io_uring_pathfs() {
    stress_through_replacements("pathfs", 8, Transport::Uring);
}

#[test]
fn fsstress_results_hold_while_the_server_is_killed_and_upgraded_pathfs() {
    stress_through_replacements("pathfs", 8, Transport::Classic);
}

/// pathfs names nodes by parent and name: a directory renamed above a
/// process's working directory and its open files, then a crash, must
/// leave both where the kernel knows them.
#[test]
fn pathfs_keeps_working_directories_and_open_files_across_renames_and_crashes() {
    let dir = scratch("pathfs");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir_all(src.join("top/mid")).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(src.join("top/mid/data"), b"0123456789").unwrap();
    // Enough entries that a listing takes several getdents calls.
    std::fs::create_dir(src.join("many")).unwrap();
    let want: Vec<String> = (0..2000)
        .map(|i| format!("entry-with-a-longish-name-{i:05}"))
        .collect();
    for name in &want {
        std::fs::write(src.join("many").join(name), b"").unwrap();
    }
    let guard = mount_fs("pathfs", Some(&src), &mnt, &[], None);
    // A shell that lives in top/mid, whatever it is called by now.
    let mut shell = shell_in(
        &mnt.join("top/mid"),
        "cat data >/dev/null && ls >/dev/null && pwd >/dev/null",
    );
    let mut reader = std::fs::File::open(mnt.join("top/mid/data")).unwrap();
    let mut appender = std::fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("top/mid/data"))
        .unwrap();
    // An open directory, listed across the crashes.
    let mut listing = std::fs::read_dir(mnt.join("many")).unwrap();
    let mut names = vec![listing
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap()];
    let mut top = "top".to_string();
    for round in 1..=4 {
        // Rename the directory above the shell, then make a hard link and
        // a new file in it, then crash.
        let next = format!("top{round}");
        std::fs::rename(mnt.join(&top), mnt.join(&next)).unwrap();
        top = next;
        std::fs::hard_link(
            mnt.join(format!("{top}/mid/data")),
            mnt.join(format!("{top}/link{round}")),
        )
        .unwrap();
        kill_server(&mnt);
        // The renamed tree is where it should be, through the new server.
        let m = mnt.clone();
        let t = top.clone();
        let seen = within(Duration::from_secs(20), move || {
            std::fs::read(m.join(format!("{t}/link{round}"))).unwrap()
        });
        assert!(seen.starts_with(b"0123456789"), "round {round}: {seen:?}");
        // The open files still work: the appender appends, the reader
        // reads from where it was.
        writeln!(appender, "round {round}").unwrap();
        let mut buf = [0u8; 5];
        reader.read_exact(&mut buf).unwrap();
        assert!(
            shell.0.try_wait().unwrap().is_none(),
            "the shell stopped in round {round}"
        );
    }
    names.extend(listing.map(|e| e.unwrap().file_name().into_string().unwrap()));
    names.sort();
    assert!(
        names == want,
        "the listing did not go on across crashes: {} names",
        names.len()
    );
    reader.seek(SeekFrom::Start(0)).unwrap();
    let mut all = String::new();
    reader.read_to_string(&mut all).unwrap();
    assert_eq!(all, "0123456789round 1\nround 2\nround 3\nround 4\n");
    assert_eq!(
        std::fs::read_to_string(src.join(format!("{top}/mid/data"))).unwrap(),
        all
    );
    std::fs::write(mnt.join(format!("{top}/mid/stop")), b"").unwrap();
    let status = within(Duration::from_secs(20), move || shell.0.wait().unwrap());
    assert!(status.success(), "the shell in the mount failed: {status}");
    assert_eq!(snapshot(&mnt).recovery.unwrap().restarts, 4);
    drop(guard);
}

/// memfs keeps its files in its server: an upgrade carries them to the
/// next one (writers running meanwhile lose nothing), and a crash, which
/// cannot, ends in a clear error instead of an empty filesystem.
#[test]
fn memfs_upgrades_live_with_its_files_and_says_why_a_crash_ends_it() {
    memfs_upgrades(Transport::Classic);
}

#[test]
fn memfs_upgrades_over_io_uring_live_with_its_files_and_says_why_a_crash_ends_it() {
    memfs_upgrades(Transport::Uring);
}

fn memfs_upgrades(transport: Transport) {
    use std::os::unix::fs::MetadataExt;
    if !transport.available() {
        return;
    }
    let dir = scratch("memfs");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_fs("memfs", None, &mnt, transport.args(), None);
    assert!(snapshot(&mnt).transport.starts_with(transport.name()));
    std::fs::create_dir_all(mnt.join("a/b")).unwrap();
    let big: Vec<u8> = (0..(8u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(mnt.join("a/big"), &big).unwrap();
    {
        // A sparse file: a hole, then data at 1 GiB.
        let f = std::fs::File::create(mnt.join("a/sparse")).unwrap();
        f.write_all_at(b"far", 1 << 30).unwrap();
    }
    std::os::unix::fs::symlink("big", mnt.join("a/link")).unwrap();
    std::fs::hard_link(mnt.join("a/big"), mnt.join("a/b/hard")).unwrap();
    rustix::fs::setxattr(
        mnt.join("a/big"),
        "user.k",
        b"v",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let mut reader = std::fs::File::open(mnt.join("a/big")).unwrap();
    // A writer appending through every upgrade.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (m, stop) = (mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(m.join("a/b/log"))
                .unwrap();
            let mut n = 0u32;
            while !stop.load(Ordering::Acquire) {
                writeln!(f, "{n}").map_err(|e| format!("append {n}: {e}"))?;
                n += 1;
            }
            Ok::<u32, String>(n)
        })
    };
    let mut head = [0u8; 4096];
    for round in 1..=3 {
        std::thread::sleep(Duration::from_millis(100));
        upgrade_server(&mnt, None);
        reader.read_exact(&mut head).unwrap();
        let at = (round - 1) * 4096;
        assert_eq!(&head[..], &big[at..at + 4096], "round {round}");
    }
    stop.store(true, Ordering::Release);
    let lines = writer.join().unwrap().unwrap();
    let log = std::fs::read_to_string(mnt.join("a/b/log")).unwrap();
    let want: String = (0..lines).map(|i| format!("{i}\n")).collect();
    assert!(
        log == want,
        "the log lost or repeated lines across upgrades ({lines} written)"
    );
    assert_eq!(std::fs::read(mnt.join("a/b/hard")).unwrap(), big);
    assert_eq!(std::fs::metadata(mnt.join("a/big")).unwrap().nlink(), 2);
    assert_eq!(
        std::fs::read_link(mnt.join("a/link")).unwrap(),
        Path::new("big")
    );
    let mut v = [0u8; 8];
    let n = rustix::fs::getxattr(mnt.join("a/big"), "user.k", &mut v).unwrap();
    assert_eq!(&v[..n], b"v");
    let sparse = std::fs::metadata(mnt.join("a/sparse")).unwrap();
    assert_eq!((sparse.len(), sparse.blocks()), ((1 << 30) + 3, 8));
    let rec = snapshot(&mnt).recovery.unwrap();
    assert_eq!((rec.generation, rec.restarts), (4, 0), "{rec:?}");
    // A crash: nothing to restart from.
    let status = kill_for_good(&mnt);
    assert!(
        status.contains("kept its files in that process"),
        "{status}"
    );
    assert_fails_eio(&mnt.join("a"));
    drop(reader);
    umount(&mnt);
    drop(guard);
}

/// The stress model itself, against a native directory: what it predicts
/// is what Linux does (else the tests above would blame the server).
#[test]
fn fsstress_model_agrees_with_a_native_directory() {
    let dir = scratch("stress-native");
    let stop = Arc::new(AtomicBool::new(false));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let (d, st) = (dir.path().join("w"), stop.clone());
    let w = std::thread::spawn(move || stress::worker(d, seed, st));
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Release);
    let ops = w.join().unwrap().unwrap();
    assert!(ops > 1000, "{ops}");
}
