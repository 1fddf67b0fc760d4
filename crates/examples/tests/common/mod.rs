//! Test fixture: mount an example filesystem in a fresh temp dir, wait for
//! it deterministically (mount(2) returns once the mount exists and the
//! session has answered INIT), and always unmount, even on panic. A
//! watchdog aborts the FUSE connection if a test hangs, so a stuck daemon
//! fails that test instead of hanging the suite.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fusebox::transport::TransportKind as Transport;
use fusebox::{Filesystem, Options, PathAdapter, Session, SessionConfig, Timeouts};

/// io_uring tests run only where the kernel offers it, and say so otherwise.
/// (Reported under the name libtest gave the calling thread.)
pub fn uring_or_skip() -> bool {
    match fusebox::transport::uring::availability() {
        Ok(()) => true,
        Err(why) => {
            fusebox_test_support::skipped(None, &why.to_string());
            false
        }
    }
}
use fusebox_examples::stackfs::StackOptions;
use fusebox_examples::{MemFs, PathPassthrough, StackFs};

/// tmpfs, so that "native" means the same kind of filesystem stackfs sits
/// on and memfs imitates.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix(&format!("fusebox-test-{tag}-"))
        .tempdir_in(base)
        .expect("temp dir")
}

pub struct TestMount {
    session: Option<Box<dyn SessionLike>>,
    pub mnt: PathBuf,
    pub src: Option<PathBuf>,
    done: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

/// Object-safe slice of `Session` the fixture needs.
pub trait SessionLike {
    fn snapshot(&self) -> fusebox::stats::Snapshot;
    fn shutdown_handle(&self) -> fusebox::ShutdownHandle;
    fn filesystem_any(&self) -> &dyn std::any::Any;
}

impl<F: Filesystem> SessionLike for Session<F> {
    fn filesystem_any(&self) -> &dyn std::any::Any {
        &**Session::filesystem(self)
    }
    fn snapshot(&self) -> fusebox::stats::Snapshot {
        Session::snapshot(self)
    }
    fn shutdown_handle(&self) -> fusebox::ShutdownHandle {
        Session::shutdown_handle(self)
    }
}

/// Watchdog limit: far above any test's run time, far below CI's.
const HANG_LIMIT: Duration = Duration::from_secs(300);

/// Stackfs with FUSE passthrough: the kernel does file I/O itself.
pub fn passthrough_options() -> Options {
    let mut o = test_options();
    o.apply("passthrough").unwrap();
    o
}

/// The first value `take` gives for which `ready` holds, or the last one
/// after a few seconds: for state the daemon updates just after the kernel
/// has its answer (statistics, nodes dropped on FORGET).
pub fn value_when<T>(take: impl Fn() -> T, ready: impl Fn(&T) -> bool) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let value = take();
        if ready(&value) || std::time::Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The first snapshot `take` gives for which `ready` holds, or the last one
/// after a few seconds (see [`TestMount::snapshot_when`]).
pub fn snapshot_when(
    take: impl Fn() -> fusebox::stats::Snapshot,
    ready: impl Fn(&fusebox::stats::Snapshot) -> bool,
) -> fusebox::stats::Snapshot {
    value_when(take, ready)
}

/// How the tests run a session: two classic workers, no stats socket.
pub fn test_config(transport: Transport) -> SessionConfig {
    SessionConfig {
        workers: 2,
        stats_socket: false,
        transport,
        ..Default::default()
    }
}

/// io_uring with two threads of one entry each per queue.
pub fn two_threads_per_queue() -> SessionConfig {
    SessionConfig {
        uring: fusebox::transport::UringConfig {
            depth: 1,
            threads_per_queue: 2,
            ..Default::default()
        },
        ..test_config(Transport::Uring)
    }
}

/// allow_other for root (pjdfstest-like checks switch users); an ordinary
/// user (`as_ordinary_user` runs this binary as one) mounts for itself, as
/// fusermount3 allows without user_allow_other.
pub fn test_options() -> Options {
    let mut o = Options::default();
    if rustix::process::geteuid().is_root() {
        o.apply("allow_other,default_permissions").unwrap();
    } else {
        o.apply("default_permissions").unwrap();
    }
    o
}

impl TestMount {
    pub fn mount<F: Filesystem>(
        fs: F,
        dir: tempfile::TempDir,
        src: Option<PathBuf>,
        opts: &Options,
    ) -> TestMount {
        Self::mount_on(Transport::Classic, fs, dir, src, opts)
    }

