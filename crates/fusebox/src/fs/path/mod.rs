//! The path-level filesystem API, like libfuse's high-level `fuse_operations`,
//! and [`PathAdapter`], which serves it through the inode-level [`Filesystem`].
//!
//! The adapter hands the kernel node ids of its own. A node remembers only its
//! parent and its name; a path is derived by walking up to the root. Renaming
//! a directory therefore touches one node, however large the subtree below it.

mod asynchronous;
mod table;
#[cfg(test)]
mod tests;

pub use asynchronous::{AsyncPathFilesystem, ReadyPath};

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::inode::Filesystem;
use super::ops::*;
use crate::error::{Errno, FsResult};
use crate::fs::recoverable::{AppliedChange, HandleRecord, KeyChanges, MAX_KEY};
use crate::protocol::{Connection, DataOut, DirEntries, Notifier};
use crate::types::*;
use table::Table;

/// READDIRPLUS's filler: `(name, kind, ino, next_offset, attributes)`,
/// false once the reply is full (see [`PathFilesystem::readdirplus`]).
pub type PlusFiller<'a> = dyn FnMut(&OsStr, FileType, u64, u64, Option<&FileAttr>) -> bool + 'a;

/// The same, for [`AsyncPathFilesystem::readdirplus`].
pub type PlusFillerSend<'a> =
    dyn FnMut(&OsStr, FileType, u64, u64, Option<&FileAttr>) -> bool + Send + 'a;

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
/// the handle over the path. `getattr` and `setattr` on such a file (fstat,
/// fchmod) come with one of its open handles even where the kernel sent
/// none. Other calls without a handle on it fail with ENOENT before reaching
/// the filesystem, so a `chmod` can never land on whatever took the old name.
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

    /// True to report the adapter's node ids as inode numbers (st_ino)
    /// instead of the `ino` the filesystem gives, as libfuse does unless
    /// its `use_ino` is set: for a filesystem with no inode numbers of its
    /// own (sshfs over SFTP), whose 0s would make every file look like one
    /// to find(1) and tar(1). Asked per answer; may change after `init`.
    fn node_ids_as_inos(&self) -> bool {
        false
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

    /// Create a device node, FIFO, socket or regular file at `path` (regular
    /// files too when `create` answers ENOSYS); return its attributes.
    fn mknod(&self, ctx: &Ctx, path: &Path, args: &Mknod) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Create the directory `path`; return its attributes.
    fn mkdir(&self, ctx: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Remove the non-directory `path`. Open handles to it stay valid (see
    /// the trait's note on stale paths).
    fn unlink(&self, ctx: &Ctx, path: &Path) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Remove the empty directory `path`.
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

    /// Open `path`; the handle returned comes back with every call on the open
    /// file. ENOSYS, where the kernel allows it, opens every file without
    /// asking, with handle 0.
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

    /// Make the file's data, and unless `datasync` its attributes, durable.
    fn fsync(&self, ctx: &Ctx, path: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Open the directory `path` for listing; the handle comes back in
    /// `readdir` and `releasedir`. ENOSYS opens without asking, with handle 0.
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

    /// READDIRPLUS: list as [`readdir`](Self::readdir) does, giving each
    /// entry's attributes where the listing has them at hand, `None`
    /// elsewhere: `filler(name, kind, ino, next_offset, attributes)`. An
    /// entry given attributes is looked up for the kernel with them, as a
    /// [`getattr`](Self::getattr) of its path would have been: give them
    /// only if they are whole and current. The default lists through
    /// `readdir`, without attributes.
    fn readdirplus(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut PlusFiller<'_>,
    ) -> FsResult<()> {
        self.readdir(ctx, path, fh, offset, &mut |name, kind, ino, next| {
            filler(name, kind, ino, next, None)
        })
    }

    /// Whether the adapter may look entries up itself, by `getattr`, to
    /// answer a READDIRPLUS with the attributes the listing did not give,
    /// when the kernel shows the program is looking up the entries it
    /// lists (see [`PathAdapter`]). True by default: those getattr calls
    /// replace the LOOKUP requests the kernel would send for the same
    /// names. Say false where a getattr costs much more than a listing
    /// and programs list far more than they stat.
    fn lookups_in_readdirplus(&self) -> bool {
        true
    }

    /// The last reference to the open directory is gone.
    fn releasedir(&self, ctx: &Ctx, path: &Path, args: &Release) -> FsResult<()> {
        Ok(())
    }

    /// fsync(2) on a directory: make its entries durable.
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

    /// Set an extended attribute. ENOSYS: the kernel stops asking and
    /// setxattr(2) fails with EOPNOTSUPP.
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

    /// Remove the extended attribute `name`; ENODATA if it is not set.
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

    /// The lock that would keep `lock` from being taken, or one of type
    /// `F_UNLCK` if none; sent only once `POSIX_LOCKS` is enabled in `init`.
    fn getlk(&self, ctx: &Ctx, path: &Path, lock: &Lock) -> FsResult<LockInfo> {
        Err(Errno::ENOSYS)
    }

    /// Take or release a lock; `sleep` for F_SETLKW (may block this worker).
    fn setlk(&self, ctx: &Ctx, path: &Path, lock: &Lock, sleep: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Allocate, zero or punch out the range `args` names (fallocate(2)).
    fn fallocate(&self, ctx: &Ctx, path: &Path, args: &Fallocate) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Returns the new offset (SEEK_DATA / SEEK_HOLE).
    fn lseek(&self, ctx: &Ctx, path: &Path, args: &Lseek) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// ioctl(2) on an open file (or directory, `args.flags` has
    /// FUSE_IOCTL_DIR): the call's result; output data goes into `out`.
    fn ioctl(&self, ctx: &Ctx, path: &Path, args: &Ioctl, out: &mut DataOut) -> FsResult<i32> {
        Err(Errno::ENOSYS)
    }

    /// poll(2) on an open file: the ready events. With
    /// `args.schedule_notify`, tell the kernel when that changes
    /// (`Notifier::poll_wakeup(args.kh)`).
    fn poll(&self, ctx: &Ctx, path: &Path, args: &Poll) -> FsResult<u32> {
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

    /// Crash recovery (`fusebox::recovery`), in a new server: the kernel
    /// holds `handle` open on `path` (a file, or a directory if
    /// `handle.dir`); reopen it under the same number, which later handles
    /// must not reuse. The adapter restores the names and node ids itself;
    /// without this, handles opened before a crash fail with EBADF.
    fn restore_handle(&self, path: &Path, handle: &HandleRecord) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// See [`Filesystem::adopt_held_area`].
    fn adopt_held_area(&self, area: crate::sys::shared_map::SharedMap) {}

    /// See [`Filesystem::drop_cached_data`].
    fn drop_cached_data(&self, path: &Path) {}

    /// See [`Filesystem::restored`].
    fn restored(&self) {}

    /// See [`Filesystem::quiesce`].
    fn quiesce(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// See [`Filesystem::quiesce_abandoned`].
    fn quiesce_abandoned(&self) {}

    /// See [`Filesystem::counters`].
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        Vec::new()
    }
}

/// What readdir reports for an `ino` of 0, the value libfuse uses too.
const UNKNOWN_INO: u64 = 0xffff_ffff;

/// Serves a [`PathFilesystem`] as an inode-level [`Filesystem`].
///
/// Every name the kernel has looked up (and not yet forgotten) gets a node
/// id here; ids are never reused, so generations stay 0. A hard link made
/// through the mount shares its file's id, so the kernel caches one inode
/// for both names, as it would natively. A path cannot tell a hard link made
/// elsewhere from a distinct file, so such names get ids of their own (as in
/// libfuse), and the kernel may show stale sizes or link counts for them
/// until the attribute timeout.
///
/// The whole table sits behind one `RwLock`. It is held only to turn ids
/// into paths or to record a result, never across a call into the
/// filesystem, so it stays short; a rename updates several nodes at once,
/// which a sharded table would make much harder to keep consistent.
///
/// READDIRPLUS: entries come with attributes (and count as lookups, so
/// the kernel needs no LOOKUP for them) when the filesystem's
/// [`readdirplus`](PathFilesystem::readdirplus) gives them, or, with
/// `readdirplus_auto` negotiated, when the kernel asks for a READDIRPLUS
/// past the start of a listing: it does that only after the program
/// looked up entries of the directory since its last batch (`ls -l`,
/// `find -ls`, a walk that stats as it lists), so the adapter looks up
/// the batch's entries itself by `getattr`, one request instead of one per
/// entry ([`PathFilesystem::lookups_in_readdirplus`] turns this off). The
/// first batch, which the kernel always asks for with attributes, gets
/// them only where the filesystem gave them: a plain `ls` costs no
/// getattr. libfuse's high-level library never looks entries up itself.
pub struct PathAdapter<F> {
    fs: F,
    table: RwLock<Table>,
    /// `readdirplus_auto` is in force on the connection (set at init):
    /// a READDIRPLUS past offset 0 then means entries are being looked up.
    plus_auto: AtomicBool,
    /// Under a supervisor: where moved nodes' new keys go (the latest
    /// ledger's; a server may make one ahead of an upgrade, then another).
    keys: Mutex<Option<KeyChanges>>,
}

impl<F> PathAdapter<F> {
    /// Serve `fs`: a [`PathFilesystem`] (the adapter is then a
    /// [`Filesystem`]) or an [`AsyncPathFilesystem`] (the adapter is then an
    /// [`AsyncFilesystem`](crate::fs::AsyncFilesystem), to be served by
    /// [`AsyncAdapter`](crate::fs::AsyncAdapter)).
    pub fn new(fs: F) -> PathAdapter<F> {
        PathAdapter {
            fs,
            table: RwLock::new(Table::new()),
            plus_auto: AtomicBool::new(false),
            keys: Mutex::new(None),
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

    /// A change that may move names: nodes whose primary name moved get
    /// their recovery keys asked for again, once the lock is released
    /// (the ledger reads them through `node_key`, which takes it).
    fn update<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let (r, moved) = {
            let mut t = self.write();
            let r = f(&mut t);
            (r, t.moved.as_mut().map(std::mem::take))
        };
        if let Some(moved) = moved.filter(|m| !m.is_empty()) {
            let keys = self
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(keys) = keys {
                for node in moved {
                    keys.changed(node);
                }
            }
        }
        r
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
    fn register(
        &self,
        parent: NodeId,
        name: &OsStr,
        attr: FileAttr,
        t: &Timeouts,
    ) -> FsResult<Entry> {
        let node = self.update(|t| t.register(parent, name, &attr))?;
        Ok(Entry::new(node, attr, t))
    }

    /// "." and ".." arrive only from NFS export (`..` finds a parent); they
    /// name nodes that already exist: which one, and its path.
    fn dots(&self, dir: NodeId, dotdot: bool) -> FsResult<(NodeId, PathBuf)> {
        let t = self.read();
        let node = if dotdot { t.node(dir)?.parent } else { dir };
        Ok((node, t.path(node, false)?))
    }

    /// A lookup of "." or ".." still counts as a lookup.
    fn dots_entry(&self, node: NodeId, attr: FileAttr, t: &Timeouts) -> FsResult<Entry> {
        self.write()
            .nodes
            .get_mut(&node)
            .ok_or(Errno::ENOENT)?
            .nlookup += 1;
        Ok(Entry::new(node, attr, t))
    }

    /// A failed lookup: the name may have vanished behind the kernel's back
    /// (the filesystem changed on its own), so drop our mapping and a file
    /// appearing there later gets a fresh node; then ENOENT, or a negative
    /// entry the kernel may cache.
    fn not_found(&self, parent: NodeId, name: &OsStr, t: &Timeouts) -> FsResult<Entry> {
        self.update(|t| t.detach_name(parent, name));
        match t.negative {
            ttl if ttl.is_zero() => Err(Errno::ENOENT),
            ttl => Ok(Entry::negative(ttl)),
        }
    }

    /// Remember whether READDIRPLUS batches past the first mean lookups.
    fn negotiated(&self, conn: &Connection) {
        use fusebox_abi::flags::init as f;
        let on = conn.want & !conn.refused & conn.kernel_flags;
        let auto = f::DO_READDIRPLUS | f::READDIRPLUS_AUTO;
        self.plus_auto.store(on & auto == auto, Ordering::Relaxed);
    }

    /// `node` is reachable, by `path`.
    fn still_at(&self, node: NodeId, path: &Path) -> bool {
        self.path(node, false).is_ok_and(|p| p == path)
    }

    /// Whether this READDIRPLUS should look up the entries listed
    /// without attributes (see [`PathAdapter`]).
    fn plus_lookups(&self, offset: u64, allowed: bool) -> bool {
        offset != 0 && allowed && self.plus_auto.load(Ordering::Relaxed)
    }

    /// Answer a READDIRPLUS batch: entries with attributes are registered
    /// (a lookup reference each, as the kernel counts them) when the
    /// directory still has a name to hang them from; the rest, and "."
    /// and "..", go out without (node 0, no reference).
    fn answer_plus(
        &self,
        dir: NodeId,
        named: bool,
        listed: Vec<PlusListed>,
        ids_as_inos: bool,
        t: &Timeouts,
        out: &mut DirEntries<'_, '_>,
    ) {
        for l in listed {
            let entry = l
                .attr
                .filter(|_| named && !is_dot_or_dotdot(&l.name))
                .and_then(|attr| {
                    let node = self.update(|table| table.register_listed(dir, &l.name, &attr))?;
                    Some(Entry::new(node, attr, t))
                });
            // Each record was counted in with its attributes' room, so
            // neither push can find the buffer full.
            match entry {
                Some(mut e) => {
                    if ids_as_inos {
                        e.attr.ino = e.node.0;
                    }
                    out.push_plus(&e, l.next, &l.name);
                }
                None => {
                    out.push(l.ino, l.next, l.kind, &l.name);
                }
            }
        }
    }

    /// Unlink, rmdir and rename succeeded: move the names the same way.
    fn renamed(&self, args: &Rename) {
        let exchange = args.flags & libc::RENAME_EXCHANGE != 0;
        self.update(|t| {
            t.rename(
                args.parent,
                args.name,
                args.new_parent,
                args.new_name,
                exchange,
            )
        });
    }
}

/// The offsets a listing hands the kernel: the filesystem's own (`next`
/// != 0) as they are; otherwise entries are counted and the first `skip`
/// dropped (a filesystem that re-lists from the start every call).
struct Numbering {
    counted: u64,
    skip: u64,
}

impl Numbering {
    fn new(skip: u64) -> Self {
        Numbering { counted: 0, skip }
    }

    /// The entry's offset for the kernel, or `None` to drop it.
    fn next(&mut self, next: u64) -> Option<u64> {
        if next != 0 {
            return Some(next);
        }
        self.counted += 1;
        (self.counted > self.skip).then_some(self.counted)
    }
}

/// READDIR's filler.
fn dir_filler<'o, 'a, 'b>(
    out: &'o mut DirEntries<'a, 'b>,
    skip: u64,
) -> impl FnMut(&OsStr, FileType, u64, u64) -> bool + Send + use<'o, 'a, 'b> {
    let (mut numbering, mut full) = (Numbering::new(skip), false);
    // Once an entry is refused every later one is: a shorter name taken
    // after it would leave it out of the listing for good.
    move |name: &OsStr, kind: FileType, ino: u64, next: u64| -> bool {
        if full {
            return false;
        }
        match numbering.next(next) {
            Some(next) => {
                let ino = if ino == 0 { UNKNOWN_INO } else { ino };
                full = !out.push(ino, next, kind, name);
                !full
            }
            None => true,
        }
    }
}

/// An entry of a READDIRPLUS batch, kept until the filesystem's listing
/// returned: lookups (the table's lock, getattr) never run inside it.
struct PlusListed {
    name: std::ffi::OsString,
    kind: FileType,
    ino: u64,
    next: u64,
    attr: Option<FileAttr>,
}

/// READDIRPLUS's filler: takes entries while their records (with room
/// for attributes) fit in `room` bytes, so every one kept can be answered
/// with its lookup.
fn plus_filler<'l>(
    listed: &'l mut Vec<PlusListed>,
    mut room: usize,
    skip: u64,
) -> impl FnMut(&OsStr, FileType, u64, u64, Option<&FileAttr>) -> bool + Send + use<'l> {
    let mut numbering = Numbering::new(skip);
    move |name: &OsStr, kind: FileType, ino: u64, next: u64, attr: Option<&FileAttr>| -> bool {
        let Some(next) = numbering.next(next) else {
            return true;
        };
        let len = DirEntries::record_len(true, name);
        if len > room {
            // As in `dir_filler`: nothing after a refusal.
            room = 0;
            return false;
        }
        room -= len;
        listed.push(PlusListed {
            name: name.to_owned(),
            kind,
            ino: if ino == 0 { UNKNOWN_INO } else { ino },
            next,
            attr: attr.copied(),
        });
        true
    }
}

fn is_dot_or_dotdot(name: &OsStr) -> bool {
    name == OsStr::new(".") || name == OsStr::new("..")
}

/// The entries of a batch a lookup of the adapter's own would complete.
fn without_attributes(listed: &mut [PlusListed]) -> impl Iterator<Item = &mut PlusListed> {
    listed
        .iter_mut()
        .filter(|l| l.attr.is_none() && !is_dot_or_dotdot(&l.name))
}

/// The RELEASE of a handle created but never given to the kernel (the
/// CREATE failed after the file was made), so nobody else would release it.
fn unseen_release(opened: &Opened, args: &Create) -> Release {
    Release {
        fh: opened.fh,
        flags: args.flags,
        flush: false,
        flock_unlock: false,
        lock_owner: 0,
        forget_follows: false,
    }
}

impl<F: PathFilesystem> PathAdapter<F> {
    fn entry(&self, parent: NodeId, name: &OsStr, attr: FileAttr) -> FsResult<Entry> {
        let mut e = self.register(parent, name, attr, &self.fs.timeouts())?;
        if self.fs.node_ids_as_inos() {
            e.attr.ino = e.node.0;
        }
        Ok(e)
    }

    fn attr_reply(&self, node: NodeId, mut attr: FileAttr) -> AttrReply {
        if self.fs.node_ids_as_inos() {
            attr.ino = node.0;
        }
        AttrReply {
            attr,
            ttl: self.fs.timeouts().attr,
        }
    }

    fn lookup_dots(&self, ctx: &Ctx, dir: NodeId, dotdot: bool) -> FsResult<Entry> {
        let (node, path) = self.dots(dir, dotdot)?;
        let mut attr = self.fs.getattr(ctx, &path, None)?;
        if self.fs.node_ids_as_inos() {
            attr.ino = node.0;
        }
        self.dots_entry(node, attr, &self.fs.timeouts())
    }
}

impl<F: PathFilesystem> Filesystem for PathAdapter<F> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.fs.init(conn, notifier)?;
        self.negotiated(conn);
        Ok(())
    }

    fn destroy(&self) {
        self.fs.destroy()
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if is_dot_or_dotdot(name) {
            return self.lookup_dots(ctx, parent, name == OsStr::new(".."));
        }
        let path = self.child_path(parent, name)?;
        match self.fs.getattr(ctx, &path, None) {
            Ok(attr) => self.entry(parent, name, attr),
            Err(Errno::ENOENT) => self.not_found(parent, name, &self.fs.timeouts()),
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
        let (path, fh) = self.read().path_with_fh(node, fh)?;
        Ok(self.attr_reply(node, self.fs.getattr(ctx, &path, fh)?))
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        let (path, fh) = self.read().path_with_fh(node, attr.fh)?;
        let attr = SetAttr { fh, ..*attr };
        Ok(self.attr_reply(node, self.fs.setattr(ctx, &path, &attr)?))
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
        self.update(|t| t.detach_name(parent, name));
        Ok(())
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.fs.rmdir(ctx, &self.child_path(parent, name)?)?;
        self.update(|t| t.detach_name(parent, name));
        Ok(())
    }

    fn rename(&self, ctx: &Ctx, args: &Rename) -> FsResult<()> {
        let from = self.child_path(args.parent, args.name)?;
        let to = self.child_path(args.new_parent, args.new_name)?;
        self.fs.rename(ctx, &from, &to, args.flags)?;
        self.renamed(args);
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
        let t = self.fs.timeouts();
        let id = self.update(|t| t.link(node, new_parent, new_name, &attr))?;
        Ok(Entry::new(id, attr, &t))
    }

    fn open(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        let opened = self.fs.open(ctx, &self.path(node, false)?, args)?;
        self.write().opened(node, opened.fh);
        Ok(opened)
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
        let path = self.path(node, true)?;
        self.write().released(node, args.fh);
        self.fs.release(ctx, &path, args)
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
        out: &mut DirEntries<'_, '_>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        let mut filler = dir_filler(out, args.offset);
        self.fs
            .readdir(ctx, &path, args.fh, args.offset, &mut filler)
    }

    fn readdirplus(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, '_>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        let mut listed = Vec::new();
        {
            let mut filler = plus_filler(&mut listed, out.remaining(), args.offset);
            self.fs
                .readdirplus(ctx, &path, args.fh, args.offset, &mut filler)?;
        }
        // Only a directory the kernel still reaches by the path it was
        // listed under gets entries: an unlinked or moved one's path may
        // name something else now (checked again after the lookups).
        let named = self.still_at(node, &path);
        if named && self.plus_lookups(args.offset, self.fs.lookups_in_readdirplus()) {
            for l in without_attributes(&mut listed) {
                l.attr = self.fs.getattr(ctx, &path.join(&l.name), None).ok();
            }
        }
        let named = named && self.still_at(node, &path);
        let t = self.fs.timeouts();
        self.answer_plus(node, named, listed, self.fs.node_ids_as_inos(), &t, out);
        Ok(())
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
            Ok(entry) => {
                self.write().opened(entry.node, opened.fh);
                Ok((entry, opened))
            }
            Err(e) => {
                let _ = self.fs.release(ctx, &path, &unseen_release(&opened, args));
                Err(e)
            }
        }
    }

    fn ioctl(&self, ctx: &Ctx, node: NodeId, args: &Ioctl, out: &mut DataOut) -> FsResult<i32> {
        self.fs.ioctl(ctx, &self.path(node, true)?, args, out)
    }

    fn poll(&self, ctx: &Ctx, node: NodeId, args: &Poll) -> FsResult<u32> {
        self.fs.poll(ctx, &self.path(node, true)?, args)
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

    // Recovery: a node is found again by its parent's id and its name,
    // which the next server's table is rebuilt from; a rename or unlink
    // changes that, and is reported (`update`).

    fn node_key(&self, node: NodeId) -> Option<Vec<u8>> {
        let t = self.read();
        table::encode_key(t.nodes.get(&node)?, MAX_KEY)
    }

    fn restore_node(&self, node: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        let (names, kind) = table::decode_key(key)?;
        self.write().restore(node, names, kind, nlookup);
        Ok(())
    }

    /// Only a file some name still leads to can be opened again: the last
    /// path of an unlinked one may name another file by now.
    fn restore_handle(&self, handle: &HandleRecord) -> FsResult<()> {
        let node = NodeId(handle.node);
        let path = self.path(node, false)?;
        self.fs.restore_handle(&path, handle)?;
        if !handle.dir {
            self.write().opened(node, FileHandle(handle.fh));
        }
        Ok(())
    }

    fn adopt_held_area(&self, area: crate::sys::shared_map::SharedMap) {
        self.fs.adopt_held_area(area);
    }

    fn restored(&self) {
        self.fs.restored();
    }

    fn drop_cached_data(&self, node: NodeId) {
        // A node gone meanwhile has nothing to drop.
        let path = self.read().path(node, false);
        if let Ok(path) = path {
            self.fs.drop_cached_data(&path);
        }
    }

    fn quiesce(&self) -> std::io::Result<()> {
        self.fs.quiesce()
    }

    fn quiesce_abandoned(&self) {
        self.fs.quiesce_abandoned();
    }

    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        self.fs.counters()
    }

    /// By path, without registering the name (or detaching it when it is
    /// gone): the journal's look must not move the table.
    fn probe(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<u64> {
        let path = self.child_path(parent, name)?;
        Ok(self.fs.getattr(ctx, &path, None)?.ino)
    }

    /// The table restored from the ledger may predate the change (the old
    /// server died between making it and recording it): make it now, once.
    fn applied_before_crash(&self, change: &AppliedChange<'_>) {
        match change {
            AppliedChange::Removed { parent, name } => {
                self.update(|t| t.detach_name(*parent, name));
            }
            // Whether the table swapped already cannot be told from the
            // names (both exist either way): unmap both, so the two nodes
            // fail (ENOENT) rather than reach each other's file, and the
            // next lookups map the names afresh.
            AppliedChange::Renamed(args) if args.flags & libc::RENAME_EXCHANGE != 0 => {
                self.update(|t| {
                    t.detach_name(args.parent, args.name);
                    t.detach_name(args.new_parent, args.new_name);
                });
            }
            // Mirrored already if the source name is free in the table.
            AppliedChange::Renamed(args) => {
                self.update(|t| {
                    if t.child(args.parent, args.name).is_some() {
                        t.rename(
                            args.parent,
                            args.name,
                            args.new_parent,
                            args.new_name,
                            false,
                        );
                    }
                });
            }
        }
    }

    fn track_key_changes(&self, changes: KeyChanges) {
        self.write().moved.get_or_insert_with(Vec::new);
        *self.keys.lock().unwrap_or_else(PoisonError::into_inner) = Some(changes);
    }
}
