//! A minimal passthrough filesystem on fuser's public API.
//!
//! fusebox's benchmark compares frameworks by running each one's own
//! passthrough over the same backing directory. fuser ships no directory
//! passthrough, so this is one written against its API, kept close to what
//! libfuse's `passthrough_ll` does: 1-second entry and attribute timeouts,
//! one real backing fd per open file, no caching flags of its own, and
//! fuser's session left at its defaults except where a flag says otherwise.
//!
//! Usage: `fuser-passthrough [--threads N] SOURCE MOUNTPOINT`
//!
//! It mounts with `allow_other` and `default_permissions`, stays in the
//! foreground, prints nothing on stdout, and exits when the filesystem is
//! unmounted. SIGINT or SIGTERM unmounts it (a second one exits at once).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata, Permissions};
use std::io::{self, ErrorKind};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, DirEntryExt, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, Session,
    SessionACL, TimeOrNow, WriteFlags,
};
use nix::fcntl::{OFlag, AT_FDCWD};
use nix::mount::MntFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::{Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;

/// Entry and attribute timeout, the same 1 s that `passthrough_ll` uses in
/// its default cache mode, so the kernel revalidates about as often.
const TTL: Duration = Duration::from_secs(1);

/// Buffer alignment for files opened with O_DIRECT: the backing filesystem
/// rejects unaligned user buffers, and a page satisfies every block size.
const ALIGN: usize = 4096;

/// A backing file's identity. Two names for one file (hard links) must map
/// to one FUSE inode, so the table is keyed by this rather than by path.
type Key = (u64, u64); // (st_dev, st_ino)

/// What the kernel knows as one inode.
struct Node {
    /// Backing path: the parent's path plus the name it was last reached by.
    path: PathBuf,
    key: Key,
    kind: FileType,
    /// Lookups the kernel holds; the node is dropped when forget brings it to 0.
    nlookup: u64,
}

struct Inodes {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<Key, u64>,
    next: u64,
}

impl Inodes {
    /// Count one more kernel reference to the file at `path` (whose lstat is
    /// `md`) and return its inode number.
    fn remember(&mut self, path: PathBuf, md: &Metadata) -> u64 {
        let key = (md.dev(), md.ino());
        let kind = kind_of(md);
        if let Some(&ino) = self.by_key.get(&key) {
            if let Some(node) = self.nodes.get_mut(&ino) {
                // A different type under the same key is a new file that
                // reused the inode number of one we lost track of: the
                // kernel must see a new inode, or it would flag a type change.
                if node.kind == kind {
                    node.nlookup += 1;
                    // The name just resolved is the one known to exist now.
                    node.path = path;
                    return ino;
                }
            }
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                path,
                key,
                kind,
                nlookup: 1,
            },
        );
        self.by_key.insert(key, ino);
        ino
    }

    fn forget(&mut self, ino: u64, n: u64) {
        if ino == INodeNo::ROOT.0 {
            return; // the root lives as long as the mount
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.nlookup = node.nlookup.saturating_sub(n);
        if node.nlookup == 0 {
            let key = node.key;
            self.nodes.remove(&ino);
            if self.by_key.get(&key) == Some(&ino) {
                self.by_key.remove(&key);
            }
        }
    }

    /// The backing file with `key` lost its last name: a later file that
    /// reuses its inode number must not be taken for it.
    fn unmap(&mut self, key: Key) {
        self.by_key.remove(&key);
    }

    /// `from` was renamed to `to`: move it and everything below it.
    fn renamed(&mut self, from: &Path, to: &Path) {
        for node in self.nodes.values_mut() {
            if let Ok(rest) = node.path.strip_prefix(from) {
                // join("") would add a trailing slash; the entry itself is just `to`.
                node.path = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
            }
        }
    }
}

struct OpenFile {
    file: File,
    ino: u64,
    /// Opened with O_DIRECT, so I/O buffers must be aligned.
    direct: bool,
}

struct DirEnt {
    name: OsString,
    ino: u64,
    kind: FileType,
}

/// An open directory: a listing taken at opendir (and again on rewind), so
/// the kernel's offsets, which are indexes into it, stay meaningful between
/// readdir calls even while the directory changes.
struct DirStream {
    path: PathBuf,
    entries: Vec<DirEnt>,
    served: bool,
}

struct Passthrough {
    inodes: Mutex<Inodes>,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_fh: AtomicU64,
}

/// Lock, ignoring poisoning: a panic in one request must not take every
/// later request down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn nix_errno(e: nix::errno::Errno) -> Errno {
    Errno::from_i32(e as i32)
}

