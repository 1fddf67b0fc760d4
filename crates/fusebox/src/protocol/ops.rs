//! Typed views of requests' arguments, handed to filesystem methods.
//!
//! Each borrows from the transport's buffer for the life of one call; the
//! filesystem cannot tell which transport delivered it. The parser makes
//! them; filesystems see them as `fusebox::fs::ops`.

use std::ffi::OsStr;

use crate::types::{FileHandle, NodeId, TimeOrNow, Timespec};

/// SETATTR: only the fields that are `Some` change.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// The open file the change came through (ftruncate, fchmod, ...), if any.
    pub fh: Option<FileHandle>,
    /// New permission bits (chmod).
    pub mode: Option<u32>,
    /// New owner (chown).
    pub uid: Option<u32>,
    /// New group (chown).
    pub gid: Option<u32>,
    /// New size in bytes (truncate).
    pub size: Option<u64>,
    /// New last access time (utimensat).
    pub atime: Option<TimeOrNow>,
    /// New last data change time (utimensat).
    pub mtime: Option<TimeOrNow>,
    /// New status change time; the kernel sends it only with the writeback
    /// cache, where it keeps ctime itself.
    pub ctime: Option<Timespec>,
    /// The caller's lock owner, for a filesystem that enforces mandatory
    /// locks on truncate.
    pub lock_owner: Option<u64>,
    /// With handle_killpriv_v2: clear setuid/setgid as the change requires.
    pub kill_suidgid: bool,
}

/// MKNOD's arguments; the parent and name come separately.
#[derive(Clone, Copy, Debug)]
pub struct Mknod {
    /// File type and permissions of the new node, the caller's umask already
    /// applied by the kernel.
    pub mode: u32,
    /// Device number, for block and character devices.
    pub rdev: u32,
    /// The caller's umask, for reference: `mode` is already masked with it
    /// (fusebox does not ask the kernel for `DONT_MASK`).
    pub umask: u32,
}

/// MKDIR's arguments; the parent and name come separately.
#[derive(Clone, Copy, Debug)]
pub struct Mkdir {
    /// Permissions of the new directory, the caller's umask already applied.
    pub mode: u32,
    /// The caller's umask, for reference: `mode` is already masked with it.
    pub umask: u32,
}

/// RENAME and RENAME2; `flags` is `RENAME_NOREPLACE`, `RENAME_EXCHANGE`, ...
#[derive(Clone, Copy, Debug)]
pub struct Rename<'a> {
    /// The directory the name is in now.
    pub parent: NodeId,
    /// The name being moved.
    pub name: &'a OsStr,
    /// The directory it moves to.
    pub new_parent: NodeId,
    /// Its name there.
    pub new_name: &'a OsStr,
    /// renameat2(2) flags; 0 for a plain RENAME.
    pub flags: u32,
}

/// OPEN's and OPENDIR's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// `open(2)` flags (`O_RDWR`, `O_APPEND`, ...). `O_TRUNC` arrives only
    /// where atomic_o_trunc was negotiated (`-o atomic_o_trunc`); otherwise
    /// the kernel truncates with a SETATTR of its own.
    pub flags: i32,
    /// With handle_killpriv_v2 and O_TRUNC: clear setuid/setgid.
    pub kill_suidgid: bool,
}

/// CREATE's (and TMPFILE's) arguments; the parent and name come separately.
#[derive(Clone, Copy, Debug)]
pub struct Create {
    /// `open(2)` flags of the new open file.
    pub flags: i32,
    /// File type and permissions of the new file, the caller's umask already
    /// applied.
    pub mode: u32,
    /// The caller's umask, for reference: `mode` is already masked with it.
    pub umask: u32,
    /// With handle_killpriv_v2: clear setuid/setgid (`FUSE_OPEN_KILL_SUIDGID`).
    pub kill_suidgid: bool,
}

/// READ's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Read {
    /// The open file read, as OPEN returned it.
    pub fh: FileHandle,
    /// Byte offset to read from.
    pub offset: u64,
    /// Most bytes to return; fewer means end of file (unless the file was
    /// opened with direct I/O).
    pub size: u32,
    /// The open flags of the file.
    pub flags: i32,
    /// The caller's lock owner, when the kernel sent one.
    pub lock_owner: Option<u64>,
}

/// WRITE's arguments; `data` borrows the request buffer.
#[derive(Clone, Copy, Debug)]
pub struct Write<'a> {
    /// The open file written, as OPEN returned it.
    pub fh: FileHandle,
    /// Byte offset to write at.
    pub offset: u64,
    /// The bytes to write.
    pub data: &'a [u8],
    /// The open flags of the file.
    pub flags: i32,
    /// The caller's lock owner, when the kernel sent one.
    pub lock_owner: Option<u64>,
    /// Written back from the kernel page cache (the handle may be any open one).
    pub from_cache: bool,
    /// With handle_killpriv_v2: clear setuid/setgid after the write.
    pub kill_suidgid: bool,
}

