//! FUSE-over-io_uring (Linux 6.14+): one queue per possible CPU, each
//! served by one thread (or more: `threads_per_queue`) with its own ring of
//! entries. A request arrives in an entry's
//! buffers; the answer goes back in the same buffers with COMMIT_AND_FETCH,
//! which also re-arms the entry. Commits are queued and submitted together
//! with the next wait, so a busy queue answers several requests per
//! io_uring_enter. The same parse contract and dispatcher as /dev/fuse.
//!
//! FORGET, INTERRUPT and requests queued before the rings were ready still
//! come through /dev/fuse, so a session keeps one classic worker as well.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use zerocopy::FromBytes;

use crate::device::{DeviceErrno, WorkerExit};
use crate::dispatch::{Dispatcher, Worker};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::later::{EntryRef, LaterReply, LaterSink};
use crate::protocol::outcome::send_outcome;
use crate::protocol::reply::Detached;
use crate::protocol::ReplyData;
use crate::protocol::{DataOut, ReplySink};
use crate::recovery::failpoint::{self, Point};
use crate::recovery::pause::PauseControl;
use crate::sys::uring::{Completion, QueueRing, ReplyBuffers};

/// How answers given later reach a queue thread: a channel (no lock per
/// answer) and an eventfd whose read is kept armed on the ring, written
/// only when the queue thread has not been told yet, so a burst of answers
/// costs one wake-up. The queue thread commits them on its ring with the
/// other commits of that wake-up.
pub struct RingMailbox {
    tx: mpsc::Sender<LaterReply>,
    wake: OwnedFd,
    /// A wake-up is on its way (the eventfd was written and the queue thread
    /// has not reaped the read yet).
    notified: AtomicBool,
    /// The connection is gone (the session's /dev/fuse worker saw it end):
    /// entries held for later answers will never be taken back by the
    /// kernel, so the queue thread must not wait for them.
    closed: AtomicBool,
}

/// The queue thread's end of a [`RingMailbox`].
pub struct RingInbox(mpsc::Receiver<LaterReply>);

impl RingMailbox {
    /// A mailbox, for answering threads, and its inbox, for the queue thread.
    pub fn new() -> io::Result<(Arc<RingMailbox>, RingInbox)> {
        // Blocking: io_uring completes a read of an O_NONBLOCK file at once
        // with EAGAIN instead of waiting for data, which would turn the
        // armed read into a busy loop. A write blocks only when the counter
        // is about to overflow, and the queue thread's read resets it.
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
        Ok(Self::with_eventfd(wake))
    }

    /// A mailbox ringing `wake`: a held ring's own eventfd, which the ring
    /// reads as a fixed file.
    pub fn with_eventfd(wake: OwnedFd) -> (Arc<RingMailbox>, RingInbox) {
        let (tx, rx) = mpsc::channel();
        (
            Arc::new(RingMailbox {
                tx,
                wake,
                notified: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            }),
            RingInbox(rx),
        )
    }

    fn ring_bell(&self) {
        if !self.notified.swap(true, Ordering::AcqRel) {
            // EAGAIN only if the counter is about to overflow: already rung.
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
    }

    /// Tell the queue thread the connection is gone.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

impl LaterSink for RingMailbox {
    fn deliver(&self, reply: LaterReply) {
        // A send fails once the queue thread is gone: nobody to answer.
        if self.tx.send(reply).is_ok() {
            self.ring_bell();
        }
    }
}

/// How a queue thread waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PollPolicy {
    /// Always block in io_uring_enter.
    #[default]
    Off,
    /// Spin this long for a completion before blocking (RFUSE: up to 50 us).
    Spin(Duration),
    /// XFUSE: spin `window` only while recent waits were shorter than the
    /// window plus the cost of an event wait; otherwise block at once.
    Adaptive {
        /// The longest spin.
        window: Duration,
    },
}

impl PollPolicy {
    /// `off`, `spin=US` or `adaptive[=US]`.
    pub fn parse(s: &str) -> Option<PollPolicy> {
        let us = |v: &str| v.parse::<u64>().ok().map(Duration::from_micros);
        match s.split_once('=') {
            None if s == "off" => Some(PollPolicy::Off),
            None if s == "adaptive" => Some(PollPolicy::Adaptive {
                window: Duration::from_micros(10),
            }),
            Some(("spin", v)) => us(v).map(PollPolicy::Spin),
            Some(("adaptive", v)) => us(v).map(|window| PollPolicy::Adaptive { window }),
            _ => None,
        }
    }
}

/// What a blocking wait costs beyond the wait itself (XFUSE measured ~5 us).
const EVENT_WAIT_COST: Duration = Duration::from_micros(5);

struct Poller {
    policy: PollPolicy,
    spin_next: bool,
}

impl Poller {
    fn window(&self) -> Option<Duration> {
        match self.policy {
            PollPolicy::Off => None,
            PollPolicy::Spin(w) => Some(w),
            PollPolicy::Adaptive { window } => self.spin_next.then_some(window),
        }
    }

