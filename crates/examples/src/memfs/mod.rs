//! `MemFs`: an in-memory filesystem on the inode-level [`Filesystem`] trait.
//!
//! It follows tmpfs closely enough to be compared against a native tmpfs
//! directory and to pass pjdfstest under `-o default_permissions` (the kernel
//! checks permissions; this code keeps ownership, modes and times right).
//!
//! Locking: one `RwLock<State>` guards the inode table and all metadata.
//! That serializes namespace changes, which is acceptable for an example.
//! File bytes live behind a per-file `RwLock<Content>`, so reads and writes
//! copy data without holding the table lock. The order is always table, then
//! content; nothing waits for the table while holding a content lock, so the
//! two cannot deadlock.
//!
//! Inode numbers are never reused (a counter), which is why every entry can
//! carry generation 0.

mod data;
mod saved;
mod table;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use fusebox::error::{Errno, FsResult};
use fusebox::fs::ops::*;
use fusebox::fs::Filesystem;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::types::*;

use self::data::{Content, Usage, MAX_FILE_SIZE, PAGE};
use self::table::{listing, Dir, Inode, Kind, State};

const ROOT: u64 = NodeId::ROOT.0;
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
/// tmpfs reports a directory's size as 20 bytes per entry, "." and ".." included.
const BOGO_DIRENT: u64 = 20;
/// Readdir offsets: "." is followed by 1, ".." by 2, real entries start at 3.
const FIRST_COOKIE: u64 = 3;
const S_IFMT: u32 = libc::S_IFMT;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_ISUID: u32 = libc::S_ISUID;
const S_ISGID: u32 = libc::S_ISGID;
const S_IXGRP: u32 = libc::S_IXGRP;

/// Reading a poisoned lock still yields consistent-enough state here (every
/// mutation is a few field writes), and a filesystem must not panic forever
/// after one bug.
fn rlock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn wlock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

fn check_name(name: &OsStr) -> FsResult<()> {
    if name.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

/// What the kernel's "kill suid/sgid" means: setuid always goes; setgid only
/// when group-execute is set (without it, setgid marks mandatory locking).
fn kill_suidgid(attr: &mut FileAttr) {
    attr.mode &= !S_ISUID;
    if attr.mode & S_IXGRP != 0 {
        attr.mode &= !S_ISGID;
    }
}

/// An in-memory filesystem. See the module documentation.
pub struct MemFs {
    state: RwLock<State>,
    usage: Arc<Usage>,
    timeouts: Timeouts,
}

/// Half of physical memory, tmpfs's default size.
fn default_capacity() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        let line = s.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
        line.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    });
    total.map_or(8 << 30, |kb| kb.saturating_mul(1024) / 2)
}

/// Who may change what (the kernel's setattr_prepare rules), checked here
/// too: without default_permissions nothing checks before us, and a user's
/// own mount must not let them give files to root. With it, the kernel has
/// applied the same rules already.
fn may_set(ctx: &Ctx, attr: &FileAttr, a: &SetAttr) -> FsResult<()> {
    if ctx.uid == 0 {
        return Ok(());
    }
    let owner = ctx.uid == attr.uid;
    let in_group = |gid: u32| ctx.gid == gid || in_supplementary_groups(ctx.pid, gid);
    if a.uid.is_some_and(|uid| !owner || uid != attr.uid) {
        return Err(Errno::EPERM);
    }
    if a.gid
        .is_some_and(|gid| !owner || (gid != attr.gid && !in_group(gid)))
    {
        return Err(Errno::EPERM);
    }
    if a.mode.is_some() && !owner {
        return Err(Errno::EPERM);
    }
    let set_to = |t: Option<TimeOrNow>| matches!(t, Some(TimeOrNow::Specific(_)));
    if (set_to(a.atime) || set_to(a.mtime)) && !owner {
        return Err(Errno::EPERM);
    }
    let touch = |t: Option<TimeOrNow>| matches!(t, Some(TimeOrNow::Now));
    if (touch(a.atime) || touch(a.mtime)) && !owner {
        let bits = if in_group(attr.gid) {
            attr.mode >> 3
        } else {
            attr.mode
        };
        if bits & 0o2 == 0 {
            return Err(Errno::EACCES);
        }
    }
    Ok(())
}

