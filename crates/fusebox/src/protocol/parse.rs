//! Parsing a request into a typed view.
//!
//! The one parse contract for every transport: a header, the opcode's
//! argument bytes, and optionally a separate payload buffer. /dev/fuse hands
//! all three in one buffer ([`parse_contiguous`]); FUSE-over-io_uring puts
//! the fixed argument struct and the variable part (names, data) in separate
//! buffers ([`parse_split`]). Every length is checked; nothing here panics on
//! any input (the fuzz target in `fuzz/` holds us to that).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fusebox_abi as abi;
use fusebox_abi::flags;
use fusebox_abi::Opcode;
use zerocopy::{FromBytes, IntoBytes};

use super::ops::*;
pub use crate::error::ParseError;
use crate::types::{FileHandle, NodeId, TimeOrNow, Timespec};

/// What the parser must know of the negotiated session.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParseConfig {
    /// FUSE_SETXATTR_EXT was negotiated: SETXATTR carries the 16-byte struct.
    pub setxattr_ext: bool,
}

/// A parsed request: the header and its typed operation.
#[derive(Debug)]
pub struct Request<'a> {
    /// The request's header as the kernel sent it.
    pub header: abi::InHeader,
    /// The operation and its arguments.
    pub op: Op<'a>,
}

impl Request<'_> {
    /// The header's opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.header.opcode)
    }
    /// The request's id, to answer it by.
    pub fn unique(&self) -> u64 {
        self.header.unique
    }
    /// The node the request is about (`fuse_in_header.nodeid`).
    pub fn node(&self) -> NodeId {
        NodeId(self.header.nodeid)
    }
}

