//! A descriptor's file reached by name through /proc: the one way to
//! reopen an O_PATH descriptor with other flags, or to chmod and utime the
//! file behind it (neither call takes an O_PATH descriptor).
//!
//! A directory of `/proc/self/fd` opened once names the process that
//! opened it, not "self": in a process forked later, calls through it land
//! on the parent's descriptors of the same numbers. Direct mode runs this
//! filesystem inside the program, whose children fork with it (a child
//! setting times by relative name after a chdir into the mount reached
//! the parent's fd table and got ENOENT). So the directory serves only the
//! process that opened it; any other (a forked child, or a CLONE_VM child
//! sharing this memory with its own fd table) goes through the path
//! `/proc/thread-self/fd/N`, which the kernel resolves at each call, for
//! the calling thread's own table. Nothing is stored on that path: memory
//! a vfork child shares is its parent's.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::path::DecInt;
use rustix::process::Pid;

pub(crate) struct ProcFds {
    opened_by: Pid,
    dir: OwnedFd,
}

impl ProcFds {
    pub(crate) fn open() -> std::io::Result<ProcFds> {
        let dir = rustix::fs::open(
            "/proc/self/fd",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(ProcFds {
            opened_by: rustix::process::getpid(),
            dir: fusebox::descriptors::keep(dir),
        })
    }

    /// `call(dir, name)` with `name` (relative to `dir`) naming `fd`'s
    /// file for the calling process.
    pub(crate) fn at<R>(
        &self,
        fd: BorrowedFd<'_>,
        call: impl FnOnce(BorrowedFd<'_>, &CStr) -> R,
    ) -> R {
        let number = DecInt::from_fd(fd);
        if rustix::process::getpid() == self.opened_by {
            return call(self.dir.as_fd(), number.as_c_str());
        }
        let mut path = [0u8; 40];
        let prefix = b"/proc/thread-self/fd/";
        let digits = number.as_bytes();
        path[..prefix.len()].copy_from_slice(prefix);
        path[prefix.len()..prefix.len() + digits.len()].copy_from_slice(digits);
        let path = CStr::from_bytes_until_nul(&path).expect("a NUL ends the buffer");
        call(CWD, path)
    }

    /// `at`'s path as one string, for calls that take no directory (the
    /// xattr calls): `/proc/thread-self/fd/N`, resolved by the kernel at
    /// each call.
    pub(crate) fn path(fd: BorrowedFd<'_>) -> std::ffi::CString {
        let mut p = b"/proc/thread-self/fd/".to_vec();
        p.extend_from_slice(DecInt::from_fd(fd).as_bytes());
        std::ffi::CString::new(p).expect("digits contain no NUL")
    }
}
