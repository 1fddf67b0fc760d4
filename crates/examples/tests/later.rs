//! Replies that come later, on real mounts over both transports: many
//! requests in flight on two serving threads, answered out of order and
//! from other threads; dropped tokens; INTERRUPT of a request answered
//! later; unmounting with requests still in flight; the async API.

mod common;

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{scratch_dir, test_config, test_options, uring_or_skip, TestMount};
use fusebox::abi::flags::fopen;
use fusebox::fs::ops::{Ctx, Open, Read};
use fusebox::fs::{AsyncAdapter, AsyncFilesystem};
use fusebox::protocol::DataOut;
use fusebox::transport::TransportKind::{self, Classic, Uring};
use fusebox::*;
use fusebox_examples::{AsyncTimingFs, TimingFs, TimingProfile, Waiting};

const FILES: u64 = 1000;

/// The tests here count this process's threads and start hundreds of
/// their own: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root_attr() -> FileAttr {
    FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, Timespec::now())
}

/// `f0` .. `f999`, file i of size i. Every LOOKUP is answered later, by
/// another thread, once all of them have arrived, in a scrambled order.
#[derive(Default)]
struct Gather {
    tokens: Mutex<Vec<(ReplyToken, u64, std::thread::ThreadId)>>,
    all_in: Condvar,
    /// Answers whose thread was the receiving one (must stay 0).
    same_thread: std::sync::atomic::AtomicU64,
}

impl Filesystem for Gather {
    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        let i = name
            .to_str()
            .and_then(|n| n.strip_prefix('f'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|i| parent == NodeId::ROOT && *i < FILES)
            .ok_or(Errno::ENOENT)?;
        let token = ctx.reply_later()?;
        let mut t = self.tokens.lock().unwrap();
        t.push((token, i, std::thread::current().id()));
        if t.len() as u64 == FILES {
            self.all_in.notify_all();
        }
        Err(Errno::LATER)
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOENT);
        }
        Ok(AttrReply {
            attr: root_attr(),
            ttl: Duration::from_secs(1),
        })
    }
}