/// Every request the kernel sends, with its arguments typed.
#[derive(Debug)]
pub enum Op<'a> {
    /// INIT: the kernel's half of the handshake.
    Init(abi::InitIn),
    /// DESTROY: the mount is going away.
    Destroy,
    /// LOOKUP: find a name in the header's node.
    Lookup {
        /// The name looked up.
        name: &'a OsStr,
    },
    /// FORGET: the kernel drops references to the header's node.
    Forget {
        /// How many.
        nlookup: u64,
    },
    /// BATCH_FORGET: several forgets at once.
    BatchForget {
        /// Each node with its count.
        nodes: BatchForgetList<'a>,
    },
    /// GETATTR.
    Getattr {
        /// The open file the call came through (fstat), if any.
        fh: Option<FileHandle>,
    },
    /// SETATTR.
    Setattr(SetAttr),
    /// READLINK.
    Readlink,
    /// SYMLINK: a new link in the header's node.
    Symlink {
        /// The new entry's name.
        name: &'a OsStr,
        /// What the link points at.
        target: &'a OsStr,
    },
    /// MKNOD: a new node in the header's node.
    Mknod {
        /// The new entry's name.
        name: &'a OsStr,
        /// Type, permissions and device number.
        args: Mknod,
    },
    /// MKDIR: a new directory in the header's node.
    Mkdir {
        /// The new entry's name.
        name: &'a OsStr,
        /// Permissions and umask.
        args: Mkdir,
    },
    /// UNLINK: remove a name from the header's node.
    Unlink {
        /// The name removed.
        name: &'a OsStr,
    },
    /// RMDIR: remove an empty directory from the header's node.
    Rmdir {
        /// The name removed.
        name: &'a OsStr,
    },
    /// RENAME and RENAME2.
    Rename(Rename<'a>),
    /// LINK: a new name, in the header's node, for an existing node.
    Link {
        /// The existing node (`fuse_link_in.oldnodeid`).
        target: NodeId,
        /// The new name.
        new_name: &'a OsStr,
    },
    /// OPEN.
    Open(Open),
    /// READ.
    Read(Read),
    /// WRITE.
    Write(Write<'a>),
    /// STATFS.
    Statfs,
    /// RELEASE.
    Release(Release),
    /// FSYNC.
    Fsync {
        /// The open file.
        fh: FileHandle,
        /// fdatasync(2): the data only.
        datasync: bool,
    },
    /// SETXATTR.
    Setxattr(Setxattr<'a>),
    /// GETXATTR.
    Getxattr {
        /// The attribute's name.
        name: &'a OsStr,
        /// The caller's buffer size; 0 asks for the size only.
        size: u32,
    },
    /// LISTXATTR.
    Listxattr {
        /// The caller's buffer size; 0 asks for the size only.
        size: u32,
    },
    /// REMOVEXATTR.
    Removexattr {
        /// The attribute's name.
        name: &'a OsStr,
    },
    /// FLUSH: a close(2) of one descriptor.
    Flush {
        /// The open file.
        fh: FileHandle,
        /// The closing process's lock owner.
        lock_owner: u64,
    },
    /// OPENDIR.
    Opendir(Open),
    /// READDIR.
    Readdir(Read),
    /// READDIRPLUS.
    Readdirplus(Read),
    /// RELEASEDIR.
    Releasedir(Release),
    /// FSYNCDIR.
    Fsyncdir {
        /// The open directory.
        fh: FileHandle,
        /// fdatasync(2): the data only.
        datasync: bool,
    },
    /// GETLK.
    Getlk(Lock),
    /// SETLK and SETLKW.
    Setlk {
        /// The lock to take or release.
        lock: Lock,
        /// SETLKW: wait for a conflicting lock to go.
        sleep: bool,
    },
    /// ACCESS.
    Access {
        /// `R_OK`, `W_OK`, `X_OK` bits, or `F_OK`.
        mask: i32,
    },
    /// CREATE: a new file in the header's node, opened.
    Create {
        /// The new file's name.
        name: &'a OsStr,
        /// Open flags, type, permissions.
        args: Create,
    },
    /// INTERRUPT: the caller of another request gave up.
    Interrupt {
        /// That request's id.
        unique: u64,
    },
    /// BMAP.
    Bmap {
        /// Block number within the file.
        block: u64,
        /// Block size in bytes.
        blocksize: u32,
    },
    /// IOCTL.
    Ioctl(Ioctl<'a>),
    /// POLL.
    Poll(Poll),
    /// NOTIFY_REPLY: the kernel's answer to a retrieve notification.
    NotifyReply {
        /// Byte offset of the data in the file.
        offset: u64,
        /// Bytes of data.
        size: u32,
        /// The cached data the kernel had.
        data: &'a [u8],
    },
    /// FALLOCATE.
    Fallocate(Fallocate),
    /// LSEEK.
    Lseek(Lseek),
    /// COPY_FILE_RANGE and COPY_FILE_RANGE_64.
    CopyFileRange {
        /// Source, destination and length.
        args: CopyFileRange,
        /// COPY_FILE_RANGE_64: the reply carries a 64-bit count.
        wide: bool,
    },
    /// SYNCFS.
    Syncfs,
    /// TMPFILE: an unnamed file in the header's node, opened.
    Tmpfile {
        /// Open flags, type, permissions.
        args: Create,
    },
    /// STATX.
    Statx(Statx),
    /// An opcode fusebox does not serve (DAX mappings, CUSE, future ones):
    /// answered ENOSYS.
    Unsupported,
}

/// What the per-opcode table's readers need of a request's arguments. The
/// table ([`opcodes`](super::opcodes)) says which of these a request has;
/// these read them, so that only the parser matches on `Op`'s variants.
impl<'a> Op<'a> {
    /// The size of answer the request asks for: READ, READDIR and
    /// READDIRPLUS's size, GETXATTR and LISTXATTR's (0: "how big is it"),
    /// IOCTL's out_size.
    pub fn requested_size(&self) -> Option<u32> {
        match self {
            Op::Read(r) | Op::Readdir(r) | Op::Readdirplus(r) => Some(r.size),
            Op::Getxattr { size, .. } | Op::Listxattr { size } => Some(*size),
            Op::Ioctl(i) => Some(i.out_size),
            _ => None,
        }
    }

    /// The name a request makes (CREATE, MKNOD, MKDIR, SYMLINK, LINK) or
    /// removes (UNLINK, RMDIR) in the header's node.
    pub fn name_in_parent(&self) -> Option<&'a OsStr> {
        match self {
            Op::Create { name, .. }
            | Op::Mknod { name, .. }
            | Op::Mkdir { name, .. }
            | Op::Symlink { name, .. }
            | Op::Unlink { name }
            | Op::Rmdir { name } => Some(name),
            Op::Link { new_name, .. } => Some(new_name),
            _ => None,
        }
    }

    /// RENAME's and RENAME2's arguments.
    pub fn rename(&self) -> Option<&Rename<'a>> {
        match self {
            Op::Rename(r) => Some(r),
            _ => None,
        }
    }

    /// The open(2) flags of a request that opens (OPEN, OPENDIR, CREATE,
    /// TMPFILE).
    pub fn open_flags(&self) -> Option<i32> {
        match self {
            Op::Open(o) | Op::Opendir(o) => Some(o.flags),
            Op::Create { args, .. } | Op::Tmpfile { args } => Some(args.flags),
            _ => None,
        }
    }

    /// The size a SETATTR sets, if it sets one.
    pub fn new_size(&self) -> Option<u64> {
        match self {
            Op::Setattr(a) => a.size,
            _ => None,
        }
    }

    /// A WRITE's handle and length.
    pub fn written(&self) -> Option<(FileHandle, usize)> {
        match self {
            Op::Write(w) => Some((w.fh, w.data.len())),
            _ => None,
        }
    }

    /// The handle a RELEASE or RELEASEDIR closes.
    pub fn released(&self) -> Option<FileHandle> {
        match self {
            Op::Release(r) | Op::Releasedir(r) => Some(r.fh),
            _ => None,
        }
    }

    /// How many references a FORGET drops on the header's node.
    pub fn forget_count(&self) -> Option<u64> {
        match self {
            Op::Forget { nlookup } => Some(*nlookup),
            _ => None,
        }
    }

    /// The nodes a BATCH_FORGET drops references to.
    pub fn forgotten(&self) -> Option<BatchForgetList<'a>> {
        match self {
            Op::BatchForget { nodes } => Some(*nodes),
            _ => None,
        }
    }
}

