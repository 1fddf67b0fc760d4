//! From a parsed request to a filesystem call to a reply: one exhaustive
//! match, shared by every transport.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use fusebox_abi as abi;
use fusebox_abi::Opcode;

use crate::error::Errno;
use crate::fs::ops::Ctx;
use crate::fs::Filesystem;
use crate::later::{EntryRef, InFlight, LaterLimits, LaterRoute, LaterSink, ReplyShape};
use crate::protocol::opcodes::{self, Answer, Limit, OpFacts};
use crate::protocol::outcome::{
    attr_out, copy_out, entry_out, lk_out, open_out, send_outcome, statfs_out, statx_out,
    xattr_reply, Outcome,
};
use crate::protocol::references::{Expected, ReferenceBook};
use crate::protocol::{
    parse_contiguous, parse_header, parse_split, DataOut, DirEntries, Notifier, Op, ParseConfig,
    ReplyData, ReplySink, Request,
};
use crate::recovery::failpoint::{self, Point};
use crate::recovery::journal;
use crate::recovery::ledger::Ledger;
use crate::stats::WorkerStats;
use crate::types::NodeId;

/// Per-worker state the dispatcher needs: reply buffer, stats, inflight
/// slot, the way back for answers given later; and the thread-policy guard
/// its transport loop reports to.
pub struct Worker {
    /// The reply buffer, kept between requests so they allocate nothing.
    pub data: DataOut<'static>,
    /// This worker's counts and latency histograms.
    pub stats: Arc<WorkerStats>,
    /// This worker's slot in [`InFlight`], where an INTERRUPT finds the
    /// request it names.
    pub slot: usize,
    /// The thread-policy registration [`Worker::served`] reports to, if the
    /// session has a policy.
    pub guard: Option<crate::thread_policy::Guarded>,
    /// Where answers given later go (the worker's /dev/fuse fd, its ring's
    /// mailbox); without one, `Ctx::reply_later` fails with ENOSYS.
    pub(crate) later: Option<Arc<dyn LaterSink>>,
}

impl Worker {
    /// A worker whose handlers answer at once only (tests, fuzzing).
    pub fn new(data: DataOut<'static>, stats: Arc<WorkerStats>, slot: usize) -> Worker {
        Worker {
            data,
            stats,
            slot,
            guard: None,
            later: None,
        }
    }

    /// The transport served a batch of requests.
    #[inline]
    pub fn served(&self) {
        if let Some(g) = &self.guard {
            g.touch();
        }
    }
}

/// Turns parsed requests into calls on the filesystem `F` and their
/// results into replies: one per session, shared by its serving threads.
pub struct Dispatcher<F> {
    fs: Arc<F>,
    parse: ParseConfig,
    notifier: Notifier,
    inflight: Arc<InFlight>,
    /// INTERRUPTs whose target no worker had published yet (read on another
    /// fd or queue, not yet started). Checked by `process` only while
    /// non-empty, so the hot path touches one atomic, not the lock.
    early_interrupts: Mutex<VecDeque<u64>>,
    early_count: AtomicUsize,
    destroyed: AtomicBool,
    /// Under a supervisor: what the kernel holds, kept for the next server.
    ledger: Option<Arc<Ledger>>,
    /// Told what each answer hands out or takes back, beside the ledger:
    /// another server's books (direct mode's per-process ones).
    book: Option<Arc<dyn ReferenceBook>>,
}

/// How many early interrupts to remember (targets that already finished
/// are never claimed; the oldest are dropped).
const EARLY_INTERRUPTS: usize = 64;

/// A request whose filesystem call is done and whose reply is not yet sent
/// (or will be sent later, by a [`crate::ReplyToken`]).
pub struct Pending {
    unique: u64,
    opcode: Opcode,
    start: Instant,
    result: Result<Outcome, Errno>,
    /// Its journal record (a supervised session's non-idempotent
    /// request), released once the answer is written.
    journal: Option<usize>,
}

impl Pending {
    /// False for requests the kernel expects no answer to.
    pub fn needs_reply(&self) -> bool {
        !matches!(self.result, Ok(Outcome::NoReply | Outcome::Later))
    }

