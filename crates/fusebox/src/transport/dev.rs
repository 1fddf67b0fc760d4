//! The classic transport: worker threads reading /dev/fuse, each on its own
//! cloned fd so the kernel hands requests to them without a shared lock.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fusebox_abi::{InHeader, Opcode};
use zerocopy::FromBytes;

use crate::dispatch::{Dispatcher, Worker};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::later::{LaterReply, LaterSink};
use crate::protocol::outcome::send_outcome;
use crate::protocol::ReplyData;
use crate::protocol::ReplySink;
use crate::recovery::pause::PauseControl;

/// One /dev/fuse fd as a reply sink: a reply is one `writev`.
pub struct DevChannel {
    fd: OwnedFd,
}

impl DevChannel {
    /// Send replies on `fd`.
    pub fn new(fd: OwnedFd) -> DevChannel {
        DevChannel { fd }
    }

    /// The /dev/fuse fd, to read requests from.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

impl ReplySink for DevChannel {
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut iov = [IoSlice::new(&[]); 4];
        let n = parts.len().min(iov.len());
        for (slot, p) in iov.iter_mut().zip(parts) {
            *slot = IoSlice::new(p);
        }
        loop {
            match rustix::io::writev(self.fd.as_fd(), &iov[..n]) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Answers given later go out at once, from the answering thread, on the fd
/// the request was read from: the kernel looks a reply's request up among
/// those read through the fd it is written to.
impl LaterSink for DevChannel {
    fn deliver(&self, r: LaterReply) {
        if let Err(e) = send_outcome(r.unique, r.result, ReplyData::Buffer(&r.data), self) {
            // ENOENT: interrupted and forgotten; ENODEV/ECONNABORTED: the
            // mount is gone. Either way nobody waits for this answer.
            tracing::debug!(unique = r.unique, opcode = ?r.opcode, error = %e, "later answer not delivered");
        }
    }
}

/// True once the connection behind `device` is gone (unmounted or aborted):
/// the kernel then reports POLLERR on it.
pub(crate) fn device_gone(device: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &device,
        rustix::event::PollFlags::IN,
    )];
    match rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(_) => fds[0].revents().contains(rustix::event::PollFlags::ERR),
        Err(_) => false,
    }
}

/// Why a worker stopped.
#[derive(Debug)]
pub enum WorkerExit {
    /// The filesystem was unmounted (ENODEV).
    Unmounted,
    /// The connection was aborted through fusectl (ECONNABORTED).
    Aborted,
}

/// A pause after each FORGET before the next read, so that forgets which
/// arrive meanwhile come as one BATCH_FORGET rather than a wake-up each.
/// Only for the /dev/fuse worker of an io_uring session, and only once
/// every queue has registered: from then on its fd carries nothing but
/// forgets and interrupts (before, it carries every request).
pub struct ForgetLinger {
    /// How long to pause after a FORGET.
    pub wait: Duration,
    /// Ring threads that have registered their entries so far.
    pub registered: Arc<AtomicUsize>,
    /// Ring threads in all (every queue's).
    pub rings: usize,
}

/// Serve requests until the mount goes away. `buf_size` must hold the
/// largest request: max_write plus headers.
pub fn run_worker<F: Filesystem>(
    dispatcher: &Dispatcher<F>,
    channel: &DevChannel,
    worker: &mut Worker,
    buf_size: usize,
    linger: Option<&ForgetLinger>,
    pause: Option<&PauseControl>,
) -> Result<WorkerExit, Error> {
    let mut buf = vec![0u8; buf_size];
    if let Some(p) = pause {
        p.register_current();
    }
    loop {
        if let Some(p) = pause {
            // A planned upgrade parks the worker here, between requests.
            p.checkpoint();
        }
        match rustix::io::read(channel.fd.as_fd(), &mut buf[..]) {
            Ok(n) => {
                dispatcher.dispatch_contiguous(&buf[..n], worker, channel);
                worker.served();
                // Requests answered later hold memory until answered: at the
                // session's limit, stop reading until one is.
                dispatcher.inflight().wait_below_limit(channel.fd.as_fd());
                if let Some(l) = linger {
                    let forget = InHeader::read_from_prefix(&buf[..n])
                        .is_ok_and(|(h, _)| Opcode(h.opcode).is_no_reply());
                    if forget && l.registered.load(Ordering::Acquire) >= l.rings {
                        std::thread::sleep(l.wait);
                    }
                }
            }
            // ENOENT: the request was interrupted before we read it.
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN | rustix::io::Errno::NOENT) => {
                continue
            }
            Err(rustix::io::Errno::NODEV) => return Ok(WorkerExit::Unmounted),
            Err(rustix::io::Errno::CONNABORTED) => return Ok(WorkerExit::Aborted),
            Err(e) => return Err(Error::DeviceRead(e.into())),
        }
    }
}

/// Pin the calling thread to `cpu` (XFUSE's "increased parallelism" keeps a
/// worker's cache warm; whether it pays is measured, not assumed).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(Into::into)
}