fn kind_of(md: &Metadata) -> FileType {
    // Every Linux file type has a FileType; the fallback is unreachable.
    FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile)
}

fn system_time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn attr(ino: u64, md: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: system_time(md.atime(), md.atime_nsec()),
        mtime: system_time(md.mtime(), md.mtime_nsec()),
        ctime: system_time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH, // macOS only
        kind: kind_of(md),
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        // FUSE carries rdev in 32 bits, in the same encoding as the low
        // half of glibc's dev_t.
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> TimeSpec {
    match t {
        None => TimeSpec::UTIME_OMIT,
        Some(TimeOrNow::Now) => TimeSpec::UTIME_NOW,
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => TimeSpec::from(d),
            Err(e) => {
                // Before 1970: timespec wants floor seconds and positive nanoseconds.
                let d = e.duration();
                let (s, n) = (d.as_secs() as i64, i64::from(d.subsec_nanos()));
                if n == 0 {
                    TimeSpec::new(-s, 0)
                } else {
                    TimeSpec::new(-s - 1, 1_000_000_000 - n)
                }
            }
        },
    }
}

/// A zeroed buffer of `len` bytes starting on an ALIGN boundary, as a
/// vector and the offset of the aligned start in it.
fn aligned_buf(len: usize) -> (Vec<u8>, usize) {
    let buf = vec![0u8; len + ALIGN];
    let start = buf.as_ptr().align_offset(ALIGN);
    // align_offset may refuse (usize::MAX); unaligned then, which only
    // costs O_DIRECT an EINVAL the backing filesystem would explain.
    (buf, if start < ALIGN { start } else { 0 })
}

/// pread until `buf` is full or EOF, as the kernel expects of a read reply
/// (a short reply means end of file).
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // After a partial read (O_DIRECT at EOF, say) report what we have.
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn dir_listing(path: &Path) -> io::Result<Vec<DirEnt>> {
    let here = fs::symlink_metadata(path)?.ino();
    let up = fs::symlink_metadata(path.join("..")).map_or(here, |m| m.ino());
    // std omits "." and ".."; a real directory lists them, so we do too.
    let mut entries = vec![
        DirEnt {
            name: ".".into(),
            ino: here,
            kind: FileType::Directory,
        },
        DirEnt {
            name: "..".into(),
            ino: up,
            kind: FileType::Directory,
        },
    ];
    for e in fs::read_dir(path)? {
        let e = e?;
        // An entry removed since the directory was read has no type; skip it.
        let Ok(ft) = e.file_type() else { continue };
        entries.push(DirEnt {
            name: e.file_name(),
            ino: e.ino(),
            kind: FileType::from_std(ft).unwrap_or(FileType::RegularFile),
        });
    }
    Ok(entries)
}

