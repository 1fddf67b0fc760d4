//! The async filesystem API: [`AsyncFilesystem`], whose methods are
//! `async fn`s, served through the inode-level [`Filesystem`] by
//! [`AsyncAdapter`].
//!
//! Each request becomes a task on a tokio runtime (the adapter's own, or
//! one the caller passes in). The serving thread takes the request's
//! [`ReplyToken`], copies what the request borrows from the transport's
//! buffer (names, write data), spawns the task and goes back to the kernel;
//! the task answers through the token when its future completes. So a
//! filesystem that waits on a network or a disk queue has as many requests
//! in flight as the kernel sends, on two serving threads.
//!
//! An INTERRUPT cancels the request's future (drops it, as async Rust
//! cancels) and answers EINTR, unless [`AsyncAdapter::cancel_on_interrupt`]
//! is turned off; the method can also poll `ctx.interrupted()`. A panic in
//! a method fails that one request with EIO.
//!
//! ```no_run
//! use std::ffi::OsStr;
//! use std::time::Duration;
//! use fusebox::fs::ops::Ctx;
//! use fusebox::fs::{AsyncAdapter, AsyncFilesystem};
//! use fusebox::*;
//!
//! struct Slow;
//!
//! impl AsyncFilesystem for Slow {
//!     async fn getattr(&self, _ctx: &Ctx<'_>, node: NodeId, _fh: Option<FileHandle>) -> FsResult<AttrReply> {
//!         tokio::time::sleep(Duration::from_millis(5)).await; // a round trip
//!         if node != NodeId::ROOT {
//!             return Err(Errno::ENOENT);
//!         }
//!         Ok(AttrReply {
//!             attr: FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, Timespec::now()),
//!             ttl: Duration::from_secs(1),
//!         })
//!     }
//! }
//!
//! let fs = AsyncAdapter::new(Slow).expect("tokio runtime");
//! let session = Session::mount(fs, "/mnt/slow".as_ref(), &Options::default(), SessionConfig::default())?;
//! session.wait()?;
//! # Ok::<(), fusebox::Error>(())
//! ```

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll as TaskPoll};
use std::time::Duration;

use super::inode::Filesystem;
use super::ops::*;
use crate::error::{Errno, FsResult};
use crate::later::ReplyToken;
use crate::protocol::{Connection, DataOut, DirEntries, Notifier};
use crate::types::*;