    /// Whether `observe` wants the length of blocking waits.
    fn times_waits(&self) -> bool {
        matches!(self.policy, PollPolicy::Adaptive { .. })
    }

    /// The next request came `waited` after the last one was done (a
    /// blocking wait, after any spin that found nothing): decide whether
    /// spinning would have paid.
    fn observe(&mut self, waited: Duration) {
        if let PollPolicy::Adaptive { window } = self.policy {
            self.spin_next = waited <= window + EVENT_WAIT_COST;
        }
    }

    fn spun(&mut self, found: bool) {
        if matches!(self.policy, PollPolicy::Adaptive { .. }) && !found {
            // The window passed in vain: block next time until a short wait
            // shows requests are close together again.
            self.spin_next = false;
        }
    }
}

/// Replies written into a ring entry: header to in_out, body to payload.
struct RingSink<'a> {
    bufs: RefCell<ReplyBuffers<'a>>,
    payload_len: Cell<usize>,
    sent: Cell<bool>,
    /// The request's id as the kernel gave it: a request served again
    /// after a takeover reaches the dispatcher marked as resent, and the
    /// kernel knows it by the id without the mark.
    unique: u64,
    /// The request's opcode, for the failpoints.
    opcode: fusebox_abi::Opcode,
}

impl ReplySink for RingSink<'_> {
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut b = self.bufs.borrow_mut();
        let (head, body) = parts
            .split_first()
            .ok_or_else(|| io::Error::other("empty reply"))?;
        let mut header = fusebox_abi::OutHeader::read_from_bytes(head)
            .map_err(|_| io::Error::other("reply header of the wrong size"))?;
        header.unique = self.unique;
        // The header counts the whole body; beyond the parts given, the rest
        // was written in place into the payload (a lent DataOut).
        let body_len = (header.len as usize).saturating_sub(head.len());
        if body_len > b.payload.len() {
            return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
        }
        let given: usize = body.iter().map(|p| p.len()).sum();
        b.begin(given);
        let mut off = 0;
        for p in body {
            let dst = b
                .payload
                .get_mut(off..off + p.len())
                .filter(|_| off + p.len() <= body_len)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
            dst.copy_from_slice(p);
            off += p.len();
        }
        failpoint::hit(Point::HalfAnswered, self.opcode);
        b.in_out[..head.len()].copy_from_slice(zerocopy::IntoBytes::as_bytes(&header));
        b.done(body_len);
        self.payload_len.set(body_len);
        self.sent.set(true);
        Ok(())
    }
}

