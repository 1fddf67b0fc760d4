//! Open files: a remote handle that is reopened on the next connection
//! when the one it was opened on dies, reads served by a readahead window
//! that keeps many READs in flight, and writes sent behind the
//! application's back (write-behind) through the write log.
//!
//! Reads. A read at the offset where the last one ended is sequential, and
//! the window of chunks requested ahead of it is twice what was read in
//! sequence so far (two chunks at first, `max_readahead_window` at most:
//! what is fetched and never read stays below what was read); every chunk
//! is one READ as large as
//! the server allows (limits@openssh.com; 261,120 bytes on OpenSSH). A
//! read elsewhere resets the window and asks only for what it needs. The
//! chunks a file holds are bounded per file (the window) and for the
//! mount (`readahead_memory`); nothing is prefetched past the size the
//! file had when it was last seen.
//!
//! One SSH connection carries at most what OpenSSH's client grants the
//! server as channel window, 2 MiB a round trip (40 MB/s at 50 ms),
//! whatever the readahead window. A file whose window outgrows that
//! (`STREAM_FROM`) and that is open read-only spreads its READs over
//! `stream_conns` connections: its own and the mount's stream
//! connections, each with the file opened on it in the background. Only
//! while no write of the mount is unconfirmed: a READ on another
//! connection could overtake a write still on its way on the first.
//!
//! Writes. A write is copied into the write log, sent, and answered at
//! once; the server's verdict comes later. A refusal (ENOSPC, EACCES, ...)
//! is reported by the next write, flush (close), fsync or release of the
//! file, as sshfs does. flush, fsync and release wait until every write of
//! the file is confirmed, so a closed file is all on the server
//! (close-to-open). The log bounds the bytes in flight for the mount
//! (`write_behind`); a writer waits for room.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use fusebox::Errno;

use crate::client::{CallError, Client};
use crate::connection::{ConnError, Connection};
use crate::errors::status_errno;
use crate::wire::{self, pflags, Reply, Request};
use crate::writelog::{Pending, WriteLog};

/// What every open file shares: the clients, the write log, the limits.
pub struct Io {
    /// The first connection: every request by path goes here.
    pub client: Arc<Client>,
    /// Every connection (`max_conns`), the first included: an open file's
    /// reads and writes go to one of them, chosen by its path.
    pub clients: Vec<Arc<Client>>,
    /// The connections besides the file's own that a file read in
    /// sequence spreads its READs over (`stream_conns` - 1; each connects
    /// when first needed).
    pub streams: Vec<Arc<Client>>,
    log: RwLock<Arc<WriteLog>>,
    pub readahead: bool,
    pub window_max: u64,
    /// Readahead bytes the mount may hold, and holds now.
    pub budget: u64,
    held: Arc<AtomicU64>,
    /// sshfs_sync: no write-behind.
    pub sync_write: bool,
}

impl Io {
    pub fn new(
        clients: Vec<Arc<Client>>,
        streams: Vec<Arc<Client>>,
        log: WriteLog,
        o: &crate::options::SftpOptions,
    ) -> Io {
        Io {
            client: clients[0].clone(),
            clients,
            streams,
            log: RwLock::new(Arc::new(log)),
            readahead: o.readahead,
            window_max: o.readahead_window.max(64 << 10),
            budget: o.readahead_memory,
            held: Arc::default(),
            sync_write: o.sync_write,
        }
    }

