//! Bit flags of the protocol, grouped by the field they live in.

/// INIT flags. Bits 32..63 travel in the `flags2` word (protocol 7.36+);
/// fusebox keeps them as one `u64` and splits only on the wire.
pub mod init {
    /// `FUSE_ASYNC_READ`: the kernel may send several READs of one file at
    /// once.
    pub const ASYNC_READ: u64 = 1 << 0;
    /// `FUSE_POSIX_LOCKS`: the filesystem implements fcntl(2) locks
    /// (GETLK/SETLK); otherwise the kernel keeps them locally.
    pub const POSIX_LOCKS: u64 = 1 << 1;
    /// `FUSE_FILE_OPS`: meant for sending the file handle with fstat(2) and the
    /// like; never implemented by the kernel.
    pub const FILE_OPS: u64 = 1 << 2;
    /// `FUSE_ATOMIC_O_TRUNC`: the filesystem handles O_TRUNC in OPEN, so no
    /// separate SETATTR is sent.
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    /// `FUSE_EXPORT_SUPPORT`: the filesystem answers LOOKUP of "." and "..", so
    /// it can be exported over NFS.
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    /// `FUSE_BIG_WRITES`: writes larger than one page may arrive in one WRITE.
    pub const BIG_WRITES: u64 = 1 << 5;
    /// `FUSE_DONT_MASK`: the kernel does not apply the umask on create; the
    /// filesystem gets it in `umask` and applies it.
    pub const DONT_MASK: u64 = 1 << 6;
    /// `FUSE_SPLICE_WRITE`: the kernel accepts replies spliced into /dev/fuse.
    pub const SPLICE_WRITE: u64 = 1 << 7;
    /// `FUSE_SPLICE_MOVE`: the kernel may move, not copy, pages spliced into
    /// /dev/fuse.
    pub const SPLICE_MOVE: u64 = 1 << 8;
    /// `FUSE_SPLICE_READ`: requests may be spliced out of /dev/fuse.
    pub const SPLICE_READ: u64 = 1 << 9;
    /// `FUSE_FLOCK_LOCKS`: the filesystem implements flock(2) locks (SETLK
    /// with `LK_FLOCK`).
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    /// `FUSE_HAS_IOCTL_DIR`: the kernel sends IOCTL on directories too.
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    /// `FUSE_AUTO_INVAL_DATA`: the kernel drops cached pages when it sees the
    /// file's mtime or size change.
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    /// `FUSE_DO_READDIRPLUS`: the kernel may list directories with READDIRPLUS
    /// (names with their attributes).
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    /// `FUSE_READDIRPLUS_AUTO`: the kernel chooses between READDIR and
    /// READDIRPLUS as it sees fit.
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    /// `FUSE_ASYNC_DIO`: direct I/O may be submitted asynchronously, several
    /// requests at once.
    pub const ASYNC_DIO: u64 = 1 << 15;
    /// `FUSE_WRITEBACK_CACHE`: buffered writes go to the page cache and reach
    /// the filesystem later.
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    /// `FUSE_NO_OPEN_SUPPORT`: the kernel takes ENOSYS to OPEN as "opens need
    /// no call" and stops sending them.
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    /// `FUSE_PARALLEL_DIROPS`: LOOKUP and READDIR in one directory may run at
    /// the same time.
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    /// `FUSE_HANDLE_KILLPRIV`: the filesystem clears suid/sgid and capabilities
    /// on write, chown and truncate.
    pub const HANDLE_KILLPRIV: u64 = 1 << 19;
    /// `FUSE_POSIX_ACL`: the filesystem stores POSIX ACLs and the kernel
    /// enforces them.
    pub const POSIX_ACL: u64 = 1 << 20;
    /// `FUSE_ABORT_ERROR`: reading /dev/fuse after an abort fails with
    /// ECONNABORTED instead of ENODEV.
    pub const ABORT_ERROR: u64 = 1 << 21;
    /// `FUSE_MAX_PAGES`: `fuse_init_out.max_pages` holds the most pages one
    /// request may carry.
    pub const MAX_PAGES: u64 = 1 << 22;
    /// `FUSE_CACHE_SYMLINKS`: the kernel caches READLINK answers in the page
    /// cache.
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    /// `FUSE_NO_OPENDIR_SUPPORT`: the kernel takes ENOSYS to OPENDIR as "opens
    /// need no call" and stops sending them.
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    /// `FUSE_EXPLICIT_INVAL_DATA`: cached pages are dropped only when the
    /// filesystem asks (NOTIFY_INVAL_INODE).
    pub const EXPLICIT_INVAL_DATA: u64 = 1 << 25;
    /// `FUSE_MAP_ALIGNMENT`: `fuse_init_out.map_alignment` holds log2 of the
    /// DAX mapping alignment.
    pub const MAP_ALIGNMENT: u64 = 1 << 26;
    /// `FUSE_SUBMOUNTS`: the kernel mounts directories marked
    /// `attr::SUBMOUNT` as submounts.
    pub const SUBMOUNTS: u64 = 1 << 27;
    /// `FUSE_HANDLE_KILLPRIV_V2`: as `HANDLE_KILLPRIV`, with the VFS's rules
    /// (CAP_FSETID, group execute) and the kill bits passed in requests.
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    /// `FUSE_SETXATTR_EXT`: SETXATTR carries the extended `fuse_setxattr_in`
    /// with `setxattr_flags`.
    pub const SETXATTR_EXT: u64 = 1 << 29;
    /// `FUSE_INIT_EXT`: the INIT request and reply use the extended layout
    /// with `flags2`.
    pub const INIT_EXT: u64 = 1 << 30;
    /// `FUSE_INIT_RESERVED`: reserved by the kernel; never set.
    pub const INIT_RESERVED: u64 = 1 << 31;
    /// `FUSE_SECURITY_CTX`: CREATE, MKDIR, SYMLINK and MKNOD carry the new
    /// file's security context.
    pub const SECURITY_CTX: u64 = 1 << 32;
    /// `FUSE_HAS_INODE_DAX`: DAX is chosen per inode (`attr::DAX`).
    pub const HAS_INODE_DAX: u64 = 1 << 33;
    /// `FUSE_CREATE_SUPP_GROUP`: creating requests carry the caller's
    /// supplementary group that matches the parent directory.
    pub const CREATE_SUPP_GROUP: u64 = 1 << 34;
    /// `FUSE_HAS_EXPIRE_ONLY`: NOTIFY_INVAL_ENTRY may only expire an entry
    /// (`EXPIRE_ONLY`) rather than drop it.
    pub const HAS_EXPIRE_ONLY: u64 = 1 << 35;
    /// `FUSE_DIRECT_IO_ALLOW_MMAP`: files opened with `fopen::DIRECT_IO` may
    /// still be mapped shared.
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    /// `FUSE_PASSTHROUGH` (7.40): reads and writes of a file opened with
    /// `fopen::PASSTHROUGH` go straight to a backing file.
    pub const PASSTHROUGH: u64 = 1 << 37;
    /// `FUSE_NO_EXPORT_SUPPORT`: the filesystem cannot be exported; the kernel
    /// refuses file handles for it.
    pub const NO_EXPORT_SUPPORT: u64 = 1 << 38;
    /// `FUSE_HAS_RESEND`: the kernel can send pending requests again
    /// (NOTIFY_RESEND), marking them with `UNIQUE_RESEND`.
    pub const HAS_RESEND: u64 = 1 << 39;
    /// `FUSE_ALLOW_IDMAP`: the mount may be idmapped.
    pub const ALLOW_IDMAP: u64 = 1 << 40;
    /// `FUSE_OVER_IO_URING`: the server may take requests through io_uring
    /// rings instead of read(2).
    pub const OVER_IO_URING: u64 = 1 << 41;
    /// `FUSE_REQUEST_TIMEOUT`: `fuse_init_out.request_timeout` sets seconds
    /// after which the kernel aborts an unanswered request.
    pub const REQUEST_TIMEOUT: u64 = 1 << 42;

