//! One SFTP session over a byte stream (an `ssh` child's pipes, or a TCP
//! socket for `directport`): requests go out the moment they are made,
//! any number in flight, and one reader thread hands each reply to whoever
//! asked, by id. This is how OpenSSH's own client keeps a pipe full: the
//! server answers in order, but nothing waits for an answer before the
//! next request is sent.
//!
//! A request is answered either to a [`Waiter`] (the caller blocks, with
//! a deadline) or to a callback run on the reader thread (readahead and
//! write-behind, where nobody waits). When the stream ends every request
//! still in flight is answered [`ConnError::Lost`], so nothing waits on a
//! dead connection.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::wire::{self, Limits, Reply, Request, Version, WireError};

/// Why a request got no reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The connection ended (the server or the link went away) before a
    /// reply came; the request may or may not have been carried out.
    #[error("connection lost: {0}")]
    Lost(Arc<str>),
    /// No reply within the deadline.
    #[error("no reply within {0:?}")]
    TimedOut(Duration),
}

/// What a reply is handed to.
type Callback = Box<dyn FnOnce(Result<Reply, ConnError>) + Send>;

/// What runs once when a connection dies, with why.
type DeathHook = Box<dyn FnOnce(Arc<str>) + Send>;

enum Completion {
    Waiter(Arc<Waiter>),
    Callback(Callback),
}

impl Completion {
    fn complete(self, r: Result<Reply, ConnError>) {
        match self {
            Completion::Waiter(w) => w.set(r),
            Completion::Callback(f) => f(r),
        }
    }
}

/// Where a blocked caller's reply lands.
#[derive(Default)]
pub struct Waiter {
    reply: Mutex<Option<Result<Reply, ConnError>>>,
    ready: Condvar,
}

impl Waiter {
    fn set(&self, r: Result<Reply, ConnError>) {
        *self.reply.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        self.ready.notify_all();
    }

    /// The reply, or `TimedOut` once `deadline` passes.
    pub fn wait(&self, deadline: Instant) -> Result<Reply, ConnError> {
        let mut g = self.reply.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ConnError::TimedOut(Duration::ZERO));
            }
            g = self
                .ready
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// What the server said about itself at the start.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    pub version: u32,
    pub posix_rename: bool,
    pub statvfs: bool,
    pub hardlink: bool,
    pub fsync: bool,
    pub lsetstat: bool,
    pub copy_data: bool,
    /// OpenSSH's argument order for SYMLINK (see `wire::Request::Symlink`).
    pub openssh_symlink: bool,
    /// The most data one READ returns and one WRITE carries.
    pub max_read: u32,
    pub max_write: u32,
    pub limits: Option<Limits>,
}

/// What a server that states no limits is assumed to take: the draft's
/// minimum packet size leaves 32,768 bytes of data, and every server in
/// use takes at least that much.
const DEFAULT_IO_SIZE: u32 = 32 * 1024;

/// Requests sent per type, for statistics (index: the packet type; the
/// extensions share EXTENDED's count).
pub struct Counts([AtomicU64; 21]);

impl Counts {
    fn bump(&self, req: &Request<'_>) {
        let i = match req.packet_type() {
            wire::msg::EXTENDED => 0,
            t => t as usize,
        };
        if let Some(c) = self.0.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (name, count) of every type sent at least once.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        const NAMES: [&str; 21] = [
            "EXTENDED", "", "", "OPEN", "CLOSE", "READ", "WRITE", "LSTAT", "FSTAT", "SETSTAT",
            "FSETSTAT", "OPENDIR", "READDIR", "REMOVE", "MKDIR", "RMDIR", "REALPATH", "STAT",
            "RENAME", "READLINK", "SYMLINK",
        ];
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let n = c.load(Ordering::Relaxed);
                (n > 0).then_some((NAMES[i], n))
            })
            .collect()
    }
}

