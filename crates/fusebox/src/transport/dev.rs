//! The classic transport: worker threads reading /dev/fuse, each on its own
//! cloned fd so the kernel hands requests to them without a shared lock.

use std::convert::Infallible;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fusebox_abi::{InHeader, Opcode};
use std::os::fd::AsFd;

use zerocopy::FromBytes;

use crate::device::{read_loop, LoopEnd};
use crate::dispatch::{Dispatcher, Worker};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::protocol::opcodes::facts;
use crate::recovery::pause::PauseControl;

pub use crate::device::{DevChannel, WorkerExit};

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

/// A buffer to read requests into, every page of it already mapped and
/// written. The kernel copies a request into the reader's memory page by
/// page; a page it has to fault in while the server is being killed fails
/// the copy, and the kernel then ends that request with EIO (fs/fuse/dev.c,
/// `fuse_dev_do_read`) instead of leaving it to be resent to the next
/// server: after a kill -9, an application would see a failed write.
/// Pages present and writable are taken without a fault. Filled with a
/// non-zero byte because zeroed memory comes from the allocator untouched.
fn request_buffer(len: usize) -> Vec<u8> {
    vec![0xa5; len]
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
    let mut buf = request_buffer(buf_size);
    if let Some(p) = pause {
        p.register_current();
    }
    let end = read_loop(
        channel,
        &mut buf,
        // A planned upgrade parks the worker here, between requests (an
        // EINTR may be the pause waking this worker on purpose).
        || {
            if let Some(p) = pause {
                p.checkpoint();
            }
        },
        |request| {
            dispatcher.dispatch_contiguous(request, worker, channel);
            worker.served();
            // Requests answered later hold memory until answered: at the
            // session's limit, stop reading until one is.
            dispatcher.inflight().wait_below_limit(channel.fd().as_fd());
            if let Some(l) = linger {
                let forget = InHeader::read_from_prefix(request)
                    .is_ok_and(|(h, _)| facts(Opcode(h.opcode)).forgets());
                if forget && l.registered.load(Ordering::Acquire) >= l.rings {
                    std::thread::sleep(l.wait);
                }
            }
            ControlFlow::<Infallible>::Continue(())
        },
    );
    match end {
        Ok(LoopEnd::Ended(why)) => Ok(why),
        Ok(LoopEnd::Stopped(never)) => match never {},
        Err(e) => Err(Error::DeviceRead(e)),
    }
}

/// Pin the calling thread to `cpu` (XFUSE's "increased parallelism" keeps a
/// worker's cache warm; whether it pays is measured, not assumed).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(Into::into)
}
