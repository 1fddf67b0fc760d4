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
use common::{is_mounted, snapshot, try_snapshot, BIN};

fn scratch(tag: &str) -> tempfile::TempDir {
    common::scratch(&format!("rec-{tag}"))
}

/// Aborts and unmounts on drop, even if the test panicked: a blocked
/// application thread then gets ENOTCONN instead of hanging the suite,
/// and the supervisor exits with its mount.
struct Guard {
    mnt: PathBuf,
    supervisor: u32,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new(BIN)
                .args(["umount", "--abort"])
                .arg(&self.mnt)
                .status();
        }
        // The supervisor leaves once its mount is gone; make sure.
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(self.supervisor) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(self.supervisor) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(self.supervisor as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purposes: its status is all that is left.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// Mount stackfs of `src` at `mnt` in the background (supervised by
/// default); returns the supervisor's pid.
fn mount_supervised(src: &Path, mnt: &Path, extra: &[&str]) -> Guard {
    let out = Command::new(BIN)
        .args(["mount", "stackfs"])
        .arg(src)
        .arg(mnt)
        .args(extra)
        .output()
        .unwrap();
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
    Guard {
        mnt: mnt.to_path_buf(),
        supervisor,
    }
}

/// SIGKILL the serving process and wait until the next one serves.
fn kill_server(mnt: &Path) -> (u32, u64) {
    let before = snapshot(mnt);
    let rec = before
        .recovery
        .clone()
        .expect("a supervised mount reports recovery");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(before.pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no new server after a kill");
        std::thread::sleep(Duration::from_millis(20));
        let Some(s) = try_snapshot(mnt) else { continue };
        if s.pid != before.pid
            && s.recovery
                .as_ref()
                .is_some_and(|r| r.generation > rec.generation)
        {
            return (s.pid, s.recovery.unwrap().generation);
        }
    }
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
    let dir = scratch("kill");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_supervised(&src, &mnt, &[]);
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

    // An application that never stops: writes, stats, lists, creates.
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (mnt, stop) = (mnt.clone(), stop.clone());
        std::thread::spawn(move || -> Result<u64, String> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(mnt.join("d/busy"))
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
                    std::fs::write(mnt.join(format!("d/new{n}")), b"x")
                        .map_err(|e| format!("create {n}: {e}"))?;
                }
                n += 1;
            }
            Ok(n)
        })
    };

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
    let ops = within(Duration::from_secs(60), move || worker.join().unwrap())
        .expect("the application saw an error across server crashes");
    assert!(ops > 0);
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
    let dir = scratch("loop");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let guard = mount_supervised(
        &src,
        &mnt,
        &["--max-restarts", "2", "--restart-window", "60s"],
    );
    kill_server(&mnt);
    kill_server(&mnt);
    // The third death is past the limit: no new server.
    let last = snapshot(&mnt);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(last.pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        assert!(Instant::now() < deadline, "the supervisor never gave up");
        std::thread::sleep(Duration::from_millis(50));
        if let Some(r) = try_snapshot(&mnt)
            .and_then(|s| s.recovery)
            .filter(|r| !r.status.is_empty())
        {
            break r.status;
        }
    };
    assert!(
        status.contains("not serving") && status.contains("3 times"),
        "{status}"
    );
    // Requests now fail at once, with EIO, rather than hang.
    let m = mnt.clone();
    let e = within(Duration::from_secs(10), move || {
        std::fs::metadata(m.join("f")).unwrap_err()
    });
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::IO.raw_os_error()),
        "{e}"
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
    let out = Command::new(BIN).arg("umount").arg(&mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(guard.supervisor) {
        assert!(
            Instant::now() < deadline,
            "the supervisor outlived its mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_recovery_and_io_uring_mounts_serve_without_a_supervisor() {
    let dir = scratch("off");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let guard = mount_supervised(&src, &mnt, &["--no-recovery"]);
    let s = snapshot(&mnt);
    assert!(s.recovery.is_none(), "{s:?}");
    assert_eq!(s.pid, guard.supervisor, "the daemon serves itself");
    drop(guard);
    assert!(!is_mounted(&mnt));
}