impl Default for Counts {
    fn default() -> Counts {
        Counts(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// A live SFTP session.
pub struct Connection {
    writer: Mutex<Box<dyn Write + Send>>,
    pending: Mutex<HashMap<u32, Completion, foldhash::fast::RandomState>>,
    next_id: AtomicU32,
    /// Set once the stream is known dead; nothing more is sent.
    dead: AtomicBool,
    why_dead: Mutex<Option<Arc<str>>>,
    info: ServerInfo,
    counts: Arc<Counts>,
    /// Called once when the connection dies (the client's reconnector).
    on_death: Mutex<Option<DeathHook>>,
    /// What ends the transport (kills an ssh child); run at death.
    closer: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

thread_local! {
    static ENCODE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Packets larger than this are encoded into a buffer of their own rather
/// than kept in the thread's reusable one.
const KEEP_ENCODE_BUFFER: usize = 512 * 1024;

impl Connection {
    /// Speak SFTP over `reader`/`writer`: send INIT, read VERSION and ask
    /// for the server's limits, all before `deadline`. `closer` ends the
    /// transport (it runs when the connection dies or is dropped).
    pub fn start(
        reader: Box<dyn Read + Send>,
        mut writer: Box<dyn Write + Send>,
        closer: Box<dyn FnOnce() + Send>,
        counts: Arc<Counts>,
        deadline: Instant,
    ) -> io::Result<Arc<Connection>> {
        let fail = |closer: Box<dyn FnOnce() + Send>, e: io::Error| {
            closer();
            Err(e)
        };
        let mut init = Vec::new();
        wire::encode_init(&mut init);
        if let Err(e) = writer.write_all(&init).and_then(|()| writer.flush()) {
            return fail(closer, e);
        }
        // VERSION (and the limits reply, when the server has limits) are
        // read by the reader thread too, so that a server that never
        // answers costs the deadline, not a hang.
        let (boot_tx, boot_rx) = std::sync::mpsc::channel::<io::Result<BootPacket>>();
        // The connection, once made; dropped unsent if `start` fails, which
        // ends the reader thread (and its hold on the stream).
        let (conn_tx, conn_rx) = std::sync::mpsc::channel::<Arc<Connection>>();
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        let reader_thread = std::thread::Builder::new()
            .name("sftpfs-reader".into())
            .spawn(move || {
                let version = read_packet(&mut reader, &mut Vec::new())
                    .and_then(|body| Version::decode(&body).map_err(invalid));
                let limits = matches!(&version, Ok(v) if v.has(wire::ext::LIMITS));
                let ok = version.is_ok();
                if boot_tx.send(version.map(BootPacket::Version)).is_err() || !ok {
                    return;
                }
                if limits {
                    let reply = read_reply(&mut reader, &mut Vec::new());
                    let ok = reply.is_ok();
                    if boot_tx.send(reply.map(BootPacket::Reply)).is_err() || !ok {
                        return;
                    }
                }
                // Wait for the connection to exist, then serve replies.
                if let Ok(conn) = conn_rx.recv() {
                    conn.read_replies(&mut reader);
                }
            });
        let reader_thread = match reader_thread {
            Ok(t) => t,
            Err(e) => return fail(closer, e),
        };
        let boot = |deadline: Instant| -> io::Result<BootPacket> {
            let timeout = deadline.saturating_duration_since(Instant::now());
            match boot_rx.recv_timeout(timeout) {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the server did not start SFTP in time",
                )),
            }
        };
        let version = match boot(deadline) {
            Ok(BootPacket::Version(v)) => v,
            Ok(BootPacket::Reply(_)) => unreachable!("VERSION comes first"),
            Err(e) => return fail(closer, e),
        };
        if version.version < 3 {
            return fail(
                closer,
                io::Error::other(format!(
                    "the server speaks SFTP version {}, sftpfs needs 3",
                    version.version
                )),
            );
        }
        let mut info = ServerInfo {
            version: version.version,
            posix_rename: version.has(wire::ext::POSIX_RENAME),
            statvfs: version.has(wire::ext::STATVFS),
            hardlink: version.has(wire::ext::HARDLINK),
            fsync: version.has(wire::ext::FSYNC),
            lsetstat: version.has(wire::ext::LSETSTAT),
            copy_data: version.has(wire::ext::COPY_DATA),
            openssh_symlink: version
                .extensions
                .iter()
                .any(|(n, _)| n.ends_with("@openssh.com")),
            max_read: DEFAULT_IO_SIZE,
            max_write: DEFAULT_IO_SIZE,
            limits: None,
        };
        if version.has(wire::ext::LIMITS) {
            let mut req = Vec::new();
            Request::Limits.encode(0, &mut req);
            if let Err(e) = writer.write_all(&req).and_then(|()| writer.flush()) {
                return fail(closer, e);
            }
            match boot(deadline) {
                Ok(BootPacket::Reply((_, Reply::Extended(body)))) => {
                    let l = match Limits::decode(&body) {
                        Ok(l) => l,
                        Err(e) => return fail(closer, invalid(e)),
                    };
                    // 0 means "no limit stated": keep the default then.
                    // Never more than a packet we accept can carry.
                    let most = (wire::MAX_PACKET - 1024) as u64;
                    let pick = |v: u64| match v {
                        0 => DEFAULT_IO_SIZE,
                        v => v.min(most) as u32,
                    };
                    info.max_read = pick(l.max_read);
                    info.max_write = pick(l.max_write);
                    info.limits = Some(l);
                }
                Ok(other) => {
                    tracing::debug!(reply = ?other.kind(), "limits@openssh.com refused; default sizes");
                }
                Err(e) => return fail(closer, e),
            }
        }
        let conn = Arc::new(Connection {
            writer: Mutex::new(writer),
            pending: Mutex::new(HashMap::default()),
            next_id: AtomicU32::new(1),
            dead: AtomicBool::new(false),
            why_dead: Mutex::new(None),
            info,
            counts,
            on_death: Mutex::new(None),
            closer: Mutex::new(Some(closer)),
        });
        let _ = conn_tx.send(conn.clone());
        drop(reader_thread);
        Ok(conn)
    }

    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Why it died, once it has.
    pub fn why_dead(&self) -> Option<Arc<str>> {
        self.why_dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Run `f` once, when the connection dies (at once if it already has).
    pub fn on_death(&self, f: DeathHook) {
        let mut g = self.on_death.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_dead() {
            drop(g);
            f(self.why_dead().unwrap_or_else(|| "closed".into()));
        } else {
            *g = Some(f);
        }
    }

    /// Send `req` and wait for its reply until `deadline`.
    pub fn call(&self, req: &Request<'_>, deadline: Instant) -> Result<Reply, ConnError> {
        let w = Arc::new(Waiter::default());
        let id = self.send(req, Completion::Waiter(w.clone()))?;
        match w.wait(deadline) {
            Err(ConnError::TimedOut(_)) => {
                self.forget(id);
                Err(ConnError::TimedOut(Duration::ZERO))
            }
            r => r,
        }
    }

    /// Send `req` without waiting: `f` gets the reply on the reader thread
    /// (or at once, with the error, if it cannot be sent).
    pub fn call_back(
        &self,
        req: &Request<'_>,
        f: impl FnOnce(Result<Reply, ConnError>) + Send + 'static,
    ) {
        if let Err((e, c)) = self.send_inner(req, Completion::Callback(Box::new(f))) {
            c.complete(Err(e));
        }
    }

    /// Send several requests in one write; each reply goes to its waiter.
    /// Returns the waiters in order.
    pub fn call_many(&self, reqs: &[Request<'_>]) -> Vec<Arc<Waiter>> {
        let waiters: Vec<Arc<Waiter>> = reqs.iter().map(|_| Arc::default()).collect();
        let mut buf = Vec::new();
        let mut ids = Vec::with_capacity(reqs.len());
        {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            for (r, w) in reqs.iter().zip(&waiters) {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                p.insert(id, Completion::Waiter(w.clone()));
                r.encode(id, &mut buf);
                self.counts.bump(r);
                tracing::debug!(id, request = r.name(), "request");
                ids.push(id);
            }
        }
        if let Err(e) = self.write_packet(&buf) {
            for id in ids {
                if let Some(c) = self.take(id) {
                    c.complete(Err(e.clone()));
                }
            }
        }
        waiters
    }

    fn send(&self, req: &Request<'_>, c: Completion) -> Result<u32, ConnError> {
        self.send_inner(req, c).map_err(|(e, _)| e)
    }

    fn send_inner(&self, req: &Request<'_>, c: Completion) -> Result<u32, (ConnError, Completion)> {
        if self.is_dead() {
            return Err((self.lost(), c));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Registered before it is sent: the reply may come back before
        // `write` returns.
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, c);
        self.counts.bump(req);
        // `RUST_LOG=fusebox_sftpfs::connection=debug` (or -vv): every
        // request and reply, as sshfs_debug shows them.
        tracing::debug!(id, request = req.name(), "request");
        let sent = ENCODE.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            req.encode(id, &mut b);
            let r = self.write_packet(&b);
            if b.capacity() > KEEP_ENCODE_BUFFER {
                *b = Vec::new();
            }
            r
        });
        match sent {
            Ok(()) => Ok(id),
            Err(e) => match self.take(id) {
                Some(c) => Err((e, c)),
                // The reader failed it already (the stream died meanwhile).
                None => Ok(id),
            },
        }
    }

    fn write_packet(&self, bytes: &[u8]) -> Result<(), ConnError> {
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_dead() {
            return Err(self.lost());
        }
        if let Err(e) = w.write_all(bytes).and_then(|()| w.flush()) {
            drop(w);
            self.die(format!("writing to the server: {e}"));
            return Err(self.lost());
        }
        Ok(())
    }

    fn take(&self, id: u32) -> Option<Completion> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id)
    }

    /// Stop waiting for `id`: a reply that comes later is dropped.
    fn forget(&self, id: u32) {
        drop(self.take(id));
    }

    fn lost(&self) -> ConnError {
        ConnError::Lost(self.why_dead().unwrap_or_else(|| "closed".into()))
    }

    /// End the connection: kill the transport and answer everything in
    /// flight `Lost`.
    pub fn die(&self, why: impl Into<Arc<str>>) {
        let why = why.into();
        {
            let mut w = self.why_dead.lock().unwrap_or_else(PoisonError::into_inner);
            if self.dead.swap(true, Ordering::AcqRel) {
                return;
            }
            *w = Some(why.clone());
        }
        tracing::info!(why = %why, "SFTP connection ended");
        if let Some(close) = self
            .closer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            close();
        }
        let pending: Vec<Completion> = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, c)| c)
            .collect();
        for c in pending {
            c.complete(Err(ConnError::Lost(why.clone())));
        }
        if let Some(f) = self
            .on_death
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            f(why);
        }
    }

    /// The reader thread's loop: every reply to its request, until the
    /// stream ends or breaks.
    fn read_replies(self: Arc<Connection>, reader: &mut impl Read) {
        let mut body = Vec::new();
        let why = loop {
            match read_reply(reader, &mut body) {
                Ok((id, reply)) => {
                    tracing::debug!(id, reply = %reply.summary(), "reply");
                    if let Some(c) = self.take(id) {
                        c.complete(Ok(reply));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    break "the server closed the connection".to_string()
                }
                Err(e) => break format!("reading from the server: {e}"),
            }
            if self.is_dead() {
                break "closed".to_string();
            }
        };
        self.die(why);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(close) = self
            .closer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            close();
        }
    }
}

