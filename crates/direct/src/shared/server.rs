//! The run's server: one filesystem instance, the run's processes'
//! connections, and the per-process books that turn many holders into the
//! one FORGET or RELEASE a filesystem expects (see the module above).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::{IoSliceMut, Read as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, PoisonError};

use fusebox::abi::{self, Opcode};
use fusebox::dispatch::{Dispatcher, Worker};
use fusebox::fs::ops::{Ctx, Release};
use fusebox::fs::Filesystem;
use fusebox::protocol::encode::{encode_request, extensions, RequestHead};
use fusebox::protocol::opcodes::{facts, References};
use fusebox::protocol::ops::Write;
use fusebox::protocol::references::{Change, ReferenceBook};
use fusebox::protocol::{
    parse_contiguous, parse_header, send_error, send_reply, Body, DataOut, Notifier, Op,
    ParseConfig, ReplySink,
};
use fusebox::stats::WorkerStats;
use fusebox::{Errno, FileHandle, NodeId};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use rustix::thread::CpuSet;
use zerocopy::FromBytes;

use super::{extension, opcode, Hello, READY};

/// Message headers, as the kernel lays them out (`fuse_in_header`,
/// `fuse_out_header`).
const IN_HEADER: usize = std::mem::size_of::<abi::InHeader>();
const OUT_HEADER: usize = std::mem::size_of::<abi::OutHeader>();

/// The largest request a client sends: a write of 1 MiB with its headers.
pub(crate) const MAX_REQUEST: usize = (1 << 20) + 4096;

/// What a WRITE adds to its data at most: `fuse_in_header`,
/// `fuse_write_in` and the run's extension records (CPU: 16 bytes,
/// APPEND: 8).
pub(crate) const REQUEST_OVERHEAD: usize =
    size_of::<abi::InHeader>() + size_of::<abi::WriteIn>() + 16 + 8;

/// Tell the launcher waiting on the door's other end that this server
/// cannot serve, and why.
pub fn refuse(door: &OwnedFd, why: &str) {
    let _ = rustix::net::send(door, why.as_bytes(), rustix::net::SendFlags::NOSIGNAL);
}

