//! Typed views of requests, handed to filesystem methods.
//!
//! Each borrows from the transport's buffer for the life of one call; the
//! filesystem cannot tell which transport delivered it.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::types::{FileHandle, NodeId, TimeOrNow, Timespec};

/// Who is asking, and whether they gave up.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub unique: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The worker's "interrupted" slot: holds `unique` once the kernel sent
    /// an INTERRUPT for this request.
    pub(crate) interrupt_slot: Option<&'a AtomicU64>,
    /// How to answer this request later, if its transport allows.
    pub(crate) later: Option<&'a crate::later::LaterRoute<'a>>,
}

impl Ctx<'_> {
    /// A context for calls that do not come from the kernel (tests, adapters).
    pub fn internal() -> Ctx<'static> {
        Ctx {
            unique: 0,
            uid: 0,
            gid: 0,
            pid: 0,
            interrupt_slot: None,
            later: None,
        }
    }

    /// Take this request's reply, to answer it later from any thread (see
    /// [`ReplyToken`](crate::later::ReplyToken)); then return
    /// [`Errno::LATER`](crate::Errno::LATER). The serving thread moves on at
    /// once. Fails (EIO) when called twice for one request, and with ENOSYS
    /// where no later answer is possible (a `Ctx::internal`, or the async
    /// API, whose methods answer by returning).
    pub fn reply_later(&self) -> Result<crate::later::ReplyToken, crate::Errno> {
        match self.later {
            Some(route) => route.take(self.unique),
            None => {
                tracing::error!(
                    unique = self.unique,
                    "reply_later: this request cannot be answered later"
                );
                Err(crate::Errno::ENOSYS)
            }
        }
    }

    /// Whether [`reply_later`](Ctx::reply_later) can work for this request
    /// (a request from the kernel over a transport that answers later).
    pub fn can_reply_later(&self) -> bool {
        self.later.is_some()
    }

    /// True once the application gave up on this request (a signal). A slow
    /// filesystem may check this and return `Errno::EINTR` early.
    pub fn interrupted(&self) -> bool {
        self.interrupt_slot
            .is_some_and(|s| s.load(Ordering::Acquire) == self.unique)
    }
}

/// SETATTR: only the fields that are `Some` change.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub fh: Option<FileHandle>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<Timespec>,
    pub lock_owner: Option<u64>,
    /// With handle_killpriv_v2: clear setuid/setgid as the change requires.
    pub kill_suidgid: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Mknod {
    pub mode: u32,
    pub rdev: u32,
    pub umask: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Mkdir {
    pub mode: u32,
    pub umask: u32,
}

/// RENAME and RENAME2; `flags` is `RENAME_NOREPLACE`, `RENAME_EXCHANGE`, ...
#[derive(Clone, Copy, Debug)]
pub struct Rename<'a> {
    pub parent: NodeId,
    pub name: &'a OsStr,
    pub new_parent: NodeId,
    pub new_name: &'a OsStr,
    pub flags: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// `open(2)` flags (`O_RDWR`, `O_APPEND`, ...). `O_TRUNC` arrives only
    /// where atomic_o_trunc was negotiated (`-o atomic_o_trunc`); otherwise
    /// the kernel truncates with a SETATTR of its own.
    pub flags: i32,
    /// With handle_killpriv_v2 and O_TRUNC: clear setuid/setgid.
    pub kill_suidgid: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Create {
    pub flags: i32,
    pub mode: u32,
    pub umask: u32,
    pub kill_suidgid: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Read {
    pub fh: FileHandle,
    pub offset: u64,
    pub size: u32,
    /// The open flags of the file.
    pub flags: i32,
    pub lock_owner: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
pub struct Write<'a> {
    pub fh: FileHandle,
    pub offset: u64,
    pub data: &'a [u8],
    pub flags: i32,
    pub lock_owner: Option<u64>,
    /// Written back from the kernel page cache (the handle may be any open one).
    pub from_cache: bool,
    /// With handle_killpriv_v2: clear setuid/setgid after the write.
    pub kill_suidgid: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Release {
    pub fh: FileHandle,
    pub flags: i32,
    pub flush: bool,
    /// Drop flock(2) locks held through this open file.
    pub flock_unlock: bool,
    pub lock_owner: u64,
    /// The caller gives its reference to the node back right after this
    /// release (direct mode, which keeps no inode cache), where the kernel
    /// keeps the node until it needs the room: state a filesystem would
    /// set up now for the node's next requests is dropped at once.
    pub forget_follows: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Lock {
    pub fh: FileHandle,
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
    /// The lock came from flock(2) rather than fcntl(2).
    pub flock: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Setxattr<'a> {
    pub name: &'a OsStr,
    pub value: &'a [u8],
    pub flags: i32,
    pub setxattr_flags: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Ioctl<'a> {
    pub fh: FileHandle,
    pub flags: u32,
    pub cmd: u32,
    pub arg: u64,
    pub input: &'a [u8],
    pub out_size: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Poll {
    pub fh: FileHandle,
    /// Kernel handle to pass to `Notifier::poll_wakeup`.
    pub kh: u64,
    pub schedule_notify: bool,
    pub events: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Fallocate {
    pub fh: FileHandle,
    pub offset: u64,
    pub length: u64,
    pub mode: i32,
}

#[derive(Clone, Copy, Debug)]
pub struct Lseek {
    pub fh: FileHandle,
    pub offset: u64,
    pub whence: i32,
}

#[derive(Clone, Copy, Debug)]
pub struct CopyFileRange {
    pub node_in: NodeId,
    pub fh_in: FileHandle,
    pub off_in: u64,
    pub node_out: NodeId,
    pub fh_out: FileHandle,
    pub off_out: u64,
    pub len: u64,
    pub flags: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct Statx {
    pub fh: Option<FileHandle>,
    pub flags: u32,
    pub mask: u32,
}