/// A filesystem addressed by node ids whose methods are `async fn`s: the
/// same methods, arguments and lookup counting as [`Filesystem`] (read its
/// documentation), answered when the future completes. Serve it with
/// [`AsyncAdapter`].
///
/// Implement a method with `async fn` (the future must be `Send`: hold no
/// `Rc` or `std` mutex guard across an `.await`). Bookkeeping calls nobody
/// waits on (`init`, `destroy`, `forget`) stay synchronous.
#[allow(unused_variables)]
pub trait AsyncFilesystem: Send + Sync + 'static {
    /// As [`Filesystem::init`], and like it synchronous: it runs before the
    /// first request.
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        Ok(())
    }

    /// As [`Filesystem::destroy`].
    fn destroy(&self) {}

    /// See [`Filesystem::counters`].
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        Vec::new()
    }

    /// As [`Filesystem::forget`]; synchronous, as nobody waits for it.
    fn forget(&self, node: NodeId, nlookup: u64) {}

    /// As [`Filesystem::batch_forget`]; the default calls `forget` for each.
    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        for (node, n) in nodes {
            self.forget(node, n);
        }
    }

    /// As [`Filesystem::lookup`].
    fn lookup(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
    ) -> impl Future<Output = FsResult<Entry>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::getattr`].
    fn getattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: Option<FileHandle>,
    ) -> impl Future<Output = FsResult<AttrReply>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::setattr`].
    fn setattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        attr: &SetAttr,
    ) -> impl Future<Output = FsResult<AttrReply>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::readlink`].
    fn readlink(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::symlink`].
    fn symlink(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        target: &OsStr,
    ) -> impl Future<Output = FsResult<Entry>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::mknod`].
    fn mknod(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mknod,
    ) -> impl Future<Output = FsResult<Entry>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::mkdir`].
    fn mkdir(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mkdir,
    ) -> impl Future<Output = FsResult<Entry>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::unlink`].
    fn unlink(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::rmdir`].
    fn rmdir(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::rename`].
    fn rename(
        &self,
        ctx: &Ctx<'_>,
        args: &Rename<'_>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::link`].
    fn link(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> impl Future<Output = FsResult<Entry>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::open`].
    fn open(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Open,
    ) -> impl Future<Output = FsResult<Opened>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// Put at most `args.size` bytes into `out`; fewer means end of file.
    fn read(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::write`].
    fn write(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Write<'_>,
    ) -> impl Future<Output = FsResult<u32>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::flush`].
    fn flush(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        lock_owner: u64,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::release`].
    fn release(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Release,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Ok(()) }
    }

    /// As [`Filesystem::fsync`].
    fn fsync(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::opendir`].
    fn opendir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Open,
    ) -> impl Future<Output = FsResult<Opened>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::readdir`].
    fn readdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// The default serves plain entries, like [`Filesystem::readdirplus`].
    fn readdirplus(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        self.readdir(ctx, node, args, out)
    }

    /// As [`Filesystem::releasedir`].
    fn releasedir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Release,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Ok(()) }
    }

    /// As [`Filesystem::fsyncdir`].
    fn fsyncdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::statfs`].
    fn statfs(&self, ctx: &Ctx<'_>, node: NodeId) -> impl Future<Output = FsResult<Statfs>> + Send {
        async {
            Ok(Statfs {
                namelen: 255,
                bsize: 512,
                frsize: 512,
                ..Default::default()
            })
        }
    }

    /// As [`Filesystem::setxattr`].
    fn setxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Setxattr<'_>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// Write the whole value into `out`; size queries and ERANGE are
    /// answered from its length.
    fn getxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        name: &OsStr,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::listxattr`].
    fn listxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::removexattr`].
    fn removexattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        name: &OsStr,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::access`].
    fn access(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        mask: i32,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::create`].
    fn create(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> impl Future<Output = FsResult<(Entry, Opened)>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::getlk`].
    fn getlk(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        lock: &Lock,
    ) -> impl Future<Output = FsResult<LockInfo>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// `sleep` for F_SETLKW: waiting here holds no thread.
    fn setlk(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        lock: &Lock,
        sleep: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::bmap`].
    fn bmap(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        block: u64,
        blocksize: u32,
    ) -> impl Future<Output = FsResult<u64>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::ioctl`].
    fn ioctl(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Ioctl<'_>,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<i32>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::poll`].
    fn poll(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Poll,
    ) -> impl Future<Output = FsResult<u32>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::fallocate`].
    fn fallocate(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Fallocate,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::lseek`].
    fn lseek(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Lseek,
    ) -> impl Future<Output = FsResult<u64>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::copy_file_range`].
    fn copy_file_range(
        &self,
        ctx: &Ctx<'_>,
        args: &CopyFileRange,
    ) -> impl Future<Output = FsResult<u64>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::syncfs`].
    fn syncfs(&self, ctx: &Ctx<'_>) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::tmpfile`].
    fn tmpfile(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        args: &Create,
    ) -> impl Future<Output = FsResult<(Entry, Opened)>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`Filesystem::statx`].
    fn statx(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Statx,
    ) -> impl Future<Output = FsResult<(fusebox_abi::Statx, Duration)>> + Send {
        async { Err(Errno::ENOSYS) }
    }
}

/// Serves an [`AsyncFilesystem`] as a [`Filesystem`]: every request is a
/// task on a tokio runtime, answered through its [`ReplyToken`].
pub struct AsyncAdapter<A> {
    fs: Arc<A>,
    runtime: tokio::runtime::Handle,
    /// The runtime this adapter made (shut down when it is dropped).
    owned: Mutex<Option<tokio::runtime::Runtime>>,
    cancel_on_interrupt: bool,
    /// The process the runtime's threads live in (a forked child has none
    /// of them: `wait` there runs on a runtime of the child's own).
    pid: u32,
}

