//! Errors: [`Errno`] at the filesystem boundary, [`Error`] inside the library.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A positive errno value, what a filesystem method returns on failure.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation not permitted: the caller lacks the privilege (chown by a
    /// non-owner, for one).
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// No such file or directory: LOOKUP's answer for a missing name.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// Input/output error: the catch-all for a failure with no better errno.
    pub const EIO: Errno = Errno(libc::EIO);
    /// Bad file descriptor: a file handle the filesystem does not know, or
    /// not open for this.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// Try again: a non-blocking call that would have to wait (SETLK on a
    /// held lock).
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    /// Out of memory.
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    /// Permission denied by the file's mode bits.
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// The name already exists (MKDIR, CREATE with O_EXCL, RENAME with
    /// RENAME_NOREPLACE).
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Crosses a filesystem boundary: a rename or link the filesystem cannot
    /// make in place.
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    /// A directory was expected and this is not one.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// A directory where a non-directory was expected (UNLINK, OPEN for
    /// writing).
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// File too large for the filesystem.
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    /// No space left.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// The caller's buffer is too small (GETXATTR, LISTXATTR).
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    /// A name longer than the filesystem allows.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// Not implemented: the default answer of every method a filesystem does
    /// not write. For some requests (OPEN, FLUSH, SETXATTR, ...) the kernel
    /// then stops sending them.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// RMDIR, or RENAME over a directory, that still has entries.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// No such extended attribute.
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    /// The ioctl is not one this file takes.
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    /// No such device or address; LSEEK's answer for SEEK_DATA or SEEK_HOLE
    /// past the end.
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    /// The operation is not supported for this file or with these flags.
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// Too many hard links.
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    /// Too many symbolic links on the way, or a symlink where none may be.
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    /// Interrupted: the answer to a request the kernel sent INTERRUPT for.
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// Protocol error: the kernel said something fusebox cannot serve.
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    /// The process is out of file descriptors.
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    /// The system is out of file descriptors.
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
    /// /dev/fuse could not be opened.
    #[error("cannot open /dev/fuse: {source} (is the fuse module loaded? a non-root user needs read-write access to /dev/fuse, or fusermount3)")]
    OpenDevice {
        /// Why open(2) failed.
        source: io::Error,
    },
    /// mount(2) failed for another reason than its options.
    #[error("mount of {mountpoint} failed: {source}")]
    Mount {
        /// Where the mount was to be.
        mountpoint: PathBuf,
        /// mount(2)'s error.
        source: io::Error,
    },
    /// mount(2) said EINVAL: one of the options is not one this kernel
    /// takes for a FUSE mount (the cause, EINVAL, follows in the chain).
    #[error("the kernel refused to mount {mountpoint} with options {options} (one of them is not supported for a FUSE mount here)")]
    MountRefused {
        /// Where the mount was to be.
        mountpoint: PathBuf,
        /// The option string handed to mount(2).
        options: String,
        /// mount(2)'s error (EINVAL).
        source: io::Error,
    },
    /// fusermount3, which mounts for users without the privilege, failed
    /// or gave no device back.
    #[error("fusermount3 failed for {mountpoint}: {reason}")]
    Fusermount {
        /// Where the mount was to be.
        mountpoint: PathBuf,
        /// What went wrong, with fusermount3's own message where there is one.
        reason: String,
    },
    /// Unmounting failed.
    #[error("unmount of {mountpoint} failed: {source}")]
    Unmount {
        /// The mount that stayed.
        mountpoint: PathBuf,
        /// umount2(2)'s error, or fusermount3's message.
        source: io::Error,
    },
    /// The mountpoint is missing or is neither a directory nor a regular
    /// file.
    #[error("mountpoint {0} does not exist or is neither a directory nor a regular file")]
    BadMountpoint(PathBuf),
    /// A mount option fusebox does not know, or a value it cannot parse.
    #[error("invalid mount option {option:?}: {reason}")]
    BadOption {
        /// The option as given.
        option: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The kernel's protocol version is older than fusebox serves.
    #[error("kernel speaks FUSE {major}.{minor}; fusebox needs 7.{min}+")]
    UnsupportedKernel {
        /// The kernel's major version.
        major: u32,
        /// The kernel's minor version.
        minor: u32,
        /// The oldest minor fusebox serves.
        min: u32,
    },
    /// The kernel's first request was not INIT.
    #[error("the kernel's first message was {0:?}, expected INIT")]
    NoInit(fusebox_abi::Opcode),
    /// read(2) on /dev/fuse failed.
    #[error("reading the FUSE device: {0}")]
    DeviceRead(#[source] io::Error),
    /// A reply could not be written to /dev/fuse.
    #[error("writing to the FUSE device: {0}")]
    DeviceWrite(#[source] io::Error),
    /// A worker could not get its own /dev/fuse descriptor
    /// (`FUSE_DEV_IOC_CLONE`).
    #[error("cloning the FUSE device fd for worker {worker}: {source}")]
    Clone {
        /// The worker's index.
        worker: usize,
        /// The ioctl's error.
        source: io::Error,
    },
    /// A request did not parse.
    #[error("malformed request: {0}")]
    Parse(#[from] ParseError),
    /// The stats socket could not be set up, served or reached.
    #[error("the stats socket {path}: {source}")]
    Stats {
        /// The socket's path.
        path: PathBuf,
        /// The failed call's error.
        source: io::Error,
    },
    /// `max_readahead` above the kernel's default needs the mount's
    /// read_ahead_kb in sysfs, and writing it failed.
    #[error(
        "max_readahead above the kernel's default is set through {path}: {source} (it needs root)"
    )]
    ReadAhead {
        /// The sysfs file written.
        path: PathBuf,
        /// The write's error.
        source: io::Error,
    },
    /// The io_uring transport was asked for and this kernel cannot give
    /// it; the text says why.
    #[error("the io_uring transport is unavailable: {0}")]
    UringUnavailable(String),
    /// Any other I/O error.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The recovery supervisor or the state it keeps failed.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
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

/// A request that cannot be put on the wire (see
/// [`crate::protocol::encode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// An opcode fusebox does not know: the parser's `Op::Unsupported`
    /// kept no arguments to write.
    #[error("a request of an unsupported opcode has no encoding")]
    Unsupported,
    /// A length does not fit the field that carries it (a message over
    /// 4 GiB, data longer than its u32 size).
    #[error("a request too long for its length fields")]
    TooLong,
}

/// A request that could not be parsed. Answered with [`ParseError::errno`]
/// when its unique is known, never with a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The buffer cannot hold even the header.
    #[error("request of {got} bytes is shorter than the {need}-byte header")]
    ShortHeader {
        /// Bytes there were.
        got: usize,
        /// The header's size.
        need: usize,
    },
    /// The header's `len` and the bytes read disagree.
    #[error("header says {declared} bytes but {got} arrived")]
    LengthMismatch {
        /// What `fuse_in_header.len` says.
        declared: usize,
        /// What arrived.
        got: usize,
    },
    /// The opcode's arguments are cut short.
    #[error("{opcode:?}: arguments need {need} bytes, got {got}")]
    ShortArgs {
        /// The request's opcode.
        opcode: fusebox_abi::Opcode,
        /// Bytes the arguments take.
        need: usize,
        /// Bytes there were.
        got: usize,
    },
    /// A name runs to the end of the request without its NUL.
    #[error("{opcode:?}: name is not NUL-terminated")]
    UnterminatedName {
        /// The request's opcode.
        opcode: fusebox_abi::Opcode,
    },
    /// `total_extlen` claims more than the request holds.
    #[error("{opcode:?}: extension length {ext} exceeds the request")]
    BadExtensions {
        /// The request's opcode.
        opcode: fusebox_abi::Opcode,
        /// The extensions' length in bytes.
        ext: usize,
    },
}

impl ParseError {
    /// What the kernel is told: EINVAL, whatever was wrong.
    pub fn errno(&self) -> Errno {
        Errno::EINVAL
    }
}

/// What can go wrong in a supervised mount: in the supervisor, or in a
/// server taking over from it.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The supervisor could not mount.
    #[error(transparent)]
    Mount(Box<crate::Error>),
    /// The supervisor could not clone the /dev/fuse fd for a worker.
    #[error("cloning /dev/fuse for the supervisor: {0}")]
    Clone(#[source] io::Error),
    /// The state file could not be made, mapped or written.
    #[error("the recovery state file: {0}")]
    State(#[source] io::Error),
    /// The first server died or failed before it served; the text says why.
    #[error("the first server did not start: {0}")]
    FirstStart(String),
    /// Taking over from the supervisor failed: a message, an fd or the saved
    /// state was missing or wrong.
    #[error("handoff from the supervisor: {0}")]
    Handoff(String),
    /// Any other I/O error.
    #[error(transparent)]
    Io(io::Error),
}
