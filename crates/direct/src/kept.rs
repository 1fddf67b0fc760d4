//! The filesystem's own descriptors, kept out of the application's way
//! (see `fusebox::descriptors`): each one the filesystem hands over is
//! moved to `FLOOR` or above — where programs rarely number their own, as
//! the kernel gives the lowest free number — and remembered there by the
//! identity of what it opens, so that the application's close,
//! close_range and dup2 leave it alone (route.rs). Before this, bash's
//! `exec 3>/dev/null` put /dev/null where stackfs kept its source's root,
//! and every later path in the mount failed.
//!
//! A descriptor the filesystem closes stays remembered (it closes it
//! through its own `OwnedFd`, which this module does not see) until the
//! keeper gives the number out again; the identity tells: a number now
//! open on something else is the application's. (A number the application
//! got on the very file the filesystem had open there is taken for the
//! filesystem's: it needs 512 descriptors open and the source's file
//! opened directly.)

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::intercept::raw_syscall;

/// Where the filesystem's descriptors go: below the 1,024 many programs
/// run with, above what they number their own.
pub(crate) const FLOOR: i32 = 512;
/// Descriptors remembered, from FLOOR on (this machine allows 20,000).
const SLOTS: usize = 32_768;

/// The identity of the file behind each kept descriptor (0: none).
static KEPT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Device and inode, hashed; never 0. None if `fd` is not open.
fn identity(fd: i32) -> Option<u64> {
    // x86_64's struct stat, 144 bytes: st_dev, then st_ino.
    let mut st = [0u64; 18];
    let ret = raw_syscall(
        libc::SYS_fstat,
        [fd as u64, st.as_mut_ptr() as u64, 0, 0, 0, 0],
    );
    if ret < 0 {
        return None;
    }
    Some(identity_of(st[0], st[1]))
}

fn identity_of(dev: u64, ino: u64) -> u64 {
    (dev ^ ino.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

fn slot(fd: i32) -> Option<&'static AtomicU64> {
    KEPT.get(usize::try_from(fd.checked_sub(FLOOR)?).ok()?)
}

/// The keeper `fusebox::descriptors::keep` calls in direct mode, with the
/// device and inode `fd` opens if the filesystem knows them.
fn keeper(fd: OwnedFd, known: Option<(u64, u64)>) -> OwnedFd {
    let remember = |fd: &OwnedFd| match known {
        Some((dev, ino)) => {
            if let Some(s) = slot(fd.as_raw_fd()) {
                s.store(identity_of(dev, ino), Ordering::Release);
            }
        }
        None => remember_raw(fd.as_raw_fd()),
    };
    if slot(fd.as_raw_fd()).is_some() {
        remember(&fd);
        return fd;
    }
    // Fails where the descriptor limit is at or below FLOOR, or every
    // number above it is taken: the filesystem keeps it where it is.
    let Ok(high) = rustix::io::fcntl_dupfd_cloexec(&fd, FLOOR) else {
        return fd;
    };
    // Past the table (tens of thousands open): out of the way still,
    // though not guarded.
    remember(&high);
    high
}

fn remember_raw(fd: i32) {
    if let (Some(s), Some(id)) = (slot(fd), identity(fd)) {
        s.store(id, Ordering::Release);
    }
}

/// `keeper` for a descriptor of direct mode's own, held by number (an
/// open file's lock descriptor): the number to use from now on.
pub(crate) fn keep_raw(fd: i32) -> i32 {
    if slot(fd).is_some() {
        remember_raw(fd);
        return fd;
    }
    let high = raw_syscall(
        libc::SYS_fcntl,
        [
            fd as u64,
            libc::F_DUPFD_CLOEXEC as u64,
            FLOOR as u64,
            0,
            0,
            0,
        ],
    );
    if high < 0 {
        return fd;
    }
    let high = high as i32;
    raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    remember_raw(high);
    high
}

/// From now on, descriptors the filesystem keeps are kept clear of the
/// application. Call before building the filesystem (its root's
/// descriptor is one); calling again does nothing.
pub fn keep_descriptors() {
    fusebox::descriptors::set_keeper(keeper);
}

/// Whether `fd` is one of the filesystem's kept descriptors (a system call
/// only for a number remembered here).
pub(crate) fn is_kept(fd: i32) -> bool {
    let Some(s) = slot(fd) else {
        return false;
    };
    let id = s.load(Ordering::Acquire);
    if id == 0 {
        return false;
    }
    // Else closed by the filesystem since, the number reused by the
    // application or by nothing. The entry is left for the keeper to
    // overwrite: clearing it here could race with the filesystem opening
    // the same file at the same number again.
    identity(fd) == Some(id)
}

/// The kept descriptors in `first..=last`, in order.
pub(crate) fn kept_in(first: u32, last: u32) -> impl Iterator<Item = u32> {
    let lo = first.max(FLOOR as u32);
    let hi = last.min(FLOOR as u32 + SLOTS as u32 - 1);
    (lo..=hi).filter(|&fd| {
        KEPT[(fd - FLOOR as u32) as usize].load(Ordering::Relaxed) != 0 && is_kept(fd as i32)
    })
}