    pub fn log(&self) -> Arc<WriteLog> {
        self.log
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Use `log` from now on (the supervisor's held area, adopted before
    /// any write is served).
    pub fn set_log(&self, log: WriteLog) {
        *self.log.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(log);
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The connection a file at `path` reads and writes on: the same for
    /// every open of one path, so its reads come after its writes.
    pub fn client_for(&self, path: &[u8]) -> &Arc<Client> {
        if self.clients.len() == 1 {
            return &self.client;
        }
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(7).hash_one(path);
        &self.clients[(h % self.clients.len() as u64) as usize]
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.client.timeout()
    }

    /// Every connection the mount may use.
    pub fn all_clients(&self) -> impl Iterator<Item = &Arc<Client>> {
        self.clients.iter().chain(&self.streams)
    }
}

/// The readahead window from which a read-only file spreads its READs
/// over the stream connections: twice what one connection carries a
/// round trip, so a file read whole at once (and a small one) never
/// costs an SSH handshake.
const STREAM_FROM: u64 = 4 << 20;

/// How far behind the furthest read a READ may arrive and still be part
/// of a sequential read: the kernel's READs of one read(2) and its
/// readahead, in flight together (a 1 MiB read is four 256 KiB READs).
const REORDER: u64 = 2 << 20;

/// How long a stream connection that could not open a file is left
/// alone before it is tried again.
const STREAM_RETRY: Duration = Duration::from_secs(30);

/// A remote handle and the connection it belongs to.
#[derive(Clone)]
pub struct RemoteHandle {
    pub conn: Arc<Connection>,
    pub handle: Arc<[u8]>,
}

pub struct OpenFile {
    pub fh: u64,
    path: Mutex<Vec<u8>>,
    /// The flags it was opened with; a reopen leaves out CREAT, EXCL and
    /// TRUNC (the file exists, and its data must stay).
    pflags: u32,
    /// Also the lock that orders a reopen before the writes sent after it.
    remote: Mutex<Option<RemoteHandle>>,
    ra: Mutex<ReadAhead>,
    wb: Mutex<WriteState>,
    wb_changed: Condvar,
    /// The size the file had when last seen (readahead stops there).
    size_hint: AtomicU64,
    /// Unlinked while open: it cannot be reopened by name.
    gone: AtomicBool,
    /// Written through this handle since it was opened.
    pub written: AtomicBool,
    /// The file opened on the stream connections (`Io::streams`).
    streams: Mutex<Streams>,
    /// Released: a stream handle opened late is closed at once.
    closed: AtomicBool,
}

/// An open file's handles on the stream connections, by index into
/// `Io::streams`.
#[derive(Default)]
struct Streams {
    slots: Vec<StreamSlot>,
    /// The next connection (0: the file's own) a new READ goes to.
    turn: usize,
}

#[derive(Default)]
enum StreamSlot {
    #[default]
    None,
    Opening,
    Open(RemoteHandle),
    /// Could not be opened; not tried again before this.
    Failed(Instant),
}

#[derive(Default)]
struct WriteState {
    /// Unconfirmed writes by sequence number.
    pending: BTreeMap<u64, Pending>,
    /// The end of the furthest unconfirmed write (the size the server will
    /// have once they land).
    max_end: u64,
    /// A refusal not yet reported.
    error: Option<Errno>,
}

#[derive(Default)]
struct ReadAhead {
    chunks: BTreeMap<u64, Arc<Chunk>>,
    /// Where the next sequential read starts.
    next: u64,
    window: u64,
    /// Bytes read in sequence so far: the window is twice that (what
    /// the file has shown it will read), between two chunks and the most.
    streak: u64,
    /// End of file, when a chunk came back short.
    eof: Option<u64>,
    bytes: u64,
    /// The whole file, read ahead with its directory (`smallfiles`):
    /// reads are answered from it while it lasts.
    whole: Option<Arc<Vec<u8>>>,
}

/// One READ's worth of a file.
struct Chunk {
    off: u64,
    len: u32,
    /// The connection it was asked on (the one to end if it never
    /// answers).
    via: Mutex<Option<Arc<Connection>>>,
    /// Bytes of it the application was given: once all were, it is
    /// dropped (kept, it would hold the mount's readahead budget while
    /// the file's reads are still within reordering distance of it).
    given: AtomicU64,
    state: Mutex<ChunkState>,
    ready: Condvar,
    held: Arc<AtomicU64>,
}

enum ChunkState {
    Waiting,
    Ready(Arc<Vec<u8>>),
    Failed(Errno),
    /// The connection dropped under it: ask again.
    Lost,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.held.fetch_sub(self.len as u64, Ordering::Relaxed);
    }
}

impl Chunk {
    fn set(&self, s: ChunkState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = s;
        self.ready.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OpenFile {
    pub fn new(fh: u64, path: Vec<u8>, pflags: u32, size: u64) -> OpenFile {
        OpenFile {
            fh,
            path: Mutex::new(path),
            pflags,
            remote: Mutex::new(None),
            ra: Mutex::default(),
            wb: Mutex::default(),
            wb_changed: Condvar::new(),
            size_hint: AtomicU64::new(size),
            gone: AtomicBool::new(false),
            written: AtomicBool::new(false),
            streams: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Its whole data, read ahead (`smallfiles`): not opened on the
    /// server unless something needs a handle.
    pub fn with_whole(self, data: Arc<Vec<u8>>) -> OpenFile {
        lock(&self.ra).whole = Some(data);
        self
    }

    /// Whether reads are answered from data read ahead whole.
    pub fn has_whole(&self) -> bool {
        lock(&self.ra).whole.is_some()
    }

    /// Opened just now on `conn`.
    pub fn set_remote(&self, rh: RemoteHandle) {
        *lock(&self.remote) = Some(rh);
    }

    pub fn path(&self) -> Vec<u8> {
        lock(&self.path).clone()
    }

    /// The kernel names the file by this path now (it may have moved).
    pub fn set_path(&self, p: &[u8]) {
        let mut g = lock(&self.path);
        if g.as_slice() != p {
            *g = p.to_vec();
        }
    }

    pub fn mark_gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    pub fn set_size_hint(&self, size: u64) {
        self.size_hint.store(size, Ordering::Relaxed);
    }

    pub fn appends(&self) -> bool {
        self.pflags & pflags::APPEND != 0
    }

    pub fn writable(&self) -> bool {
        self.pflags & pflags::WRITE != 0
    }

    /// The remote handle on a live connection, reopening it (and sending
    /// again the writes the dead connection left unconfirmed) if needed.
    pub fn handle(self: &Arc<Self>, io: &Io) -> Result<RemoteHandle, Errno> {
        let mut g = lock(&self.remote);
        self.handle_locked(io, &mut g)
    }

    fn handle_locked(
        self: &Arc<Self>,
        io: &Io,
        g: &mut MutexGuard<'_, Option<RemoteHandle>>,
    ) -> Result<RemoteHandle, Errno> {
        if let Some(h) = g.as_ref().filter(|h| !h.conn.is_dead()) {
            return Ok(h.clone());
        }
        self.reopen_locked(io, g, true)
    }

    /// Open the file again by its path on the live connection; `replay`:
    /// send its unconfirmed writes again, oldest first, before anything
    /// newer can go out.
    fn reopen_locked(
        self: &Arc<Self>,
        io: &Io,
        g: &mut MutexGuard<'_, Option<RemoteHandle>>,
        replay: bool,
    ) -> Result<RemoteHandle, Errno> {
        if self.gone.load(Ordering::Relaxed) {
            // Unlinked while open: no name to reopen it by; its writes
            // still unconfirmed can never be sent again.
            self.abandon(io, Errno::EIO);
            return Err(Errno::EIO);
        }
        let deadline = io.deadline();
        let path = self.path();
        let reopen = Request::Open {
            path: &path,
            pflags: self.pflags & !(pflags::CREAT | pflags::EXCL | pflags::TRUNC),
            attrs: wire::Attrs::default(),
        };
        let client = io.client_for(&path);
        let rh = loop {
            let (conn, _) = match client.current(deadline) {
                Ok(c) => c,
                // No server within the timeout: a later call may find one.
                Err(e) if e == Errno::EIO => return Err(e),
                Err(e) => {
                    // Never again (reconnect is off, or closed).
                    self.abandon(io, e);
                    return Err(e);
                }
            };
            match client.call_on(&conn, &reopen, deadline) {
                Ok(Reply::Handle(h)) => {
                    break RemoteHandle {
                        conn,
                        handle: h.into(),
                    }
                }
                Ok(Reply::Status { code, .. }) => {
                    tracing::warn!(fh = self.fh, path = %String::from_utf8_lossy(&path), status = %wire::StatusName(code), "reopening a file after a reconnect failed");
                    let e = status_errno(code);
                    self.abandon(io, e);
                    return Err(e);
                }
                Ok(_) => return Err(Errno::EPROTO),
                // The open itself is harmless to repeat.
                Err(CallError::Unknown) => continue,
                Err(CallError::Errno(e)) => return Err(e),
            }
        };
        **g = Some(rh.clone());
        if replay {
            self.replay(io, &rh);
        }
        // Readahead asked on the old connection is lost. (A chunk's state
        // is taken only after `ra`, never the other way round.)
        let old: Vec<Arc<Chunk>> = lock(&self.ra).chunks.values().cloned().collect();
        let lost: Vec<u64> = old
            .iter()
            .filter(|c| {
                matches!(
                    *c.state.lock().unwrap_or_else(PoisonError::into_inner),
                    ChunkState::Waiting | ChunkState::Lost
                )
            })
            .map(|c| c.off)
            .collect();
        let mut ra = lock(&self.ra);
        for off in lost {
            if let Some(c) = ra.chunks.remove(&off) {
                ra.bytes -= c.len as u64;
            }
        }
        drop(ra);
        Ok(rh)
    }

    /// Send again every unconfirmed write, oldest first, on `rh` (the
    /// caller holds the remote lock, so nothing newer goes out before).
    fn replay(self: &Arc<Self>, io: &Io, rh: &RemoteHandle) {
        let log = io.log();
        // The data is copied while the records are surely still pending:
        // a confirmation arriving late frees a record (and its slot may be
        // given to another write) only under the same lock.
        let pending: Vec<(Pending, Vec<u8>)> = {
            let wb = lock(&self.wb);
            wb.pending
                .values()
                .map(|p| (p.clone(), log.data(p)))
                .collect()
        };
        if pending.is_empty() {
            return;
        }
        tracing::info!(
            fh = self.fh,
            writes = pending.len(),
            "sending unconfirmed writes again"
        );
        for (p, data) in pending {
            self.send_write(io, rh, &log, p, &data);
        }
    }

    /// Give up the file's unconfirmed writes for good (it cannot be
    /// reopened): their log records are freed, so they hold up no other
    /// write, and `why` is reported by the file's next call.
    pub fn abandon(&self, io: &Io, why: Errno) {
        let log = io.log();
        let mut wb = lock(&self.wb);
        if wb.pending.is_empty() {
            return;
        }
        tracing::error!(
            fh = self.fh,
            path = %String::from_utf8_lossy(&self.path()),
            writes = wb.pending.len(),
            error = %why,
            "unconfirmed writes given up: the file cannot be reopened"
        );
        for p in std::mem::take(&mut wb.pending).into_values() {
            log.done(&p);
        }
        wb.max_end = 0;
        wb.error.get_or_insert(why);
        drop(wb);
        self.wb_changed.notify_all();
    }

    fn send_write(
        self: &Arc<Self>,
        _io: &Io,
        rh: &RemoteHandle,
        log: &Arc<WriteLog>,
        p: Pending,
        data: &[u8],
    ) {
        let me = self.clone();
        let log = log.clone();
        let seq = p.seq;
        rh.conn.call_back(
            &Request::Write {
                handle: &rh.handle,
                offset: p.offset,
                data,
            },
            move |r| me.confirmed(&log, seq, r),
        );
    }

    /// The server's verdict on write `seq`.
    fn confirmed(&self, log: &WriteLog, seq: u64, r: Result<Reply, ConnError>) {
        let err = match r {
            Ok(Reply::Status { code, .. }) if code == wire::status::OK => None,
            Ok(Reply::Status { code, message }) => {
                tracing::warn!(fh = self.fh, status = %wire::StatusName(code), message, "the server refused a write");
                Some(status_errno(code))
            }
            Ok(_) => Some(Errno::EPROTO),
            // Sent again on the next connection (see `handle`).
            Err(ConnError::Lost(_)) => {
                self.wb_changed.notify_all();
                return;
            }
            Err(ConnError::TimedOut(_)) => Some(Errno::EIO),
        };
        let mut wb = lock(&self.wb);
        if let Some(p) = wb.pending.remove(&seq) {
            log.done(&p);
            if let Some(e) = err {
                wb.error.get_or_insert(e);
            }
            if wb.pending.is_empty() {
                wb.max_end = 0;
            }
        }
        drop(wb);
        self.wb_changed.notify_all();
    }

    /// Write-behind: logged, sent, answered. Returns the bytes taken.
    pub fn write(self: &Arc<Self>, io: &Io, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        if let Some(e) = lock(&self.wb).error.take() {
            return Err(e);
        }
        self.written.store(true, Ordering::Relaxed);
        let mut g = lock(&self.remote);
        let rh = self.handle_locked(io, &mut g)?;
        let max = rh.conn.info().max_write.max(4096) as usize;
        if io.sync_write || self.appends() {
            drop(g);
            let r = self.write_through(io, offset, data, max);
            self.forget_readahead();
            return r;
        }
        let log = io.log();
        let path = self.path();
        let deadline = io.deadline();
        let mut off = offset;
        for piece in data.chunks(max.min(log.max_record() - path.len())) {
            let p = log
                .append(self.fh, off, piece, &path, deadline)
                .ok_or_else(|| {
                    tracing::warn!("the write log stayed full for the whole timeout");
                    Errno::EIO
                })?;
            {
                let mut wb = lock(&self.wb);
                wb.max_end = wb.max_end.max(off + piece.len() as u64);
                wb.pending.insert(p.seq, p.clone());
            }
            self.send_write(io, &rh, &log, p, piece);
            off += piece.len() as u64;
        }
        // After the writes went out (still holding the remote lock): a read
        // sent from now on comes after them on the connection; one that
        // went before is dropped here.
        self.forget_readahead();
        drop(g);
        Ok(data.len() as u32)
    }

    /// A write the server confirms before it is answered (sshfs_sync, and
    /// O_APPEND, whose offset the server picks: sending it twice would
    /// append twice, so it is never logged to be sent again).
    fn write_through(
        self: &Arc<Self>,
        io: &Io,
        offset: u64,
        data: &[u8],
        max: usize,
    ) -> Result<u32, Errno> {
        let deadline = io.deadline();
        let mut done = 0usize;
        for piece in data.chunks(max) {
            let rh = self.handle(io)?;
            let req = Request::Write {
                handle: &rh.handle,
                offset: offset + done as u64,
                data: piece,
            };
            match io.client.call_on(&rh.conn, &req, deadline) {
                Ok(Reply::Status { code, .. }) if code == wire::status::OK => {}
                Ok(Reply::Status { code, .. }) => {
                    return if done > 0 {
                        Ok(done as u32)
                    } else {
                        Err(status_errno(code))
                    }
                }
                Ok(_) => return Err(Errno::EPROTO),
                Err(CallError::Errno(e)) => return Err(e),
                // An append may have landed: the application must not be
                // told it did not, nor that it did. EIO, as a local disk
                // that lost power mid-write would.
                Err(CallError::Unknown) if self.appends() => return Err(Errno::EIO),
                Err(CallError::Unknown) => {
                    // At an offset: harmless to send again.
                    return self
                        .write_through(io, offset + done as u64, &data[done..], max)
                        .map(|n| n + done as u32);
                }
            }
            done += piece.len();
        }
        Ok(done as u32)
    }

    /// Wait until every write is confirmed; the refusal, if one came.
    pub fn drain(self: &Arc<Self>, io: &Io) -> Result<(), Errno> {
        let deadline = io.deadline();
        loop {
            // The remote lock is taken before the write state's, as
            // `write` does.
            let dead = lock(&self.remote).as_ref().is_none_or(|h| h.conn.is_dead());
            if dead && self.has_pending() {
                // Its connection died with writes unconfirmed: reopen,
                // which sends them again (or gives them up for good).
                if let Err(e) = self.handle(io) {
                    if !self.has_pending() {
                        return Err(lock(&self.wb).error.take().unwrap_or(e));
                    }
                    return Err(e);
                }
                continue;
            }
            let wb = lock(&self.wb);
            if wb.pending.is_empty() {
                let mut wb = wb;
                return wb.error.take().map_or(Ok(()), Err);
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(fh = self.fh, "writes unconfirmed for the whole timeout");
                return Err(Errno::EIO);
            }
            let wait = (deadline - now).min(Duration::from_millis(200));
            drop(
                self.wb_changed
                    .wait_timeout(wb, wait)
                    .unwrap_or_else(PoisonError::into_inner),
            );
        }
    }

    /// Writes still unconfirmed (for getattr, which must not report the
    /// server's size while they are on their way).
    pub fn unconfirmed_end(&self) -> Option<u64> {
        let wb = lock(&self.wb);
        (!wb.pending.is_empty()).then_some(wb.max_end)
    }

    /// Take over writes a previous process logged for this file.
    /// Send again one write a previous server logged (adopted with
    /// `adopt_pending`), reopening the file if needed but sending nothing
    /// else: the caller goes through every file's in sequence order.
    pub fn resend_adopted(self: &Arc<Self>, io: &Io, p: &Pending) -> Result<(), Errno> {
        let mut g = lock(&self.remote);
        let rh = match g.as_ref().filter(|h| !h.conn.is_dead()) {
            Some(h) => h.clone(),
            None => self.reopen_locked(io, &mut g, false)?,
        };
        let log = io.log();
        let data = {
            let wb = lock(&self.wb);
            if !wb.pending.contains_key(&p.seq) {
                return Ok(());
            }
            log.data(p)
        };
        self.send_write(io, &rh, &log, p.clone(), &data);
        Ok(())
    }

    pub fn adopt_pending(&self, p: Pending) {
        let mut wb = lock(&self.wb);
        wb.max_end = wb.max_end.max(p.offset + p.len as u64);
        wb.pending.insert(p.seq, p);
    }

    pub fn has_pending(&self) -> bool {
        !lock(&self.wb).pending.is_empty()
    }

    /// Drop what was read ahead (the file changed).
    pub fn forget_readahead(&self) {
        let mut ra = lock(&self.ra);
        ra.whole = None;
        if !ra.chunks.is_empty() {
            ra.chunks.clear();
            ra.bytes = 0;
        }
        ra.eof = None;
    }

    /// Close the remote handles, without waiting for the answers.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let streams = std::mem::take(&mut lock(&self.streams).slots);
        let handles = lock(&self.remote)
            .take()
            .into_iter()
            .chain(streams.into_iter().filter_map(|s| match s {
                StreamSlot::Open(rh) => Some(rh),
                _ => None,
            }));
        for rh in handles {
            close_handle(&rh);
        }
    }

    /// Where this plan's new READs go: the file's own handle, and while
    /// its readahead outgrows one connection, its handles on the stream
    /// connections too (opening those it lacks, in the background).
    fn targets(self: &Arc<Self>, io: &Io, own: &RemoteHandle, window: u64) -> Vec<RemoteHandle> {
        let mut targets = vec![own.clone()];
        if io.streams.is_empty()
            || window < STREAM_FROM
            || self.writable()
            || self.is_gone()
            || io.log().used() > 0
        {
            return targets;
        }
        let mut s = lock(&self.streams);
        if s.slots.len() < io.streams.len() {
            s.slots.resize_with(io.streams.len(), StreamSlot::default);
        }
        let now = Instant::now();
        for i in 0..s.slots.len() {
            let retry = match &s.slots[i] {
                StreamSlot::Open(rh) if !rh.conn.is_dead() => {
                    targets.push(rh.clone());
                    false
                }
                StreamSlot::Open(_) | StreamSlot::None => true,
                StreamSlot::Failed(after) => now >= *after,
                StreamSlot::Opening => false,
            };
            if retry {
                s.slots[i] = if self.open_stream(io, i) {
                    StreamSlot::Opening
                } else {
                    StreamSlot::Failed(now + STREAM_RETRY)
                };
            }
        }
        targets
    }

    /// Open the file on stream connection `i` in the background (the
    /// connection may need an SSH handshake first); false if no thread
    /// could be started for it. The caller holds `streams`: the thread
    /// takes it only once the caller has marked the slot.
    fn open_stream(self: &Arc<Self>, io: &Io, i: usize) -> bool {
        let client = io.streams[i].clone();
        let me = Arc::downgrade(self);
        let path = self.path();
        let pflags = self.pflags & !(pflags::CREAT | pflags::EXCL | pflags::TRUNC);
        let deadline = io.deadline();
        let spawned = std::thread::Builder::new()
            .name("sftpfs-stream-open".into())
            .spawn(move || {
                let open = Request::Open {
                    path: &path,
                    pflags,
                    attrs: wire::Attrs::default(),
                };
                let got = match client.current(deadline) {
                    Ok((conn, _)) => match client.call_on(&conn, &open, deadline) {
                        Ok(Reply::Handle(h)) => Ok(RemoteHandle {
                            conn,
                            handle: h.into(),
                        }),
                        Ok(Reply::Status { code, .. }) => Err(status_errno(code)),
                        Ok(_) => Err(Errno::EPROTO),
                        Err(CallError::Errno(e)) => Err(e),
                        Err(CallError::Unknown) => Err(Errno::EIO),
                    },
                    Err(e) => Err(e),
                };
                let Some(me) = me.upgrade() else {
                    if let Ok(rh) = &got {
                        close_handle(rh);
                    }
                    return;
                };
                let mut s = lock(&me.streams);
                // Released, or unlinked (the name may be another file's
                // now) while it was being opened: not used.
                if me.closed.load(Ordering::Acquire) || me.is_gone() || i >= s.slots.len() {
                    if let Ok(rh) = &got {
                        close_handle(rh);
                    }
                    return;
                }
                s.slots[i] = match got {
                    Ok(rh) => StreamSlot::Open(rh),
                    Err(e) => {
                        tracing::debug!(fh = me.fh, stream = i, error = %e, "opening a file on a stream connection failed");
                        StreamSlot::Failed(Instant::now() + STREAM_RETRY)
                    }
                };
            });
        spawned.is_ok()
    }

    /// Read `size` bytes at `offset` into `out`.
    pub fn read(
        self: &Arc<Self>,
        io: &Io,
        offset: u64,
        size: u32,
        out: &mut fusebox::protocol::DataOut<'_>,
    ) -> Result<(), Errno> {
        let whole = lock(&self.ra).whole.clone();
        if let Some(d) = whole {
            let from = offset.min(d.len() as u64) as usize;
            let upto = (offset + size as u64).min(d.len() as u64) as usize;
            out.extend_from_slice(&d[from..upto]);
            return Ok(());
        }
        let rh = self.handle(io)?;
        let chunk = rh.conn.info().max_read.max(4096) as u64;
        let end = offset + size as u64;
        let needed = self.plan(io, &rh, offset, end, chunk);
        let deadline = io.deadline();
        let mut pos = offset;
        for c in needed {
            let data = self.wait_chunk(io, &c, deadline)?;
            let Some(data) = data else { break };
            // The part of this chunk the read wants.
            let from = (pos - c.off) as usize;
            if from >= data.len() {
                break;
            }
            let upto = ((end - c.off) as usize).min(data.len());
            out.extend_from_slice(&data[from..upto]);
            pos = c.off + upto as u64;
            let given =
                c.given.fetch_add((upto - from) as u64, Ordering::Relaxed) + (upto - from) as u64;
            if given >= data.len() as u64 {
                let mut ra = lock(&self.ra);
                if ra.chunks.get(&c.off).is_some_and(|k| Arc::ptr_eq(k, &c)) {
                    ra.chunks.remove(&c.off);
                    ra.bytes -= c.len as u64;
                }
            }
            if data.len() < c.len as usize || pos >= end {
                break;
            }
        }
        Ok(())
    }

    /// Decide what to ask for and return the chunks `[offset, end)` needs.
    fn plan(
        self: &Arc<Self>,
        io: &Io,
        rh: &RemoteHandle,
        offset: u64,
        end: u64,
        chunk: u64,
    ) -> Vec<Arc<Chunk>> {
        let mut ra = lock(&self.ra);
        // The kernel splits one read into several READs and sends its
        // readahead beside them; served by several threads, they arrive
        // out of order. One a little behind the furthest is still part of
        // the same sequence (resetting the window there kept a file read
        // through the kernel at a quarter of its speed at 50 ms).
        let reorder = REORDER.max(2 * chunk);
        let sequential = offset == ra.next
            || (ra.next > 0
                && offset + reorder >= ra.next
                && offset <= ra.next + ra.window.max(chunk));
        if sequential {
            ra.streak += end.saturating_sub(offset);
        } else {
            ra.streak = 0;
        }
        ra.window = if !io.readahead || !sequential {
            0
        } else {
            (2 * ra.streak).clamp(2 * chunk, io.window_max.max(2 * chunk))
        };
        ra.next = if sequential { ra.next.max(end) } else { end };
        let hint = self.size_hint.load(Ordering::Relaxed);
        let limit = ra.eof.unwrap_or(u64::MAX);
        // Ahead: up to the window, not past the size last seen (rounded up
        // to a chunk, so a file growing a little is still read ahead).
        let ahead_end = (end + ra.window).min(hint.div_ceil(chunk).max(1) * chunk);
        let want_end = end.max(ahead_end).min(limit.max(end));
        // What lies well behind this read is not read again sequentially
        // (but a READ sent beside this one may still want it).
        let behind = offset.saturating_sub(reorder);
        let old: Vec<u64> = ra
            .chunks
            .range(..behind)
            .filter(|(o, c)| **o + c.len as u64 <= behind)
            .map(|(o, _)| *o)
            .collect();
        for o in old {
            if let Some(c) = ra.chunks.remove(&o) {
                ra.bytes -= c.len as u64;
            }
        }
        let mut needed = Vec::new();
        // Asked for once `ra` is released: a full pipe may block the send,
        // and the reader thread must not need `ra` meanwhile.
        let mut fresh = Vec::new();
        let mut at = offset / chunk * chunk;
        while at < want_end {
            let is_needed = at < end;
            let c = match ra.chunks.get(&at) {
                Some(c) => c.clone(),
                None => {
                    // Read ahead only within the mount's budget.
                    if !is_needed && io.held.load(Ordering::Relaxed) + chunk > io.budget {
                        break;
                    }
                    let c = Arc::new(Chunk {
                        off: at,
                        len: chunk as u32,
                        via: Mutex::default(),
                        given: AtomicU64::new(0),
                        state: Mutex::new(ChunkState::Waiting),
                        ready: Condvar::new(),
                        held: io.held.clone(),
                    });
                    io.held.fetch_add(chunk, Ordering::Relaxed);
                    ra.bytes += chunk;
                    ra.chunks.insert(at, c.clone());
                    fresh.push(c.clone());
                    c
                }
            };
            if is_needed {
                needed.push(c);
            }
            at += chunk;
        }
        // Random reads keep at most a window's worth: drop the lowest.
        let cap = io.window_max.max(4 * chunk);
        while ra.bytes > cap {
            let Some((&o, _)) = ra
                .chunks
                .iter()
                .find(|(o, _)| **o + chunk <= offset || **o >= want_end)
            else {
                break;
            };
            if let Some(c) = ra.chunks.remove(&o) {
                ra.bytes -= c.len as u64;
            }
        }
        let window = ra.window;
        drop(ra);
        if !fresh.is_empty() {
            let targets = self.targets(io, rh, window);
            let mut turn = if targets.len() > 1 {
                lock(&self.streams).turn
            } else {
                0
            };
            for c in &fresh {
                self.request(&targets[turn % targets.len()], c);
                turn = turn.wrapping_add(1);
            }
            if targets.len() > 1 {
                lock(&self.streams).turn = turn % targets.len();
            }
        }
        needed
    }

    fn request(&self, rh: &RemoteHandle, c: &Arc<Chunk>) {
        *lock(&c.via) = Some(rh.conn.clone());
        let target = c.clone();
        rh.conn.call_back(
            &Request::Read {
                handle: &rh.handle,
                offset: c.off,
                len: c.len,
            },
            move |r| {
                target.set(match r {
                    Ok(Reply::Data(d)) => ChunkState::Ready(Arc::new(d)),
                    Ok(Reply::Status { code, .. }) if code == wire::status::EOF => {
                        ChunkState::Ready(Arc::default())
                    }
                    Ok(Reply::Status { code, .. }) => ChunkState::Failed(status_errno(code)),
                    Ok(_) => ChunkState::Failed(Errno::EPROTO),
                    Err(ConnError::Lost(_)) => ChunkState::Lost,
                    Err(ConnError::TimedOut(_)) => ChunkState::Failed(Errno::EIO),
                })
            },
        );
    }

    /// A chunk's data once it came (None: past the end of the file).
    fn wait_chunk(
        self: &Arc<Self>,
        io: &Io,
        c: &Arc<Chunk>,
        deadline: Instant,
    ) -> Result<Option<Arc<Vec<u8>>>, Errno> {
        let mut st = lock(&c.state);
        loop {
            match &*st {
                ChunkState::Ready(d) => {
                    let d = d.clone();
                    drop(st);
                    if d.len() < c.len as usize {
                        let mut ra = lock(&self.ra);
                        let eof = c.off + d.len() as u64;
                        ra.eof = Some(ra.eof.map_or(eof, |e| e.min(eof)));
                    }
                    return Ok((!d.is_empty()).then_some(d));
                }
                ChunkState::Failed(e) => {
                    let e = *e;
                    drop(st);
                    lock(&self.ra).chunks.remove(&c.off);
                    return Err(e);
                }
                ChunkState::Lost => {
                    drop(st);
                    let rh = self.handle(io)?;
                    c.set(ChunkState::Waiting);
                    self.request(&rh, c);
                    st = lock(&c.state);
                    continue;
                }
                ChunkState::Waiting => {}
            }
            let now = Instant::now();
            if now >= deadline {
                // The server stopped answering: as for any request. No
                // lock is held while the connection dies: it runs the
                // callbacks of what was in flight, this chunk's included.
                drop(st);
                let conn = lock(&c.via).clone();
                if let Some(conn) = conn {
                    conn.die(format!("no reply to READ within {:?}", io.client.timeout()));
                }
                lock(&self.ra).chunks.remove(&c.off);
                return Err(Errno::EIO);
            }
            st = c
                .ready
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Close `rh` on its connection without waiting for the answer.
fn close_handle(rh: &RemoteHandle) {
    if !rh.conn.is_dead() {
        rh.conn
            .call_back(&Request::Close { handle: &rh.handle }, |_| {});
    }
}
