//! The supervisor: holds the mount, its /dev/fuse fd, one cloned fd per
//! classic worker and the state file; does no filesystem work. It starts
//! a server, hands it all of them, and when the server dies while the
//! mount lives, starts the next one, up to a restart limit.
//!
//! Why the clones live here too: closing the last reference to a cloned
//! /dev/fuse fd ends the requests read through it with ECONNABORTED
//! (`fuse_dev_release`). Held here, they outlive the server, and the next
//! one's FUSE_NOTIFY_RESEND finds those requests still waiting.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handoff::{Channel, ToServer, ToSupervisor, HANDOFF_ENV};
use super::state::{Capacity, StateFile};
use super::RecoveryError;
use crate::device::{device_gone, read_loop, DevChannel};
use crate::mount::Mount;
use crate::protocol::opcodes::facts;
use crate::protocol::parse_header;
use crate::protocol::{send_error, Notifier};
use crate::stats::{Snapshot, StatsServer, StatsSocket};
use crate::sys::ring_area::{AreaLayout, HeldRings};
use crate::sys::shared_map::SharedMap;

/// How a supervisor runs its mount: what it keeps for the servers and
/// how often it restarts them.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// Classic worker fds to clone and keep (the server's worker count).
    pub clones: usize,
    /// How many nodes, handles and journaled requests the state file holds.
    pub capacity: Capacity,
    /// A server that dies more than this many times within
    /// `restart_window` is not started again.
    pub max_restarts: usize,
    /// The window `max_restarts` counts deaths in.
    pub restart_window: Duration,
    /// A server that had served this long when it died was not in a
    /// crash loop (it was killed, or failed on something later on): its
    /// death is not counted against `max_restarts`. A loop dies before
    /// this: a server that cannot start, or one that dies on a request
    /// replayed to it as soon as it serves.
    pub settled_after: Duration,
    /// How long a server may take from start to serving.
    pub start_timeout: Duration,
    /// Bytes of memory to hold for the filesystem across server
    /// generations (`Filesystem::adopt_held_area`); 0 for none.
    pub held_area: usize,
    /// Serve over io_uring rings the supervisor holds (None: classic
    /// /dev/fuse).
    pub rings: Option<RingPlan>,
}

/// The io_uring rings a supervisor makes and holds for its servers
/// (`sys::ring_area`).
#[derive(Clone, Debug)]
pub struct RingPlan {
    /// Ring threads per CPU queue.
    pub per_queue: usize,
    /// Entries per ring.
    pub depth: usize,
    /// Bytes of each entry's payload buffer: at least what the servers'
    /// max_write needs (a server refuses smaller ones).
    pub payload_len: usize,
    /// How long the kernel's SQ thread polls after work before it sleeps.
    pub sq_idle: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            clones: 2,
            capacity: Capacity::default(),
            max_restarts: 5,
            restart_window: Duration::from_secs(30),
            settled_after: Duration::from_millis(500),
            start_timeout: Duration::from_secs(10),
            held_area: 0,
            rings: None,
        }
    }
}

/// Once no server will be started again, `fusebox upgrade` is told so
/// instead of waiting for an answer that would never come.
fn refuse_upgrades(inbox: mpsc::Receiver<Event>, status: String) {
    std::thread::spawn(move || {
        for event in inbox {
            if let Event::Upgrade { reply, .. } = event {
                let _ = reply.send(Err(format!("{status}; unmount and mount again")));
            }
        }
    });
}

/// The serving process.
struct Running {
    generation: u64,
    pid: u32,
    channel: Channel,
    /// False if its filesystem keeps its state in its process: a crash
    /// leaves nothing a new server could serve the kernel's nodes from.
    recovers_from_crash: bool,
    /// When it began to serve.
    serving_since: Instant,
}

enum Event {
    /// A server process ended.
    Exited { generation: u64, why: String },
    /// `fusebox upgrade`: the answer goes back on `reply`.
    Upgrade {
        binary: Option<PathBuf>,
        reply: mpsc::Sender<Result<String, String>>,
    },
}

/// Where `fusebox upgrade` finds the supervisor of `mountpoint`.
pub fn control_socket_for(mountpoint: &Path) -> PathBuf {
    crate::stats::socket_path_for(mountpoint).with_extension("ctl")
}