/// Serve one ring of a queue until the kernel ends every entry (unmount or
/// abort). `registered` runs once the entries are handed to the kernel.
/// Answers given later arrive through `mailbox`/`inbox`; the entry of such
/// a request stays with this thread until its answer comes. A ring the
/// supervisor holds is taken over where the previous server left it, and
/// `pause` parks the thread for a planned upgrade.
pub fn run_queue<F: Filesystem>(
    dispatcher: &Dispatcher<F>,
    ring: &mut QueueRing,
    worker: &mut Worker,
    poll: PollPolicy,
    (mailbox, inbox): (Arc<RingMailbox>, RingInbox),
    pause: Option<&PauseControl>,
    registered: impl FnOnce(),
) -> Result<WorkerExit, Error> {
    worker.later = Some(mailbox.clone());
    // Completions to handle before any the ring brings: a held ring's
    // requests the previous server had, (entry, result, resent).
    let mut taken_over = Vec::new();
    if ring.is_held() {
        let t = ring.take_over()?;
        if !t.completions.is_empty() || !t.lost.is_empty() {
            tracing::info!(
                again = t.completions.iter().filter(|c| c.2).count(),
                lost = t.lost.len(),
                "io_uring: took over a held ring"
            );
        }
        for idx in t.lost {
            // Its answer was half-written over more than could be saved:
            // the request is failed rather than served from torn bytes.
            let id = {
                let r = ring.request(idx)?;
                (
                    r.commit_id,
                    r.header.unique,
                    fusebox_abi::Opcode(r.header.opcode),
                )
            };
            answer_entry(ring, idx, id, true, |_| {})?;
        }
        taken_over = t.completions;
        taken_over.reverse();
    } else {
        for idx in 0..ring.depth() {
            ring.register(idx)?;
        }
    }
    ring.arm_wake(mailbox.wake.as_fd())?;
    ring.submit()?;
    registered();
    // Entries not yet ended by the kernel, and of those, the ones whose
    // request is answered later (held here, not with the kernel).
    let mut live = ring.depth();
    let mut held = 0usize;
    let mut closing = false;
    let mut aborted = false;
    let mut failure: Option<io::Error> = None;
    // With coop/defer taskrun, requests land only when this thread enters
    // the kernel: spinning on the completion queue would find nothing.
    let policy = if ring.task_work_deferred() {
        PollPolicy::Off
    } else {
        poll
    };
    let mut poller = Poller {
        policy,
        spin_next: true,
    };
    // The clock is read once per request (when it is recorded done) and
    // once per wake-up: the wait starts when the last request was done and
    // ends when the batch it brings was received. Four reads per request
    // were ~4% of a GETATTR's cost in a profile (a read costs ~0.1 us here).
    let mut last_done = Instant::now();
    // Held entries keep the loop going until answered, unless the
    // connection is gone: the kernel then forgets them without a completion.
    while live > held || (held > 0 && !closing) {
        if let Some(p) = pause {
            p.checkpoint();
        }
        if taken_over.is_empty() && !ring.has_completions() {
            let mut found = false;
            if let Some(window) = poller.window() {
                // Commits go out before the spin, or nobody gets an answer.
                ring.submit()?;
                let until = Instant::now() + window;
                while Instant::now() < until {
                    if ring.has_completions() {
                        found = true;
                        break;
                    }
                    std::hint::spin_loop();
                }
                poller.spun(found);
            }
            if !found {
                ring.submit_and_wait(1)?;
                if poller.times_waits() {
                    poller.observe(Instant::now().saturating_duration_since(last_done));
                }
            }
        }
        let received = Instant::now();
        let mut served = false;
        loop {
            let (completion, resent) = match taken_over.pop() {
                Some((idx, res, resent)) => (Completion::Entry { idx, res }, resent),
                None => match ring.next_completion() {
                    Some(c) => (c, false),
                    None => break,
                },
            };
            let (idx, res) = match completion {
                Completion::Wake { res } => {
                    // Re-armed first: an answer delivered from here on rings
                    // again; those before are drained below.
                    mailbox.notified.store(false, Ordering::SeqCst);
                    if res < 0 && res != -libc::EINTR && res != -libc::EAGAIN {
                        tracing::debug!(res, "io_uring: wake-up read failed; re-arming");
                    }
                    ring.arm_wake(mailbox.wake.as_fd())?;
                    if mailbox.closed.load(Ordering::Acquire) {
                        closing = true;
                    }
                    continue;
                }
                Completion::Entry { idx, res } => (idx, res),
            };
            served = true;
            if res < 0 {
                match (-res, DeviceErrno::of(-res)) {
                    // ENOENT from a ring: the kernel has no request for the
                    // committed id. Refused, as below (sending it again
                    // would get the same answer).
                    (libc::ENOENT, _) | (_, DeviceErrno::Failed) => {
                        // EINVAL, EOPNOTSUPP, ...: the kernel refused the
                        // entry; report it instead of passing for a clean
                        // unmount.
                        let e = io::Error::from_raw_os_error(-res);
                        tracing::warn!(idx, error = %e, "ring entry refused by the kernel");
                        failure.get_or_insert(e);
                        live -= 1;
                    }
                    // Too early or interrupted: the same command again (a
                    // failed COMMIT_AND_FETCH still carries an answer).
                    (
                        _,
                        DeviceErrno::WouldBlock | DeviceErrno::Interrupted | DeviceErrno::Retry,
                    ) => {
                        std::thread::sleep(Duration::from_millis(1));
                        ring.resubmit(idx)?;
                    }
                    (_, DeviceErrno::Ended(WorkerExit::Aborted)) => {
                        aborted = true;
                        closing = true;
                        live -= 1;
                    }
                    (_, DeviceErrno::Ended(WorkerExit::Unmounted)) => {
                        closing = true;
                        live -= 1;
                    }
                }
                continue;
            }
            match serve_entry(dispatcher, ring, idx, received, resent, worker)? {
                Served::Now(done) => last_done = done,
                Served::Later => held += 1,
            }
        }
        // Answers given later. try_recv on an empty channel is a load.
        while let Ok(reply) = inbox.0.try_recv() {
            held = held.saturating_sub(1);
            if closing {
                // The kernel let go of the entry when the connection ended.
                live = live.saturating_sub(1);
                continue;
            }
            served = true;
            let (idx, commit_id, unique) = (reply.at.entry, reply.at.commit_id, reply.unique);
            // No failpoint fires on a later answer (opcode 0 is none).
            let id = (commit_id, unique, fusebox_abi::Opcode(0));
            answer_entry(ring, idx, id, true, |sink| {
                if let Err(e) = send_outcome(
                    reply.unique,
                    reply.result,
                    ReplyData::Buffer(&reply.data),
                    sink,
                ) {
                    tracing::debug!(unique, error = %e, "later answer does not fit its ring entry");
                }
            })?;
        }
        if served {
            worker.served();
        }
    }
    if let Some(e) = failure {
        return Err(Error::Io(io::Error::new(
            e.kind(),
            format!("io_uring queue: {e}"),
        )));
    }
    Ok(if aborted {
        WorkerExit::Aborted
    } else {
        WorkerExit::Unmounted
    })
}

