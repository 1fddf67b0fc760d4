//! A session whose caller reads the requests.
//!
//! Some programs run their own event loop around the device: pyfuse3 waits
//! for /dev/fuse to be readable under trio, reads one request
//! (libfuse's `fuse_session_receive_buf`) and hands it back
//! (`fuse_session_process_buf`). [`DrivenSession`] is that shape: no
//! thread of its own; INIT is answered when it arrives like any request,
//! and each request is dispatched on the calling thread, its answer
//! written on the device at once or later through a
//! [`ReplyToken`](crate::ReplyToken). `fusebox stats` works on it as on
//! any session.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::device::{DevChannel, Received, WorkerExit};
use crate::dispatch::{Dispatcher, Worker};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::later::InFlight;
use crate::mount::{Mount, Options};
use crate::protocol::{Connection, DataOut, Notifier, ParseConfig};
use crate::stats::{StatsServer, WorkerStats};
use crate::transport::TransportKind;

use super::{answer_init, snapshot_fn, Negotiated, SessionConfig};

/// Serving slots: callers beyond this many at once wait for one. Programs
/// that drive the device themselves mostly do it from one thread.
const SLOTS: usize = 4;

/// A mounted filesystem served by whoever calls [`DrivenSession::process`].
pub struct DrivenSession<F: Filesystem> {
    mount: Arc<Mount>,
    fs: Arc<F>,
    opts: Options,
    channel: Arc<DevChannel>,
    notifier: Notifier,
    inflight: Arc<InFlight>,
    /// Set once INIT is answered.
    dispatcher: OnceLock<Arc<Dispatcher<F>>>,
    negotiated: Arc<OnceLock<Negotiated>>,
    conn: OnceLock<Connection>,
    workers: Vec<Mutex<Worker>>,
    buf_size: usize,
    _stats_server: Option<StatsServer>,
}

impl<F: Filesystem> DrivenSession<F> {
    /// Serve `mount` (made with [`Mount::new`]) as requests are handed in.
    pub fn new(
        fs: F,
        mount: Mount,
        opts: &Options,
        cfg: &SessionConfig,
    ) -> Result<DrivenSession<F>, Error> {
        let mount = Arc::new(mount);
        let fs = Arc::new(fs);
        let channel = Arc::new(DevChannel::new(mount.device().try_clone()?));
        let notifier = Notifier::for_device(channel.clone());
        let inflight = Arc::new(InFlight::new(SLOTS, cfg.later));
        let stats: Arc<Vec<Arc<WorkerStats>>> = Arc::new(
            (0..SLOTS)
                .map(|i| Arc::new(WorkerStats::new(format!("driven/{i}"))))
                .chain(std::iter::once(inflight.stats.clone()))
                .collect(),
        );
        let negotiated = Arc::new(OnceLock::new());
        let stats_server = if cfg.stats_socket {
            let snap = snapshot_fn(
                mount.mountpoint(),
                TransportKind::Classic,
                stats.clone(),
                inflight.clone(),
                negotiated.clone(),
                None,
                fs.clone(),
            );
            StatsServer::start(mount.mountpoint(), snap)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "stats socket unavailable; `fusebox stats` will not work")
                })
                .ok()
        } else {
            None
        };
        let buf_size = (opts.init.max_write as usize).max(128 << 10) + 4096;
        let workers = (0..SLOTS)
            .map(|i| {
                let mut w = Worker::new(DataOut::with_capacity(buf_size), stats[i].clone(), i);
                w.later = Some(channel.clone());
                Mutex::new(w)
            })
            .collect();
        Ok(DrivenSession {
            mount,
            fs,
            opts: opts.clone(),
            channel,
            notifier,
            inflight,
            dispatcher: OnceLock::new(),
            negotiated,
            conn: OnceLock::new(),
            workers,
            buf_size,
            _stats_server: stats_server,
        })
    }

    /// The device requests are read from (poll it for readability).
    pub fn device(&self) -> BorrowedFd<'_> {
        self.mount.device().as_fd()
    }

    /// A buffer size that holds any request the kernel may send.
    pub fn buffer_size(&self) -> usize {
        self.buf_size
    }

    /// The mount served.
    pub fn mount(&self) -> &Mount {
        &self.mount
    }

    /// The filesystem served.
    pub fn filesystem(&self) -> &Arc<F> {
        &self.fs
    }

    /// Sends the kernel notifications (cache invalidation, poll wake-ups).
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// What INIT settled, once it has been answered.
    pub fn connection(&self) -> Option<&Connection> {
        self.conn.get()
    }

    /// Read one request into `buf`: its length; Ok(0) once the filesystem
    /// is unmounted, ECONNABORTED once the connection was aborted. EINTR
    /// and EAGAIN (a non-blocking device with nothing to read) come back as
    /// errors for the caller's loop to decide on.
    pub fn receive(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match crate::device::read_request(self.mount.device().as_fd(), buf)? {
            Received::Request(n) => Ok(n),
            // The errno itself, not only its kind: the drop-in hands it to
            // libfuse programs as -EAGAIN or -EINTR.
            Received::WouldBlock => Err(std::io::Error::from_raw_os_error(libc::EAGAIN)),
            Received::Interrupted => Err(std::io::Error::from_raw_os_error(libc::EINTR)),
            Received::Ended(WorkerExit::Unmounted) => Ok(0),
            // As libfuse reports it: -ECONNABORTED, not a clean end.
            Received::Ended(why) => Err(std::io::Error::from_raw_os_error(why.errno())),
        }
    }

    /// Serve one request read with [`receive`](Self::receive).
    pub fn process(&self, request: &[u8]) -> Result<(), Error> {
        let Some(dispatcher) = self.dispatcher.get() else {
            let Some(conn) = answer_init(
                request,
                &self.channel,
                &*self.fs,
                &self.opts.init,
                &self.notifier,
            )?
            else {
                return Ok(());
            };
            let parse = ParseConfig {
                setxattr_ext: conn.has(fusebox_abi::flags::init::SETXATTR_EXT),
            };
            let _ = self.negotiated.set(Negotiated {
                proto_minor: conn.proto_minor,
                flags: conn.flag_names().into_iter().map(String::from).collect(),
            });
            let _ = self.conn.set(conn);
            let _ = self.dispatcher.set(Arc::new(Dispatcher::with_inflight(
                self.fs.clone(),
                parse,
                self.notifier.clone(),
                self.inflight.clone(),
            )));
            return Ok(());
        };
        let mut worker = self
            .workers
            .iter()
            .find_map(|w| w.try_lock().ok())
            .unwrap_or_else(|| {
                self.workers[0]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            });
        dispatcher.dispatch_contiguous(request, &mut worker, &*self.channel);
        worker.served();
        Ok(())
    }

    /// Detach the mount (lazily).
    pub fn unmount(&self) -> Result<(), Error> {
        self.mount.unmount()
    }
}
