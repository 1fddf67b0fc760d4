//! The supervisor <-> server channel: a SOCK_SEQPACKET socket pair, one
//! JSON message per packet, file descriptors riding along as SCM_RIGHTS.
//! The server finds its end through `FUSEBOX_HANDOFF_FD`.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The environment variable naming the server's end of the channel.
pub const HANDOFF_ENV: &str = "FUSEBOX_HANDOFF_FD";

/// Most fds one message carries (the device, its clones, the state file).
pub const MAX_FDS: usize = 250;
const MAX_MESSAGE: usize = 64 << 10;

/// Supervisor to server.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToServer {
    /// Serve the mount: the fds that come with it are the /dev/fuse fd,
    /// `clones` cloned fds of it (one per classic worker), the state
    /// file, then the three optional ones below, in that order.
    Take {
        /// The new server's generation: 1 for the first, one more for each
        /// server after.
        generation: u64,
        /// Where the mount is.
        mountpoint: PathBuf,
        /// How many cloned /dev/fuse fds follow the device's own.
        clones: usize,
        /// An fd follows the state file: the mount's listening stats
        /// socket, to answer `fusebox stats` on.
        #[serde(default)]
        stats_socket: bool,
        /// A last fd follows: what the previous server's
        /// `Filesystem::save_state` wrote (a planned upgrade of a
        /// filesystem that keeps its state in its process).
        #[serde(default)]
        saved_state: bool,
        /// A last fd follows: the filesystem's held area
        /// (`Filesystem::adopt_held_area`), the same memfd every time.
        #[serde(default)]
        held_area: bool,
        /// Serve over the io_uring rings the supervisor holds: their fds
        /// are inherited (at the numbers given), and the ring area and one
        /// wake-up eventfd per ring follow the other fds.
        #[serde(default)]
        rings: Option<crate::sys::ring_area::HeldRingsInfo>,
    },
    /// Planned upgrade, before the serving process pauses: the state file
    /// comes with it; restore the nodes from it now, answer `Prepared`,
    /// and wait for `Take`.
    Prepare,
    /// Planned upgrade: finish what you hold, stop reading, answer
    /// `Quiesced`, then wait for `Resume` or `Exit`.
    Quiesce,
    /// The upgrade failed: serve again.
    Resume,
    /// The next server serves: exit without unmounting.
    Exit,
}

/// Server to supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToSupervisor {
    /// Started, filesystem built, waiting for the mount: an upgrade
    /// pauses the serving process only once its successor is this far.
    Standing {
        /// The new server's process.
        pid: u32,
    },
    /// Serving: every request from now on is answered.
    /// `recovers_from_crash`: false for a filesystem that keeps its state
    /// in its process; if this server dies, nothing is restarted.
    Serving {
        /// The serving process.
        pid: u32,
        /// Whether a new server can take over if this one dies; false for a
        /// filesystem that keeps its state in its process.
        #[serde(default = "yes")]
        recovers_from_crash: bool,
    },
    /// Could not take over; the supervisor decides what next.
    Failed {
        /// Why.
        error: String,
    },
    /// Paused for an upgrade: no worker reads or holds a request. An fd
    /// comes with it if the filesystem saved its state for the next server.
    Quiesced,
    /// The nodes are restored ahead of an upgrade.
    Prepared,
}

fn yes() -> bool {
    true
}

/// One end of the supervisor <-> server socket.
pub struct Channel {
    sock: OwnedFd,
}

impl Channel {
    /// A connected pair: the supervisor's channel and the server's end,
    /// which the server inherits (close-on-exec cleared by the caller
    /// right before it starts the server).
    pub fn pair() -> io::Result<(Channel, OwnedFd)> {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        Ok((Channel { sock: a }, b))
    }

    /// The server's end, named by [`HANDOFF_ENV`]; None when this process
    /// was not started by a supervisor. The variable is removed, so a
    /// process this one starts does not take the same fd.
    pub fn from_env() -> Option<io::Result<Channel>> {
        let v = std::env::var(HANDOFF_ENV).ok()?;
        std::env::remove_var(HANDOFF_ENV);
        Some(
            v.parse::<i32>()
                .map_err(|_| io::Error::other(format!("{HANDOFF_ENV}={v:?} is not an fd number")))
                .and_then(crate::sys::take_inherited_socket)
                .and_then(|sock| {
                    rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC)?;
                    Ok(Channel { sock })
                }),
        )
    }

    /// A second handle on the same channel.
    pub fn try_clone_fd(&self) -> io::Result<Channel> {
        Ok(Channel {
            sock: self.sock.try_clone()?,
        })
    }

    /// The socket, for poll(2) and for passing on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Send `msg` as one packet, `fds` riding along (at most [`MAX_FDS`]).
    pub fn send<T: Serialize>(&self, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
        if fds.len() > MAX_FDS {
            return Err(io::Error::other("too many fds for one handoff message"));
        }
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::other("handoff control buffer too small"));
        }
        loop {
            match rustix::net::sendmsg(
                &self.sock,
                &[IoSlice::new(&body)],
                &mut control,
                SendFlags::NOSIGNAL,
            ) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait up to `timeout` (forever if None) for a message. A closed peer
    /// is `UnexpectedEof`; no message in time is `TimedOut`.
    pub fn recv<T: DeserializeOwned>(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<(T, Vec<OwnedFd>)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if wait.is_some_and(|w| w.is_zero()) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            let ts = wait.map(|w| rustix::event::Timespec {
                tv_sec: w.as_secs() as i64,
                tv_nsec: w.subsec_nanos() as i64,
            });
            let mut pfd = [rustix::event::PollFd::new(
                &self.sock,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut pfd, ts.as_ref()) {
                Ok(0) => continue,
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                &self.sock,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(r) => break r,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let mut fds = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if got.bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let msg = serde_json::from_slice(&buf[..got.bytes.min(buf.len())])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok((msg, fds))
    }
}