    /// The handler took the reply token: the answer comes later, through
    /// the worker's `LaterSink`, and the transport must keep whatever the
    /// answer needs (a ring entry) until then.
    pub fn answered_later(&self) -> bool {
        matches!(self.result, Ok(Outcome::Later))
    }
}

/// What a later answer needs to know of its request (taken before the call,
/// which consumes the parsed op).
fn reply_shape(facts: &OpFacts, op: &Op<'_>) -> ReplyShape {
    let requested = op.requested_size().unwrap_or(0);
    ReplyShape {
        limit: match facts.limit {
            Limit::None => 0,
            Limit::Requested => requested as usize,
            Limit::PathMax => libc::PATH_MAX as usize,
            // Asked for the size only: the value still has to be read whole.
            Limit::Xattr if requested == 0 => 64 << 10,
            Limit::Xattr => requested as usize,
        },
        xattr_size: (facts.limit == Limit::Xattr).then_some(requested),
        wide_copy: facts.answer == Answer::Copied64,
    }
}

impl<F: Filesystem> Dispatcher<F> {
    /// A dispatcher for `workers` serving threads, with bookkeeping of its own
    /// for requests in flight.
    pub fn new(
        fs: Arc<F>,
        parse: ParseConfig,
        notifier: Notifier,
        workers: usize,
    ) -> Dispatcher<F> {
        let inflight = Arc::new(InFlight::new(workers, LaterLimits::default()));
        Dispatcher::with_inflight(fs, parse, notifier, inflight)
    }

    /// A dispatcher whose bookkeeping of requests in flight (one slot per
    /// serving thread, and the requests answered later) the session shares.
    pub fn with_inflight(
        fs: Arc<F>,
        parse: ParseConfig,
        notifier: Notifier,
        inflight: Arc<InFlight>,
    ) -> Dispatcher<F> {
        Dispatcher {
            fs,
            parse,
            notifier,
            inflight,
            early_interrupts: Mutex::new(VecDeque::new()),
            early_count: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
            ledger: None,
            book: None,
        }
    }

    /// Record node references and open handles in `ledger` (a supervised
    /// session, see `recovery`).
    pub fn with_ledger(mut self, ledger: Arc<Ledger>) -> Dispatcher<F> {
        self.ledger = Some(ledger);
        self
    }

    /// Tell `book` every node reference and handle an answer hands out,
    /// and every FORGET and RELEASE, as the ledger is told (see
    /// [`crate::protocol::references`]); for a server that keeps books of
    /// its own. The ledger, if there is one, is told as well.
    pub fn with_reference_book(mut self, book: Arc<dyn ReferenceBook>) -> Dispatcher<F> {
        self.book = Some(book);
        self
    }

