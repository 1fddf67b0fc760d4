//! A supervised server's side of recovery: taking up what the supervisor
//! hands over (the negotiated connection, the ledger's nodes and handles,
//! a planned upgrade's saved state and held area), obeying its upgrade
//! commands, and keeping statistics in the state file across generations.
//! `Session::take_over` calls these; the supervisor's side is
//! `supervisor.rs`.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use super::pause::PauseControl;
use super::{Channel, Ledger, RecoveryError, StateFile, ToServer, ToSupervisor};
use crate::error::Error;
use crate::fs::Filesystem;
use crate::protocol::{Connection, Notifier};
use crate::stats::Snapshot;
use crate::types::NodeId;

/// Per-request statistics kept in the state file, once a second and when
/// an upgrade pauses the server, so the next generation goes on counting
/// from them (a crash loses at most the last second).
pub(crate) struct StatsCarry {
    snapshot: std::sync::Weak<dyn Fn() -> Snapshot + Send + Sync>,
    state: Arc<StateFile>,
    turn: std::sync::Mutex<()>,
}

impl StatsCarry {
    pub(crate) fn new(
        snapshot: std::sync::Weak<dyn Fn() -> Snapshot + Send + Sync>,
        state: Arc<StateFile>,
    ) -> StatsCarry {
        StatsCarry {
            snapshot,
            state,
            turn: std::sync::Mutex::new(()),
        }
    }

    /// False once the session is gone.
    pub(crate) fn carry(&self) -> bool {
        let Some(snapshot) = self.snapshot.upgrade() else {
            return false;
        };
        let ops = snapshot().ops;
        if let Ok(bytes) = serde_json::to_vec(&ops) {
            let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
            self.state.set_stats(&bytes);
        }
        true
    }
}

/// A supervised server is up: tell the supervisor, keep the statistics in
/// the state file from now on, and obey the supervisor's upgrade orders on
/// a thread of their own.
pub(crate) fn serve_for_supervisor<F: Filesystem>(
    channel: Channel,
    generation: u64,
    pause: Arc<PauseControl>,
    snapshot: &Arc<dyn Fn() -> Snapshot + Send + Sync>,
    state: Arc<StateFile>,
    fs: Arc<F>,
    held_rings: Option<Arc<crate::mount::Mount>>,
) -> Result<(), Error> {
    channel
        .send(
            &ToSupervisor::Serving {
                pid: std::process::id(),
                recovers_from_crash: !fs.state_in_process(),
            },
            &[],
        )
        .map_err(|e| RecoveryError::Handoff(format!("telling the supervisor: {e}")))?;
    tracing::info!(generation, "serving for the supervisor");
    let carry = Arc::new(StatsCarry::new(Arc::downgrade(snapshot), state));
    let c = carry.clone();
    std::thread::Builder::new()
        .name("fusebox-stats-carry".into())
        .spawn(move || {
            while c.carry() {
                std::thread::sleep(Duration::from_secs(1));
            }
        })?;
    std::thread::Builder::new()
        .name("fusebox-handoff".into())
        .spawn(move || {
            obey_supervisor(channel, &pause, &carry, &*fs);
            if let Some(mount) = held_rings {
                // The rings' commands were issued by the supervisor's SQ
                // thread, which died with it: requests handed to them can
                // no longer be delivered. Applications get an error now
                // rather than a hang.
                tracing::error!("the supervisor died, and with it the kernel thread that drives the io_uring rings: aborting the connection (unmount, then mount again)");
                if let Err(e) = mount.abort() {
                    tracing::error!(error = %e, "abort failed");
                }
                std::process::exit(1);
            }
        })?;
    Ok(())
}

/// Tries at pausing the workers for an upgrade, and how long each waits
/// for the last busy one. Between tries the parked workers serve again: a
/// request that keeps its worker long (a write waiting on a slow network)
/// stalls the mount for one try at a time, not for the whole wait.
const PAUSE_TRIES: u32 = 4;
const PAUSE_TRY: Duration = Duration::from_secs(5);

