//! The run's processes' side: a `Filesystem` whose every call is a FUSE
//! request to the run's server (see the module above).

use std::ffi::OsStr;
use std::io::{IoSlice, Read as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use fusebox::abi::{self, flags, Opcode};
use fusebox::fs::ops::*;
use fusebox::fs::Filesystem;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::{
    AttrReply, Entry, Errno, FileAttr, FileHandle, FileType, FsResult, NodeId, Opened, Statfs,
    TimeOrNow,
};
use rustix::net::{
    send, sendmsg, socketpair, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketFlags, SocketType,
};
use zerocopy::{FromBytes, IntoBytes};

use super::{opcode, Hello};

/// Message headers, as the kernel lays them out (`fuse_in_header`,
/// `fuse_out_header`): the run's connections speak FUSE's own messages.
const IN_HEADER: usize = std::mem::size_of::<abi::InHeader>();
const OUT_HEADER: usize = std::mem::size_of::<abi::OutHeader>();

/// Connections are moved to descriptors from here up, out of the
/// program's low numbers (the placeholder pool sits at 1008..1024).
const CONNECTION_FDS: i32 = 1100;

/// The most an extended attribute (or the list of them) may hold:
/// XATTR_SIZE_MAX, asked for so the server's size rules never bite.
const XATTR_MAX: u32 = 65_536;

/// Idle connections kept at most: the list never grows past what it was
/// given at the start, so returning one never allocates (see `control`).
const IDLE_MAX: usize = 64;

/// The process's client, for the fork hooks.
static CLIENT: OnceLock<Arc<RemoteFs>> = OnceLock::new();

/// A filesystem served by the run's server, reached through `door`.
pub struct RemoteFs {
    door: OwnedFd,
    conns: Mutex<Connections>,
    unique: AtomicU64,
}

thread_local! {
    /// The slot prepared for a child this thread is about to fork (0:
    /// none). Per thread, since threads may fork at once; the child is a
    /// copy of the forking thread and finds it there. A const initialiser:
    /// nothing allocates on first use (fork time: see `control`).
    static FORKING: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The idle connections of the process that made them.
struct Connections {
    /// The process they belong to: a child sharing this memory (posix_spawn's)
    /// has its own descriptor table and must not use or keep them.
    owner: u32,
    idle: Vec<UnixStream>,
    /// The hello of the process's next new connection.
    next: Hello,
}

impl RemoteFs {
    /// The client of the run's server behind `door`, registered for the
    /// fork hooks (one per process: later calls get their own, unhooked).
    pub fn connect(door: OwnedFd) -> Arc<RemoteFs> {
        let pid = std::process::id();
        let fs = Arc::new(RemoteFs {
            door,
            conns: Mutex::new(Connections {
                owner: pid,
                idle: Vec::with_capacity(IDLE_MAX),
                next: Hello::Fresh { pid },
            }),
            unique: AtomicU64::new(1),
        });
        let _ = CLIENT.set(fs.clone());
        fs
    }

    /// Whether `fd` is one of this process's connections or the door (the
    /// program's close and close_range leave them alone).
    pub fn is_internal(&self, fd: i32) -> bool {
        use std::os::fd::AsRawFd;
        if fd == self.door.as_raw_fd() {
            return true;
        }
        let c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        c.idle.iter().any(|s| s.as_raw_fd() == fd)
    }

    /// A new connection, announced through the door.
    fn open(&self, hello: Hello) -> std::io::Result<UnixStream> {
        let (mine, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        // Out of the program's way where the descriptor limit allows
        // (above 1100); below it, where the kernel put it.
        let mine = rustix::io::fcntl_dupfd_cloexec(&mine, CONNECTION_FDS).unwrap_or(mine);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [theirs.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
        let hello = hello.encode();
        sendmsg(
            &self.door,
            &[IoSlice::new(&hello)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        Ok(UnixStream::from(mine))
    }

    /// A connection for one call: an idle one, or a new one; `true` when
    /// it may go back to the idle ones after.
    fn take(&self, pid: u32) -> std::io::Result<(UnixStream, bool)> {
        let mut c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if c.owner != pid {
            // A child sharing our memory but not our descriptors: a
            // connection of its own for this call, counted with the
            // process whose memory (and so whose table) it uses.
            let owner = c.owner;
            drop(c);
            return Ok((self.open(Hello::More { pid: owner })?, false));
        }
        if let Some(s) = c.idle.pop() {
            return Ok((s, true));
        }
        let hello = c.next;
        if hello == (Hello::More { pid }) {
            drop(c);
            return Ok((self.open(hello)?, true));
        }
        // The process's first connection is announced before any other
        // (the door is one ordered queue): a second thread's must not
        // reach the server first and be counted in a slot the first one's
        // hello then replaces.
        let conn = self.open(hello)?;
        c.next = Hello::More { pid };
        Ok((conn, true))
    }

    fn give_back(&self, conn: UnixStream, pid: u32) {
        let mut c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if c.owner == pid && c.idle.len() < c.idle.capacity() {
            c.idle.push(conn);
        }
    }

    /// One of the run's own requests, made around a fork: glibc's fork
    /// holds the allocator's locks while the system call runs when the
    /// process has ever had threads, so nothing here may allocate or free
    /// (a `call` would deadlock on them). The answer's body is at most 8
    /// bytes.
    fn control(&self, op: u32, body: &[u8]) -> Option<u64> {
        let pid = std::process::id();
        let (mut conn, pooled) = self.take(pid).ok()?;
        let mut msg = [0u8; 64];
        let len = IN_HEADER + body.len();
        let header = abi::InHeader {
            len: len as u32,
            opcode: op,
            unique: self.unique.fetch_add(1, Ordering::Relaxed),
            ..Default::default()
        };
        msg[..IN_HEADER].copy_from_slice(header.as_bytes());
        msg.get_mut(IN_HEADER..len)?.copy_from_slice(body);
        send_all(&conn, &msg[..len]).ok()?;
        let mut out = [0u8; OUT_HEADER + 8];
        conn.read_exact(&mut out[..OUT_HEADER]).ok()?;
        let (h, _) = abi::OutHeader::read_from_prefix(&out[..]).ok()?;
        let end = usize::try_from(h.len)
            .ok()
            .filter(|&l| (OUT_HEADER..=OUT_HEADER + 8).contains(&l))?;
        conn.read_exact(&mut out[OUT_HEADER..end]).ok()?;
        if pooled {
            self.give_back(conn, pid);
        }
        if h.error != 0 {
            return None;
        }
        let mut v = [0u8; 8];
        v[..end - OUT_HEADER].copy_from_slice(&out[OUT_HEADER..end]);
        Some(u64::from_ne_bytes(v))
    }

    /// Send one request and wait for its reply's body. An error reply is
    /// the filesystem's errno; a broken connection (the server gone) EIO.
    fn call(&self, ctx: &Ctx, op: Opcode, node: u64, parts: &[&[u8]]) -> FsResult<Reply> {
        let pid = std::process::id();
        let (mut conn, pooled) = self.take(pid).map_err(broken)?;
        let unique = self.unique.fetch_add(1, Ordering::Relaxed);
        match exchange(&mut conn, ctx, op, node, unique, parts) {
            Ok((err, body)) => {
                if pooled {
                    self.give_back(conn, pid);
                }
                if err == 0 {
                    Ok(Reply(body))
                } else {
                    Err(Errno(-err))
                }
            }
            Err(e) => Err(broken(e)),
        }
    }

    /// A forked child: the connections are its parent's (closed here, not
    /// used), and its first new one takes the slot the parent prepared.
    fn forked_child(&self) {
        let pid = std::process::id();
        let slot = FORKING.with(|f| f.replace(0));
        let mut c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        c.owner = pid;
        c.next = if slot != 0 {
            Hello::Forked { pid, slot }
        } else {
            // No slot prepared (the server was unreachable): start anew.
            Hello::Fresh { pid }
        };
        // The parent's, closed raw (this child's calls are hooked again,
        // and the hook refuses to close an internal descriptor) and
        // without freeing the list (the allocator is locked: `control`).
        for s in c.idle.drain(..) {
            use std::os::fd::IntoRawFd;
            crate::sud::raw_syscall(libc::SYS_close, [s.into_raw_fd() as u64, 0, 0, 0, 0, 0]);
        }
    }
}

/// The server gone (or the connection broken): the call fails with EIO,
/// and the program's stderr says why once per process.
fn broken(e: std::io::Error) -> Errno {
    static SAID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id();
    if SAID.swap(pid, Ordering::Relaxed) != pid {
        eprintln!("fusebox direct mode: the run's filesystem server is unreachable ({e}): calls on the mount fail with EIO");
    }
    Errno::EIO
}

/// A successful reply as it arrived: its body past the out header, read
/// in place (a READ's data is not moved to drop the header).
struct Reply(Vec<u8>);

impl std::ops::Deref for Reply {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[OUT_HEADER..]
    }
}

/// Write one request, read its reply: (error, the reply with its header).
fn exchange(
    conn: &mut UnixStream,
    ctx: &Ctx,
    op: Opcode,
    node: u64,
    unique: u64,
    parts: &[&[u8]],
) -> std::io::Result<(i32, Vec<u8>)> {
    let len = IN_HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
    let header = abi::InHeader {
        len: len as u32,
        opcode: op.0,
        unique,
        nodeid: node,
        uid: ctx.uid,
        gid: ctx.gid,
        pid: ctx.pid,
        total_extlen: 0,
        // The CPU this thread runs on (plus one), which the server's
        // thread moves to: a reply on the same CPU costs a fraction of one
        // across CPUs (DESIGN.md).
        padding: (rustix::thread::sched_getcpu() + 1) as u16,
    };
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(header.as_bytes());
    for p in parts {
        msg.extend_from_slice(p);
    }
    send_all(conn, &msg)?;
    // Most replies arrive whole: one read takes the header and the body.
    let mut got = vec![0u8; 4096];
    let mut have = 0;
    while have < OUT_HEADER {
        match conn.read(&mut got[have..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => have += n,
            // A signal handler ran (one without SA_RESTART): the request
            // is already being served, so its answer is still ours.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (out, _) = abi::OutHeader::read_from_prefix(&got[..]).map_err(|_| bad_reply())?;
    let len = out.len as usize;
    if out.unique != unique || len < OUT_HEADER || have > len {
        return Err(bad_reply());
    }
    got.resize(len, 0);
    conn.read_exact(&mut got[have..len])?;
    Ok((out.error, got))
}

/// All of `buf`, without SIGPIPE: a server gone must give the program EIO,
/// not kill it (a C program keeps SIGPIPE's default).
fn send_all(conn: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match send(conn, buf, SendFlags::NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn bad_reply() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed reply")
}

/// The run's client, if `fs` is it: an O_APPEND write then goes to the
/// server whole, which appends it atomically among the run's processes.
pub(crate) fn appender(fs: &Arc<dyn Filesystem>) -> Option<&'static RemoteFs> {
    let c = CLIENT.get()?;
    (Arc::as_ptr(fs) as *const () == Arc::as_ptr(c) as *const ()).then_some(&**c)
}

impl RemoteFs {
    /// Write `data` (a piece within the server's request limit) at the
    /// file's end as the server finds it: (offset written at, bytes
    /// written).
    pub(crate) fn append(
        &self,
        ctx: &Ctx,
        node: NodeId,
        fh: FileHandle,
        flags: i32,
        data: &[u8],
    ) -> FsResult<(u64, u32)> {
        let a = abi::WriteIn {
            fh: fh.0,
            offset: 0,
            size: data.len() as u32,
            write_flags: 0,
            lock_owner: 0,
            flags: flags as u32,
            padding: 0,
        };
        let b = self.call(ctx, Opcode(opcode::APPEND), node.0, &[a.as_bytes(), data])?;
        let n = fixed::<abi::WriteOut>(&b)?.size;
        let at = b.get(8..16).ok_or(Errno::EIO)?;
        Ok((
            u64::from_ne_bytes(at.try_into().map_err(|_| Errno::EIO)?),
            n,
        ))
    }
}

/// Before a fork (the parent): ask the server for the child's slot.
pub(crate) fn before_fork() {
    if let Some(fs) = CLIENT.get() {
        let slot = fs.control(opcode::FORK_PREPARE, &[]).unwrap_or(0);
        FORKING.with(|f| f.set(slot));
    }
}

/// After a fork, in the parent: the child's process id (or the failure).
pub(crate) fn after_fork_parent(ret: i64) {
    if let Some(fs) = CLIENT.get() {
        let slot = FORKING.with(|f| f.replace(0));
        if slot != 0 {
            let pid = u32::try_from(ret).unwrap_or(0);
            let mut body = [0u8; 12];
            body[..8].copy_from_slice(&slot.to_ne_bytes());
            body[8..].copy_from_slice(&pid.to_ne_bytes());
            let _ = fs.control(opcode::FORK_DONE, &body);
        }
    }
}

/// After a fork, in the child.
pub(crate) fn after_fork_child() {
    if let Some(fs) = CLIENT.get() {
        fs.forked_child();
    }
}

/// Whether `fd` is internal to the run's client in this process.
pub(crate) fn is_internal(fd: i32) -> bool {
    CLIENT.get().is_some_and(|fs| fs.is_internal(fd))
}

/// The door and this process's idle connections.
pub(crate) fn internal_fds() -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let Some(fs) = CLIENT.get() else {
        return Vec::new();
    };
    // Copied out under the lock without allocating: another thread may be
    // forking, with the allocator's locks held (see `control`).
    let mut fds = [0u32; IDLE_MAX];
    let n = {
        let c = fs.conns.lock().unwrap_or_else(PoisonError::into_inner);
        for (slot, s) in fds.iter_mut().zip(&c.idle) {
            *slot = s.as_raw_fd() as u32;
        }
        c.idle.len().min(IDLE_MAX)
    };
    std::iter::once(fs.door.as_raw_fd() as u32)
        .chain(fds[..n].iter().copied())
        .collect()
}

fn name(n: &OsStr) -> Vec<u8> {
    let mut v = Vec::with_capacity(n.len() + 1);
    v.extend_from_slice(n.as_bytes());
    v.push(0);
    v
}

fn fixed<T: FromBytes>(b: &[u8]) -> FsResult<T> {
    T::read_from_prefix(b).map(|(v, _)| v).map_err(|_| {
        tracing::error!("direct mode: a reply from the run's server is too short");
        Errno::EIO
    })
}

fn opened_from(o: &abi::OpenOut) -> Opened {
    Opened {
        fh: FileHandle(o.fh),
        flags: o.open_flags,
        backing_id: 0,
    }
}

impl RemoteFs {
    fn entry(&self, ctx: &Ctx, op: Opcode, node: NodeId, parts: &[&[u8]]) -> FsResult<Entry> {
        let b = self.call(ctx, op, node.0, parts)?;
        Ok(Entry::from_abi(&fixed::<abi::EntryOut>(&b)?))
    }

    fn attr(&self, ctx: &Ctx, op: Opcode, node: NodeId, parts: &[&[u8]]) -> FsResult<AttrReply> {
        let b = self.call(ctx, op, node.0, parts)?;
        let a = fixed::<abi::AttrOut>(&b)?;
        Ok(AttrReply {
            attr: FileAttr::from(&a.attr),
            ttl: Duration::new(a.attr_valid, a.attr_valid_nsec),
        })
    }

    fn done(&self, ctx: &Ctx, op: Opcode, node: NodeId, parts: &[&[u8]]) -> FsResult<()> {
        self.call(ctx, op, node.0, parts).map(|_| ())
    }

    /// A request nothing answers (FORGET, the quiet releases): written,
    /// not waited for; the server reads the connection's next request at
    /// once.
    fn send_only(&self, op: Opcode, node: NodeId, args: &[u8]) {
        let pid = std::process::id();
        let Ok((conn, pooled)) = self.take(pid) else {
            return;
        };
        let header = abi::InHeader {
            len: (IN_HEADER + args.len()) as u32,
            opcode: op.0,
            unique: self.unique.fetch_add(1, Ordering::Relaxed),
            nodeid: node.0,
            padding: (rustix::thread::sched_getcpu() + 1) as u16,
            ..Default::default()
        };
        let msg = [header.as_bytes(), args].concat();
        if send_all(&conn, &msg).is_ok() && pooled {
            self.give_back(conn, pid);
        }
    }

    fn release_op(&self, op: Opcode, node: NodeId, r: &Release) {
        let mut release_flags = 0;
        if r.flush {
            release_flags |= flags::release::FLUSH;
        }
        if r.flock_unlock {
            release_flags |= flags::release::FLOCK_UNLOCK;
        }
        let a = abi::ReleaseIn {
            fh: r.fh.0,
            flags: r.flags as u32,
            release_flags,
            lock_owner: r.lock_owner,
        };
        self.send_only(op, node, a.as_bytes());
    }

    fn fsync_op(
        &self,
        ctx: &Ctx,
        op: Opcode,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        let a = abi::FsyncIn {
            fh: fh.0,
            fsync_flags: if datasync { flags::FSYNC_FDATASYNC } else { 0 },
            padding: 0,
        };
        self.done(ctx, op, node, &[a.as_bytes()])
    }
}

fn read_in(r: &Read) -> abi::ReadIn {
    abi::ReadIn {
        fh: r.fh.0,
        offset: r.offset,
        size: r.size,
        read_flags: if r.lock_owner.is_some() {
            flags::READ_LOCKOWNER
        } else {
            0
        },
        lock_owner: r.lock_owner.unwrap_or(0),
        flags: r.flags as u32,
        padding: 0,
    }
}

impl Filesystem for RemoteFs {
    /// The run's instance's, from its server (none if it cannot say).
    fn counters(&self) -> Vec<fusebox::stats::FsCounter> {
        self.call(&Ctx::internal(), Opcode(opcode::COUNTERS), 0, &[])
            .ok()
            .and_then(|r| serde_json::from_slice(&r).ok())
            .unwrap_or_default()
    }

    /// Dropped in the run's server, where the instance's cache is.
    fn drop_cached_data(&self, node: NodeId) {
        let _ = self.call(
            &Ctx::internal(),
            Opcode(opcode::DROP_CACHED_DATA),
            node.0,
            &[],
        );
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, n: &OsStr) -> FsResult<Entry> {
        self.entry(ctx, Opcode::LOOKUP, parent, &[&name(n)])
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        let a = abi::ForgetIn { nlookup };
        self.send_only(Opcode::FORGET, node, a.as_bytes());
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        let a = abi::GetattrIn {
            getattr_flags: if fh.is_some() { flags::GETATTR_FH } else { 0 },
            dummy: 0,
            fh: fh.map_or(0, |f| f.0),
        };
        self.attr(ctx, Opcode::GETATTR, node, &[a.as_bytes()])
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, s: &SetAttr) -> FsResult<AttrReply> {
        use flags::fattr::*;
        let mut a = abi::SetattrIn::default();
        let mut valid = 0;
        if let Some(fh) = s.fh {
            valid |= FH;
            a.fh = fh.0;
        }
        if let Some(m) = s.mode {
            valid |= MODE;
            a.mode = m;
        }
        if let Some(u) = s.uid {
            valid |= UID;
            a.uid = u;
        }
        if let Some(g) = s.gid {
            valid |= GID;
            a.gid = g;
        }
        if let Some(sz) = s.size {
            valid |= SIZE;
            a.size = sz;
        }
        match s.atime {
            Some(TimeOrNow::Now) => valid |= ATIME | ATIME_NOW,
            Some(TimeOrNow::Specific(t)) => {
                valid |= ATIME;
                a.atime = t.sec as u64;
                a.atimensec = t.nsec;
            }
            None => {}
        }
        match s.mtime {
            Some(TimeOrNow::Now) => valid |= MTIME | MTIME_NOW,
            Some(TimeOrNow::Specific(t)) => {
                valid |= MTIME;
                a.mtime = t.sec as u64;
                a.mtimensec = t.nsec;
            }
            None => {}
        }
        if let Some(t) = s.ctime {
            valid |= CTIME;
            a.ctime = t.sec as u64;
            a.ctimensec = t.nsec;
        }
        if let Some(o) = s.lock_owner {
            valid |= LOCKOWNER;
            a.lock_owner = o;
        }
        if s.kill_suidgid {
            valid |= KILL_SUIDGID;
        }
        a.valid = valid;
        self.attr(ctx, Opcode::SETATTR, node, &[a.as_bytes()])
    }

    fn readlink(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        let b = self.call(ctx, Opcode::READLINK, node.0, &[])?;
        out.extend_from_slice(&b);
        Ok(())
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, n: &OsStr, target: &OsStr) -> FsResult<Entry> {
        self.entry(ctx, Opcode::SYMLINK, parent, &[&name(n), &name(target)])
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, n: &OsStr, m: &Mknod) -> FsResult<Entry> {
        let a = abi::MknodIn {
            mode: m.mode,
            rdev: m.rdev,
            umask: m.umask,
            padding: 0,
        };
        self.entry(ctx, Opcode::MKNOD, parent, &[a.as_bytes(), &name(n)])
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, n: &OsStr, m: &Mkdir) -> FsResult<Entry> {
        let a = abi::MkdirIn {
            mode: m.mode,
            umask: m.umask,
        };
        self.entry(ctx, Opcode::MKDIR, parent, &[a.as_bytes(), &name(n)])
    }

    fn unlink(&self, ctx: &Ctx, parent: NodeId, n: &OsStr) -> FsResult<()> {
        self.done(ctx, Opcode::UNLINK, parent, &[&name(n)])
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, n: &OsStr) -> FsResult<()> {
        self.done(ctx, Opcode::RMDIR, parent, &[&name(n)])
    }

    fn rename(&self, ctx: &Ctx, r: &Rename) -> FsResult<()> {
        let a = abi::Rename2In {
            newdir: r.new_parent.0,
            flags: r.flags,
            padding: 0,
        };
        self.done(
            ctx,
            Opcode::RENAME2,
            r.parent,
            &[a.as_bytes(), &name(r.name), &name(r.new_name)],
        )
    }

    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let a = abi::LinkIn { oldnodeid: node.0 };
        self.entry(
            ctx,
            Opcode::LINK,
            new_parent,
            &[a.as_bytes(), &name(new_name)],
        )
    }

    fn open(&self, ctx: &Ctx, node: NodeId, o: &Open) -> FsResult<Opened> {
        let a = abi::OpenIn {
            flags: o.flags as u32,
            open_flags: if o.kill_suidgid {
                flags::open_in::KILL_SUIDGID
            } else {
                0
            },
        };
        let b = self.call(ctx, Opcode::OPEN, node.0, &[a.as_bytes()])?;
        Ok(opened_from(&fixed(&b)?))
    }

    fn read(&self, ctx: &Ctx, node: NodeId, r: &Read, out: &mut DataOut) -> FsResult<()> {
        let b = self.call(ctx, Opcode::READ, node.0, &[read_in(r).as_bytes()])?;
        out.extend_from_slice(&b);
        Ok(())
    }

    fn write(&self, ctx: &Ctx, node: NodeId, w: &Write) -> FsResult<u32> {
        let mut write_flags = 0;
        if w.lock_owner.is_some() {
            write_flags |= flags::write::LOCKOWNER;
        }
        if w.kill_suidgid {
            write_flags |= flags::write::KILL_SUIDGID;
        }
        let a = abi::WriteIn {
            fh: w.fh.0,
            offset: w.offset,
            size: w.data.len() as u32,
            write_flags,
            lock_owner: w.lock_owner.unwrap_or(0),
            flags: w.flags as u32,
            padding: 0,
        };
        let b = self.call(ctx, Opcode::WRITE, node.0, &[a.as_bytes(), w.data])?;
        Ok(fixed::<abi::WriteOut>(&b)?.size)
    }

    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        let a = abi::FlushIn {
            fh: fh.0,
            unused: 0,
            padding: 0,
            lock_owner,
        };
        self.done(ctx, Opcode::FLUSH, node, &[a.as_bytes()])
    }

    /// Not waited for (nor is its answer: it has none).
    fn release(&self, _ctx: &Ctx, node: NodeId, r: &Release) -> FsResult<()> {
        self.release_op(Opcode(opcode::RELEASE_QUIET), node, r);
        Ok(())
    }

    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.fsync_op(ctx, Opcode::FSYNC, node, fh, datasync)
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, o: &Open) -> FsResult<Opened> {
        let a = abi::OpenIn {
            flags: o.flags as u32,
            open_flags: 0,
        };
        let b = self.call(ctx, Opcode::OPENDIR, node.0, &[a.as_bytes()])?;
        Ok(opened_from(&fixed(&b)?))
    }

    fn readdir(&self, ctx: &Ctx, node: NodeId, r: &Read, out: &mut DirEntries) -> FsResult<()> {
        let size = r.size.min(out.remaining() as u32);
        let a = abi::ReadIn { size, ..read_in(r) };
        let b = self.call(ctx, Opcode::READDIR, node.0, &[a.as_bytes()])?;
        let mut raw = &b[..];
        while let Ok((d, rest)) = abi::Dirent::read_from_prefix(raw) {
            let Some(n) = rest.get(..d.namelen as usize) else {
                break;
            };
            let kind = FileType::from_mode(d.typ << 12).unwrap_or(FileType::RegularFile);
            if !out.push(d.ino, d.off, kind, OsStr::from_bytes(n)) {
                break;
            }
            let step = (24 + d.namelen as usize).next_multiple_of(8);
            raw = raw.get(step..).unwrap_or_default();
        }
        Ok(())
    }

    fn releasedir(&self, _ctx: &Ctx, node: NodeId, r: &Release) -> FsResult<()> {
        self.release_op(Opcode(opcode::RELEASEDIR_QUIET), node, r);
        Ok(())
    }

    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.fsync_op(ctx, Opcode::FSYNCDIR, node, fh, datasync)
    }

    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        let b = self.call(ctx, Opcode::STATFS, node.0, &[])?;
        Ok(Statfs::from(&fixed::<abi::StatfsOut>(&b)?.st))
    }

    fn setxattr(&self, ctx: &Ctx, node: NodeId, s: &Setxattr) -> FsResult<()> {
        // The compat layout (size, flags): the server parses without
        // setxattr_ext, as for a kernel that did not negotiate it.
        let a = abi::GetxattrIn {
            size: s.value.len() as u32,
            padding: s.flags as u32,
        };
        self.done(
            ctx,
            Opcode::SETXATTR,
            node,
            &[a.as_bytes(), &name(s.name), s.value],
        )
    }

    fn getxattr(&self, ctx: &Ctx, node: NodeId, n: &OsStr, out: &mut DataOut) -> FsResult<()> {
        let a = abi::GetxattrIn {
            size: XATTR_MAX,
            padding: 0,
        };
        let b = self.call(ctx, Opcode::GETXATTR, node.0, &[a.as_bytes(), &name(n)])?;
        out.extend_from_slice(&b);
        Ok(())
    }

    fn listxattr(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        let a = abi::GetxattrIn {
            size: XATTR_MAX,
            padding: 0,
        };
        let b = self.call(ctx, Opcode::LISTXATTR, node.0, &[a.as_bytes()])?;
        out.extend_from_slice(&b);
        Ok(())
    }

    fn removexattr(&self, ctx: &Ctx, node: NodeId, n: &OsStr) -> FsResult<()> {
        self.done(ctx, Opcode::REMOVEXATTR, node, &[&name(n)])
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        let a = abi::AccessIn {
            mask: mask as u32,
            padding: 0,
        };
        self.done(ctx, Opcode::ACCESS, node, &[a.as_bytes()])
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        n: &OsStr,
        c: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let a = abi::CreateIn {
            flags: c.flags as u32,
            mode: c.mode,
            umask: c.umask,
            open_flags: if c.kill_suidgid {
                flags::open_in::KILL_SUIDGID
            } else {
                0
            },
        };
        let b = self.call(ctx, Opcode::CREATE, parent.0, &[a.as_bytes(), &name(n)])?;
        let e = fixed::<abi::EntryOut>(&b)?;
        let o = fixed::<abi::OpenOut>(
            b.get(std::mem::size_of::<abi::EntryOut>()..)
                .unwrap_or_default(),
        )?;
        Ok((Entry::from_abi(&e), opened_from(&o)))
    }

    fn fallocate(&self, ctx: &Ctx, node: NodeId, f: &Fallocate) -> FsResult<()> {
        let a = abi::FallocateIn {
            fh: f.fh.0,
            offset: f.offset,
            length: f.length,
            mode: f.mode as u32,
            padding: 0,
        };
        self.done(ctx, Opcode::FALLOCATE, node, &[a.as_bytes()])
    }

    fn lseek(&self, ctx: &Ctx, node: NodeId, l: &Lseek) -> FsResult<u64> {
        let a = abi::LseekIn {
            fh: l.fh.0,
            offset: l.offset,
            whence: l.whence as u32,
            padding: 0,
        };
        let b = self.call(ctx, Opcode::LSEEK, node.0, &[a.as_bytes()])?;
        Ok(fixed::<abi::LseekOut>(&b)?.offset)
    }
}