impl Gather {
    /// Wait for every LOOKUP, then answer them in a scrambled order.
    fn answer_all(&self) -> usize {
        let mut tokens = self.tokens.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while (tokens.len() as u64) < FILES && Instant::now() < deadline {
            tokens = self
                .all_in
                .wait_timeout(tokens, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        let mut all: Vec<Option<_>> = tokens.drain(..).map(Some).collect();
        drop(tokens);
        let n = all.len();
        // Last first, then alternately from the back and the middle:
        // nothing near the order they arrived in.
        let order = (0..n).map(|k| {
            if k % 2 == 0 {
                n - 1 - k / 2
            } else {
                (n / 2 + k / 2) % n
            }
        });
        let me = std::thread::current().id();
        let mut answered = 0;
        for idx in order.chain(0..n) {
            let Some((token, i, received_on)) = all[idx].take() else {
                continue;
            };
            if received_on == me {
                self.same_thread
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let attr = FileAttr::synthetic(2 + i, libc::S_IFREG | 0o644, i, Timespec::now());
            token.entry(Entry::new(NodeId(2 + i), attr, &Timeouts::default()));
            answered += 1;
        }
        answered
    }
}

fn thousand_out_of_order(transport: TransportKind) {
    let mut cfg = test_config(transport);
    // 1,000 requests in flight over io_uring need that many entries in
    // one queue: the kernel queues each on the CPU its caller runs on.
    cfg.uring.depth = FILES as usize;
    let m = TestMount::mount_configured(
        cfg,
        Gather::default(),
        scratch_dir("later-1000"),
        None,
        &test_options(),
    );
    let mnt = m.mnt.clone();
    let sizes: Vec<_> = (0..FILES)
        .map(|i| {
            let p = mnt.join(format!("f{i}"));
            std::thread::spawn(move || std::fs::metadata(p).map(|md| md.size()))
        })
        .collect();
    let fs: &Gather = m.filesystem();
    let answered = fs.answer_all();
    assert_eq!(answered as u64, FILES, "all LOOKUPs were in flight at once");
    for (i, h) in sizes.into_iter().enumerate() {
        assert_eq!(
            h.join().unwrap().unwrap(),
            i as u64,
            "f{i} got its own answer"
        );
    }
    assert_eq!(fs.same_thread.load(std::sync::atomic::Ordering::Relaxed), 0);
    let snap = m.snapshot_when(|s| s.later.taken >= FILES && s.later.pending == 0);
    assert!(snap.later.taken >= FILES, "{:?}", snap.later);
    assert!(snap.later.in_flight_peak >= FILES, "{:?}", snap.later);
    assert_eq!(snap.later.pending, 0);
    assert_eq!(snap.later.dropped, 0);
    assert_eq!(snap.op("LOOKUP").unwrap().count, FILES);
}

#[test]
fn a_thousand_requests_answered_later_out_of_order_classic() {
    let _serial = serial();
    thousand_out_of_order(Classic);
}

#[test]
fn a_thousand_requests_answered_later_out_of_order_uring() {
    let _serial = serial();
    if uring_or_skip() {
        thousand_out_of_order(Uring);
    }
}

/// `keep` answers at once; LOOKUP of `drop` takes its token and drops it;
/// `wrong` is answered with data, the wrong kind for a LOOKUP.
struct Careless;

impl Filesystem for Careless {
    fn lookup(&self, ctx: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        let attr = FileAttr::synthetic(2, libc::S_IFREG | 0o644, 7, Timespec::now());
        match name.to_str() {
            Some("keep") => Ok(Entry::new(NodeId(2), attr, &Timeouts::default())),
            Some("drop") => {
                let token = ctx.reply_later()?;
                std::thread::spawn(move || drop(token));
                Err(Errno::LATER)
            }
            Some("wrong") => {
                ctx.reply_later()?.data(b"not an entry");
                Err(Errno::LATER)
            }
            // Errno::LATER without a token is a bug the dispatcher answers EIO.
            Some("forgot") => Err(Errno::LATER),
            _ => Err(Errno::ENOENT),
        }
    }
    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        let attr = if node == NodeId::ROOT {
            root_attr()
        } else {
            FileAttr::synthetic(2, libc::S_IFREG | 0o644, 7, Timespec::now())
        };
        Ok(AttrReply {
            attr,
            ttl: Duration::ZERO,
        })
    }
}

fn careless(transport: TransportKind) {
    let m = TestMount::mount_on(
        transport,
        Careless,
        scratch_dir("later-drop"),
        None,
        &test_options(),
    );
    for name in ["drop", "wrong", "forgot"] {
        let e = std::fs::metadata(m.mnt.join(name)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{name}: {e}");
    }
    // The mount lives on.
    assert_eq!(std::fs::metadata(m.mnt.join("keep")).unwrap().size(), 7);
    let snap = m.snapshot_when(|s| s.later.dropped >= 1 && s.later.mismatched >= 1);
    assert_eq!(snap.later.dropped, 1, "{:?}", snap.later);
    assert_eq!(snap.later.mismatched, 1, "{:?}", snap.later);
    assert_eq!(snap.later.pending, 0);
}

#[test]
fn a_dropped_token_answers_eio_and_the_mount_lives_classic() {
    let _serial = serial();
    careless(Classic);
}

#[test]
fn a_dropped_token_answers_eio_and_the_mount_lives_uring() {
    let _serial = serial();
    if uring_or_skip() {
        careless(Uring);
    }
}

fn file_attr(node: NodeId) -> FileAttr {
    if node == NodeId::ROOT {
        root_attr()
    } else {
        FileAttr::synthetic(2, libc::S_IFREG | 0o644, 4096, Timespec::now())
    }
}

/// One file, `slow`, opened for direct I/O (so a READ is synchronous and a
/// signal can interrupt it), whose READ a thread answers after 10 s, or
/// with EINTR as soon as the request is interrupted.
struct SlowLater;

impl Filesystem for SlowLater {
    fn lookup(&self, _: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        if name != "slow" {
            return Err(Errno::ENOENT);
        }
        Ok(Entry::new(
            NodeId(2),
            file_attr(NodeId(2)),
            &Timeouts::default(),
        ))
    }
    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: file_attr(node),
            ttl: Duration::from_secs(1),
        })
    }
    fn open(&self, _: &Ctx, _: NodeId, _: &Open) -> FsResult<Opened> {
        Ok(Opened {
            flags: fopen::DIRECT_IO,
            ..Default::default()
        })
    }
    fn read(&self, ctx: &Ctx, _: NodeId, _: &Read, _: &mut DataOut) -> FsResult<()> {
        let token = ctx.reply_later()?;
        let woken = Arc::new((Mutex::new(false), Condvar::new()));
        let w = woken.clone();
        token.on_interrupt(move || {
            *w.0.lock().unwrap() = true;
            w.1.notify_all();
        });
        std::thread::spawn(move || {
            let (lock, cv) = &*woken;
            let guard = cv
                .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(10), |i| !*i)
                .unwrap()
                .0;
            if *guard || token.interrupted() {
                token.error(Errno::EINTR);
            } else {
                token.data(&[7u8; 4096]);
            }
        });
        Err(Errno::LATER)
    }
}

