//! Replies that come later.
//!
//! A handler that cannot answer at once (a network round trip, a disk
//! queue, a timer) takes its request's [`ReplyToken`] with
//! [`Ctx::reply_later`](Ctx::reply_later), returns
//! [`Errno::LATER`], and answers from any thread when the result is known.
//! The serving thread goes straight back to the next request: a classic
//! worker reads /dev/fuse again, an io_uring queue thread keeps the ring
//! entry aside (it is the request's reply buffer) and serves its other
//! entries. The answer travels back through the transport's `LaterSink`:
//! on /dev/fuse it is written at once, from the answering thread, on the
//! fd the request was read from; over io_uring it is handed to the queue
//! thread (a channel and an eventfd wake-up) and committed on its ring
//! with the other commits of that wake-up.
//!
//! A filesystem that answers at once never touches any of this: taking a
//! token is the only thing that costs (one allocation and one map insert,
//! for INTERRUPT to find the request).
//!
//! ```no_run
//! use std::ffi::OsStr;
//! use fusebox::fs::ops::{Ctx, Read};
//! use fusebox::protocol::DataOut;
//! use fusebox::*;
//!
//! struct Remote;
//!
//! impl Filesystem for Remote {
//!     fn read(&self, ctx: &Ctx, node: NodeId, args: &Read, _out: &mut DataOut) -> FsResult<()> {
//!         let token = ctx.reply_later()?;
//!         let (offset, size) = (args.offset, args.size as usize);
//!         std::thread::spawn(move || {
//!             // ... ask the server; meanwhile this mount serves other requests.
//!             let bytes = vec![0u8; size];
//!             if token.interrupted() {
//!                 token.error(Errno::EINTR);
//!             } else {
//!                 token.data(&bytes);
//!             }
//!         });
//!         Err(Errno::LATER)
//!     }
//! }
//! ```

mod ctx;

pub use ctx::Ctx;

use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fusebox_abi::{self as abi, Opcode};

use crate::error::Errno;
use crate::protocol::outcome::Outcome;
use crate::protocol::DataOut;
pub use crate::stats::LaterTotals;
use crate::stats::WorkerStats;
use crate::types::{AttrReply, Entry, LockInfo, Opened, Statfs};

/// Where a transport wants a later answer delivered: the ring entry and the
/// commit id it must quote (io_uring); unused on /dev/fuse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryRef {
    /// Index of the ring entry that holds the request.
    pub entry: usize,
    /// The id the kernel gave that entry, quoted when committing the answer.
    pub commit_id: u64,
}

/// An answer on its way to the transport.
pub(crate) struct LaterReply {
    pub unique: u64,
    pub opcode: Opcode,
    pub result: Result<Outcome, Errno>,
    pub data: DataOut<'static>,
    pub at: EntryRef,
}

/// A transport's way back for later answers. Called from any thread.
pub(crate) trait LaterSink: Send + Sync {
    fn deliver(&self, reply: LaterReply);
}

/// What a token must know of its request to build the reply.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReplyShape {
    /// Most data bytes the kernel accepts (READ, READDIR, READLINK, ...).
    pub limit: usize,
    /// GETXATTR/LISTXATTR: the size asked for (0 = "how big is it").
    pub xattr_size: Option<u32>,
    /// COPY_FILE_RANGE_64 rather than COPY_FILE_RANGE.
    pub wide_copy: bool,
}

/// Per-request state shared by the token and the registry that INTERRUPT
/// searches.
pub(crate) struct RequestState {
    unique: u64,
    /// Holds `unique` once interrupted (the same shape as a worker's slot, so
    /// a [`Ctx`] can point at either).
    pub(crate) interrupted: AtomicU64,
    on_interrupt: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl RequestState {
    fn mark_interrupted(&self) {
        self.interrupted.store(self.unique, Ordering::Release);
        let callbacks = std::mem::take(
            &mut *self
                .on_interrupt
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for f in callbacks {
            f();
        }
    }

    fn is_interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Acquire) == self.unique
    }
}