impl Passthrough {
    fn new(source: PathBuf) -> io::Result<Passthrough> {
        let md = fs::symlink_metadata(&source)?;
        let root = INodeNo::ROOT.0;
        let key = (md.dev(), md.ino());
        let inodes = Inodes {
            nodes: HashMap::from([(
                root,
                Node {
                    path: source,
                    key,
                    kind: FileType::Directory,
                    nlookup: 1,
                },
            )]),
            by_key: HashMap::from([(key, root)]),
            next: root + 1,
        };
        Ok(Passthrough {
            inodes: Mutex::new(inodes),
            files: RwLock::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    fn node(&self, ino: INodeNo) -> Result<(PathBuf, Key), Errno> {
        let inodes = lock(&self.inodes);
        let node = inodes.nodes.get(&ino.0).ok_or(Errno::ESTALE)?;
        Ok((node.path.clone(), node.key))
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.node(ino).map(|(path, _)| path)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    /// Look `path` up in the backing directory and count the reference the
    /// reply hands the kernel.
    fn entry(&self, path: PathBuf) -> Result<FileAttr, Errno> {
        let md = fs::symlink_metadata(&path)?;
        let ino = lock(&self.inodes).remember(path, &md);
        Ok(attr(ino, &md))
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        let files = self.files.read().unwrap_or_else(PoisonError::into_inner);
        files.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn add_file(&self, file: File, ino: u64, flags: i32) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let direct = flags & nix::libc::O_DIRECT != 0;
        let open = Arc::new(OpenFile { file, ino, direct });
        self.files
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, open);
        FileHandle(fh)
    }

    fn open_backing(path: &Path, flags: i32, mode: u32) -> Result<File, Errno> {
        // The kernel's flags pass through as given (O_DIRECT, O_APPEND,
        // O_SYNC...), as passthrough_ll does; CLOEXEC because nothing we
        // start should inherit them.
        let flags = OFlag::from_bits_retain(flags) | OFlag::O_CLOEXEC;
        let fd: OwnedFd =
            nix::fcntl::open(path, flags, Mode::from_bits_truncate(mode)).map_err(nix_errno)?;
        Ok(File::from(fd))
    }

    fn do_getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr, Errno> {
        if let Some(fh) = fh {
            if let Ok(open) = self.file(fh) {
                return Ok(attr(ino.0, &open.file.metadata()?));
            }
        }
        let (path, key) = self.node(ino)?;
        let found = fs::symlink_metadata(&path);
        if let Ok(md) = &found {
            if (md.dev(), md.ino()) == key {
                return Ok(attr(ino.0, md));
            }
        }
        // The name is gone or now names another file (unlinked, renamed
        // over). An open file still reaches the inode: fstat that, as an
        // fd-based passthrough would.
        let open = {
            let files = self.files.read().unwrap_or_else(PoisonError::into_inner);
            files.values().find(|f| f.ino == ino.0).cloned()
        };
        match (open, found) {
            (Some(open), _) => Ok(attr(ino.0, &open.file.metadata()?)),
            (None, Err(e)) => Err(e.into()),
            (None, Ok(_)) => Err(Errno::ESTALE),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn do_setattr(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let path = self.path(ino)?;
        // With a handle (fchmod, ftruncate...) act on that fd: the name may
        // no longer lead to the file.
        let open = fh.and_then(|fh| self.file(fh).ok());
        if let Some(mode) = mode {
            match &open {
                Some(o) => nix::sys::stat::fchmod(&o.file, Mode::from_bits_truncate(mode))
                    .map_err(nix_errno)?,
                None => fs::set_permissions(&path, Permissions::from_mode(mode & 0o7777))?,
            }
        }
        if uid.is_some() || gid.is_some() {
            match &open {
                Some(o) => std::os::unix::fs::fchown(&o.file, uid, gid)?,
                None => std::os::unix::fs::lchown(&path, uid, gid)?,
            }
        }
        if let Some(size) = size {
            match &open {
                Some(o) => o.file.set_len(size)?,
                None => {
                    let len = i64::try_from(size).map_err(|_| Errno::EFBIG)?;
                    nix::unistd::truncate(&path, len).map_err(nix_errno)?;
                }
            }
        }
        if atime.is_some() || mtime.is_some() {
            let (a, m) = (timespec(atime), timespec(mtime));
            match &open {
                Some(o) => nix::sys::stat::futimens(&o.file, &a, &m),
                None => nix::sys::stat::utimensat(
                    AT_FDCWD,
                    &path,
                    &a,
                    &m,
                    UtimensatFlags::NoFollowSymlink,
                ),
            }
            .map_err(nix_errno)?;
        }
        self.do_getattr(ino, fh)
    }

    fn do_mknod(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<FileAttr, Errno> {
        let path = self.child(parent, name)?;
        let kind = SFlag::from_bits_truncate(mode & nix::libc::S_IFMT);
        nix::sys::stat::mknod(&path, kind, Mode::from_bits_truncate(mode), u64::from(rdev))
            .map_err(nix_errno)?;
        self.entry(path)
    }

    fn do_unlink(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let path = self.child(parent, name)?;
        let md = fs::symlink_metadata(&path)?;
        if dir {
            fs::remove_dir(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
        if dir || md.nlink() <= 1 {
            lock(&self.inodes).unmap((md.dev(), md.ino()));
        }
        Ok(())
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        // Like passthrough_ll: plain rename only (no NOREPLACE/EXCHANGE).
        if !flags.is_empty() {
            return Err(Errno::EINVAL);
        }
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        let moved = fs::symlink_metadata(&from)?;
        let replaced = fs::symlink_metadata(&to).ok();
        fs::rename(&from, &to)?;
        let mut inodes = lock(&self.inodes);
        if let Some(old) = replaced {
            let key = (old.dev(), old.ino());
            // Renaming one hard link onto another changes nothing.
            if key != (moved.dev(), moved.ino()) && (old.is_dir() || old.nlink() <= 1) {
                inodes.unmap(key);
            }
        }
        inodes.renamed(&from, &to);
        Ok(())
    }

    fn do_read(
        &self,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Result<(Vec<u8>, usize, usize), Errno> {
        let open = self.file(fh)?;
        let size = size as usize;
        let (mut buf, start) = aligned_buf(size);
        let n = read_full(&open.file, &mut buf[start..start + size], offset)?;
        Ok((buf, start, n))
    }

    fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let open = self.file(fh)?;
        let len = u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        if open.direct && data.as_ptr().align_offset(ALIGN) != 0 {
            // O_DIRECT needs an aligned source; the request buffer isn't.
            let (mut buf, start) = aligned_buf(data.len());
            let copy = &mut buf[start..start + data.len()];
            copy.copy_from_slice(data);
            open.file.write_all_at(copy, offset)?;
        } else {
            open.file.write_all_at(data, offset)?;
        }
        Ok(len)
    }

    fn do_readdir(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(stream) = lock(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        let mut stream = lock(&stream);
        // Offset 0 after entries were served is a rewinddir: list afresh.
        if offset == 0 && stream.served {
            match dir_listing(&stream.path) {
                Ok(entries) => stream.entries = entries,
                Err(e) => return reply.error(e.into()),
            }
        }
        stream.served = true;
        // An entry's offset is the index of the one after it.
        for (i, e) in stream.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                break; // the reply buffer is full
            }
        }
        reply.ok();
    }
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        // Inode numbers are never reused, so generation 0 is always right.
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(reply: ReplyAttr, r: Result<FileAttr, Errno>) {
    match r {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Passthrough {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply_entry(reply, self.child(parent, name).and_then(|p| self.entry(p)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.inodes).forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_attr(reply, self.do_getattr(ino, fh));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply_attr(
            reply,
            self.do_setattr(ino, mode, uid, gid, size, atime, mtime, fh),
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.path(ino).and_then(|p| Ok(fs::read_link(p)?)) {
            Ok(target) => reply.data(target.as_os_str().as_encoded_bytes()),
            Err(e) => reply.error(e),
        }
    }

    // `umask` is ignored in mknod, mkdir and create: without FUSE_DONT_MASK
    // (fuser doesn't ask for it) the kernel has already applied the caller's
    // umask to `mode`, and main clears our own.
    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        reply_entry(reply, self.do_mknod(parent, name, mode, rdev));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, name).and_then(|path| {
            fs::DirBuilder::new().mode(mode).create(&path)?;
            self.entry(path)
        });
        reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.do_unlink(parent, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.do_unlink(parent, name, true));
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, link_name).and_then(|path| {
            std::os::unix::fs::symlink(target, &path)?;
            self.entry(path)
        });
        reply_entry(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.do_rename(parent, name, newparent, newname, flags),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.path(ino).and_then(|old| {
            let new = self.child(newparent, newname)?;
            fs::hard_link(old, &new)?;
            self.entry(new)
        });
        reply_entry(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self
            .path(ino)
            .and_then(|path| Self::open_backing(&path, flags.0, 0));
        match r {
            // No FOPEN flags: the kernel's default page-cache behaviour,
            // like passthrough_ll's default cache mode.
            Ok(file) => reply.opened(self.add_file(file, ino.0, flags.0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.do_read(fh, offset, size) {
            Ok((buf, start, n)) => reply.data(&buf[start..start + n]),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.do_write(fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() of a duplicate reports the backing filesystem's deferred
        // write errors (NFS, say) to the caller's close, as passthrough_ll does.
        let r = self.file(fh).and_then(|open| {
            let dup = nix::unistd::dup(&open.file).map_err(nix_errno)?;
            nix::unistd::close(dup).map_err(nix_errno)
        });
        reply_empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Dropping the last Arc closes the fd (after any read still using it).
        self.files
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.file(fh).and_then(|open| {
            if datasync {
                open.file.sync_data()?;
            } else {
                open.file.sync_all()?;
            }
            Ok(())
        });
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Listing now makes opendir fail the way opening the directory would
        // (ENOTDIR, EACCES), and gives readdir its first snapshot.
        let r = self.path(ino).and_then(|path| {
            let entries = dir_listing(&path)?;
            Ok(DirStream {
                path,
                entries,
                served: false,
            })
        });
        match r {
            Ok(stream) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                lock(&self.dirs).insert(fh, Arc::new(Mutex::new(stream)));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let r = self
            .path(ino)
            .and_then(|path| nix::sys::statvfs::statvfs(&path).map_err(nix_errno));
        match r {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Not called under default_permissions (the kernel checks); kept so
        // the filesystem stays correct if that option is dropped.
        let r = self.path(ino).and_then(|path| {
            let mode = nix::unistd::AccessFlags::from_bits_truncate(mask.bits());
            nix::unistd::access(&path, mode).map_err(nix_errno)
        });
        reply_empty(reply, r);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.child(parent, name).and_then(|path| {
            let file = Self::open_backing(&path, flags | nix::libc::O_CREAT, mode)?;
            let attr = self.entry(path)?;
            Ok((file, attr))
        });
        match r {
            Ok((file, attr)) => {
                let fh = self.add_file(file, attr.ino.0, flags);
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }
}

struct Args {
    threads: Option<usize>,
    source: PathBuf,
    mountpoint: PathBuf,
}

const USAGE: &str = "usage: fuser-passthrough [--threads N] SOURCE MOUNTPOINT";

fn parse_args(mut args: impl Iterator<Item = OsString>) -> Result<Args, String> {
    let mut threads = None;
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        let value = if text == "--threads" {
            Some(
                args.next()
                    .ok_or("--threads needs a value")?
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            text.strip_prefix("--threads=").map(str::to_owned)
        };
        if let Some(v) = value {
            let n: usize = v
                .parse()
                .map_err(|_| format!("--threads: not a number: {v}"))?;
            if n == 0 {
                return Err("--threads must be at least 1".into());
            }
            threads = Some(n);
        } else if text == "-h" || text == "--help" {
            return Err(String::new());
        } else if text.starts_with('-') && text != "-" {
            return Err(format!("unknown option {text}"));
        } else {
            positional.push(PathBuf::from(arg));
        }
    }
    let [source, mountpoint]: [PathBuf; 2] = positional
        .try_into()
        .map_err(|_| "expected SOURCE and MOUNTPOINT".to_string())?;
    Ok(Args {
        threads,
        source,
        mountpoint,
    })
}

fn run(args: Args) -> io::Result<()> {
    // Block the stop signals before any thread exists, so every thread
    // fuser starts inherits the mask and only our waiting thread sees them.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    stop.thread_block().map_err(io::Error::from)?;

    // The kernel applied the caller's umask already; ours must not apply twice.
    nix::sys::stat::umask(Mode::empty());

    let source = fs::canonicalize(&args.source)?;
    if !source.is_dir() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("{} is not a directory", source.display()),
        ));
    }
    let mountpoint = fs::canonicalize(&args.mountpoint).unwrap_or(args.mountpoint);

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("fuser-passthrough".into()),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All; // allow_other
                                  // None keeps fuser's own default (one event-loop thread).
    config.n_threads = args.threads;

    let mut session = Session::new(Passthrough::new(source)?, &mountpoint, &config)?;
    let mut unmounter = session.unmount_callable();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while stop.wait().is_err() {}
            // Unmounting ends the session: its loop sees ENODEV and run()
            // returns. A busy mount refuses a plain unmount; detach it then.
            if unmounter.unmount().is_err() {
                let _ = nix::mount::umount2(&mountpoint, MntFlags::MNT_DETACH);
            }
            // Still here at the next signal: stop regardless.
            while stop.wait().is_err() {}
            std::process::exit(1);
        })?;
    session.run()
}

fn main() {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("fuser-passthrough: {msg}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("fuser-passthrough: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse_args(v.iter().map(OsString::from))
    }

    #[test]
    fn parses_threads_and_paths() {
        let a = args(&["--threads", "4", "/src", "/mnt"]).unwrap();
        assert_eq!(a.threads, Some(4));
        assert_eq!(a.source, Path::new("/src"));
        assert_eq!(a.mountpoint, Path::new("/mnt"));
        assert_eq!(args(&["/s", "--threads=2", "/m"]).unwrap().threads, Some(2));
        assert_eq!(args(&["/s", "/m"]).unwrap().threads, None);
        assert!(args(&["--threads", "0", "/s", "/m"]).is_err());
        assert!(args(&["/s"]).is_err());
        assert!(args(&["-x", "/s", "/m"]).is_err());
    }

    #[test]
    fn rename_moves_the_subtree_only() {
        let md = fs::symlink_metadata("/").unwrap();
        let mut t = Inodes {
            nodes: HashMap::new(),
            by_key: HashMap::new(),
            next: 2,
        };
        let a = t.remember("/b/d".into(), &md);
        t.nodes.insert(
            10,
            Node {
                path: "/b/d/x".into(),
                key: (0, 10),
                kind: FileType::RegularFile,
                nlookup: 1,
            },
        );
        t.nodes.insert(
            11,
            Node {
                path: "/b/dx".into(),
                key: (0, 11),
                kind: FileType::RegularFile,
                nlookup: 1,
            },
        );
        t.renamed(Path::new("/b/d"), Path::new("/b/e"));
        assert_eq!(t.nodes[&a].path, Path::new("/b/e"));
        assert_eq!(t.nodes[&10].path, Path::new("/b/e/x"));
        assert_eq!(t.nodes[&11].path, Path::new("/b/dx"));
    }

    #[test]
    fn lookups_count_and_forget_drops() {
        let md = fs::symlink_metadata("/").unwrap();
        let mut t = Inodes {
            nodes: HashMap::new(),
            by_key: HashMap::new(),
            next: 2,
        };
        let a = t.remember("/x".into(), &md);
        assert_eq!(t.remember("/y".into(), &md), a, "same file, same inode");
        assert_eq!(t.nodes[&a].path, Path::new("/y"));
        t.forget(a, 1);
        assert!(t.nodes.contains_key(&a));
        t.forget(a, 1);
        assert!(!t.nodes.contains_key(&a) && t.by_key.is_empty());
        assert_ne!(t.remember("/x".into(), &md), a, "numbers are never reused");
    }

    #[test]
    fn pre_epoch_times_round_trip() {
        let t = UNIX_EPOCH - Duration::from_millis(1500);
        let ts = timespec(Some(TimeOrNow::SpecificTime(t)));
        assert_eq!((ts.tv_sec(), ts.tv_nsec()), (-2, 500_000_000));
        assert_eq!(system_time(-2, 500_000_000), t);
    }
}