/// The same through the async API: the READ sleeps 10 s; an INTERRUPT
/// cancels the future and the adapter answers EINTR.
struct SlowAsync;

impl AsyncFilesystem for SlowAsync {
    async fn lookup(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        SlowLater.lookup(ctx, parent, name)
    }
    async fn getattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        SlowLater.getattr(ctx, node, fh)
    }
    async fn open(&self, ctx: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        SlowLater.open(ctx, node, args)
    }
    async fn read(
        &self,
        _: &Ctx<'_>,
        _: NodeId,
        _: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        tokio::time::sleep(Duration::from_secs(10)).await;
        out.extend_from_slice(&[7u8; 4096]);
        Ok(())
    }
}

/// A reader blocked on `slow` takes SIGALRM after 0.3 s: the read must fail
/// with EINTR at once, not after the 10 s the filesystem would take.
fn signal_interrupts(m: &TestMount) {
    let script = r#"
import os, signal, sys, time
# Raising from the handler stops Python from retrying the read (PEP 475):
# the handler runs once read(2) has returned EINTR.
class Alarm(Exception): pass
def on_alarm(*_): raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
fd = os.open(os.path.join(sys.argv[1], "slow"), os.O_RDONLY)
signal.setitimer(signal.ITIMER_REAL, 0.3)
t = time.time()
try:
    os.read(fd, 4096); print("read returned after %.1fs" % (time.time() - t))
except Alarm:
    print("EINTR after %.1fs" % (time.time() - t))
except OSError as e:
    print("error", e.errno)
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&m.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("EINTR after 0."),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap = m.snapshot_when(|s| s.op("READ").is_some_and(|o| o.errors >= 1));
    assert!(
        snap.op("INTERRUPT").is_some(),
        "the daemon saw the INTERRUPT"
    );
    assert!(snap.op("READ").unwrap().errors >= 1);
}

#[test]
fn interrupt_reaches_a_request_answered_later_classic() {
    let _serial = serial();
    let m = TestMount::mount_on(
        Classic,
        SlowLater,
        scratch_dir("later-intr"),
        None,
        &test_options(),
    );
    signal_interrupts(&m);
}

#[test]
fn interrupt_reaches_a_request_answered_later_uring() {
    let _serial = serial();
    if uring_or_skip() {
        let m = TestMount::mount_on(
            Uring,
            SlowLater,
            scratch_dir("later-intr"),
            None,
            &test_options(),
        );
        signal_interrupts(&m);
    }
}

#[test]
fn interrupt_cancels_an_async_request_classic() {
    let _serial = serial();
    let fs = AsyncAdapter::new(SlowAsync).unwrap();
    let m = TestMount::mount_on(
        Classic,
        fs,
        scratch_dir("later-intr-async"),
        None,
        &test_options(),
    );
    signal_interrupts(&m);
}

#[test]
fn interrupt_cancels_an_async_request_uring() {
    let _serial = serial();
    if uring_or_skip() {
        let fs = AsyncAdapter::new(SlowAsync).unwrap();
        let m = TestMount::mount_on(
            Uring,
            fs,
            scratch_dir("later-intr-async"),
            None,
            &test_options(),
        );
        signal_interrupts(&m);
    }
}

/// A getattr that panics inside its future.
struct Panicky;

impl AsyncFilesystem for Panicky {
    async fn lookup(&self, _: &Ctx<'_>, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        tokio::task::yield_now().await;
        if name == "boom" {
            panic!("a bug in an async handler");
        }
        let attr = FileAttr::synthetic(2, libc::S_IFREG | 0o644, 3, Timespec::now());
        Ok(Entry::new(NodeId(2), attr, &Timeouts::default()))
    }
    async fn getattr(
        &self,
        _: &Ctx<'_>,
        node: NodeId,
        _: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: file_attr(node),
            ttl: Duration::ZERO,
        })
    }
}