/// Serve `fs` to the run's processes through `door` until every process
/// holding the door's other end has closed it (the run is over), then
/// destroy it. Tells the launcher it is ready first.
pub fn serve<F: Filesystem>(fs: Arc<F>, door: OwnedFd) -> std::io::Result<()> {
    rustix::net::send(&door, READY, rustix::net::SendFlags::NOSIGNAL)?;
    let server = Arc::new(Server {
        fs,
        books: Mutex::new(Books::default()),
        appending: Mutex::new(HashMap::new()),
    });
    loop {
        let mut hello = [0u8; Hello::LEN + 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = match recvmsg(
            &door,
            &mut [IoSliceMut::new(&mut hello)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if got.bytes == 0 {
            break;
        }
        let mut conn: Option<OwnedFd> = None;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                for fd in fds {
                    conn.get_or_insert(fd);
                }
            }
        }
        let (Some(conn), Some(hello)) = (conn, Hello::decode(&hello[..got.bytes])) else {
            tracing::warn!("direct-mode server: a malformed hello on the door, ignored");
            continue;
        };
        let slot = server.admit(hello);
        let s = server.clone();
        let spawned = std::thread::Builder::new()
            .name("fusebox-direct-conn".into())
            .spawn(move || s.connection(UnixStream::from(conn), slot));
        if let Err(e) = spawned {
            // That connection's process gets EIO; the others go on.
            tracing::warn!(error = %e, "direct-mode server: cannot serve a new connection");
        }
    }
    server.fs.destroy();
    Ok(())
}

struct Server<F> {
    fs: Arc<F>,
    books: Mutex<Books>,
    /// One lock per node being appended to: finding the end and writing
    /// there is one step for the run's processes.
    appending: Mutex<HashMap<u64, Arc<Mutex<()>>>>,
}

/// Who holds what: per slot (a process), and in total.
#[derive(Default)]
struct Books {
    next_slot: u64,
    slots: HashMap<u64, Slot>,
    by_pid: HashMap<u32, u64>,
    watched: HashSet<u32>,
    nodes: HashMap<u64, NodeRefs>,
    handles: HashMap<(u64, bool), HandleRefs>,
}

#[derive(Default, Clone)]
struct Slot {
    pid: Option<u32>,
    nodes: HashMap<u64, u64>,
    /// (handle, is a directory) -> opens held.
    handles: HashMap<(u64, bool), u64>,
}

/// A node's references: those the filesystem gave (lookups it answered,
/// not yet forgotten) and those the processes hold (more after a fork).
struct NodeRefs {
    fs: u64,
    held: u64,
}

struct HandleRefs {
    node: u64,
    holders: u64,
}

/// What a slot let go of that its filesystem must hear of.
#[derive(Default)]
struct Released {
    handles: Vec<(u64, bool, u64)>,
    forgets: Vec<(u64, u64)>,
}

impl Books {
    fn new_slot(&mut self, pid: Option<u32>) -> u64 {
        self.next_slot += 1;
        let id = self.next_slot;
        self.slots.insert(
            id,
            Slot {
                pid,
                ..Slot::default()
            },
        );
        if let Some(pid) = pid {
            self.by_pid.insert(pid, id);
        }
        id
    }

    /// `false`: the slot is gone (its process exited meanwhile), so the
    /// reference must be given back at once.
    fn took_node(&mut self, slot: u64, node: u64) -> bool {
        let Some(s) = self.slots.get_mut(&slot) else {
            return false;
        };
        *s.nodes.entry(node).or_default() += 1;
        let n = self
            .nodes
            .entry(node)
            .or_insert(NodeRefs { fs: 0, held: 0 });
        n.fs += 1;
        n.held += 1;
        true
    }

    /// How many references to forget now (the last holder let go).
    fn gave_node(&mut self, slot: u64, node: u64, count: u64) -> Option<u64> {
        let s = self.slots.get_mut(&slot)?;
        let mine = s.nodes.get_mut(&node)?;
        let k = count.min(*mine);
        *mine -= k;
        if *mine == 0 {
            s.nodes.remove(&node);
        }
        self.drop_node_refs(node, k)
    }

    fn drop_node_refs(&mut self, node: u64, k: u64) -> Option<u64> {
        let n = self.nodes.get_mut(&node)?;
        n.held = n.held.saturating_sub(k);
        if n.held == 0 {
            return self.nodes.remove(&node).map(|n| n.fs);
        }
        None
    }

    fn opened(&mut self, slot: u64, fh: u64, dir: bool, node: u64) -> bool {
        let Some(s) = self.slots.get_mut(&slot) else {
            return false;
        };
        *s.handles.entry((fh, dir)).or_default() += 1;
        self.handles
            .entry((fh, dir))
            .or_insert(HandleRefs { node, holders: 0 })
            .holders += 1;
        true
    }

    /// Whether this release is the handle's last (the filesystem hears of
    /// it). Only a hold the slot has counts: a release from a slot already
    /// given back (its process exited or executed another program while
    /// the release was on its way) was counted then, and one for a handle
    /// the books never saw goes through.
    fn closing(&mut self, slot: u64, fh: u64, dir: bool) -> bool {
        let key = (fh, dir);
        let Some(s) = self.slots.get_mut(&slot) else {
            return false;
        };
        match s.handles.get_mut(&key) {
            Some(mine) => {
                *mine -= 1;
                if *mine == 0 {
                    s.handles.remove(&key);
                }
            }
            None => return !self.handles.contains_key(&key),
        }
        match self.handles.get_mut(&key) {
            Some(h) if h.holders > 1 => {
                h.holders -= 1;
                false
            }
            Some(_) => {
                self.handles.remove(&key);
                true
            }
            None => true,
        }
    }

    /// A child's slot: everything `parent` holds, held twice from now on.
    fn fork_copy(&mut self, parent: u64) -> u64 {
        let copy = self.slots.get(&parent).cloned().unwrap_or_default();
        for (node, c) in &copy.nodes {
            if let Some(n) = self.nodes.get_mut(node) {
                n.held += c;
            }
        }
        for (key, c) in &copy.handles {
            if let Some(h) = self.handles.get_mut(key) {
                h.holders += c;
            }
        }
        self.next_slot += 1;
        let id = self.next_slot;
        self.slots.insert(id, Slot { pid: None, ..copy });
        id
    }

    fn drop_slot(&mut self, slot: u64) -> Released {
        let mut out = Released::default();
        let Some(s) = self.slots.remove(&slot) else {
            return out;
        };
        if let Some(pid) = s.pid {
            if self.by_pid.get(&pid) == Some(&slot) {
                self.by_pid.remove(&pid);
            }
        }
        for (key, c) in s.handles {
            if let Some(h) = self.handles.get_mut(&key) {
                h.holders = h.holders.saturating_sub(c);
                if h.holders == 0 {
                    let node = h.node;
                    self.handles.remove(&key);
                    out.handles.push((key.0, key.1, node));
                }
            }
        }
        for (node, c) in s.nodes {
            if let Some(k) = self.drop_node_refs(node, c) {
                out.forgets.push((node, k));
            }
        }
        out
    }

    /// Give `slot` (a fork's copy) to process `pid`, unless that process
    /// has a slot of its own already (it executed a program since, whose
    /// first hello made one): then the copy is not its.
    fn bind(&mut self, slot: u64, pid: u32) -> bool {
        if self.by_pid.get(&pid).is_some_and(|&other| other != slot) {
            return false;
        }
        match self.slots.get_mut(&slot) {
            Some(s) if s.pid.is_none() || s.pid == Some(pid) => {
                s.pid = Some(pid);
                self.by_pid.insert(pid, slot);
                true
            }
            _ => false,
        }
    }
}

/// Collects the one reply the dispatcher sends for a request.
#[derive(Default)]
struct Capture(RefCell<Vec<u8>>);

impl ReplySink for Capture {
    fn send(&self, parts: &[&[u8]]) -> std::io::Result<()> {
        let mut b = self.0.borrow_mut();
        for p in parts {
            b.extend_from_slice(p);
        }
        Ok(())
    }
}

/// Notifications have nowhere to go: there is no kernel cache to tell.
struct NoKernel;

impl ReplySink for NoKernel {
    fn send(&self, _: &[&[u8]]) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(libc::ENOTCONN))
    }
}

