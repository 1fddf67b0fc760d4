//! The threads a session serves with: classic /dev/fuse workers, each on a
//! cloned fd of its own, and io_uring queue threads, each building and
//! running its ring. `Session::start` decides how many of each and what
//! they share; this is where they are made.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::{DevChannel, WorkerExit};
use crate::dispatch::{Dispatcher, Worker};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::mount::Mount;
use crate::protocol::DataOut;
use crate::recovery::pause::PauseControl;
use crate::stats::WorkerStats;
use crate::sys::ring_area::Attached;
use crate::sys::uring::QueueRing;
use crate::thread_policy::{self, ThreadPolicy};
use crate::transport::uring::{RingInbox, RingMailbox};
use crate::transport::{dev, uring, UringConfig};

/// A serving thread, and how it ended.
pub(super) type Serving = JoinHandle<Result<WorkerExit, Error>>;

/// How long the /dev/fuse worker of an io_uring session waits after a
/// FORGET before reading again (`dev::ForgetLinger`): further forgets queue
/// up meanwhile and arrive as one BATCH_FORGET. Unlinking 15,000 files:
/// 12,500 forget wake-ups became about 700 batches, and unlink ran ~17%
/// faster on 2 cores. An INTERRUPT may wait this long, far below anything
/// a user would notice.
const FORGET_LINGER: Duration = Duration::from_micros(500);

/// What every serving thread of a session shares.
pub(super) struct Shared<F> {
    pub dispatcher: Arc<Dispatcher<F>>,
    pub mount: Arc<Mount>,
    /// One per thread, classic workers first, in slot order.
    pub stats: Arc<Vec<Arc<WorkerStats>>>,
    /// Serving threads still running.
    pub live: Arc<AtomicUsize>,
    /// Ring threads that have registered their entries so far.
    pub registered_rings: Arc<AtomicUsize>,
    pub thread_policy: ThreadPolicy,
    /// CPUs to pin to, when pinning.
    pub cpus: usize,
}

/// How the classic workers are made.
pub(super) struct Classic<'a> {
    pub count: usize,
    /// A supervised server reads through the supervisor's clones, which
    /// outlive it (see `recovery::supervisor`); others clone their own.
    pub clones: Option<Vec<OwnedFd>>,
    pub buf_size: usize,
    pub pin: bool,
    /// The ring threads' mailboxes, told when the connection ends.
    pub ring_bells: &'a [Arc<RingMailbox>],
    /// An io_uring session's ring threads in all: its /dev/fuse worker
    /// lingers after FORGETs once they have all registered.
    pub rings: Option<usize>,
    /// A supervised server's workers can be paused for an upgrade.
    pub pause: Option<&'a Arc<PauseControl>>,
}

/// Start the classic workers.
pub(super) fn spawn_classic<F: Filesystem>(
    s: &Shared<F>,
    mut c: Classic<'_>,
    out: &mut Vec<Serving>,
) -> Result<(), Error> {
    for i in 0..c.count {
        let fd = match c
            .clones
            .as_mut()
            .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
        {
            Some(fd) => fd,
            None => crate::sys::clone_device(s.mount.device().as_fd())
                .map_err(|source| Error::Clone { worker: i, source })?,
        };
        let channel = Arc::new(DevChannel::new(fd));
        let dispatcher = s.dispatcher.clone();
        let mut worker = Worker::new(DataOut::with_capacity(c.buf_size), s.stats[i].clone(), i);
        worker.later = Some(channel.clone());
        let ring_bells = c.ring_bells.to_vec();
        let live = s.live.clone();
        let pin = c.pin.then_some(i % s.cpus);
        let policy = s.thread_policy;
        let pause = c.pause.cloned();
        let buf_size = c.buf_size;
        let linger = c.rings.map(|rings| dev::ForgetLinger {
            wait: FORGET_LINGER,
            registered: s.registered_rings.clone(),
            rings,
        });
        let handle = std::thread::Builder::new()
            .name(format!("fusebox-dev-{i}"))
            .spawn(move || {
                if let Some(cpu) = pin {
                    if let Err(e) = dev::pin_to_cpu(cpu) {
                        tracing::warn!(cpu, error = %e, "cannot pin worker");
                    }
                }
                if let Err(e) = policy.enter() {
                    tracing::warn!(?policy, error = %e, "cannot set the thread policy");
                }
                let r = dev::run_worker(
                    &dispatcher,
                    &channel,
                    &mut worker,
                    buf_size,
                    linger.as_ref(),
                    pause.as_deref(),
                );
                // The connection is gone: ring threads holding entries
                // for later answers must stop waiting for them.
                for m in &ring_bells {
                    m.close();
                }
                live.fetch_sub(1, Ordering::AcqRel);
                r
            })?;
        out.push(handle);
    }
    Ok(())
}

