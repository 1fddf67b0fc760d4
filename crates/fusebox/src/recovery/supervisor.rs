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
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handoff::{Channel, ToServer, ToSupervisor, HANDOFF_ENV};
use super::state::{Capacity, StateFile};
use super::RecoveryError;
use crate::mount::Mount;
use crate::protocol::{send_error, Notifier};
use crate::stats::{Snapshot, StatsServer};
use crate::transport::dev::{device_gone, DevChannel};

#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// Classic worker fds to clone and keep (the server's worker count).
    pub clones: usize,
    pub capacity: Capacity,
    /// A server that dies more than this many times within
    /// `restart_window` is not started again.
    pub max_restarts: usize,
    pub restart_window: Duration,
    /// How long a server may take from start to serving.
    pub start_timeout: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            clones: 2,
            capacity: Capacity::default(),
            max_restarts: 5,
            restart_window: Duration::from_secs(30),
            start_timeout: Duration::from_secs(10),
        }
    }
}

/// How supervision ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SupervisorExit {
    /// The mount went away (unmounted or aborted).
    Unmounted,
}

pub struct Supervisor {
    mount: Arc<Mount>,
    clones: Vec<OwnedFd>,
    state: Arc<StateFile>,
    cfg: SupervisorConfig,
    stopping: Arc<AtomicBool>,
}

impl Supervisor {
    /// Take over `mount` (made by this process, not yet INIT'ed).
    pub fn new(mount: Mount, cfg: SupervisorConfig) -> Result<Supervisor, RecoveryError> {
        let clones = (0..cfg.clones.max(1))
            .map(|_| crate::sys::clone_device(mount.device().as_fd()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RecoveryError::Clone)?;
        let state = Arc::new(StateFile::create(cfg.capacity).map_err(RecoveryError::State)?);
        Ok(Supervisor {
            mount: Arc::new(mount),
            clones,
            state,
            cfg,
            stopping: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn state(&self) -> &Arc<StateFile> {
        &self.state
    }

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

    /// Start servers with `server` (a command line of this or another
    /// binary; the handoff fd is added to its environment) until the
    /// mount goes away. `serving` is called once, when the first server
    /// serves.
    pub fn run(
        &self,
        mut server: impl FnMut() -> Command,
        serving: impl FnOnce(u32),
    ) -> Result<SupervisorExit, RecoveryError> {
        let mut serving = Some(serving);
        let mut deaths: VecDeque<Instant> = VecDeque::new();
        let mut down_since: Option<Instant> = None;
        let mut generation = self.state.generation();
        loop {
            generation += 1;
            self.state.set_generation(generation);
            let started = self.start(generation, &mut server);
            let (mut child, why) = match started {
                Ok((mut child, pid)) => {
                    if let Some(t) = down_since.take() {
                        let pause = t.elapsed();
                        self.state.set_last_pause_us(pause.as_micros() as u64);
                        tracing::info!(
                            generation,
                            pid,
                            pause_ms = pause.as_secs_f64() * 1e3,
                            "server restarted"
                        );
                    }
                    if let Some(f) = serving.take() {
                        f(pid);
                    }
                    let status = child.wait().map_err(RecoveryError::Io)?;
                    (None, describe(status))
                }
                Err((child, why)) => (child, why),
            };
            if let Some(c) = child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            let now = Instant::now();
            down_since.get_or_insert(now);
            if device_gone(self.mount.device().as_fd()) || self.stopping.load(Ordering::Acquire) {
                return Ok(SupervisorExit::Unmounted);
            }
            if serving.is_some() {
                // The first server never served: nothing to recover, and
                // the user is still waiting for the mount command.
                return Err(RecoveryError::FirstStart(why));
            }
            tracing::error!(generation, reason = %why, "server died; starting another");
            deaths.push_back(now);
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
                return self.serve_failed();
            }
            self.state.add_restart();
        }
    }

    /// Start one server and wait until it serves. On failure, the child
    /// (if one started) and why.
    #[allow(clippy::type_complexity)]
    fn start(
        &self,
        generation: u64,
        server: &mut impl FnMut() -> Command,
    ) -> Result<(Child, u32), (Option<Child>, String)> {
        let fail = |why: String| (None, why);
        let (channel, theirs) = Channel::pair().map_err(|e| fail(format!("socketpair: {e}")))?;
        rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())
            .map_err(|e| fail(format!("handoff fd: {e}")))?;
        let mut cmd = server();
        cmd.env(HANDOFF_ENV, theirs.as_raw_fd().to_string());
        let child = cmd
            .spawn()
            .map_err(|e| fail(format!("starting the server: {e}")));
        drop(theirs);
        let mut child = child?;
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.mount.device().as_fd()];
        fds.extend(self.clones.iter().map(|c| c.as_fd()));
        fds.push(self.state.fd().as_fd());
        let take = ToServer::Take {
            generation,
            mountpoint: self.mount.mountpoint().to_path_buf(),
            clones: self.clones.len(),
        };
        if let Err(e) = channel.send(&take, &fds) {
            return Err((Some(child), format!("handing over the mount: {e}")));
        }
        match channel.recv::<ToSupervisor>(Some(self.cfg.start_timeout)) {
            Ok((ToSupervisor::Serving { pid }, _)) => {
                self.state.set_server_pid(pid);
                Ok((child, pid))
            }
            Ok((ToSupervisor::Failed { error }, _)) => Err((Some(child), error)),
            Err(e) => {
                let why = match child.try_wait() {
                    Ok(Some(status)) => describe(status),
                    _ if e.kind() == std::io::ErrorKind::TimedOut => {
                        format!("not serving after {:?}", self.cfg.start_timeout)
                    }
                    _ => format!("handoff channel: {e}"),
                };
                let _ = child.kill();
                let _ = child.wait();
                Err((None, why))
            }
        }
    }

    /// Past the restart limit: answer every request EIO (and say why in
    /// `fusebox stats`) until the mount goes away.
    fn serve_failed(&self) -> Result<SupervisorExit, RecoveryError> {
        let status = self.state.clone();
        let mountpoint = self.mount.mountpoint().display().to_string();
        let stats = StatsServer::start(self.mount.mountpoint(), move || Snapshot {
            mountpoint: mountpoint.clone(),
            pid: std::process::id(),
            transport: "none (not serving)".into(),
            recovery: Some(status.totals()),
            ..Snapshot::default()
        })
        .inspect_err(|e| tracing::warn!(error = %e, "stats socket unavailable"))
        .ok();
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
        loop {
            match rustix::io::read(device.fd(), &mut buf) {
                Ok(n) => {
                    if let Ok((h, _)) =
                        <fusebox_abi::InHeader as zerocopy::FromBytes>::read_from_prefix(&buf[..n])
                    {
                        if !fusebox_abi::Opcode(h.opcode).is_no_reply() {
                            let _ = send_error(&device, h.unique, crate::error::Errno::EIO);
                        }
                    }
                }
                Err(
                    rustix::io::Errno::INTR | rustix::io::Errno::AGAIN | rustix::io::Errno::NOENT,
                ) => {}
                Err(_) => break,
            }
        }
        drop(stats);
        Ok(SupervisorExit::Unmounted)
    }
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
