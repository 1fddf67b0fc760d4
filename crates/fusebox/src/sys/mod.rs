//! The few raw syscalls rustix does not wrap: ioctls on /dev/fuse, reads
//! into uninitialized buffers, io_uring ring entries ([`uring`]), the
//! shared state memfd of recovery ([`shared_map`]), and taking over an fd
//! inherited from the supervisor.
//!
//! This is the only module of the library allowed `unsafe`; each block says
//! why it is sound.
#![allow(unsafe_code)]

pub mod ring_area;
pub mod shared_map;
pub mod uring;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use fusebox_abi as abi;

/// Open a new /dev/fuse fd and attach it to the session of `session`, so a
/// worker gets its own request channel (FUSE_DEV_IOC_CLONE, Linux 4.2+).
pub fn clone_device(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        "/dev/fuse",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut source: u32 = session.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the source fd number) through
    // the pointer; `source` is a live, aligned u32 for the whole call and the
    // fd argument is owned by `fd`, open for the duration.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            abi::ioctl::DEV_IOC_CLONE as _,
            &mut source as *mut u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Register `backing` as a passthrough backing file (FUSE_DEV_IOC_BACKING_OPEN,
/// 7.40+); returns the backing id to put in an open reply.
pub fn backing_open(device: BorrowedFd<'_>, backing: BorrowedFd<'_>) -> io::Result<i32> {
    let map = abi::BackingMap {
        fd: backing.as_raw_fd(),
        flags: 0,
        padding: 0,
    };
    // SAFETY: the ioctl reads a `fuse_backing_map` (16 bytes, matching
    // `BackingMap`'s asserted layout) through the pointer, which stays valid
    // for the call; both fds are borrowed and therefore open.
    let rc = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            abi::ioctl::DEV_IOC_BACKING_OPEN as _,
            &map as *const abi::BackingMap,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Drop a backing id registered with [`backing_open`].
pub fn backing_close(device: BorrowedFd<'_>, backing_id: i32) -> io::Result<()> {
    let id: u32 = backing_id as u32;
    // SAFETY: the ioctl reads one u32 through the pointer, valid for the call.
    let rc = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            abi::ioctl::DEV_IOC_BACKING_CLOSE as _,
            &id as *const u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `pread` up to `len` bytes at `offset` into the spare capacity of `buf`,
/// without zero-filling it first (a 128 KiB memset per READ is measurable).
pub fn pread_append(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    buf.reserve(len);
    let start = buf.len();
    let spare = &mut buf.spare_capacity_mut()[..len];
    let (filled, _) = rustix::io::pread(fd, spare, offset)?;
    let n = filled.len();
    // SAFETY: pread initialized the first `n` bytes of the spare capacity
    // (rustix returns exactly the initialized prefix), and `start + n` is
    // within the capacity reserved above.
    unsafe { buf.set_len(start + n) };
    Ok(n)
}

/// Move thread `tid` of this process (0: the calling thread) to SCHED_IDLE,
/// or back to SCHED_OTHER (rustix has no sched_setscheduler).
pub fn set_sched_policy(tid: i32, idle: bool) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    // SAFETY: `param` is a valid sched_param for the duration of the call;
    // `tid` names a thread (Linux takes thread ids here), or 0 the caller;
    // nothing else is read or written.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The scheduling policy of thread `tid` (0: the calling thread).
pub fn sched_policy(tid: i32) -> io::Result<i32> {
    // SAFETY: reads no memory; `tid` is a plain integer.
    let rc = unsafe { libc::sched_getscheduler(tid) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Take ownership of an fd this process inherited by number (the
/// supervisor's end of the handoff socket, named in an environment
/// variable). Fails unless `fd` is open and a socket.
pub fn take_inherited_socket(fd: i32) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd < 3 {
        return Err(io::Error::other(format!(
            "fd {fd} is not an inherited socket"
        )));
    }
    // SAFETY: `fd` is a number only; borrowing it to fstat has no effect
    // if it is closed (EBADF).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let st = rustix::fs::fstat(borrowed)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(io::Error::other(format!("fd {fd} is not a socket")));
    }
    // SAFETY: the fd is open (fstat succeeded) and nothing else in this
    // process owns it: it was inherited across exec under a number only
    // the environment names, and the caller takes it once (it removes
    // the variable).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// CPUs the kernel may run applications on: it makes one queue for each
/// possible CPU and routes a request to the queue of the caller's CPU.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let last = match part.split_once('-') {
            Some((_, hi)) => hi.parse::<usize>().ok()?,
            None => part.parse::<usize>().ok()?,
        };
        max = Some(max.map_or(last, |m: usize| m.max(last)));
    }
    max.map(|m| m + 1)
}

/// Take ownership of an io_uring fd this process inherited by number (a
/// ring its supervisor holds, named in the handoff message); it is made
/// close-on-exec again. Fails unless `fd` is open and an io_uring.
pub fn take_inherited_ring(fd: i32) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    let what = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| io::Error::other(format!("inherited ring fd {fd}: {e}")))?;
    if fd < 3 || what.as_os_str() != "anon_inode:[io_uring]" {
        return Err(io::Error::other(format!(
            "fd {fd} is not an inherited io_uring ({})",
            what.display()
        )));
    }
    // SAFETY: the fd is open (its /proc link exists) and nothing else in
    // this process owns it: it was inherited across exec under a number
    // only the handoff message names, and the caller takes it once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(owned)
}

/// The signal that wakes a serving thread out of a blocking read (see
/// `recovery::pause`). SIGURG: ignored by default, so a stray one sent to
/// a process without the handler does nothing.
pub const WAKE_SIGNAL: i32 = libc::SIGURG;

/// Install a handler for [`WAKE_SIGNAL`] that does nothing, without
/// SA_RESTART: a thread blocked in read(2) of /dev/fuse then returns
/// EINTR when the signal is sent to it.
pub fn install_wake_handler() -> io::Result<()> {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the
    // handler is an extern "C" fn that touches nothing, so it is
    // async-signal-safe; the old action is not needed.
    let rc = unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = nothing as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut act.sa_mask);
        act.sa_flags = 0;
        libc::sigaction(WAKE_SIGNAL, &act, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Send [`WAKE_SIGNAL`] to thread `tid` of this process.
pub fn wake_thread(tid: i32) -> io::Result<()> {
    // SAFETY: tgkill takes plain integers; a thread that has exited gives
    // ESRCH, and the thread group is our own, so no other process's thread
    // is reached even if the id were reused.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, WAKE_SIGNAL) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0,2-5,7"), Some(8));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
