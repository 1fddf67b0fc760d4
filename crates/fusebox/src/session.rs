//! A session owns a mount, its transport's workers and the filesystem, and
//! unmounts when dropped.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fusebox_abi as abi;
use zerocopy::IntoBytes;

use crate::device::{read_loop, DevChannel, LoopEnd, WorkerExit};
use crate::dispatch::Dispatcher;
use crate::error::Error;
use crate::fs::Filesystem;
use crate::later::{InFlight, LaterLimits};
use crate::mount::{Mount, Options};
use crate::protocol::{
    init, parse_contiguous, send_error, send_reply, Body, Connection, Notifier, ParseConfig,
};
use crate::recovery::pause::PauseControl;
use crate::recovery::server::{ledger_for, recover, restore_nodes, serve_for_supervisor, Upgrade};
use crate::recovery::{Channel, Ledger, RecoveryError, StateFile, ToServer, ToSupervisor};
use crate::stats::{self, Snapshot, StatsServer, WorkerStats};
use crate::thread_policy;
use crate::transport::{uring, TransportKind, UringConfig};
use std::os::fd::OwnedFd;

/// How a session runs, beyond the `-o` options.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Classic /dev/fuse workers, io_uring queues, or whichever the kernel
    /// offers.
    pub transport: TransportKind,
    /// Classic worker threads (each with its own cloned /dev/fuse fd). With
    /// io_uring one classic worker remains for FORGET and INTERRUPT.
    pub workers: usize,
    /// Pin classic worker i to CPU i mod ncpus.
    pub pin_workers: bool,
    /// Ring depth, threads and polling, when io_uring serves.
    pub uring: UringConfig,
    /// Scheduling policy of the serving threads (classic workers and queues).
    pub thread_policy: ThreadPolicy,
    /// Serve `fusebox stats` on a unix socket.
    pub stats_socket: bool,
    /// Bounds on requests answered later (memory they may hold).
    pub later: LaterLimits,
}

pub use crate::thread_policy::ThreadPolicy;

mod driven;
mod threads;
pub use driven::DrivenSession;

impl Default for SessionConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        SessionConfig {
            transport: TransportKind::Classic,
            workers: cpus.max(2),
            pin_workers: false,
            uring: UringConfig::default(),
            thread_policy: ThreadPolicy::Adaptive,
            stats_socket: true,
            later: LaterLimits::default(),
        }
    }
}

/// A mounted, running filesystem.
pub struct Session<F: Filesystem> {
    mount: Arc<Mount>,
    dispatcher: Arc<Dispatcher<F>>,
    conn: Connection,
    notifier: Notifier,
    workers: Vec<JoinHandle<Result<WorkerExit, Error>>>,
    live_workers: Arc<AtomicUsize>,
    stats_server: Option<StatsServer>,
    /// The one way a snapshot is made, shared with the stats socket.
    snapshot: Arc<dyn Fn() -> Snapshot + Send + Sync>,
    /// Under a supervisor (`take_over`).
    supervised: bool,
}

/// What a supervisor handed this server (`Session::take_over`).
struct Handoff {
    channel: Channel,
    generation: u64,
    device: OwnedFd,
    clones: Vec<OwnedFd>,
    state: Arc<StateFile>,
    /// An upgrade's nodes, restored before the previous server paused:
    /// the ledger and the change sequence they were read at.
    prepared: Option<(Arc<Ledger>, u64)>,
    /// What the previous server's `Filesystem::save_state` wrote.
    saved_state: Option<OwnedFd>,
    /// The supervisor's listening stats socket.
    stats_socket: Option<std::os::unix::net::UnixListener>,
    /// The filesystem's held area.
    held_area: Option<OwnedFd>,
    /// The io_uring rings the supervisor holds, taken.
    rings: Option<Vec<crate::sys::ring_area::Attached>>,
}

/// How a session gets its mount.
enum Start {
    /// Mount now.
    Mount,
    /// Already mounted by the caller (`Session::serve_mount`).
    Mounted(Mount),
    /// Held by a supervisor (`Session::take_over`).
    Handoff(Handoff),
}

/// What INIT settled, for snapshots taken once it is known.
struct Negotiated {
    proto_minor: u32,
    flags: Vec<String>,
}

