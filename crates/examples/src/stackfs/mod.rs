//! StackFS: passthrough of a source directory (Vangoor's Stackfs), the main
//! benchmark subject.
//!
//! Nodes are kernel file handles (name_to_handle_at), not open fds: the
//! daemon serves any number of files with a bounded cache of O_PATH fds,
//! reopening evicted ones with open_by_handle_at where it may (that needs
//! CAP_DAC_READ_SEARCH, as root has), else by the parent and name each was
//! last seen under, checked against its handle ([`Reopen`]): an ordinary
//! user's daemon works the same, under the same fd bound. Open files hold
//! their own fd and pin their node's O_PATH fd, so an unlinked but still
//! open file stays reachable.

pub(crate) mod dir;
mod nodes;
mod proc_fd;

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fusebox::abi::flags::{fopen, init};
use fusebox::descriptors::keep;
use fusebox::fs::ops::*;
use fusebox::protocol::{Connection, DataOut, DirEntries, Notifier};
use fusebox::*;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::host::{
    self, check_access, cstr, errno, kill_suidgid, open_flags, seek_from, timestamps, xattr_into,
};
use crate::sys;
use dir::DirState;
use nodes::NodeTable;
pub use nodes::Reopen;
use proc_fd::ProcFds;

/// Hasher of the node and handle maps. Every request hashes node ids
/// several times; SipHash's resistance to chosen keys buys nothing for ids
/// we hand out and handles the kernel makes, and foldhash is still seeded
/// per process.
type Hasher = foldhash::fast::RandomState;
type FastMap<K, V> = dashmap::DashMap<K, V, Hasher>;

/// What an open handle refers to.
enum Handle {
    /// Shared with the node's pin while open (see `NodeTable::pin_with`).
    File {
        fd: Arc<OwnedFd>,
        node: NodeId,
    },
    Dir {
        state: Mutex<DirState>,
    },
}

/// A file of the source opened for an application's open or create.
struct SourceFile {
    fd: OwnedFd,
    /// Opened exactly as asked because the writeback cache's adjusted flags
    /// were refused: the kernel must not cache it (FOPEN_DIRECT_IO).
    uncached: bool,
}

impl SourceFile {
    fn cached(fd: OwnedFd) -> SourceFile {
        SourceFile {
            fd,
            uncached: false,
        }
    }

    /// Handed to `keep_identified` (see `fusebox::descriptors`) with its
    /// `st`, just read by an fstat of this very descriptor: a file made by
    /// name is not kept yet (one reopened from a node is, by `reopen`).
    fn kept(self, st: &rustix::fs::Stat) -> SourceFile {
        SourceFile {
            fd: fusebox::descriptors::keep_identified(self.fd, st.st_dev, st.st_ino),
            ..self
        }
    }
}

/// Tunables beyond the common [`FsOptions`].
#[derive(Clone, Debug)]
pub struct StackOptions {
    pub fs: FsOptions,
    /// Most O_PATH fds kept open for nodes (the rest are reopened by handle).
    /// The default, [`default_fd_cache`], spends the process's fd limit on
    /// one filesystem: a process serving several, or running its own
    /// application beside them, divides it.
    pub fd_cache: u64,
    /// The source changes only through this mount, so the kernel may cache
    /// names, attributes and negative lookups for a day (timeouts given
    /// with `-o` still win). Without it, libfuse's one second.
    pub exclusive: bool,
    /// How nodes the fd cache let go are opened again.
    pub reopen: Reopen,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            fs: FsOptions::default(),
            fd_cache: default_fd_cache(),
            exclusive: false,
            reopen: Reopen::Auto,
        }
    }
}

/// The node fd cache a daemon can afford: the soft fd limit less a reserve
/// for open files, device clones, rings and sockets (a fifth of the limit,
/// at least 1,024), between 256 and 262,144. Under the 20,000-fd limit of
/// the machines this was measured on: 16,000, where a fixed 8,192 made
/// every stat of a tree of 15,000 files just written miss half the time,
/// each miss a ~4 us reopen by handle inside GETATTR. When the reserve
/// runs out anyway, opens give back cached fds and retry
/// (`NodeTable::shed`).
pub fn default_fd_cache() -> u64 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20);
    limit
        .saturating_sub((limit / 5).max(1024))
        .clamp(256, 262_144)
}

/// How a stackfs of `source` started by this process would reopen nodes
/// with [`Reopen::Auto`]: by handle where it may, else by path.
pub fn auto_reopen(source: &Path) -> std::io::Result<Reopen> {
    let open = |flags| rustix::fs::open(source, flags | OFlags::CLOEXEC, Mode::empty());
    let root = open(OFlags::PATH | OFlags::DIRECTORY)?;
    let root_mount = open(OFlags::RDONLY | OFlags::DIRECTORY)?;
    Ok(if nodes::handles_open(&root, &root_mount) {
        Reopen::ByHandle
    } else {
        Reopen::ByPath
    })
}

