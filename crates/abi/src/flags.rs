//! Bit flags of the protocol, grouped by the field they live in.

/// INIT flags. Bits 32..63 travel in the `flags2` word (protocol 7.36+);
/// fusebox keeps them as one `u64` and splits only on the wire.
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const FILE_OPS: u64 = 1 << 2;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const SPLICE_WRITE: u64 = 1 << 7;
    pub const SPLICE_MOVE: u64 = 1 << 8;
    pub const SPLICE_READ: u64 = 1 << 9;
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const HANDLE_KILLPRIV: u64 = 1 << 19;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const ABORT_ERROR: u64 = 1 << 21;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const EXPLICIT_INVAL_DATA: u64 = 1 << 25;
    pub const MAP_ALIGNMENT: u64 = 1 << 26;
    pub const SUBMOUNTS: u64 = 1 << 27;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const INIT_RESERVED: u64 = 1 << 31;
    pub const SECURITY_CTX: u64 = 1 << 32;
    pub const HAS_INODE_DAX: u64 = 1 << 33;
    pub const CREATE_SUPP_GROUP: u64 = 1 << 34;
    pub const HAS_EXPIRE_ONLY: u64 = 1 << 35;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const NO_EXPORT_SUPPORT: u64 = 1 << 38;
    pub const HAS_RESEND: u64 = 1 << 39;
    pub const ALLOW_IDMAP: u64 = 1 << 40;
    pub const OVER_IO_URING: u64 = 1 << 41;
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
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NONSEEKABLE: u32 = 1 << 2;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const STREAM: u32 = 1 << 4;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// `fuse_setattr_in::valid`.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_attr::flags`.
pub mod attr {
    pub const SUBMOUNT: u32 = 1 << 0;
    pub const DAX: u32 = 1 << 1;
}

/// `fuse_open_in::open_flags` / `fuse_create_in::open_flags`.
pub mod open_in {
    pub const KILL_SUIDGID: u32 = 1 << 0;
}

/// `fuse_release_in::release_flags`.
pub mod release {
    pub const FLUSH: u32 = 1 << 0;
    pub const FLOCK_UNLOCK: u32 = 1 << 1;
}

/// `fuse_getattr_in::getattr_flags`.
pub const GETATTR_FH: u32 = 1 << 0;

/// `fuse_lk_in::lk_flags`: the lock came from flock(2), not fcntl(2).
pub const LK_FLOCK: u32 = 1 << 0;

/// `fuse_write_in::write_flags`.
pub mod write {
    pub const CACHE: u32 = 1 << 0;
    pub const LOCKOWNER: u32 = 1 << 1;
    pub const KILL_SUIDGID: u32 = 1 << 2;
}

/// `fuse_read_in::read_flags`.
pub const READ_LOCKOWNER: u32 = 1 << 1;

/// `fuse_ioctl_in::flags` / `fuse_ioctl_out::flags`.
pub mod ioctl {
    pub const COMPAT: u32 = 1 << 0;
    pub const UNRESTRICTED: u32 = 1 << 1;
    pub const RETRY: u32 = 1 << 2;
    pub const BIT32: u32 = 1 << 3;
    pub const DIR: u32 = 1 << 4;
    pub const COMPAT_X32: u32 = 1 << 5;
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
