//! The `fusebox` binary end to end: mount in the background, read stats
//! from the running daemon, unmount; and what happens when the daemon dies.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{is_mounted, scratch, BIN};

/// Unmounts on drop, even if the test panicked.
struct Guard(PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new(BIN)
                .args(["umount", "--abort"])
                .arg(&self.0)
                .status();
        }
    }
}

fn fusebox(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn background_mount_stats_and_umount() {
    let dir = scratch("bg");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let out = fusebox(&["mount", "memfs", m]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Guard(mnt.clone());
    // The parent returns only once the child reported the mount ready.
    assert!(is_mounted(&mnt));
    for i in 0..10 {
        std::fs::write(mnt.join(format!("f{i}")), b"data").unwrap();
        std::fs::metadata(mnt.join(format!("f{i}"))).unwrap();
    }
    let out = fusebox(&["stats", m, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: fusebox::stats::Snapshot = serde_json::from_slice(&out.stdout).unwrap();
    assert!(snap.op("CREATE").is_some_and(|o| o.count >= 10), "{snap:?}");
    assert!(snap
        .op("WRITE")
        .is_some_and(|o| o.count >= 10 && o.bins.iter().sum::<u64>() == o.count));
    let out = fusebox(&["stats", m, "--histogram"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("CREATE") && text.contains("REQUEST"),
        "{text}"
    );
    let out = fusebox(&["umount", m]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
}

#[test]
fn killing_the_daemon_leaves_no_hang() {
    let dir = scratch("kill");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // Without a supervisor (the default would start another server).
    let mut child = Command::new(BIN)
        .args(["mount", "memfs", "-f", "--no-recovery"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = Guard(mnt.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_mounted(&mnt) {
        assert!(Instant::now() < deadline, "mount did not appear");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(mnt.join("x"), b"1").unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The device closed with the process: the kernel fails requests at once.
    let e = std::fs::metadata(mnt.join("x")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc_enotconn()), "{e}");
    let out = fusebox(&["umount", mnt.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
}

fn libc_enotconn() -> i32 {
    rustix::io::Errno::NOTCONN.raw_os_error()
}

#[test]
fn bad_options_are_reported_clearly() {
    let dir = scratch("opts");
    let out = fusebox(&[
        "mount",
        "memfs",
        dir.path().to_str().unwrap(),
        "-o",
        "max_write=lots",
        "-f",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_write") && err.contains("not a number"),
        "{err}"
    );
    let out = fusebox(&["stats", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a fusebox daemon serving it"));
}

/// Puts the enable_uring switch back however the test ends.
struct RestoreUring(String);
impl Drop for RestoreUring {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.0);
    }
}
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// Held by every test here that flips or relies on the enable_uring switch.
static URING_SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn asking_for_io_uring_when_it_is_off_says_how_to_enable_it() {
    let _switch = URING_SWITCH.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(before) = std::fs::read_to_string(ENABLE_URING) else {
        fusebox_test_support::skipped(None, &format!("this kernel has no {ENABLE_URING}"));
        return;
    };
    // Tests of this binary that use io_uring hold URING_SWITCH, and cargo
    // runs test binaries one at a time, so flipping the host switch is contained.
    let _restore = RestoreUring(before.trim().to_string());
    std::fs::write(ENABLE_URING, "N").unwrap();
    let dir = scratch("uring-off");
    let out = fusebox(&[
        "mount",
        "memfs",
        dir.path().to_str().unwrap(),
        "--transport",
        "uring",
        "-f",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("echo Y > /sys/module/fuse/parameters/enable_uring"),
        "{err}"
    );
    assert!(!is_mounted(dir.path()));
    // auto falls back to classic instead of failing.
    let mnt = dir.path().join("auto");
    std::fs::create_dir(&mnt).unwrap();
    let out = fusebox(&[
        "mount",
        "memfs",
        mnt.to_str().unwrap(),
        "--transport",
        "auto",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Guard(mnt.clone());
    let snap: fusebox::stats::Snapshot =
        serde_json::from_slice(&fusebox(&["stats", mnt.to_str().unwrap(), "--json"]).stdout)
            .unwrap();
    assert_eq!(snap.transport, "classic");
    fusebox(&["umount", mnt.to_str().unwrap()]);
}

#[test]
fn killing_an_io_uring_daemon_under_load_leaves_no_hang() {
    let _switch = URING_SWITCH.lock().unwrap_or_else(|p| p.into_inner());
    if std::fs::read_to_string(ENABLE_URING)
        .map(|v| v.trim() != "Y")
        .unwrap_or(true)
    {
        fusebox_test_support::skipped(None, "enable_uring is off");
        return;
    }
    let dir = scratch("kill-uring");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(BIN)
        .args(["mount", "memfs", "-f", "--transport", "uring"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = Guard(mnt.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_mounted(&mnt) {
        assert!(Instant::now() < deadline, "mount did not appear");
        std::thread::sleep(Duration::from_millis(10));
    }
    let loaders: Vec<_> = (0..4)
        .map(|t| {
            let dir = mnt.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                loop {
                    let p = dir.join(format!("t{t}-{}", ok % 20));
                    match std::fs::write(&p, b"load").and_then(|_| std::fs::read(&p)) {
                        Ok(_) => ok += 1,
                        Err(e) => return (ok, e.raw_os_error()),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    for l in loaders {
        let (ok, errno) = l.join().unwrap();
        assert!(ok > 0);
        // In-flight requests end with ECONNABORTED (or ECANCELED when the
        // dying daemon's rings are cancelled), later ones with ENOTCONN.
        let ended = [
            rustix::io::Errno::NOTCONN,
            rustix::io::Errno::CONNABORTED,
            rustix::io::Errno::CANCELED,
        ];
        assert!(
            ended.iter().any(|e| Some(e.raw_os_error()) == errno),
            "{errno:?}"
        );
    }
    // The daemon killed is the supervisor, whose kernel thread drove the
    // io_uring rings: its server aborts the connection and takes the dead
    // mount away (as `fusebox umount --abort` would). Otherwise a plain
    // unmount removes it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_mounted(&mnt) && Instant::now() < deadline {
        let out = fusebox(&["umount", mnt.to_str().unwrap()]);
        if out.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!is_mounted(&mnt));
}

/// Scheduling policy (field 41 of /proc/PID/task/TID/stat) per thread name.
fn thread_policies(pid: u32) -> Vec<(String, u32)> {
    let mut v = vec![];
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap();
        let stat = std::fs::read_to_string(t.join("stat")).unwrap();
        // Fields after the parenthesised name start at field 3.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = rest.split(' ').nth(41 - 3).unwrap().parse().unwrap();
        v.push((comm.trim().to_string(), policy));
    }
    v
}

#[test]
fn idle_thread_policy_reaches_every_serving_thread() {
    const SCHED_IDLE: u32 = 5;
    let dir = scratch("policy");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let out = fusebox(&["mount", "memfs", m, "--thread-policy", "idle"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Guard(mnt.clone());
    std::fs::write(mnt.join("f"), b"served").unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"served");
    let out = fusebox(&["stats", m, "--json"]);
    let snap: fusebox::stats::Snapshot = serde_json::from_slice(&out.stdout).unwrap();
    let threads = thread_policies(snap.pid);
    let serving: Vec<_> = threads
        .iter()
        .filter(|(name, _)| name.starts_with("fusebox-dev") || name.starts_with("fusebox-uring"))
        .collect();
    assert!(!serving.is_empty(), "{threads:?}");
    assert!(serving.iter().all(|(_, p)| *p == SCHED_IDLE), "{threads:?}");
    // Threads that serve no requests keep the normal policy.
    assert!(
        threads
            .iter()
            .any(|(name, p)| name == "fusebox-stats" && *p == 0),
        "{threads:?}"
    );
    let out = fusebox(&["mount", "memfs", m, "--thread-policy", "fifo"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("normal, idle or adaptive"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The default policy: serving threads are SCHED_IDLE while requests flow,
/// and back to normal once the mount is quiet (a request arriving then is
/// never left to SCHED_IDLE behind CPU-bound work). On rings the supervisor
/// holds they stay normal: its SQ thread polls on their CPU.
#[test]
fn adaptive_thread_policy_idles_only_while_busy() {
    adaptive_thread_policy_under_load(false);
}

#[test]
fn adaptive_thread_policy_stays_normal_on_supervised_rings() {
    adaptive_thread_policy_under_load(true);
}

fn adaptive_thread_policy_under_load(supervised: bool) {
    const SCHED_IDLE: u32 = 5;
    let _switch = URING_SWITCH.lock().unwrap_or_else(|p| p.into_inner());
    if std::fs::read_to_string(ENABLE_URING).map_or(true, |v| v.trim() != "Y") {
        fusebox_test_support::skipped(None, "FUSE-over-io_uring is off");
        return;
    }
    let dir = scratch("adaptive");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let mut args = vec![
        "mount",
        "memfs",
        m,
        "--transport",
        "uring",
        "-o",
        "attr_timeout=0",
    ];
    if !supervised {
        args.push("--no-recovery");
    }
    let out = fusebox(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Guard(mnt.clone());
    std::fs::write(mnt.join("f"), b"x").unwrap();
    let out = fusebox(&["stats", m, "--json"]);
    let pid = serde_json::from_slice::<fusebox::stats::Snapshot>(&out.stdout)
        .unwrap()
        .pid;
    let policies_of = |prefix: &str| -> Vec<u32> {
        thread_policies(pid)
            .into_iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, p)| p)
            .collect()
    };
    // Busy: every stat is a GETATTR.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, f) = (stop.clone(), mnt.join("f"));
        std::thread::spawn(move || {
            let mut stats = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::metadata(&f).unwrap();
                stats += 1;
            }
            stats
        })
    };
    if supervised {
        // Long past the moment an unsupervised queue thread goes idle
        // (the guard's first busy tick).
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            let policies = policies_of("fusebox-ur");
            assert!(!policies.is_empty(), "{:?}", thread_policies(pid));
            assert!(
                policies.iter().all(|&p| p == 0),
                "a queue thread of a supervised ring left SCHED_OTHER: {:?}",
                thread_policies(pid)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(load.join().unwrap() > 1000, "the load made few requests");
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !policies_of("fusebox-uring").contains(&SCHED_IDLE) {
        assert!(
            Instant::now() < deadline,
            "no queue thread went SCHED_IDLE under load"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The classic worker (FORGET, INTERRUPT) stays normal.
    assert!(
        policies_of("fusebox-dev").iter().all(|&p| p == 0),
        "{:?}",
        thread_policies(pid)
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    // Quiet: all back to normal within a few ticks.
    let deadline = Instant::now() + Duration::from_secs(10);
    while policies_of("fusebox-uring").iter().any(|&p| p != 0) {
        assert!(
            Instant::now() < deadline,
            "queue threads stayed SCHED_IDLE on a quiet mount: {:?}",
            thread_policies(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `fusebox stats` works the moment the mount appears (the endpoint is up
/// before mount(2)); it used to fail about one time in five over io_uring.
/// Under a supervisor the socket is the supervisor's, answered by the
/// server it starts.
#[test]
fn stats_answer_as_soon_as_the_mount_appears() {
    let dir = scratch("early");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _switch = URING_SWITCH.lock().unwrap_or_else(|p| p.into_inner());
    let uring = std::fs::read_to_string(ENABLE_URING).is_ok_and(|v| v.trim() == "Y");
    for i in 0..9 {
        let (transport, supervised) = match i % 3 {
            0 => ("classic", true),
            1 if uring => ("uring", true),
            2 if uring && i % 2 == 1 => ("uring", false),
            _ => ("classic", false),
        };
        let mut child = Command::new(BIN)
            .args(["mount", "memfs", "-f", "--transport", transport])
            .args((!supervised).then_some("--no-recovery"))
            .arg(&mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let guard = Guard(mnt.clone());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&mnt) {
            assert!(Instant::now() < deadline, "mount did not appear");
            if let Some(status) = child.try_wait().unwrap() {
                panic!("daemon exited: {status}");
            }
            std::hint::spin_loop();
        }
        let snap = fusebox::stats::fetch(&mnt);
        drop(guard);
        let _ = child.wait();
        let snap = snap.unwrap_or_else(|e| panic!("round {i} ({transport}): {e}"));
        if supervised {
            assert!(snap.recovery.is_some(), "round {i}: not supervised");
            assert_ne!(snap.pid, child.id(), "round {i}: answered by the server");
        } else {
            assert_eq!(snap.pid, child.id());
        }
    }
}

/// `fusebox bench --report-from` renders a saved run again without running
/// anything, and says clearly when the file is not a results file.
#[test]
fn a_saved_bench_run_renders_again() {
    let dir = scratch("report");
    let saved = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/benchmarks-peer/results.json"
    );
    let out_dir = dir.path().join("out");
    let out = Command::new(BIN)
        .args(["bench", "--report-from", saved, "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains("suite `peer`") && md.contains("## Matched pairs"),
        "{md}"
    );
    assert!(out_dir.join("results.json").exists());
    let bogus = dir.path().join("bogus.json");
    std::fs::write(&bogus, b"{\"not\": \"results\"}").unwrap();
    let out = Command::new(BIN)
        .args(["bench", "--report-from"])
        .arg(&bogus)
        .arg("--out")
        .arg(dir.path().join("out2"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a fusebox bench results file"), "{err}");
}

/// `fusebox mount timingfs --latency --waiting token`: parallel stats all
/// overlap on two workers, and `fusebox stats` shows them as answered later
/// with the peak in flight.
#[test]
fn requests_answered_later_show_in_stats() {
    let dir = scratch("later");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let out = fusebox(&[
        "mount",
        "timingfs",
        m,
        "--profile",
        "pmem",
        "--files",
        "16",
        "--size",
        "4K",
        "--latency",
        "200ms",
        "--waiting",
        "token",
        "--threads",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = Guard(mnt.clone());
    let readers: Vec<_> = (0..16)
        .map(|i| {
            let p = mnt.join(format!("file{i}"));
            std::thread::spawn(move || std::fs::read(p).map(|d| d.len()))
        })
        .collect();
    for r in readers {
        assert_eq!(r.join().unwrap().unwrap(), 4096);
    }
    let out = fusebox(&["stats", m, "--json"]);
    let snap: fusebox::stats::Snapshot = serde_json::from_slice(&out.stdout).unwrap();
    // 16 LOOKUPs at once, then OPENs and READs: at least 16 in flight together.
    assert!(snap.later.in_flight_peak >= 16, "{:?}", snap.later);
    assert!(snap.later.taken >= 48, "{:?}", snap.later);
    assert_eq!(snap.later.pending, 0);
    let text = String::from_utf8_lossy(&fusebox(&["stats", m]).stdout).to_string();
    assert!(text.contains("in flight: 0 now"), "{text}");
    assert!(fusebox(&["umount", m]).status.success());
}