    /// Names for logs and `fusebox stats`, in bit order.
    pub const NAMES: &[(u64, &str)] = &[
        (ASYNC_READ, "async_read"),
        (POSIX_LOCKS, "posix_locks"),
        (FILE_OPS, "file_ops"),
        (ATOMIC_O_TRUNC, "atomic_o_trunc"),
        (EXPORT_SUPPORT, "export_support"),
        (BIG_WRITES, "big_writes"),
        (DONT_MASK, "dont_mask"),
        (SPLICE_WRITE, "splice_write"),
        (SPLICE_MOVE, "splice_move"),
        (SPLICE_READ, "splice_read"),
        (FLOCK_LOCKS, "flock_locks"),
        (HAS_IOCTL_DIR, "has_ioctl_dir"),
        (AUTO_INVAL_DATA, "auto_inval_data"),
        (DO_READDIRPLUS, "do_readdirplus"),
        (READDIRPLUS_AUTO, "readdirplus_auto"),
        (ASYNC_DIO, "async_dio"),
        (WRITEBACK_CACHE, "writeback_cache"),
        (NO_OPEN_SUPPORT, "no_open_support"),
        (PARALLEL_DIROPS, "parallel_dirops"),
        (HANDLE_KILLPRIV, "handle_killpriv"),
        (POSIX_ACL, "posix_acl"),
        (ABORT_ERROR, "abort_error"),
        (MAX_PAGES, "max_pages"),
        (CACHE_SYMLINKS, "cache_symlinks"),
        (NO_OPENDIR_SUPPORT, "no_opendir_support"),
        (EXPLICIT_INVAL_DATA, "explicit_inval_data"),
        (MAP_ALIGNMENT, "map_alignment"),
        (SUBMOUNTS, "submounts"),
        (HANDLE_KILLPRIV_V2, "handle_killpriv_v2"),
        (SETXATTR_EXT, "setxattr_ext"),
        (INIT_EXT, "init_ext"),
        (SECURITY_CTX, "security_ctx"),
        (HAS_INODE_DAX, "has_inode_dax"),
        (CREATE_SUPP_GROUP, "create_supp_group"),
        (HAS_EXPIRE_ONLY, "has_expire_only"),
        (DIRECT_IO_ALLOW_MMAP, "direct_io_allow_mmap"),
        (PASSTHROUGH, "passthrough"),
        (NO_EXPORT_SUPPORT, "no_export_support"),
        (HAS_RESEND, "has_resend"),
        (ALLOW_IDMAP, "allow_idmap"),
        (OVER_IO_URING, "over_io_uring"),
        (REQUEST_TIMEOUT, "request_timeout"),
    ];
}

