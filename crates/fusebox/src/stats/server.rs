//! Serving snapshots over a unix socket, so `fusebox stats MOUNTPOINT` can
//! read a running daemon without restarting it.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;

use super::Snapshot;

/// Where a daemon of this user serving `mountpoint` listens: one socket
/// per mount, named by a hash of the canonical mount path, in this user's
/// runtime directory (see [`runtime_dir_for`]).
pub fn socket_path_for(mountpoint: &Path) -> PathBuf {
    runtime_dir_for(rustix::process::geteuid().as_raw()).join(socket_name(mountpoint))
}

/// Where to look for the daemon of `mountpoint`, most likely first: the
/// caller's own runtime directory when it is root (a root daemon's
/// sockets are root's wherever the mount's `user_id=` points), then the
/// mount owner's (mountinfo names it, so root finds a user's sockets too),
/// then the caller's. A directory is only looked in if the user it is
/// named for owns it (anyone may make /tmp/fusebox-UID).
pub fn socket_paths_to_try(mountpoint: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let canonical = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name = socket_name(&canonical);
    let me = rustix::process::geteuid().as_raw();
    let mut uids: Vec<u32> = Vec::new();
    if me == 0 {
        uids.push(0);
    }
    if let Some(owner) = crate::mount::fuse_mount_at(&canonical).and_then(|m| m.user_id) {
        uids.push(owner);
    }
    uids.push(me);
    let mut paths: Vec<PathBuf> = Vec::new();
    for u in uids {
        for dir in runtime_dirs_of(u) {
            let owned = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == u);
            let p = dir.join(&name);
            if owned && !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
    if paths.is_empty() {
        // Nothing there yet: where this user's daemon would be (for the
        // error message).
        paths.push(socket_path_for(mountpoint));
    }
    paths
}

/// Every directory `uid`'s sockets may be in: the one [`runtime_dir_for`]
/// picks now, and the other (a daemon started before the user's session
/// made /run/user/UID uses /tmp).
fn runtime_dirs_of(uid: u32) -> Vec<PathBuf> {
    if uid == 0 {
        return vec![PathBuf::from("/run/fusebox")];
    }
    vec![
        PathBuf::from(format!("/run/user/{uid}/fusebox")),
        PathBuf::from(format!("/tmp/fusebox-{uid}")),
    ]
}

fn socket_name(mountpoint: &Path) -> String {
    let canonical = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    // FNV-1a: stable across builds and processes, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}.sock")
}

/// The directory of `uid`'s fusebox sockets: /run/fusebox for root;
/// for a user, fusebox/ in the session's runtime directory
/// (/run/user/UID, made by systemd-logind at login), else
/// /tmp/fusebox-UID. Named by the uid, not the environment, so a daemon
/// and a `fusebox stats` started from different shells agree (clients
/// look in both: see [`socket_paths_to_try`]).
pub fn runtime_dir_for(uid: u32) -> PathBuf {
    if uid == 0 {
        return PathBuf::from("/run/fusebox");
    }
    let session = PathBuf::from(format!("/run/user/{uid}"));
    if session.is_dir() {
        return session.join("fusebox");
    }
    // Not $TMPDIR: a daemon started from fstab or systemd and a user's
    // shell (pam_tmpdir) would disagree.
    PathBuf::from(format!("/tmp/fusebox-{uid}"))
}

/// Make this process's runtime directory if needed, private to its user,
/// and refuse one another user made (in /tmp anyone could, to catch the
/// sockets).
pub fn ensure_runtime_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = rustix::process::geteuid().as_raw();
    let dir = runtime_dir_for(uid);
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(if uid == 0 { 0o755 } else { 0o700 })
        .create(&dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != uid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory of this user's (uid {uid}); remove it",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

/// A thread answering each connection with one JSON snapshot.
pub struct StatsServer {
    path: PathBuf,
    /// (dev, ino) of the socket we bound: removed on drop only if the path
    /// still names it, not a successor daemon's on the same mountpoint.
    bound: Option<(u64, u64)>,
    stop: Arc<AtomicBool>,
    waker: UnixListener,
    /// The serving thread's id, to see from outside that it sleeps.
    #[cfg_attr(not(test), allow(dead_code))]
    tid: Option<i32>,
    /// Connections answered: wake-ups that are not idle ones (another
    /// daemon's start connects to every socket to sweep stale ones).
    #[cfg_attr(not(test), allow(dead_code))]
    answered: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<JoinHandle<()>>,
    /// The listening socket is someone else's too (`serve_shared`).
    shared: bool,
}

/// A bound stats socket that outlives the servers answering on it: a
/// supervisor keeps one per mount and hands it to each server, so
/// `fusebox stats` connects even between two servers (the connection
/// waits in the backlog for the next one). Its file goes with it.
pub struct StatsSocket {
    listener: UnixListener,
    path: PathBuf,
    bound: Option<(u64, u64)>,
}

impl StatsSocket {
    /// Bind the stats socket of `mountpoint`, replacing a stale one.
    pub fn bind(mountpoint: &Path) -> Result<StatsSocket, Error> {
        let path = socket_path_for(mountpoint);
        let err = |source| Error::Stats {
            path: path.clone(),
            source,
        };
        ensure_runtime_dir().map_err(err)?;
        let _turn = SocketLock::take(&path);
        sweep_stale_sockets(&path);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(err)?;
        let bound = identity(&path);
        Ok(StatsSocket {
            listener,
            path,
            bound,
        })
    }

    fn err(&self, source: std::io::Error) -> Error {
        Error::Stats {
            path: self.path.clone(),
            source,
        }
    }

    /// The listening socket, to hand to a server that answers on it.
    pub fn listener(&self) -> &UnixListener {
        &self.listener
    }
}

impl Drop for StatsSocket {
    fn drop(&mut self) {
        let _turn = SocketLock::take(&self.path);
        if self.bound.is_some() && identity(&self.path) == self.bound {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl StatsServer {
    /// Bind the stats socket of `mountpoint` and answer `fusebox stats` on it
    /// from a thread of its own, with what `snapshot` returns. The socket file
    /// goes when the server is dropped.
    pub fn start(
        mountpoint: &Path,
        snapshot: impl Fn() -> Snapshot + Send + 'static,
    ) -> Result<StatsServer, Error> {
        let mut socket = StatsSocket::bind(mountpoint)?;
        let listener = socket.listener.try_clone().map_err(|e| socket.err(e))?;
        let mut server = Self::serve_on(listener, socket.path.clone(), false, snapshot)?;
        // The server removes the file from now on, not the socket.
        server.bound = socket.bound.take();
        Ok(server)
    }

    /// Answer on a listening socket someone else keeps (a supervisor's,
    /// handed to each server it starts): dropping this neither closes it
    /// for the others (no shutdown) nor removes its file, and does not wait
    /// for the thread, which may be blocked in accept(2) until the process
    /// ends (a supervised server's process ends with its session).
    pub fn serve_shared(
        listener: UnixListener,
        mountpoint: &Path,
        snapshot: impl Fn() -> Snapshot + Send + 'static,
    ) -> Result<StatsServer, Error> {
        Self::serve_on(listener, socket_path_for(mountpoint), true, snapshot)
    }

    fn serve_on(
        listener: UnixListener,
        path: PathBuf,
        shared: bool,
        snapshot: impl Fn() -> Snapshot + Send + 'static,
    ) -> Result<StatsServer, Error> {
        let err = |source| Error::Stats {
            path: path.clone(),
            source,
        };
        let waker = listener.try_clone().map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let answered2 = answered.clone();
        let thread = std::thread::Builder::new()
            .name("fusebox-stats".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
                serve(listener, stop2, &answered2, snapshot)
            })
            .map_err(err)?;
        Ok(StatsServer {
            path,
            bound: None,
            stop,
            waker,
            tid: tid_rx.recv().ok(),
            answered,
            thread: Some(thread),
            shared,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Answer connections until `stop`. The accept blocks: an idle mount costs
/// no wake-ups (it used to poll every 50 ms). Shutdown wakes it with
/// shutdown(2) on the listening socket, which makes a blocked accept
/// return EINVAL on Linux.
fn serve(
    listener: UnixListener,
    stop: Arc<AtomicBool>,
    answered: &std::sync::atomic::AtomicU64,
    snapshot: impl Fn() -> Snapshot,
) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                answered.fetch_add(1, Ordering::Relaxed);
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                if let Ok(json) = serde_json::to_vec(&snapshot()) {
                    let _ = conn.write_all(&json);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EMFILE and the like: back off instead of spinning; shutdown
            // ends up here too (EINVAL), with `stop` set.
            Err(_) => {
                if !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if self.shared {
            return;
        }
        if rustix::net::shutdown(&self.waker, rustix::net::Shutdown::Both).is_err() {
            // Some kernels refuse shutdown on a listener: a connection of
            // our own wakes the accept instead.
            let _ = UnixStream::connect(&self.path);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // A daemon that exits after its unmount can overlap the next daemon
        // on the same mountpoint: take away only our own socket, and check
        // and remove in one turn, or the next daemon's socket could land in
        // between and be removed instead.
        let _turn = SocketLock::take(&self.path);
        if self.bound.is_some() && identity(&self.path) == self.bound {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An exclusive flock on one lock file next to the sockets, held while a
/// daemon replaces or removes its socket (microseconds, so one file for
/// all mountpoints; it is never deleted, which would race). Best effort:
/// without it the socket is handled as before.
struct SocketLock {
    /// Closing the file releases the lock.
    _held: Option<std::fs::File>,
}

impl SocketLock {
    fn take(socket: &Path) -> SocketLock {
        let lock = socket.with_file_name("sockets.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock)
            .ok()
            .filter(|f| rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive).is_ok());
        SocketLock { _held: file }
    }
}

/// Remove the sockets of daemons that died without unmounting cleanly
/// (killed, crashed): nobody listens on them, and their names, hashes of
/// mount paths, cannot tell which mount they were for. A live daemon's
/// socket accepts the connection (and sends one snapshot, unread). Call
/// with the socket lock held, so no daemon is between bind and listen.
fn sweep_stale_sockets(ours: &Path) {
    let Some(dir) = ours.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == ours || path.extension().is_none_or(|e| e != "sock") {
            continue;
        }
        if let Err(e) = UnixStream::connect(&path) {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Read a snapshot from the daemon serving `mountpoint`.
pub fn fetch(mountpoint: &Path) -> Result<Snapshot, Error> {
    let paths = socket_paths_to_try(mountpoint);
    let (path, mut conn) =
        connect_first(&paths).map_err(|(path, source)| Error::Stats { path, source })?;
    let err = |source| Error::Stats {
        path: path.clone(),
        source,
    };
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(err)?;
    let mut buf = Vec::new();
    conn.read_to_end(&mut buf).map_err(err)?;
    serde_json::from_slice(&buf).map_err(|e| err(e.into()))
}

/// The first of `paths` that answers; else the first one's error (the
/// most likely place).
pub fn connect_first(
    paths: &[PathBuf],
) -> Result<(PathBuf, UnixStream), (PathBuf, std::io::Error)> {
    let mut first = None;
    for p in paths {
        match UnixStream::connect(p) {
            Ok(c) => return Ok((p.clone(), c)),
            Err(e) => {
                first.get_or_insert((p.clone(), e));
            }
        }
    }
    Err(first.unwrap_or_else(|| (PathBuf::new(), std::io::ErrorKind::NotFound.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voluntary_switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }

    /// An idle mount's stats thread sleeps in accept: it used to poll every
    /// 50 ms (six wake-ups in this window).
    #[test]
    fn an_idle_stats_server_does_not_wake_up() {
        let mnt = tempfile::tempdir().unwrap();
        let server = StatsServer::start(mnt.path(), Snapshot::default).unwrap();
        let tid = server.tid.unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = voluntary_switches(tid);
        let answered = || server.answered.load(Ordering::Relaxed);
        let answered_before = answered();
        std::thread::sleep(Duration::from_millis(300));
        let woke = voluntary_switches(tid) - before;
        // Other tests' daemons starting meanwhile connect to every socket
        // (to sweep stale ones): each such connection may wake it twice
        // (accept, then the answer's write). Anything else is polling.
        let connections = answered() - answered_before;
        assert!(
            woke <= 2 * connections,
            "the stats thread woke {woke} times while idle ({connections} connections)"
        );
        // It still answers, and stops when dropped.
        assert!(fetch(mnt.path()).is_ok());
        let t = std::time::Instant::now();
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_starting_daemon_removes_sockets_nobody_listens_on() {
        let mnt = tempfile::tempdir().unwrap();
        let ours = socket_path_for(mnt.path());
        std::fs::create_dir_all(ours.parent().unwrap()).unwrap();
        // A daemon that died: its socket file stays, with no listener.
        let dead = ours.with_file_name(format!("test-dead-{}.sock", std::process::id()));
        drop(UnixListener::bind(&dead).unwrap());
        // A live one keeps its socket.
        let live_mnt = tempfile::tempdir().unwrap();
        let live = StatsServer::start(live_mnt.path(), Snapshot::default).unwrap();
        let server = StatsServer::start(mnt.path(), Snapshot::default).unwrap();
        assert!(!dead.exists(), "stale socket left in place");
        assert!(live.path().exists(), "a live daemon's socket was removed");
        assert!(fetch(live_mnt.path()).is_ok());
        drop(server);
        drop(live);
        assert!(!ours.exists());
    }
}
