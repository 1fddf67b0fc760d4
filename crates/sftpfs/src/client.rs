//! The connection a filesystem keeps: it reconnects by itself, with
//! backoff, when the link drops, and every request waits at most the
//! user's `timeout` (reconnecting included) before it fails with EIO.
//!
//! One long-lived thread makes every connection: an `ssh` it starts dies
//! with the thread that started it (see `sys::die_with_parent`), so that
//! thread must live as long as the process.
//!
//! Connections carry a generation; a remote handle is good only on the
//! generation that opened it (see `files`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use fusebox::Errno;

use crate::connection::{ConnError, Connection, Counts, ServerInfo};
use crate::ssh::Route;
use crate::wire::{Reply, Request};

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The connection dropped with the request in flight: it may or may
    /// not have been carried out (only for requests that must not simply
    /// be sent again; see [`Client::call_once`]).
    Unknown,
    /// Failed: this errno for the application.
    Errno(Errno),
}

impl From<Errno> for CallError {
    fn from(e: Errno) -> Self {
        CallError::Errno(e)
    }
}

/// Retries a connection that failed to start, up to this far apart.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

struct State {
    conn: Option<Arc<Connection>>,
    generation: u64,
    /// Someone needs a connection and the connector is making one.
    wanted: bool,
    /// Why the last attempt failed (for the errors callers see).
    last_error: Option<String>,
    /// Attempts that failed in a row since the last success.
    failures: u32,
    closed: bool,
}

pub struct Client {
    route: Route,
    timeout: Duration,
    reconnect: bool,
    counts: Arc<Counts>,
    state: Mutex<State>,
    changed: Condvar,
    connected_once: AtomicBool,
}