/// How a ring entry's request was served.
enum Served {
    /// Answered and its commit queued; when it was done.
    Now(Instant),
    /// Its handler took the reply token: the entry waits for the answer.
    Later,
}

/// Serve one ring entry and queue its commit. `resent`: the request had
/// reached a server that died; the dispatcher sees it marked as the kernel
/// marks a resent one, so its journal answers it if it was applied.
fn serve_entry<F: Filesystem>(
    d: &Dispatcher<F>,
    ring: &mut QueueRing,
    idx: usize,
    received: Instant,
    resent: bool,
    w: &mut Worker,
) -> Result<Served, Error> {
    let (pending, commit_id, unique, spilled, opcode) = {
        let (mut r, spare) = ring.request_and_spare(idx)?;
        let opcode = fusebox_abi::Opcode(r.header.opcode);
        if resent {
            r.header.unique |= crate::recovery::journal::RESENT;
        }
        let at = EntryRef {
            entry: idx,
            commit_id: r.commit_id,
        };
        match spare.filter(|_| {
            crate::protocol::opcodes::facts(fusebox_abi::Opcode(r.header.opcode)).in_place
        }) {
            Some(buf) => {
                let limit = buf.len();
                let mut out = DataOut::lent(buf, limit);
                let p = d.process_split(
                    r.header,
                    r.op_in,
                    r.payload,
                    received,
                    at,
                    w,
                    Some(&mut out),
                );
                (p, r.commit_id, r.header.unique, Some(out.detach()), opcode)
            }
            None => (
                d.process_split(r.header, r.op_in, r.payload, received, at, w, None),
                r.commit_id,
                r.header.unique,
                None,
                opcode,
            ),
        }
    };
    if pending.answered_later() {
        return Ok(Served::Later);
    }
    let needs_reply = pending.needs_reply();
    let mut done = received;
    answer_entry(
        ring,
        idx,
        (commit_id, unique, opcode),
        needs_reply,
        |sink| {
            done = match &spilled {
                None => d.finish(pending, w, sink),
                Some(Detached::InPlace(n)) => {
                    d.finish_with(pending, &w.stats, ReplyData::InPlace(*n), sink)
                }
                Some(Detached::Spilled(data)) => {
                    d.finish_with(pending, &w.stats, ReplyData::Buffer(data), sink)
                }
            };
        },
    )?;
    Ok(Served::Now(done))
}