/// Pause the workers between two requests, trying again after a failed
/// try; false (and serving) if every try failed.
fn pause_between_requests(pause: &PauseControl) -> bool {
    for _ in 0..PAUSE_TRIES {
        if pause.pause(PAUSE_TRY) {
            return true;
        }
        pause.resume();
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// A supervised server's side of a planned upgrade (`recovery::supervisor`):
/// pause the workers and say so, then resume or exit as told. If the
/// supervisor goes away, serving goes on.
pub(crate) fn obey_supervisor<F: Filesystem>(
    channel: Channel,
    pause: &PauseControl,
    carry: &StatsCarry,
    fs: &F,
) {
    loop {
        match channel.recv::<ToServer>(None) {
            Ok((ToServer::Quiesce, _)) => {
                let (answer, saved) = if !pause_between_requests(pause) {
                    let error = format!(
                        "workers did not pause ({PAUSE_TRIES} tries of {} s: a request kept one busy)",
                        PAUSE_TRY.as_secs()
                    );
                    (ToSupervisor::Failed { error }, None)
                } else {
                    // Every request this server will serve is counted.
                    carry.carry();
                    let saved = fs
                        .quiesce()
                        .map_err(|e| format!("finishing its background work: {e}"))
                        .and_then(|()| {
                            fs.state_in_process()
                                .then(|| save_state(fs))
                                .transpose()
                                .map_err(|e| format!("saving its filesystem's state: {e}"))
                        });
                    match saved {
                        Ok(saved) => (ToSupervisor::Quiesced, saved),
                        Err(e) => {
                            tracing::error!(error = %e, "the upgrade's pause failed; serving on");
                            fs.quiesce_abandoned();
                            pause.resume();
                            let error = format!("the serving process failed {e}");
                            (ToSupervisor::Failed { error }, None)
                        }
                    }
                };
                let fds: Vec<_> = saved.iter().map(std::os::fd::AsFd::as_fd).collect();
                let _ = channel.send(&answer, &fds);
            }
            Ok((ToServer::Resume, _)) => {
                tracing::info!("upgrade abandoned; serving again");
                fs.quiesce_abandoned();
                pause.resume();
            }
            Ok((ToServer::Exit, _)) => {
                tracing::info!("the next server serves; exiting");
                // Nothing to unmount or flush: the mount is the next
                // server's, and every request this one read is answered.
                std::process::exit(0);
            }
            Ok((ToServer::Take { .. } | ToServer::Prepare, _)) => {
                tracing::warn!("a second handoff for a serving process; ignored");
            }
            Err(e) => {
                tracing::warn!(error = %e, "the supervisor went away; serving on without it");
                return;
            }
        }
    }
}

/// What a planned upgrade's new server has beyond a crash's: nodes
/// restored ahead, and the filesystem's saved state.
pub(crate) struct Upgrade {
    pub(crate) prepared: Option<(Arc<Ledger>, u64)>,
    pub(crate) saved_state: Option<OwnedFd>,
    /// Not an upgrade's alone: every generation gets the held area.
    pub(crate) held_area: Option<OwnedFd>,
}

/// A supervised server's start: INIT's outcome from the state file (or a
/// handshake, for the first generation or one whose predecessor died
/// before INIT was done), then, for a later generation, the filesystem's
/// nodes and handles restored from the ledger and the dead server's
/// unanswered requests asked for again.
pub(crate) fn recover<F: Filesystem>(
    fs: &Arc<F>,
    notifier: &Notifier,
    generation: u64,
    state: &Arc<StateFile>,
    upgrade: Upgrade,
    handshake: impl FnOnce() -> Result<Connection, Error>,
) -> Result<(Connection, Arc<Ledger>), Error> {
    let Upgrade {
        prepared,
        saved_state,
        held_area,
    } = upgrade;
    if let Some(fd) = held_area {
        let area = crate::sys::shared_map::SharedMap::map(fd)
            .map_err(|e| RecoveryError::Handoff(format!("mapping the held area: {e}")))?;
        fs.adopt_held_area(area);
    }
    let resend = || {
        notifier.resend().map_err(|e| {
            RecoveryError::Handoff(format!(
                "FUSE_NOTIFY_RESEND refused ({e}): the kernel needs protocol 7.40 (Linux 6.9) for recovery"
            ))
        })
    };
    let (ledger, seen) = match prepared {
        Some((l, seen)) => (l, Some(seen)),
        None => (ledger_for(fs, state.clone()), None),
    };
    let Some(saved) = state.connection() else {
        if generation > 1 {
            // The INIT the previous server read comes back.
            resend()?;
        }
        let conn = handshake()?;
        let bytes = serde_json::to_vec(&conn).map_err(|e| Error::Io(std::io::Error::other(e)))?;
        state.set_connection(&bytes).map_err(RecoveryError::State)?;
        return Ok((conn, ledger));
    };
    let conn: Connection = serde_json::from_slice(&saved)
        .map_err(|e| RecoveryError::Handoff(format!("the saved connection: {e}")))?;
    // The filesystem sees the connection as negotiated; what it would ask
    // for now cannot change what the kernel agreed to.
    let mut offered = conn.clone();
    fs.init(&mut offered, notifier).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "filesystem init failed: {e}"
        )))
    })?;
    if offered.want != conn.want {
        tracing::warn!(
            negotiated = format!("{:#x}", conn.want),
            asked = format!("{:#x}", offered.want),
            "this server asks for other INIT flags than the mount negotiated; the negotiated ones stay"
        );
    }
    let began = std::time::Instant::now();
    if let Some(fd) = saved_state {
        load_state(&**fs, fd)?;
    }
    let (nodes, nodes_failed) = match seen {
        // Restored ahead: only what the previous server changed since.
        Some(seen) => {
            let c = ledger.catch_up(seen);
            for node in &c.gone {
                fs.forget(*node, u64::MAX);
            }
            (c.gone.len() + c.now.len(), restore_nodes(&**fs, &c.now))
        }
        None => {
            let nodes = ledger.restore_nodes();
            (nodes.len(), restore_nodes(&**fs, &nodes))
        }
    };
    let handles = ledger.restore_handles();
    let mut handles_failed = 0usize;
    for h in &handles {
        if let Err(e) = fs.restore_handle(h) {
            handles_failed += 1;
            tracing::debug!(fh = h.fh, node = h.node, error = %e, "handle not restored");
        }
    }
    fs.restored();
    tracing::info!(
        generation,
        nodes,
        nodes_failed,
        caught_up = seen.is_some(),
        handles = handles.len(),
        handles_failed,
        restore_ms = began.elapsed().as_secs_f64() * 1e3,
        "restored"
    );
    resend()?;
    Ok((conn, ledger))
}