pub struct StackFs {
    nodes: NodeTable,
    handles: FastMap<u64, Arc<Handle>>,
    next_handle: AtomicU64,
    proc_fds: ProcFds,
    opts: StackOptions,
    timeouts: Timeouts,
    notifier: OnceLock<Notifier>,
    /// Passthrough was asked for and the kernel agreed.
    passthrough: AtomicBool,
    /// The kernel caches writes (writeback_cache was asked for and agreed).
    writeback: AtomicBool,
}

fn stat_fd(fd: impl AsFd) -> FsResult<rustix::fs::Stat> {
    rustix::fs::statat(fd, c"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

/// `/proc/self/fd/N` names of O_PATH fds: to reopen a node with a real
/// access mode, or reach it with path-only syscalls.
impl StackFs {
    /// ENOSYS makes the kernel stop sending xattr requests (`-o noxattr`).
    fn no_xattr(&self) -> FsResult<()> {
        if self.opts.fs.noxattr {
            Err(Errno::ENOSYS)
        } else {
            Ok(())
        }
    }

    /// Serve `source`. Sets the process umask to 0: the kernel already
    /// applied the caller's umask to every mode we receive.
    pub fn new(source: &Path, opts: StackOptions) -> std::io::Result<StackFs> {
        let root = rustix::fs::open(
            source,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let proc_fds = ProcFds::open()?;
        // Fail early and clearly where file handles cannot work.
        sys::name_to_handle_at(root.as_fd(), c"", libc::AT_EMPTY_PATH).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "{}: the source filesystem does not support file handles: {e}",
                    source.display()
                ),
            )
        })?;
        let root_mount = rustix::fs::open(
            source,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::process::umask(Mode::empty());
        let (root, root_mount) = (keep(root), keep(root_mount));
        let timeouts = opts.fs.timeouts_or(if opts.exclusive {
            Timeouts::DAY
        } else {
            Timeouts::default()
        });
        Ok(StackFs {
            timeouts,
            nodes: NodeTable::new(root, root_mount, opts.fd_cache, opts.reopen),
            handles: FastMap::default(),
            next_handle: AtomicU64::new(1),
            proc_fds,
            opts,
            notifier: OnceLock::new(),
            passthrough: AtomicBool::new(false),
            writeback: AtomicBool::new(false),
        })
    }

    /// Nodes the kernel currently holds references to (the root excluded).
    pub fn known_nodes(&self) -> usize {
        self.nodes.len()
    }

    fn t(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Open a file of the source with `flags` as the application gave them,
    /// adjusted for the writeback cache: the kernel then reads pages around
    /// partial writes through any open file, so write-only opens must be
    /// able to read; and it computes append offsets itself, so O_APPEND
    /// would make the source append a second time at its own end of file.
    /// Where the adjusted open is refused (a write-only file the caller may
    /// not read, an append-only file) the file is opened as asked and kept
    /// out of the page cache (FOPEN_DIRECT_IO), which needs neither.
    /// `open` hands over a descriptor kept already (`reopen`) or the caller
    /// keeps it once it has read its attributes (`SourceFile::kept`).
    fn open_source(
        &self,
        flags: OFlags,
        open: impl Fn(OFlags) -> FsResult<OwnedFd>,
    ) -> FsResult<SourceFile> {
        // Out of fds: the node cache gives some back, and the open is tried
        // once more.
        let open = |f: OFlags| match open(f) {
            Err(Errno::EMFILE | Errno::ENFILE) if self.nodes.shed() > 0 => open(f),
            r => r,
        };
        if !self.writeback.load(Ordering::Relaxed) {
            return Ok(SourceFile::cached(open(flags)?));
        }
        let mut adjusted = flags - OFlags::APPEND;
        if adjusted & OFlags::ACCMODE == OFlags::WRONLY {
            adjusted = (adjusted - OFlags::WRONLY) | OFlags::RDWR;
        }
        match open(adjusted) {
            Err(Errno::EACCES | Errno::EPERM) if adjusted != flags => Ok(SourceFile {
                fd: open(flags)?,
                uncached: true,
            }),
            r => r.map(SourceFile::cached),
        }
    }

    fn attr_reply(&self, st: &rustix::fs::Stat) -> AttrReply {
        AttrReply {
            attr: FileAttr::from(st),
            ttl: self.t().attr,
        }
    }

    fn file(&self, fh: FileHandle) -> FsResult<Arc<Handle>> {
        self.handles
            .get(&fh.0)
            .map(|h| h.clone())
            .ok_or(Errno::EBADF)
    }

    fn file_fd(h: &Handle) -> FsResult<&OwnedFd> {
        match h {
            Handle::File { fd, .. } => Ok(fd.as_ref()),
            Handle::Dir { .. } => Err(Errno::EISDIR),
        }
    }

    /// The open reply for a file of `node` opened as `fd`: with passthrough,
    /// the kernel gets the inode's backing file and does I/O itself.
    fn opened(&self, node: NodeId, fd: &OwnedFd, fh: FileHandle) -> FsResult<Opened> {
        let mut flags = open_flags(&self.opts.fs);
        let mut backing_id = 0;
        if self.passthrough.load(Ordering::Relaxed) {
            let notifier = self.notifier.get().ok_or(Errno::EIO)?;
            let id = self
                .nodes
                .backing(node, || notifier.backing_open(fd.as_fd()))?;
            // Passthrough and direct I/O exclude each other.
            flags =
                (flags & !(fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES)) | fopen::PASSTHROUGH;
            backing_id = id.0;
        }
        Ok(Opened {
            fh,
            flags,
            backing_id,
        })
    }

    /// Pin the node with its opened file (xattr calls and an unlinked
    /// inode need it), keep the file and answer the open; undo the pin on
    /// failure.
    fn finish_open(&self, node: NodeId, fd: SourceFile, open_flags: i32) -> FsResult<Opened> {
        let file = Arc::new(fd.fd);
        self.nodes.pin_with(node, file.clone())?;
        let fh = FileHandle(self.next_handle.fetch_add(1, Ordering::Relaxed));
        match self.opened(node, &file, fh) {
            Ok(mut o) => {
                // O_DIRECT asks for no page cache anyway; FOPEN_DIRECT_IO
                // also spares each read the attribute refresh the cached
                // read path makes (auto_inval_data: a GETATTR per read when
                // attributes are not cached) and allows parallel direct
                // writes, as passthrough_hp does. Not with passthrough,
                // which excludes it.
                let direct = open_flags & libc::O_DIRECT != 0 && o.flags & fopen::PASSTHROUGH == 0;
                if fd.uncached || direct {
                    o.flags |= fopen::DIRECT_IO;
                }
                if direct {
                    o.flags |= fopen::PARALLEL_DIRECT_WRITES;
                }
                self.handles
                    .insert(fh.0, Arc::new(Handle::File { fd: file, node }));
                Ok(o)
            }
            Err(e) => {
                self.release_backing(self.nodes.unpin(node).backing);
                Err(e)
            }
        }
    }

    /// The last open of `node` is closing; keep an fd of it for the node
    /// while the cache has room. The stat or utime that so often follows a
    /// close (cp, tar, make, ls -l) then finds it, where a reopen by handle
    /// inside the synchronous GETATTR cost a third of a stat's rate. A
    /// read-only file simply stays open as the node's fd. A file open for
    /// writing must not (its writer count would make the file unexecutable,
    /// ETXTBSY), so it becomes an O_PATH fd through /proc. The price is on
    /// creates (see DESIGN.md, "stackfs and the 20,000-fd limit").
    fn keep_node_fd(&self, node: NodeId, file: Arc<OwnedFd>) {
        if !self.nodes.wants_fd(node) {
            return;
        }
        let Ok(flags) = rustix::fs::fcntl_getfl(&*file) else {
            return;
        };
        if (flags & OFlags::ACCMODE) == OFlags::RDONLY {
            self.nodes.keep_fd(node, file);
            return;
        }
        let path = OFlags::PATH | OFlags::CLOEXEC;
        if let Ok(fd) = self.proc_fds.at(file.as_fd(), |dir, name| {
            rustix::fs::openat(dir, name, path, Mode::empty())
        }) {
            self.nodes.keep_fd(node, Arc::new(fd));
        }
    }

    /// Close a passthrough backing id that its last open gave back.
    fn release_backing(&self, id: Option<fusebox::protocol::BackingId>) {
        if let (Some(id), Some(n)) = (id, self.notifier.get()) {
            if let Err(e) = n.backing_close(id) {
                tracing::warn!(error = %e, "closing a passthrough backing file");
            }
        }
    }

    fn insert_handle(&self, h: Handle) -> FileHandle {
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles.insert(id, Arc::new(h));
        FileHandle(id)
    }

    /// Look `name` up in `parent` and take a lookup reference.
    fn do_lookup(&self, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        self.lookup_in(parent, &*self.nodes.fd(parent)?, name)
    }

    /// `do_lookup` with the parent's fd at hand.
    fn lookup_in(&self, parent: NodeId, pfd: &OwnedFd, name: &OsStr) -> FsResult<Entry> {
        let c = cstr(name)?;
        let st = rustix::fs::statat(pfd, &c, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
        let handle = sys::name_to_handle_at(pfd.as_fd(), &c, 0).map_err(errno)?;
        let node = self.nodes.register(handle, &st, Some((parent, &c)), || {
            rustix::fs::openat(
                pfd,
                &c,
                // NONBLOCK: the object could be a bind-mounted FIFO, and this
                // open happens under the node table's shard lock.
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(errno)
        })?;
        Ok(Entry::new(node, FileAttr::from(&st), self.t()))
    }

    /// Register the object `fd` refers to (any fd of it, O_PATH included),
    /// identity and attributes taken from the fd itself, and take a lookup
    /// reference. `seen`: the parent and name it was opened by.
    fn register_fd(
        &self,
        fd: &OwnedFd,
        seen: Option<(NodeId, &CStr)>,
    ) -> FsResult<(NodeId, rustix::fs::Stat)> {
        let st = rustix::fs::fstat(fd).map_err(errno)?;
        let handle = sys::name_to_handle_at(fd.as_fd(), c"", libc::AT_EMPTY_PATH).map_err(errno)?;
        let node = self.nodes.register(handle, &st, seen, || {
            self.proc_fds
                .at(fd.as_fd(), |dir, name| {
                    rustix::fs::openat(
                        dir,
                        name,
                        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
                        Mode::empty(),
                    )
                })
                .map_err(errno)
        })?;
        Ok((node, st))
    }

    /// Like `do_lookup`, for an object this daemon has just made in `pfd`
    /// (MKDIR, MKNOD, SYMLINK): its O_PATH fd also goes into the node cache
    /// while there is room, since its next request usually needs one (a
    /// CREATE inside a new directory, the SETATTR of tar or `cp -p`), and
    /// opening it by name now costs less than reopening it by handle then
    /// (see `NodeTable::cache_has_room` for why only while there is room).
    fn lookup_made(&self, parent: NodeId, pfd: &OwnedFd, name: &OsStr) -> FsResult<Entry> {
        if !self.nodes.cache_has_room() {
            return self.lookup_in(parent, pfd, name);
        }
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let c = cstr(name)?;
        let fd = match rustix::fs::openat(pfd, &c, flags, Mode::empty()) {
            Ok(fd) => keep(fd),
            // Near the fd limit: do without the cache rather than fail the
            // call after the object was made.
            Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => {
                return self.lookup_in(parent, pfd, name)
            }
            Err(e) => return Err(errno(e)),
        };
        let (node, st) = self.register_fd(&fd, Some((parent, &c)))?;
        self.nodes.keep_fd(node, Arc::new(fd));
        Ok(Entry::new(node, FileAttr::from(&st), self.t()))
    }

    /// Reopens of nodes the cache did not hold so far, by handle or by path.
    pub fn handle_opens(&self) -> u64 {
        self.nodes.handle_opens()
    }

    /// Whether nodes the cache let go are reopened by path ([`Reopen`]):
    /// this process may not open files from their handles.
    pub fn reopens_by_path(&self) -> bool {
        self.nodes.by_path()
    }

    /// Open `node` with `flags`: through /proc from an fd already held, or
    /// straight from its handle (one syscall, where going through a fresh
    /// O_PATH fd would take two and a cache slot).
    fn reopen(&self, node: NodeId, flags: OFlags) -> FsResult<OwnedFd> {
        match self.nodes.held_fd(node)? {
            Some(fd) => self
                .proc_fds
                .at(fd.as_fd(), |dir, name| {
                    rustix::fs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::empty())
                })
                .map(keep)
                .map_err(errno),
            None => self
                .nodes
                .open_by_handle(node, (flags | OFlags::CLOEXEC).bits() as i32),
        }
    }

    /// Xattr syscalls need a path. Symlinks are refused: Linux allows no
    /// user xattrs on them, and the /proc magic link would reach the target.
    fn with_xattr_path<R>(
        &self,
        node: NodeId,
        f: impl FnOnce(&CString) -> FsResult<R>,
    ) -> FsResult<R> {
        if self.nodes.is_symlink(node) {
            return Err(Errno::EPERM);
        }
        // `fd` stays alive for the call, so the /proc path stays valid even
        // if the cache evicts the node meanwhile.
        let fd = self.nodes.fd(node)?;
        f(&ProcFds::path(fd.as_fd()))
    }
}

impl Filesystem for StackFs {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        // Clear setuid bits on write ourselves: the kernel then marks the
        // superblock SB_NOSEC and asks GETXATTR("security.capability") on the
        // first write after each attribute refresh, not before every write.
        conn.enable(init::HANDLE_KILLPRIV_V2);
        if self.opts.fs.passthrough {
            if conn.enable(init::PASSTHROUGH) {
                // Our backing files live on a plain filesystem: depth 1.
                conn.max_stack_depth = 1;
                self.passthrough.store(true, Ordering::Relaxed);
            } else {
                tracing::warn!(
                    "passthrough requested but the kernel does not offer it (needs Linux 6.9+)"
                );
            }
        }
        // The kernel turns writeback off when passthrough is on.
        let passthrough = self.passthrough.load(Ordering::Relaxed);
        self.writeback.store(
            conn.has(init::WRITEBACK_CACHE) && !passthrough,
            Ordering::Relaxed,
        );
        let _ = self.notifier.set(notifier.clone());
        Ok(())
    }

    fn lookup(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        match self.do_lookup(parent, name) {
            Err(Errno::ENOENT) if !self.t().negative.is_zero() => {
                Ok(Entry::negative(self.t().negative))
            }
            r => r,
        }
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        self.nodes.forget(node, nlookup);
    }

    fn getattr(&self, _: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        if let Some(h) = fh.and_then(|fh| self.file(fh).ok()) {
            if let Handle::File { fd, .. } = &*h {
                return Ok(self.attr_reply(&rustix::fs::fstat(fd).map_err(errno)?));
            }
        }
        Ok(self.attr_reply(&stat_fd(&*self.nodes.fd(node)?)?))
    }

    fn setattr(&self, _: &Ctx, node: NodeId, a: &SetAttr) -> FsResult<AttrReply> {
        let pfd = self.nodes.fd(node)?;
        let open = a.fh.and_then(|fh| self.file(fh).ok());
        let open_fd = open.as_deref().and_then(|h| Self::file_fd(h).ok());
        if let Some(mode) = a.mode {
            let m = Mode::from_raw_mode(mode & 0o7777);
            match open_fd {
                Some(fd) => rustix::fs::fchmod(fd, m),
                None => self.proc_fds.at(pfd.as_fd(), |dir, name| {
                    rustix::fs::chmodat(dir, name, m, AtFlags::empty())
                }),
            }
            .map_err(errno)?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.map(rustix::fs::Uid::from_raw);
            let gid = a.gid.map(rustix::fs::Gid::from_raw);
            rustix::fs::chownat(
                &*pfd,
                c"",
                uid,
                gid,
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(errno)?;
        }
        if let Some(size) = a.size {
            match open_fd {
                Some(fd) => rustix::fs::ftruncate(fd, size).map_err(errno)?,
                None => rustix::fs::ftruncate(self.reopen(node, OFlags::WRONLY)?, size)
                    .map_err(errno)?,
            }
            if a.kill_suidgid {
                kill_suidgid(&self.reopen(node, OFlags::RDONLY)?)?;
            }
        }
        if let Some(ts) = timestamps(a) {
            match open_fd {
                Some(fd) => rustix::fs::futimens(fd, &ts),
                None => self.proc_fds.at(pfd.as_fd(), |dir, name| {
                    rustix::fs::utimensat(dir, name, &ts, AtFlags::empty())
                }),
            }
            .map_err(errno)?;
        }
        Ok(self.attr_reply(&stat_fd(&*pfd)?))
    }

    fn readlink(&self, _: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        let pfd = self.nodes.fd(node)?;
        let target = rustix::fs::readlinkat(&*pfd, c"", Vec::new()).map_err(errno)?;
        out.extend_from_slice(target.as_bytes());
        Ok(())
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        let pfd = self.nodes.fd(parent)?;
        let (c, t) = (cstr(name)?, cstr(target)?);
        sys::as_caller(ctx.uid, ctx.gid, || rustix::fs::symlinkat(&t, &*pfd, &c)).map_err(errno)?;
        self.lookup_made(parent, &pfd, name)
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, a: &Mknod) -> FsResult<Entry> {
        let pfd = self.nodes.fd(parent)?;
        let c = cstr(name)?;
        let kind = rustix::fs::FileType::from_raw_mode(a.mode);
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        sys::as_caller(ctx.uid, ctx.gid, || {
            rustix::fs::mknodat(&*pfd, &c, kind, mode, a.rdev as u64)
        })
        .map_err(errno)?;
        self.lookup_made(parent, &pfd, name)
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, a: &Mkdir) -> FsResult<Entry> {
        let pfd = self.nodes.fd(parent)?;
        let c = cstr(name)?;
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        sys::as_caller(ctx.uid, ctx.gid, || rustix::fs::mkdirat(&*pfd, &c, mode)).map_err(errno)?;
        self.lookup_made(parent, &pfd, name)
    }

    fn unlink(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        rustix::fs::unlinkat(&*self.nodes.fd(parent)?, &cstr(name)?, AtFlags::empty())
            .map_err(errno)
    }

    fn rmdir(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        rustix::fs::unlinkat(&*self.nodes.fd(parent)?, &cstr(name)?, AtFlags::REMOVEDIR)
            .map_err(errno)
    }

    fn rename(&self, _: &Ctx, r: &Rename) -> FsResult<()> {
        let from = self.nodes.fd(r.parent)?;
        let to = self.nodes.fd(r.new_parent)?;
        let flags = rustix::fs::RenameFlags::from_bits(r.flags).ok_or(Errno::EINVAL)?;
        let (name, new_name) = (cstr(r.name)?, cstr(r.new_name)?);
        rustix::fs::renameat_with(&*from, &name, &*to, &new_name, flags).map_err(errno)?;
        self.nodes.renamed(r.new_parent, &to, &new_name);
        if flags.contains(rustix::fs::RenameFlags::EXCHANGE) {
            self.nodes.renamed(r.parent, &from, &name);
        }
        Ok(())
    }

    fn link(&self, _: &Ctx, node: NodeId, new_parent: NodeId, new_name: &OsStr) -> FsResult<Entry> {
        let fd = self.nodes.fd(node)?;
        let pfd = self.nodes.fd(new_parent)?;
        rustix::fs::linkat(&*fd, c"", &*pfd, &cstr(new_name)?, AtFlags::EMPTY_PATH)
            .map_err(errno)?;
        self.do_lookup(new_parent, new_name)
    }

    fn node_key(&self, node: NodeId) -> Option<Vec<u8>> {
        self.nodes.key(node)
    }

    fn restore_node(&self, node: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        self.nodes.restore(node, key, nlookup)
    }

    /// Reopening by path keys nodes by their place, which a rename moves.
    fn track_key_changes(&self, changes: fusebox::recovery::KeyChanges) {
        self.nodes.track_key_changes(changes);
    }

    /// A rename the previous server made before it died: the moved nodes'
    /// places are read from the source, which has the rename whether or
    /// not it was answered.
    fn applied_before_crash(&self, change: &fusebox::recovery::AppliedChange<'_>) {
        let fusebox::recovery::AppliedChange::Renamed(r) = change else {
            return;
        };
        let mut moved = vec![(r.new_parent, r.new_name)];
        if r.flags & libc::RENAME_EXCHANGE != 0 {
            moved.push((r.parent, r.name));
        }
        for (dir, name) in moved {
            if let (Ok(fd), Ok(name)) = (self.nodes.fd(dir), cstr(name)) {
                self.nodes.renamed(dir, &fd, &name);
            }
        }
    }

    /// Reopen by handle with the flags of the original open, less those
    /// that acted once (O_CREAT, O_EXCL, O_TRUNC). An unlinked file cannot
    /// be opened by handle: its open is lost (DESIGN.md, "Recovery").
    fn restore_handle(&self, h: &fusebox::recovery::HandleRecord) -> FsResult<()> {
        self.next_handle.fetch_max(h.fh + 1, Ordering::AcqRel);
        let node = NodeId(h.node);
        if h.dir {
            let fd = self.reopen(node, OFlags::RDONLY | OFlags::DIRECTORY)?;
            self.handles.insert(
                h.fh,
                Arc::new(Handle::Dir {
                    state: Mutex::new(DirState::new(fd)),
                }),
            );
            return Ok(());
        }
        let strip =
            libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY | libc::O_NOFOLLOW;
        let flags = OFlags::from_bits_retain((h.flags as i32 & !strip) as _);
        let fd = self.open_source(flags, |f| self.reopen(node, f))?;
        let file = Arc::new(fd.fd);
        self.nodes.pin_with(node, file.clone())?;
        if h.backing_id != 0 {
            self.nodes
                .restore_backing(node, fusebox::protocol::BackingId(h.backing_id))?;
        }
        self.handles
            .insert(h.fh, Arc::new(Handle::File { fd: file, node }));
        Ok(())
    }

    fn open(&self, _: &Ctx, node: NodeId, a: &Open) -> FsResult<Opened> {
        // O_CREAT/O_EXCL were handled by the kernel; O_NOFOLLOW must not
        // apply to the /proc magic link we open through.
        let strip = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_NOFOLLOW;
        let flags = OFlags::from_bits_retain((a.flags & !strip) as _);
        let fd = self.open_source(flags, |f| self.reopen(node, f))?;
        if a.kill_suidgid && a.flags & libc::O_TRUNC != 0 {
            kill_suidgid(&fd.fd)?;
        }
        self.finish_open(node, fd, a.flags)
    }

    fn read(&self, _: &Ctx, _: NodeId, a: &Read, out: &mut DataOut) -> FsResult<()> {
        let h = self.file(a.fh)?;
        out.pread(Self::file_fd(&h)?.as_fd(), a.offset, a.size as usize)
            .map_err(Errno::from)?;
        Ok(())
    }

    fn write(&self, _: &Ctx, _: NodeId, a: &Write) -> FsResult<u32> {
        let h = self.file(a.fh)?;
        let fd = Self::file_fd(&h)?;
        let n = rustix::io::pwrite(fd, a.data, a.offset).map_err(errno)?;
        if a.kill_suidgid {
            kill_suidgid(fd)?;
        }
        Ok(n as u32)
    }

    fn flush(&self, _: &Ctx, _: NodeId, _: FileHandle, _: u64) -> FsResult<()> {
        // The source is local: there is nothing a close(2) would flush.
        Ok(())
    }

    fn release(&self, _: &Ctx, _: NodeId, a: &Release) -> FsResult<()> {
        if let Some((_, h)) = self.handles.remove(&a.fh.0) {
            if let Handle::File { node, .. } = &*h {
                let last = self.nodes.unpin(*node);
                self.release_backing(last.backing);
                // Kept for the node's next request, unless the node goes.
                if let (Some(file), false) = (last.file, a.forget_follows) {
                    self.keep_node_fd(*node, file);
                }
            }
        }
        Ok(())
    }

    fn fsync(&self, _: &Ctx, _: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let h = self.file(fh)?;
        let fd = Self::file_fd(&h)?;
        if datasync {
            rustix::fs::fdatasync(fd)
        } else {
            rustix::fs::fsync(fd)
        }
        .map_err(errno)
    }

    fn opendir(&self, _: &Ctx, node: NodeId, _: &Open) -> FsResult<Opened> {
        let fd = self.reopen(node, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let fh = self.insert_handle(Handle::Dir {
            state: Mutex::new(DirState::new(fd)),
        });
        Ok(Opened {
            fh,
            flags: 0,
            backing_id: 0,
        })
    }

    fn readdir(&self, _: &Ctx, _: NodeId, a: &Read, out: &mut DirEntries) -> FsResult<()> {
        let h = self.file(a.fh)?;
        let Handle::Dir { state } = &*h else {
            return Err(Errno::ENOTDIR);
        };
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        st.fill(a.offset, |name, ino, kind, next| {
            out.push(ino, next, kind, name)
        })
    }

    fn readdirplus(&self, _: &Ctx, node: NodeId, a: &Read, out: &mut DirEntries) -> FsResult<()> {
        let h = self.file(a.fh)?;
        let Handle::Dir { state } = &*h else {
            return Err(Errno::ENOTDIR);
        };
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        // The open directory is the parent for the lookups: no reopen of
        // the node when the cache let its fd go.
        let dir = st.shared_fd();
        st.fill(a.offset, |name, ino, kind, next| {
            // "." and ".." are not lookups: the kernel takes no reference.
            if name == "." || name == ".." {
                return out.push(ino, next, kind, name);
            }
            if !out.has_room(name) {
                return false;
            }
            match self.lookup_in(node, &dir, name) {
                Ok(e) => {
                    let added = out.push_plus(&e, next, name);
                    if !added {
                        self.nodes.forget(e.node, 1);
                    }
                    added
                }
                // Raced with an unlink: list it without attributes.
                Err(_) => out.push(ino, next, kind, name),
            }
        })
    }

    fn releasedir(&self, _: &Ctx, _: NodeId, a: &Release) -> FsResult<()> {
        self.handles.remove(&a.fh.0);
        Ok(())
    }

    fn fsyncdir(&self, _: &Ctx, _: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let h = self.file(fh)?;
        let Handle::Dir { state } = &*h else {
            return Err(Errno::ENOTDIR);
        };
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        if datasync {
            rustix::fs::fdatasync(st.fd())
        } else {
            rustix::fs::fsync(st.fd())
        }
        .map_err(errno)
    }

    fn statfs(&self, _: &Ctx, node: NodeId) -> FsResult<Statfs> {
        let s = rustix::fs::fstatvfs(&*self.nodes.fd(node)?).map_err(errno)?;
        Ok(host::statfs(&s))
    }

    fn setxattr(&self, _: &Ctx, node: NodeId, a: &Setxattr) -> FsResult<()> {
        self.no_xattr()?;
        let flags = rustix::fs::XattrFlags::from_bits(a.flags as _).ok_or(Errno::EINVAL)?;
        let name = cstr(a.name)?;
        self.with_xattr_path(node, |p| {
            rustix::fs::setxattr(p.as_c_str(), &name, a.value, flags).map_err(errno)
        })
    }

    fn getxattr(&self, _: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        self.no_xattr()?;
        if self.nodes.is_symlink(node) {
            return Err(Errno::ENODATA);
        }
        let name = cstr(name)?;
        // The kernel asks for security.capability before every write, while
        // the file is open: an fd-based call spares a /proc path walk.
        if let Some(file) = self.nodes.open_file(node) {
            return xattr_into(
                out,
                || rustix::fs::fgetxattr_query(&*file, &name),
                |buf| rustix::fs::fgetxattr(&*file, &name, buf),
            );
        }
        self.with_xattr_path(node, |p| {
            xattr_into(
                out,
                || rustix::fs::getxattr_query(p.as_c_str(), &name),
                |buf| rustix::fs::getxattr(p.as_c_str(), &name, buf),
            )
        })
    }

    fn listxattr(&self, _: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        self.no_xattr()?;
        if self.nodes.is_symlink(node) {
            return Ok(());
        }
        self.with_xattr_path(node, |p| {
            xattr_into(
                out,
                || rustix::fs::listxattr_query(p.as_c_str()),
                |buf| rustix::fs::listxattr(p.as_c_str(), buf),
            )
        })
    }

    fn removexattr(&self, _: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        self.no_xattr()?;
        if self.nodes.is_symlink(node) {
            return Err(Errno::ENODATA);
        }
        let name = cstr(name)?;
        self.with_xattr_path(node, |p| {
            rustix::fs::removexattr(p.as_c_str(), &name).map_err(errno)
        })
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        let st = stat_fd(&*self.nodes.fd(node)?)?;
        check_access(&st, ctx.uid, ctx.gid, mask)
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        a: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let pfd = self.nodes.fd(parent)?;
        let c = cstr(name)?;
        let flags = OFlags::from_bits_retain((a.flags & !libc::O_NOCTTY) as _)
            | OFlags::CREATE
            | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        let fd = self.open_source(flags, |f| {
            sys::as_caller(ctx.uid, ctx.gid, || rustix::fs::openat(&*pfd, &c, f, mode))
                .map_err(errno)
        })?;
        // The node is the file just opened, whatever the name holds by now.
        let (node, st) = self.register_fd(&fd.fd, Some((parent, &c)))?;
        let fd = fd.kept(&st);
        // The kernel only learns of the entry if we succeed: on failure give
        // the lookup reference back, or the node leaks.
        match self.finish_open(node, fd, a.flags) {
            Ok(o) => Ok((Entry::new(node, FileAttr::from(&st), self.t()), o)),
            Err(e) => {
                self.nodes.forget(node, 1);
                Err(e)
            }
        }
    }

    /// `create` is an openat with O_CREAT and the caller's flags: an
    /// existing name is opened as open(2) opens it.
    fn create_opens_existing(&self) -> bool {
        true
    }

    fn tmpfile(&self, ctx: &Ctx, parent: NodeId, a: &Create) -> FsResult<(Entry, Opened)> {
        let pfd = self.nodes.fd(parent)?;
        let flags = OFlags::from_bits_retain((a.flags & !(libc::O_CREAT | libc::O_NOCTTY)) as _)
            | OFlags::TMPFILE
            | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        let file = self.open_source(flags, |f| {
            sys::as_caller(ctx.uid, ctx.gid, || {
                rustix::fs::openat(&*pfd, c".", f, mode)
            })
            .map_err(errno)
        })?;
        let (node, st) = self.register_fd(&file.fd, None)?;
        let opened = match self.finish_open(node, file.kept(&st), a.flags) {
            Ok(o) => o,
            Err(e) => {
                self.nodes.forget(node, 1);
                return Err(e);
            }
        };
        Ok((Entry::new(node, FileAttr::from(&st), self.t()), opened))
    }

    fn fallocate(&self, _: &Ctx, _: NodeId, a: &Fallocate) -> FsResult<()> {
        let h = self.file(a.fh)?;
        let flags = rustix::fs::FallocateFlags::from_bits(a.mode as _).ok_or(Errno::EOPNOTSUPP)?;
        rustix::fs::fallocate(Self::file_fd(&h)?, flags, a.offset, a.length).map_err(errno)
    }

    fn lseek(&self, _: &Ctx, _: NodeId, a: &Lseek) -> FsResult<u64> {
        // With the writeback cache, data may still sit in the kernel's dirty
        // pages, and the kernel asks for SEEK_DATA/SEEK_HOLE without writing
        // them back first: the source would report holes where there is
        // data. ENOSYS makes the kernel answer itself, treating the whole
        // file as data, which is always a correct (if coarse) answer.
        if self.writeback.load(Ordering::Relaxed) {
            return Err(Errno::ENOSYS);
        }
        let h = self.file(a.fh)?;
        let from = seek_from(a)?;
        rustix::fs::seek(Self::file_fd(&h)?, from).map_err(errno)
    }

    fn copy_file_range(&self, _: &Ctx, a: &CopyFileRange) -> FsResult<u64> {
        let hin = self.file(a.fh_in)?;
        let hout = self.file(a.fh_out)?;
        host::copy_range(Self::file_fd(&hin)?, Self::file_fd(&hout)?, a)
    }

    fn syncfs(&self, _: &Ctx) -> FsResult<()> {
        rustix::fs::syncfs(&*self.nodes.fd(NodeId::ROOT)?).map_err(errno)
    }
}