impl Capture {
    /// An answer of the server's own in place of the dispatcher's, put
    /// on the wire as the dispatcher's are.
    fn set(&self, unique: u64, answer: Result<&[u8], Errno>) {
        self.0.borrow_mut().clear();
        // Capture's send cannot fail.
        let _ = match answer {
            Ok(body) => send_reply(self, unique, Ok(Body::data(body))),
            Err(e) => send_error(self, unique, e),
        };
    }
}

impl<F: Filesystem> Server<F> {
    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot a new connection's requests count in.
    fn admit(self: &Arc<Self>, hello: Hello) -> u64 {
        let (slot, pid, released) = {
            let mut b = self.books();
            match hello {
                Hello::Fresh { pid } => {
                    // A new program in this process: what the old one held
                    // goes back.
                    let released = match b.by_pid.get(&pid).copied() {
                        Some(old) => b.drop_slot(old),
                        None => Released::default(),
                    };
                    (b.new_slot(Some(pid)), pid, released)
                }
                Hello::More { pid } => match b.by_pid.get(&pid).copied() {
                    Some(s) => (s, pid, Released::default()),
                    None => (b.new_slot(Some(pid)), pid, Released::default()),
                },
                Hello::Forked { pid, slot } => {
                    if b.bind(slot, pid) {
                        (slot, pid, Released::default())
                    } else {
                        (b.new_slot(Some(pid)), pid, Released::default())
                    }
                }
            }
        };
        self.give_back(released);
        self.watch(pid);
        slot
    }