/// Limits on what requests answered later may hold.
#[derive(Clone, Copy, Debug)]
pub struct LaterLimits {
    /// Requests taken for later and not yet answered. A classic worker that
    /// finds the session at the limit stops reading until one is answered
    /// (io_uring needs no such rule: its entries are the bound).
    pub max_pending: usize,
    /// Bytes of those requests as the kernel sent them (WRITE data counts).
    pub max_pending_bytes: usize,
}

impl Default for LaterLimits {
    fn default() -> Self {
        LaterLimits {
            max_pending: 65_536,
            max_pending_bytes: 256 << 20,
        }
    }
}

/// What one serving thread is answering right now, so INTERRUPT can find it
/// without a shared map (and without a lock).
#[derive(Default)]
pub(crate) struct InflightSlot {
    pub current: AtomicU64,
    pub interrupted: AtomicU64,
}

/// Requests read and not yet answered, session-wide: those a serving
/// thread is in the middle of (one slot per thread, written by that thread
/// only) and those taken for later (a registry, for INTERRUPT to find them;
/// counts, for `fusebox stats` and the memory bound), with the statistics
/// of the later answers.
pub struct InFlight {
    pub(crate) slots: Box<[InflightSlot]>,
    pending: Mutex<HashMap<u64, Arc<RequestState>>>,
    count: AtomicUsize,
    bytes: AtomicUsize,
    peak: AtomicUsize,
    taken: AtomicU64,
    dropped: AtomicU64,
    mismatched: AtomicU64,
    limits: LaterLimits,
    /// Workers waiting for the pending count to fall below the limits.
    waiters: AtomicUsize,
    below_limit: Condvar,
    wait_lock: Mutex<()>,
    /// Answers given later, recorded by whichever thread answered (the
    /// per-worker tables have one writer each; this one is shared).
    pub(crate) stats: Arc<WorkerStats>,
}

impl InFlight {
    /// Bookkeeping for `threads` serving threads.
    pub fn new(threads: usize, limits: LaterLimits) -> InFlight {
        InFlight {
            slots: (0..threads.max(1))
                .map(|_| InflightSlot::default())
                .collect(),
            pending: Mutex::new(HashMap::new()),
            count: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            taken: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            mismatched: AtomicU64::new(0),
            limits,
            waiters: AtomicUsize::new(0),
            below_limit: Condvar::new(),
            wait_lock: Mutex::new(()),
            stats: Arc::new(WorkerStats::new("later")),
        }
    }