#[test]
fn a_panic_in_an_async_handler_fails_only_its_request() {
    let _serial = serial();
    for t in [Classic, Uring] {
        if t == Uring && !uring_or_skip() {
            continue;
        }
        let fs = AsyncAdapter::new(Panicky).unwrap();
        let m = TestMount::mount_on(t, fs, scratch_dir("later-panic"), None, &test_options());
        let e = std::fs::metadata(m.mnt.join("boom")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{t}: {e}");
        assert!(
            std::fs::metadata(m.mnt.join("fine")).is_ok(),
            "{t}: the mount lives on"
        );
    }
}

/// Threads of this process the library or the example filesystem started
/// (serving threads, the async runtime, timers), by name: the test
/// harness's own threads come and go with the other tests.
fn library_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("fusebox") || n.starts_with("timingfs"))
        .collect()
}

fn mounted(path: &std::path::Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(4) == Some(&*p))
}

/// 100 stats in flight on a filesystem that takes 60 s per request, then
/// the session is dropped: it returns, the mount is gone, the applications
/// get an error instead of hanging, and no thread is left behind.
fn unmount_in_flight(transport: TransportKind, waiting: Waiting) {
    assert!(library_threads().is_empty(), "{:?}", library_threads());
    let fs = TimingFs::new(TimingProfile::Pmem, 100, 4096, Timeouts::default())
        .with_latency(Duration::from_secs(60), waiting);
    let mut cfg = test_config(transport);
    cfg.uring.depth = 128;
    let dir = scratch_dir("later-umount");
    let m = match waiting {
        Waiting::Async => {
            let fs = AsyncAdapter::new(AsyncTimingFs(fs)).unwrap();
            TestMount::mount_configured(cfg, fs, dir, None, &test_options())
        }
        _ => TestMount::mount_configured(cfg, fs, dir, None, &test_options()),
    };
    let mnt = m.mnt.clone();
    let apps: Vec<_> = (0..100)
        .map(|i| {
            let p = mnt.join(format!("file{i}"));
            std::thread::spawn(move || std::fs::metadata(p).map(|_| ()))
        })
        .collect();
    let snap = m.snapshot_when(|s| s.later.pending >= 100);
    assert_eq!(
        snap.later.pending, 100,
        "{transport} {waiting:?}: {:?}",
        snap.later
    );
    let t = Instant::now();
    drop(m);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "unmounting took {:?}",
        t.elapsed()
    );
    assert!(!mounted(&mnt), "the mount is gone");
    for a in apps {
        assert!(
            a.join().unwrap().is_err(),
            "the application got an error, not an answer"
        );
    }
    let left = common::value_when(library_threads, |t| t.is_empty());
    assert!(
        left.is_empty(),
        "{transport} {waiting:?}: threads left behind: {left:?}"
    );
}

#[test]
fn unmount_with_requests_in_flight_classic_token() {
    let _serial = serial();
    unmount_in_flight(Classic, Waiting::Token);
}

#[test]
fn unmount_with_requests_in_flight_uring_token() {
    let _serial = serial();
    if uring_or_skip() {
        unmount_in_flight(Uring, Waiting::Token);
    }
}

#[test]
fn unmount_with_requests_in_flight_uring_async() {
    let _serial = serial();
    if uring_or_skip() {
        unmount_in_flight(Uring, Waiting::Async);
    }
}

/// With a classic worker stopped at the pending-request limit, requests
/// still flow once answers come: the limit slows, never wedges.
#[test]
fn the_pending_limit_holds_back_without_wedging() {
    let _serial = serial();
    let fs = TimingFs::new(TimingProfile::Pmem, 64, 4096, Timeouts::default())
        .with_latency(Duration::from_millis(20), Waiting::Token);
    let mut cfg = test_config(Classic);
    cfg.later.max_pending = 4;
    let m = TestMount::mount_configured(cfg, fs, scratch_dir("later-limit"), None, &test_options());
    let mnt = m.mnt.clone();
    let apps: Vec<_> = (0..64)
        .map(|i| {
            let p = mnt.join(format!("file{i}"));
            std::thread::spawn(move || std::fs::metadata(p).map(|md| md.size()))
        })
        .collect();
    for a in apps {
        assert_eq!(a.join().unwrap().unwrap(), 4096);
    }
    let snap = m.snapshot();
    assert!(snap.later.taken >= 64, "{:?}", snap.later);
    // Two workers may each take one past the limit before they stop.
    assert!(snap.later.in_flight_peak <= 4 + 2 + 2, "{:?}", snap.later);
}
