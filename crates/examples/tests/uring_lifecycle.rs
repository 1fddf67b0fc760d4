//! io_uring queues under stress: unmount while busy, a slow request in one
//! queue while the others keep serving.

mod common;

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{scratch_dir, test_options, uring_or_skip, TestMount};
use fusebox::fs::ops::Ctx;
use fusebox::transport::TransportKind::Uring;
use fusebox::*;

fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).unwrap();
}

#[test]
fn unmount_under_load_stops_every_queue() {
    if !uring_or_skip() {
        return;
    }
    let m = TestMount::memfs_on(Uring);
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..4)
        .map(|t| {
            let (dir, stop) = (m.mnt.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ok = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = dir.join(format!("t{t}-{}", ok % 50));
                    if std::fs::write(&p, b"load")
                        .and_then(|_| std::fs::read(&p))
                        .is_err()
                    {
                        break;
                    }
                    ok += 1;
                }
                ok
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let handle = m.shutdown_handle();
    let t = Instant::now();
    handle.shutdown(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let done: Vec<u64> = loaders.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        done.iter().all(|n| *n > 0),
        "every loader made progress before the unmount: {done:?}"
    );
    assert!(
        handle.wait_workers(Duration::from_secs(10)),
        "all queue threads and workers stopped"
    );
    assert!(t.elapsed() < Duration::from_secs(15));
}

/// LOOKUP of "slow" takes a second; everything else answers at once.
struct SlowName;

impl Filesystem for SlowName {
    fn lookup(&self, _: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        if name == "slow" {
            std::thread::sleep(Duration::from_secs(1));
        }
        Err(Errno::ENOENT)
    }
    fn getattr(&self, _: &Ctx, _: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
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

/// A LOOKUP of "slow" from CPU 0, then, while it is served, 100 quick
/// lookups from `fast_cpu`: (how long each side took).
fn slow_then_fast(m: &TestMount, fast_cpu: usize) -> (Duration, Duration) {
    let slow_path = m.mnt.join("slow");
    let slow = std::thread::spawn(move || {
        pin_to(0);
        let t = Instant::now();
        let _ = std::fs::metadata(slow_path);
        t.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    let fast_dir = m.mnt.clone();
    let fast = std::thread::spawn(move || {
        pin_to(fast_cpu);
        let t = Instant::now();
        for i in 0..100 {
            let _ = std::fs::metadata(fast_dir.join(format!("f{i}")));
        }
        t.elapsed()
    });
    let fast = fast.join().unwrap();
    (slow.join().unwrap(), fast)
}

#[test]
fn a_slow_request_in_one_queue_does_not_stop_the_others() {
    if !uring_or_skip() {
        return;
    }
    if fusebox::transport::uring::possible_cpus() < 2 {
        fusebox_test_support::skipped(None, "needs two CPUs (two queues)");
        return;
    }
    let m = TestMount::mount_on(Uring, SlowName, scratch_dir("slow"), None, &test_options());
    // The kernel queues a request on the caller's CPU: the slow caller
    // occupies queue 0, the fast one uses queue 1.
    let (slow, fast) = slow_then_fast(&m, 1);
    assert!(slow >= Duration::from_millis(900), "{slow:?}");
    // 100 lookups finished while the slow one was still being served
    // (waiting for it would take them 900 ms at least).
    assert!(
        fast < Duration::from_millis(500),
        "fast lookups {fast:?} waited for the slow one {slow:?}"
    );
}

/// With two threads per queue (one entry each), a slow request holds one
/// thread; the other keeps answering callers on the same CPU. With one
/// thread per queue they would wait for the slow one.
#[test]
fn a_second_thread_per_queue_serves_while_one_is_slow() {
    if !uring_or_skip() {
        return;
    }
    let m = TestMount::mount_configured(
        common::two_threads_per_queue(),
        SlowName,
        scratch_dir("slow2"),
        None,
        &test_options(),
    );
    // The same CPU, so the same queue as the slow request.
    let (slow, fast) = slow_then_fast(&m, 0);
    assert!(slow >= Duration::from_millis(900), "{slow:?}");
    assert!(
        fast < Duration::from_millis(500),
        "lookups on the slow request's CPU {fast:?} waited for it {slow:?}"
    );
    // Both of queue 0's threads served: one the slow LOOKUP, one the rest.
    let snap = m.snapshot();
    let served = |label: &str| {
        snap.workers
            .iter()
            .find(|w| w.label == label)
            .map_or(0, |w| w.requests)
    };
    assert!(
        served("uring/q0") > 0 && served("uring/q0.1") > 0,
        "{:?}",
        snap.workers
    );
}

/// Over io_uring, /dev/fuse carries little but FORGET, and its worker waits
/// a moment after each one so that the next ones arrive together as one
/// BATCH_FORGET. Unlinking one file after another evicts one inode per
/// round trip: read singly, each forget would wake the worker once.
#[test]
fn forgets_after_unlinks_arrive_in_batches() {
    if !uring_or_skip() {
        return;
    }
    const FILES: u64 = 400;
    let m = TestMount::stackfs_on(Uring);
    let stackfs = m.filesystem::<fusebox_examples::StackFs>();
    for i in 0..FILES {
        std::fs::write(m.mnt.join(format!("f{i}")), b"x").unwrap();
    }
    let held = stackfs.known_nodes();
    assert!(
        held as u64 >= FILES,
        "{held} nodes known after {FILES} creates"
    );
    for i in 0..FILES {
        std::fs::remove_file(m.mnt.join(format!("f{i}"))).unwrap();
    }
    // The node table shrinks as the forgets are handled.
    let left = common::value_when(|| stackfs.known_nodes(), |&n| n < 10);
    assert!(left < 10, "{left} nodes still held after {FILES} unlinks");
    let count = |s: &fusebox::stats::Snapshot, op: &str| s.op(op).map_or(0, |o| o.count);
    let snap = m.snapshot_when(|s| count(s, "FORGET") + count(s, "BATCH_FORGET") > 0);
    let (single, batches) = (count(&snap, "FORGET"), count(&snap, "BATCH_FORGET"));
    assert!(batches > 0, "no BATCH_FORGET; {single} single FORGETs");
    assert!(
        single + batches <= FILES / 4,
        "{FILES} forgets took {single} FORGET and {batches} BATCH_FORGET requests"
    );
}