    /// Serving threads in the middle of a request.
    pub fn busy(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.current.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// Counts of requests in flight and answered later, for `fusebox stats`.
    pub fn totals(&self) -> LaterTotals {
        let pending = self.count.load(Ordering::Relaxed) as u64;
        let now = pending + self.busy() as u64;
        LaterTotals {
            in_flight: now,
            in_flight_peak: (self.peak.load(Ordering::Relaxed) as u64).max(now),
            pending,
            taken: self.taken.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            mismatched: self.mismatched.load(Ordering::Relaxed),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<RequestState>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// INTERRUPT for `target`: true if it is pending here.
    pub(crate) fn interrupt(&self, target: u64) -> bool {
        let state = self.registry().get(&target).cloned();
        match state {
            Some(s) => {
                s.mark_interrupted();
                true
            }
            None => false,
        }
    }

    fn over_limit(&self) -> bool {
        self.count.load(Ordering::Acquire) >= self.limits.max_pending
            || self.bytes.load(Ordering::Acquire) >= self.limits.max_pending_bytes
    }

    /// Block a classic worker while the pending requests are at a limit,
    /// until one is answered or `device` reports the connection gone.
    pub(crate) fn wait_below_limit(&self, device: BorrowedFd<'_>) {
        if !self.over_limit() {
            return;
        }
        tracing::debug!(
            pending = self.count.load(Ordering::Relaxed),
            bytes = self.bytes.load(Ordering::Relaxed),
            "pending-request limit reached; this worker stops reading until one is answered"
        );
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self
            .wait_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while self.over_limit() && !crate::device::device_gone(device) {
            guard = self
                .below_limit
                .wait_timeout(guard, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn release(&self, unique: u64, bytes: usize) {
        self.registry().remove(&unique);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.count.fetch_sub(1, Ordering::AcqRel);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self
                .wait_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.below_limit.notify_all();
        }
    }
}

/// What `Ctx::reply_later` needs from the dispatcher, built on the serving
/// thread's stack for every request (nothing is allocated unless a token is
/// taken).
pub(crate) struct LaterRoute<'a> {
    pub sink: &'a Arc<dyn LaterSink>,
    pub at: EntryRef,
    pub inflight: &'a Arc<InFlight>,
    pub opcode: Opcode,
    pub start: Instant,
    pub shape: ReplyShape,
    pub request_bytes: usize,
    /// The serving worker's interrupt flag, to carry over an INTERRUPT that
    /// came before the token was taken.
    pub slot_interrupted: &'a AtomicU64,
    pub taken: AtomicBool,
}

impl std::fmt::Debug for LaterRoute<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaterRoute")
            .field("at", &self.at)
            .field("opcode", &self.opcode)
            .finish_non_exhaustive()
    }
}

impl LaterRoute<'_> {
    pub(crate) fn take(&self, unique: u64) -> Result<ReplyToken, Errno> {
        if self.taken.swap(true, Ordering::AcqRel) {
            tracing::error!(unique, opcode = ?self.opcode, "reply_later called twice for one request");
            return Err(Errno::EIO);
        }
        let state = Arc::new(RequestState {
            unique,
            interrupted: AtomicU64::new(0),
            on_interrupt: Mutex::new(Vec::new()),
        });
        let later = self.inflight;
        match later.registry().entry(unique) {
            MapEntry::Occupied(mut o) => {
                // A unique still pending from before: the kernel reused it,
                // so the old request was abandoned (aborted connection).
                o.insert(state.clone());
            }
            MapEntry::Vacant(v) => {
                v.insert(state.clone());
            }
        }
        // SeqCst pairs with the dispatcher's INTERRUPT: it marks the slot and
        // then searches the registry, this inserted and now reads the slot.
        if self.slot_interrupted.load(Ordering::SeqCst) == unique {
            state.mark_interrupted();
        }
        let now = later.count.fetch_add(1, Ordering::AcqRel) + 1;
        later.peak.fetch_max(now + later.busy(), Ordering::Relaxed);
        later.bytes.fetch_add(self.request_bytes, Ordering::AcqRel);
        later.taken.fetch_add(1, Ordering::Relaxed);
        Ok(ReplyToken {
            inner: Some(TokenInner {
                unique,
                opcode: self.opcode,
                start: self.start,
                shape: self.shape,
                request_bytes: self.request_bytes,
                sink: self.sink.clone(),
                at: self.at,
                later: later.clone(),
                state,
            }),
        })
    }
}

/// The right to answer one request, taken with
/// [`Ctx::reply_later`](Ctx::reply_later).
///
/// `Send`: answer from any thread. Every answering method consumes the
/// token, so a request is answered exactly once; a token dropped without an
/// answer answers EIO (and is counted as dropped in `fusebox stats`). The
/// answer must be of the kind the request expects ([`ReplyToken::entry`]
/// for LOOKUP, MKDIR, ...; [`ReplyToken::data`] for READ, READDIR,
/// READLINK, GETXATTR, ...); one of another kind is answered EIO and
/// logged, never sent malformed.
pub struct ReplyToken {
    inner: Option<TokenInner>,
}

struct TokenInner {
    unique: u64,
    opcode: Opcode,
    start: Instant,
    shape: ReplyShape,
    request_bytes: usize,
    sink: Arc<dyn LaterSink>,
    at: EntryRef,
    later: Arc<InFlight>,
    state: Arc<RequestState>,
}

impl std::fmt::Debug for ReplyToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(i) => f
                .debug_struct("ReplyToken")
                .field("unique", &i.unique)
                .field("opcode", &i.opcode)
                .finish(),
            None => f.write_str("ReplyToken(answered)"),
        }
    }
}