/// Write an answer into entry `idx` with `send` and queue its commit.
fn answer_entry(
    ring: &mut QueueRing,
    idx: usize,
    (commit_id, unique, opcode): (u64, u64, fusebox_abi::Opcode),
    needs_reply: bool,
    send: impl FnOnce(&RingSink<'_>),
) -> Result<(), Error> {
    let len = {
        let sink = RingSink {
            bufs: RefCell::new(ring.reply_buffers(idx)?),
            payload_len: Cell::new(0),
            sent: Cell::new(false),
            unique: commit_id,
            opcode,
        };
        send(&sink);
        if !sink.sent.get() {
            // No answer went out: a request that takes none still holds the
            // entry (commit an empty success to re-arm it); one whose answer
            // did not fit the entry must fail, never look like success.
            let error = if needs_reply { -libc::EIO } else { 0 };
            let header = fusebox_abi::OutHeader {
                len: 16,
                error,
                unique,
            };
            sink.send(&[zerocopy::IntoBytes::as_bytes(&header)])?;
        }
        sink.payload_len.get()
    };
    failpoint::hit(Point::AnsweredUncommitted, opcode);
    ring.commit(idx, commit_id, len)?;
    Ok(())
}

/// Bytes of an entry's payload buffer for a connection of `max_write`:
/// the kernel puts up to max(8 KiB, max_write, max_pages pages) in one.
pub fn payload_len_for(max_write: u32) -> usize {
    (max_write as usize)
        .next_multiple_of(4096)
        .max(fusebox_abi::MIN_READ_BUFFER)
}

pub use crate::sys::possible_cpus;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether this kernel will offer FUSE-over-io_uring, and if not, why and
/// what to do about it.
pub fn availability() -> Result<(), String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" || v.trim() == "1" => Ok(()),
        Ok(_) => Err(format!("FUSE-over-io_uring is disabled; enable it with: echo Y > {ENABLE_URING}")),
        Err(_) => Err(format!(
            "this kernel has no FUSE-over-io_uring ({ENABLE_URING} is missing; it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse() {
        assert_eq!(PollPolicy::parse("off"), Some(PollPolicy::Off));
        assert_eq!(
            PollPolicy::parse("spin=50"),
            Some(PollPolicy::Spin(Duration::from_micros(50)))
        );
        assert_eq!(
            PollPolicy::parse("adaptive"),
            Some(PollPolicy::Adaptive {
                window: Duration::from_micros(10)
            })
        );
        assert_eq!(PollPolicy::parse("spin"), None);
    }

    #[test]
    fn adaptive_polling_follows_recent_waits() {
        let mut p = Poller {
            policy: PollPolicy::Adaptive {
                window: Duration::from_micros(10),
            },
            spin_next: true,
        };
        assert!(p.window().is_some());
        p.observe(Duration::from_micros(200));
        assert!(p.window().is_none(), "long waits: block");
        p.observe(Duration::from_micros(12));
        assert!(p.window().is_some(), "short waits: spin");
        p.spun(false);
        assert!(p.window().is_none());
    }
}
