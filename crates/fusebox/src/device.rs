//! One /dev/fuse descriptor: a request read from it, a reply written to it,
//! and the one rule for what its errors mean.
//!
//! Every reader of the device reads through [`read_request`], and those
//! that loop (the classic workers, the INIT handshake, the supervisor
//! failing what a dead server left) through the one [`read_loop`]; an
//! event-loop session reads one request at a time for its caller's loop.
//! They and the io_uring completions read the kernel's errors through
//! [`DeviceErrno::of`], so an unmount, an abort and an interrupted request
//! mean the same thing on every path. One exception, the io_uring
//! transport's: ENOENT on a ring's completion means the kernel has no
//! request for the committed id, and that entry is reported as refused.

use std::io::{self, IoSlice};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// One /dev/fuse fd as a reply sink: a reply is one `writev`.
pub struct DevChannel {
    fd: OwnedFd,
}

impl DevChannel {
    /// Send replies on `fd`.
    pub fn new(fd: OwnedFd) -> DevChannel {
        DevChannel { fd }
    }

    /// The /dev/fuse fd, to read requests from.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Write one message made of `parts` laid end to end (at most four).
    pub fn write_message(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut iov = [IoSlice::new(&[]); 4];
        let n = parts.len().min(iov.len());
        for (slot, p) in iov.iter_mut().zip(parts) {
            *slot = IoSlice::new(p);
        }
        loop {
            match rustix::io::writev(self.fd.as_fd(), &iov[..n]) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Read one request into `buf` (see [`read_request`]).
    pub fn read_request(&self, buf: &mut [u8]) -> io::Result<Received> {
        read_request(self.fd.as_fd(), buf)
    }
}

/// Why the kernel stopped sending requests on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerExit {
    /// The filesystem was unmounted (ENODEV).
    Unmounted,
    /// The connection was aborted through fusectl (ECONNABORTED).
    Aborted,
}

impl WorkerExit {
    /// The errno a caller that reports the end as an error reports: what
    /// the kernel said (ENODEV, ECONNABORTED), as libfuse reports it.
    pub fn errno(self) -> i32 {
        match self {
            WorkerExit::Unmounted => libc::ENODEV,
            WorkerExit::Aborted => libc::ECONNABORTED,
        }
    }
}

/// What an error from the device (a `read`, or an io_uring completion's
/// result) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceErrno {
    /// A signal interrupted the call (EINTR). The caller decides: a
    /// worker may have been woken on purpose (an upgrade's pause).
    Interrupted,
    /// Ask again: the request was interrupted and dropped before it was
    /// read (ENOENT).
    Retry,
    /// Nothing to read now on a non-blocking fd, or an io_uring command
    /// came too early (EAGAIN): ask again later.
    WouldBlock,
    /// The connection is over; no request will come.
    Ended(WorkerExit),
    /// Anything else: a real failure, to report.
    Failed,
}

impl DeviceErrno {
    /// The meaning of `errno` (positive) from the device.
    pub fn of(errno: i32) -> DeviceErrno {
        match errno {
            libc::EINTR => DeviceErrno::Interrupted,
            libc::ENOENT => DeviceErrno::Retry,
            libc::EAGAIN => DeviceErrno::WouldBlock,
            // ENOTCONN and ECANCELED: io_uring entries ended by an unmount.
            libc::ENODEV | libc::ENOTCONN | libc::ECANCELED => {
                DeviceErrno::Ended(WorkerExit::Unmounted)
            }
            libc::ECONNABORTED => DeviceErrno::Ended(WorkerExit::Aborted),
            _ => DeviceErrno::Failed,
        }
    }
}

/// What one read of the device brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A request of this many bytes, at the start of the buffer.
    Request(usize),
    /// Nothing yet (a non-blocking fd).
    WouldBlock,
    /// A signal interrupted the read: nothing read; ask again when ready.
    Interrupted,
    /// The connection is over.
    Ended(WorkerExit),
}