    /// Give `pid`'s slot back when the process exits.
    fn watch(self: &Arc<Self>, pid: u32) {
        if !self.books().watched.insert(pid) {
            return;
        }
        let gone = {
            let s = self.clone();
            move || {
                let released = {
                    let mut b = s.books();
                    b.watched.remove(&pid);
                    match b.by_pid.get(&pid).copied() {
                        Some(slot) => b.drop_slot(slot),
                        None => Released::default(),
                    }
                };
                s.give_back(released);
            }
        };
        let pidfd = Pid::from_raw(pid as i32)
            .ok_or(rustix::io::Errno::SRCH)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()));
        match pidfd {
            Err(rustix::io::Errno::SRCH) => gone(),
            Err(e) => {
                // Not known to be gone (out of descriptors?): what it holds
                // stays until the run ends rather than be taken too early.
                self.books().watched.remove(&pid);
                tracing::warn!(pid, error = %e, "direct-mode server: cannot watch a process");
            }
            Ok(fd) => {
                let spawned = std::thread::Builder::new()
                    .name("fusebox-direct-pid".into())
                    .spawn(move || {
                        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                        while let Err(rustix::io::Errno::INTR) = poll(&mut fds, None) {}
                        gone();
                    });
                if let Err(e) = spawned {
                    tracing::warn!(pid, error = %e, "direct-mode server: cannot watch a process");
                }
            }
        }
    }

    fn give_back(&self, r: Released) {
        let ctx = Ctx::internal();
        for (fh, dir, node) in r.handles {
            let release = Release {
                fh: FileHandle(fh),
                flags: 0,
                flush: false,
                flock_unlock: false,
                lock_owner: 0,
                forget_follows: false,
            };
            let _ = if dir {
                self.fs.releasedir(&ctx, NodeId(node), &release)
            } else {
                self.fs.release(&ctx, NodeId(node), &release)
            };
        }
        for (node, n) in r.forgets {
            self.fs.forget(NodeId(node), n);
        }
    }

    fn forget(&self, slot: u64, node: u64, n: u64) {
        let last = self.books().gave_node(slot, node, n);
        if let Some(k) = last {
            self.fs.forget(NodeId(node), k);
        }
    }

    /// Serve one connection until its process closes it.
    fn connection(self: Arc<Self>, mut conn: UnixStream, slot: u64) {
        let dispatcher = Dispatcher::new(
            self.fs.clone(),
            ParseConfig::default(),
            Notifier::for_sink(Arc::new(NoKernel)),
            1,
        )
        .with_reference_book(Arc::new(SlotBook {
            server: self.clone(),
            slot,
        }));
        let mut worker = Worker::new(
            DataOut::with_capacity(MAX_REQUEST),
            Arc::new(WorkerStats::new("direct-server")),
            0,
        );
        let capture = Capture::default();
        let mut buf = Vec::with_capacity(MAX_REQUEST);
        let mut on_cpu = None;
        loop {
            buf.resize(IN_HEADER, 0);
            if conn.read_exact(&mut buf).is_err() {
                return;
            }
            let Ok(h) = parse_header(&buf) else {
                return;
            };
            let len = h.len as usize;
            if !(IN_HEADER..=MAX_REQUEST).contains(&len) {
                tracing::warn!(
                    len,
                    "direct-mode server: a request of impossible length; connection closed"
                );
                return;
            }
            buf.resize(len, 0);
            if conn.read_exact(&mut buf[IN_HEADER..]).is_err() {
                return;
            }
            let mut append = false;
            for e in extensions(&buf) {
                match e.typ {
                    extension::CPU => {
                        let cpu = e.data.try_into().map(u64::from_ne_bytes).ok();
                        if cpu != on_cpu {
                            // Serve on the caller's CPU: the reply then
                            // wakes it there.
                            on_cpu = cpu;
                            if let Some(cpu) = cpu.filter(|&c| c < CpuSet::MAX_CPU as u64) {
                                let mut cpus = CpuSet::new();
                                cpus.set(cpu as usize);
                                let _ = rustix::thread::sched_setaffinity(None, &cpus);
                            }
                        }
                    }
                    extension::APPEND => append = true,
                    _ => {}
                }
            }
            let args = &buf[IN_HEADER..];
            match h.opcode {
                opcode::FORK_PREPARE => {
                    let child = self.books().fork_copy(slot);
                    capture.set(h.unique, Ok(&child.to_ne_bytes()));
                }
                opcode::FORK_DONE => {
                    if let (Some(s), Some(p)) = (args.get(..8), args.get(8..12)) {
                        let child = u64::from_ne_bytes(s.try_into().unwrap_or_default());
                        let pid = u32::from_ne_bytes(p.try_into().unwrap_or_default());
                        self.fork_done(child, pid);
                    }
                    capture.set(h.unique, Ok(&[]));
                }
                opcode::DROP_CACHED_DATA => {
                    self.fs.drop_cached_data(NodeId(h.nodeid));
                    capture.set(h.unique, Ok(&[]));
                }
                opcode::COUNTERS => {
                    let json = serde_json::to_vec(&self.fs.counters()).unwrap_or_default();
                    capture.set(h.unique, Ok(&json));
                }
                // What a request takes back is the opcode table's word and
                // its arguments the parser's, as for the recovery ledger;
                // neither is answered.
                op => match facts(Opcode(op)).references {
                    References::Forget | References::BatchForget => {
                        match parse_contiguous(&buf, ParseConfig::default()) {
                            Ok(req) => {
                                if let Some(n) = req.op.forget_count() {
                                    self.forget(slot, h.nodeid, n);
                                }
                                for (node, n) in req.op.forgotten().iter().flat_map(|l| l.iter()) {
                                    self.forget(slot, node.0, n);
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "direct-mode server: a malformed forget")
                            }
                        }
                        continue;
                    }
                    r @ (References::Release | References::ReleaseDir) => {
                        let fh = parse_contiguous(&buf, ParseConfig::default())
                            .ok()
                            .and_then(|req| req.op.released());
                        let dir = r == References::ReleaseDir;
                        // Only the last holder's release reaches the
                        // filesystem.
                        if fh.is_some_and(|fh| self.books().closing(slot, fh.0, dir)) {
                            self.dispatch(&dispatcher, &mut worker, &capture, &buf);
                        }
                        continue;
                    }
                    _ if append => self.append(&dispatcher, &mut worker, &capture, &buf),
                    _ => self.dispatch(&dispatcher, &mut worker, &capture, &buf),
                },
            }
            if conn.write_all(&capture.0.borrow()).is_err() {
                return;
            }
        }
    }

    fn fork_done(self: &Arc<Self>, child: u64, pid: u32) {
        let released = {
            let mut b = self.books();
            let unclaimed = b.slots.get(&child).is_some_and(|s| s.pid.is_none());
            // A failed fork (nobody has the copy), or a child that has a
            // newer slot already: the copy goes back.
            if unclaimed && (pid == 0 || !b.bind(child, pid)) {
                b.drop_slot(child)
            } else {
                Released::default()
            }
        };
        self.give_back(released);
        if pid != 0 {
            self.watch(pid);
        }
    }

    /// A WRITE with the APPEND extension: the node's size, then the WRITE
    /// there, under the node's append lock; the answer carries the offset.
    fn append(
        &self,
        dispatcher: &Dispatcher<F>,
        worker: &mut Worker,
        capture: &Capture,
        request: &[u8],
    ) {
        let Ok(req) = parse_contiguous(request, ParseConfig::default()) else {
            return self.dispatch(dispatcher, worker, capture, request);
        };
        let (head, unique) = (
            RequestHead {
                unique: req.unique(),
                node: req.node(),
                uid: req.header.uid,
                gid: req.header.gid,
                pid: req.header.pid,
            },
            req.unique(),
        );
        let Op::Write(w) = req.op else {
            return capture.set(unique, Err(Errno::EINVAL));
        };
        let node = head.node;
        let lock = {
            let mut a = self
                .appending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            a.entry(node.0).or_default().clone()
        };
        {
            let _one_at_a_time = lock.lock().unwrap_or_else(PoisonError::into_inner);
            let ctx = Ctx::internal();
            match self.fs.getattr(&ctx, node, Some(w.fh)) {
                Err(e) => capture.set(unique, Err(e)),
                Ok(a) => {
                    let at = a.attr.size;
                    let write = Op::Write(Write { offset: at, ..w });
                    let mut at_end = Vec::with_capacity(request.len());
                    match encode_request(&head, &write, ParseConfig::default(), &[], &mut at_end) {
                        Err(_) => capture.set(unique, Err(Errno::EIO)),
                        Ok(()) => {
                            self.dispatch(dispatcher, worker, capture, &at_end);
                            let mut out = capture.0.borrow_mut();
                            if abi::OutHeader::read_from_prefix(&out[..])
                                .is_ok_and(|(o, _)| o.error == 0)
                            {
                                out.extend_from_slice(&at.to_ne_bytes());
                                let len = out.len() as u32;
                                out[..4].copy_from_slice(&len.to_ne_bytes());
                            }
                        }
                    }
                }
            }
        }
        // Forget the lock once nobody else waits on it.
        let mut a = self
            .appending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&lock) == 2 {
            a.remove(&node.0);
        }
    }

    /// Answer one request with the dispatcher (which tells the
    /// connection's [`SlotBook`] what the answer hands the process).
    fn dispatch(
        &self,
        dispatcher: &Dispatcher<F>,
        worker: &mut Worker,
        capture: &Capture,
        request: &[u8],
    ) {
        capture.0.borrow_mut().clear();
        dispatcher.dispatch_contiguous(request, worker, capture);
        if capture.0.borrow().len() < OUT_HEADER {
            // No answer came (it should have): the caller must not wait.
            if let Ok((h, _)) = abi::InHeader::read_from_prefix(request) {
                capture.set(h.unique, Err(Errno::EIO));
            }
        }
    }

    /// `slot` took one more reference to `node`, or gives it back at once
    /// if the slot is gone (its process exited while the answer was made).
    fn took_node(&self, slot: u64, node: u64) {
        if !self.books().took_node(slot, node) {
            self.fs.forget(NodeId(node), 1);
        }
    }

    /// `slot` opened `fh` on `node`; released at once if the slot is gone.
    fn opened(&self, slot: u64, fh: u64, dir: bool, node: u64) {
        if !self.books().opened(slot, fh, dir, node) {
            self.give_back(Released {
                handles: vec![(fh, dir, node)],
                forgets: Vec::new(),
            });
        }
    }
}

