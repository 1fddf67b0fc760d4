//! Protocol-wide numbers.

/// Major protocol version; a kernel with another major is refused.
pub const KERNEL_VERSION: u32 = 7;
/// Newest minor version fusebox speaks. Older kernels are served at their
/// own minor (down to [`MIN_KERNEL_MINOR`]).
pub const KERNEL_MINOR_VERSION: u32 = 45;
/// Oldest minor version fusebox accepts: Linux 5.10 era kernels speak 7.31+.
pub const MIN_KERNEL_MINOR: u32 = 31;
/// The nodeid of the root directory.
pub const ROOT_ID: u64 = 1;
/// The kernel refuses reads of /dev/fuse into buffers smaller than this.
pub const MIN_READ_BUFFER: usize = 8192;
/// Set in `InHeader::unique` of a request the kernel sends again after
/// FUSE_NOTIFY_RESEND (protocol 7.40, `FUSE_UNIQUE_RESEND`).
pub const UNIQUE_RESEND: u64 = 1 << 63;
/// Set in the unique of an INTERRUPT request (`FUSE_INT_REQ_BIT`).
pub const INT_REQ_BIT: u64 = 1;
/// Pre-7.9 kernels sent a shorter `fuse_entry_out`; kept for negotiation.
pub const COMPAT_ENTRY_OUT_SIZE: usize = 120;
/// `fuse_attr_out` as pre-7.9 kernels expect it (`FUSE_COMPAT_ATTR_OUT_SIZE`).
pub const COMPAT_ATTR_OUT_SIZE: usize = 96;
/// `fuse_mknod_in` from kernels before 7.12, without `umask`.
pub const COMPAT_MKNOD_IN_SIZE: usize = 8;
/// `fuse_write_in` from kernels before 7.9, without `lock_owner` and `flags`.
pub const COMPAT_WRITE_IN_SIZE: usize = 24;
/// `fuse_statfs_out` as kernels before 7.4 expect it, without `frsize`.
pub const COMPAT_STATFS_SIZE: usize = 48;
/// `fuse_setxattr_in` without `setxattr_flags`: what the kernel sends unless
/// the SETXATTR_EXT init flag was agreed (7.33).
pub const COMPAT_SETXATTR_IN_SIZE: usize = 8;
/// `fuse_init_out` for kernels before 7.5: major and minor only.
pub const COMPAT_INIT_OUT_SIZE: usize = 8;
/// `fuse_init_out` for kernels before 7.23, up to and including `max_write`.
pub const COMPAT_22_INIT_OUT_SIZE: usize = 24;
/// `fuse_init_in` before 7.36 (no flags2 and reserved words).
pub const COMPAT_INIT_IN_SIZE: usize = 16;
/// Most pages one request may carry (`FUSE_MAX_MAX_PAGES` in the kernel).
pub const MAX_MAX_PAGES: u32 = 256;
/// Dirent records are padded to this alignment.
pub const DIRENT_ALIGN: usize = 8;
/// Size of the `in_out` area of a FUSE-over-io_uring entry's header, which
/// holds the `fuse_in_header` or `fuse_out_header`
/// (`FUSE_URING_IN_OUT_HEADER_SZ`).
pub const URING_IN_OUT_HEADER_SZ: usize = 128;
/// Size of the `op_in` area that follows it, holding the opcode's fixed
/// argument struct (`FUSE_URING_OP_IN_OUT_SZ`).
pub const URING_OP_IN_OUT_SZ: usize = 128;

/// ioctl numbers on /dev/fuse (`_IOR(229, 0, u32)` and friends), computed
/// with the generic Linux encoding: dir << 30 | size << 16 | type << 8 | nr.
pub mod ioctl {
    const IOC_WRITE: u32 = 1;
    const IOC_READ: u32 = 2;
    const MAGIC: u32 = 229;
    const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
        (dir << 30) | (size << 16) | (MAGIC << 8) | nr
    }
    /// `FUSE_DEV_IOC_CLONE`: attach a fresh /dev/fuse fd to a session.
    pub const DEV_IOC_CLONE: u32 = ioc(IOC_READ, 0, 4);
    /// `FUSE_DEV_IOC_BACKING_OPEN` (7.40): register a passthrough backing file.
    pub const DEV_IOC_BACKING_OPEN: u32 = ioc(IOC_WRITE, 1, 16);
    /// `FUSE_DEV_IOC_BACKING_CLOSE` (7.40).
    pub const DEV_IOC_BACKING_CLOSE: u32 = ioc(IOC_WRITE, 2, 4);
}