/// Read one request from `device` into `buf`, which must hold the largest
/// request (max_write plus headers). A request dropped before it was read
/// is retried here; every other error is what [`DeviceErrno::of`] says it
/// is.
pub fn read_request(device: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    loop {
        match rustix::io::read(device, &mut *buf) {
            Ok(n) => return Ok(Received::Request(n)),
            Err(e) => match DeviceErrno::of(e.raw_os_error()) {
                DeviceErrno::Retry => continue,
                DeviceErrno::Interrupted => return Ok(Received::Interrupted),
                DeviceErrno::WouldBlock => return Ok(Received::WouldBlock),
                DeviceErrno::Ended(why) => return Ok(Received::Ended(why)),
                DeviceErrno::Failed => return Err(e.into()),
            },
        }
    }
}

/// How a [`read_loop`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd<T> {
    /// The request handler stopped it, with this.
    Stopped(T),
    /// The connection is over.
    Ended(WorkerExit),
}

/// The one loop that reads /dev/fuse: read a request into `buf` (which
/// must hold the largest request), hand it to `each`, and go on until
/// `each` breaks or the connection ends. `between` runs before every read
/// (a planned upgrade parks a worker there); an interrupted read or one
/// with nothing yet goes back to it, so a worker woken on purpose by a
/// signal reaches its checkpoint. Every error means what
/// [`DeviceErrno::of`] says; one that means none of the device's
/// conditions is returned.
pub fn read_loop<T>(
    channel: &DevChannel,
    buf: &mut [u8],
    mut between: impl FnMut(),
    mut each: impl FnMut(&[u8]) -> ControlFlow<T>,
) -> io::Result<LoopEnd<T>> {
    loop {
        between();
        match channel.read_request(buf)? {
            Received::Request(n) => {
                if let ControlFlow::Break(t) = each(&buf[..n]) {
                    return Ok(LoopEnd::Stopped(t));
                }
            }
            Received::WouldBlock | Received::Interrupted => {}
            Received::Ended(why) => return Ok(LoopEnd::Ended(why)),
        }
    }
}

/// True once the connection behind `device` is gone (unmounted or aborted):
/// the kernel then reports POLLERR on it.
pub fn device_gone(device: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &device,
        rustix::event::PollFlags::IN,
    )];
    match rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(_) => fds[0].revents().contains(rustix::event::PollFlags::ERR),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_reads_the_kernels_errors_the_same_way() {
        assert_eq!(DeviceErrno::of(libc::ENOENT), DeviceErrno::Retry);
        assert_eq!(DeviceErrno::of(libc::EINTR), DeviceErrno::Interrupted);
        assert_eq!(DeviceErrno::of(libc::EAGAIN), DeviceErrno::WouldBlock);
        assert_eq!(
            DeviceErrno::of(libc::ENODEV),
            DeviceErrno::Ended(WorkerExit::Unmounted)
        );
        assert_eq!(
            DeviceErrno::of(libc::ECONNABORTED),
            DeviceErrno::Ended(WorkerExit::Aborted)
        );
        assert_eq!(DeviceErrno::of(libc::EINVAL), DeviceErrno::Failed);
    }

    #[test]
    fn the_loop_hands_each_request_on_until_told_to_stop() {
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        // A message per read, as the device gives a request per read.
        let (r, w) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let channel = DevChannel::new(r);
        for msg in [&b"one"[..], b"two", b"stop", b"unread"] {
            rustix::io::write(&w, msg).unwrap();
        }
        let mut buf = [0u8; 16];
        let (mut seen, mut reads) = (Vec::new(), 0);
        let end = read_loop(
            &channel,
            &mut buf,
            || reads += 1,
            |req| {
                seen.push(req.to_vec());
                match req {
                    b"stop" => ControlFlow::Break(seen.len()),
                    _ => ControlFlow::Continue(()),
                }
            },
        )
        .unwrap();
        assert_eq!(seen, [&b"one"[..], b"two", b"stop"]);
        assert_eq!(end, LoopEnd::Stopped(3));
        assert_eq!(reads, 3);
    }

    #[test]
    fn a_read_of_a_closed_pipe_is_a_request_of_nothing_and_a_bad_fd_fails() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(w);
        let mut buf = [0u8; 16];
        assert_eq!(
            read_request(r.as_fd(), &mut buf).unwrap(),
            Received::Request(0)
        );
        let dir = std::fs::File::open("/").unwrap();
        // EISDIR is none of the device's meanings: it is reported.
        assert!(read_request(dir.as_fd(), &mut buf).is_err());
    }
}