/// RELEASE's and RELEASEDIR's arguments: the last close of an open file.
#[derive(Clone, Copy, Debug)]
pub struct Release {
    /// The handle being released; no request names it after this one.
    pub fh: FileHandle,
    /// The flags the file was opened with.
    pub flags: i32,
    /// Flush the file's data as part of the release (`FUSE_RELEASE_FLUSH`).
    pub flush: bool,
    /// Drop flock(2) locks held through this open file.
    pub flock_unlock: bool,
    /// The lock owner whose flock(2) locks `flock_unlock` drops.
    pub lock_owner: u64,
    /// The caller gives its reference to the node back right after this
    /// release (direct mode, which keeps no inode cache), where the kernel
    /// keeps the node until it needs the room: state a filesystem would
    /// set up now for the node's next requests is dropped at once.
    pub forget_follows: bool,
}

/// GETLK's, SETLK's and SETLKW's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Lock {
    /// The open file the lock is taken through.
    pub fh: FileHandle,
    /// The lock owner: locks of one owner never conflict with each other.
    pub owner: u64,
    /// First byte of the range.
    pub start: u64,
    /// Last byte of the range, inclusive; `OFFSET_MAX` for "to the end of
    /// the file".
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// The process asking.
    pub pid: u32,
    /// The lock came from flock(2) rather than fcntl(2).
    pub flock: bool,
}

/// SETXATTR's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Setxattr<'a> {
    /// The attribute's name, namespace included (`user.foo`).
    pub name: &'a OsStr,
    /// The value to store.
    pub value: &'a [u8],
    /// setxattr(2) flags: `XATTR_CREATE`, `XATTR_REPLACE`, or 0.
    pub flags: i32,
    /// `SETXATTR_ACL_KILL_SGID` when setting an ACL must clear setgid.
    pub setxattr_flags: u32,
}

/// IOCTL's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Ioctl<'a> {
    /// The open file the ioctl is on.
    pub fh: FileHandle,
    /// `FUSE_IOCTL_*` bits from [`fusebox_abi::flags::ioctl`].
    pub flags: u32,
    /// The ioctl request number.
    pub cmd: u32,
    /// The ioctl's argument as the caller passed it (a value, or an address in
    /// its memory).
    pub arg: u64,
    /// The input the kernel copied in, as the request number's size says.
    pub input: &'a [u8],
    /// Most bytes of output the caller takes back.
    pub out_size: u32,
}

/// POLL's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Poll {
    /// The open file polled.
    pub fh: FileHandle,
    /// Kernel handle to pass to `Notifier::poll_wakeup`.
    pub kh: u64,
    /// The kernel waits for a `Notifier::poll_wakeup` with `kh` once the file
    /// becomes ready.
    pub schedule_notify: bool,
    /// poll(2) events the caller waits for (`POLLIN`, ...).
    pub events: u32,
}

/// FALLOCATE's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Fallocate {
    /// The open file.
    pub fh: FileHandle,
    /// First byte of the range.
    pub offset: u64,
    /// Length of the range in bytes.
    pub length: u64,
    /// fallocate(2) mode bits (`FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE`,
    /// ...).
    pub mode: i32,
}

/// LSEEK's arguments; the kernel asks only for `SEEK_DATA` and `SEEK_HOLE`.
#[derive(Clone, Copy, Debug)]
pub struct Lseek {
    /// The open file.
    pub fh: FileHandle,
    /// Where to start looking.
    pub offset: u64,
    /// `SEEK_DATA` or `SEEK_HOLE`.
    pub whence: i32,
}

/// COPY_FILE_RANGE's arguments: copy between two open files of this
/// filesystem.
#[derive(Clone, Copy, Debug)]
pub struct CopyFileRange {
    /// The source file.
    pub node_in: NodeId,
    /// The source's open file.
    pub fh_in: FileHandle,
    /// Byte offset in the source.
    pub off_in: u64,
    /// The destination file.
    pub node_out: NodeId,
    /// The destination's open file.
    pub fh_out: FileHandle,
    /// Byte offset in the destination.
    pub off_out: u64,
    /// Most bytes to copy.
    pub len: u64,
    /// copy_file_range(2) flags (none are defined; 0).
    pub flags: u64,
}

/// STATX's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Statx {
    /// The open file the call came through, if any.
    pub fh: Option<FileHandle>,
    /// statx(2)'s `AT_STATX_*` synchronisation flags.
    pub flags: u32,
    /// The `STATX_*` fields the caller asked for.
    pub mask: u32,
}