/// A request on the control socket: one JSON line in, one out.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum ControlRequest {
    /// Start a new server and hand the mount to it (`fusebox upgrade`).
    Upgrade {
        /// The program to start instead of the running one; `None` starts
        /// the same again.
        binary: Option<PathBuf>,
    },
}

/// The supervisor's answer on the control socket.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum ControlReply {
    /// The request was carried out; the text says what happened.
    Done(String),
    /// It was not; the text says why. The old server serves on.
    Failed(String),
}

struct ControlSocket {
    path: PathBuf,
}

impl ControlSocket {
    fn start(mountpoint: &Path, events: mpsc::Sender<Event>) -> std::io::Result<ControlSocket> {
        use std::io::{BufRead, BufReader, Write};
        let path = control_socket_for(mountpoint);
        crate::stats::ensure_runtime_dir()?;
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        std::thread::Builder::new()
            .name("fusebox-supervisor-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let mut line = String::new();
                    if BufReader::new(&conn).read_line(&mut line).is_err() {
                        continue;
                    }
                    let reply = match serde_json::from_str::<ControlRequest>(&line) {
                        Ok(ControlRequest::Upgrade { binary }) => {
                            let (tx, rx) = mpsc::channel();
                            if events.send(Event::Upgrade { binary, reply: tx }).is_err() {
                                return;
                            }
                            match rx.recv() {
                                Ok(Ok(s)) => ControlReply::Done(s),
                                Ok(Err(e)) => ControlReply::Failed(e),
                                Err(_) => ControlReply::Failed("the supervisor is stopping".into()),
                            }
                        }
                        Err(e) => ControlReply::Failed(format!("bad request: {e}")),
                    };
                    let mut out = serde_json::to_string(&reply).unwrap_or_default();
                    out.push('\n');
                    let _ = conn.write_all(out.as_bytes());
                }
            })?;
        Ok(ControlSocket { path })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Ask the supervisor of `mountpoint` to upgrade its server.
pub fn request_upgrade(mountpoint: &Path, binary: Option<&Path>) -> Result<String, String> {
    use std::io::{BufRead, BufReader, Write};
    let paths: Vec<PathBuf> = crate::stats::socket_paths_to_try(mountpoint)
        .into_iter()
        .map(|p| p.with_extension("ctl"))
        .collect();
    let (_, mut conn) = crate::stats::connect_first(&paths).map_err(|(path, e)| {
        format!(
            "no supervisor answers for {} at {} ({e}): is it mounted with recovery on?",
            mountpoint.display(),
            path.display()
        )
    })?;
    let req = ControlRequest::Upgrade {
        binary: binary.map(Path::to_path_buf),
    };
    let mut line = serde_json::to_string(&req).map_err(|e| e.to_string())?;
    line.push('\n');
    conn.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(&conn)
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    match serde_json::from_str::<ControlReply>(&answer) {
        Ok(ControlReply::Done(s)) => Ok(s),
        Ok(ControlReply::Failed(e)) => Err(e),
        Err(e) => Err(format!("unreadable answer {answer:?}: {e}")),
    }
}

/// How supervision ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SupervisorExit {
    /// The mount went away (unmounted or aborted).
    Unmounted,
}

/// Holds a mount, its /dev/fuse fds and its recovery state, and runs the
/// servers that serve it, one at a time, starting the next when one dies
/// or is upgraded. It does no filesystem work itself.
pub struct Supervisor {
    mount: Arc<Mount>,
    clones: Vec<OwnedFd>,
    state: Arc<StateFile>,
    /// The mount's stats socket, answered on by whichever server serves
    /// (a `fusebox stats` between two servers waits for the next).
    stats: Option<StatsSocket>,
    /// The filesystem's held area, when it asked for one.
    held: Option<SharedMap>,
    /// The io_uring rings the servers serve on, when over io_uring. The
    /// kernel's SQ thread that issues their commands is this process's:
    /// a server's death cancels none of them.
    rings: Option<HeldRings>,
    cfg: SupervisorConfig,
    stopping: Arc<AtomicBool>,
}