impl<'a> Request<'a> {
    /// INIT's arguments, or the opcode the request had instead.
    pub fn into_init(self) -> Result<abi::InitIn, Opcode> {
        match self.op {
            Op::Init(init) => Ok(init),
            _ => Err(Opcode(self.header.opcode)),
        }
    }
}

/// The node list of a BATCH_FORGET, read lazily so that no allocation is needed.
#[derive(Debug, Clone, Copy)]
pub struct BatchForgetList<'a> {
    bytes: &'a [u8],
}

impl<'a> BatchForgetList<'a> {
    /// Each node and how many references to drop on it.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, u64)> + 'a {
        self.bytes
            .chunks_exact(size_of::<abi::ForgetOne>())
            .filter_map(|c| abi::ForgetOne::read_from_bytes(c).ok())
            .map(|f| (NodeId(f.nodeid), f.nlookup))
    }
    /// How many nodes the batch holds.
    pub fn len(&self) -> usize {
        self.bytes.len() / size_of::<abi::ForgetOne>()
    }
    /// True for a batch of none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const HEADER_LEN: usize = size_of::<abi::InHeader>();

/// Parse the header alone, e.g. to answer a request whose body is broken.
pub fn parse_header(buf: &[u8]) -> Result<abi::InHeader, ParseError> {
    abi::InHeader::read_from_prefix(buf)
        .map(|(h, _)| h)
        .map_err(|_| ParseError::ShortHeader {
            got: buf.len(),
            need: HEADER_LEN,
        })
}

/// Parse a request that arrived in one buffer, as /dev/fuse delivers it.
pub fn parse_contiguous(buf: &[u8], cfg: ParseConfig) -> Result<Request<'_>, ParseError> {
    let header = parse_header(buf)?;
    let declared = header.len as usize;
    if declared != buf.len() {
        return Err(ParseError::LengthMismatch {
            declared,
            got: buf.len(),
        });
    }
    let body = &buf[HEADER_LEN..];
    let ext = header.total_extlen as usize * 8;
    let Some(args_len) = body.len().checked_sub(ext) else {
        return Err(ParseError::BadExtensions {
            opcode: Opcode(header.opcode),
            ext,
        });
    };
    parse_body(header, &body[..args_len], None, cfg)
}

/// Parse a request whose fixed arguments and variable payload arrived in
/// separate buffers, as FUSE-over-io_uring delivers them.
pub fn parse_split<'a>(
    header: abi::InHeader,
    args: &'a [u8],
    payload: &'a [u8],
    cfg: ParseConfig,
) -> Result<Request<'a>, ParseError> {
    parse_body(header, args, Some(payload), cfg)
}