/// How the io_uring queue threads are made.
pub(super) struct Rings {
    /// The first ring thread's slot (after the classic workers').
    pub first_slot: usize,
    pub per_queue: usize,
    /// One per ring thread: its way back for answers given later.
    pub mailboxes: Vec<(Arc<RingMailbox>, RingInbox)>,
    /// Each entry's payload buffer.
    pub payload_len: usize,
    pub config: UringConfig,
    /// The adaptive thread policy's guard, when it runs.
    pub guard: Option<Arc<thread_policy::Guard>>,
    /// The rings a supervisor holds, one per thread, when it holds them.
    pub held: Option<Vec<Attached>>,
    /// A supervised server's ring threads can be paused for an upgrade.
    pub pause: Option<Arc<PauseControl>>,
}

/// Where a queue thread's ring comes from.
enum RingSource {
    /// Its own, made on the device fd given.
    Own(OwnedFd),
    /// One the supervisor holds.
    Held(Attached),
}

/// Start the io_uring queue threads: `per_queue` for each CPU's queue.
pub(super) fn spawn_rings<F: Filesystem>(
    s: &Shared<F>,
    r: Rings,
    out: &mut Vec<Serving>,
) -> Result<(), Error> {
    let payload_len = r.payload_len;
    let mut held = r.held.map(|h| h.into_iter());
    for (t, mail) in r.mailboxes.into_iter().enumerate() {
        let (mut q, k) = (t / r.per_queue, t % r.per_queue);
        let slot = r.first_slot + t;
        // A held ring serves the queue the supervisor made it for; an own
        // ring is built on its thread from a clone of the device.
        let source = match held.as_mut() {
            Some(rings) => {
                let ring = rings.next().ok_or_else(|| {
                    Error::Io(std::io::Error::other("fewer held rings than threads"))
                })?;
                q = ring.qid as usize;
                RingSource::Held(ring)
            }
            None => RingSource::Own(crate::sys::clone_device(s.mount.device().as_fd()).map_err(
                |source| Error::Clone {
                    worker: slot,
                    source,
                },
            )?),
        };
        let dispatcher = s.dispatcher.clone();
        let mut worker = Worker::new(
            DataOut::with_capacity(payload_len),
            s.stats[slot].clone(),
            slot,
        );
        let live = s.live.clone();
        let mut ucfg = r.config;
        let mut policy = s.thread_policy;
        let mut guard = r.guard.clone();
        if matches!(source, RingSource::Held(_)) {
            // The ring's SQ thread, pinned to this queue's CPU, spins there
            // after work: a queue thread spinning for its completion, or
            // SCHED_IDLE behind it, only delays the SQ thread or itself
            // (stat rate 0.65x with both on two vCPUs). The adaptive
            // choices become blocking waits and SCHED_OTHER; an explicit
            // spin or idle policy stays.
            if matches!(ucfg.poll, uring::PollPolicy::Adaptive { .. }) {
                ucfg.poll = uring::PollPolicy::Off;
            }
            if policy == ThreadPolicy::Adaptive {
                policy = ThreadPolicy::Normal;
                guard = None;
            }
        }
        let queue_mount = s.mount.clone();
        let registered = s.registered_rings.clone();
        let pause = r.pause.clone();
        let cpus = s.cpus;
        let handle = std::thread::Builder::new()
            .name(if k == 0 {
                format!("fusebox-uring-{q}")
            } else {
                format!("fusebox-ur{q}.{k}")
            })
            .spawn(move || {
                if ucfg.pin && k == 0 && q < cpus {
                    if let Err(e) = dev::pin_to_cpu(q) {
                        tracing::warn!(q, error = %e, "cannot pin queue thread");
                    }
                }
                if let Err(e) = policy.enter() {
                    tracing::warn!(?policy, error = %e, "cannot set the thread policy");
                }
                worker.guard = guard.map(|g| g.register_current());
                if let Some(p) = &pause {
                    p.register_current();
                }
                // Built on its own thread: with single-issuer rings only the
                // creating thread may submit.
                let ring = match source {
                    RingSource::Own(fd) => {
                        QueueRing::new(fd, q as u16, ucfg.depth.max(1), payload_len, ucfg.ring)
                    }
                    RingSource::Held(ring) => QueueRing::attach(ring),
                };
                let r = ring.map_err(Error::from).and_then(|mut ring| {
                    uring::run_queue(
                        &dispatcher,
                        &mut ring,
                        &mut worker,
                        ucfg.poll,
                        mail,
                        pause.as_deref(),
                        || {
                            registered.fetch_add(1, Ordering::AcqRel);
                        },
                    )
                });
                if let Err(e) = &r {
                    // The kernel routes this CPU's requests to this queue
                    // only, and keeps handing them to this ring's entries
                    // too: without it some would hang. Fail loudly.
                    tracing::error!(q, thread = k, error = %e, "io_uring queue thread stopped; aborting the connection");
                    if let Err(e) = queue_mount.abort() {
                        tracing::error!(error = %e, "abort failed");
                    }
                }
                live.fetch_sub(1, Ordering::AcqRel);
                r
            })?;
        out.push(handle);
    }
    Ok(())
}
