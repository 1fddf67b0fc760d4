//! The path-level filesystem API, like libfuse's high-level `fuse_operations`,
//! and [`PathAdapter`], which serves it through the inode-level [`Filesystem`].
//!
//! The adapter hands the kernel node ids of its own. A node remembers only its
//! parent and its name; a path is derived by walking up to the root. Renaming
//! a directory therefore touches one node, however large the subtree below it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::inode::Filesystem;
use super::ops::*;
use crate::error::{Errno, FsResult};
use crate::protocol::{Connection, DataOut, DirEntries, Notifier};
use crate::types::*;

/// A filesystem addressed by paths, like libfuse's `fuse_operations`. Serve
/// it with [`PathAdapter`].
///
/// Paths are absolute within the filesystem; the root is `/`. Defaults are
/// ENOSYS, which the kernel treats as "not supported" (for `open`/`opendir`
/// it then opens without asking, with handle 0), except for bookkeeping
/// calls nobody waits on, which succeed.
///
/// Open files and stale paths: after an unlink, or a rename over it, an open
/// file is no longer reachable by any name. Calls that carry its handle
/// (read, write, flush, release, fsync, readdir, fallocate, ...) still come
/// here, with the path the file was last reachable by, which may now name
/// another file or nothing; a filesystem that keeps open files should trust
/// the handle over the path. Calls without a handle on such a file fail with
/// ENOENT before reaching the filesystem, so a `chmod` can never land on
/// whatever took the old name.
///
/// Methods run concurrently on the session's worker threads.
#[allow(unused_variables)]
pub trait PathFilesystem: Send + Sync + 'static {
    /// Called once with what the kernel offers; adjust `conn.want` here.
    /// Notifications name node ids: see [`PathAdapter::node_of`].
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        Ok(())
    }

    /// The filesystem is being unmounted.
    fn destroy(&self) {}

    /// How long the kernel may cache names and attributes. A non-zero
    /// `negative` makes a lookup that fails with ENOENT cached as well.
    fn timeouts(&self) -> Timeouts {
        Timeouts::default()
    }

    /// Attributes of `path`. This is also the lookup: a name exists exactly
    /// when this succeeds. `fh` is set when the kernel asks about an open file.
    fn getattr(&self, ctx: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// chmod, chown, truncate and utimens in one: change the fields that are
    /// `Some`, return the attributes afterwards.
    fn setattr(&self, ctx: &Ctx, path: &Path, attr: &SetAttr) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Write the link's target into `out` (no NUL needed).
    fn readlink(&self, ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Create `link_path` as a symlink pointing at `target`.
    fn symlink(&self, ctx: &Ctx, target: &OsStr, link_path: &Path) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    fn mknod(&self, ctx: &Ctx, path: &Path, args: &Mknod) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    fn mkdir(&self, ctx: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    fn unlink(&self, ctx: &Ctx, path: &Path) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    fn rmdir(&self, ctx: &Ctx, path: &Path) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// `flags` as for renameat2(2): `RENAME_NOREPLACE`, `RENAME_EXCHANGE`.
    /// Without them, an existing `to` is replaced.
    fn rename(&self, ctx: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Create `new` as a hard link to `existing`.
    fn link(&self, ctx: &Ctx, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    fn open(&self, ctx: &Ctx, path: &Path, args: &Open) -> FsResult<Opened> {
        Err(Errno::ENOSYS)
    }

    /// Put at most `args.size` bytes into `out`; fewer means end of file.
    fn read(&self, ctx: &Ctx, path: &Path, args: &Read, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Returns the number of bytes written.
    fn write(&self, ctx: &Ctx, path: &Path, args: &Write) -> FsResult<u32> {
        Err(Errno::ENOSYS)
    }

    /// Called on each close(2) of a file descriptor.
    fn flush(&self, ctx: &Ctx, path: &Path, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// The last reference to the open file is gone.
    fn release(&self, ctx: &Ctx, path: &Path, args: &Release) -> FsResult<()> {
        Ok(())
    }

    fn fsync(&self, ctx: &Ctx, path: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    fn opendir(&self, ctx: &Ctx, path: &Path, args: &Open) -> FsResult<Opened> {
        Err(Errno::ENOSYS)
    }

    /// List the directory, continuing after `offset` (0 = from the start).
    ///
    /// Call `filler(name, kind, ino, next_offset)` per entry; it returns
    /// false once the reply is full, and the entry was not taken: stop
    /// there. `next_offset` is what the kernel passes back as `offset` to
    /// continue after this entry. Like libfuse, two styles work:
    /// - give real, non-zero offsets and honour `offset`;
    /// - give 0 for every entry and list everything from the start on every
    ///   call; the adapter then numbers entries itself and skips those the
    ///   kernel already has (simple, but quadratic on huge directories).
    ///
    /// `.` and `..` are listed only if the filesystem lists them. `ino` 0
    /// is sent as an "unknown" placeholder, since some readers skip 0.
    fn readdir(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    fn releasedir(&self, ctx: &Ctx, path: &Path, args: &Release) -> FsResult<()> {
        Ok(())
    }

    fn fsyncdir(&self, ctx: &Ctx, path: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Unlike the rest, this defaults to success with empty numbers, as in
    /// libfuse: an ENOSYS here would make df(1) and friends fail outright.
    fn statfs(&self, ctx: &Ctx, path: &Path) -> FsResult<Statfs> {
        Ok(Statfs {
            namelen: 255,
            bsize: 512,
            frsize: 512,
            ..Default::default()
        })
    }

    fn setxattr(&self, ctx: &Ctx, path: &Path, args: &Setxattr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Write the whole value into `out`; size queries and ERANGE are
    /// answered from its length.
    fn getxattr(&self, ctx: &Ctx, path: &Path, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Write all names, each NUL-terminated, into `out`.
    fn listxattr(&self, ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    fn removexattr(&self, ctx: &Ctx, path: &Path, name: &OsStr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// access(2); ENOSYS makes the kernel stop asking and allow everything
    /// its own checks (`default_permissions`) allow.
    fn access(&self, ctx: &Ctx, path: &Path, mask: i32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Create and open a regular file. ENOSYS makes the kernel fall back to
    /// `mknod` + `open`.
    fn create(&self, ctx: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
        Err(Errno::ENOSYS)
    }

    fn getlk(&self, ctx: &Ctx, path: &Path, lock: &Lock) -> FsResult<LockInfo> {
        Err(Errno::ENOSYS)
    }

    /// Take or release a lock; `sleep` for F_SETLKW (may block this worker).
    fn setlk(&self, ctx: &Ctx, path: &Path, lock: &Lock, sleep: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    fn fallocate(&self, ctx: &Ctx, path: &Path, args: &Fallocate) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Returns the new offset (SEEK_DATA / SEEK_HOLE).
    fn lseek(&self, ctx: &Ctx, path: &Path, args: &Lseek) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// Returns the number of bytes copied. `args.node_in`/`node_out` are the
    /// adapter's ids; use the paths and handles.
    fn copy_file_range(
        &self,
        ctx: &Ctx,
        path_in: &Path,
        path_out: &Path,
        args: &CopyFileRange,
    ) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }
}

/// What readdir reports for an `ino` of 0, the value libfuse uses too.
const UNKNOWN_INO: u64 = 0xffff_ffff;

/// Serves a [`PathFilesystem`] as an inode-level [`Filesystem`].
///
/// Every name the kernel has looked up (and not yet forgotten) gets a node
/// id here; ids are never reused, so generations stay 0. Hard links are
/// separate names, so each gets its own id, as in libfuse.
///
/// The whole table sits behind one `RwLock`. It is held only to turn ids
/// into paths or to record a result, never across a call into the
/// filesystem, so it stays short; a rename updates several nodes at once,
/// which a sharded table would make much harder to keep consistent.
///
/// READDIRPLUS is served by plain entries without attributes (the inode
/// trait's default): the kernel then looks up the names it needs, and no
/// lookup references are taken behind the table's back.
pub struct PathAdapter<F> {
    fs: F,
    table: RwLock<Table>,
}

impl<F: PathFilesystem> PathAdapter<F> {
    pub fn new(fs: F) -> PathAdapter<F> {
        PathAdapter {
            fs,
            table: RwLock::new(Table::new()),
        }
    }

    /// The filesystem being served.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The node id the kernel knows `path` by, if it currently has one:
    /// what notifications (`Notifier::inval_entry`, ...) need.
    pub fn node_of(&self, path: &Path) -> Option<NodeId> {
        let t = self.read();
        let mut cur = NodeId::ROOT;
        for c in path.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(name) => cur = t.child(cur, name)?,
                Component::ParentDir | Component::Prefix(_) => return None,
            }
        }
        Some(cur)
    }

    /// The path `node` stands for; for an unlinked node, the last one.
    pub fn path_of(&self, node: NodeId) -> Option<PathBuf> {
        self.read().path(node, true).ok()
    }

    // Poisoning only means another thread panicked, and no table update can
    // panic halfway, so the table is still consistent: carry on.
    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// `has_fh`: the call carries an open file's handle, so a stale path is
    /// acceptable (see [`PathFilesystem`]).
    fn path(&self, node: NodeId, has_fh: bool) -> FsResult<PathBuf> {
        self.read().path(node, has_fh)
    }

    fn child_path(&self, parent: NodeId, name: &OsStr) -> FsResult<PathBuf> {
        let mut p = self.read().path(parent, false)?;
        p.push(name);
        Ok(p)
    }

    /// Record a new kernel reference to `parent/name` and build its entry.
    fn entry(&self, parent: NodeId, name: &OsStr, attr: FileAttr) -> FsResult<Entry> {
        let t = self.fs.timeouts();
        let node = self.write().register(parent, name, &attr)?;
        Ok(Entry::new(node, attr, &t))
    }

    fn attr_reply(&self, attr: FileAttr) -> AttrReply {
        AttrReply {
            attr,
            ttl: self.fs.timeouts().attr,
        }
    }

    /// "." and ".." arrive only from NFS export (`..` finds a parent); they
    /// name nodes that already exist, and still count as lookups.
    fn lookup_dots(&self, ctx: &Ctx, dir: NodeId, dotdot: bool) -> FsResult<Entry> {
        let (node, path) = {
            let t = self.read();
            let node = if dotdot { t.node(dir)?.parent } else { dir };
            (node, t.path(node, false)?)
        };
        let attr = self.fs.getattr(ctx, &path, None)?;
        let timeouts = self.fs.timeouts();
        self.write()
            .nodes
            .get_mut(&node)
            .ok_or(Errno::ENOENT)?
            .nlookup += 1;
        Ok(Entry::new(node, attr, &timeouts))
    }
}

impl<F: PathFilesystem> Filesystem for PathAdapter<F> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.fs.init(conn, notifier)
    }

    fn destroy(&self) {
        self.fs.destroy()
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if name == OsStr::new(".") || name == OsStr::new("..") {
            return self.lookup_dots(ctx, parent, name == OsStr::new(".."));
        }
        let path = self.child_path(parent, name)?;
        match self.fs.getattr(ctx, &path, None) {
            Ok(attr) => self.entry(parent, name, attr),
            Err(Errno::ENOENT) => {
                // The name may have vanished behind the kernel's back (the
                // filesystem changed on its own): drop our mapping so a file
                // appearing there later gets a fresh node.
                self.write().detach_name(parent, name);
                match self.fs.timeouts().negative {
                    ttl if ttl.is_zero() => Err(Errno::ENOENT),
                    ttl => Ok(Entry::negative(ttl)),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        self.write().forget(node, nlookup);
    }

    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        let mut t = self.write();
        for (node, n) in nodes {
            t.forget(node, n);
        }
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        let path = self.path(node, fh.is_some())?;
        Ok(self.attr_reply(self.fs.getattr(ctx, &path, fh)?))
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        let path = self.path(node, attr.fh.is_some())?;
        Ok(self.attr_reply(self.fs.setattr(ctx, &path, attr)?))
    }

    fn readlink(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        self.fs.readlink(ctx, &self.path(node, false)?, out)
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        let attr = self
            .fs
            .symlink(ctx, target, &self.child_path(parent, name)?)?;
        self.entry(parent, name, attr)
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mknod) -> FsResult<Entry> {
        let attr = self.fs.mknod(ctx, &self.child_path(parent, name)?, args)?;
        self.entry(parent, name, attr)
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mkdir) -> FsResult<Entry> {
        let attr = self.fs.mkdir(ctx, &self.child_path(parent, name)?, args)?;
        self.entry(parent, name, attr)
    }

    fn unlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.fs.unlink(ctx, &self.child_path(parent, name)?)?;
        self.write().detach_name(parent, name);
        Ok(())
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.fs.rmdir(ctx, &self.child_path(parent, name)?)?;
        self.write().detach_name(parent, name);
        Ok(())
    }

    fn rename(&self, ctx: &Ctx, args: &Rename) -> FsResult<()> {
        let from = self.child_path(args.parent, args.name)?;
        let to = self.child_path(args.new_parent, args.new_name)?;
        self.fs.rename(ctx, &from, &to, args.flags)?;
        let exchange = args.flags & libc::RENAME_EXCHANGE != 0;
        self.write().rename(
            args.parent,
            args.name,
            args.new_parent,
            args.new_name,
            exchange,
        );
        Ok(())
    }

    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let existing = self.path(node, false)?;
        let attr = self
            .fs
            .link(ctx, &existing, &self.child_path(new_parent, new_name)?)?;
        self.entry(new_parent, new_name, attr)
    }

    fn open(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.fs.open(ctx, &self.path(node, false)?, args)
    }

    fn read(&self, ctx: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        self.fs.read(ctx, &self.path(node, true)?, args, out)
    }

    fn write(&self, ctx: &Ctx, node: NodeId, args: &Write) -> FsResult<u32> {
        self.fs.write(ctx, &self.path(node, true)?, args)
    }

    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        self.fs.flush(ctx, &self.path(node, true)?, fh, lock_owner)
    }

    fn release(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        self.fs.release(ctx, &self.path(node, true)?, args)
    }

    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.fs.fsync(ctx, &self.path(node, true)?, fh, datasync)
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.fs.opendir(ctx, &self.path(node, false)?, args)
    }

    fn readdir(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        let skip = args.offset;
        let mut counted = 0u64;
        let mut filler = |name: &OsStr, kind: FileType, ino: u64, next: u64| -> bool {
            let next = if next != 0 {
                next
            } else {
                counted += 1;
                if counted <= skip {
                    return true;
                }
                counted
            };
            out.push(if ino == 0 { UNKNOWN_INO } else { ino }, next, kind, name)
        };
        self.fs
            .readdir(ctx, &path, args.fh, args.offset, &mut filler)
    }

    fn releasedir(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        self.fs.releasedir(ctx, &self.path(node, true)?, args)
    }

    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.fs.fsyncdir(ctx, &self.path(node, true)?, fh, datasync)
    }

    // The answer is about the whole filesystem, so a stale path will do.
    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        self.fs.statfs(ctx, &self.path(node, true)?)
    }

    fn setxattr(&self, ctx: &Ctx, node: NodeId, args: &Setxattr) -> FsResult<()> {
        self.fs.setxattr(ctx, &self.path(node, false)?, args)
    }

    fn getxattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        self.fs.getxattr(ctx, &self.path(node, false)?, name, out)
    }

    fn listxattr(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        self.fs.listxattr(ctx, &self.path(node, false)?, out)
    }

    fn removexattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        self.fs.removexattr(ctx, &self.path(node, false)?, name)
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        self.fs.access(ctx, &self.path(node, false)?, mask)
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let path = self.child_path(parent, name)?;
        let (attr, opened) = self.fs.create(ctx, &path, args)?;
        match self.entry(parent, name, attr) {
            Ok(entry) => Ok((entry, opened)),
            Err(e) => {
                // The kernel will never see this handle, so nobody else
                // would ever release it.
                let rel = Release {
                    fh: opened.fh,
                    flags: args.flags,
                    flush: false,
                    flock_unlock: false,
                    lock_owner: 0,
                };
                let _ = self.fs.release(ctx, &path, &rel);
                Err(e)
            }
        }
    }

    fn getlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock) -> FsResult<LockInfo> {
        self.fs.getlk(ctx, &self.path(node, true)?, lock)
    }

    fn setlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock, sleep: bool) -> FsResult<()> {
        self.fs.setlk(ctx, &self.path(node, true)?, lock, sleep)
    }

    fn fallocate(&self, ctx: &Ctx, node: NodeId, args: &Fallocate) -> FsResult<()> {
        self.fs.fallocate(ctx, &self.path(node, true)?, args)
    }

    fn lseek(&self, ctx: &Ctx, node: NodeId, args: &Lseek) -> FsResult<u64> {
        self.fs.lseek(ctx, &self.path(node, true)?, args)
    }

    fn copy_file_range(&self, ctx: &Ctx, args: &CopyFileRange) -> FsResult<u64> {
        let path_in = self.path(args.node_in, true)?;
        let path_out = self.path(args.node_out, true)?;
        self.fs.copy_file_range(ctx, &path_in, &path_out, args)
    }
}

struct Node {
    parent: NodeId,
    /// The name under `parent`; for an unlinked node, the last one it had.
    name: OsString,
    /// Kernel references (lookups minus forgets).
    nlookup: u64,
    /// Nodes whose `parent` is this one. A node must outlive them, or their
    /// paths could no longer be derived; the kernel forgets children first
    /// anyway, but a stray order must not leave dangling parents.
    kids: u64,
    /// False once unlinked or replaced: no name leads here any more.
    linked: bool,
    /// The `S_IFMT` bits seen at lookup.
    kind: u32,
}

struct Table {
    nodes: HashMap<NodeId, Node>,
    /// (parent, name) -> node, for linked nodes only.
    names: HashMap<(NodeId, OsString), NodeId>,
    next: u64,
}

impl Table {
    fn new() -> Table {
        let root = Node {
            parent: NodeId::ROOT,
            name: OsString::new(),
            nlookup: 1,
            kids: 0,
            linked: true,
            kind: libc::S_IFDIR,
        };
        Table {
            nodes: HashMap::from([(NodeId::ROOT, root)]),
            names: HashMap::new(),
            next: NodeId::ROOT.0 + 1,
        }
    }

    fn node(&self, id: NodeId) -> FsResult<&Node> {
        self.nodes.get(&id).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: NodeId, name: &OsStr) -> Option<NodeId> {
        self.names.get(&(parent, name.to_os_string())).copied()
    }

    /// Derive `id`'s path from the parent chain. Unless `stale_ok`, a node
    /// no longer reachable by name (or below one that is not) is ENOENT.
    fn path(&self, id: NodeId, stale_ok: bool) -> FsResult<PathBuf> {
        let mut names = Vec::new();
        let mut cur = id;
        while cur != NodeId::ROOT {
            let n = self.node(cur)?;
            if !n.linked && !stale_ok {
                return Err(Errno::ENOENT);
            }
            names.push(n.name.as_os_str());
            // Only a filesystem that accepted moving a directory into its
            // own subtree could make a cycle; fail rather than spin.
            if names.len() > self.nodes.len() {
                return Err(Errno::ELOOP);
            }
            cur = n.parent;
        }
        let mut path = PathBuf::with_capacity(1 + names.iter().map(|n| n.len() + 1).sum::<usize>());
        path.push("/");
        for name in names.iter().rev() {
            path.push(name);
        }
        Ok(path)
    }

    /// One more kernel reference to `parent/name`, creating its node on first sight.
    fn register(&mut self, parent: NodeId, name: &OsStr, attr: &FileAttr) -> FsResult<NodeId> {
        let kind = attr.mode & libc::S_IFMT;
        let key = (parent, name.to_os_string());
        if let Some(&id) = self.names.get(&key) {
            match self.nodes.get_mut(&id) {
                Some(n) if n.kind == kind => {
                    n.nlookup += 1;
                    return Ok(id);
                }
                // Another type under the same name means the file was
                // replaced behind our back; the kernel rejects a node whose
                // type changes, so the newcomer needs a node of its own.
                _ => {
                    self.names.remove(&key);
                    self.unlinked(id);
                }
            }
        }
        let p = self.nodes.get_mut(&parent).ok_or(Errno::ENOENT)?;
        p.kids += 1;
        let id = NodeId(self.next);
        self.next += 1;
        self.nodes.insert(
            id,
            Node {
                parent,
                name: key.1.clone(),
                nlookup: 1,
                kids: 0,
                linked: true,
                kind,
            },
        );
        self.names.insert(key, id);
        Ok(id)
    }

    /// `parent/name` no longer exists: its node (if any) lives on until
    /// forgotten, reachable only by id.
    fn detach_name(&mut self, parent: NodeId, name: &OsStr) {
        if let Some(id) = self.names.remove(&(parent, name.to_os_string())) {
            self.unlinked(id);
        }
    }

    fn unlinked(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.linked = false;
        }
        self.collect(id);
    }

    fn forget(&mut self, id: NodeId, n: u64) {
        if id == NodeId::ROOT {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&id) {
            node.nlookup = node.nlookup.saturating_sub(n);
            self.collect(id);
        }
    }

    /// Drop `id` if nothing needs it any more, then any ancestors that were
    /// kept only for its sake.
    fn collect(&mut self, mut id: NodeId) {
        while id != NodeId::ROOT {
            match self.nodes.get(&id) {
                Some(n) if n.nlookup == 0 && n.kids == 0 => {}
                _ => return,
            }
            let Some(n) = self.nodes.remove(&id) else {
                return;
            };
            let key = (n.parent, n.name);
            if self.names.get(&key) == Some(&id) {
                self.names.remove(&key);
            }
            if let Some(p) = self.nodes.get_mut(&key.0) {
                p.kids = p.kids.saturating_sub(1);
            }
            id = key.0;
        }
    }

    /// Mirror a rename the filesystem accepted.
    fn rename(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        new_parent: NodeId,
        new_name: &OsStr,
        exchange: bool,
    ) {
        let src = self.names.remove(&(parent, name.to_os_string()));
        let dst = self.names.remove(&(new_parent, new_name.to_os_string()));
        if let Some(s) = src {
            self.relink(s, new_parent, new_name);
        }
        match dst {
            Some(d) if exchange => self.relink(d, parent, name),
            // Replaced: open handles on it go on working, by id only.
            Some(d) if Some(d) != src => self.unlinked(d),
            _ => {}
        }
        // A directory might have lost the last child that kept it alive.
        self.collect(parent);
        self.collect(new_parent);
    }

    /// Move `id` to `parent/name`; the caller has cleared both names.
    fn relink(&mut self, id: NodeId, parent: NodeId, name: &OsStr) {
        let Some(old_parent) = self.nodes.get(&id).map(|n| n.parent) else {
            return;
        };
        if old_parent != parent {
            let Some(p) = self.nodes.get_mut(&parent) else {
                // The kernel holds the target directory during a rename, so
                // this cannot happen; an unreachable node beats a dangling one.
                self.unlinked(id);
                return;
            };
            p.kids += 1;
            if let Some(op) = self.nodes.get_mut(&old_parent) {
                op.kids = op.kids.saturating_sub(1);
            }
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            n.parent = parent;
            n.name = name.to_os_string();
            n.linked = true;
        }
        self.names.insert((parent, name.to_os_string()), id);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    const ROOT: NodeId = NodeId::ROOT;

    /// Paths to attributes; lists directories in the offset-less style.
    #[derive(Default)]
    struct MemFs {
        files: Mutex<BTreeMap<PathBuf, FileAttr>>,
        negative: Duration,
    }

    impl MemFs {
        fn insert(&self, path: &Path, mode: u32) -> FsResult<FileAttr> {
            let mut f = self.files.lock().unwrap();
            let attr = FileAttr {
                ino: f.len() as u64 + 100,
                mode,
                nlink: 1,
                ..Default::default()
            };
            f.insert(path.to_owned(), attr);
            Ok(attr)
        }
    }

    impl PathFilesystem for MemFs {
        fn timeouts(&self) -> Timeouts {
            Timeouts {
                negative: self.negative,
                ..Timeouts::default()
            }
        }

        fn getattr(&self, _: &Ctx, path: &Path, _: Option<FileHandle>) -> FsResult<FileAttr> {
            self.files
                .lock()
                .unwrap()
                .get(path)
                .copied()
                .ok_or(Errno::ENOENT)
        }

        fn mkdir(&self, _: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
            self.insert(path, libc::S_IFDIR | args.mode)
        }

        fn create(&self, _: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
            Ok((
                self.insert(path, libc::S_IFREG | args.mode)?,
                Opened::handle(7),
            ))
        }

        fn unlink(&self, _: &Ctx, path: &Path) -> FsResult<()> {
            self.files
                .lock()
                .unwrap()
                .remove(path)
                .map(drop)
                .ok_or(Errno::ENOENT)
        }

        fn rename(&self, _: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
            let mut f = self.files.lock().unwrap();
            if !f.contains_key(from) {
                return Err(Errno::ENOENT);
            }
            let exchange = flags & libc::RENAME_EXCHANGE != 0;
            for (k, attr) in std::mem::take(&mut *f) {
                let new = match (k.strip_prefix(from), k.strip_prefix(to)) {
                    (Ok(rest), _) => to.join(rest),
                    (_, Ok(rest)) if exchange => from.join(rest),
                    (_, Ok(_)) => continue,
                    _ => k,
                };
                f.insert(new, attr);
            }
            Ok(())
        }

        fn readdir(
            &self,
            _: &Ctx,
            path: &Path,
            _: FileHandle,
            _: u64,
            filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
        ) -> FsResult<()> {
            for (k, a) in self
                .files
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.parent() == Some(path))
            {
                if !filler(k.file_name().unwrap(), a.kind().unwrap(), a.ino, 0) {
                    break;
                }
            }
            Ok(())
        }
    }

    fn os(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    fn mkdir(a: &PathAdapter<MemFs>, parent: NodeId, name: &str) -> NodeId {
        a.mkdir(
            &Ctx::internal(),
            parent,
            os(name),
            &Mkdir {
                mode: 0o755,
                umask: 0,
            },
        )
        .unwrap()
        .node
    }

    fn mkfile(a: &PathAdapter<MemFs>, parent: NodeId, name: &str) -> NodeId {
        let args = Create {
            flags: libc::O_RDWR,
            mode: 0o644,
            umask: 0,
            kill_suidgid: false,
        };
        a.create(&Ctx::internal(), parent, os(name), &args)
            .unwrap()
            .0
            .node
    }

    fn nlookup(a: &PathAdapter<MemFs>, node: NodeId) -> Option<u64> {
        a.read().nodes.get(&node).map(|n| n.nlookup)
    }

    fn rename(
        a: &PathAdapter<MemFs>,
        from: (NodeId, &str),
        to: (NodeId, &str),
        flags: u32,
    ) -> FsResult<()> {
        let args = Rename {
            parent: from.0,
            name: os(from.1),
            new_parent: to.0,
            new_name: os(to.1),
            flags,
        };
        a.rename(&Ctx::internal(), &args)
    }

    #[test]
    fn lookup_gives_stable_ids_and_counts_references() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let f = mkfile(&a, ROOT, "f");
        let e = a.lookup(&ctx, ROOT, os("f")).unwrap();
        assert_eq!(
            (e.node, a.lookup(&ctx, ROOT, os("f")).unwrap().node),
            (f, f)
        );
        assert_eq!(
            e.attr.ino, 100,
            "the filesystem's own ino is passed through"
        );
        assert_eq!(nlookup(&a, f), Some(3));
        assert_eq!(a.node_of(Path::new("/f")), Some(f));
    }

    #[test]
    fn forget_drops_nodes_but_keeps_parents_of_live_children() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let d = mkdir(&a, ROOT, "d");
        let x = mkfile(&a, d, "x");
        a.forget(d, 1);
        assert_eq!(nlookup(&a, d), Some(0), "d must outlive its child");
        assert_eq!(a.path_of(x).unwrap(), Path::new("/d/x"));
        a.forget(x, 1);
        assert_eq!(
            (nlookup(&a, x), nlookup(&a, d), a.read().names.len()),
            (None, None, 0)
        );
        a.forget(ROOT, 5);
        let d2 = a.lookup(&ctx, ROOT, os("d")).unwrap().node;
        assert!(d2 != d && d2 != x, "ids are never reused");
        assert_eq!(a.getattr(&ctx, d, None), Err(Errno::ENOENT));
    }

    #[test]
    fn rename_moves_a_subtree() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let da = mkdir(&a, ROOT, "a");
        let x = mkfile(&a, da, "x");
        let other = mkdir(&a, ROOT, "o");
        rename(&a, (ROOT, "a"), (ROOT, "b"), 0).unwrap();
        assert_eq!(a.path_of(x).unwrap(), Path::new("/b/x"));
        assert!(a.getattr(&ctx, x, None).is_ok());
        assert_eq!(a.lookup(&ctx, ROOT, os("b")).unwrap().node, da);
        assert_eq!(a.lookup(&ctx, ROOT, os("a")).unwrap_err(), Errno::ENOENT);
        rename(&a, (da, "x"), (other, "y"), 0).unwrap();
        assert_eq!(a.path_of(x).unwrap(), Path::new("/o/y"));
        assert_eq!(a.lookup(&ctx, other, os("y")).unwrap().node, x);
    }

    #[test]
    fn rename_exchange_swaps() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let p = mkfile(&a, ROOT, "p");
        let q = mkdir(&a, ROOT, "q");
        let c = mkfile(&a, q, "c");
        let p_ino = a.getattr(&ctx, p, None).unwrap().attr.ino;
        rename(&a, (ROOT, "p"), (ROOT, "q"), libc::RENAME_EXCHANGE).unwrap();
        assert_eq!(a.path_of(p).unwrap(), Path::new("/q"));
        assert_eq!(a.path_of(c).unwrap(), Path::new("/p/c"));
        assert_eq!(a.getattr(&ctx, p, None).unwrap().attr.ino, p_ino);
        assert_eq!(a.lookup(&ctx, ROOT, os("p")).unwrap().node, q);
    }

    #[test]
    fn rename_over_a_target_detaches_it() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let s = mkfile(&a, ROOT, "s");
        let t = mkfile(&a, ROOT, "t");
        rename(&a, (ROOT, "s"), (ROOT, "t"), 0).unwrap();
        assert_eq!(a.lookup(&ctx, ROOT, os("t")).unwrap().node, s);
        assert_eq!(a.getattr(&ctx, t, None), Err(Errno::ENOENT));
        assert_eq!(
            a.path_of(t).unwrap(),
            Path::new("/t"),
            "known by id until forgotten"
        );
        a.forget(t, 1);
        assert_eq!(a.path_of(t), None);
        assert_eq!(a.path_of(s).unwrap(), Path::new("/t"));
    }

    #[test]
    fn unlink_makes_the_name_unresolvable() {
        let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
        let f = mkfile(&a, ROOT, "f");
        a.unlink(&ctx, ROOT, os("f")).unwrap();
        assert_eq!(a.node_of(Path::new("/f")), None);
        assert_eq!(a.lookup(&ctx, ROOT, os("f")).unwrap_err(), Errno::ENOENT);
        assert_eq!(a.getattr(&ctx, f, None), Err(Errno::ENOENT));
        let rel = Release {
            fh: FileHandle(7),
            flags: 0,
            flush: false,
            flock_unlock: false,
            lock_owner: 0,
        };
        assert_eq!(
            a.release(&ctx, f, &rel),
            Ok(()),
            "calls with a handle still get through"
        );
        let f2 = mkfile(&a, ROOT, "f");
        assert_ne!(f2, f);
        a.forget(f, 1);
        assert_eq!(a.path_of(f2).unwrap(), Path::new("/f"));
    }

    #[test]
    fn unknown_nodes_and_missing_names() {
        let a = PathAdapter::new(MemFs {
            negative: Duration::from_secs(3),
            ..MemFs::default()
        });
        let (ctx, bogus) = (Ctx::internal(), NodeId(999));
        assert_eq!(a.getattr(&ctx, bogus, None), Err(Errno::ENOENT));
        assert_eq!(a.lookup(&ctx, bogus, os("x")).unwrap_err(), Errno::ENOENT);
        assert_eq!(rename(&a, (bogus, "x"), (ROOT, "y"), 0), Err(Errno::ENOENT));
        a.forget(bogus, 1);
        let e = a.lookup(&ctx, ROOT, os("nope")).unwrap();
        assert_eq!((e.node, e.entry_ttl), (NodeId(0), Duration::from_secs(3)));
    }

    #[test]
    fn offsetless_listings_are_numbered_and_resumed() {
        let a = PathAdapter::new(MemFs::default());
        for name in ["a", "b", "c"] {
            mkfile(&a, ROOT, name);
        }
        let list = |offset: u64| -> Vec<(OsString, u64)> {
            let mut out = DataOut::with_capacity(64);
            out.reset(64); // room for two 32-byte records
            let args = Read {
                fh: FileHandle(0),
                offset,
                size: 64,
                flags: 0,
                lock_owner: None,
            };
            a.readdir(
                &Ctx::internal(),
                ROOT,
                &args,
                &mut DirEntries::new(&mut out, false),
            )
            .unwrap();
            let (buf, mut i, mut entries) = (out.as_slice(), 0, Vec::new());
            while i + 24 <= buf.len() {
                let off = u64::from_le_bytes(buf[i + 8..i + 16].try_into().unwrap());
                let len = u32::from_le_bytes(buf[i + 16..i + 20].try_into().unwrap()) as usize;
                entries.push((
                    OsStr::from_bytes(&buf[i + 24..i + 24 + len]).to_owned(),
                    off,
                ));
                i += (24 + len + 7) & !7;
            }
            entries
        };
        assert_eq!(
            list(0),
            vec![(OsString::from("a"), 1), (OsString::from("b"), 2)]
        );
        assert_eq!(list(2), vec![(OsString::from("c"), 3)]);
        assert_eq!(list(3), vec![]);
    }
}
