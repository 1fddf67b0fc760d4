//! What the kernel would say of the calling process, kept in memory: the
//! effective ids and the umask are asked for by every open, create and
//! stat of the mount (two system calls each, a fifth of a create's), and
//! change only through calls this layer sees.
//!
//! Both are per-process values kept in per-process memory, which a
//! posix_spawn child (a CLONE_VM clone) shares while it runs as a process
//! of its own: while one may run (`intercept::may_be_memory_child`), the
//! umask is neither used nor stored here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::intercept::{may_be_memory_child, raw_syscall};

const UNKNOWN: u64 = u64::MAX;

/// euid << 32 | egid, once asked.
static IDS: AtomicU64 = AtomicU64::new(UNKNOWN);
/// Cleared for good once any thread of the process (or a child sharing
/// its memory) changes an id: glibc changes a process's ids one thread at
/// a time, so for a while threads differ; from then on they are asked.
static IDS_KEPT: AtomicBool = AtomicBool::new(true);

/// The calling thread's effective user and group ids.
pub(crate) fn effective_ids() -> (u32, u32) {
    let kept = IDS_KEPT.load(Ordering::Acquire);
    if kept {
        let ids = IDS.load(Ordering::Acquire);
        if ids != UNKNOWN {
            return ((ids >> 32) as u32, ids as u32);
        }
    }
    let uid = raw_syscall(libc::SYS_geteuid, [0; 6]) as u32;
    let gid = raw_syscall(libc::SYS_getegid, [0; 6]) as u32;
    if kept {
        IDS.store(u64::from(uid) << 32 | u64::from(gid), Ordering::Release);
    }
    (uid, gid)
}

/// The program is about to change an id (setuid, setresgid, setfsuid,
/// setgroups, ...).
pub(crate) fn ids_changing() {
    IDS_KEPT.store(false, Ordering::Release);
    IDS.store(UNKNOWN, Ordering::Release);
}

/// The umask (its 9 bits), once known.
static UMASK: AtomicU64 = AtomicU64::new(UNKNOWN);

/// The process's umask.
pub(crate) fn umask() -> u32 {
    let kept = !may_be_memory_child();
    let seen = UMASK.load(Ordering::Acquire);
    if kept && seen != UNKNOWN {
        return seen as u32;
    }
    // Read by setting, restored at once: a thread of this process
    // changing it at this very moment could lose its change (DESIGN.md).
    let old = raw_syscall(libc::SYS_umask, [0o022, 0, 0, 0, 0, 0]);
    raw_syscall(libc::SYS_umask, [old as u64, 0, 0, 0, 0, 0]);
    let mask = old as u32 & 0o777;
    if kept {
        // Not over a umask(2) made meanwhile.
        let _ = UMASK.compare_exchange(seen, u64::from(mask), Ordering::AcqRel, Ordering::Relaxed);
    }
    mask
}

/// umask(2) of the program: made, and kept.
pub(crate) fn set_umask(mask: u64) -> i64 {
    let old = raw_syscall(libc::SYS_umask, [mask, 0, 0, 0, 0, 0]);
    let kept = if may_be_memory_child() {
        UNKNOWN
    } else {
        mask & 0o777
    };
    UMASK.store(kept, Ordering::Release);
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_umask_follows_umask_calls() {
        let before = set_umask(0o027);
        assert_eq!(umask(), 0o027);
        assert_eq!(set_umask(0o002), 0o027);
        assert_eq!(umask(), 0o002);
        // What the kernel has, not only what was kept.
        let raw = raw_syscall(libc::SYS_umask, [0o002, 0, 0, 0, 0, 0]);
        assert_eq!(raw, 0o002);
        set_umask(before as u64);
        assert_eq!(umask(), before as u32 & 0o777);
    }

    #[test]
    fn ids_are_the_kernels() {
        let (uid, gid) = effective_ids();
        assert_eq!(uid, rustix::process::geteuid().as_raw());
        assert_eq!(gid, rustix::process::getegid().as_raw());
        // Kept: asked again, the same.
        assert_eq!(effective_ids(), (uid, gid));
    }
}