/// Whether a request answered later was interrupted, and callbacks for
/// when it is; held apart from its [`ReplyToken`].
#[derive(Clone)]
pub struct InterruptHandle(Arc<RequestState>);

impl InterruptHandle {
    /// True once the kernel sent an INTERRUPT for the request.
    pub fn interrupted(&self) -> bool {
        self.0.is_interrupted()
    }

    /// Run `f` when the application gives up on the request: on the thread
    /// that received the INTERRUPT, or here and now if it already came. So
    /// call it with no lock held that `f` takes: a token kept in a mutex
    /// is put there first, and `f` takes it out to answer EINTR.
    pub fn on_interrupt(&self, f: impl FnOnce() + Send + 'static) {
        let state = &self.0;
        let mut callbacks = state
            .on_interrupt
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.is_interrupted() {
            drop(callbacks);
            f();
        } else {
            callbacks.push(Box::new(f));
        }
    }
}

/// The caller's identity, owned, for work that outlives the handler call
/// (the async API): [`OwnedCtx::ctx`] lends a [`Ctx`].
#[derive(Clone)]
pub struct OwnedCtx {
    /// The request's id (`fuse_in_header.unique`).
    pub unique: u64,
    /// The caller's filesystem uid.
    pub uid: u32,
    /// The caller's filesystem gid.
    pub gid: u32,
    /// The calling thread's id, or 0.
    pub pid: u32,
    state: Option<Arc<RequestState>>,
}

impl OwnedCtx {
    /// A copy of `ctx` for work answered by returning (no reply token: no
    /// interrupt to follow).
    pub fn detached(ctx: &Ctx<'_>) -> OwnedCtx {
        OwnedCtx {
            unique: ctx.unique,
            uid: ctx.uid,
            gid: ctx.gid,
            pid: ctx.pid,
            state: None,
        }
    }

    /// A [`Ctx`] for the filesystem's methods; its
    /// `interrupted()` follows the request's INTERRUPT, if it has a token.
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx {
            unique: self.unique,
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            interrupt_slot: self.state.as_ref().map(|s| &s.interrupted),
            later: None,
        }
    }
}

impl ReplyToken {
    fn inner(&self) -> &TokenInner {
        self.inner
            .as_ref()
            .expect("a token is answered only by consuming it")
    }

    /// The request's `unique` (as in the kernel's header).
    pub fn unique(&self) -> u64 {
        self.inner().unique
    }

    /// Which request this token answers.
    pub fn opcode(&self) -> Opcode {
        self.inner().opcode
    }

    /// The most data bytes the request accepts (READ's and READDIR's size,
    /// READLINK's PATH_MAX, ...): reset a `DataOut` to it before building
    /// directory entries into it, so none is cut in half.
    pub fn size_limit(&self) -> usize {
        self.inner().shape.limit
    }

    /// GETXATTR/LISTXATTR: the buffer size the caller gave (0 asks for the
    /// size only); None for other requests.
    pub fn xattr_size_asked(&self) -> Option<u32> {
        self.inner().shape.xattr_size
    }

    /// True once the application gave up on the request (a signal). A
    /// filesystem may then stop early and answer `Errno::EINTR`.
    pub fn interrupted(&self) -> bool {
        self.inner().state.is_interrupted()
    }

    /// Run `f` (on the thread that received the INTERRUPT, or here and now
    /// if it already came) when the application gives up on the request.
    /// Keep it short: it runs on a serving thread.
    pub fn on_interrupt(&self, f: impl FnOnce() + Send + 'static) {
        self.interrupt_handle().on_interrupt(f)
    }