/// `fuse_open_out::open_flags`.
pub mod fopen {
    /// `FOPEN_DIRECT_IO`: reads and writes of this open file bypass the page
    /// cache.
    pub const DIRECT_IO: u32 = 1 << 0;
    /// `FOPEN_KEEP_CACHE`: keep the file's cached pages rather than dropping
    /// them on open.
    pub const KEEP_CACHE: u32 = 1 << 1;
    /// `FOPEN_NONSEEKABLE`: the file cannot be seeked (lseek fails,
    /// pread/pwrite too).
    pub const NONSEEKABLE: u32 = 1 << 2;
    /// `FOPEN_CACHE_DIR`: the kernel may cache this directory's listing.
    pub const CACHE_DIR: u32 = 1 << 3;
    /// `FOPEN_STREAM`: the file is a stream with no position at all, like a
    /// pipe.
    pub const STREAM: u32 = 1 << 4;
    /// `FOPEN_NOFLUSH`: close(2) sends no FLUSH for this file.
    pub const NOFLUSH: u32 = 1 << 5;
    /// `FOPEN_PARALLEL_DIRECT_WRITES`: direct writes to this inode may run at
    /// the same time.
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
    /// `FOPEN_PASSTHROUGH`: reads and writes go to the backing file named by
    /// `fuse_open_out.backing_id`.
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// `fuse_setattr_in::valid`.
pub mod fattr {
    /// `FATTR_MODE`: `mode` is set.
    pub const MODE: u32 = 1 << 0;
    /// `FATTR_UID`: `uid` is set.
    pub const UID: u32 = 1 << 1;
    /// `FATTR_GID`: `gid` is set.
    pub const GID: u32 = 1 << 2;
    /// `FATTR_SIZE`: `size` is set (truncate).
    pub const SIZE: u32 = 1 << 3;
    /// `FATTR_ATIME`: `atime`/`atimensec` are set.
    pub const ATIME: u32 = 1 << 4;
    /// `FATTR_MTIME`: `mtime`/`mtimensec` are set.
    pub const MTIME: u32 = 1 << 5;
    /// `FATTR_FH`: `fh` names the open file the change came through.
    pub const FH: u32 = 1 << 6;
    /// `FATTR_ATIME_NOW`: set atime to the current time (with `ATIME`).
    pub const ATIME_NOW: u32 = 1 << 7;
    /// `FATTR_MTIME_NOW`: set mtime to the current time (with `MTIME`).
    pub const MTIME_NOW: u32 = 1 << 8;
    /// `FATTR_LOCKOWNER`: `lock_owner` is valid.
    pub const LOCKOWNER: u32 = 1 << 9;
    /// `FATTR_CTIME`: `ctime`/`ctimensec` are set.
    pub const CTIME: u32 = 1 << 10;
    /// `FATTR_KILL_SUIDGID`: clear suid and sgid as well (sent under
    /// `init::HANDLE_KILLPRIV_V2`).
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_attr::flags`.
pub mod attr {
    /// `FUSE_ATTR_SUBMOUNT`: the directory is the root of a submount.
    pub const SUBMOUNT: u32 = 1 << 0;
    /// `FUSE_ATTR_DAX`: use DAX for this file when DAX is chosen per inode.
    pub const DAX: u32 = 1 << 1;
}

/// `fuse_open_in::open_flags` / `fuse_create_in::open_flags`.
pub mod open_in {
    /// `FUSE_OPEN_KILL_SUIDGID`: clear suid and sgid (CREATE, or OPEN with
    /// O_TRUNC; sent under `init::HANDLE_KILLPRIV_V2`).
    pub const KILL_SUIDGID: u32 = 1 << 0;
}

/// `fuse_release_in::release_flags`.
pub mod release {
    /// `FUSE_RELEASE_FLUSH`: flush the file's data as part of this release.
    pub const FLUSH: u32 = 1 << 0;
    /// `FUSE_RELEASE_FLOCK_UNLOCK`: drop the flock(2) lock held through this
    /// handle (`lock_owner` names it).
    pub const FLOCK_UNLOCK: u32 = 1 << 1;
}

/// `fuse_getattr_in::getattr_flags`.
pub const GETATTR_FH: u32 = 1 << 0;

/// `fuse_lk_in::lk_flags`: the lock came from flock(2), not fcntl(2).
pub const LK_FLOCK: u32 = 1 << 0;

/// `fuse_write_in::write_flags`.
pub mod write {
    /// `FUSE_WRITE_CACHE`: a delayed write from the page cache; the file
    /// handle is a guess.
    pub const CACHE: u32 = 1 << 0;
    /// `FUSE_WRITE_LOCKOWNER`: `lock_owner` is valid.
    pub const LOCKOWNER: u32 = 1 << 1;
    /// `FUSE_WRITE_KILL_SUIDGID`: clear suid and sgid as well (sent under
    /// `init::HANDLE_KILLPRIV_V2`).
    pub const KILL_SUIDGID: u32 = 1 << 2;
}

/// `fuse_read_in::read_flags`.
pub const READ_LOCKOWNER: u32 = 1 << 1;

/// `fuse_ioctl_in::flags` / `fuse_ioctl_out::flags`.
pub mod ioctl {
    /// `FUSE_IOCTL_COMPAT`: a 32-bit ioctl from a compat task on a 64-bit
    /// kernel.
    pub const COMPAT: u32 = 1 << 0;
    /// `FUSE_IOCTL_UNRESTRICTED`: not limited to well-formed ioctls; the
    /// filesystem may ask to retry with other buffers (CUSE).
    pub const UNRESTRICTED: u32 = 1 << 1;
    /// `FUSE_IOCTL_RETRY` (reply): call again with the iovecs that follow.
    pub const RETRY: u32 = 1 << 2;
    /// `FUSE_IOCTL_32BIT`: the caller is a 32-bit task.
    pub const BIT32: u32 = 1 << 3;
    /// `FUSE_IOCTL_DIR`: the file is a directory.
    pub const DIR: u32 = 1 << 4;
    /// `FUSE_IOCTL_COMPAT_X32`: an x32 ioctl (32-bit pointers, 64-bit time_t)
    /// on a 64-bit kernel.
    pub const COMPAT_X32: u32 = 1 << 5;
    /// `FUSE_IOCTL_MAX_IOV`: most iovecs, in and out together, a retry may
    /// name.
    pub const MAX_IOV: u32 = 256;
}

/// `fuse_poll_in::flags`: the kernel wants a NOTIFY_POLL when ready.
pub const POLL_SCHEDULE_NOTIFY: u32 = 1 << 0;

/// `fuse_fsync_in::fsync_flags`.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;

/// `fuse_setxattr_in::setxattr_flags`.
pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;

/// `fuse_notify_inval_entry_out::flags`.
pub const EXPIRE_ONLY: u32 = 1 << 0;