/// A forked child's runtime for `AsyncAdapter::wait`, by process id.
static FORKED_RUNTIME: Mutex<Option<(u32, tokio::runtime::Runtime)>> = Mutex::new(None);

/// Worker threads of the runtime [`AsyncAdapter::new`] makes: the tasks
/// mostly wait, and the serving threads need the CPUs too.
const OWN_RUNTIME_THREADS: usize = 2;

impl<A: AsyncFilesystem> AsyncAdapter<A> {
    /// Serve `fs` on a runtime of its own (multi-threaded, with timers and
    /// I/O), shut down when the adapter is dropped.
    pub fn new(fs: A) -> std::io::Result<AsyncAdapter<A>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(OWN_RUNTIME_THREADS)
            .thread_name("fusebox-async")
            .enable_all()
            .build()?;
        Ok(AsyncAdapter {
            fs: Arc::new(fs),
            runtime: rt.handle().clone(),
            owned: Mutex::new(Some(rt)),
            cancel_on_interrupt: true,
            pid: std::process::id(),
        })
    }

    /// Serve `fs` on the caller's runtime.
    pub fn with_runtime(fs: A, runtime: tokio::runtime::Handle) -> AsyncAdapter<A> {
        AsyncAdapter {
            fs: Arc::new(fs),
            runtime,
            owned: Mutex::new(None),
            cancel_on_interrupt: true,
            pid: std::process::id(),
        }
    }

    /// Whether an INTERRUPT drops the request's future and answers EINTR
    /// (the default). Off, the method runs to its end and may check
    /// `ctx.interrupted()` itself.
    pub fn cancel_on_interrupt(mut self, cancel: bool) -> Self {
        self.cancel_on_interrupt = cancel;
        self
    }

    /// The filesystem this adapter serves.
    pub fn inner(&self) -> &Arc<A> {
        &self.fs
    }

    /// Run `work` as a task and wait for it on this thread (which may
    /// belong to another runtime: it only blocks on a channel).
    fn wait<T, W>(&self, work: W) -> FsResult<T>
    where
        T: Send + 'static,
        W: Future<Output = FsResult<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let task = async move {
            let _ = tx.send(CatchUnwind(Box::pin(work)).await);
        };
        let pid = std::process::id();
        if pid == self.pid {
            self.runtime.spawn(task);
        } else {
            let mut forked = FORKED_RUNTIME
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if forked.as_ref().is_none_or(|(p, _)| *p != pid) {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("fusebox-async")
                    .enable_all()
                    .build()
                    .map_err(|_| Errno::EIO)?;
                // The parent's (copied, threadless) runtime is never shut
                // down here: that would wait for threads this process lacks.
                if let Some(old) = forked.replace((pid, rt)) {
                    std::mem::forget(old);
                }
            }
            if let Some((_, rt)) = forked.as_ref() {
                rt.spawn(task);
            }
        }
        match rx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => {
                tracing::error!(panic = %panic, "async filesystem method panicked; answering EIO");
                Err(Errno::EIO)
            }
            // The runtime is shutting down.
            Err(_) => Err(Errno::EIO),
        }
    }

    /// Run `work` as a task and answer its result with `answer`.
    fn spawn<T, W>(&self, token: ReplyToken, work: W, answer: fn(ReplyToken, T))
    where
        T: Send + 'static,
        W: Future<Output = FsResult<T>> + Send + 'static,
    {
        let cancelled = self.cancel_on_interrupt.then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            token.on_interrupt(move || {
                let _ = tx.send(());
            });
            rx
        });
        let (unique, opcode) = (token.unique(), token.opcode());
        self.runtime.spawn(async move {
            let work = CatchUnwind(Box::pin(work));
            let outcome = match cancelled {
                Some(rx) => tokio::select! {
                    r = work => r,
                    Ok(()) = rx => Ok(Err(Errno::EINTR)),
                },
                None => work.await,
            };
            match outcome {
                Ok(r) => token.result(r, answer),
                Err(panic) => {
                    tracing::error!(unique, ?opcode, panic = %panic, "async filesystem method panicked; answering EIO");
                    token.error(Errno::EIO);
                }
            }
        });
    }
}