/// Whether process `pid` has `gid` among its supplementary groups (FUSE
/// passes only the fsgid; libfuse reads /proc the same way).
fn in_supplementary_groups(pid: u32, gid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

impl MemFs {
    pub fn new(timeouts: Timeouts) -> MemFs {
        Self::with_capacity(timeouts, default_capacity())
    }

    /// A filesystem that holds at most `bytes` of file data (ENOSPC beyond).
    pub fn with_capacity(timeouts: Timeouts, bytes: u64) -> MemFs {
        let now = Timespec::now();
        let attr = FileAttr {
            ino: ROOT,
            atime: now,
            mtime: now,
            ctime: now,
            mode: S_IFDIR | 0o755,
            nlink: 2,
            blksize: PAGE as u32,
            // The user who runs the daemon owns the empty filesystem, as
            // with mkdir: an ordinary user's mount is writable by them.
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            ..FileAttr::default()
        };
        let root = Inode {
            attr,
            kind: Kind::Dir(Dir::new(ROOT)),
            lookups: AtomicU64::new(0),
            opens: 0,
            xattrs: BTreeMap::new(),
        };
        let state = State {
            inodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            next_fh: 1,
            handles: HashMap::new(),
        };
        MemFs {
            state: RwLock::new(state),
            usage: Arc::new(Usage::new(bytes / PAGE)),
            timeouts,
        }
    }

    /// Give the root directory to another owner, e.g. the user who mounts
    /// without allow_other (root-owned 0755 would be read-only to them).
    pub fn with_root_owner(self, uid: u32, gid: u32) -> MemFs {
        {
            let mut st = wlock(&self.state);
            if let Ok(root) = st.get_mut(ROOT) {
                root.attr.uid = uid;
                root.attr.gid = gid;
            }
        }
        self
    }

    fn table(&self) -> RwLockReadGuard<'_, State> {
        rlock(&self.state)
    }

    fn table_mut(&self) -> RwLockWriteGuard<'_, State> {
        wlock(&self.state)
    }

    fn entry(&self, ino: u64, inode: &Inode) -> Entry {
        Entry::new(NodeId(ino), inode.attr(), &self.timeouts)
    }

    fn not_found(&self) -> FsResult<Entry> {
        if self.timeouts.negative.is_zero() {
            Err(Errno::ENOENT)
        } else {
            Ok(Entry::negative(self.timeouts.negative))
        }
    }

    /// The content of a regular file, cloned out so the table lock can be
    /// dropped before touching bytes.
    fn content(&self, ino: u64) -> FsResult<Arc<RwLock<Content>>> {
        match &self.table().get(ino)?.kind {
            Kind::File(c) => Ok(c.clone()),
            Kind::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Content changed: mtime and ctime, and the kernel's kill request.
    fn modified(&self, ino: u64, kill: bool) {
        let now = Timespec::now();
        if let Ok(i) = self.table_mut().get_mut(ino) {
            i.attr.mtime = now;
            i.attr.ctime = now;
            if kill {
                kill_suidgid(&mut i.attr);
            }
        }
    }

    /// relatime, the Linux default (and what tmpfs does): atime moves only
    /// when not newer than mtime/ctime or a day old, so a file read over and
    /// over needs the table's write lock once, not on every read.
    fn accessed(&self, ino: u64) {
        let now = Timespec::now();
        let stale = |a: &FileAttr| {
            a.atime <= a.mtime || a.atime <= a.ctime || now.sec - a.atime.sec >= 86_400
        };
        let update = self.table().get(ino).is_ok_and(|i| stale(&i.attr));
        if update {
            if let Ok(i) = self.table_mut().get_mut(ino) {
                if stale(&i.attr) {
                    i.attr.atime = now;
                }
            }
        }
    }

    /// Make a node owned by the caller. `parent` gives setgid inheritance;
    /// `name` is None for O_TMPFILE. The new node carries one lookup
    /// reference, the one the reply hands to the kernel.
    fn make(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: Option<&OsStr>,
        mode: u32,
        rdev: u32,
        link: Option<&OsStr>,
    ) -> FsResult<Entry> {
        if let Some(name) = name {
            check_name(name)?;
        }
        let ftype = FileType::from_mode(mode).ok_or(Errno::EINVAL)?;
        let mut st = self.table_mut();
        let dir = st.live_dir(parent)?;
        if name.is_some_and(|n| dir.entries.contains_key(n)) {
            return Err(Errno::EEXIST);
        }
        let pattr = st.get(parent)?.attr;
        let mut mode = mode;
        let gid = if pattr.mode & S_ISGID != 0 {
            // BSD group semantics of a setgid directory, which subdirectories inherit.
            if ftype == FileType::Directory {
                mode |= S_ISGID;
            }
            pattr.gid
        } else {
            ctx.gid
        };
        let ino = st.next_ino;
        st.next_ino += 1;
        let now = Timespec::now();
        let kind = match ftype {
            FileType::RegularFile => {
                Kind::File(Arc::new(RwLock::new(Content::new(self.usage.clone()))))
            }
            FileType::Directory => Kind::Dir(Dir::new(parent)),
            FileType::Symlink => Kind::Symlink(link.unwrap_or_default().to_owned()),
            _ => Kind::Special,
        };
        let is_dir = ftype == FileType::Directory;
        let nlink = match (name, is_dir) {
            (None, _) => 0,
            (Some(_), true) => 2,
            (Some(_), false) => 1,
        };
        let rdev = if matches!(ftype, FileType::CharDevice | FileType::BlockDevice) {
            rdev
        } else {
            0
        };
        let attr = FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            mode,
            nlink,
            uid: ctx.uid,
            gid,
            rdev,
            blksize: PAGE as u32,
        };
        let inode = Inode {
            attr,
            kind,
            lookups: AtomicU64::new(1),
            opens: 0,
            xattrs: BTreeMap::new(),
        };
        let entry = self.entry(ino, &inode);
        st.inodes.insert(ino, inode);
        if let Some(name) = name {
            st.dir_mut(parent)?.insert(name, ino, ftype);
            if is_dir {
                st.set_nlink(parent, |n| n.saturating_add(1));
            }
            st.touch(parent, now);
        }
        Ok(entry)
    }

    /// Shared by create and tmpfile: make a regular file and open it.
    fn make_open(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: Option<&OsStr>,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let mode = libc::S_IFREG | (args.mode & 0o7777 & !args.umask);
        let entry = self.make(ctx, parent.0, name, mode, 0, None)?;
        let opened = self.table_mut().open_handle(entry.node.0)?;
        Ok((entry, opened))
    }

    fn remove(&self, parent: NodeId, name: &OsStr, want_dir: bool) -> FsResult<()> {
        check_name(name)?;
        let mut st = self.table_mut();
        let e = *st.dir(parent.0)?.entries.get(name).ok_or(Errno::ENOENT)?;
        let victim = st.get(e.ino)?;
        match (want_dir, victim.is_dir()) {
            (false, true) => return Err(Errno::EISDIR),
            (true, false) => return Err(Errno::ENOTDIR),
            (true, true) if matches!(&victim.kind, Kind::Dir(d) if !d.entries.is_empty()) => {
                return Err(Errno::ENOTEMPTY)
            }
            _ => {}
        }
        let now = Timespec::now();
        st.dir_mut(parent.0)?.remove(name);
        if want_dir {
            st.set_nlink(e.ino, |_| 0);
            st.set_nlink(parent.0, |n| n.saturating_sub(1));
        } else {
            st.set_nlink(e.ino, |n| n.saturating_sub(1));
        }
        st.touch_ctime(e.ino, now);
        st.touch(parent.0, now);
        st.maybe_free(e.ino);
        Ok(())
    }

    fn xattr_node(&self, ino: u64, name: &OsStr) -> FsResult<()> {
        // The namespaces tmpfs stores; "system." would mean ACLs, which this
        // filesystem does not enforce, so refuse rather than pretend.
        let ok = [&b"user."[..], b"trusted.", b"security."]
            .iter()
            .any(|p| name.as_bytes().starts_with(p));
        if name.len() > NAME_MAX {
            return Err(Errno::ERANGE);
        }
        self.table().get(ino)?;
        if ok {
            Ok(())
        } else {
            Err(Errno::EOPNOTSUPP)
        }
    }
}

