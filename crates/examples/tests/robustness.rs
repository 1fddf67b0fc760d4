//! Failure paths: a panicking filesystem method, a hung daemon, malformed
//! input. None may take the daemon or the test suite down.

mod common;

use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use common::{scratch_dir, test_options, TestMount};
use fusebox::fs::ops::Ctx;
use fusebox::*;

/// A root directory whose LOOKUP panics for "boom" and blocks for "hang"
/// until the test lets go.
struct Faulty {
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Filesystem for Faulty {
    fn lookup(&self, _: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        if name == "boom" {
            panic!("injected failure");
        }
        if name == "hang" {
            if let Some(rx) = self.release.lock().unwrap().take() {
                let _ = rx.recv_timeout(Duration::from_secs(60));
            }
            return Err(Errno::ENOENT);
        }
        Err(Errno::ENOENT)
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOENT);
        }
        let attr = FileAttr {
            ino: 1,
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            ..Default::default()
        };
        Ok(AttrReply {
            attr,
            ttl: Duration::ZERO,
        })
    }
}

fn faulty() -> (TestMount, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel();
    let fs = Faulty {
        release: Mutex::new(Some(rx)),
    };
    (
        TestMount::mount(fs, scratch_dir("faulty"), None, &test_options()),
        tx,
    )
}

#[test]
fn a_panicking_method_costs_one_request_an_eio() {
    let (m, _tx) = faulty();
    let e = std::fs::metadata(m.mnt.join("boom")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The daemon is still serving.
    let e = std::fs::metadata(m.mnt.join("other")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = std::fs::metadata(m.mnt.join("boom")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let lookups = m
        .snapshot_when(|s| s.op("LOOKUP").is_some_and(|l| l.count >= 3))
        .op("LOOKUP")
        .cloned()
        .unwrap();
    assert!(lookups.count >= 3 && lookups.errors >= 3, "{lookups:?}");
}

#[test]
fn a_hung_request_is_ended_by_aborting_the_connection() {
    let (m, tx) = faulty();
    let path = m.mnt.join("hang");
    let stat = std::thread::spawn(move || std::fs::metadata(path).map(|_| ()));
    // Wait until the request is really stuck in the filesystem.
    for _ in 0..500 {
        if m.snapshot().op("LOOKUP").is_some() || !stat.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(!stat.is_finished(), "the lookup should be hanging");
    m.shutdown_handle().abort().expect("abort through fusectl");
    let r = stat.join().unwrap();
    // The stuck request fails with ECONNABORTED; anything after, ENOTCONN.
    let errno = r.unwrap_err().raw_os_error();
    assert!(
        matches!(errno, Some(libc::ECONNABORTED | libc::ENOTCONN)),
        "{errno:?}"
    );
    let later = std::fs::metadata(m.mnt.join("x")).unwrap_err();
    assert_eq!(later.raw_os_error(), Some(libc::ENOTCONN));
    // Let the stuck worker go so the session can be joined.
    let _ = tx.send(());
}

#[test]
fn unknown_node_ids_and_handles_are_errors_not_panics() {
    // Straight calls, as a confused or malicious kernel message would make.
    let fs = fusebox_examples::MemFs::new(Timeouts::default());
    let ctx = Ctx::internal();
    assert!(fs.getattr(&ctx, NodeId(987_654), None).is_err());
    assert!(fs.lookup(&ctx, NodeId(987_654), OsStr::new("x")).is_err());
    fs.forget(NodeId(987_654), 5);
    let dir = scratch_dir("stack-direct");
    let s = fusebox_examples::StackFs::new(dir.path(), Default::default()).unwrap();
    assert!(s.getattr(&ctx, NodeId(987_654), None).is_err());
    let w = fusebox::fs::ops::Write {
        fh: FileHandle(42),
        offset: 0,
        data: b"x",
        flags: 0,
        lock_owner: None,
        from_cache: false,
        kill_suidgid: false,
    };
    assert_eq!(s.write(&ctx, NodeId::ROOT, &w), Err(Errno::EBADF));
}

/// Once the kernel forgets a deleted file, no fd of the daemon may keep it
/// (and its space) alive, even if the daemon then sits idle.
#[test]
fn stackfs_lets_go_of_deleted_files() {
    let m = TestMount::stackfs();
    let src = m.src.clone().expect("stackfs has a source");
    for name in ["made", "looked-up"] {
        std::fs::write(m.mnt.join(name), vec![7u8; 1 << 20]).unwrap();
    }
    // One node cached when made, one cached by a later request.
    let _ = std::fs::metadata(m.mnt.join("looked-up")).unwrap();
    for name in ["made", "looked-up"] {
        std::fs::remove_file(m.mnt.join(name)).unwrap();
    }
    let held = || -> Vec<String> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| p.starts_with(&*src.to_string_lossy()) && p.ends_with("(deleted)"))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut left = held();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        left = held();
    }
    assert!(
        left.is_empty(),
        "deleted files still open in the daemon: {left:?}"
    );
}

#[test]
fn stackfs_forgets_nodes_the_kernel_forgets() {
    forgets_nodes_the_kernel_forgets(fusebox::transport::TransportKind::Classic);
}

/// Over io_uring, forgets still come through /dev/fuse, where the worker
/// lingers after each to take the next ones as a batch.
#[test]
fn stackfs_forgets_nodes_the_kernel_forgets_over_io_uring() {
    if common::uring_or_skip() {
        forgets_nodes_the_kernel_forgets(fusebox::transport::TransportKind::Uring);
    }
}

/// drop_caches reaches every mount: the tests that use it take turns, or
/// one would see the other's nodes forgotten early.
static DROPS_CACHES: Mutex<()> = Mutex::new(());

fn forgets_nodes_the_kernel_forgets(transport: fusebox::transport::TransportKind) {
    let _turn = DROPS_CACHES.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch_dir("forget");
    let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    for i in 0..200 {
        std::fs::write(src.join(format!("f{i}")), b"x").unwrap();
    }
    let fs = fusebox_examples::StackFs::new(&src, Default::default()).unwrap();
    let cfg = SessionConfig {
        workers: 2,
        stats_socket: false,
        transport,
        ..Default::default()
    };
    let session = Session::mount(fs, &mnt, &test_options(), cfg).unwrap();
    for i in 0..200 {
        std::fs::metadata(mnt.join(format!("f{i}"))).unwrap();
    }
    assert!(session.filesystem().known_nodes() >= 200);
    // Make the kernel drop its unused dentries and inodes: it then sends
    // FORGET for each, and the node table must shrink with it.
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    let left = common::value_when(|| session.filesystem().known_nodes(), |&n| n < 10);
    assert!(
        left < 10,
        "{left} nodes still held after the kernel forgot them"
    );
    // A FORGET is counted just after the filesystem handled it.
    let forgets = |s: &fusebox::stats::Snapshot| {
        s.op("FORGET").map_or(0, |o| o.count) + s.op("BATCH_FORGET").map_or(0, |o| o.count)
    };
    let snap = common::snapshot_when(|| session.snapshot(), |s| forgets(s) > 0);
    assert!(forgets(&snap) > 0);
}

#[test]
fn io_uring_queues_really_serve_requests() {
    if !common::uring_or_skip() {
        return;
    }
    let m = TestMount::memfs_on(fusebox::transport::TransportKind::Uring);
    for i in 0..100 {
        std::fs::write(m.mnt.join(format!("f{i}")), b"x").unwrap();
    }
    let queued_of = |snap: &fusebox::stats::Snapshot| -> u64 {
        snap.workers
            .iter()
            .filter(|w| w.label.starts_with("uring/"))
            .map(|w| w.requests)
            .sum()
    };
    let snap = m.snapshot_when(|s| queued_of(s) >= 400);
    let queued = queued_of(&snap);
    let classic: u64 = snap
        .workers
        .iter()
        .filter(|w| w.label.starts_with("dev/"))
        .map(|w| w.requests)
        .sum();
    // 100 each of LOOKUP (the new name), CREATE, WRITE and RELEASE at
    // least; only FORGET and the like may arrive on /dev/fuse.
    assert!(queued >= 400, "{:?}", snap.workers);
    assert!(classic < queued / 10, "{:?}", snap.workers);
}

#[test]
fn passthrough_keeps_file_io_out_of_the_daemon() {
    use std::io::{Read, Write};
    let m = TestMount::stackfs_with(
        fusebox::transport::TransportKind::Classic,
        &common::passthrough_options(),
    );
    let p = m.mnt.join("pt");
    for _ in 0..3 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
    }
    let mut back = Vec::new();
    std::fs::File::open(&p)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back.len(), 1 << 20);
    assert!(back.iter().all(|b| *b == 7));
    let src = std::fs::read(m.src.as_ref().unwrap().join("pt")).unwrap();
    assert_eq!(src, back, "the data is in the source file");
    let count = |s: &fusebox::stats::Snapshot, name: &str| s.op(name).map_or(0, |o| o.count);
    let snap = m.snapshot_when(|s| count(s, "OPEN") + count(s, "CREATE") >= 4);
    let io = |name: &str| count(&snap, name);
    assert_eq!(
        (io("READ"), io("WRITE")),
        (0, 0),
        "passthrough I/O must not reach the daemon"
    );
    assert!(io("OPEN") + io("CREATE") >= 4);
}

