//! PathPassthrough: a source directory served through the path-level API
//! ([`PathFilesystem`] behind [`fusebox::PathAdapter`]), the way libfuse's
//! high-level passthrough example does it: every call names its file by
//! path and becomes the same syscall on that path under the source.
//!
//! It behaves like [`crate::StackFs`] (files are created as the caller,
//! setuid bits are cleared on write with handle_killpriv_v2, xattrs,
//! fallocate, lseek and copy_file_range pass through) but keeps no state
//! about files at all beyond open handles: the adapter owns the node table.
//!
//! Paths are resolved by the host on every call, so the usual limits of a
//! path-level passthrough apply: a directory of the source swapped for a
//! symlink behind the mount's back is followed, and an open file that lost
//! its last name can be reached only through its handle.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use fusebox::abi::flags::init;
use fusebox::fs::ops::*;
use fusebox::protocol::{Connection, DataOut, Notifier};
use fusebox::*;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, XattrFlags};

use crate::host::{
    self, check_access, errno, kill_suidgid, open_flags, seek_from, timestamps, xattr_into,
};
use crate::stackfs::dir::DirState;
use crate::sys;

pub struct PathPassthrough {
    /// Where path-only syscalls (xattrs, statvfs) start: absolute, so the
    /// daemon's working directory does not matter.
    source: PathBuf,
    /// Where every `*at` call starts. Resolving below an fd rather than
    /// from `source` means the source's own ancestors are never searched
    /// with the caller's credentials (see [`sys::as_caller`]), and a
    /// source renamed while mounted keeps being served.
    root: OwnedFd,
    /// Open files and directories by handle; the two share one numbering.
    files: DashMap<u64, Arc<OwnedFd>>,
    dirs: DashMap<u64, Arc<Mutex<DirState>>>,
    next_handle: AtomicU64,
    opts: FsOptions,
}

/// The FUSE path relative to the source: "/" is the source itself.
fn rel(path: &Path) -> &Path {
    match path.strip_prefix("/") {
        Ok(p) if !p.as_os_str().is_empty() => p,
        Ok(_) => Path::new("."),
        // The adapter only hands out absolute paths; a relative one is
        // still below the source.
        Err(_) => path,
    }
}

fn stat_fd(fd: impl AsFd) -> FsResult<FileAttr> {
    Ok(FileAttr::from(&rustix::fs::fstat(fd).map_err(errno)?))
}