impl Filesystem for MemFs {
    fn lookup(&self, _ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        check_name(name)?;
        let st = self.table();
        let dir = st.dir(parent.0)?;
        let ino = match name.as_bytes() {
            b"." => parent.0,
            b".." => dir.parent,
            _ => match dir.entries.get(name) {
                Some(e) => e.ino,
                None => return self.not_found(),
            },
        };
        let inode = st.get(ino)?;
        inode.lookups.fetch_add(1, Relaxed);
        Ok(self.entry(ino, inode))
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        let mut st = self.table_mut();
        if let Some(i) = st.inodes.get(&node.0) {
            let n = i.lookups.load(Relaxed).saturating_sub(nlookup);
            i.lookups.store(n, Relaxed);
            st.maybe_free(node.0);
        }
    }

    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        let mut st = self.table_mut();
        for (node, nlookup) in nodes {
            if let Some(i) = st.inodes.get(&node.0) {
                let n = i.lookups.load(Relaxed).saturating_sub(nlookup);
                i.lookups.store(n, Relaxed);
                st.maybe_free(node.0);
            }
        }
    }

    fn getattr(&self, _ctx: &Ctx, node: NodeId, _fh: Option<FileHandle>) -> FsResult<AttrReply> {
        let attr = self.table().get(node.0)?.attr();
        Ok(AttrReply {
            attr,
            ttl: self.timeouts.attr,
        })
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, a: &SetAttr) -> FsResult<AttrReply> {
        let mut st = self.table_mut();
        let inode = st.get_mut(node.0)?;
        may_set(ctx, &inode.attr, a)?;
        let now = Timespec::now();
        // After the permission check, the size is the only change that can
        // fail, so it goes first and a failed request changes nothing.
        if let Some(size) = a.size {
            let Kind::File(c) = &inode.kind else {
                return Err(if inode.is_dir() {
                    Errno::EISDIR
                } else {
                    Errno::EINVAL
                });
            };
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            wlock(c).truncate(size);
            inode.attr.mtime = now;
            if a.kill_suidgid {
                kill_suidgid(&mut inode.attr);
            }
        }
        if let Some(mode) = a.mode {
            let mut mode = mode & 0o7777;
            // chmod(2) by an owner outside the file's group cannot set setgid.
            if ctx.uid != 0
                && ctx.gid != inode.attr.gid
                && !in_supplementary_groups(ctx.pid, inode.attr.gid)
            {
                mode &= !S_ISGID;
            }
            inode.attr.mode = (inode.attr.mode & S_IFMT) | mode;
        }
        if a.uid.is_some() || a.gid.is_some() {
            inode.attr.uid = a.uid.unwrap_or(inode.attr.uid);
            inode.attr.gid = a.gid.unwrap_or(inode.attr.gid);
            // Linux drops setuid (and group-executable setgid) on chown of
            // anything but a directory, whoever asks; tmpfs does the same.
            if !inode.is_dir() {
                kill_suidgid(&mut inode.attr);
            }
            // A non-root owner giving a non-executable setgid file to a group
            // they are not in loses the bit too (the kernel's in_group check).
            if ctx.uid != 0
                && !inode.is_dir()
                && inode.attr.mode & S_ISGID != 0
                && ctx.gid != inode.attr.gid
                && !in_supplementary_groups(ctx.pid, inode.attr.gid)
            {
                inode.attr.mode &= !S_ISGID;
            }
        }
        let resolve = |t: TimeOrNow| match t {
            TimeOrNow::Now => now,
            TimeOrNow::Specific(t) => t,
        };
        if let Some(t) = a.atime {
            inode.attr.atime = resolve(t);
        }
        if let Some(t) = a.mtime {
            inode.attr.mtime = resolve(t);
        }
        // Every attribute change is a metadata change.
        inode.attr.ctime = a.ctime.unwrap_or(now);
        Ok(AttrReply {
            attr: inode.attr(),
            ttl: self.timeouts.attr,
        })
    }

    fn readlink(&self, _ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        match &self.table().get(node.0)?.kind {
            Kind::Symlink(t) => {
                out.extend_from_slice(t.as_bytes());
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        if target.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.make(
            ctx,
            parent.0,
            Some(name),
            libc::S_IFLNK | 0o777,
            0,
            Some(target),
        )
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mknod) -> FsResult<Entry> {
        // mknod(2) with no type bits means a regular file.
        let ftype = if args.mode & S_IFMT == 0 {
            libc::S_IFREG
        } else {
            args.mode & S_IFMT
        };
        if ftype == S_IFDIR || ftype == libc::S_IFLNK {
            return Err(Errno::EINVAL);
        }
        self.make(
            ctx,
            parent.0,
            Some(name),
            ftype | (args.mode & 0o7777 & !args.umask),
            args.rdev,
            None,
        )
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, args: &Mkdir) -> FsResult<Entry> {
        // mkdir(2) keeps only permissions and the sticky bit; setgid comes
        // from the parent alone.
        self.make(
            ctx,
            parent.0,
            Some(name),
            S_IFDIR | (args.mode & 0o1777 & !args.umask),
            0,
            None,
        )
    }

    fn unlink(&self, _ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.remove(parent, name, false)
    }

    fn rmdir(&self, _ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        self.remove(parent, name, true)
    }

    fn rename(&self, _ctx: &Ctx, a: &Rename) -> FsResult<()> {
        check_name(a.name)?;
        check_name(a.new_name)?;
        let (noreplace, exchange) = (
            a.flags & libc::RENAME_NOREPLACE != 0,
            a.flags & libc::RENAME_EXCHANGE != 0,
        );
        // RENAME_WHITEOUT (overlayfs) is not supported.
        if a.flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0
            || (noreplace && exchange)
        {
            return Err(Errno::EINVAL);
        }
        let (parent, new_parent) = (a.parent.0, a.new_parent.0);
        let mut st = self.table_mut();
        let src = *st.dir(parent)?.entries.get(a.name).ok_or(Errno::ENOENT)?;
        let dst = st.live_dir(new_parent)?.entries.get(a.new_name).copied();
        match dst {
            None if exchange => return Err(Errno::ENOENT),
            Some(_) if noreplace => return Err(Errno::EEXIST),
            // Two names of one inode: POSIX says do nothing and succeed.
            Some(d) if d.ino == src.ino => return Ok(()),
            _ => {}
        }
        let src_dir = src.kind == FileType::Directory;
        let dst_dir = dst.is_some_and(|d| d.kind == FileType::Directory);
        // A directory cannot move below itself (for an exchange, in either direction).
        if parent != new_parent
            && ((src_dir && st.is_ancestor(src.ino, new_parent))
                || (exchange && dst_dir && dst.is_some_and(|d| st.is_ancestor(d.ino, parent))))
        {
            return Err(Errno::EINVAL);
        }
        let now = Timespec::now();
        if let (true, Some(d)) = (exchange, dst) {
            // Swap the targets in place; each name keeps its cookie.
            if let Some(e) = st.dir_mut(parent)?.entries.get_mut(a.name) {
                (e.ino, e.kind) = (d.ino, d.kind);
            }
            if let Some(e) = st.dir_mut(new_parent)?.entries.get_mut(a.new_name) {
                (e.ino, e.kind) = (src.ino, src.kind);
            }
            if parent != new_parent {
                if let Ok(Kind::Dir(sd)) = st.get_mut(src.ino).map(|i| &mut i.kind) {
                    sd.parent = new_parent;
                }
                if let Ok(Kind::Dir(dd)) = st.get_mut(d.ino).map(|i| &mut i.kind) {
                    dd.parent = parent;
                }
                // Each ".." moved with its directory.
                let moved_in = src_dir as i64 - dst_dir as i64;
                let adjust = |n: u32, by: i64| (n as i64 + by).clamp(0, u32::MAX as i64) as u32;
                st.set_nlink(parent, |n| adjust(n, -moved_in));
                st.set_nlink(new_parent, |n| adjust(n, moved_in));
            }
            st.touch_ctime(src.ino, now);
            st.touch_ctime(d.ino, now);
            st.touch(parent, now);
            st.touch(new_parent, now);
            return Ok(());
        }
        if let Some(d) = dst {
            match (src_dir, dst_dir) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !st.dir(d.ino)?.entries.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        st.dir_mut(parent)?.remove(a.name);
        if let Some(d) = dst {
            st.dir_mut(new_parent)?.remove(a.new_name);
            if dst_dir {
                st.set_nlink(d.ino, |_| 0);
                st.set_nlink(new_parent, |n| n.saturating_sub(1));
            } else {
                st.set_nlink(d.ino, |n| n.saturating_sub(1));
            }
            st.touch_ctime(d.ino, now);
        }
        st.dir_mut(new_parent)?
            .insert(a.new_name, src.ino, src.kind);
        if src_dir && parent != new_parent {
            if let Ok(Kind::Dir(sd)) = st.get_mut(src.ino).map(|i| &mut i.kind) {
                sd.parent = new_parent;
            }
            st.set_nlink(parent, |n| n.saturating_sub(1));
            st.set_nlink(new_parent, |n| n.saturating_add(1));
        }
        st.touch_ctime(src.ino, now);
        st.touch(parent, now);
        st.touch(new_parent, now);
        if let Some(d) = dst {
            st.maybe_free(d.ino);
        }
        Ok(())
    }

    fn link(
        &self,
        _ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        check_name(new_name)?;
        let mut st = self.table_mut();
        let inode = st.get(node.0)?;
        if inode.is_dir() {
            return Err(Errno::EPERM);
        }
        if inode.attr.nlink == u32::MAX {
            return Err(Errno::EMLINK);
        }
        let kind = inode.attr.kind().ok_or(Errno::EIO)?;
        if st.live_dir(new_parent.0)?.entries.contains_key(new_name) {
            return Err(Errno::EEXIST);
        }
        let now = Timespec::now();
        st.dir_mut(new_parent.0)?.insert(new_name, node.0, kind);
        st.touch(new_parent.0, now);
        let inode = st.get_mut(node.0)?;
        inode.attr.nlink += 1;
        inode.attr.ctime = now;
        inode.lookups.fetch_add(1, Relaxed);
        Ok(self.entry(node.0, inode))
    }

    fn open(&self, _ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        let mut st = self.table_mut();
        let inode = st.get_mut(node.0)?;
        // With -o atomic_o_trunc the kernel leaves O_TRUNC to us. Linux sets
        // mtime and ctime on O_TRUNC even when the file was already empty.
        // Linux truncates even for O_RDONLY|O_TRUNC (the kernel required
        // write permission already), and so must we.
        if args.flags & libc::O_TRUNC != 0 {
            if let Kind::File(c) = &inode.kind {
                wlock(c).truncate(0);
                let now = Timespec::now();
                inode.attr.mtime = now;
                inode.attr.ctime = now;
                if args.kill_suidgid {
                    kill_suidgid(&mut inode.attr);
                }
            }
        }
        st.open_handle(node.0)
    }

    fn read(&self, _ctx: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let content = self.content(node.0)?;
        let want = (args.size as usize).min(out.remaining());
        rlock(&content).read(args.offset, want, out);
        self.accessed(node.0);
        Ok(())
    }

    fn write(&self, _ctx: &Ctx, node: NodeId, args: &Write) -> FsResult<u32> {
        let data = &args.data[..args.data.len().min(u32::MAX as usize)];
        let content = self.content(node.0)?;
        wlock(&content).write(args.offset, data)?;
        if !data.is_empty() {
            self.modified(node.0, args.kill_suidgid);
        }
        Ok(data.len() as u32)
    }

    fn flush(&self, _ctx: &Ctx, _node: NodeId, _fh: FileHandle, _lock_owner: u64) -> FsResult<()> {
        Ok(())
    }

    fn release(&self, _ctx: &Ctx, _node: NodeId, args: &Release) -> FsResult<()> {
        let mut st = self.table_mut();
        let ino = st.handles.remove(&args.fh.0).ok_or(Errno::EBADF)?;
        if let Ok(i) = st.get_mut(ino) {
            i.opens = i.opens.saturating_sub(1);
        }
        st.maybe_free(ino);
        Ok(())
    }

    fn fsync(&self, _ctx: &Ctx, _node: NodeId, _fh: FileHandle, _datasync: bool) -> FsResult<()> {
        Ok(())
    }

    fn opendir(&self, _ctx: &Ctx, node: NodeId, _args: &Open) -> FsResult<Opened> {
        let mut st = self.table_mut();
        st.dir(node.0)?;
        st.open_handle(node.0)
    }

    fn readdir(&self, _ctx: &Ctx, node: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        let st = self.table();
        let dir = st.dir(node.0)?;
        for item in listing(node.0, dir, args.offset) {
            if out.is_plus() && !item.dot {
                // Check for room before taking the reference the entry carries.
                if !out.has_room(item.name) {
                    break;
                }
                let Ok(child) = st.get(item.ino) else {
                    continue;
                };
                child.lookups.fetch_add(1, Relaxed);
                if !out.push_plus(&self.entry(item.ino, child), item.next, item.name) {
                    child.lookups.fetch_sub(1, Relaxed);
                    break;
                }
            } else if !out.push(item.ino, item.next, item.kind, item.name) {
                break;
            }
        }
        Ok(())
    }

    fn readdirplus(
        &self,
        ctx: &Ctx,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries,
    ) -> FsResult<()> {
        self.readdir(ctx, node, args, out)
    }

    fn releasedir(&self, ctx: &Ctx, node: NodeId, args: &Release) -> FsResult<()> {
        self.release(ctx, node, args)
    }

    fn fsyncdir(
        &self,
        _ctx: &Ctx,
        _node: NodeId,
        _fh: FileHandle,
        _datasync: bool,
    ) -> FsResult<()> {
        Ok(())
    }

    fn statfs(&self, _ctx: &Ctx, _node: NodeId) -> FsResult<Statfs> {
        let files = self.table().inodes.len() as u64;
        let (cap, used) = (self.usage.capacity(), self.usage.used());
        // No inode limit of our own; report as many as there are pages.
        let max_files = cap.max(files);
        Ok(Statfs {
            blocks: cap,
            bfree: cap.saturating_sub(used),
            bavail: cap.saturating_sub(used),
            files: max_files,
            ffree: max_files - files,
            bsize: PAGE as u32,
            namelen: NAME_MAX as u32,
            frsize: PAGE as u32,
        })
    }

    fn setxattr(&self, _ctx: &Ctx, node: NodeId, args: &Setxattr) -> FsResult<()> {
        self.xattr_node(node.0, args.name)?;
        let mut st = self.table_mut();
        let inode = st.get_mut(node.0)?;
        let exists = inode.xattrs.contains_key(args.name);
        if args.flags & libc::XATTR_CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if args.flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(Errno::ENODATA);
        }
        inode
            .xattrs
            .insert(args.name.to_owned(), args.value.to_vec());
        inode.attr.ctime = Timespec::now();
        Ok(())
    }

    fn getxattr(&self, _ctx: &Ctx, node: NodeId, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        self.xattr_node(node.0, name)?;
        let st = self.table();
        let value = st.get(node.0)?.xattrs.get(name).ok_or(Errno::ENODATA)?;
        out.extend_from_slice(value);
        Ok(())
    }

    fn listxattr(&self, _ctx: &Ctx, node: NodeId, out: &mut DataOut) -> FsResult<()> {
        let st = self.table();
        for name in st.get(node.0)?.xattrs.keys() {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&[0]);
        }
        Ok(())
    }

    fn removexattr(&self, _ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        self.xattr_node(node.0, name)?;
        let mut st = self.table_mut();
        let inode = st.get_mut(node.0)?;
        inode.xattrs.remove(name).ok_or(Errno::ENODATA)?;
        inode.attr.ctime = Timespec::now();
        Ok(())
    }

    /// Only asked without default_permissions (the kernel checks otherwise),
    /// so this is the classic owner/group/other check.
    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        let attr = self.table().get(node.0)?.attr;
        let want = (mask & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        if want == 0 {
            return Ok(());
        }
        if ctx.uid == 0 {
            // Root may do anything but execute a file nobody may execute.
            let no_exec = attr.mode & S_IFMT != S_IFDIR && attr.mode & 0o111 == 0;
            return if want & libc::X_OK as u32 != 0 && no_exec {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        let bits = if ctx.uid == attr.uid {
            attr.mode >> 6
        } else if ctx.gid == attr.gid || in_supplementary_groups(ctx.pid, attr.gid) {
            attr.mode >> 3
        } else {
            attr.mode
        } & 7;
        if want & !bits == 0 {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        self.make_open(ctx, parent, Some(name), args)
    }

    fn fallocate(&self, _ctx: &Ctx, node: NodeId, args: &Fallocate) -> FsResult<()> {
        // tmpfs supports exactly these two flags.
        let (keep, punch) = (libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE);
        if args.mode & !(keep | punch) != 0 || (args.mode & punch != 0 && args.mode & keep == 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        if args.length == 0 {
            return Err(Errno::EINVAL);
        }
        let content = self.content(node.0)?;
        {
            let mut c = wlock(&content);
            if args.mode & punch != 0 {
                c.punch_hole(args.offset, args.length);
            } else {
                c.allocate(args.offset, args.length, args.mode & keep != 0)?;
            }
        }
        self.modified(node.0, false);
        Ok(())
    }

    fn lseek(&self, _ctx: &Ctx, node: NodeId, args: &Lseek) -> FsResult<u64> {
        let content = self.content(node.0)?;
        let c = rlock(&content);
        match args.whence {
            libc::SEEK_DATA => c.seek_data(args.offset),
            libc::SEEK_HOLE => c.seek_hole(args.offset),
            libc::SEEK_SET => Ok(args.offset),
            libc::SEEK_END => c.size().checked_add(args.offset).ok_or(Errno::EINVAL),
            _ => Err(Errno::EINVAL),
        }
    }

    fn copy_file_range(&self, _ctx: &Ctx, a: &CopyFileRange) -> FsResult<u64> {
        if a.flags != 0 {
            return Err(Errno::EINVAL);
        }
        let src = self.content(a.node_in.0)?;
        let dst = self.content(a.node_out.0)?;
        // Move through a bounce buffer a slice at a time, never holding both
        // locks: the two files may be the same one, and two copies running in
        // opposite directions must not deadlock.
        const SLICE: u64 = 1 << 20;
        // The reply carries the count in 32 bits; stay page-aligned below that.
        let len = a.len.min(u32::MAX as u64 & !(PAGE - 1));
        let mut buf = Vec::new();
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(SLICE) as usize;
            buf.clear();
            let n = rlock(&src).read(a.off_in.saturating_add(done), want, &mut buf);
            if n == 0 {
                break;
            }
            if let Err(e) = wlock(&dst).write(a.off_out.saturating_add(done), &buf) {
                // Report what was copied before the failure, like write(2).
                if done == 0 {
                    return Err(e);
                }
                break;
            }
            done += n as u64;
        }
        if done > 0 {
            self.modified(a.node_out.0, false);
        }
        Ok(done)
    }

    fn syncfs(&self, _ctx: &Ctx) -> FsResult<()> {
        Ok(())
    }

    fn tmpfile(&self, ctx: &Ctx, parent: NodeId, args: &Create) -> FsResult<(Entry, Opened)> {
        // Born with no name (nlink 0); link(2) may give it one later.
        self.make_open(ctx, parent, None, args)
    }

    // ------------------------------------------------ upgrade (recovery)
    // MemFs's files live in this process: an upgrade hands them to the
    // next server whole (`saved`); a crash loses them, so a supervised
    // memfs is not restarted after one (DESIGN.md, "Recovery").

    fn state_in_process(&self) -> bool {
        true
    }

    fn save_state(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        saved::save(&rlock(&self.state), out)
    }

    fn load_state(&self, input: &mut dyn std::io::Read) -> std::io::Result<()> {
        let st = saved::load(input, &self.usage)?;
        *wlock(&self.state) = st;
        Ok(())
    }

    fn node_key(&self, node: NodeId) -> Option<Vec<u8>> {
        Some(node.0.to_le_bytes().to_vec())
    }

    /// The loaded table has every inode; the kernel's count is the one
    /// that counts.
    fn restore_node(&self, node: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        if key != node.0.to_le_bytes() {
            return Err(Errno::EINVAL);
        }
        let st = rlock(&self.state);
        st.get(node.0)?.lookups.store(nlookup, Relaxed);
        Ok(())
    }

    fn restore_handle(&self, h: &fusebox::recovery::HandleRecord) -> FsResult<()> {
        let st = rlock(&self.state);
        match st.handles.get(&h.fh) {
            Some(&ino) if ino == h.node => Ok(()),
            _ => Err(Errno::EBADF),
        }
    }
}