/// Unmounting goes by path: a daemon whose mount someone else took away
/// must not, on its way out, unmount what was mounted at that path since
/// (the next daemon's mount).
#[test]
fn a_daemon_unmounted_by_someone_else_leaves_the_next_mount_alone() {
    // Before Linux 6.8 there is no unique mount id, and connection numbers
    // are reused at once: the guard is best effort there.
    let unique = rustix::fs::statx(
        rustix::fs::CWD,
        "/",
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::from_bits_retain(0x4000),
    )
    .is_ok_and(|st| st.stx_mask & 0x4000 != 0);
    if !unique {
        fusebox_test_support::skipped(None, "the kernel has no STATX_MNT_ID_UNIQUE (Linux 6.8+)");
        return;
    }
    let dir = scratch_dir("remount");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = std::fs::canonicalize(&mnt).unwrap();
    let mount = || {
        let cfg = SessionConfig {
            workers: 2,
            stats_socket: false,
            ..Default::default()
        };
        let fs = fusebox_examples::NullFs::new(Timeouts::default());
        Session::mount(fs, &mnt, &test_options(), cfg).expect("mount")
    };
    let connections_at = |p: &std::path::Path| -> Vec<u32> {
        fusebox::mount::fuse_mounts()
            .into_iter()
            .filter(|m| m.mountpoint == p)
            .map(|m| m.connection)
            .collect()
    };
    let first = mount();
    rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::empty()).expect("umount");
    let second = mount();
    let now = connections_at(&mnt);
    assert_eq!(now.len(), 1, "{now:?}");
    // The first daemon's workers see the connection end; its teardown runs.
    first.wait().expect("first daemon ends cleanly");
    assert_eq!(connections_at(&mnt), now, "the second mount must survive");
    drop(second);
    assert!(connections_at(&mnt).is_empty());
}