/// The caller's open flags minus `strip`, plus O_NOFOLLOW: the kernel
/// resolves symlinks itself and never opens one, so a symlink found here
/// was put in place behind the mount's back and may lead out of the source.
fn oflags(flags: i32, strip: i32) -> OFlags {
    OFlags::from_bits_retain((flags & !strip) as _) | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl PathPassthrough {
    /// ENOSYS makes the kernel stop sending xattr requests (`-o noxattr`).
    fn no_xattr(&self) -> FsResult<()> {
        if self.opts.noxattr {
            Err(Errno::ENOSYS)
        } else {
            Ok(())
        }
    }

    /// Serve `source`. Sets the process umask to 0: the kernel already
    /// applied the caller's umask to every mode we receive.
    pub fn new(source: &Path, opts: FsOptions) -> std::io::Result<PathPassthrough> {
        let source = std::fs::canonicalize(source)?;
        let root = rustix::fs::open(
            &source,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::process::umask(Mode::empty());
        Ok(PathPassthrough {
            source,
            root: fusebox::descriptors::keep(root),
            files: DashMap::new(),
            dirs: DashMap::new(),
            next_handle: AtomicU64::new(1),
            opts,
        })
    }

    /// Open handles (files and directories) currently held.
    pub fn open_handles(&self) -> usize {
        self.files.len() + self.dirs.len()
    }

    fn abs(&self, path: &Path) -> PathBuf {
        self.source.join(rel(path))
    }

    fn lstat(&self, path: &Path) -> FsResult<FileAttr> {
        let st =
            rustix::fs::statat(&self.root, rel(path), AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
        Ok(FileAttr::from(&st))
    }

    fn file(&self, fh: FileHandle) -> FsResult<Arc<OwnedFd>> {
        self.files.get(&fh.0).map(|f| f.clone()).ok_or(Errno::EBADF)
    }

    fn dir<R>(&self, fh: FileHandle, f: impl FnOnce(&mut DirState) -> R) -> FsResult<R> {
        let d = self
            .dirs
            .get(&fh.0)
            .map(|d| d.clone())
            .ok_or(Errno::EBADF)?;
        let mut st = d.lock().unwrap_or_else(|p| p.into_inner());
        Ok(f(&mut st))
    }

    fn open_dir(&self, path: &Path) -> FsResult<OwnedFd> {
        rustix::fs::openat(
            &self.root,
            rel(path),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(fusebox::descriptors::keep)
        .map_err(errno)
    }

    fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn insert_file(&self, fd: OwnedFd) -> Opened {
        let id = self.new_handle();
        self.files
            .insert(id, Arc::new(fusebox::descriptors::keep(fd)));
        Opened {
            fh: FileHandle(id),
            flags: open_flags(&self.opts),
            backing_id: 0,
        }
    }
}

fn sync(fd: impl AsFd, datasync: bool) -> FsResult<()> {
    if datasync {
        rustix::fs::fdatasync(fd)
    } else {
        rustix::fs::fsync(fd)
    }
    .map_err(errno)
}

impl PathFilesystem for PathPassthrough {
    fn init(&self, conn: &mut Connection, _: &Notifier) -> FsResult<()> {
        // Clear setuid bits on write ourselves, instead of the kernel asking
        // GETXATTR("security.capability") before every write.
        conn.enable(init::HANDLE_KILLPRIV_V2);
        Ok(())
    }

    fn timeouts(&self) -> Timeouts {
        self.opts.timeouts_or(Timeouts::default())
    }

    fn getattr(&self, _: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        // The handle is what the kernel means when it sends one: the path
        // may already name another file.
        if let Some(fh) = fh {
            if let Ok(fd) = self.file(fh) {
                return stat_fd(&*fd);
            }
            if let Ok(r) = self.dir(fh, |st| stat_fd(st.fd())) {
                return r;
            }
        }
        self.lstat(path)
    }

    fn setattr(&self, _: &Ctx, path: &Path, a: &SetAttr) -> FsResult<FileAttr> {
        let open = a.fh.and_then(|fh| self.file(fh).ok());
        let fd = open.as_deref();
        let p = rel(path);
        if let Some(mode) = a.mode {
            let m = Mode::from_raw_mode(mode & 0o7777);
            match fd {
                Some(fd) => rustix::fs::fchmod(fd, m),
                None => rustix::fs::chmodat(&self.root, p, m, AtFlags::empty()),
            }
            .map_err(errno)?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.map(rustix::fs::Uid::from_raw);
            let gid = a.gid.map(rustix::fs::Gid::from_raw);
            match fd {
                Some(fd) => rustix::fs::fchown(fd, uid, gid),
                None => rustix::fs::chownat(&self.root, p, uid, gid, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(errno)?;
        }
        if let Some(size) = a.size {
            let opened;
            let fd = match fd {
                Some(fd) => fd,
                None => {
                    opened = rustix::fs::openat(
                        &self.root,
                        p,
                        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(errno)?;
                    &opened
                }
            };
            rustix::fs::ftruncate(fd, size).map_err(errno)?;
            if a.kill_suidgid {
                kill_suidgid(fd)?;
            }
        }
        if let Some(ts) = timestamps(a) {
            match fd {
                Some(fd) => rustix::fs::futimens(fd, &ts),
                None => rustix::fs::utimensat(&self.root, p, &ts, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(errno)?;
        }
        match fd {
            Some(fd) => stat_fd(fd),
            None => self.lstat(path),
        }
    }

    fn readlink(&self, _: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        let target = rustix::fs::readlinkat(&self.root, rel(path), Vec::new()).map_err(errno)?;
        out.extend_from_slice(target.as_bytes());
        Ok(())
    }

    fn symlink(&self, ctx: &Ctx, target: &OsStr, link: &Path) -> FsResult<FileAttr> {
        sys::as_caller(ctx.uid, ctx.gid, || {
            rustix::fs::symlinkat(target, &self.root, rel(link))
        })
        .map_err(errno)?;
        self.lstat(link)
    }

    fn mknod(&self, ctx: &Ctx, path: &Path, a: &Mknod) -> FsResult<FileAttr> {
        let kind = rustix::fs::FileType::from_raw_mode(a.mode);
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        sys::as_caller(ctx.uid, ctx.gid, || {
            rustix::fs::mknodat(&self.root, rel(path), kind, mode, a.rdev as u64)
        })
        .map_err(errno)?;
        self.lstat(path)
    }

    fn mkdir(&self, ctx: &Ctx, path: &Path, a: &Mkdir) -> FsResult<FileAttr> {
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        sys::as_caller(ctx.uid, ctx.gid, || {
            rustix::fs::mkdirat(&self.root, rel(path), mode)
        })
        .map_err(errno)?;
        self.lstat(path)
    }

    fn unlink(&self, _: &Ctx, path: &Path) -> FsResult<()> {
        rustix::fs::unlinkat(&self.root, rel(path), AtFlags::empty()).map_err(errno)
    }

    fn rmdir(&self, _: &Ctx, path: &Path) -> FsResult<()> {
        rustix::fs::unlinkat(&self.root, rel(path), AtFlags::REMOVEDIR).map_err(errno)
    }

    fn rename(&self, _: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        let flags = RenameFlags::from_bits(flags).ok_or(Errno::EINVAL)?;
        rustix::fs::renameat_with(&self.root, rel(from), &self.root, rel(to), flags).map_err(errno)
    }

    fn link(&self, _: &Ctx, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        rustix::fs::linkat(
            &self.root,
            rel(existing),
            &self.root,
            rel(new),
            AtFlags::empty(),
        )
        .map_err(errno)?;
        self.lstat(new)
    }

    /// After a crash or an upgrade: reopen the file or directory by the
    /// path it has now, under its old number. The new server runs as the
    /// old one did, and the caller was allowed to open it then.
    fn restore_handle(&self, path: &Path, h: &fusebox::recovery::HandleRecord) -> FsResult<()> {
        self.next_handle.fetch_max(h.fh + 1, Ordering::AcqRel);
        if h.dir {
            let fd = self.open_dir(path)?;
            self.dirs
                .insert(h.fh, Arc::new(Mutex::new(DirState::new(fd))));
            return Ok(());
        }
        let strip = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY;
        let fd = rustix::fs::openat(
            &self.root,
            rel(path),
            oflags(h.flags as i32, strip),
            Mode::empty(),
        )
        .map_err(errno)?;
        self.files
            .insert(h.fh, Arc::new(fusebox::descriptors::keep(fd)));
        Ok(())
    }

    fn open(&self, _: &Ctx, path: &Path, a: &Open) -> FsResult<Opened> {
        let fd = rustix::fs::openat(
            &self.root,
            rel(path),
            oflags(a.flags, libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY),
            Mode::empty(),
        )
        .map_err(errno)?;
        if a.kill_suidgid && a.flags & libc::O_TRUNC != 0 {
            kill_suidgid(&fd)?;
        }
        Ok(self.insert_file(fd))
    }

    fn read(&self, _: &Ctx, _: &Path, a: &Read, out: &mut DataOut) -> FsResult<()> {
        let h = self.file(a.fh)?;
        out.pread(h.as_fd(), a.offset, a.size as usize)
            .map_err(Errno::from)?;
        Ok(())
    }

    fn write(&self, _: &Ctx, _: &Path, a: &Write) -> FsResult<u32> {
        let h = self.file(a.fh)?;
        let n = rustix::io::pwrite(&*h, a.data, a.offset).map_err(errno)?;
        if a.kill_suidgid {
            kill_suidgid(&*h)?;
        }
        Ok(n as u32)
    }

    fn flush(&self, _: &Ctx, _: &Path, _: FileHandle, _: u64) -> FsResult<()> {
        // The source is local: there is nothing a close(2) would flush.
        Ok(())
    }

    fn release(&self, _: &Ctx, _: &Path, a: &Release) -> FsResult<()> {
        self.files.remove(&a.fh.0);
        Ok(())
    }

    fn fsync(&self, _: &Ctx, _: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        sync(&*self.file(fh)?, datasync)
    }

    fn opendir(&self, _: &Ctx, path: &Path, _: &Open) -> FsResult<Opened> {
        let fd = self.open_dir(path)?;
        let id = self.new_handle();
        self.dirs
            .insert(id, Arc::new(Mutex::new(DirState::new(fd))));
        Ok(Opened::handle(id))
    }

    /// Offsets are the source's own getdents cookies, so listings resume
    /// correctly however the directory changes between calls.
    fn readdir(
        &self,
        _: &Ctx,
        _: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        self.dir(fh, |st| {
            st.fill(offset, |name, ino, kind, next| {
                filler(name, kind, ino, next)
            })
        })?
    }

    fn releasedir(&self, _: &Ctx, _: &Path, a: &Release) -> FsResult<()> {
        self.dirs.remove(&a.fh.0);
        Ok(())
    }

    fn fsyncdir(&self, _: &Ctx, _: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        self.dir(fh, |st| sync(st.fd(), datasync))?
    }

    fn statfs(&self, _: &Ctx, path: &Path) -> FsResult<Statfs> {
        let s = rustix::fs::statvfs(self.abs(path)).map_err(errno)?;
        Ok(host::statfs(&s))
    }

    fn setxattr(&self, _: &Ctx, path: &Path, a: &Setxattr) -> FsResult<()> {
        self.no_xattr()?;
        let flags = XattrFlags::from_bits(a.flags as _).ok_or(Errno::EINVAL)?;
        rustix::fs::lsetxattr(self.abs(path), a.name, a.value, flags).map_err(errno)
    }

    fn getxattr(&self, _: &Ctx, path: &Path, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        self.no_xattr()?;
        let p = self.abs(path);
        xattr_into(
            out,
            || rustix::fs::lgetxattr_query(&p, name),
            |buf| rustix::fs::lgetxattr(&p, name, buf),
        )
    }

    fn listxattr(&self, _: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        self.no_xattr()?;
        let p = self.abs(path);
        xattr_into(
            out,
            || rustix::fs::llistxattr_query(&p),
            |buf| rustix::fs::llistxattr(&p, buf),
        )
    }

    fn removexattr(&self, _: &Ctx, path: &Path, name: &OsStr) -> FsResult<()> {
        self.no_xattr()?;
        rustix::fs::lremovexattr(self.abs(path), name).map_err(errno)
    }

    fn access(&self, ctx: &Ctx, path: &Path, mask: i32) -> FsResult<()> {
        let st =
            rustix::fs::statat(&self.root, rel(path), AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
        check_access(&st, ctx.uid, ctx.gid, mask)
    }

    fn create(&self, ctx: &Ctx, path: &Path, a: &Create) -> FsResult<(FileAttr, Opened)> {
        let flags = oflags(a.flags, libc::O_NOCTTY) | OFlags::CREATE;
        let mode = Mode::from_raw_mode(a.mode & 0o7777);
        let fd = sys::as_caller(ctx.uid, ctx.gid, || {
            rustix::fs::openat(&self.root, rel(path), flags, mode)
        })
        .map_err(errno)?;
        Ok((stat_fd(&fd)?, self.insert_file(fd)))
    }

    fn fallocate(&self, _: &Ctx, _: &Path, a: &Fallocate) -> FsResult<()> {
        let h = self.file(a.fh)?;
        let flags = rustix::fs::FallocateFlags::from_bits(a.mode as _).ok_or(Errno::EOPNOTSUPP)?;
        rustix::fs::fallocate(&*h, flags, a.offset, a.length).map_err(errno)
    }

    fn lseek(&self, _: &Ctx, _: &Path, a: &Lseek) -> FsResult<u64> {
        let h = self.file(a.fh)?;
        rustix::fs::seek(&*h, seek_from(a)?).map_err(errno)
    }

    fn copy_file_range(&self, _: &Ctx, _: &Path, _: &Path, a: &CopyFileRange) -> FsResult<u64> {
        let (hin, hout) = (self.file(a.fh_in)?, self.file(a.fh_out)?);
        host::copy_range(&*hin, &*hout, a)
    }
}
