//! Errors: [`Errno`] at the filesystem boundary, [`Error`] inside the library.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A positive errno value, what a filesystem method returns on failure.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const EINTR: Errno = Errno(libc::EINTR);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const ENFILE: Errno = Errno(libc::ENFILE);

    /// Not an error: what a handler returns after
    /// [`Ctx::reply_later`](crate::fs::ops::Ctx::reply_later), whose token
    /// answers instead. Returned without a token taken it is a bug,
    /// answered EIO.
    pub const LATER: Errno = Errno(-1);

    /// The errno of the calling thread's last failed libc call.
    pub fn last() -> Errno {
        Errno::from(io::Error::last_os_error())
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Errno::LATER {
            return f.write_str("Errno::LATER");
        }
        write!(
            f,
            "Errno({}: {})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&io::Error::from_raw_os_error(self.0), f)
    }
}

impl std::error::Error for Errno {}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(e: rustix::io::Errno) -> Self {
        Errno(e.raw_os_error())
    }
}

impl From<Errno> for io::Error {
    fn from(e: Errno) -> Self {
        io::Error::from_raw_os_error(e.0)
    }
}

/// Result of a filesystem method.
pub type FsResult<T> = Result<T, Errno>;

/// Library errors: mounting, the device, the protocol handshake.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open /dev/fuse: {source} (is the fuse module loaded? a non-root user needs read-write access to /dev/fuse, or fusermount3)")]
    OpenDevice { source: io::Error },
    #[error("mount of {mountpoint} failed: {source}")]
    Mount {
        mountpoint: PathBuf,
        source: io::Error,
    },
    /// mount(2) said EINVAL: one of the options is not one this kernel
    /// takes for a FUSE mount (the cause, EINVAL, follows in the chain).
    #[error("the kernel refused to mount {mountpoint} with options {options} (one of them is not supported for a FUSE mount here)")]
    MountRefused {
        mountpoint: PathBuf,
        options: String,
        source: io::Error,
    },
    #[error("fusermount3 failed for {mountpoint}: {reason}")]
    Fusermount { mountpoint: PathBuf, reason: String },
    #[error("unmount of {mountpoint} failed: {source}")]
    Unmount {
        mountpoint: PathBuf,
        source: io::Error,
    },
    #[error("mountpoint {0} does not exist or is neither a directory nor a regular file")]
    BadMountpoint(PathBuf),
    #[error("invalid mount option {option:?}: {reason}")]
    BadOption { option: String, reason: String },
    #[error("kernel speaks FUSE {major}.{minor}; fusebox needs 7.{min}+")]
    UnsupportedKernel { major: u32, minor: u32, min: u32 },
    #[error("the kernel's first message was {0:?}, expected INIT")]
    NoInit(fusebox_abi::Opcode),
    #[error("reading the FUSE device: {0}")]
    DeviceRead(#[source] io::Error),
    #[error("writing to the FUSE device: {0}")]
    DeviceWrite(#[source] io::Error),
    #[error("cloning the FUSE device fd for worker {worker}: {source}")]
    Clone { worker: usize, source: io::Error },
    #[error("malformed request: {0}")]
    Parse(#[from] crate::protocol::ParseError),
    #[error("the stats socket {path}: {source}")]
    Stats { path: PathBuf, source: io::Error },
    #[error(
        "max_readahead above the kernel's default is set through {path}: {source} (it needs root)"
    )]
    ReadAhead { path: PathBuf, source: io::Error },
    #[error("the io_uring transport is unavailable: {0}")]
    UringUnavailable(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Recovery(#[from] crate::recovery::RecoveryError),
}

impl Error {
    /// The errno that best describes this error, for callers that must
    /// answer a kernel request with one.
    pub fn errno(&self) -> Errno {
        match self {
            Error::OpenDevice { source }
            | Error::Mount { source, .. }
            | Error::MountRefused { source, .. }
            | Error::Unmount { source, .. }
            | Error::DeviceRead(source)
            | Error::DeviceWrite(source)
            | Error::Clone { source, .. }
            | Error::Stats { source, .. }
            | Error::ReadAhead { source, .. }
            | Error::Io(source) => source.raw_os_error().map(Errno).unwrap_or(Errno::EIO),
            Error::BadMountpoint(_) => Errno::ENOTDIR,
            Error::BadOption { .. } => Errno::EINVAL,
            Error::UnsupportedKernel { .. } | Error::NoInit(_) => Errno::EPROTO,
            Error::Parse(e) => e.errno(),
            Error::Fusermount { .. } => Errno::EIO,
            Error::UringUnavailable(_) => Errno::EOPNOTSUPP,
            Error::Recovery(_) => Errno::EIO,
        }
    }
}