    pub fn mount_on<F: Filesystem>(
        transport: Transport,
        fs: F,
        dir: tempfile::TempDir,
        src: Option<PathBuf>,
        opts: &Options,
    ) -> TestMount {
        Self::mount_configured(test_config(transport), fs, dir, src, opts)
    }

    pub fn mount_configured<F: Filesystem>(
        cfg: SessionConfig,
        fs: F,
        dir: tempfile::TempDir,
        src: Option<PathBuf>,
        opts: &Options,
    ) -> TestMount {
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let session = Session::mount(fs, &mnt, opts, cfg).expect("mount");
        let done = Arc::new(AtomicBool::new(false));
        let handle = session.shutdown_handle();
        let done2 = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done2.load(Ordering::Acquire) {
                if start.elapsed() > HANG_LIMIT {
                    eprintln!(
                        "watchdog: test hung for {HANG_LIMIT:?}; aborting the FUSE connection"
                    );
                    let _ = handle.abort();
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        TestMount {
            session: Some(Box::new(session)),
            mnt,
            src,
            done,
            _dir: dir,
        }
    }

    /// stackfs over classic with these `-o` options only.
    pub fn stackfs_with_options(options: &str) -> TestMount {
        let mut o = Options::default();
        o.apply(options).unwrap();
        Self::stackfs_configured(Transport::Classic, &o, |_| {})
    }

    pub fn stackfs() -> TestMount {
        Self::stackfs_on(Transport::Classic)
    }

    pub fn stackfs_on(t: Transport) -> TestMount {
        Self::stackfs_with(t, &test_options())
    }

    pub fn stackfs_with(t: Transport, opts: &Options) -> TestMount {
        Self::stackfs_configured(t, opts, |_| {})
    }

    /// stackfs as passthrough_hp runs by default: the source is the
    /// mount's alone (`exclusive`: a day of caching, negatives included)
    /// and the kernel caches writes.
    pub fn stackfs_cached(t: Transport) -> TestMount {
        let mut o = test_options();
        o.apply("writeback_cache").unwrap();
        let m = Self::stackfs_configured(t, &o, |s| s.exclusive = true);
        // Otherwise the cached column would quietly test the plain one.
        m.assert_negotiated("writeback_cache");
        let flags = m.snapshot().flags;
        assert!(
            !flags.iter().any(|f| f == "passthrough"),
            "passthrough excludes the writeback cache: {flags:?}"
        );
        m
    }

    /// stackfs keeping at most 16 O_PATH fds: nearly every request finds
    /// its node evicted and reopens it from its file handle.
    pub fn stackfs_small_fd_cache() -> TestMount {
        Self::stackfs_configured(Transport::Classic, &test_options(), |o| o.fd_cache = 16)
    }

    /// stackfs reopening evicted nodes by path, as without
    /// CAP_DAC_READ_SEARCH, with the 16-fd cache of `stackfs_small_fd_cache`.
    pub fn stackfs_by_path() -> TestMount {
        Self::stackfs_configured(Transport::Classic, &test_options(), |o| {
            o.fd_cache = 16;
            o.reopen = fusebox_examples::stackfs::Reopen::ByPath;
        })
    }

    fn stackfs_configured(
        t: Transport,
        opts: &Options,
        tune: impl FnOnce(&mut StackOptions),
    ) -> TestMount {
        Self::stackfs_session(test_config(t), opts, tune)
    }

    fn stackfs_session(
        cfg: SessionConfig,
        opts: &Options,
        tune: impl FnOnce(&mut StackOptions),
    ) -> TestMount {
        let dir = scratch_dir("stackfs");
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let mut stack = StackOptions {
            fs: opts.fs,
            // The default budgets the whole fd limit for one mount; this
            // process runs two at once and is their application too.
            fd_cache: 4096,
            ..Default::default()
        };
        tune(&mut stack);
        let fs = StackFs::new(&src, stack).expect("stackfs");
        Self::mount_configured(cfg, fs, dir, Some(src), opts)
    }

    /// stackfs over io_uring with two threads of one entry each per queue:
    /// concurrent requests from one CPU are served by both.
    pub fn stackfs_two_threads_per_queue() -> TestMount {
        Self::stackfs_session(two_threads_per_queue(), &test_options(), |_| {})
    }

    pub fn pathfs() -> TestMount {
        Self::pathfs_on(Transport::Classic)
    }

    pub fn pathfs_on(t: Transport) -> TestMount {
        Self::pathfs_with(t, &test_options())
    }

    pub fn pathfs_with(t: Transport, opts: &Options) -> TestMount {
        let dir = scratch_dir("pathfs");
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let fs = PathPassthrough::new(&src, opts.fs).expect("pathfs");
        Self::mount_on(t, PathAdapter::new(fs), dir, Some(src), opts)
    }

    pub fn memfs() -> TestMount {
        Self::memfs_on(Transport::Classic)
    }

    pub fn memfs_on(t: Transport) -> TestMount {
        Self::memfs_with(t, &test_options())
    }

    pub fn memfs_with(t: Transport, opts: &Options) -> TestMount {
        Self::mount_on(
            t,
            MemFs::new(Timeouts::default()),
            scratch_dir("memfs"),
            None,
            opts,
        )
    }

    /// memfs served through the async API (a tokio task per request,
    /// answered with its reply token).
    pub fn memfs_async_on(t: Transport) -> TestMount {
        let fs =
            fusebox::fs::AsyncAdapter::new(fusebox::fs::Ready(MemFs::new(Timeouts::default())))
                .expect("tokio runtime");
        Self::mount_on(t, fs, scratch_dir("memfs-async"), None, &test_options())
    }

    /// stackfs served through the async API.
    pub fn stackfs_async_on(t: Transport) -> TestMount {
        let dir = scratch_dir("stackfs-async");
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let opts = test_options();
        let stack = StackOptions {
            fs: opts.fs,
            fd_cache: 4096,
            ..Default::default()
        };
        let fs = StackFs::new(&src, stack).expect("stackfs");
        let fs = fusebox::fs::AsyncAdapter::new(fusebox::fs::Ready(fs)).expect("tokio runtime");
        Self::mount_on(t, fs, dir, Some(src), &opts)
    }

    /// pathfs served through the path-level async API
    /// (`AsyncAdapter::new(PathAdapter::new(ReadyPath(fs)))`).
    pub fn pathfs_async_on(t: Transport) -> TestMount {
        let dir = scratch_dir("pathfs-async");
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let opts = test_options();
        let fs = PathPassthrough::new(&src, opts.fs).expect("pathfs");
        let fs = fusebox::fs::AsyncAdapter::new(PathAdapter::new(fusebox::fs::ReadyPath(fs)))
            .expect("tokio runtime");
        Self::mount_on(t, fs, dir, Some(src), &opts)
    }

    /// Fails the test unless the kernel agreed to `flag` (a name as
    /// `fusebox stats` prints it): a column must test what it names.
    pub fn assert_negotiated(&self, flag: &str) {
        let flags = self.snapshot().flags;
        assert!(
            flags.iter().any(|f| f == flag),
            "{flag} not negotiated: {flags:?}"
        );
    }

    pub fn snapshot(&self) -> fusebox::stats::Snapshot {
        self.session.as_ref().unwrap().snapshot()
    }

    /// The first snapshot for which `ready` holds, or the last one taken
    /// after a few seconds. A worker records a request's statistics just
    /// after it sends the reply, so the application can see the answer
    /// a moment before the counters do.
    pub fn snapshot_when(
        &self,
        ready: impl Fn(&fusebox::stats::Snapshot) -> bool,
    ) -> fusebox::stats::Snapshot {
        snapshot_when(|| self.snapshot(), ready)
    }

    pub fn shutdown_handle(&self) -> fusebox::ShutdownHandle {
        self.session.as_ref().unwrap().shutdown_handle()
    }

    /// The mounted filesystem, to reach its state from a test.
    pub fn filesystem<F: 'static>(&self) -> &F {
        self.session
            .as_ref()
            .unwrap()
            .filesystem_any()
            .downcast_ref()
            .expect("filesystem type")
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        // Session's drop unmounts, waits for the workers, aborts if needed.
        drop(self.session.take());
    }
}

/// The uid tests run ordinary-user checks as.
pub const NOBODY: u32 = 65534;

/// A command run as nobody (uid and gid 65534, no other groups), with a
/// home it can write and no runtime directory of root's.
pub fn as_nobody(program: &Path) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        "env",
        "-u",
        "XDG_RUNTIME_DIR",
        "HOME=/tmp",
    ])
    .arg(program);
    c
}
