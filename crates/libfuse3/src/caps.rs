//! `FUSE_CAP_*` (what `fuse_conn_info.capable` and `.want` hold) against
//! the kernel's INIT flags. The two numberings agree for most bits and
//! differ for some (POSIX_ACL and HANDLE_KILLPRIV are swapped), so every
//! conversion goes through this one table.

use fusebox_abi::flags::init as k;

/// `FUSE_CAP_*` values of the 3.14 headers (fuse_common.h).
pub mod cap {
    pub const ASYNC_READ: u32 = 1 << 0;
    pub const POSIX_LOCKS: u32 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u32 = 1 << 3;
    pub const EXPORT_SUPPORT: u32 = 1 << 4;
    pub const DONT_MASK: u32 = 1 << 6;
    pub const SPLICE_WRITE: u32 = 1 << 7;
    pub const SPLICE_MOVE: u32 = 1 << 8;
    pub const SPLICE_READ: u32 = 1 << 9;
    pub const FLOCK_LOCKS: u32 = 1 << 10;
    pub const IOCTL_DIR: u32 = 1 << 11;
    pub const AUTO_INVAL_DATA: u32 = 1 << 12;
    pub const READDIRPLUS: u32 = 1 << 13;
    pub const READDIRPLUS_AUTO: u32 = 1 << 14;
    pub const ASYNC_DIO: u32 = 1 << 15;
    pub const WRITEBACK_CACHE: u32 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u32 = 1 << 17;
    pub const PARALLEL_DIROPS: u32 = 1 << 18;
    pub const POSIX_ACL: u32 = 1 << 19;
    pub const HANDLE_KILLPRIV: u32 = 1 << 20;
    pub const CACHE_SYMLINKS: u32 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u32 = 1 << 24;
    pub const EXPLICIT_INVAL_DATA: u32 = 1 << 25;
    pub const EXPIRE_ONLY: u32 = 1 << 26;
}

/// Each capability with a kernel flag of its own. Splice is left out: it
/// is how a daemon moves data, and fusebox moves it its own way (a program
/// asking for it gets the same results without it).
const TABLE: &[(u32, u64)] = &[
    (cap::ASYNC_READ, k::ASYNC_READ),
    (cap::POSIX_LOCKS, k::POSIX_LOCKS),
    (cap::ATOMIC_O_TRUNC, k::ATOMIC_O_TRUNC),
    (cap::EXPORT_SUPPORT, k::EXPORT_SUPPORT),
    (cap::DONT_MASK, k::DONT_MASK),
    (cap::FLOCK_LOCKS, k::FLOCK_LOCKS),
    (cap::IOCTL_DIR, k::HAS_IOCTL_DIR),
    (cap::AUTO_INVAL_DATA, k::AUTO_INVAL_DATA),
    (cap::READDIRPLUS, k::DO_READDIRPLUS),
    (cap::READDIRPLUS_AUTO, k::READDIRPLUS_AUTO),
    (cap::ASYNC_DIO, k::ASYNC_DIO),
    (cap::WRITEBACK_CACHE, k::WRITEBACK_CACHE),
    (cap::NO_OPEN_SUPPORT, k::NO_OPEN_SUPPORT),
    (cap::PARALLEL_DIROPS, k::PARALLEL_DIROPS),
    (cap::POSIX_ACL, k::POSIX_ACL),
    (cap::HANDLE_KILLPRIV, k::HANDLE_KILLPRIV),
    (cap::CACHE_SYMLINKS, k::CACHE_SYMLINKS),
    (cap::NO_OPENDIR_SUPPORT, k::NO_OPENDIR_SUPPORT),
    (cap::EXPLICIT_INVAL_DATA, k::EXPLICIT_INVAL_DATA),
];

/// Every kernel flag some capability stands for: the ones a libfuse
/// program decides through `want`.
pub fn kernel_flags_covered() -> u64 {
    TABLE.iter().fold(0, |acc, &(_, f)| acc | f)
}

