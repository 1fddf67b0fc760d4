//! Taking ownership of the door descriptor a process inherited by number.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};

/// The inherited descriptor `fd` as owned, if it is an open socket.
///
/// Called once per process, for the number the launcher put in
/// `DOOR_VAR` (the launcher and every served process keep that
/// descriptor open and inheritable for this purpose; nothing else in the
/// process takes it over: `close` and `close_range` of it are refused).
pub fn adopt(fd: i32) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: F_GETFD reads a descriptor's flags and touches no memory;
    // it fails with EBADF if `fd` is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one `struct stat` into the buffer given, which
    // is that size; it is read only after fstat succeeded.
    let st = unsafe {
        if libc::fstat(fd, st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: `fd` is open (checked above) and, as said, this process has
    // no other owner for it: the OwnedFd closes it only when dropped, and
    // the client holding it lives for the process (leaked).
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