/// One connection's account of what answers hand its process, as the
/// dispatcher reports it (the recovery ledger is told the same way).
/// Forgets and releases are not counted here: the connection counts them
/// before the filesystem hears of them, and passes on only a last one.
struct SlotBook<F> {
    server: Arc<Server<F>>,
    slot: u64,
}

impl<F: Filesystem> ReferenceBook for SlotBook<F> {
    fn change(&self, change: Change) {
        match change {
            Change::LookedUp { node } => self.server.took_node(self.slot, node.0),
            Change::Opened { fh, node, dir, .. } => {
                self.server.opened(self.slot, fh.0, dir, node.0)
            }
            Change::Forgot { .. } | Change::Released { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Books;

    #[test]
    fn the_filesystem_hears_a_forget_when_the_last_holder_lets_go() {
        let mut b = Books::default();
        let a = b.new_slot(Some(10));
        assert!(b.took_node(a, 5));
        assert!(b.took_node(a, 5));
        assert_eq!(b.gave_node(a, 5, 1), None);
        // Both references the filesystem gave, forgotten at once.
        assert_eq!(b.gave_node(a, 5, 1), Some(2));
        // A forget of more than the slot holds (or of what it never
        // held) gives nothing back twice.
        assert!(b.took_node(a, 6));
        assert_eq!(b.gave_node(a, 6, 9), Some(1));
        assert_eq!(b.gave_node(a, 6, 1), None);
        assert!(b.nodes.is_empty());
    }

    #[test]
    fn a_forked_child_holds_what_its_parent_held_until_both_let_go() {
        let mut b = Books::default();
        let parent = b.new_slot(Some(10));
        assert!(b.took_node(parent, 5));
        assert!(b.opened(parent, 7, false, 5));
        assert!(b.opened(parent, 8, true, 1));
        let child = b.fork_copy(parent);
        assert!(b.bind(child, 11));
        // The parent closes and forgets: the child still holds them.
        assert!(!b.closing(parent, 7, false));
        assert_eq!(b.gave_node(parent, 5, 1), None);
        // The child exits: what it held goes back, once.
        let r = b.drop_slot(child);
        // The directory handle stays: the parent holds it still.
        assert_eq!(r.handles, vec![(7, false, 5)]);
        assert_eq!(r.forgets, vec![(5, 1)]);
        assert!(b.closing(parent, 8, true));
        assert!(b.handles.is_empty() && b.nodes.is_empty());
        assert_eq!(b.by_pid.get(&11), None);
    }

    #[test]
    fn a_slot_gone_takes_nothing_more() {
        let mut b = Books::default();
        let a = b.new_slot(Some(10));
        let _ = b.drop_slot(a);
        assert!(!b.took_node(a, 5));
        assert!(!b.opened(a, 7, false, 5));
        assert!(b.nodes.is_empty() && b.handles.is_empty());
    }

    #[test]
    fn a_release_late_from_a_slot_given_back_takes_nothing_from_the_others() {
        let mut b = Books::default();
        let parent = b.new_slot(Some(10));
        assert!(b.took_node(parent, 5));
        assert!(b.opened(parent, 7, false, 5));
        let child = b.fork_copy(parent);
        assert!(b.bind(child, 11));
        // The child exited with its release still unread: the watcher gave
        // its hold back; the release that follows counts for nothing.
        let r = b.drop_slot(child);
        assert!(r.handles.is_empty() && r.forgets.is_empty());
        assert!(!b.closing(child, 7, false));
        // The parent's close is the last.
        assert!(b.closing(parent, 7, false));
        // A handle the books never saw goes through; one another slot
        // holds does not.
        assert!(b.closing(parent, 99, false));
        let other = b.new_slot(Some(12));
        assert!(b.opened(other, 8, false, 5));
        assert!(!b.closing(parent, 8, false));
        assert!(b.closing(other, 8, false));
    }

    #[test]
    fn a_forks_copy_is_not_bound_over_the_childs_newer_slot() {
        let mut b = Books::default();
        let parent = b.new_slot(Some(10));
        let copy = b.fork_copy(parent);
        // The child executed a program before the parent reported it.
        let newer = b.new_slot(Some(11));
        assert!(!b.bind(copy, 11));
        assert_eq!(b.by_pid.get(&11), Some(&newer));
    }
}