/// The ledger of a supervised session, asking `fs` for node keys (and
/// told by it when one changes).
pub(crate) fn ledger_for<F: Filesystem>(fs: &Arc<F>, state: Arc<StateFile>) -> Arc<Ledger> {
    let weak = Arc::downgrade(fs);
    let ledger = Arc::new(Ledger::new(state, move |node| {
        weak.upgrade().and_then(|fs| fs.node_key(node))
    }));
    fs.track_key_changes(ledger.key_changes());
    ledger
}

/// An upgrade of a filesystem that keeps its state in its process: read
/// what the previous server saved (it is paused, and the file's offset
/// is shared with it, so read by position).
fn load_state<F: Filesystem>(fs: &F, saved: OwnedFd) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    struct At {
        file: std::fs::File,
        pos: u64,
    }
    impl std::io::Read for At {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.file.read_at(buf, self.pos)?;
            self.pos += n as u64;
            Ok(n)
        }
    }
    let began = std::time::Instant::now();
    let file = std::fs::File::from(saved);
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = std::io::BufReader::with_capacity(1 << 20, At { file, pos: 0 });
    fs.load_state(&mut reader).map_err(|e| {
        RecoveryError::Handoff(format!("loading the previous server's saved state: {e}"))
    })?;
    tracing::info!(
        bytes = size,
        ms = began.elapsed().as_secs_f64() * 1e3,
        "filesystem state loaded"
    );
    Ok(())
}

/// An upgrade of a filesystem that keeps its state in its process: the
/// paused old server writes it into a memfd for the next one.
fn save_state<F: Filesystem>(fs: &F) -> std::io::Result<OwnedFd> {
    use std::io::Write;
    let began = std::time::Instant::now();
    let fd = rustix::fs::memfd_create("fusebox-saved-state", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::from(fd));
    fs.save_state(&mut out)?;
    out.flush()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    tracing::info!(
        bytes = file.metadata().map(|m| m.len()).unwrap_or(0),
        ms = began.elapsed().as_secs_f64() * 1e3,
        "filesystem state saved for the next server"
    );
    Ok(OwnedFd::from(file))
}

/// Hand `nodes` to the filesystem; returns how many it could not take.
pub(crate) fn restore_nodes<F: Filesystem>(fs: &F, nodes: &[(NodeId, Vec<u8>, u64)]) -> usize {
    let mut failed = 0;
    for (node, key, nlookup) in nodes {
        if let Err(e) = fs.restore_node(*node, key, *nlookup) {
            failed += 1;
            tracing::debug!(node = node.0, error = %e, "node not restored");
        }
    }
    failed
}