impl Client {
    /// A client for `route`. Nothing connects until
    /// [`connect`](Client::connect) or the first request.
    pub fn new(route: Route, timeout: Duration, reconnect: bool) -> Arc<Client> {
        let client = Arc::new(Client {
            route,
            timeout,
            reconnect,
            counts: Arc::default(),
            state: Mutex::new(State {
                conn: None,
                generation: 0,
                wanted: false,
                last_error: None,
                failures: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            connected_once: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&client);
        std::thread::Builder::new()
            .name("sftpfs-connector".into())
            .spawn(move || connector(weak))
            .expect("spawning the connector thread");
        client
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }

    pub fn describe(&self) -> String {
        self.route.describe()
    }

    /// Connections made so far (the first, and every reconnect).
    pub fn connections_made(&self) -> u64 {
        self.lock().generation
    }

    /// Connect now, and say why not: the first connection of a mount,
    /// whose failure is the mount's (a wrong key, an unknown host key, a
    /// refused port). Waits at most the timeout.
    pub fn connect(&self) -> Result<(Arc<Connection>, u64), String> {
        let deadline = Instant::now() + self.timeout;
        let mut s = self.lock();
        loop {
            if let Some(c) = s.conn.as_ref().filter(|c| !c.is_dead()) {
                return Ok((c.clone(), s.generation));
            }
            if let Some(e) = s.last_error.take().filter(|_| s.failures > 0) {
                return Err(e);
            }
            if s.closed {
                return Err("closed".into());
            }
            s.wanted = true;
            self.changed.notify_all();
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "no connection within {:?} ({})",
                    self.timeout,
                    self.route.describe()
                ));
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live connection and its generation, waiting for a reconnect
    /// until `deadline`.
    pub fn current(&self, deadline: Instant) -> Result<(Arc<Connection>, u64), Errno> {
        let mut s = self.lock();
        loop {
            if let Some(c) = s.conn.as_ref().filter(|c| !c.is_dead()) {
                return Ok((c.clone(), s.generation));
            }
            if s.closed || (!self.reconnect && self.connected_once.load(Ordering::Relaxed)) {
                return Err(Errno(libc::ENOTCONN));
            }
            s.wanted = true;
            self.changed.notify_all();
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    error = s.last_error.as_deref().unwrap_or("none yet"),
                    "no connection to the server within the timeout; failing the request with EIO"
                );
                return Err(Errno::EIO);
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The server's facts (limits, extensions), from the live connection.
    pub fn info(&self) -> Result<ServerInfo, Errno> {
        let (c, _) = self.current(Instant::now() + self.timeout)?;
        Ok(c.info().clone())
    }

    /// A request that can be sent again if the connection drops under it
    /// (reads, stats, anything naming a path that does not change it, and
    /// writes at an offset): retried on the next connection until the
    /// deadline.
    pub fn call(&self, req: &Request<'_>) -> Result<Reply, Errno> {
        self.call_until(req, Instant::now() + self.timeout)
    }

    pub fn call_until(&self, req: &Request<'_>, deadline: Instant) -> Result<Reply, Errno> {
        loop {
            let (conn, _) = self.current(deadline)?;
            match conn.call(req, deadline) {
                Ok(r) => return Ok(r),
                Err(ConnError::Lost(_)) => continue,
                Err(ConnError::TimedOut(_)) => return Err(self.timed_out(&conn, req)),
            }
        }
    }

    /// A request that must not be sent twice (mkdir, remove, rename, an
    /// exclusive create): a drop with it in flight is `Unknown`, for the
    /// caller to find out what happened on the next connection.
    pub fn call_once(&self, req: &Request<'_>) -> Result<Reply, CallError> {
        let deadline = Instant::now() + self.timeout;
        let (conn, _) = self.current(deadline)?;
        match conn.call(req, deadline) {
            Ok(r) => Ok(r),
            Err(ConnError::Lost(_)) => Err(CallError::Unknown),
            Err(ConnError::TimedOut(_)) => Err(self.timed_out(&conn, req).into()),
        }
    }

    /// A request on a connection the caller holds (one naming a remote
    /// handle of that connection's generation).
    pub fn call_on(
        &self,
        conn: &Connection,
        req: &Request<'_>,
        deadline: Instant,
    ) -> Result<Reply, CallError> {
        match conn.call(req, deadline) {
            Ok(r) => Ok(r),
            Err(ConnError::Lost(_)) => Err(CallError::Unknown),
            Err(ConnError::TimedOut(_)) => Err(self.timed_out(conn, req).into()),
        }
    }

    /// A server that does not answer within the timeout is as good as
    /// gone: end the connection (the next request reconnects) and fail
    /// this one.
    fn timed_out(&self, conn: &Connection, req: &Request<'_>) -> Errno {
        tracing::warn!(
            request = req.name(),
            timeout = ?self.timeout,
            "no reply from the server within the timeout; reconnecting"
        );
        conn.die(format!(
            "no reply to {} within {:?}",
            req.name(),
            self.timeout
        ));
        Errno::EIO
    }

    /// Stop: close the connection and reconnect no more.
    pub fn close(&self) {
        let conn = {
            let mut s = self.lock();
            s.closed = true;
            self.changed.notify_all();
            s.conn.take()
        };
        if let Some(c) = conn {
            c.die("unmounted");
        }
    }

    /// Open one connection (on the connector thread).
    fn open(&self) -> Result<Arc<Connection>, String> {
        let stream = self.route.open().map_err(|e| e.to_string())?;
        let stderr = stream.stderr.clone();
        // ssh may need several round trips and a key exchange; the
        // request timeout bounds it as it bounds every wait.
        let deadline = Instant::now() + self.timeout;
        match Connection::start(
            stream.reader,
            stream.writer,
            stream.closer,
            self.counts.clone(),
            deadline,
        ) {
            Ok(c) => Ok(c),
            Err(e) => {
                // ssh says why far better than a closed pipe does; give
                // its stderr thread a moment to read the last lines.
                std::thread::sleep(Duration::from_millis(50));
                Err(match stderr.reason() {
                    Some(r) => format!("ssh: {r}"),
                    None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        "the server closed the connection before SFTP started (is an SFTP subsystem configured?)".to_string()
                    }
                    None => e.to_string(),
                })
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(c) = self.lock().conn.take() {
            c.die("closed");
        }
    }
}

/// The connector thread: makes a connection whenever one is wanted, with
/// backoff between failed attempts; ends when the client is gone.
fn connector(client: Weak<Client>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(c) = client.upgrade() else { return };
        {
            let mut s = c.lock();
            while !s.wanted && !s.closed {
                // Holding the client only while waiting would keep it
                // alive forever: wake up now and then to check.
                let (g, _) = c
                    .changed
                    .wait_timeout(s, Duration::from_millis(500))
                    .unwrap_or_else(PoisonError::into_inner);
                s = g;
                if Arc::strong_count(&c) == 1 {
                    return;
                }
            }
            if s.closed {
                return;
            }
        }
        match c.open() {
            Ok(conn) => {
                backoff = FIRST_BACKOFF;
                let weak = Arc::downgrade(&c);
                conn.on_death(Box::new(move |why| {
                    if let Some(c) = weak.upgrade() {
                        tracing::info!(why = %why, "connection lost; the next request reconnects");
                        c.changed.notify_all();
                    }
                }));
                let mut s = c.lock();
                s.generation += 1;
                let g = s.generation;
                if g > 1 {
                    tracing::info!(generation = g, "reconnected");
                }
                s.conn = Some(conn);
                s.wanted = false;
                s.failures = 0;
                s.last_error = None;
                c.connected_once.store(true, Ordering::Relaxed);
                c.changed.notify_all();
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "connecting failed");
                {
                    let mut s = c.lock();
                    s.failures += 1;
                    s.last_error = Some(e);
                    c.changed.notify_all();
                }
                drop(c);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