struct Args<'a> {
    opcode: Opcode,
    fixed: &'a [u8],
    payload: Option<&'a [u8]>,
}

impl<'a> Args<'a> {
    /// Read `T`, accepting a shorter struct of at least `min` bytes from an
    /// older kernel (missing fields read as zero).
    fn fixed_min<T: FromBytes + IntoBytes>(&mut self, min: usize) -> Result<T, ParseError> {
        let want = size_of::<T>();
        let take = want.min(self.fixed.len());
        if take < min.min(want) {
            return Err(ParseError::ShortArgs {
                opcode: self.opcode,
                need: min,
                got: self.fixed.len(),
            });
        }
        let mut v = T::new_zeroed();
        v.as_mut_bytes()[..take].copy_from_slice(&self.fixed[..take]);
        self.fixed = &self.fixed[take..];
        Ok(v)
    }

    fn fixed<T: FromBytes + IntoBytes>(&mut self) -> Result<T, ParseError> {
        self.fixed_min::<T>(size_of::<T>())
    }

    /// The variable part: the separate payload if there is one, else what
    /// follows the fixed struct.
    fn rest(&mut self) -> &'a [u8] {
        match self.payload.take() {
            Some(p) => p,
            None => std::mem::take(&mut self.fixed),
        }
    }

    fn name(&mut self) -> Result<&'a OsStr, ParseError> {
        let rest = self.rest();
        let (name, tail) = split_cstr(rest).ok_or(ParseError::UnterminatedName {
            opcode: self.opcode,
        })?;
        // A second name (RENAME, SYMLINK) follows in the same variable area.
        self.payload = Some(tail);
        Ok(name)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], ParseError> {
        let rest = self.rest();
        rest.get(..len).ok_or(ParseError::ShortArgs {
            opcode: self.opcode,
            need: len,
            got: rest.len(),
        })
    }
}

fn split_cstr(b: &[u8]) -> Option<(&OsStr, &[u8])> {
    let nul = b.iter().position(|&c| c == 0)?;
    Some((OsStr::from_bytes(&b[..nul]), &b[nul + 1..]))
}

fn opt_fh(valid: bool, fh: u64) -> Option<FileHandle> {
    valid.then_some(FileHandle(fh))
}

fn time_arg(valid: u32, set: u32, now: u32, sec: u64, nsec: u32) -> Option<TimeOrNow> {
    if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else if valid & set != 0 {
        Some(TimeOrNow::Specific(Timespec {
            sec: sec as i64,
            nsec,
        }))
    } else {
        None
    }
}

fn read_args(r: abi::ReadIn) -> Read {
    Read {
        fh: FileHandle(r.fh),
        offset: r.offset,
        size: r.size,
        flags: r.flags as i32,
        lock_owner: (r.read_flags & flags::READ_LOCKOWNER != 0).then_some(r.lock_owner),
    }
}

fn release_args(r: abi::ReleaseIn) -> Release {
    Release {
        fh: FileHandle(r.fh),
        flags: r.flags as i32,
        flush: r.release_flags & flags::release::FLUSH != 0,
        flock_unlock: r.release_flags & flags::release::FLOCK_UNLOCK != 0,
        lock_owner: r.lock_owner,
        forget_follows: false,
    }
}

fn lock_args(l: abi::LkIn) -> Lock {
    Lock {
        fh: FileHandle(l.fh),
        owner: l.owner,
        start: l.lk.start,
        end: l.lk.end,
        typ: l.lk.typ as i32,
        pid: l.lk.pid,
        flock: l.lk_flags & flags::LK_FLOCK != 0,
    }
}