/// A supervised mount's servers are this very program started again with
/// its arguments (or, after an upgrade, the binary it named): what
/// [`Supervisor::run`] takes, for a program whose servers are itself.
/// Standard input and output are not passed on: a server's stdout would
/// outlive the pipe a detaching command reads readiness from.
pub fn this_program_again() -> std::io::Result<impl FnMut(Option<&Path>) -> Command> {
    let exe = std::env::current_exe()?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    Ok(move |binary: Option<&Path>| {
        let mut c = Command::new(binary.unwrap_or(&exe));
        c.args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        c
    })
}

impl Supervisor {
    /// Mount at `mountpoint` and supervise the mount, the stats socket
    /// bound first: `fusebox stats` answers from the moment the mount
    /// appears (the connection waits for the first server).
    pub fn for_new_mount(
        mountpoint: &Path,
        opts: &crate::mount::MountOptions,
        cfg: SupervisorConfig,
    ) -> Result<Supervisor, RecoveryError> {
        let stats = StatsSocket::bind(mountpoint)
            .inspect_err(|e| tracing::warn!(error = %e, "stats socket unavailable; `fusebox stats` will not work"))
            .ok();
        let mount = Mount::new(mountpoint, opts).map_err(|e| RecoveryError::Mount(Box::new(e)))?;
        Self::with_stats_socket(mount, stats, cfg)
    }

    /// Take over `mount` (made by this process, not yet INIT'ed).
    pub fn new(mount: Mount, cfg: SupervisorConfig) -> Result<Supervisor, RecoveryError> {
        let stats = StatsSocket::bind(mount.mountpoint())
            .inspect_err(|e| tracing::warn!(error = %e, "stats socket unavailable; `fusebox stats` will not work"))
            .ok();
        Self::with_stats_socket(mount, stats, cfg)
    }