    /// The request's interrupt state, apart from the token: for a callback
    /// that must reach the token where it is kept (see
    /// [`InterruptHandle::on_interrupt`]).
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle(self.inner().state.clone())
    }

    /// The caller's identity, to keep past the handler call.
    pub fn owned_ctx(&self, ctx: &Ctx<'_>) -> OwnedCtx {
        OwnedCtx {
            unique: ctx.unique,
            uid: ctx.uid,
            gid: ctx.gid,
            pid: ctx.pid,
            state: Some(self.inner().state.clone()),
        }
    }

    /// Fail the request with `e`.
    pub fn error(self, e: Errno) {
        self.send(Err(e), DataOut::default());
    }

    /// `Ok(v)` goes to `answer`, an error to [`ReplyToken::error`]:
    /// `token.result(r, ReplyToken::entry)`.
    pub fn result<T>(self, r: Result<T, Errno>, answer: impl FnOnce(ReplyToken, T)) {
        match r {
            Ok(v) => answer(self, v),
            Err(e) => self.error(e),
        }
    }

    /// Success with no data: UNLINK, RMDIR, RENAME, RELEASE, FLUSH, FSYNC,
    /// SETXATTR, REMOVEXATTR, ACCESS, SETLK, FALLOCATE, SYNCFS, ...
    pub fn ok(self) {
        self.send(Ok(Outcome::Empty), DataOut::default());
    }

    /// LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
    pub fn entry(self, e: Entry) {
        self.send(Ok(Outcome::Entry(e.to_abi())), DataOut::default());
    }

    /// GETATTR, SETATTR.
    pub fn attr(self, a: AttrReply) {
        self.send(
            Ok(crate::protocol::outcome::attr_out(a)),
            DataOut::default(),
        );
    }

    /// OPEN, OPENDIR.
    pub fn opened(self, o: Opened) {
        self.send(
            Ok(Outcome::Open(crate::protocol::outcome::open_out(o))),
            DataOut::default(),
        );
    }

    /// CREATE, TMPFILE.
    pub fn created(self, e: Entry, o: Opened) {
        self.send(
            Ok(Outcome::Create(
                e.to_abi(),
                crate::protocol::outcome::open_out(o),
            )),
            DataOut::default(),
        );
    }

    /// WRITE: how many bytes were written.
    pub fn written(self, n: u32) {
        self.send(
            Ok(Outcome::Write(abi::WriteOut {
                size: n,
                padding: 0,
            })),
            DataOut::default(),
        );
    }

    /// READ, READLINK, READDIR/READDIRPLUS (entries encoded with
    /// [`DirEntries`](crate::protocol::DirEntries) over a `DataOut` reset
    /// to [`ReplyToken::size_limit`]),
    /// GETXATTR, LISTXATTR. Data beyond what the kernel asked for is cut
    /// off; for the xattr requests a size query is answered with the size
    /// and a value too long for the caller's buffer with ERANGE.
    pub fn data(self, bytes: &[u8]) {
        let mut out = DataOut::with_capacity(bytes.len());
        out.extend_from_slice(bytes);
        self.data_out(out);
    }

    /// [`ReplyToken::data`] without a copy.
    pub fn data_out(self, mut out: DataOut<'static>) {
        let shape = self.inner().shape;
        out.set_limit(shape.limit);
        let result = match shape.xattr_size {
            Some(requested) => crate::protocol::outcome::xattr_reply(requested, &out),
            None => Ok(Outcome::Data),
        };
        self.send(result, out);
    }

    /// GETXATTR/LISTXATTR asked for the size only (size 0): it is `size`.
    /// Asked for the value itself, a size is no answer: ERANGE, logged.
    pub fn xattr_size(self, size: u32) {
        let result = match self.inner().shape.xattr_size {
            Some(0) => Ok(Outcome::XattrSize(abi::GetxattrOut { size, padding: 0 })),
            Some(_) => {
                tracing::error!(
                    unique = self.unique(),
                    "an xattr size given where the value was asked for; answering ERANGE"
                );
                Err(Errno::ERANGE)
            }
            None => {
                self.inner()
                    .later
                    .mismatched
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    unique = self.unique(),
                    opcode = ?self.opcode(),
                    "an xattr size given for a request that is not GETXATTR or LISTXATTR; answering EIO"
                );
                Err(Errno::EIO)
            }
        };
        self.send(result, DataOut::default());
    }

    /// STATFS.
    pub fn statfs(self, s: Statfs) {
        self.send(
            Ok(crate::protocol::outcome::statfs_out(s)),
            DataOut::default(),
        );
    }

    /// GETLK: the conflicting lock, or one of type F_UNLCK.
    pub fn lock(self, l: LockInfo) {
        self.send(Ok(crate::protocol::outcome::lk_out(l)), DataOut::default());
    }

    /// BMAP.
    pub fn bmap(self, block: u64) {
        self.send(
            Ok(Outcome::Bmap(abi::BmapOut { block })),
            DataOut::default(),
        );
    }

    /// IOCTL: the call's result and its output data.
    pub fn ioctl(self, result: i32, output: &[u8]) {
        let mut out = DataOut::with_capacity(output.len());
        out.extend_from_slice(output);
        let limit = self.inner().shape.limit;
        out.set_limit(limit);
        self.send(
            Ok(Outcome::Ioctl(abi::IoctlOut {
                result,
                flags: 0,
                in_iovs: 0,
                out_iovs: 0,
            })),
            out,
        );
    }

    /// POLL: the ready events.
    pub fn poll(self, revents: u32) {
        self.send(
            Ok(Outcome::Poll(abi::PollOut {
                revents,
                padding: 0,
            })),
            DataOut::default(),
        );
    }

    /// LSEEK: the new offset.
    pub fn offset(self, offset: u64) {
        self.send(
            Ok(Outcome::Lseek(abi::LseekOut { offset })),
            DataOut::default(),
        );
    }

    /// COPY_FILE_RANGE: bytes copied.
    pub fn copied(self, n: u64) {
        let wide = self.inner().shape.wide_copy;
        self.send(
            Ok(crate::protocol::outcome::copy_out(n, wide)),
            DataOut::default(),
        );
    }

    /// STATX.
    pub fn statx(self, stat: abi::Statx, ttl: Duration) {
        self.send(
            Ok(crate::protocol::outcome::statx_out(stat, ttl)),
            DataOut::default(),
        );
    }

    fn send(mut self, result: Result<Outcome, Errno>, data: DataOut<'static>) {
        if let Some(inner) = self.inner.take() {
            inner.deliver(result, data, false);
        }
    }
}

