//! `struct stat`, `struct statvfs` and `struct flock` against fusebox's
//! types.

use std::time::Duration;

use fusebox::{FileAttr, LockInfo, Statfs, Timespec};

pub fn attr_from_stat(st: &libc::stat) -> FileAttr {
    let ts = |sec: i64, nsec: i64| Timespec {
        sec,
        nsec: nsec.clamp(0, 999_999_999) as u32,
    };
    FileAttr {
        ino: st.st_ino,
        size: st.st_size.max(0) as u64,
        blocks: st.st_blocks.max(0) as u64,
        atime: ts(st.st_atime, st.st_atime_nsec),
        mtime: ts(st.st_mtime, st.st_mtime_nsec),
        ctime: ts(st.st_ctime, st.st_ctime_nsec),
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize.max(0) as u32,
    }
}

/// `attr`'s fields into `st` (what setattr hands the program: only the
/// fields `to_set` names mean anything; the caller zeroes the rest).
pub fn fill_stat(st: &mut libc::stat, attr: &FileAttr) {
    st.st_ino = attr.ino;
    st.st_size = attr.size as i64;
    st.st_blocks = attr.blocks as i64;
    st.st_atime = attr.atime.sec;
    st.st_atime_nsec = attr.atime.nsec as i64;
    st.st_mtime = attr.mtime.sec;
    st.st_mtime_nsec = attr.mtime.nsec as i64;
    st.st_ctime = attr.ctime.sec;
    st.st_ctime_nsec = attr.ctime.nsec as i64;
    st.st_mode = attr.mode;
    st.st_nlink = attr.nlink as _;
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_rdev = attr.rdev as _;
    st.st_blksize = attr.blksize as _;
}

/// Seconds as a C double to a lifetime; negative or NaN is 0.
pub fn ttl(secs: f64) -> Duration {
    if secs.is_finite() && secs > 0.0 {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    }
}

pub fn statfs_from_statvfs(s: &libc::statvfs) -> Statfs {
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

pub fn lock_from_flock(l: &libc::flock) -> LockInfo {
    let start = l.l_start.max(0) as u64;
    // A length of 0 means "to the end of the file"; the kernel's end is
    // inclusive.
    let end = if l.l_len == 0 {
        i64::MAX as u64
    } else {
        start + l.l_len.max(1) as u64 - 1
    };
    LockInfo {
        start,
        end,
        typ: l.l_type as i32,
        pid: l.l_pid as u32,
    }
}

/// flock(2)'s operation for a lock of type `typ` (F_RDLCK, F_WRLCK,
/// F_UNLCK); LOCK_NB unless the caller waits for it.
pub fn flock_operation(typ: i32, sleep: bool) -> i32 {
    let op = match typ {
        libc::F_RDLCK => libc::LOCK_SH,
        libc::F_WRLCK => libc::LOCK_EX,
        _ => libc::LOCK_UN,
    };
    if sleep {
        op
    } else {
        op | libc::LOCK_NB
    }
}
