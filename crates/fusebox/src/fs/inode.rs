//! The inode-level filesystem API: the only one dispatch calls.

use std::ffi::OsStr;

use super::ops::*;
use crate::error::{Errno, FsResult};
use crate::protocol::{Connection, DataOut, DirEntries, Notifier};
use crate::types::*;

/// A filesystem addressed by node ids, like libfuse's `fuse_lowlevel_ops`.
///
/// Every method has a default: ENOSYS for operations (the kernel then stops
/// asking, or falls back where it can), success for the few bookkeeping
/// calls the kernel does not wait on. Methods run concurrently on the
/// session's worker threads, hence `&self` and `Sync`.
///
/// Lookup counting: every successful `lookup`, `mknod`, `mkdir`, `symlink`,
/// `link`, `create`, `tmpfile`, and every READDIRPLUS entry with a non-zero
/// node (other than "." and "..") takes one reference on the node; `forget`
/// gives back `nlookup` of them. A node may be dropped once its count is 0.
#[allow(unused_variables)]
pub trait Filesystem: Send + Sync + 'static {
    /// Called once with what the kernel offers; adjust `conn.want` and
    /// limits here. `notifier` stays valid for the session's life.
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        Ok(())
    }

    /// The kernel is done with the filesystem (unmount).
    fn destroy(&self) {}

    /// Find `name` in the directory `parent`. A successful answer takes a
    /// lookup reference on the node; a negative [`Entry`] (node 0) lets the
    /// kernel remember that the name does not exist.
    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        Err(Errno::ENOSYS)
    }

    /// The kernel dropped `nlookup` references to `node`; it gets no answer.
    fn forget(&self, node: NodeId, nlookup: u64) {}

    /// Several forgets in one request; the default calls `forget` for each.
    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        for (node, n) in nodes {
            self.forget(node, n);
        }
    }

    /// The node's attributes for stat(2); `fh` is set when the call came
    /// through an open file (fstat(2)).
    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        Err(Errno::ENOSYS)
    }

    /// Change what `attr` names (chmod, chown, truncate, utimes) and return
    /// the attributes that result.
    fn setattr(&self, ctx: &Ctx, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        Err(Errno::ENOSYS)
    }

    /// Write the link target into `out`.
    fn readlink(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Create `name` in `parent` as a symbolic link to `target`.
    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        Err(Errno::ENOSYS)
    }

    /// Create a device node, FIFO, socket or regular file `name` in `parent`
    /// (regular files too when `create` answers ENOSYS).
    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mknod) -> FsResult<Entry> {
        Err(Errno::ENOSYS)
    }

    /// Create the directory `name` in `parent`.
    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mkdir) -> FsResult<Entry> {
        Err(Errno::ENOSYS)
    }

    /// Remove the non-directory `name` from `parent`. The node itself lives
    /// on while the kernel holds references to it.
    fn unlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Remove the empty directory `name` from `parent`.
    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Move a name, replacing what the target name held unless `args.flags`
    /// says otherwise (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
    fn rename(&self, ctx: &Ctx, args: &Rename) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Make `new_name` in `new_parent` another name for `node` (a hard link).
    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        Err(Errno::ENOSYS)
    }

    /// ENOSYS here, when the kernel offers no_open support, makes every
    /// later open of any file skip the daemon.
    fn open(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        Err(Errno::ENOSYS)
    }

    /// Put at most `args.size` bytes into `out`; fewer means end of file.
    fn read(&self, ctx: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Returns the number of bytes written.
    fn write(&self, ctx: &Ctx, node: NodeId, args: &Write) -> FsResult<u32> {
        Err(Errno::ENOSYS)
    }

    /// Each close(2) of a descriptor for the open file `fh` (there may be
    /// several, after dup(2) or fork(2)); the error returned is close's.
    /// `lock_owner`'s POSIX locks on the file go with it. ENOSYS: the kernel
    /// stops sending FLUSH.
    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// The last reference to the open file `args.fh` is gone: free what
    /// `open` set up. Nobody sees the answer.
    fn release(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        Ok(())
    }

    /// Make the file's data, and unless `datasync` its attributes, durable.
    /// ENOSYS: the kernel stops asking and fsync(2) succeeds.
    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Open a directory for listing; the handle comes back in `readdir` and
    /// `releasedir`. ENOSYS, when the kernel offers no_opendir support, makes
    /// every later opendir skip the daemon.
    fn opendir(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        Err(Errno::ENOSYS)
    }

    /// Fill `out` with entries after `offset` (0 = from the start).
    fn readdir(&self, ctx: &Ctx, node: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Like `readdir`, with each entry's lookup answer. The default serves
    /// plain entries (the kernel then looks names up itself).
    fn readdirplus(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries,
    ) -> FsResult<()> {
        self.readdir(ctx, node, args, out)
    }

    /// The last reference to the open directory `args.fh` is gone, as
    /// `release` for files.
    fn releasedir(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        Ok(())
    }

    /// fsync(2) on a directory: make its entries durable. ENOSYS: the kernel
    /// stops asking.
    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Figures for statfs(2). The default reports an empty filesystem that
    /// takes 255-byte names.
    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        Ok(Statfs {
            namelen: 255,
            bsize: 512,
            frsize: 512,
            ..Default::default()
        })
    }

    /// Set an extended attribute. ENOSYS: the kernel stops asking and
    /// setxattr(2) fails with EOPNOTSUPP.
    fn setxattr(&self, ctx: &Ctx, node: NodeId, args: &Setxattr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Write the whole value into `out`; dispatch answers size queries and
    /// ERANGE from its length.
    fn getxattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Write all names, each NUL-terminated, into `out`.
    fn listxattr(&self, ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Remove the extended attribute `name`; ENODATA if it is not set.
    fn removexattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// access(2)'s check of `mask` (`R_OK`, `W_OK`, `X_OK` bits, or `F_OK`),
    /// sent only on mounts without `default_permissions`. ENOSYS: the kernel
    /// stops asking and takes every later check as passed.
    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Create and open a regular file. ENOSYS makes the kernel fall back to
    /// mknod + open.
    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        Err(Errno::ENOSYS)
    }

    /// True if [`create`](Filesystem::create) does what open(2) with
    /// O_CREAT does when the name exists by the time it runs: opens it
    /// (truncated under O_TRUNC), fails with EEXIST under O_EXCL, with
    /// ELOOP where the name is a symlink and `args.flags` has O_NOFOLLOW,
    /// and with EISDIR for a directory. Direct mode then makes an
    /// O_CREAT open one call, where a lookup and a create took two (the
    /// kernel sends CREATE only after a negative lookup and never relies
    /// on this).
    fn create_opens_existing(&self) -> bool {
        false
    }

    /// The lock that would keep `lock` from being taken, or one of type
    /// `F_UNLCK` if none. The kernel sends lock requests only to a
    /// filesystem that enabled `POSIX_LOCKS` in `init`; otherwise it keeps
    /// locks itself.
    fn getlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock) -> FsResult<LockInfo> {
        Err(Errno::ENOSYS)
    }

    /// Take or release a lock; `sleep` for F_SETLKW (may block this worker).
    fn setlk(&self, ctx: &Ctx, node: NodeId, lock: &Lock, sleep: bool) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// The device block holding block `block` (of `blocksize` bytes) of the
    /// file, for FIBMAP on a filesystem over a block device.
    fn bmap(&self, ctx: &Ctx, node: NodeId, block: u64, blocksize: u32) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// Returns the ioctl's result; output data goes into `out`.
    fn ioctl(&self, ctx: &Ctx, node: NodeId, args: &Ioctl, out: &mut DataOut) -> FsResult<i32> {
        Err(Errno::ENOSYS)
    }

    /// Returns the ready events.
    fn poll(&self, ctx: &Ctx, node: NodeId, args: &Poll) -> FsResult<u32> {
        Err(Errno::ENOSYS)
    }

    /// Allocate, zero or punch out the range `args` names (fallocate(2)).
    fn fallocate(&self, ctx: &Ctx, node: NodeId, args: &Fallocate) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Returns the new offset (SEEK_DATA / SEEK_HOLE).
    fn lseek(&self, ctx: &Ctx, node: NodeId, args: &Lseek) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// Returns the number of bytes copied.
    fn copy_file_range(&self, ctx: &Ctx, args: &CopyFileRange) -> FsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// syncfs(2) on the mount: make everything the filesystem holds durable.
    fn syncfs(&self, ctx: &Ctx) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// An unnamed file in `parent` (O_TMPFILE).
    fn tmpfile(&self, ctx: &Ctx, parent: NodeId, args: &Create) -> FsResult<(Entry, Opened)> {
        Err(Errno::ENOSYS)
    }

    /// ENOSYS makes the kernel use `getattr` for statx(2) instead.
    fn statx(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Statx,
    ) -> FsResult<(fusebox_abi::Statx, std::time::Duration)> {
        Err(Errno::ENOSYS)
    }

    // ------------------------------------------------------------ recovery
    // (see `fusebox::recovery`): a filesystem that implements these three
    // survives its server's crash under a supervised mount.

    /// What identifies `node` well enough to find it again in a new
    /// process (a kernel file handle; a parent id and a name), at most
    /// `fs::recoverable::MAX_KEY` bytes; None: it cannot be found again.
    /// Called when the kernel is first given the node.
    fn node_key(&self, node: NodeId) -> Option<Vec<u8>> {
        None
    }

    /// In a new server, before it serves: `node` is known to the kernel
    /// with `nlookup` references, by the key `node_key` gave. Nodes come in
    /// no particular order. Later node ids must not reuse restored ones.
    fn restore_node(&self, node: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// In a new server, after every node: the kernel holds `handle` open;
    /// reopen it under the same number (and reuse its passthrough backing
    /// id, which lives in the kernel). Later handles must not reuse it.
    fn restore_handle(&self, handle: &crate::fs::recoverable::HandleRecord) -> FsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// Crash recovery's journal, before and after a non-idempotent
    /// request: the inode number `name` in `parent` has now (ENOENT: no
    /// such name), without handing the kernel a reference or changing
    /// what the filesystem knows. The default looks up and forgets at
    /// once; a filesystem whose lookup records names overrides it.
    fn probe(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<u64> {
        let e = self.lookup(ctx, parent, name)?;
        if e.node.0 == 0 {
            return Err(Errno::ENOENT);
        }
        self.forget(e.node, 1);
        Ok(e.attr.ino)
    }

    /// Crash recovery: the previous server applied `change` and died
    /// before answering; it is answered now without being applied again.
    /// A filesystem that keeps names in memory (the path-level adapter's
    /// table, restored from keys the old server may not have updated yet)
    /// brings them in line, as if it had just made the change itself.
    fn applied_before_crash(&self, change: &crate::fs::recoverable::AppliedChange<'_>) {}

    /// A supervised session starts: if this filesystem's node keys can
    /// change while the kernel holds the node (a rename moving a node
    /// named by parent and name), keep `changes` and report each change.
    fn track_key_changes(&self, changes: crate::fs::recoverable::KeyChanges) {}

    /// True if this filesystem keeps its files in its own process (an
    /// in-memory one). A planned upgrade then hands them over through
    /// [`save_state`](Filesystem::save_state) and
    /// [`load_state`](Filesystem::load_state); a crash loses them, so the
    /// supervisor does not start an empty server under the kernel's nodes
    /// but fails the mount's requests (EIO) and says why.
    fn state_in_process(&self) -> bool {
        false
    }

    /// Planned upgrade, in the old server once it has paused (no request
    /// in flight): write everything the next server needs into `out`.
    /// An error abandons the upgrade; the old server serves on.
    fn save_state(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        Ok(())
    }

    /// Planned upgrade, in the new server before any node or handle is
    /// restored: read what the old one's `save_state` wrote. An error
    /// abandons the upgrade; the old server serves on.
    fn load_state(&self, saved: &mut dyn std::io::Read) -> std::io::Result<()> {
        Ok(())
    }

    /// Supervised, in every server generation before any handle is
    /// restored (an upgrade's successor restores nodes ahead, before it
    /// gets the area): memory the supervisor holds for this filesystem
    /// (`SupervisorConfig::held_area` bytes, zeroed at first), the same
    /// pages in every generation. What one server wrote there is there
    /// for the next after a crash: work answered but not finished (sftpfs
    /// keeps its unconfirmed writes there).
    fn adopt_held_area(&self, area: crate::sys::shared_map::SharedMap) {}

    /// The application let go of the file's cached data
    /// (posix_fadvise POSIX_FADV_DONTNEED). Only direct mode calls it:
    /// there a filesystem's own cache of file data (sftpfs's) stands where
    /// the kernel's page cache is on a mount, and the kernel drops clean
    /// pages on that advice, so a program that asks for cold reads (fio,
    /// at every pass over its file) gets them in both.
    fn drop_cached_data(&self, node: NodeId) {}

    /// Supervised, in a new server after every node and handle is
    /// restored and before any request is served (the kernel's resent
    /// ones included): finish what a previous server left in the held
    /// area.
    fn restored(&self) {}

    /// Planned upgrade, in the old server once its workers paused, before
    /// the next one takes over: finish background work the next server
    /// would otherwise do again at the same time (sftpfs waits for its
    /// writes to be confirmed). An error abandons the upgrade; the old
    /// server serves on.
    fn quiesce(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// The planned upgrade [`quiesce`](Self::quiesce) prepared for was
    /// abandoned: this server serves on, so take up the background work
    /// quiesce stopped. Also called when the pause failed before
    /// quiesce, and possibly twice: doing nothing then must be safe.
    fn quiesce_abandoned(&self) {}

    /// What `fusebox stats` and direct mode's `--stats` show of the
    /// filesystem itself: requests it sent on, cache hits and misses,
    /// memory it holds. Called on the stats thread while requests are
    /// served: read counters, hold no lock a request may hold for long.
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        Vec::new()
    }
}