/// What a kernel offering `kernel` lets a program ask for.
pub fn capable(kernel: u64, proto_minor: u32) -> u32 {
    let mut caps = TABLE
        .iter()
        .filter(|&&(_, f)| kernel & f != 0)
        .fold(0, |acc, &(c, _)| acc | c);
    // Invalidation that only expires an entry (NOTIFY_INVAL_ENTRY's
    // FUSE_EXPIRE_ONLY) exists from protocol 7.38 on.
    if kernel & k::HAS_EXPIRE_ONLY != 0 || proto_minor >= 38 {
        caps |= cap::EXPIRE_ONLY;
    }
    // Splice only steers how libfuse moves data; programs may ask for it
    // whatever the kernel says, and get the same results without it.
    caps | cap::SPLICE_READ | cap::SPLICE_WRITE | cap::SPLICE_MOVE
}

/// Capabilities libfuse 3.14 accepts in `want` and never sends to the
/// kernel. HANDLE_KILLPRIV would make the filesystem, not the kernel,
/// clear setuid bits on write: a 3.14 program that asks for it (libfuse
/// asks by default) was never given that duty, so it is not given it here.
const NOT_FORWARDED: u32 = cap::HANDLE_KILLPRIV;

/// The kernel flags for the capabilities in `want`.
pub fn kernel_flags(want: u32) -> u64 {
    let want = want & !NOT_FORWARDED;
    TABLE
        .iter()
        .filter(|&&(c, _)| want & c != 0)
        .fold(0, |acc, &(_, f)| acc | f)
}

/// Which optional callbacks a program has, for [`default_want`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Callbacks {
    pub write_buf: bool,
    pub posix_locks: bool,
    pub flock: bool,
    pub readdirplus: bool,
    pub readdir: bool,
}

/// What libfuse 3.14 wants before a program's init callback: its fixed
/// set, plus what the program's callbacks make possible.
pub fn default_want(has: Callbacks) -> u32 {
    let mut want = cap::ASYNC_READ
        | cap::PARALLEL_DIROPS
        | cap::AUTO_INVAL_DATA
        | cap::HANDLE_KILLPRIV
        | cap::ASYNC_DIO
        | cap::IOCTL_DIR
        | cap::ATOMIC_O_TRUNC;
    if has.write_buf {
        want |= cap::SPLICE_READ;
    }
    if has.readdirplus {
        want |= cap::READDIRPLUS;
        if has.readdir {
            want |= cap::READDIRPLUS_AUTO;
        }
    }
    if has.posix_locks {
        want |= cap::POSIX_LOCKS;
    }
    if has.flock {
        want |= cap::FLOCK_LOCKS;
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_and_killpriv_are_swapped_and_round_trip() {
        assert_eq!(kernel_flags(cap::POSIX_ACL), k::POSIX_ACL);
        assert_eq!(kernel_flags(cap::HANDLE_KILLPRIV), 0);
        assert_eq!(
            capable(k::HANDLE_KILLPRIV, 31) & cap::HANDLE_KILLPRIV,
            cap::HANDLE_KILLPRIV
        );
        assert_eq!(capable(k::POSIX_ACL, 31) & cap::POSIX_ACL, cap::POSIX_ACL);
        assert_ne!(cap::POSIX_ACL as u64, k::POSIX_ACL);
        let all = kernel_flags_covered();
        assert_eq!(kernel_flags(capable(all, 31)), all & !k::HANDLE_KILLPRIV);
        let splice = cap::SPLICE_READ | cap::SPLICE_WRITE | cap::SPLICE_MOVE;
        assert_eq!(capable(k::BIG_WRITES, 31), splice);
        assert_eq!(kernel_flags(splice), 0);
        assert_eq!(capable(0, 38), cap::EXPIRE_ONLY | splice);
    }
}
