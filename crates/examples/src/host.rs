//! Pieces shared by the filesystems that pass calls through to a directory
//! of the host (stackfs by node, pathfs by path), so both behave alike.

use std::ffi::{CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use fusebox::abi::flags::fopen;
use fusebox::fs::ops::{CopyFileRange, Lseek, SetAttr};
use fusebox::protocol::DataOut;
use fusebox::{Errno, FsOptions, FsResult, Statfs, TimeOrNow};
use rustix::fs::{Mode, SeekFrom, Timespec, Timestamps};

/// Largest xattr value and name list Linux allows (XATTR_SIZE_MAX, XATTR_LIST_MAX).
const XATTR_MAX: usize = 65536;

pub(crate) fn errno(e: impl Into<std::io::Error>) -> Errno {
    Errno::from(e.into())
}

pub(crate) fn cstr(name: &OsStr) -> FsResult<CString> {
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

fn timespec(t: Option<TimeOrNow>) -> Timespec {
    let (sec, nsec) = match t {
        None => (0, rustix::fs::UTIME_OMIT as _),
        Some(TimeOrNow::Now) => (0, rustix::fs::UTIME_NOW as _),
        Some(TimeOrNow::Specific(s)) => (s.sec, s.nsec as _),
    };
    Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// The times a SETATTR asks for, or None if it leaves both alone.
pub(crate) fn timestamps(a: &SetAttr) -> Option<Timestamps> {
    (a.atime.is_some() || a.mtime.is_some()).then(|| Timestamps {
        last_access: timespec(a.atime),
        last_modification: timespec(a.mtime),
    })
}

/// Clear setuid/setgid the way a write by an unprivileged user would
/// (both examples negotiate handle_killpriv_v2, so the kernel leaves it to
/// them). `fd` must not be O_PATH: fchmod needs a real open file.
pub(crate) fn kill_suidgid(fd: impl AsFd) -> FsResult<()> {
    let st = rustix::fs::fstat(&fd).map_err(errno)?;
    let mut mode = st.st_mode & 0o7777;
    let mut kill = libc::S_ISUID;
    // setgid without group-exec marks mandatory locking, not privilege.
    if st.st_mode & libc::S_IXGRP != 0 {
        kill |= libc::S_ISGID;
    }
    if mode & kill != 0 {
        mode &= !kill;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(errno)?;
    }
    Ok(())
}

/// The FOPEN_* flags the mount options ask for on every open file.
pub(crate) fn open_flags(o: &FsOptions) -> u32 {
    let mut f = 0;
    if o.direct_io {
        f |= fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES;
    }
    if o.keep_cache {
        f |= fopen::KEEP_CACHE;
    }
    if !o.flush {
        f |= fopen::NOFLUSH;
    }
    f
}

pub(crate) fn seek_from(a: &Lseek) -> FsResult<SeekFrom> {
    Ok(match a.whence {
        libc::SEEK_DATA => SeekFrom::Data(a.offset),
        libc::SEEK_HOLE => SeekFrom::Hole(a.offset),
        libc::SEEK_SET => SeekFrom::Start(a.offset),
        libc::SEEK_END => SeekFrom::End(a.offset as i64),
        libc::SEEK_CUR => SeekFrom::Current(a.offset as i64),
        _ => return Err(Errno::EINVAL),
    })
}

pub(crate) fn statfs(s: &rustix::fs::StatVfs) -> Statfs {
    Statfs {
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        bavail: s.f_bavail,
        files: s.f_files,
        ffree: s.f_ffree,
        bsize: s.f_bsize as u32,
        namelen: s.f_namemax as u32,
        frsize: s.f_frsize as u32,
    }
}

/// Let `fill` (a getxattr or listxattr) write straight into the reply, after
/// `query` (its size-only form) said how much to make room for.
/// Sizing the buffer to what the kernel accepts makes the host answer
/// ERANGE exactly when the caller's buffer would be too small.
pub(crate) fn xattr_into(
    out: &mut DataOut,
    mut query: impl FnMut() -> rustix::io::Result<usize>,
    mut fill: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
) -> FsResult<()> {
    let room = out.limit().min(XATTR_MAX);
    // Size first: the kernel probes security.capability (usually absent)
    // before every write, and zeroing a 64 KiB buffer for each probe costs
    // more than the extra syscall a present attribute pays.
    let mut tries = 0;
    loop {
        let size = query().map_err(errno)?;
        out.truncate(0);
        match out.fill_with(size.min(room), &mut fill) {
            Ok(_) => return Ok(()),
            // Grew between the two calls: ask again, a few times.
            Err(e) if e == rustix::io::Errno::RANGE && size < room && tries < 3 => tries += 1,
            Err(e) => return Err(errno(e)),
        }
    }
}

/// access(2) semantics from a stat, for mounts without default_permissions.
/// (FUSE does not tell us the caller's supplementary groups.)
pub(crate) fn check_access(st: &rustix::fs::Stat, uid: u32, gid: u32, mask: i32) -> FsResult<()> {
    if mask == libc::F_OK {
        return Ok(());
    }
    let mode = st.st_mode;
    if uid == 0 {
        // Root may do anything except execute what no one may execute.
        let any_x = mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
        return if mask & libc::X_OK != 0 && !any_x {
            Err(Errno::EACCES)
        } else {
            Ok(())
        };
    }
    let bits = if st.st_uid == uid {
        (mode >> 6) & 7
    } else if st.st_gid == gid {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    if (mask as u32) & !bits & 7 != 0 {
        Err(Errno::EACCES)
    } else {
        Ok(())
    }
}

/// COPY_FILE_RANGE between two open files, at the offsets the kernel gives.
pub(crate) fn copy_range(fd_in: impl AsFd, fd_out: impl AsFd, a: &CopyFileRange) -> FsResult<u64> {
    let (mut off_in, mut off_out) = (a.off_in, a.off_out);
    let len = a.len.min(usize::MAX as u64) as usize;
    let n = rustix::fs::copy_file_range(fd_in, Some(&mut off_in), fd_out, Some(&mut off_out), len)
        .map_err(errno)?;
    Ok(n as u64)
}