    /// The filesystem's `destroy`, once: on DESTROY, or when the session
    /// ends without one (the kernel sends DESTROY only to fuseblk mounts,
    /// and not after an abort or a lazy unmount).
    pub fn destroy_once(&self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.fs.destroy();
        }
    }

    /// The filesystem served.
    pub fn filesystem(&self) -> &Arc<F> {
        &self.fs
    }

    /// The bookkeeping of requests in flight, shared with the session.
    pub fn inflight(&self) -> &Arc<InFlight> {
        &self.inflight
    }

    /// Serve a request that arrived in one buffer (/dev/fuse).
    pub fn dispatch_contiguous(&self, buf: &[u8], w: &mut Worker, sink: &dyn ReplySink) {
        let pending = match parse_contiguous(buf, self.parse) {
            Ok(req) => self.process_into(req, Instant::now(), EntryRef::default(), w, None),
            Err(e) => Self::rejected(parse_header(buf).ok(), e),
        };
        self.finish(pending, w, sink);
    }

    /// Serve a request whose fixed arguments and payload arrived apart
    /// (io_uring). Only the call happens here; the transport answers with
    /// [`Dispatcher::finish`] once it may write into the buffers the
    /// request was borrowed from. Reply data goes to `out` if given (a
    /// buffer the transport lends, see [`DataOut::lent`]), else to the
    /// worker's own. `received` is when the transport saw the request (its
    /// service time starts there): a ring thread reads the clock once per
    /// wake-up for the whole batch, not once per request. `at` is what the
    /// transport needs to place an answer given later (the ring entry).
    #[allow(clippy::too_many_arguments)]
    pub fn process_split(
        &self,
        header: abi::InHeader,
        args: &[u8],
        payload: &[u8],
        received: Instant,
        at: EntryRef,
        w: &mut Worker,
        out: Option<&mut DataOut<'_>>,
    ) -> Pending {
        match parse_split(header, args, payload, self.parse) {
            Ok(req) => self.process_into(req, received, at, w, out),
            Err(e) => Self::rejected(Some(header), e),
        }
    }

    /// A malformed request: answered EINVAL if it has a usable header (and
    /// expects an answer), logged either way. Never fatal.
    fn rejected(header: Option<abi::InHeader>, e: crate::protocol::ParseError) -> Pending {
        let start = Instant::now();
        match header {
            Some(h) => {
                let opcode = Opcode(h.opcode);
                tracing::warn!(unique = h.unique, ?opcode, error = %e, "malformed request");
                let result = if !opcodes::facts(opcode).answered() {
                    Ok(Outcome::NoReply)
                } else {
                    Err(e.errno())
                };
                Pending {
                    unique: h.unique,
                    opcode,
                    start,
                    result,
                    journal: None,
                }
            }
            None => {
                tracing::warn!(error = %e, "unparseable request dropped");
                Pending {
                    unique: 0,
                    opcode: Opcode(0),
                    start,
                    result: Ok(Outcome::NoReply),
                    journal: None,
                }
            }
        }
    }

    /// Parse-to-reply for one request on the calling worker.
    pub fn handle(&self, req: Request<'_>, w: &mut Worker, sink: &dyn ReplySink) {
        let pending = self.process(req, w);
        self.finish(pending, w, sink);
    }

    /// Call the filesystem. The result holds no borrow of the request.
    pub fn process(&self, req: Request<'_>, w: &mut Worker) -> Pending {
        self.process_into(req, Instant::now(), EntryRef::default(), w, None)
    }

    fn process_into(
        &self,
        req: Request<'_>,
        start: Instant,
        at: EntryRef,
        w: &mut Worker,
        out: Option<&mut DataOut<'_>>,
    ) -> Pending {
        let opcode = req.opcode();
        let facts = opcodes::facts(opcode);
        let unique = req.unique();
        let slots = &self.inflight.slots;
        let slot = &slots[w.slot % slots.len()];
        // SeqCst pairs with `interrupt`: either it sees this slot, or this
        // request sees its early record.
        slot.current.store(unique, Ordering::SeqCst);
        if self.early_count.load(Ordering::SeqCst) > 0 {
            self.claim_early_interrupt(unique, slot);
        }

        // Built on the stack for every request; only a handler that takes
        // its token pays for anything more.
        let route = w.later.as_ref().map(|sink| LaterRoute {
            sink,
            at,
            inflight: &self.inflight,
            opcode,
            start,
            shape: reply_shape(facts, &req.op),
            request_bytes: req.header.len as usize,
            slot_interrupted: &slot.interrupted,
            taken: AtomicBool::new(false),
        });
        let ctx = Ctx {
            unique,
            uid: req.header.uid,
            gid: req.header.gid,
            pid: req.header.pid,
            interrupt_slot: Some(&slot.interrupted),
            later: route.as_ref(),
        };
        let node = req.node();
        let expected =
            (self.ledger.is_some() || self.book.is_some()).then(|| Expected::of(facts, &req.op));
        // A supervised session journals what must not be applied twice,
        // and answers it from the journal when it comes back.
        let mut journal_slot = None;
        let mut replayed = None;
        if let Some(ledger) = &self.ledger {
            failpoint::hit(Point::AfterRead, opcode);
            if let Some(kind) = journal::Kind::of(facts, &req.op, node, ledger) {
                // The probes call the filesystem: a panic in one costs the
                // probe (the request then runs as if new), not the worker.
                let fs = &*self.fs;
                if unique & journal::RESENT != 0 {
                    replayed = catch_unwind(AssertUnwindSafe(|| {
                        journal::replay(fs, &ctx, &kind, opcode, ledger, unique)
                    }))
                    .unwrap_or(None);
                }
                match &replayed {
                    Some((_, _, slot)) => {
                        ledger.state().add_replay();
                        journal_slot = Some(*slot);
                    }
                    None => {
                        let before =
                            catch_unwind(AssertUnwindSafe(|| journal::before(fs, &ctx, &kind)))
                                .unwrap_or(crate::recovery::state::Before::Unknown);
                        journal_slot = ledger.journal_begin(unique, opcode, before);
                    }
                }
            }
        }
        // Answered from the journal: the ledger has its references (and the
        // journal its answer) already.
        let from_journal = matches!(replayed, Some((_, journal::Replayed::Recorded, _)));
        let mut out = out;
        let data = &mut w.data;
        let outcome = match replayed {
            Some((r, _, _)) => Ok(r),
            None => catch_unwind(AssertUnwindSafe(|| match out.as_deref_mut() {
                Some(out) => self.call(&ctx, node, req.op, out),
                None => self.call(&ctx, node, req.op, data),
            })),
        };
        if let (Some(expected), Ok(r), false) = (expected, &outcome, from_journal) {
            let bytes = match &out {
                Some(o) => o.as_slice(),
                None => w.data.as_slice(),
            };
            expected.changes(node, r.as_ref().map_err(|e| *e), bytes, |c| {
                if let Some(ledger) = &self.ledger {
                    ledger.change(c);
                }
                if let Some(book) = &self.book {
                    book.change(c);
                }
            });
        }
        slot.current.store(0, Ordering::Release);
        let taken = route
            .as_ref()
            .is_some_and(|r| r.taken.load(Ordering::Acquire));

        let result = match outcome {
            // The token answers, whatever the method returned (a panic after
            // taking it included: the token was dropped and answered EIO).
            _ if taken => Ok(Outcome::Later),
            Ok(Err(Errno::LATER)) => {
                tracing::error!(
                    unique,
                    ?opcode,
                    "handler returned Errno::LATER without taking its reply token; answering EIO"
                );
                Err(Errno::EIO)
            }
            Ok(r) => r,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                tracing::error!(unique, ?opcode, panic = %msg, "filesystem method panicked; answering EIO");
                if !facts.answered() {
                    Ok(Outcome::NoReply)
                } else {
                    Err(Errno::EIO)
                }
            }
        };
        if let (Some(ledger), Some(slot)) = (&self.ledger, journal_slot) {
            if matches!(result, Ok(Outcome::Later)) {
                // Answered later: not journaled (DESIGN.md, "Recovery").
                ledger.journal_release(slot);
                journal_slot = None;
            } else if !from_journal {
                failpoint::hit(Point::AfterApply, opcode);
                ledger.journal_done(slot, &result);
                failpoint::hit(Point::AfterJournal, opcode);
            }
        }
        Pending {
            unique,
            opcode,
            start,
            result,
            journal: journal_slot,
        }
    }

    /// Send the reply of a processed request and record its statistics.
    pub fn finish(&self, p: Pending, w: &mut Worker, sink: &dyn ReplySink) -> Instant {
        self.finish_with(p, &w.stats, ReplyData::Buffer(&w.data), sink)
    }

    /// [`Dispatcher::finish`] for a request processed into a buffer of the
    /// transport's (`process_split` with `out`). Returns the moment the
    /// request was recorded as done, for a transport that times its waits.
    pub fn finish_with(
        &self,
        p: Pending,
        stats: &WorkerStats,
        data: ReplyData<'_>,
        sink: &dyn ReplySink,
    ) -> Instant {
        if p.answered_later() {
            // Recorded and sent by the token.
            return Instant::now();
        }
        // Recorded before the reply leaves: once the application has seen a
        // request complete, `fusebox stats` counts it (recording after the
        // send let a preempted worker lag behind what the caller had done).
        let done = Instant::now();
        stats.record(
            p.opcode,
            done.saturating_duration_since(p.start),
            p.result.is_err(),
        );
        if p.journal.is_some() {
            failpoint::hit(Point::BeforeReply, p.opcode);
        }
        if let Err(e) = send_outcome(p.unique, p.result, data, sink) {
            // ENOENT: the request was interrupted and the kernel forgot it.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!(unique = p.unique, opcode = ?p.opcode, error = %e, "reply not delivered");
            }
        }
        if let (Some(ledger), Some(slot)) = (&self.ledger, p.journal) {
            ledger.journal_release(slot);
        }
        done
    }

    fn call(
        &self,
        ctx: &Ctx,
        node: NodeId,
        op: Op<'_>,
        data: &mut DataOut<'_>,
    ) -> Result<Outcome, Errno> {
        let fs = &*self.fs;
        Ok(match op {
            Op::Init(_) => {
                // INIT is answered by the session before workers start; a
                // second one is a protocol violation.
                tracing::warn!("unexpected INIT after the session started");
                return Err(Errno::EPROTO);
            }
            Op::Destroy => {
                self.destroy_once();
                Outcome::Empty
            }
            Op::Lookup { name } => entry_out(fs.lookup(ctx, node, name)?),
            Op::Forget { nlookup } => {
                fs.forget(node, nlookup);
                Outcome::NoReply
            }
            Op::BatchForget { nodes } => {
                fs.batch_forget(&mut nodes.iter());
                Outcome::NoReply
            }
            Op::Getattr { fh } => attr_out(fs.getattr(ctx, node, fh)?),
            Op::Setattr(a) => attr_out(fs.setattr(ctx, node, &a)?),
            Op::Readlink => {
                data.reset(libc::PATH_MAX as usize);
                fs.readlink(ctx, node, data)?;
                Outcome::Data
            }
            Op::Symlink { name, target } => entry_out(fs.symlink(ctx, node, name, target)?),
            Op::Mknod { name, args } => entry_out(fs.mknod(ctx, node, name, &args)?),
            Op::Mkdir { name, args } => entry_out(fs.mkdir(ctx, node, name, &args)?),
            Op::Unlink { name } => {
                fs.unlink(ctx, node, name)?;
                Outcome::Empty
            }
            Op::Rmdir { name } => {
                fs.rmdir(ctx, node, name)?;
                Outcome::Empty
            }
            Op::Rename(r) => {
                fs.rename(ctx, &r)?;
                Outcome::Empty
            }
            Op::Link { target, new_name } => entry_out(fs.link(ctx, target, node, new_name)?),
            Op::Open(o) => Outcome::Open(open_out(fs.open(ctx, node, &o)?)),
            Op::Read(r) => {
                data.reset(r.size as usize);
                fs.read(ctx, node, &r, data)?;
                Outcome::Data
            }
            Op::Write(wr) => Outcome::Write(abi::WriteOut {
                size: fs.write(ctx, node, &wr)?,
                padding: 0,
            }),
            Op::Statfs => statfs_out(fs.statfs(ctx, node)?),
            Op::Release(r) => {
                fs.release(ctx, node, &r)?;
                Outcome::Empty
            }
            Op::Fsync { fh, datasync } => {
                fs.fsync(ctx, node, fh, datasync)?;
                Outcome::Empty
            }
            Op::Setxattr(s) => {
                fs.setxattr(ctx, node, &s)?;
                Outcome::Empty
            }
            Op::Getxattr { name, size } => {
                data.reset(if size == 0 { 64 << 10 } else { size as usize });
                fs.getxattr(ctx, node, name, data)?;
                xattr_reply(size, data)?
            }
            Op::Listxattr { size } => {
                data.reset(if size == 0 { 64 << 10 } else { size as usize });
                fs.listxattr(ctx, node, data)?;
                xattr_reply(size, data)?
            }
            Op::Removexattr { name } => {
                fs.removexattr(ctx, node, name)?;
                Outcome::Empty
            }
            Op::Flush { fh, lock_owner } => {
                fs.flush(ctx, node, fh, lock_owner)?;
                Outcome::Empty
            }
            Op::Opendir(o) => Outcome::Open(open_out(fs.opendir(ctx, node, &o)?)),
            Op::Readdir(r) => {
                data.reset(r.size as usize);
                fs.readdir(ctx, node, &r, &mut DirEntries::new(data, false))?;
                Outcome::Data
            }
            Op::Readdirplus(r) => {
                data.reset(r.size as usize);
                fs.readdirplus(ctx, node, &r, &mut DirEntries::new(data, true))?;
                Outcome::Data
            }
            Op::Releasedir(r) => {
                fs.releasedir(ctx, node, &r)?;
                Outcome::Empty
            }
            Op::Fsyncdir { fh, datasync } => {
                fs.fsyncdir(ctx, node, fh, datasync)?;
                Outcome::Empty
            }
            Op::Getlk(l) => lk_out(fs.getlk(ctx, node, &l)?),
            Op::Setlk { lock, sleep } => {
                fs.setlk(ctx, node, &lock, sleep)?;
                Outcome::Empty
            }
            Op::Access { mask } => {
                fs.access(ctx, node, mask)?;
                Outcome::Empty
            }
            Op::Create { name, args } => {
                let (e, o) = fs.create(ctx, node, name, &args)?;
                Outcome::Create(e.to_abi(), open_out(o))
            }
            Op::Tmpfile { args } => {
                let (e, o) = fs.tmpfile(ctx, node, &args)?;
                Outcome::Create(e.to_abi(), open_out(o))
            }
            Op::Interrupt { unique } => return self.interrupt(unique),
            Op::Bmap { block, blocksize } => Outcome::Bmap(abi::BmapOut {
                block: fs.bmap(ctx, node, block, blocksize)?,
            }),
            Op::Ioctl(i) => {
                data.reset(i.out_size as usize);
                let result = fs.ioctl(ctx, node, &i, data)?;
                Outcome::Ioctl(abi::IoctlOut {
                    result,
                    flags: 0,
                    in_iovs: 0,
                    out_iovs: 0,
                })
            }
            Op::Poll(p) => Outcome::Poll(abi::PollOut {
                revents: fs.poll(ctx, node, &p)?,
                padding: 0,
            }),
            Op::NotifyReply { data: bytes, .. } => {
                self.notifier.complete_retrieve(ctx.unique, bytes);
                Outcome::NoReply
            }
            Op::Fallocate(f) => {
                fs.fallocate(ctx, node, &f)?;
                Outcome::Empty
            }
            Op::Lseek(l) => Outcome::Lseek(abi::LseekOut {
                offset: fs.lseek(ctx, node, &l)?,
            }),
            Op::CopyFileRange { args, wide } => copy_out(fs.copy_file_range(ctx, &args)?, wide),
            Op::Syncfs => {
                fs.syncfs(ctx)?;
                Outcome::Empty
            }
            Op::Statx(s) => {
                let (stat, ttl) = fs.statx(ctx, node, &s)?;
                statx_out(stat, ttl)
            }
            Op::Unsupported => return Err(Errno::ENOSYS),
        })
    }

    /// INTERRUPT: flag the worker serving `target`. A target no worker has
    /// published yet (just read on another fd or queue) is remembered for
    /// `process` to claim: an EAGAIN reply would not help, because the kernel
    /// looks the target up only among requests read on the replying fd.
    fn interrupt(&self, target: u64) -> Result<Outcome, Errno> {
        {
            let mut early = self
                .early_interrupts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if early.len() == EARLY_INTERRUPTS {
                early.pop_front();
            }
            early.push_back(target);
            self.early_count.store(early.len(), Ordering::SeqCst);
        }
        let mut found = false;
        for s in self.inflight.slots.iter() {
            if s.current.load(Ordering::SeqCst) == target {
                // SeqCst pairs with `LaterRoute::take`: a handler that takes
                // its token after this store sees it; one that took it
                // before is in the registry searched next.
                s.interrupted.store(target, Ordering::SeqCst);
                found = true;
                break;
            }
        }
        // A request answered later: mark it and run its callbacks.
        found |= self.inflight.interrupt(target);
        if found {
            let mut early = self
                .early_interrupts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            early.retain(|u| *u != target);
            self.early_count.store(early.len(), Ordering::SeqCst);
        }
        Ok(Outcome::NoReply)
    }

    fn claim_early_interrupt(&self, unique: u64, slot: &crate::later::InflightSlot) {
        let mut early = self
            .early_interrupts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(pos) = early.iter().position(|u| *u == unique) {
            early.remove(pos);
            self.early_count.store(early.len(), Ordering::SeqCst);
            slot.interrupted.store(unique, Ordering::SeqCst);
        }
    }
}