    /// `new`, with the mount's stats socket bound before the mount was
    /// made (`StatsSocket::bind`), so that `fusebox stats` connects from
    /// the moment the mount appears.
    pub fn with_stats_socket(
        mount: Mount,
        stats: Option<StatsSocket>,
        cfg: SupervisorConfig,
    ) -> Result<Supervisor, RecoveryError> {
        let clones = (0..cfg.clones.max(1))
            .map(|_| crate::sys::clone_device(mount.device().as_fd()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RecoveryError::Clone)?;
        let state = Arc::new(StateFile::create(cfg.capacity).map_err(RecoveryError::State)?);
        let held = (cfg.held_area > 0)
            .then(|| SharedMap::create("fusebox-held-area", cfg.held_area))
            .transpose()
            .map_err(RecoveryError::Io)?;
        let rings = cfg
            .rings
            .as_ref()
            .map(|plan| {
                let qids: Vec<u16> = (0..crate::sys::possible_cpus())
                    .flat_map(|q| std::iter::repeat_n(q as u16, plan.per_queue.max(1)))
                    .collect();
                let layout = AreaLayout {
                    rings: qids.len(),
                    depth: plan.depth.max(1),
                    payload_len: plan.payload_len,
                };
                HeldRings::create(
                    mount.device().as_fd(),
                    &qids,
                    layout,
                    plan.sq_idle.as_millis().clamp(1, u32::MAX as u128) as u32,
                )
            })
            .transpose()
            .map_err(|e| {
                RecoveryError::Io(std::io::Error::other(format!(
                    "setting up the io_uring rings: {e}"
                )))
            })?;
        Ok(Supervisor {
            mount: Arc::new(mount),
            clones,
            state,
            stats,
            held,
            rings,
            cfg,
            stopping: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The recovery state file the servers record into.
    pub fn state(&self) -> &Arc<StateFile> {
        &self.state
    }

    /// The mount supervised.
    pub fn mount(&self) -> &Arc<Mount> {
        &self.mount
    }

    /// Unmount on SIGINT, SIGTERM and SIGHUP; the server then sees the
    /// mount go and exits, and so does `run`.
    pub fn unmount_on_signals(&self) -> Result<(), RecoveryError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .map_err(RecoveryError::Io)?;
        let mount = self.mount.clone();
        let stopping = self.stopping.clone();
        std::thread::Builder::new()
            .name("fusebox-supervisor-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    tracing::info!(signal = sig, "supervisor unmounting on signal");
                    stopping.store(true, Ordering::Release);
                    if let Err(e) = mount.unmount() {
                        tracing::warn!(error = %e, "unmount failed");
                    }
                }
            })
            .map_err(RecoveryError::Io)?;
        Ok(())
    }

    /// Start servers with `server` (a command line of this binary, or of
    /// the one an upgrade names; the handoff fd is added to its
    /// environment) until the mount goes away. `serving` is called once,
    /// when the first server serves. `fusebox upgrade` requests arrive on
    /// the control socket (`control_socket_for`).
    pub fn run(
        &self,
        mut server: impl FnMut(Option<&Path>) -> Command,
        serving: impl FnOnce(u32),
    ) -> Result<SupervisorExit, RecoveryError> {
        let (events, inbox) = mpsc::channel::<Event>();
        let _control = ControlSocket::start(self.mount.mountpoint(), events.clone())
            .inspect_err(|e| tracing::warn!(error = %e, "control socket unavailable; `fusebox upgrade` will not work"))
            .ok();
        let mut serving = Some(serving);
        let mut deaths: VecDeque<Instant> = VecDeque::new();
        let mut down_since: Option<Instant> = None;
        let mut generation = self.state.generation();
        // The binary an upgrade named: restarts after a crash use it too.
        let mut binary: Option<PathBuf> = None;
        loop {
            generation += 1;
            self.state.set_generation(generation);
            let mut current = match self.start(generation, &mut server, binary.as_deref(), &events)
            {
                Ok(c) => {
                    if let Some(t) = down_since.take() {
                        let pause = t.elapsed();
                        self.state.set_last_pause_us(pause.as_micros() as u64);
                        tracing::info!(
                            generation,
                            pid = c.pid,
                            pause_ms = pause.as_secs_f64() * 1e3,
                            "server restarted"
                        );
                    }
                    if let Some(f) = serving.take() {
                        f(c.pid);
                    }
                    Some(c)
                }
                Err(why) => {
                    if serving.is_some() {
                        // The first server never served: nothing to
                        // recover, and the user is still waiting. The
                        // mount goes now (other threads hold it, so it
                        // would not go when this returns).
                        if let Err(e) = self.mount.unmount() {
                            tracing::warn!(error = %e, "unmounting after the first server failed");
                        }
                        return Err(RecoveryError::FirstStart(why));
                    }
                    down_since.get_or_insert_with(Instant::now);
                    None
                }
            };
            // Serve events until the current server dies.
            let why = loop {
                let Some(c) = current.as_ref() else {
                    break "did not start".to_string();
                };
                match inbox.recv() {
                    Ok(Event::Exited { generation: g, why }) if g == c.generation => break why,
                    Ok(Event::Exited { .. }) => {} // a server upgraded away
                    Ok(Event::Upgrade {
                        binary: asked,
                        reply,
                    }) => {
                        let to = asked.or_else(|| binary.clone());
                        let r =
                            self.upgrade(c, &mut generation, &mut server, to.as_deref(), &events);
                        let answer = match r {
                            Ok(next) => {
                                binary = to;
                                let report = format!(
                                    "upgraded: server generation {} (pid {}) serves; pause {:.1} ms",
                                    next.generation,
                                    next.pid,
                                    self.state.totals().last_pause_us as f64 / 1e3
                                );
                                current = Some(next);
                                Ok(report)
                            }
                            Err(e) => Err(e),
                        };
                        let _ = reply.send(answer);
                    }
                    Err(_) => break "supervisor inbox closed".to_string(),
                }
            };
            let now = Instant::now();
            down_since.get_or_insert(now);
            if device_gone(self.mount.device().as_fd()) || self.stopping.load(Ordering::Acquire) {
                return Ok(SupervisorExit::Unmounted);
            }
            if current.as_ref().is_some_and(|c| !c.recovers_from_crash) {
                let status = format!(
                    "not serving: the server died ({why}), and its filesystem kept its files in that process (an upgrade hands them over, a crash loses them); requests fail with EIO until unmounted"
                );
                tracing::error!("{status}");
                self.state.set_status(&status);
                refuse_upgrades(inbox, status);
                return self.serve_failed();
            }
            tracing::error!(generation, reason = %why, "server died; starting another");
            let settled = current
                .as_ref()
                .is_some_and(|c| now.duration_since(c.serving_since) >= self.cfg.settled_after);
            if !settled {
                deaths.push_back(now);
            }
            while deaths
                .front()
                .is_some_and(|t| now.duration_since(*t) > self.cfg.restart_window)
            {
                deaths.pop_front();
            }
            if deaths.len() > self.cfg.max_restarts {
                let status = format!(
                    "not serving: the server died {} times within {:?} (last: {why}); requests fail with EIO until unmounted",
                    deaths.len(),
                    self.cfg.restart_window
                );
                tracing::error!("{status}");
                self.state.set_status(&status);
                refuse_upgrades(inbox, status);
                return self.serve_failed();
            }
            self.state.add_restart();
        }
    }

    /// A planned upgrade: start the next server (of `binary`, if given) and
    /// let it get ready, pause the current one (its workers finish what they
    /// hold and stop reading), hand the mount over, retire the old one. If
    /// the new one fails anywhere, the old one resumes and keeps serving.
    fn upgrade(
        &self,
        old: &Running,
        generation: &mut u64,
        server: &mut impl FnMut(Option<&Path>) -> Command,
        binary: Option<&Path>,
        events: &mpsc::Sender<Event>,
    ) -> Result<Running, String> {
        let next_gen = *generation + 1;
        let (child, channel) = self.spawn(server, binary)?;
        let new_pid = child.id();
        let kill_new = || {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(new_pid as i32).expect("a child's pid"),
                rustix::process::Signal::KILL,
            );
        };
        // The new process parses its arguments and builds its filesystem
        // now, before anything pauses; it waits for the handoff.
        Self::watch(child, next_gen, events.clone());
        if let Err(why) = self.await_standing(&channel) {
            kill_new();
            return Err(format!(
                "the new server did not start: {why}; the old one goes on serving"
            ));
        }
        // The new server restores the nodes while the old one serves on;
        // only what changes meanwhile is left for the pause.
        let prepared = channel
            .send(&ToServer::Prepare, &[self.state.fd().as_fd()])
            .map_err(|e| e.to_string())
            .and_then(
                |()| match channel.recv::<ToSupervisor>(Some(self.cfg.start_timeout)) {
                    Ok((ToSupervisor::Prepared, _)) => Ok(()),
                    Ok((other, _)) => Err(format!("{other:?}")),
                    Err(e) => Err(e.to_string()),
                },
            );
        if let Err(why) = prepared {
            kill_new();
            return Err(format!(
                "the new server could not restore: {why}; the old one goes on serving"
            ));
        }
        let began = Instant::now();
        // An answer to an earlier pause given up on (it came after the
        // supervisor stopped waiting) must not pass for this one's.
        while old
            .channel
            .recv::<ToSupervisor>(Some(Duration::from_millis(1)))
            .is_ok()
        {}
        let saved = match old.channel.send(&ToServer::Quiesce, &[]) {
            Err(e) if !old.recovers_from_crash => {
                kill_new();
                return Err(format!("the serving process does not listen: {e}"));
            }
            Err(e) => {
                // Its end of the channel is closed: it died (its files are
                // released only once no thread of it runs), maybe by a kill
                // that crossed this upgrade. The new server takes over as
                // after a crash, so the upgrade still happens.
                tracing::warn!(error = %e, "the serving process died as the upgrade began; the new server takes over as after a crash");
                self.await_exit(old.pid).inspect_err(|_| kill_new())?;
                self.state.add_restart();
                None
            }
            Ok(()) => {
                // Saving a filesystem's state happens inside the pause, so
                // it may take longer than a start.
                match old
                    .channel
                    .recv::<ToSupervisor>(Some(self.cfg.start_timeout.max(Duration::from_secs(60))))
                {
                    Ok((ToSupervisor::Quiesced, fds)) => fds.into_iter().next(),
                    Ok((ToSupervisor::Failed { error }, _)) => {
                        kill_new();
                        let _ = old.channel.send(&ToServer::Resume, &[]);
                        return Err(format!("{error}; it goes on serving"));
                    }
                    // Closed, or reset (it died with a message unread).
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                        ) && old.recovers_from_crash =>
                    {
                        tracing::warn!("the serving process died during the pause; the new server takes over as after a crash");
                        self.await_exit(old.pid).inspect_err(|_| kill_new())?;
                        self.state.add_restart();
                        None
                    }
                    other => {
                        kill_new();
                        let _ = old.channel.send(&ToServer::Resume, &[]);
                        return Err(format!("the serving process did not pause: {other:?}"));
                    }
                }
            }
        };
        self.state.set_generation(next_gen);
        match self.hand_over(&channel, next_gen, saved.as_ref()) {
            Ok((pid, recovers_from_crash)) => {
                let pause = began.elapsed();
                self.state.set_last_pause_us(pause.as_micros() as u64);
                let _ = old.channel.send(&ToServer::Exit, &[]);
                *generation = next_gen;
                tracing::info!(
                    generation = next_gen,
                    pid,
                    pause_ms = pause.as_secs_f64() * 1e3,
                    "upgraded"
                );
                Ok(Running {
                    generation: next_gen,
                    pid,
                    channel,
                    recovers_from_crash,
                    serving_since: Instant::now(),
                })
            }
            Err(why) if self.held.is_some() || self.rings.is_some() => {
                // The new server had the held area and may have written to
                // it (answered writes, say), or took the rings over (reaped
                // requests, answered some): the old one, which knows
                // nothing of that, must not serve on. Both are stopped, and
                // the next server starts from the area and the rings as
                // after a crash, once the new one is gone (the old one's
                // death is what starts it).
                kill_new();
                if let Err(e) = self.await_exit(new_pid) {
                    tracing::error!(error = %e, "the failed new server does not exit");
                }
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(old.pid as i32).expect("a child's pid"),
                    rustix::process::Signal::KILL,
                );
                tracing::warn!(reason = %why, "upgrade failed after the handover began; starting a server from the held area");
                Err(format!(
                    "the new server failed after it took the mount ({why}); the old one was stopped and a fresh one starts"
                ))
            }
            Err(why) => {
                kill_new();
                self.state.set_generation(old.generation);
                let _ = old.channel.send(&ToServer::Resume, &[]);
                tracing::warn!(reason = %why, "upgrade failed; the old server goes on serving");
                Err(format!(
                    "the new server failed, the old one goes on serving: {why}"
                ))
            }
        }
    }

    /// Wait until process `pid` (a server that closed its channel) has
    /// exited: nothing of it may touch the mount once the next one serves.
    fn await_exit(&self, pid: u32) -> Result<(), String> {
        let pid = rustix::process::Pid::from_raw(pid as i32).ok_or("no such process")?;
        let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            // Gone already (reaped).
            Err(rustix::io::Errno::SRCH) => return Ok(()),
            Err(e) => return Err(format!("watching the old server: {e}")),
        };
        let timeout = rustix::event::Timespec {
            tv_sec: self.cfg.start_timeout.as_secs() as i64,
            tv_nsec: 0,
        };
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) if n > 0 => Ok(()),
            Ok(_) => Err(format!(
                "the old server closed its channel but did not exit within {:?}",
                self.cfg.start_timeout
            )),
            Err(e) => Err(format!("watching the old server: {e}")),
        }
    }

    /// Start a server process; it waits for the handoff on the channel.
    fn spawn(
        &self,
        server: &mut impl FnMut(Option<&Path>) -> Command,
        binary: Option<&Path>,
    ) -> Result<(Child, Channel), String> {
        let (channel, theirs) = Channel::pair().map_err(|e| format!("socketpair: {e}"))?;
        rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())
            .map_err(|e| format!("handoff fd: {e}"))?;
        let mut cmd = server(binary);
        cmd.env(HANDOFF_ENV, theirs.as_raw_fd().to_string());
        let child = cmd.spawn().map_err(|e| {
            format!(
                "starting {}: {e}",
                binary.map_or("the server".into(), |b| b.display().to_string())
            )
        });
        drop(theirs);
        Ok((child?, channel))
    }

    /// Wait until a started server is ready for the mount.
    fn await_standing(&self, channel: &Channel) -> Result<(), String> {
        match channel.recv::<ToSupervisor>(Some(self.cfg.start_timeout)) {
            Ok((ToSupervisor::Standing { .. }, _)) => Ok(()),
            Ok((ToSupervisor::Failed { error }, _)) => Err(error),
            Ok((other, _)) => Err(format!("unexpected message {other:?}")),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                Err(format!("not ready after {:?}", self.cfg.start_timeout))
            }
            Err(e) => Err(format!("it exited first ({e})")),
        }
    }

    /// Hand the mount (and an upgrade's saved filesystem state) to a
    /// started server and wait until it serves: its pid, and whether it
    /// can be restarted after a crash.
    fn hand_over(
        &self,
        channel: &Channel,
        generation: u64,
        saved: Option<&OwnedFd>,
    ) -> Result<(u32, bool), String> {
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.mount.device().as_fd()];
        fds.extend(self.clones.iter().map(|c| c.as_fd()));
        fds.push(self.state.fd().as_fd());
        fds.extend(self.stats.as_ref().map(|s| s.listener().as_fd()));
        fds.extend(saved.map(|s| s.as_fd()));
        fds.extend(self.held.as_ref().map(|h| h.fd().as_fd()));
        if let Some(rings) = &self.rings {
            fds.extend(rings.handoff_fds());
        }
        let take = ToServer::Take {
            generation,
            mountpoint: self.mount.mountpoint().to_path_buf(),
            clones: self.clones.len(),
            stats_socket: self.stats.is_some(),
            saved_state: saved.is_some(),
            held_area: self.held.is_some(),
            rings: self.rings.as_ref().map(|r| r.info()),
        };
        channel
            .send(&take, &fds)
            .map_err(|e| format!("handing over the mount: {e}"))?;
        match channel.recv::<ToSupervisor>(Some(self.cfg.start_timeout)) {
            Ok((
                ToSupervisor::Serving {
                    pid,
                    recovers_from_crash,
                },
                _,
            )) => {
                self.state.set_server_pid(pid);
                Ok((pid, recovers_from_crash))
            }
            Ok((ToSupervisor::Failed { error }, _)) => Err(error),
            Ok((other, _)) => Err(format!("unexpected answer {other:?}")),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                Err(format!("not serving after {:?}", self.cfg.start_timeout))
            }
            Err(e) => Err(format!("it went away ({e})")),
        }
    }

    /// Report the child's exit as an event, from a thread of its own.
    fn watch(mut child: Child, generation: u64, events: mpsc::Sender<Event>) {
        let _ = std::thread::Builder::new()
            .name("fusebox-supervisor-wait".into())
            .spawn(move || {
                let why = match child.wait() {
                    Ok(status) => describe(status),
                    Err(e) => format!("wait failed: {e}"),
                };
                let _ = events.send(Event::Exited { generation, why });
            });
    }

    /// Start one server and wait until it serves.
    fn start(
        &self,
        generation: u64,
        server: &mut impl FnMut(Option<&Path>) -> Command,
        binary: Option<&Path>,
        events: &mpsc::Sender<Event>,
    ) -> Result<Running, String> {
        let (child, channel) = self.spawn(server, binary)?;
        let pid = child.id();
        Self::watch(child, generation, events.clone());
        match self
            .await_standing(&channel)
            .and_then(|()| self.hand_over(&channel, generation, None))
        {
            Ok((pid, recovers_from_crash)) => Ok(Running {
                generation,
                pid,
                channel,
                recovers_from_crash,
                serving_since: Instant::now(),
            }),
            Err(why) => {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid as i32).expect("a child's pid"),
                    rustix::process::Signal::KILL,
                );
                Err(why)
            }
        }
    }

    /// Past the restart limit: answer every request EIO (and say why in
    /// `fusebox stats`) until the mount goes away.
    fn serve_failed(&self) -> Result<SupervisorExit, RecoveryError> {
        let status = self.state.clone();
        let mountpoint = self.mount.mountpoint().display().to_string();
        let snapshot = move || Snapshot {
            mountpoint: mountpoint.clone(),
            pid: std::process::id(),
            transport: "none (not serving)".into(),
            recovery: Some(status.totals()),
            ..Snapshot::default()
        };
        let stats = match &self.stats {
            Some(socket) => socket
                .listener()
                .try_clone()
                .map_err(crate::Error::Io)
                .and_then(|l| StatsServer::serve_shared(l, self.mount.mountpoint(), snapshot)),
            None => StatsServer::start(self.mount.mountpoint(), snapshot),
        }
        .inspect_err(|e| tracing::warn!(error = %e, "stats socket unavailable"))
        .ok();
        // Requests routed to the rings: answered EIO there, by threads
        // that drive the rings as a server would.
        if let Some(rings) = &self.rings {
            for ring in rings.attach_here().map_err(RecoveryError::Io)? {
                std::thread::Builder::new()
                    .name("fusebox-supervisor-ring".into())
                    .spawn(move || {
                        if let Err(e) = crate::sys::uring::QueueRing::attach(ring)
                            .and_then(|mut r| fail_queue(&mut r))
                        {
                            tracing::warn!(error = %e, "failing the requests of a held ring");
                        }
                    })
                    .map_err(RecoveryError::Io)?;
            }
        }
        let device = DevChannel::new(self.mount.device().try_clone().map_err(RecoveryError::Io)?);
        // Requests the dead server had read wait in the processing lists of
        // the fds they came through: bring them back to be failed too.
        let notifier = Notifier::for_device(Arc::new(DevChannel::new(
            self.mount.device().try_clone().map_err(RecoveryError::Io)?,
        )));
        if let Err(e) = notifier.resend() {
            tracing::warn!(error = %e, "FUSE_NOTIFY_RESEND failed");
        }
        let mut buf = vec![0u8; 1 << 20 | 4096];
        // Until the connection ends (or fails: nothing more can be read).
        let _ = read_loop(
            &device,
            &mut buf,
            || {},
            |request| {
                if let Ok(h) = parse_header(request) {
                    if facts(fusebox_abi::Opcode(h.opcode)).answered() {
                        let _ = send_error(&device, h.unique, crate::error::Errno::EIO);
                    }
                }
                ControlFlow::<Infallible>::Continue(())
            },
        );
        drop(stats);
        Ok(SupervisorExit::Unmounted)
    }
}