/// Snapshots for the stats socket, which starts before the mount (and so
/// before INIT): until INIT is done they show protocol 7.0 and no flags.
fn snapshot_fn(
    mountpoint: &Path,
    transport: TransportKind,
    stats: Arc<Vec<Arc<WorkerStats>>>,
    inflight: Arc<InFlight>,
    negotiated: Arc<OnceLock<Negotiated>>,
    state: Option<Arc<StateFile>>,
    fs: Arc<impl Filesystem>,
) -> impl Fn() -> Snapshot + Send + Sync + 'static {
    // What earlier generations served, carried in the state file.
    let base: Vec<stats::OpSnapshot> = state
        .as_ref()
        .and_then(|s| s.stats())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mountpoint = std::fs::canonicalize(mountpoint)
        .unwrap_or_else(|_| mountpoint.to_path_buf())
        .display()
        .to_string();
    let transport = transport.to_string();
    let started = Instant::now();
    move || {
        let n = negotiated.get();
        Snapshot {
            mountpoint: mountpoint.clone(),
            pid: std::process::id(),
            transport: transport.clone(),
            workers: stats.iter().map(|w| w.total()).collect(),
            proto_minor: n.map_or(0, |n| n.proto_minor),
            flags: n.map(|n| n.flags.clone()).unwrap_or_default(),
            uptime_ms: started.elapsed().as_millis() as u64,
            ops: {
                let mut ops = stats::collect(&stats);
                stats::add_ops(&mut ops, &base);
                ops
            },
            later: inflight.totals(),
            recovery: state.as_ref().map(|s| s.totals()),
            filesystem: fs.counters(),
        }
    }
}

impl<F: Filesystem> Session<F> {
    /// Mount `fs` at `mountpoint`, negotiate INIT, start the workers.
    pub fn mount(
        fs: F,
        mountpoint: &Path,
        opts: &Options,
        cfg: SessionConfig,
    ) -> Result<Session<F>, Error> {
        Self::start(Arc::new(fs), mountpoint, opts, cfg, None)
    }

    /// Serve `mount`, made beforehand with [`Mount::new`]: negotiate INIT,
    /// start the workers. Mounting makes no thread, so a program can mount,
    /// then fork into the background (libfuse's `fuse_daemonize`), then
    /// serve: what the libfuse3 drop-in does.
    pub fn serve_mount(
        fs: F,
        mount: Mount,
        opts: &Options,
        cfg: SessionConfig,
    ) -> Result<Session<F>, Error> {
        let mountpoint = mount.mountpoint().to_path_buf();
        Self::start_inner(Arc::new(fs), &mountpoint, opts, cfg, Start::Mounted(mount))
    }