/// What the reader thread reads before the connection exists.
enum BootPacket {
    Version(Version),
    Reply((u32, Reply)),
}

impl BootPacket {
    fn kind(&self) -> &'static str {
        match self {
            BootPacket::Version(_) => "VERSION",
            BootPacket::Reply(_) => "a reply",
        }
    }
}

fn invalid(e: WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// One whole packet's body (type byte first) into `body`.
fn read_packet(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > wire::MAX_PACKET {
        return Err(invalid(WireError::TooLong(len)));
    }
    body.clear();
    body.resize(len, 0);
    r.read_exact(body)?;
    Ok(std::mem::take(body))
}

/// One reply. A DATA reply's payload is read straight into a vector of its
/// own, which becomes the reply: no copy between the pipe's buffer and
/// whoever asked.
fn read_reply(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u32, Reply)> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head[..4])?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if !(5..=wire::MAX_PACKET).contains(&len) {
        return Err(invalid(WireError::TooLong(len)));
    }
    r.read_exact(&mut head[4..9])?;
    if head[4] == wire::msg::DATA && len >= 9 {
        let mut dlen = [0u8; 4];
        r.read_exact(&mut dlen)?;
        let dlen = u32::from_be_bytes(dlen) as usize;
        if dlen != len - 9 {
            return Err(invalid(WireError::Unexpected(
                "a DATA reply's length does not match its packet",
            )));
        }
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
        let mut data = vec![0u8; dlen];
        r.read_exact(&mut data)?;
        return Ok((id, Reply::Data(data)));
    }
    body.clear();
    body.extend_from_slice(&head[4..9]);
    body.resize(len, 0);
    r.read_exact(&mut body[5..])?;
    Reply::decode(body).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{msg, put_str, put_u32};

    fn packet(body: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        put_u32(&mut p, body.len() as u32);
        p.extend_from_slice(body);
        p
    }

    /// A server with no extensions: sizes fall back to 32 KiB, every
    /// extension is off, requests are answered by id.
    #[test]
    fn a_plain_version_3_server_gets_the_fallbacks() {
        use std::os::unix::net::UnixStream;
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut s = theirs;
            let init = read_packet(&mut s, &mut Vec::new()).unwrap();
            assert_eq!(init[0], msg::INIT);
            let mut v = vec![msg::VERSION];
            put_u32(&mut v, 3);
            s.write_all(&packet(&v)).unwrap();
            // One LSTAT: answered "no such file", by its id.
            let req = read_packet(&mut s, &mut Vec::new()).unwrap();
            assert_eq!(req[0], msg::LSTAT);
            let id = u32::from_be_bytes([req[1], req[2], req[3], req[4]]);
            let mut st = vec![msg::STATUS];
            put_u32(&mut st, id);
            put_u32(&mut st, crate::wire::status::NO_SUCH_FILE);
            s.write_all(&packet(&st)).unwrap();
            // Then the stream ends: whatever is in flight is lost.
            let _ = read_packet(&mut s, &mut Vec::new());
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = Connection::start(
            Box::new(ours.try_clone().unwrap()),
            Box::new(ours.try_clone().unwrap()),
            Box::new(move || {
                let _ = ours.shutdown(std::net::Shutdown::Both);
            }),
            Arc::default(),
            deadline,
        )
        .unwrap();
        let i = conn.info();
        assert_eq!((i.max_read, i.max_write), (32 * 1024, 32 * 1024));
        assert!(!i.statvfs && !i.posix_rename && !i.fsync && !i.lsetstat && !i.openssh_symlink);
        let r = conn
            .call(&Request::Lstat { path: b"/x" }, deadline)
            .unwrap();
        assert!(
            matches!(r, Reply::Status { code, .. } if code == crate::wire::status::NO_SUCH_FILE)
        );
        let r = conn.call(&Request::Lstat { path: b"/y" }, deadline);
        assert!(matches!(r, Err(ConnError::Lost(_))), "{r:?}");
        assert!(conn.is_dead());
        server.join().unwrap();
    }

    #[test]
    fn data_replies_are_read_into_their_own_buffer() {
        let mut body = vec![msg::DATA];
        put_u32(&mut body, 5);
        put_str(&mut body, b"hello");
        let mut stream = &packet(&body)[..];
        let (id, reply) = read_reply(&mut stream, &mut Vec::new()).unwrap();
        assert_eq!((id, reply), (5, Reply::Data(b"hello".to_vec())));
        // A DATA length that disagrees with the packet is a broken stream.
        let mut bad = vec![msg::DATA];
        put_u32(&mut bad, 5);
        put_u32(&mut bad, 3);
        bad.extend_from_slice(b"hello");
        assert!(read_reply(&mut &packet(&bad)[..], &mut Vec::new()).is_err());
        // So is a length no server sends.
        let mut huge = Vec::new();
        put_u32(&mut huge, u32::MAX);
        assert!(read_reply(&mut &huge[..], &mut Vec::new()).is_err());
    }
}