/// Answer every request that reaches a held ring EIO until the kernel
/// ends its entries: the supervisor's stand-in once no server will be
/// started, on the rings as `serve_failed` is on /dev/fuse.
fn fail_queue(ring: &mut crate::sys::uring::QueueRing) -> std::io::Result<()> {
    use crate::device::DeviceErrno;
    use crate::sys::uring::Completion;
    let taken = ring.take_over()?;
    let mut todo: Vec<(usize, i32)> = taken.completions.iter().map(|c| (c.0, c.1)).collect();
    todo.extend(taken.lost.iter().map(|&idx| (idx, 0)));
    let mut live = ring.depth();
    while live > 0 {
        for (idx, res) in todo.drain(..) {
            if res < 0 {
                match DeviceErrno::of(-res) {
                    DeviceErrno::WouldBlock | DeviceErrno::Interrupted | DeviceErrno::Retry => {
                        ring.resubmit(idx)?
                    }
                    _ => live -= 1,
                }
                continue;
            }
            let (commit_id, answered) = {
                let r = ring.request(idx)?;
                (
                    r.commit_id,
                    facts(fusebox_abi::Opcode(r.header.opcode)).answered(),
                )
            };
            let header = fusebox_abi::OutHeader {
                len: 16,
                // A request that takes no answer still holds its entry:
                // an empty success re-arms it.
                error: if answered { -libc::EIO } else { 0 },
                unique: commit_id,
            };
            let mut b = ring.reply_buffers(idx)?;
            b.begin(0);
            b.in_out[..16].copy_from_slice(zerocopy::IntoBytes::as_bytes(&header));
            b.done(0);
            ring.commit(idx, commit_id, 0)?;
        }
        ring.submit_and_wait(1)?;
        while let Some(c) = ring.next_completion() {
            if let Completion::Entry { idx, res } = c {
                todo.push((idx, res));
            }
        }
    }
    Ok(())
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(s)) => format!(
            "killed by signal {s} ({})",
            match s {
                6 => "SIGABRT",
                9 => "SIGKILL",
                11 => "SIGSEGV",
                15 => "SIGTERM",
                _ => "signal",
            }
        ),
        _ => status.to_string(),
    }
}