    /// Serve a mount a supervisor holds (`recovery`): take the device, one
    /// cloned fd per classic worker and the state file from `channel`;
    /// the first generation negotiates INIT, a later one restores what the
    /// kernel holds (nodes, open handles) through the filesystem and has
    /// the kernel resend what the previous server left unanswered. Tells
    /// the supervisor once it serves, or why it cannot.
    pub fn take_over(
        fs: F,
        channel: Channel,
        opts: &Options,
        cfg: SessionConfig,
    ) -> Result<Session<F>, Error> {
        let handoff_err = |what: String| Error::Recovery(RecoveryError::Handoff(what));
        channel
            .send(
                &ToSupervisor::Standing {
                    pid: std::process::id(),
                },
                &[],
            )
            .map_err(|e| handoff_err(format!("telling the supervisor: {e}")))?;
        let fs = Arc::new(fs);
        // An upgrade's successor restores the nodes while the old server
        // still serves (`Prepare`), then waits here for the mount.
        let mut prepared = None;
        let (msg, fds) = loop {
            let (msg, fds) = channel
                .recv::<ToServer>(Some(Duration::from_secs(60)))
                .map_err(|e| handoff_err(format!("no handoff message: {e}")))?;
            if !matches!(msg, ToServer::Prepare) {
                break (msg, fds);
            }
            // Its nodes exist only once the old server's state is loaded,
            // after the pause: nothing to restore ahead.
            if fs.state_in_process() {
                channel
                    .send(&ToSupervisor::Prepared, &[])
                    .map_err(|e| handoff_err(format!("telling the supervisor: {e}")))?;
                continue;
            }
            let ledger = fds
                .into_iter()
                .next()
                .ok_or_else(|| handoff_err("Prepare without the state file".into()))
                .and_then(|fd| StateFile::open(fd).map_err(|e| RecoveryError::State(e).into()))
                .map(|state| ledger_for(&fs, Arc::new(state)));
            match ledger {
                Ok(ledger) => {
                    let began = std::time::Instant::now();
                    // Read before the scan: a slot changed after it is
                    // caught up on after the pause.
                    let seen = ledger.state().node_seq();
                    let nodes = ledger.restore_nodes();
                    let failed = restore_nodes(&*fs, &nodes);
                    tracing::info!(
                        nodes = nodes.len(),
                        failed,
                        ms = began.elapsed().as_secs_f64() * 1e3,
                        "nodes restored ahead of the upgrade"
                    );
                    prepared = Some((ledger, seen));
                    channel
                        .send(&ToSupervisor::Prepared, &[])
                        .map_err(|e| handoff_err(format!("telling the supervisor: {e}")))?;
                }
                Err(e) => {
                    let _ = channel.send(
                        &ToSupervisor::Failed {
                            error: e.to_string(),
                        },
                        &[],
                    );
                    return Err(e);
                }
            }
        };
        let ToServer::Take {
            generation,
            mountpoint,
            clones,
            stats_socket,
            saved_state,
            held_area,
            rings,
        } = msg
        else {
            let e = format!("expected the mount, got {msg:?}");
            let _ = channel.send(&ToSupervisor::Failed { error: e.clone() }, &[]);
            return Err(handoff_err(e));
        };
        crate::recovery::failpoint::arm_from_env(generation);
        let expected = clones
            + 2
            + usize::from(stats_socket)
            + usize::from(saved_state)
            + usize::from(held_area)
            + rings.as_ref().map_or(0, |r| 1 + r.rings.len());
        if fds.len() != expected {
            return Err(handoff_err(format!(
                "expected {expected} fds, got {}",
                fds.len()
            )));
        }
        let mut fds = fds.into_iter();
        let device = fds.next().expect("counted");
        let clone_fds: Vec<OwnedFd> = (&mut fds).take(clones).collect();
        let state = fds.next().expect("counted");
        let stats_socket = stats_socket
            .then(|| fds.next().expect("counted"))
            .map(std::os::unix::net::UnixListener::from);
        let saved_state = saved_state.then(|| fds.next().expect("counted"));
        let held_area = held_area.then(|| fds.next().expect("counted"));
        let rings = match rings.map(|r| r.take(fds.collect())).transpose() {
            Ok(r) => r,
            Err(e) => {
                let e = format!("taking the supervisor's io_uring rings: {e}");
                let _ = channel.send(&ToSupervisor::Failed { error: e.clone() }, &[]);
                return Err(handoff_err(e));
            }
        };
        let state = match StateFile::open(state) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                let e = RecoveryError::State(e);
                let _ = channel.send(
                    &ToSupervisor::Failed {
                        error: e.to_string(),
                    },
                    &[],
                );
                return Err(e.into());
            }
        };
        let handoff = Handoff {
            channel,
            generation,
            device,
            clones: clone_fds,
            state,
            prepared,
            saved_state,
            stats_socket,
            held_area,
            rings,
        };
        Self::start(fs, &mountpoint, opts, cfg, Some(handoff))
    }

    fn start(
        fs: Arc<F>,
        mountpoint: &Path,
        opts: &Options,
        cfg: SessionConfig,
        handoff: Option<Handoff>,
    ) -> Result<Session<F>, Error> {
        let Some(handoff) = handoff else {
            return Self::start_inner(fs, mountpoint, opts, cfg, Start::Mount);
        };
        let channel = handoff.channel.try_clone_fd();
        match Self::start_inner(fs, mountpoint, opts, cfg, Start::Handoff(handoff)) {
            Ok(s) => Ok(s),
            Err(e) => {
                if let Ok(c) = channel {
                    let _ = c.send(
                        &ToSupervisor::Failed {
                            error: e.to_string(),
                        },
                        &[],
                    );
                }
                Err(e)
            }
        }
    }

    fn start_inner(
        fs: Arc<F>,
        mountpoint: &Path,
        opts: &Options,
        cfg: SessionConfig,
        start: Start,
    ) -> Result<Session<F>, Error> {
        let (mut handoff, mut premade) = match start {
            Start::Mount => (None, None),
            Start::Mounted(m) => (None, Some(m)),
            Start::Handoff(h) => (Some(h), None),
        };
        let Plan {
            transport,
            init_cfg,
            classic_n,
            per_queue,
            rings_n,
        } = Plan::new(&cfg, &opts.init, handoff.as_ref())?;
        let inflight = Arc::new(InFlight::new(classic_n + rings_n, cfg.later));
        let stats = thread_stats(classic_n, rings_n, per_queue, &inflight);
        // The statistics endpoint is up before mount(2) makes the mount
        // visible: a script that waits for the mount can read stats at once.
        // What INIT negotiates is filled in when it is known.
        let negotiated = Arc::new(OnceLock::new());
        let snapshot: Arc<dyn Fn() -> Snapshot + Send + Sync> = Arc::new(snapshot_fn(
            mountpoint,
            transport,
            stats.clone(),
            inflight.clone(),
            negotiated.clone(),
            handoff.as_ref().map(|h| h.state.clone()),
            fs.clone(),
        ));
        let shared_socket = handoff.as_mut().and_then(|h| h.stats_socket.take());
        let stats_server = cfg
            .stats_socket
            .then(|| stats_endpoint(mountpoint, &snapshot, shared_socket))
            .flatten();
        let held_rings = handoff.as_mut().and_then(|h| h.rings.take());
        let held = held_rings.is_some();
        let (mount, clone_fds, supervisor, prepared, saved_state, held_area) = match handoff {
            Some(h) => (
                Arc::new(Mount::adopt(mountpoint, h.device)),
                Some(h.clones),
                Some((h.channel, h.generation, h.state)),
                h.prepared,
                h.saved_state,
                h.held_area,
            ),
            None => (
                Arc::new(match premade.take() {
                    Some(m) => m,
                    None => Mount::new(mountpoint, &opts.mount)?,
                }),
                None,
                None,
                None,
                None,
                None,
            ),
        };
        let notifier = Notifier::for_device(Arc::new(DevChannel::new(mount.device().try_clone()?)));
        let mut ledger = None;
        let conn = match &supervisor {
            None => handshake(&mount, &*fs, &init_cfg, &notifier)?,
            Some((_, generation, state)) => {
                let (conn, l) = recover(
                    &fs,
                    &notifier,
                    *generation,
                    state,
                    Upgrade {
                        prepared,
                        saved_state,
                        held_area,
                    },
                    || handshake(&mount, &*fs, &init_cfg, &notifier),
                )?;
                ledger = Some(l);
                conn
            }
        };
        let _ = negotiated.set(Negotiated {
            proto_minor: conn.proto_minor,
            flags: conn.flag_names().into_iter().map(String::from).collect(),
        });
        if transport == TransportKind::Uring && !conn.has(abi::flags::init::OVER_IO_URING) {
            return Err(Error::UringUnavailable(
                "the kernel did not offer FUSE_OVER_IO_URING in INIT (is enable_uring set? see /sys/module/fuse/parameters/enable_uring)".into(),
            ));
        }
        // INIT could only lower the window; a larger one asked for is set
        // now that the kernel has taken INIT's answer.
        if let Some(asked) = init_cfg.max_readahead.filter(|&r| r > conn.max_readahead) {
            mount.set_read_ahead(asked)?;
        }
        tracing::info!(
            mountpoint = %mount.mountpoint().display(),
            proto = format!("7.{}", conn.proto_minor),
            max_write = conn.max_write,
            %transport,
            flags = ?conn.flag_names(),
            "mounted"
        );

        let parse = ParseConfig {
            setxattr_ext: conn.has(abi::flags::init::SETXATTR_EXT),
        };
        let mut dispatcher =
            Dispatcher::with_inflight(fs, parse, notifier.clone(), inflight.clone());
        if let Some(l) = ledger {
            dispatcher = dispatcher.with_ledger(l);
        }
        let dispatcher = Arc::new(dispatcher);
        // The kernel computes the payload it may put in one entry as
        // max(8 KiB, max_write, max_pages pages); buffers are sized to match.
        let payload_len = uring::payload_len_for(conn.max_write);
        // Each ring thread's way back for answers given later, made here so
        // the /dev/fuse worker can tell them all when the connection ends.
        let mailboxes = match &held_rings {
            Some(rings) => {
                if let Some(r) = rings.first().filter(|r| r.layout.payload_len < payload_len) {
                    return Err(RecoveryError::Handoff(format!(
                        "the supervisor's ring entries hold {} bytes, the connection needs {payload_len} (max_write {})",
                        r.layout.payload_len, conn.max_write
                    ))
                    .into());
                }
                rings
                    .iter()
                    .map(|r| r.wake.try_clone().map(uring::RingMailbox::with_eventfd))
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => (0..rings_n)
                .map(|_| uring::RingMailbox::new())
                .collect::<Result<Vec<_>, _>>()?,
        };
        let ring_bells: Vec<Arc<uring::RingMailbox>> =
            mailboxes.iter().map(|(m, _)| m.clone()).collect();
        // Without the right to take threads back from SCHED_IDLE the
        // adaptive policy degrades to normal: slower, never unsafe.
        let guard = match cfg.thread_policy {
            ThreadPolicy::Adaptive => thread_policy::Guard::start()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "thread policy adaptive unavailable; serving threads stay normal")
                })
                .ok(),
            _ => None,
        };
        // A supervised server's workers can be paused for an upgrade.
        let supervisor = match supervisor {
            Some((channel, generation, state)) => {
                crate::sys::install_wake_handler().map_err(Error::Io)?;
                let pause = Arc::new(PauseControl::default());
                Some((channel, generation, state, pause))
            }
            None => None,
        };
        let pause = supervisor.as_ref().map(|(_, _, _, p)| p.clone());
        let live_workers = Arc::new(AtomicUsize::new(classic_n + rings_n));
        let shared = threads::Shared {
            dispatcher: dispatcher.clone(),
            mount: mount.clone(),
            stats,
            live: live_workers.clone(),
            registered_rings: Arc::new(AtomicUsize::new(0)),
            thread_policy: cfg.thread_policy,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let mut workers = Vec::with_capacity(classic_n + rings_n);
        threads::spawn_classic(
            &shared,
            threads::Classic {
                count: classic_n,
                clones: clone_fds,
                buf_size: (conn.max_write as usize).max(128 << 10) + 4096,
                pin: cfg.pin_workers,
                ring_bells: &ring_bells,
                rings: (transport == TransportKind::Uring).then_some(rings_n),
                pause: pause.as_ref(),
            },
            &mut workers,
        )?;
        threads::spawn_rings(
            &shared,
            threads::Rings {
                first_slot: classic_n,
                per_queue,
                mailboxes,
                payload_len,
                config: cfg.uring,
                guard,
                held: held_rings,
                pause: pause.clone(),
            },
            &mut workers,
        )?;

        let supervised = match supervisor {
            Some((channel, generation, state, pause)) => {
                serve_for_supervisor(
                    channel,
                    generation,
                    pause,
                    &snapshot,
                    state,
                    dispatcher.filesystem().clone(),
                    held.then(|| mount.clone()),
                )?;
                true
            }
            None => false,
        };
        Ok(Session {
            mount,
            dispatcher,
            conn,
            notifier,
            workers,
            live_workers,
            stats_server,
            snapshot,
            supervised,
        })
    }

    /// Whether a supervisor holds this mount (`Session::take_over`).
    pub fn is_supervised(&self) -> bool {
        self.supervised
    }

    /// Current per-request-type statistics.
    pub fn snapshot(&self) -> Snapshot {
        (self.snapshot)()
    }

    /// Where the filesystem is mounted.
    pub fn mountpoint(&self) -> &Path {
        self.mount.mountpoint()
    }

    /// What INIT settled with the kernel.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Sends the kernel notifications (cache invalidation, poll wake-ups).
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The filesystem served.
    pub fn filesystem(&self) -> &Arc<F> {
        self.dispatcher.filesystem()
    }

    /// The fusectl connection number of this mount.
    pub fn connection_id(&self) -> Option<u32> {
        self.mount.connection_id()
    }

    /// Path of the stats socket, if serving.
    pub fn stats_socket(&self) -> Option<PathBuf> {
        self.stats_server.as_ref().map(|s| s.path().to_path_buf())
    }

    /// Unmount (lazily) and abort the connection if the workers have not
    /// stopped within `grace`: open files then fail with ENOTCONN instead of
    /// keeping the daemon alive forever.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            mount: self.mount.clone(),
            live_workers: self.live_workers.clone(),
        }
    }

    /// Unmount on SIGINT, SIGTERM and SIGHUP.
    pub fn unmount_on_signals(&self, grace: Duration) -> Result<(), Error> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = self.shutdown_handle();
        std::thread::Builder::new()
            .name("fusebox-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    tracing::info!(signal = sig, "unmounting on signal");
                    handle.shutdown(grace);
                }
            })?;
        Ok(())
    }

    /// Block until every worker has stopped (the filesystem was unmounted or
    /// the connection aborted).
    pub fn wait(mut self) -> Result<(), Error> {
        let mut first_err = None;
        for h in self.workers.drain(..) {
            match h.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "worker failed");
                    first_err.get_or_insert(e);
                }
                Err(_) => tracing::error!("worker thread panicked outside a request"),
            }
        }
        // The kernel is gone; DESTROY may not have been sent (only fuseblk
        // mounts get it; not after a lazy unmount or an abort). Give the
        // filesystem its destroy call either way. A server that hands its
        // mount to the next one for an upgrade exits before this.
        self.mount.unmount().ok();
        self.dispatcher.destroy_once();
        first_err.map_or(Ok(()), Err)
    }
}