fn parse_body<'a>(
    header: abi::InHeader,
    fixed: &'a [u8],
    payload: Option<&'a [u8]>,
    cfg: ParseConfig,
) -> Result<Request<'a>, ParseError> {
    let opcode = Opcode(header.opcode);
    let mut a = Args {
        opcode,
        fixed,
        payload,
    };
    let op = match opcode {
        Opcode::INIT => Op::Init(a.fixed_min::<abi::InitIn>(abi::COMPAT_INIT_IN_SIZE)?),
        Opcode::DESTROY => Op::Destroy,
        Opcode::LOOKUP => Op::Lookup { name: a.name()? },
        Opcode::FORGET => Op::Forget {
            nlookup: a.fixed::<abi::ForgetIn>()?.nlookup,
        },
        Opcode::BATCH_FORGET => {
            let count = a.fixed::<abi::BatchForgetIn>()?.count as usize;
            let need = count.saturating_mul(size_of::<abi::ForgetOne>());
            Op::BatchForget {
                nodes: BatchForgetList {
                    bytes: a.bytes(need)?,
                },
            }
        }
        Opcode::GETATTR => {
            let g = a.fixed::<abi::GetattrIn>()?;
            Op::Getattr {
                fh: opt_fh(g.getattr_flags & flags::GETATTR_FH != 0, g.fh),
            }
        }
        Opcode::SETATTR => {
            let s = a.fixed::<abi::SetattrIn>()?;
            let v = s.valid;
            use flags::fattr::*;
            Op::Setattr(SetAttr {
                fh: opt_fh(v & FH != 0, s.fh),
                mode: (v & MODE != 0).then_some(s.mode),
                uid: (v & UID != 0).then_some(s.uid),
                gid: (v & GID != 0).then_some(s.gid),
                size: (v & SIZE != 0).then_some(s.size),
                atime: time_arg(v, ATIME, ATIME_NOW, s.atime, s.atimensec),
                mtime: time_arg(v, MTIME, MTIME_NOW, s.mtime, s.mtimensec),
                ctime: (v & CTIME != 0).then_some(Timespec {
                    sec: s.ctime as i64,
                    nsec: s.ctimensec,
                }),
                lock_owner: (v & LOCKOWNER != 0).then_some(s.lock_owner),
                kill_suidgid: v & KILL_SUIDGID != 0,
            })
        }
        Opcode::READLINK => Op::Readlink,
        Opcode::SYMLINK => {
            // The new entry's name comes first, then the link target.
            let name = a.name()?;
            let target = a.name()?;
            Op::Symlink { name, target }
        }
        Opcode::MKNOD => {
            let m = a.fixed::<abi::MknodIn>()?;
            Op::Mknod {
                name: a.name()?,
                args: Mknod {
                    mode: m.mode,
                    rdev: m.rdev,
                    umask: m.umask,
                },
            }
        }
        Opcode::MKDIR => {
            let m = a.fixed::<abi::MkdirIn>()?;
            Op::Mkdir {
                name: a.name()?,
                args: Mkdir {
                    mode: m.mode,
                    umask: m.umask,
                },
            }
        }
        Opcode::UNLINK => Op::Unlink { name: a.name()? },
        Opcode::RMDIR => Op::Rmdir { name: a.name()? },
        Opcode::RENAME | Opcode::RENAME2 => {
            let (newdir, flags) = if opcode == Opcode::RENAME {
                (a.fixed::<abi::RenameIn>()?.newdir, 0)
            } else {
                let r = a.fixed::<abi::Rename2In>()?;
                (r.newdir, r.flags)
            };
            let name = a.name()?;
            let new_name = a.name()?;
            Op::Rename(Rename {
                parent: NodeId(header.nodeid),
                name,
                new_parent: NodeId(newdir),
                new_name,
                flags,
            })
        }
        Opcode::LINK => {
            let l = a.fixed::<abi::LinkIn>()?;
            Op::Link {
                target: NodeId(l.oldnodeid),
                new_name: a.name()?,
            }
        }
        Opcode::OPEN | Opcode::OPENDIR => {
            let o = a.fixed::<abi::OpenIn>()?;
            let open = Open {
                flags: o.flags as i32,
                kill_suidgid: o.open_flags & flags::open_in::KILL_SUIDGID != 0,
            };
            if opcode == Opcode::OPEN {
                Op::Open(open)
            } else {
                Op::Opendir(open)
            }
        }
        Opcode::READ => Op::Read(read_args(a.fixed()?)),
        Opcode::READDIR => Op::Readdir(read_args(a.fixed()?)),
        Opcode::READDIRPLUS => Op::Readdirplus(read_args(a.fixed()?)),
        Opcode::WRITE => {
            let w = a.fixed::<abi::WriteIn>()?;
            let data = a.bytes(w.size as usize)?;
            Op::Write(Write {
                fh: FileHandle(w.fh),
                offset: w.offset,
                data,
                flags: w.flags as i32,
                lock_owner: (w.write_flags & flags::write::LOCKOWNER != 0).then_some(w.lock_owner),
                from_cache: w.write_flags & flags::write::CACHE != 0,
                kill_suidgid: w.write_flags & flags::write::KILL_SUIDGID != 0,
            })
        }
        Opcode::STATFS => Op::Statfs,
        Opcode::RELEASE => Op::Release(release_args(a.fixed()?)),
        Opcode::RELEASEDIR => Op::Releasedir(release_args(a.fixed()?)),
        Opcode::FSYNC | Opcode::FSYNCDIR => {
            let f = a.fixed::<abi::FsyncIn>()?;
            let (fh, datasync) = (
                FileHandle(f.fh),
                f.fsync_flags & flags::FSYNC_FDATASYNC != 0,
            );
            if opcode == Opcode::FSYNC {
                Op::Fsync { fh, datasync }
            } else {
                Op::Fsyncdir { fh, datasync }
            }
        }
        Opcode::SETXATTR => {
            let s = if cfg.setxattr_ext {
                a.fixed::<abi::SetxattrIn>()?
            } else {
                let c = a.fixed_min::<abi::GetxattrIn>(abi::COMPAT_SETXATTR_IN_SIZE)?;
                abi::SetxattrIn {
                    size: c.size,
                    flags: c.padding,
                    ..Default::default()
                }
            };
            let name = a.name()?;
            let value = a.bytes(s.size as usize)?;
            Op::Setxattr(Setxattr {
                name,
                value,
                flags: s.flags as i32,
                setxattr_flags: s.setxattr_flags,
            })
        }
        Opcode::GETXATTR => {
            let g = a.fixed::<abi::GetxattrIn>()?;
            Op::Getxattr {
                name: a.name()?,
                size: g.size,
            }
        }
        Opcode::LISTXATTR => Op::Listxattr {
            size: a.fixed::<abi::GetxattrIn>()?.size,
        },
        Opcode::REMOVEXATTR => Op::Removexattr { name: a.name()? },
        Opcode::FLUSH => {
            let f = a.fixed::<abi::FlushIn>()?;
            Op::Flush {
                fh: FileHandle(f.fh),
                lock_owner: f.lock_owner,
            }
        }
        Opcode::GETLK => Op::Getlk(lock_args(a.fixed()?)),
        Opcode::SETLK | Opcode::SETLKW => Op::Setlk {
            lock: lock_args(a.fixed()?),
            sleep: opcode == Opcode::SETLKW,
        },
        Opcode::ACCESS => Op::Access {
            mask: a.fixed::<abi::AccessIn>()?.mask as i32,
        },
        Opcode::CREATE | Opcode::TMPFILE => {
            let c = a.fixed::<abi::CreateIn>()?;
            let args = Create {
                flags: c.flags as i32,
                mode: c.mode,
                umask: c.umask,
                kill_suidgid: c.open_flags & flags::open_in::KILL_SUIDGID != 0,
            };
            if opcode == Opcode::CREATE {
                Op::Create {
                    name: a.name()?,
                    args,
                }
            } else {
                Op::Tmpfile { args }
            }
        }
        Opcode::INTERRUPT => Op::Interrupt {
            unique: a.fixed::<abi::InterruptIn>()?.unique,
        },
        Opcode::BMAP => {
            let b = a.fixed::<abi::BmapIn>()?;
            Op::Bmap {
                block: b.block,
                blocksize: b.blocksize,
            }
        }
        Opcode::IOCTL => {
            let i = a.fixed::<abi::IoctlIn>()?;
            let input = a.bytes(i.in_size as usize)?;
            Op::Ioctl(Ioctl {
                fh: FileHandle(i.fh),
                flags: i.flags,
                cmd: i.cmd,
                arg: i.arg,
                input,
                out_size: i.out_size,
            })
        }
        Opcode::POLL => {
            let p = a.fixed::<abi::PollIn>()?;
            Op::Poll(Poll {
                fh: FileHandle(p.fh),
                kh: p.kh,
                schedule_notify: p.flags & flags::POLL_SCHEDULE_NOTIFY != 0,
                events: p.events,
            })
        }
        Opcode::NOTIFY_REPLY => {
            let r = a.fixed::<abi::NotifyRetrieveIn>()?;
            let data = a.bytes(r.size as usize)?;
            Op::NotifyReply {
                offset: r.offset,
                size: r.size,
                data,
            }
        }
        Opcode::FALLOCATE => {
            let f = a.fixed::<abi::FallocateIn>()?;
            Op::Fallocate(Fallocate {
                fh: FileHandle(f.fh),
                offset: f.offset,
                length: f.length,
                mode: f.mode as i32,
            })
        }
        Opcode::LSEEK => {
            let l = a.fixed::<abi::LseekIn>()?;
            Op::Lseek(Lseek {
                fh: FileHandle(l.fh),
                offset: l.offset,
                whence: l.whence as i32,
            })
        }
        Opcode::COPY_FILE_RANGE | Opcode::COPY_FILE_RANGE_64 => {
            let c = a.fixed::<abi::CopyFileRangeIn>()?;
            Op::CopyFileRange {
                args: CopyFileRange {
                    node_in: NodeId(header.nodeid),
                    fh_in: FileHandle(c.fh_in),
                    off_in: c.off_in,
                    node_out: NodeId(c.nodeid_out),
                    fh_out: FileHandle(c.fh_out),
                    off_out: c.off_out,
                    len: c.len,
                    flags: c.flags,
                },
                wide: opcode == Opcode::COPY_FILE_RANGE_64,
            }
        }
        Opcode::SYNCFS => {
            a.fixed::<abi::SyncfsIn>()?;
            Op::Syncfs
        }
        Opcode::STATX => {
            let s = a.fixed::<abi::StatxIn>()?;
            Op::Statx(Statx {
                fh: opt_fh(s.getattr_flags & flags::GETATTR_FH != 0, s.fh),
                flags: s.sx_flags,
                mask: s.sx_mask,
            })
        }
        _ => Op::Unsupported,
    };
    Ok(Request { header, op })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(op: Opcode, len: usize) -> abi::InHeader {
        abi::InHeader {
            len: len as u32,
            opcode: op.0,
            unique: 9,
            nodeid: 1,
            ..Default::default()
        }
    }

    /// The io_uring shape (fixed args and payload apart) parses to the same
    /// view as the /dev/fuse shape (one buffer).
    #[test]
    fn split_and_contiguous_agree() {
        let w = abi::WriteIn {
            fh: 3,
            offset: 4096,
            size: 5,
            ..Default::default()
        };
        let r = abi::Rename2In {
            newdir: 7,
            flags: 1,
            padding: 0,
        };
        for (op, fixed, var) in [
            (Opcode::WRITE, w.as_bytes(), &b"hello"[..]),
            (Opcode::RENAME2, r.as_bytes(), &b"old\0new\0"[..]),
            (Opcode::LOOKUP, &[][..], &b"name\0"[..]),
        ] {
            let h = header(op, 40 + fixed.len() + var.len());
            let whole = [h.as_bytes(), fixed, var].concat();
            let a = parse_contiguous(&whole, ParseConfig::default()).unwrap();
            let b = parse_split(h, fixed, var, ParseConfig::default()).unwrap();
            assert_eq!(format!("{:?}", a.op), format!("{:?}", b.op));
        }
    }

    #[test]
    fn short_and_lying_requests_are_errors() {
        let h = header(Opcode::WRITE, 40 + 40 + 5);
        let w = abi::WriteIn {
            size: 500,
            ..Default::default()
        };
        let buf = [h.as_bytes(), w.as_bytes(), b"hello"].concat();
        assert!(matches!(
            parse_contiguous(&buf, ParseConfig::default()),
            Err(ParseError::ShortArgs { .. })
        ));
        assert!(matches!(
            parse_contiguous(&buf[..60], ParseConfig::default()),
            Err(ParseError::LengthMismatch { .. })
        ));
        assert!(matches!(
            parse_contiguous(&buf[..10], ParseConfig::default()),
            Err(ParseError::ShortHeader { .. })
        ));
        let h = header(Opcode::LOOKUP, 44);
        let buf = [h.as_bytes(), b"name"].concat();
        assert!(matches!(
            parse_contiguous(&buf, ParseConfig::default()),
            Err(ParseError::UnterminatedName { .. })
        ));
        let h = header(Opcode(777), 40);
        assert!(matches!(
            parse_contiguous(h.as_bytes(), ParseConfig::default())
                .unwrap()
                .op,
            Op::Unsupported
        ));
    }
}