impl TokenInner {
    fn deliver(self, result: Result<Outcome, Errno>, data: DataOut<'static>, dropped: bool) {
        let result = match result {
            Ok(o) if !crate::protocol::outcome::fits(self.opcode, &o) => {
                self.later.mismatched.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    unique = self.unique,
                    opcode = ?self.opcode,
                    answer = o.kind(),
                    "a later answer of the wrong kind for its request; answering EIO"
                );
                Err(Errno::EIO)
            }
            r => r,
        };
        if dropped {
            self.later.dropped.fetch_add(1, Ordering::Relaxed);
        }
        // Recorded before the answer leaves, as for answers given at once.
        self.later
            .stats
            .record_shared(self.opcode, self.start.elapsed(), result.is_err());
        self.later.release(self.unique, self.request_bytes);
        self.sink.deliver(LaterReply {
            unique: self.unique,
            opcode: self.opcode,
            result,
            data,
            at: self.at,
        });
    }
}

impl Drop for ReplyToken {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            tracing::warn!(
                unique = inner.unique,
                opcode = ?inner.opcode,
                "reply token dropped without an answer; answering EIO"
            );
            inner.deliver(Err(Errno::EIO), DataOut::default(), true);
        }
    }
}

/// Answers given later go out at once, from the answering thread, on the fd
/// the request was read from: the kernel looks a reply's request up among
/// those read through the fd it is written to.
impl LaterSink for crate::device::DevChannel {
    fn deliver(&self, r: LaterReply) {
        let data = crate::protocol::ReplyData::Buffer(&r.data);
        if let Err(e) = crate::protocol::outcome::send_outcome(r.unique, r.result, data, self) {
            // ENOENT: interrupted and forgotten; ENODEV/ECONNABORTED: the
            // mount is gone. Either way nobody waits for this answer.
            tracing::debug!(unique = r.unique, opcode = ?r.opcode, error = %e, "later answer not delivered");
        }
    }
}