/// Unmounts a session from another thread (signal handler, test watchdog).
#[derive(Clone)]
pub struct ShutdownHandle {
    mount: Arc<Mount>,
    live_workers: Arc<AtomicUsize>,
}

impl ShutdownHandle {
    /// Unmount lazily, and abort the connection if the workers have not
    /// stopped within `grace`.
    pub fn shutdown(&self, grace: Duration) {
        if let Err(e) = self.mount.unmount() {
            tracing::warn!(error = %e, "unmount failed");
        }
        if !self.wait_workers(grace) {
            tracing::warn!("workers still busy after unmount; aborting the connection");
            if let Err(e) = self.mount.abort() {
                tracing::warn!(error = %e, "abort failed");
            }
        }
    }

    /// Abort the connection now (every pending request fails with ENOTCONN).
    pub fn abort(&self) -> Result<(), Error> {
        self.mount.abort()
    }

    /// Wait up to `timeout` for all workers to stop.
    pub fn wait_workers(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.live_workers.load(Ordering::Acquire) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

impl<F: Filesystem> Drop for Session<F> {
    fn drop(&mut self) {
        if self.workers.is_empty() {
            return;
        }
        let handle = self.shutdown_handle();
        handle.shutdown(Duration::from_secs(5));
        if !handle.wait_workers(Duration::from_secs(5)) {
            tracing::error!("workers did not stop after abort; leaving them detached");
            self.workers.clear();
            return;
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// How a session serves: its transport, what INIT asks for, and how many
/// threads of each kind.
struct Plan {
    transport: TransportKind,
    init_cfg: init::InitConfig,
    classic_n: usize,
    /// Ring threads for each CPU's queue.
    per_queue: usize,
    rings_n: usize,
}

impl Plan {
    fn new(
        cfg: &SessionConfig,
        init: &init::InitConfig,
        handoff: Option<&Handoff>,
    ) -> Result<Plan, Error> {
        // A supervised server serves the way its supervisor set up: over
        // the rings it holds, or classic /dev/fuse without them.
        let transport = match handoff {
            Some(h) if h.rings.is_some() => TransportKind::Uring,
            Some(_) => TransportKind::Classic,
            None => cfg.transport.resolve(),
        };
        let mut init_cfg = init.clone();
        if transport == TransportKind::Uring {
            // Refuse before mounting, with the reason and the fix.
            uring::availability().map_err(Error::UringUnavailable)?;
            init_cfg.want |= abi::flags::init::OVER_IO_URING;
        }
        let classic_n = match (handoff, transport) {
            (Some(h), _) => h.clones.len().max(1),
            (None, TransportKind::Uring) => 1,
            (None, _) => cfg.workers.max(1),
        };
        // Ring threads: `per_queue` for each CPU's queue. The kernel hands a
        // request to the most recently re-armed free entry of the caller's
        // queue, so a second thread with one entry takes the second of two
        // requests that arrive together (readahead) instead of it waiting
        // behind the first (DESIGN.md, "Threads per queue").
        let (per_queue, rings_n) = match handoff.and_then(|h| h.rings.as_ref()) {
            // As many threads as the supervisor made rings, each queue's
            // together.
            Some(rings) => {
                let n = rings.len().max(1);
                (n.div_ceil(uring::possible_cpus()).max(1), n)
            }
            None if transport == TransportKind::Uring => {
                let per_queue = cfg.uring.threads_per_queue.max(1);
                (per_queue, uring::possible_cpus() * per_queue)
            }
            None => (cfg.uring.threads_per_queue.max(1), 0),
        };
        Ok(Plan {
            transport,
            init_cfg,
            classic_n,
            per_queue,
            rings_n,
        })
    }
}

/// Each serving thread's counters, classic workers first, and the
/// answers given later (recorded by whichever thread answers).
fn thread_stats(
    classic_n: usize,
    rings_n: usize,
    per_queue: usize,
    inflight: &InFlight,
) -> Arc<Vec<Arc<WorkerStats>>> {
    Arc::new(
        (0..classic_n)
            .map(|i| Arc::new(WorkerStats::new(format!("dev/{i}"))))
            .chain((0..rings_n).map(|t| {
                let (q, k) = (t / per_queue, t % per_queue);
                Arc::new(WorkerStats::new(if k == 0 {
                    format!("uring/q{q}")
                } else {
                    format!("uring/q{q}.{k}")
                }))
            }))
            .chain(std::iter::once(inflight.stats.clone()))
            .collect(),
    )
}

/// The statistics socket for `mountpoint`: the supervisor's, handed over,
/// or a new one. Without it the mount still serves.
fn stats_endpoint(
    mountpoint: &Path,
    snapshot: &Arc<dyn Fn() -> Snapshot + Send + Sync>,
    shared: Option<std::os::unix::net::UnixListener>,
) -> Option<StatsServer> {
    let snap = snapshot.clone();
    match shared {
        Some(l) => StatsServer::serve_shared(l, mountpoint, move || snap()),
        None => StatsServer::start(mountpoint, move || snap()),
    }
    .inspect_err(
        |e| tracing::warn!(error = %e, "stats socket unavailable; `fusebox stats` will not work"),
    )
    .ok()
}

/// Read INIT from the device and answer it, retrying once if the kernel
/// offers a newer major version.
fn handshake<F: Filesystem>(
    mount: &Mount,
    fs: &F,
    cfg: &init::InitConfig,
    notifier: &Notifier,
) -> Result<Connection, Error> {
    let channel = DevChannel::new(mount.device().try_clone()?);
    let mut buf = vec![0u8; abi::MIN_READ_BUFFER.max(64 << 10)];
    let end = read_loop(
        &channel,
        &mut buf,
        || {},
        |request| match answer_init(request, &channel, fs, cfg, notifier) {
            // The kernel was asked to retry with an older protocol.
            Ok(None) => ControlFlow::Continue(()),
            Ok(Some(conn)) => ControlFlow::Break(Ok(conn)),
            Err(e) => ControlFlow::Break(Err(e)),
        },
    );
    match end {
        Ok(LoopEnd::Stopped(settled)) => settled,
        Ok(LoopEnd::Ended(why)) => Err(Error::DeviceRead(std::io::Error::from_raw_os_error(
            why.errno(),
        ))),
        Err(e) => Err(Error::DeviceRead(e)),
    }
}

/// Answer the kernel's first request, which must be INIT: the connection
/// once settled, None when the kernel was asked to retry with an older
/// protocol (another INIT follows).
pub(crate) fn answer_init<F: Filesystem>(
    request: &[u8],
    channel: &DevChannel,
    fs: &F,
    cfg: &init::InitConfig,
    notifier: &Notifier,
) -> Result<Option<Connection>, Error> {
    let req = parse_contiguous(request, ParseConfig::default())?;
    let unique = req.unique();
    let init_in = match req.into_init() {
        Ok(init) => init,
        Err(op) => {
            let _ = send_error(channel, unique, crate::error::Errno::EIO);
            return Err(Error::NoInit(op));
        }
    };
    match init::begin(&init_in, cfg) {
        Ok(init::InitStep::Retry(out)) => {
            send_reply(channel, unique, Ok(Body::fixed(&out))).map_err(Error::DeviceWrite)?;
            Ok(None)
        }
        Ok(init::InitStep::Proceed(mut conn)) => {
            if let Err(e) = fs.init(&mut conn, notifier) {
                let _ = send_error(channel, unique, e);
                return Err(Error::Io(std::io::Error::other(format!(
                    "filesystem init failed: {e}"
                ))));
            }
            let out = init::finish(&mut conn);
            let len = init::reply_len(conn.proto_minor);
            send_reply(
                channel,
                unique,
                Ok(Body {
                    fixed: &out.as_bytes()[..len],
                    ..Body::EMPTY
                }),
            )
            .map_err(Error::DeviceWrite)?;
            Ok(Some(conn))
        }
        Err(e) => {
            let _ = send_error(channel, unique, e.errno());
            Err(e)
        }
    }
}
