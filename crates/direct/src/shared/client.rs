//! The run's processes' side: a `Filesystem` whose every call is a FUSE
//! request to the run's server (see the module above).

use std::ffi::OsStr;
use std::io::{IoSlice, Read as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use fusebox::abi::{self, Opcode};
use fusebox::fs::ops::*;
use fusebox::fs::Filesystem;
use fusebox::protocol::encode::{encode_request, Extension, RequestHead};
use fusebox::protocol::{dir_records, DataOut, DirEntries, Op, ParseConfig};
use fusebox::{
    AttrReply, Entry, Errno, FileAttr, FileHandle, FileType, FsResult, NodeId, Opened, Statfs,
};
use rustix::net::{
    send, sendmsg, socketpair, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketFlags, SocketType,
};
use zerocopy::{FromBytes, IntoBytes};

use super::{extension, opcode, Hello};

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
        let header = self
            .head(&Ctx::internal(), NodeId(0))
            .own_header(Opcode(op), body.len())
            .ok()?;
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

    /// A new request's header fields, for `ctx`'s caller.
    fn head(&self, ctx: &Ctx, node: NodeId) -> RequestHead {
        RequestHead {
            unique: self.unique.fetch_add(1, Ordering::Relaxed),
            node,
            uid: ctx.uid,
            gid: ctx.gid,
            pid: ctx.pid,
        }
    }

    /// `op` as a request of this caller's, with the run's extensions:
    /// the CPU this thread runs on, which the server's thread moves to (a
    /// reply on the same CPU costs a fraction of one across CPUs:
    /// DESIGN.md), and `more`.
    fn request(
        &self,
        ctx: &Ctx,
        node: NodeId,
        op: &Op<'_>,
        more: &[Extension<'_>],
    ) -> FsResult<Vec<u8>> {
        let head = self.head(ctx, node);
        let cpu = (rustix::thread::sched_getcpu() as u64).to_ne_bytes();
        let mut extensions = [Extension {
            typ: extension::CPU,
            data: &cpu,
        }; 2];
        let n = 1 + more.len().min(1);
        extensions[1..n].copy_from_slice(&more[..n - 1]);
        let mut msg = Vec::new();
        encode_request(
            &head,
            op,
            ParseConfig::default(),
            &extensions[..n],
            &mut msg,
        )
        .map_err(|e| {
            tracing::error!(error = %e, "direct mode: a request cannot be sent");
            Errno::EIO
        })?;
        Ok(msg)
    }

    /// Send one request and wait for its reply's body. An error reply is
    /// the filesystem's errno; a broken connection (the server gone) EIO.
    fn call(
        &self,
        ctx: &Ctx,
        node: NodeId,
        op: &Op<'_>,
        more: &[Extension<'_>],
    ) -> FsResult<Reply> {
        let msg = self.request(ctx, node, op, more)?;
        self.exchange_message(&msg)
    }

    /// One of the run's own requests (outside FUSE's opcodes), with no
    /// arguments, answered like a FUSE one.
    fn own_call(&self, op: u32, node: NodeId) -> FsResult<Reply> {
        let header = self
            .head(&Ctx::internal(), node)
            .own_header(Opcode(op), 0)
            .map_err(|_| Errno::EIO)?;
        self.exchange_message(header.as_bytes())
    }

    fn exchange_message(&self, msg: &[u8]) -> FsResult<Reply> {
        let pid = std::process::id();
        let (mut conn, pooled) = self.take(pid).map_err(broken)?;
        match exchange(&mut conn, msg) {
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
fn exchange(conn: &mut UnixStream, msg: &[u8]) -> std::io::Result<(i32, Vec<u8>)> {
    let unique = abi::InHeader::read_from_prefix(msg)
        .map_err(|_| bad_reply())?
        .0
        .unique;
    send_all(conn, msg)?;
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
        let w = Write {
            fh,
            offset: 0,
            data,
            flags,
            lock_owner: None,
            from_cache: false,
            kill_suidgid: false,
        };
        let append = Extension {
            typ: extension::APPEND,
            data: &[],
        };
        let b = self.call(ctx, node, &Op::Write(w), &[append])?;
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
    fn entry(&self, ctx: &Ctx, node: NodeId, op: &Op<'_>) -> FsResult<Entry> {
        let b = self.call(ctx, node, op, &[])?;
        Ok(Entry::from_abi(&fixed::<abi::EntryOut>(&b)?))
    }

    fn attr(&self, ctx: &Ctx, node: NodeId, op: &Op<'_>) -> FsResult<AttrReply> {
        let b = self.call(ctx, node, op, &[])?;
        let a = fixed::<abi::AttrOut>(&b)?;
        Ok(AttrReply {
            attr: FileAttr::from(&a.attr),
            ttl: Duration::new(a.attr_valid, a.attr_valid_nsec),
        })
    }

    fn done(&self, ctx: &Ctx, node: NodeId, op: &Op<'_>) -> FsResult<()> {
        self.call(ctx, node, op, &[]).map(|_| ())
    }

    fn data(&self, ctx: &Ctx, node: NodeId, op: &Op<'_>, out: &mut DataOut) -> FsResult<()> {
        let b = self.call(ctx, node, op, &[])?;
        out.extend_from_slice(&b);
        Ok(())
    }

    fn opened(&self, ctx: &Ctx, node: NodeId, op: &Op<'_>) -> FsResult<Opened> {
        let b = self.call(ctx, node, op, &[])?;
        Ok(opened_from(&fixed(&b)?))
    }

    /// A request nothing answers (FORGET; RELEASE and RELEASEDIR, which
    /// the run's server never answers): written, not waited for; the
    /// server reads the connection's next request at once.
    fn send_only(&self, node: NodeId, op: &Op<'_>) {
        let Ok(msg) = self.request(&Ctx::internal(), node, op, &[]) else {
            return;
        };
        let pid = std::process::id();
        let Ok((conn, pooled)) = self.take(pid) else {
            return;
        };
        if send_all(&conn, &msg).is_ok() && pooled {
            self.give_back(conn, pid);
        }
    }
}

impl Filesystem for RemoteFs {
    /// The run's instance's, from its server (none if it cannot say).
    fn counters(&self) -> Vec<fusebox::stats::FsCounter> {
        self.own_call(opcode::COUNTERS, NodeId(0))
            .ok()
            .and_then(|r| serde_json::from_slice(&r).ok())
            .unwrap_or_default()
    }

    /// Dropped in the run's server, where the instance's cache is.
    fn drop_cached_data(&self, node: NodeId) {
        let _ = self.own_call(opcode::DROP_CACHED_DATA, node);
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        self.entry(ctx, parent, &Op::Lookup { name })
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        self.send_only(node, &Op::Forget { nlookup });
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        self.attr(ctx, node, &Op::Getattr { fh })
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, s: &SetAttr) -> FsResult<AttrReply> {
        self.attr(ctx, node, &Op::Setattr(*s))
    }

    fn readlink(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        self.data(ctx, node, &Op::Readlink, out)
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        self.entry(ctx, parent, &Op::Symlink { name, target })
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, m: &Mknod) -> FsResult<Entry> {
        self.entry(ctx, parent, &Op::Mknod { name, args: *m })
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, m: &Mkdir) -> FsResult<Entry> {
        self.entry(ctx, parent, &Op::Mkdir { name, args: *m })
    }

    fn unlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.done(ctx, parent, &Op::Unlink { name })
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.done(ctx, parent, &Op::Rmdir { name })
    }

    fn rename(&self, ctx: &Ctx, r: &Rename) -> FsResult<()> {
        self.done(ctx, r.parent, &Op::Rename(*r))
    }

    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let op = Op::Link {
            target: node,
            new_name,
        };
        self.entry(ctx, new_parent, &op)
    }

    fn open(&self, ctx: &Ctx, node: NodeId, o: &Open) -> FsResult<Opened> {
        self.opened(ctx, node, &Op::Open(*o))
    }

    fn read(&self, ctx: &Ctx, node: NodeId, r: &Read, out: &mut DataOut) -> FsResult<()> {
        self.data(ctx, node, &Op::Read(*r), out)
    }

    fn write(&self, ctx: &Ctx, node: NodeId, w: &Write) -> FsResult<u32> {
        let b = self.call(ctx, node, &Op::Write(*w), &[])?;
        Ok(fixed::<abi::WriteOut>(&b)?.size)
    }

    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        self.done(ctx, node, &Op::Flush { fh, lock_owner })
    }

    /// Not waited for (nor is its answer: it has none).
    fn release(&self, _ctx: &Ctx, node: NodeId, r: &Release) -> FsResult<()> {
        self.send_only(node, &Op::Release(*r));
        Ok(())
    }

    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.done(ctx, node, &Op::Fsync { fh, datasync })
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, o: &Open) -> FsResult<Opened> {
        let o = Open {
            kill_suidgid: false,
            ..*o
        };
        self.opened(ctx, node, &Op::Opendir(o))
    }

    fn readdir(&self, ctx: &Ctx, node: NodeId, r: &Read, out: &mut DirEntries) -> FsResult<()> {
        let size = r.size.min(out.remaining() as u32);
        let b = self.call(ctx, node, &Op::Readdir(Read { size, ..*r }), &[])?;
        for d in dir_records(&b, false) {
            let kind = FileType::from_mode(d.typ << 12).unwrap_or(FileType::RegularFile);
            if !out.push(d.ino, d.next_offset, kind, d.name) {
                break;
            }
        }
        Ok(())
    }

    /// Not waited for, as `release`.
    fn releasedir(&self, _ctx: &Ctx, node: NodeId, r: &Release) -> FsResult<()> {
        self.send_only(node, &Op::Releasedir(*r));
        Ok(())
    }

    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.done(ctx, node, &Op::Fsyncdir { fh, datasync })
    }

    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        let b = self.call(ctx, node, &Op::Statfs, &[])?;
        Ok(Statfs::from(&fixed::<abi::StatfsOut>(&b)?.st))
    }

    fn setxattr(&self, ctx: &Ctx, node: NodeId, s: &Setxattr) -> FsResult<()> {
        self.done(ctx, node, &Op::Setxattr(*s))
    }

    fn getxattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        let op = Op::Getxattr {
            name,
            size: XATTR_MAX,
        };
        self.data(ctx, node, &op, out)
    }

    fn listxattr(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        self.data(ctx, node, &Op::Listxattr { size: XATTR_MAX }, out)
    }

    fn removexattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        self.done(ctx, node, &Op::Removexattr { name })
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        self.done(ctx, node, &Op::Access { mask })
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        c: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let b = self.call(ctx, parent, &Op::Create { name, args: *c }, &[])?;
        let e = fixed::<abi::EntryOut>(&b)?;
        let o = fixed::<abi::OpenOut>(
            b.get(std::mem::size_of::<abi::EntryOut>()..)
                .unwrap_or_default(),
        )?;
        Ok((Entry::from_abi(&e), opened_from(&o)))
    }

    fn fallocate(&self, ctx: &Ctx, node: NodeId, f: &Fallocate) -> FsResult<()> {
        self.done(ctx, node, &Op::Fallocate(*f))
    }

    fn lseek(&self, ctx: &Ctx, node: NodeId, l: &Lseek) -> FsResult<u64> {
        let b = self.call(ctx, node, &Op::Lseek(*l), &[])?;
        Ok(fixed::<abi::LseekOut>(&b)?.offset)
    }
}