impl<A> Drop for AsyncAdapter<A> {
    fn drop(&mut self) {
        let rt = self
            .owned
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(rt) = rt {
            // Tasks still running are dropped, and their tokens answer EIO.
            // A runtime may not be shut down from inside another one's
            // context (a session dropped in async code): hand it to a thread.
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = std::thread::Builder::new()
                    .name("fusebox-async-stop".into())
                    .spawn(move || rt.shutdown_timeout(Duration::from_secs(1)));
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

/// Polls a future inside `catch_unwind`: a panicking method fails its own
/// request, not the runtime thread.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(TaskPoll::Ready(v)) => TaskPoll::Ready(Ok(v)),
            Ok(TaskPoll::Pending) => TaskPoll::Pending,
            Err(panic) => TaskPoll::Ready(Err(panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".into()))),
        }
    }
}

/// A reply buffer for a data answer of at most `limit` bytes.
fn data_out(limit: usize) -> DataOut<'static> {
    let mut out = DataOut::with_capacity(limit.min(1 << 20));
    out.reset(limit);
    out
}

/// A task's directory entries into the caller's.
fn copy_entries(sink: &mut DirEntries<'_, '_>, data: DataOut<'static>) -> FsResult<()> {
    sink.extend_encoded(data.as_slice());
    Ok(())
}

/// A task's data answer into the caller's buffer.
fn copy_data(sink: &mut DataOut<'_>, data: DataOut<'static>) -> FsResult<()> {
    sink.extend_from_slice(data.as_slice());
    Ok(())
}

fn answer_data(token: ReplyToken, out: DataOut<'static>) {
    token.data_out(out)
}

fn answer_ok(token: ReplyToken, (): ()) {
    token.ok()
}

/// The task of a request: `$body` runs with `fs` (the filesystem) and `c`
/// (an owned copy of the caller's context, lent as `&c.ctx()`). A caller
/// that cannot be answered later (direct mode calls the filesystem from
/// the application's thread, with `Ctx::internal`-like contexts) waits for
/// the task, and `$sync` turns its result into the method's (by default,
/// the same value).
macro_rules! later {
    ($self:ident, $ctx:ident, $answer:expr, |$fs:ident, $c:ident| $body:expr) => {
        later!($self, $ctx, $answer, |$fs, $c| $body, Ok)
    };
    ($self:ident, $ctx:ident, $answer:expr, |$fs:ident, $c:ident| $body:expr, $sync:expr) => {{
        if !$ctx.can_reply_later() {
            let $fs = $self.fs.clone();
            let $c = crate::later::OwnedCtx::detached($ctx);
            let value = $self.wait(async move { $body })?;
            #[allow(clippy::redundant_closure_call)]
            return ($sync)(value);
        }
        let token = $ctx.reply_later()?;
        let $fs = $self.fs.clone();
        let $c = token.owned_ctx($ctx);
        $self.spawn(token, async move { $body }, $answer);
        Err(Errno::LATER)
    }};
}

impl<A: AsyncFilesystem> Filesystem for AsyncAdapter<A> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.fs.init(conn, notifier)
    }

    fn destroy(&self) {
        self.fs.destroy()
    }

    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        self.fs.counters()
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        self.fs.forget(node, nlookup)
    }

    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        self.fs.batch_forget(nodes)
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        let name = name.to_owned();
        later!(self, ctx, ReplyToken::entry, |fs, c| fs
            .lookup(&c.ctx(), parent, &name)
            .await)
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        later!(self, ctx, ReplyToken::attr, |fs, c| fs
            .getattr(&c.ctx(), node, fh)
            .await)
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        let attr = *attr;
        later!(self, ctx, ReplyToken::attr, |fs, c| fs
            .setattr(&c.ctx(), node, &attr)
            .await)
    }

    fn readlink(&self, ctx: &Ctx, node: NodeId, sink: &mut DataOut) -> FsResult<()> {
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(libc::PATH_MAX as usize);
                fs.readlink(&c.ctx(), node, &mut out).await.map(|()| out)
            },
            |v: DataOut<'static>| copy_data(sink, v)
        )
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        let (name, target) = (name.to_owned(), target.to_owned());
        later!(self, ctx, ReplyToken::entry, |fs, c| fs
            .symlink(&c.ctx(), parent, &name, &target)
            .await)
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mknod) -> FsResult<Entry> {
        let (name, args) = (name.to_owned(), *args);
        later!(self, ctx, ReplyToken::entry, |fs, c| fs
            .mknod(&c.ctx(), parent, &name, &args)
            .await)
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mkdir) -> FsResult<Entry> {
        let (name, args) = (name.to_owned(), *args);
        later!(self, ctx, ReplyToken::entry, |fs, c| fs
            .mkdir(&c.ctx(), parent, &name, &args)
            .await)
    }

    fn unlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let name = name.to_owned();
        later!(self, ctx, answer_ok, |fs, c| fs
            .unlink(&c.ctx(), parent, &name)
            .await)
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let name = name.to_owned();
        later!(self, ctx, answer_ok, |fs, c| fs
            .rmdir(&c.ctx(), parent, &name)
            .await)
    }

    fn rename(&self, ctx: &Ctx, args: &Rename) -> FsResult<()> {
        let (parent, new_parent, flags) = (args.parent, args.new_parent, args.flags);
        let (name, new_name): (OsString, OsString) = (args.name.into(), args.new_name.into());
        later!(self, ctx, answer_ok, |fs, c| {
            let args = Rename {
                parent,
                name: &name,
                new_parent,
                new_name: &new_name,
                flags,
            };
            fs.rename(&c.ctx(), &args).await
        })
    }

    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let new_name = new_name.to_owned();
        later!(self, ctx, ReplyToken::entry, |fs, c| fs
            .link(&c.ctx(), node, new_parent, &new_name)
            .await)
    }

    fn open(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        let args = *args;
        later!(self, ctx, ReplyToken::opened, |fs, c| fs
            .open(&c.ctx(), node, &args)
            .await)
    }

    fn read(&self, ctx: &Ctx, node: NodeId, args: &Read, sink: &mut DataOut) -> FsResult<()> {
        let args = *args;
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(args.size as usize);
                fs.read(&c.ctx(), node, &args, &mut out).await.map(|()| out)
            },
            |v: DataOut<'static>| copy_data(sink, v)
        )
    }

    fn write(&self, ctx: &Ctx, node: NodeId, args: &Write) -> FsResult<u32> {
        let data = args.data.to_vec();
        let (fh, offset, flags, lock_owner, from_cache, kill_suidgid) = (
            args.fh,
            args.offset,
            args.flags,
            args.lock_owner,
            args.from_cache,
            args.kill_suidgid,
        );
        later!(self, ctx, ReplyToken::written, |fs, c| {
            let args = Write {
                fh,
                offset,
                data: &data,
                flags,
                lock_owner,
                from_cache,
                kill_suidgid,
            };
            fs.write(&c.ctx(), node, &args).await
        })
    }

    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        later!(self, ctx, answer_ok, |fs, c| fs
            .flush(&c.ctx(), node, fh, lock_owner)
            .await)
    }

    fn release(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        let args = *args;
        later!(self, ctx, answer_ok, |fs, c| fs
            .release(&c.ctx(), node, &args)
            .await)
    }

    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        later!(self, ctx, answer_ok, |fs, c| fs
            .fsync(&c.ctx(), node, fh, datasync)
            .await)
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        let args = *args;
        later!(self, ctx, ReplyToken::opened, |fs, c| fs
            .opendir(&c.ctx(), node, &args)
            .await)
    }

    fn readdir(&self, ctx: &Ctx, node: NodeId, args: &Read, sink: &mut DirEntries) -> FsResult<()> {
        let args = *args;
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(args.size as usize);
                let mut entries = DirEntries::new(&mut out, false);
                let r = fs.readdir(&c.ctx(), node, &args, &mut entries).await;
                r.map(|()| out)
            },
            |v: DataOut<'static>| copy_entries(sink, v)
        )
    }

    fn readdirplus(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Read,
        sink: &mut DirEntries,
    ) -> FsResult<()> {
        let args = *args;
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(args.size as usize);
                let mut entries = DirEntries::new(&mut out, true);
                let r = fs.readdirplus(&c.ctx(), node, &args, &mut entries).await;
                r.map(|()| out)
            },
            |v: DataOut<'static>| copy_entries(sink, v)
        )
    }

    fn releasedir(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        let args = *args;
        later!(self, ctx, answer_ok, |fs, c| fs
            .releasedir(&c.ctx(), node, &args)
            .await)
    }

    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        later!(self, ctx, answer_ok, |fs, c| fs
            .fsyncdir(&c.ctx(), node, fh, datasync)
            .await)
    }

    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        later!(self, ctx, ReplyToken::statfs, |fs, c| fs
            .statfs(&c.ctx(), node)
            .await)
    }

    fn setxattr(&self, ctx: &Ctx, node: NodeId, args: &Setxattr) -> FsResult<()> {
        let (name, value): (OsString, Vec<u8>) = (args.name.into(), args.value.to_vec());
        let (flags, setxattr_flags) = (args.flags, args.setxattr_flags);
        later!(self, ctx, answer_ok, |fs, c| {
            let args = Setxattr {
                name: &name,
                value: &value,
                flags,
                setxattr_flags,
            };
            fs.setxattr(&c.ctx(), node, &args).await
        })
    }

    fn getxattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        let (name, limit) = (name.to_owned(), out.limit());
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(limit);
                fs.getxattr(&c.ctx(), node, &name, &mut out)
                    .await
                    .map(|()| out)
            },
            |v: DataOut<'static>| copy_data(out, v)
        )
    }

    fn listxattr(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        let limit = out.limit();
        later!(
            self,
            ctx,
            answer_data,
            |fs, c| {
                let mut out = data_out(limit);
                fs.listxattr(&c.ctx(), node, &mut out).await.map(|()| out)
            },
            |v: DataOut<'static>| copy_data(out, v)
        )
    }

    fn removexattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        let name = name.to_owned();
        later!(self, ctx, answer_ok, |fs, c| fs
            .removexattr(&c.ctx(), node, &name)
            .await)
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        later!(self, ctx, answer_ok, |fs, c| fs
            .access(&c.ctx(), node, mask)
            .await)
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let (name, args) = (name.to_owned(), *args);
        later!(
            self,
            ctx,
            |t: ReplyToken, (e, o): (Entry, Opened)| t.created(e, o),
            |fs, c| fs.create(&c.ctx(), parent, &name, &args).await
        )
    }

    fn getlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock) -> FsResult<LockInfo> {
        let lock = *lock;
        later!(self, ctx, ReplyToken::lock, |fs, c| fs
            .getlk(&c.ctx(), node, &lock)
            .await)
    }

    fn setlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock, sleep: bool) -> FsResult<()> {
        let lock = *lock;
        later!(self, ctx, answer_ok, |fs, c| fs
            .setlk(&c.ctx(), node, &lock, sleep)
            .await)
    }

    fn bmap(&self, ctx: &Ctx, node: NodeId, block: u64, blocksize: u32) -> FsResult<u64> {
        later!(self, ctx, ReplyToken::bmap, |fs, c| fs
            .bmap(&c.ctx(), node, block, blocksize)
            .await)
    }

    fn ioctl(&self, ctx: &Ctx, node: NodeId, args: &Ioctl, sink: &mut DataOut) -> FsResult<i32> {
        let input = args.input.to_vec();
        let (fh, flags, cmd, arg, out_size) =
            (args.fh, args.flags, args.cmd, args.arg, args.out_size);
        later!(
            self,
            ctx,
            |t: ReplyToken, (result, out): (i32, DataOut<'static>)| t.ioctl(result, out.as_slice()),
            |fs, c| {
                let args = Ioctl {
                    fh,
                    flags,
                    cmd,
                    arg,
                    input: &input,
                    out_size,
                };
                let mut out = data_out(out_size as usize);
                fs.ioctl(&c.ctx(), node, &args, &mut out)
                    .await
                    .map(|r| (r, out))
            },
            |(result, out): (i32, DataOut<'static>)| copy_data(sink, out).map(|()| result)
        )
    }

    fn poll(&self, ctx: &Ctx, node: NodeId, args: &Poll) -> FsResult<u32> {
        let args = *args;
        later!(self, ctx, ReplyToken::poll, |fs, c| fs
            .poll(&c.ctx(), node, &args)
            .await)
    }

    fn fallocate(&self, ctx: &Ctx, node: NodeId, args: &Fallocate) -> FsResult<()> {
        let args = *args;
        later!(self, ctx, answer_ok, |fs, c| fs
            .fallocate(&c.ctx(), node, &args)
            .await)
    }

    fn lseek(&self, ctx: &Ctx, node: NodeId, args: &Lseek) -> FsResult<u64> {
        let args = *args;
        later!(self, ctx, ReplyToken::offset, |fs, c| fs
            .lseek(&c.ctx(), node, &args)
            .await)
    }

    fn copy_file_range(&self, ctx: &Ctx, args: &CopyFileRange) -> FsResult<u64> {
        let args = *args;
        later!(self, ctx, ReplyToken::copied, |fs, c| fs
            .copy_file_range(&c.ctx(), &args)
            .await)
    }

    fn syncfs(&self, ctx: &Ctx) -> FsResult<()> {
        later!(self, ctx, answer_ok, |fs, c| fs.syncfs(&c.ctx()).await)
    }

    fn tmpfile(&self, ctx: &Ctx, parent: NodeId, args: &Create) -> FsResult<(Entry, Opened)> {
        let args = *args;
        later!(
            self,
            ctx,
            |t: ReplyToken, (e, o): (Entry, Opened)| t.created(e, o),
            |fs, c| fs.tmpfile(&c.ctx(), parent, &args).await
        )
    }

    fn statx(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Statx,
    ) -> FsResult<(fusebox_abi::Statx, Duration)> {
        let args = *args;
        later!(
            self,
            ctx,
            |t: ReplyToken, (s, ttl): (fusebox_abi::Statx, Duration)| t.statx(s, ttl),
            |fs, c| fs.statx(&c.ctx(), node, &args).await
        )
    }
}

/// Any synchronous [`Filesystem`] as an [`AsyncFilesystem`] whose futures
/// are ready at once: one filesystem served both ways (and the way the
/// tests run the conformance and pjdfstest suites through the async path).
pub struct Ready<F>(pub F);

impl<F: Filesystem> AsyncFilesystem for Ready<F> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.0.init(conn, notifier)
    }
    fn destroy(&self) {
        self.0.destroy()
    }
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        self.0.counters()
    }
    fn forget(&self, node: NodeId, nlookup: u64) {
        self.0.forget(node, nlookup)
    }
    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        self.0.batch_forget(nodes)
    }
    async fn lookup(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        self.0.lookup(ctx, parent, name)
    }
    async fn getattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        self.0.getattr(ctx, node, fh)
    }
    async fn setattr(&self, ctx: &Ctx<'_>, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        self.0.setattr(ctx, node, attr)
    }
    async fn readlink(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.readlink(ctx, node, out)
    }
    async fn symlink(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        target: &OsStr,
    ) -> FsResult<Entry> {
        self.0.symlink(ctx, parent, name, target)
    }
    async fn mknod(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mknod,
    ) -> FsResult<Entry> {
        self.0.mknod(ctx, parent, name, args)
    }
    async fn mkdir(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mkdir,
    ) -> FsResult<Entry> {
        self.0.mkdir(ctx, parent, name, args)
    }
    async fn unlink(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.0.unlink(ctx, parent, name)
    }
    async fn rmdir(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.0.rmdir(ctx, parent, name)
    }
    async fn rename(&self, ctx: &Ctx<'_>, args: &Rename<'_>) -> FsResult<()> {
        self.0.rename(ctx, args)
    }
    async fn link(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        self.0.link(ctx, node, new_parent, new_name)
    }
    async fn open(&self, ctx: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.0.open(ctx, node, args)
    }
    async fn read(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.read(ctx, node, args, out)
    }
    async fn write(&self, ctx: &Ctx<'_>, node: NodeId, args: &Write<'_>) -> FsResult<u32> {
        self.0.write(ctx, node, args)
    }
    async fn flush(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        lock_owner: u64,
    ) -> FsResult<()> {
        self.0.flush(ctx, node, fh, lock_owner)
    }
    async fn release(&self, ctx: &Ctx<'_>, node: NodeId, args: &Release) -> FsResult<()> {
        self.0.release(ctx, node, args)
    }
    async fn fsync(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        self.0.fsync(ctx, node, fh, datasync)
    }
    async fn opendir(&self, ctx: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.0.opendir(ctx, node, args)
    }
    async fn readdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        self.0.readdir(ctx, node, args, out)
    }
    async fn readdirplus(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        self.0.readdirplus(ctx, node, args, out)
    }
    async fn releasedir(&self, ctx: &Ctx<'_>, node: NodeId, args: &Release) -> FsResult<()> {
        self.0.releasedir(ctx, node, args)
    }
    async fn fsyncdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        self.0.fsyncdir(ctx, node, fh, datasync)
    }
    async fn statfs(&self, ctx: &Ctx<'_>, node: NodeId) -> FsResult<Statfs> {
        self.0.statfs(ctx, node)
    }
    async fn setxattr(&self, ctx: &Ctx<'_>, node: NodeId, args: &Setxattr<'_>) -> FsResult<()> {
        self.0.setxattr(ctx, node, args)
    }
    async fn getxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        name: &OsStr,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.getxattr(ctx, node, name, out)
    }
    async fn listxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.listxattr(ctx, node, out)
    }
    async fn removexattr(&self, ctx: &Ctx<'_>, node: NodeId, name: &OsStr) -> FsResult<()> {
        self.0.removexattr(ctx, node, name)
    }
    async fn access(&self, ctx: &Ctx<'_>, node: NodeId, mask: i32) -> FsResult<()> {
        self.0.access(ctx, node, mask)
    }
    async fn create(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        self.0.create(ctx, parent, name, args)
    }
    async fn getlk(&self, ctx: &Ctx<'_>, node: NodeId, lock: &Lock) -> FsResult<LockInfo> {
        self.0.getlk(ctx, node, lock)
    }
    async fn setlk(&self, ctx: &Ctx<'_>, node: NodeId, lock: &Lock, sleep: bool) -> FsResult<()> {
        self.0.setlk(ctx, node, lock, sleep)
    }
    async fn bmap(&self, ctx: &Ctx<'_>, node: NodeId, block: u64, blocksize: u32) -> FsResult<u64> {
        self.0.bmap(ctx, node, block, blocksize)
    }
    async fn ioctl(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Ioctl<'_>,
        out: &mut DataOut<'static>,
    ) -> FsResult<i32> {
        self.0.ioctl(ctx, node, args, out)
    }
    async fn poll(&self, ctx: &Ctx<'_>, node: NodeId, args: &Poll) -> FsResult<u32> {
        self.0.poll(ctx, node, args)
    }
    async fn fallocate(&self, ctx: &Ctx<'_>, node: NodeId, args: &Fallocate) -> FsResult<()> {
        self.0.fallocate(ctx, node, args)
    }
    async fn lseek(&self, ctx: &Ctx<'_>, node: NodeId, args: &Lseek) -> FsResult<u64> {
        self.0.lseek(ctx, node, args)
    }
    async fn copy_file_range(&self, ctx: &Ctx<'_>, args: &CopyFileRange) -> FsResult<u64> {
        self.0.copy_file_range(ctx, args)
    }
    async fn syncfs(&self, ctx: &Ctx<'_>) -> FsResult<()> {
        self.0.syncfs(ctx)
    }
    async fn tmpfile(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        self.0.tmpfile(ctx, parent, args)
    }
    async fn statx(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Statx,
    ) -> FsResult<(fusebox_abi::Statx, Duration)> {
        self.0.statx(ctx, node, args)
    }
}
