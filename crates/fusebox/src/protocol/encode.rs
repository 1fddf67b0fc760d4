//! Requests as the kernel writes them: the parser's inverse, for a FUSE
//! client of fusebox's own (direct mode's processes asking the run's one
//! server) and for tests that need a request's exact bytes. What
//! [`encode_request`] writes, [`parse_contiguous`](super::parse_contiguous)
//! reads back as the same [`Op`]; the tests below hold every variant to
//! that.

use fusebox_abi as abi;
use fusebox_abi::{flags, Opcode};
use zerocopy::IntoBytes;

use super::ops::{Lock, Read, Release};
use super::parse::{Op, ParseConfig};
pub use crate::error::EncodeError;
use crate::types::{NodeId, TimeOrNow};

/// The header fields a request's sender chooses (the length and opcode
/// follow from the request).
#[derive(Clone, Copy, Debug)]
pub struct RequestHead {
    /// The request's id, echoed by its answer.
    pub unique: u64,
    /// The node the request is about. RENAME's and COPY_FILE_RANGE's
    /// carry their own (`Rename::parent`, `CopyFileRange::node_in`), which
    /// win.
    pub node: NodeId,
    /// The caller's filesystem uid.
    pub uid: u32,
    /// The caller's filesystem gid.
    pub gid: u32,
    /// The calling thread's id.
    pub pid: u32,
}

impl RequestHead {
    /// The header of a message of a private protocol's own, carried on a
    /// FUSE connection beside FUSE's requests: an opcode outside FUSE's
    /// range, followed by `args_len` bytes of the protocol's own making.
    /// Built without allocating (direct mode sends these around fork,
    /// when the allocator may be locked).
    pub fn own_header(
        &self,
        opcode: Opcode,
        args_len: usize,
    ) -> Result<abi::InHeader, EncodeError> {
        let len = size_of::<abi::InHeader>() + args_len;
        Ok(abi::InHeader {
            len: u32::try_from(len).map_err(|_| EncodeError::TooLong)?,
            opcode: opcode.0,
            unique: self.unique,
            nodeid: self.node.0,
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            total_extlen: 0,
            padding: 0,
        })
    }
}

/// An extension record after a request's arguments (`fuse_ext_header`
/// and its data; `total_extlen` counts them). Types up to
/// `FUSE_MAX_NR_SECCTX` (31) are security contexts, 32 is
/// FUSE_EXT_GROUPS; a private protocol uses types of its own above those.
#[derive(Clone, Copy, Debug)]
pub struct Extension<'a> {
    /// `fuse_ext_header.type`.
    pub typ: u32,
    /// The record's data. It is padded to 8 bytes on the wire, and read
    /// back with that padding ([`extensions`]): a type whose data is not
    /// a multiple of 8 bytes says its own length.
    pub data: &'a [u8],
}

/// Append `op` as one request to `out`: header, arguments, then
/// `extensions`. `cfg` is the session's, as the parser's (it decides
/// SETXATTR's layout). A request the parser reads as
/// [`Op::Unsupported`] has no encoding.
pub fn encode_request(
    head: &RequestHead,
    op: &Op<'_>,
    cfg: ParseConfig,
    extensions: &[Extension<'_>],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let header_len = size_of::<abi::InHeader>();
    // One allocation for a large write: its data, and room for the rest.
    let data = match op {
        Op::Write(w) => w.data.len(),
        Op::Setxattr(s) => s.value.len(),
        _ => 0,
    };
    out.reserve(header_len + 512 + data);
    out.resize(start + header_len, 0);
    let (opcode, node) = encode_args(op, head.node, cfg, out)?;
    let ext_start = out.len();
    for e in extensions {
        let size = (size_of::<abi::ExtHeader>() + e.data.len()).next_multiple_of(8);
        let h = abi::ExtHeader {
            size: u32::try_from(size).map_err(|_| EncodeError::TooLong)?,
            typ: e.typ,
        };
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(e.data);
        // Records are 8-byte multiples; the area starts where the
        // arguments end, aligned or not.
        out.resize(
            out.len() + (size - size_of::<abi::ExtHeader>() - e.data.len()),
            0,
        );
    }
    let header = abi::InHeader {
        len: u32::try_from(out.len() - start).map_err(|_| EncodeError::TooLong)?,
        opcode: opcode.0,
        unique: head.unique,
        nodeid: node.0,
        uid: head.uid,
        gid: head.gid,
        pid: head.pid,
        total_extlen: u16::try_from((out.len() - ext_start) / 8)
            .map_err(|_| EncodeError::TooLong)?,
        padding: 0,
    };
    out[start..start + header_len].copy_from_slice(header.as_bytes());
    Ok(())
}

/// Each extension record of a request that arrived in one buffer (as
/// [`encode_request`] or /dev/fuse lays it out): its type and data. A
/// malformed record ends the list.
pub fn extensions(request: &[u8]) -> impl Iterator<Item = Extension<'_>> {
    use zerocopy::FromBytes;
    let area = abi::InHeader::read_from_prefix(request)
        .ok()
        .and_then(|(h, _)| {
            let ext = h.total_extlen as usize * 8;
            let end = (h.len as usize).min(request.len());
            // Never reaching back into the header.
            let start = end
                .checked_sub(ext)
                .filter(|&s| s >= size_of::<abi::InHeader>())?;
            request.get(start..end)
        })
        .unwrap_or_default();
    let mut rest = area;
    std::iter::from_fn(move || {
        let (h, _) = abi::ExtHeader::read_from_prefix(rest).ok()?;
        let size = h.size as usize;
        if size < size_of::<abi::ExtHeader>() || size > rest.len() {
            return None;
        }
        let data = &rest[size_of::<abi::ExtHeader>()..size];
        rest = &rest[size.next_multiple_of(8).min(rest.len())..];
        Some(Extension { typ: h.typ, data })
    })
}

fn name(out: &mut Vec<u8>, n: &std::ffi::OsStr) {
    use std::os::unix::ffi::OsStrExt;
    out.extend_from_slice(n.as_bytes());
    out.push(0);
}

fn read_in(r: &Read) -> abi::ReadIn {
    abi::ReadIn {
        fh: r.fh.0,
        offset: r.offset,
        size: r.size,
        read_flags: if r.lock_owner.is_some() {
            flags::READ_LOCKOWNER
        } else {
            0
        },
        lock_owner: r.lock_owner.unwrap_or(0),
        flags: r.flags as u32,
        padding: 0,
    }
}

fn release_in(r: &Release) -> abi::ReleaseIn {
    let mut release_flags = 0;
    if r.flush {
        release_flags |= flags::release::FLUSH;
    }
    if r.flock_unlock {
        release_flags |= flags::release::FLOCK_UNLOCK;
    }
    abi::ReleaseIn {
        fh: r.fh.0,
        flags: r.flags as u32,
        release_flags,
        lock_owner: r.lock_owner,
    }
}

fn lk_in(l: &Lock) -> abi::LkIn {
    abi::LkIn {
        fh: l.fh.0,
        owner: l.owner,
        lk: abi::FileLock {
            start: l.start,
            end: l.end,
            typ: l.typ as u32,
            pid: l.pid,
        },
        lk_flags: if l.flock { flags::LK_FLOCK } else { 0 },
        padding: 0,
    }
}

fn open_flags(kill_suidgid: bool) -> u32 {
    if kill_suidgid {
        flags::open_in::KILL_SUIDGID
    } else {
        0
    }
}

fn len32(n: usize) -> Result<u32, EncodeError> {
    u32::try_from(n).map_err(|_| EncodeError::TooLong)
}

/// The arguments of `op`, appended to `out`; its opcode and header node.
fn encode_args(
    op: &Op<'_>,
    node: NodeId,
    cfg: ParseConfig,
    out: &mut Vec<u8>,
) -> Result<(Opcode, NodeId), EncodeError> {
    let opcode = match op {
        Op::Init(i) => {
            out.extend_from_slice(i.as_bytes());
            Opcode::INIT
        }
        Op::Destroy => Opcode::DESTROY,
        Op::Lookup { name: n } => {
            name(out, n);
            Opcode::LOOKUP
        }
        Op::Forget { nlookup } => {
            out.extend_from_slice(abi::ForgetIn { nlookup: *nlookup }.as_bytes());
            Opcode::FORGET
        }
        Op::BatchForget { nodes } => {
            let b = abi::BatchForgetIn {
                count: len32(nodes.len())?,
                dummy: 0,
            };
            out.extend_from_slice(b.as_bytes());
            for (node, nlookup) in nodes.iter() {
                out.extend_from_slice(
                    abi::ForgetOne {
                        nodeid: node.0,
                        nlookup,
                    }
                    .as_bytes(),
                );
            }
            Opcode::BATCH_FORGET
        }
        Op::Getattr { fh } => {
            let g = abi::GetattrIn {
                getattr_flags: if fh.is_some() { flags::GETATTR_FH } else { 0 },
                dummy: 0,
                fh: fh.map_or(0, |f| f.0),
            };
            out.extend_from_slice(g.as_bytes());
            Opcode::GETATTR
        }
        Op::Setattr(s) => {
            use flags::fattr::*;
            let mut a = abi::SetattrIn::default();
            let mut valid = 0;
            if let Some(fh) = s.fh {
                valid |= FH;
                a.fh = fh.0;
            }
            if let Some(m) = s.mode {
                valid |= MODE;
                a.mode = m;
            }
            if let Some(u) = s.uid {
                valid |= UID;
                a.uid = u;
            }
            if let Some(g) = s.gid {
                valid |= GID;
                a.gid = g;
            }
            if let Some(sz) = s.size {
                valid |= SIZE;
                a.size = sz;
            }
            match s.atime {
                Some(TimeOrNow::Now) => valid |= ATIME | ATIME_NOW,
                Some(TimeOrNow::Specific(t)) => {
                    valid |= ATIME;
                    a.atime = t.sec as u64;
                    a.atimensec = t.nsec;
                }
                None => {}
            }
            match s.mtime {
                Some(TimeOrNow::Now) => valid |= MTIME | MTIME_NOW,
                Some(TimeOrNow::Specific(t)) => {
                    valid |= MTIME;
                    a.mtime = t.sec as u64;
                    a.mtimensec = t.nsec;
                }
                None => {}
            }
            if let Some(t) = s.ctime {
                valid |= CTIME;
                a.ctime = t.sec as u64;
                a.ctimensec = t.nsec;
            }
            if let Some(o) = s.lock_owner {
                valid |= LOCKOWNER;
                a.lock_owner = o;
            }
            if s.kill_suidgid {
                valid |= KILL_SUIDGID;
            }
            a.valid = valid;
            out.extend_from_slice(a.as_bytes());
            Opcode::SETATTR
        }
        Op::Readlink => Opcode::READLINK,
        Op::Symlink { name: n, target } => {
            name(out, n);
            name(out, target);
            Opcode::SYMLINK
        }
        Op::Mknod { name: n, args } => {
            let m = abi::MknodIn {
                mode: args.mode,
                rdev: args.rdev,
                umask: args.umask,
                padding: 0,
            };
            out.extend_from_slice(m.as_bytes());
            name(out, n);
            Opcode::MKNOD
        }
        Op::Mkdir { name: n, args } => {
            let m = abi::MkdirIn {
                mode: args.mode,
                umask: args.umask,
            };
            out.extend_from_slice(m.as_bytes());
            name(out, n);
            Opcode::MKDIR
        }
        Op::Unlink { name: n } => {
            name(out, n);
            Opcode::UNLINK
        }
        Op::Rmdir { name: n } => {
            name(out, n);
            Opcode::RMDIR
        }
        Op::Rename(r) => {
            let a = abi::Rename2In {
                newdir: r.new_parent.0,
                flags: r.flags,
                padding: 0,
            };
            out.extend_from_slice(a.as_bytes());
            name(out, r.name);
            name(out, r.new_name);
            return Ok((Opcode::RENAME2, r.parent));
        }
        Op::Link { target, new_name } => {
            out.extend_from_slice(
                abi::LinkIn {
                    oldnodeid: target.0,
                }
                .as_bytes(),
            );
            name(out, new_name);
            Opcode::LINK
        }
        Op::Open(o) | Op::Opendir(o) => {
            let a = abi::OpenIn {
                flags: o.flags as u32,
                open_flags: open_flags(o.kill_suidgid),
            };
            out.extend_from_slice(a.as_bytes());
            if matches!(op, Op::Open(_)) {
                Opcode::OPEN
            } else {
                Opcode::OPENDIR
            }
        }
        Op::Read(r) => {
            out.extend_from_slice(read_in(r).as_bytes());
            Opcode::READ
        }
        Op::Readdir(r) => {
            out.extend_from_slice(read_in(r).as_bytes());
            Opcode::READDIR
        }
        Op::Readdirplus(r) => {
            out.extend_from_slice(read_in(r).as_bytes());
            Opcode::READDIRPLUS
        }
        Op::Write(w) => {
            let mut write_flags = 0;
            if w.lock_owner.is_some() {
                write_flags |= flags::write::LOCKOWNER;
            }
            if w.from_cache {
                write_flags |= flags::write::CACHE;
            }
            if w.kill_suidgid {
                write_flags |= flags::write::KILL_SUIDGID;
            }
            let a = abi::WriteIn {
                fh: w.fh.0,
                offset: w.offset,
                size: len32(w.data.len())?,
                write_flags,
                lock_owner: w.lock_owner.unwrap_or(0),
                flags: w.flags as u32,
                padding: 0,
            };
            out.extend_from_slice(a.as_bytes());
            out.extend_from_slice(w.data);
            Opcode::WRITE
        }
        Op::Statfs => Opcode::STATFS,
        Op::Release(r) => {
            out.extend_from_slice(release_in(r).as_bytes());
            Opcode::RELEASE
        }
        Op::Releasedir(r) => {
            out.extend_from_slice(release_in(r).as_bytes());
            Opcode::RELEASEDIR
        }
        Op::Fsync { fh, datasync } | Op::Fsyncdir { fh, datasync } => {
            let a = abi::FsyncIn {
                fh: fh.0,
                fsync_flags: if *datasync { flags::FSYNC_FDATASYNC } else { 0 },
                padding: 0,
            };
            out.extend_from_slice(a.as_bytes());
            if matches!(op, Op::Fsync { .. }) {
                Opcode::FSYNC
            } else {
                Opcode::FSYNCDIR
            }
        }
        Op::Setxattr(s) => {
            let size = len32(s.value.len())?;
            if cfg.setxattr_ext {
                let a = abi::SetxattrIn {
                    size,
                    flags: s.flags as u32,
                    setxattr_flags: s.setxattr_flags,
                    padding: 0,
                };
                out.extend_from_slice(a.as_bytes());
            } else {
                // The compat layout: size, then the flags where
                // fuse_getxattr_in has its padding.
                let a = abi::GetxattrIn {
                    size,
                    padding: s.flags as u32,
                };
                out.extend_from_slice(a.as_bytes());
            }
            name(out, s.name);
            out.extend_from_slice(s.value);
            Opcode::SETXATTR
        }
        Op::Getxattr { name: n, size } => {
            out.extend_from_slice(
                abi::GetxattrIn {
                    size: *size,
                    padding: 0,
                }
                .as_bytes(),
            );
            name(out, n);
            Opcode::GETXATTR
        }
        Op::Listxattr { size } => {
            out.extend_from_slice(
                abi::GetxattrIn {
                    size: *size,
                    padding: 0,
                }
                .as_bytes(),
            );
            Opcode::LISTXATTR
        }
        Op::Removexattr { name: n } => {
            name(out, n);
            Opcode::REMOVEXATTR
        }
        Op::Flush { fh, lock_owner } => {
            out.extend_from_slice(
                abi::FlushIn {
                    fh: fh.0,
                    unused: 0,
                    padding: 0,
                    lock_owner: *lock_owner,
                }
                .as_bytes(),
            );
            Opcode::FLUSH
        }
        Op::Getlk(l) => {
            out.extend_from_slice(lk_in(l).as_bytes());
            Opcode::GETLK
        }
        Op::Setlk { lock, sleep } => {
            out.extend_from_slice(lk_in(lock).as_bytes());
            if *sleep {
                Opcode::SETLKW
            } else {
                Opcode::SETLK
            }
        }
        Op::Access { mask } => {
            out.extend_from_slice(
                abi::AccessIn {
                    mask: *mask as u32,
                    padding: 0,
                }
                .as_bytes(),
            );
            Opcode::ACCESS
        }
        Op::Create { args, .. } | Op::Tmpfile { args } => {
            let a = abi::CreateIn {
                flags: args.flags as u32,
                mode: args.mode,
                umask: args.umask,
                open_flags: open_flags(args.kill_suidgid),
            };
            out.extend_from_slice(a.as_bytes());
            match op {
                Op::Create { name: n, .. } => {
                    name(out, n);
                    Opcode::CREATE
                }
                _ => Opcode::TMPFILE,
            }
        }
        Op::Interrupt { unique } => {
            out.extend_from_slice(abi::InterruptIn { unique: *unique }.as_bytes());
            Opcode::INTERRUPT
        }
        Op::Bmap { block, blocksize } => {
            out.extend_from_slice(
                abi::BmapIn {
                    block: *block,
                    blocksize: *blocksize,
                    padding: 0,
                }
                .as_bytes(),
            );
            Opcode::BMAP
        }
        Op::Ioctl(i) => {
            let a = abi::IoctlIn {
                fh: i.fh.0,
                flags: i.flags,
                cmd: i.cmd,
                arg: i.arg,
                in_size: len32(i.input.len())?,
                out_size: i.out_size,
            };
            out.extend_from_slice(a.as_bytes());
            out.extend_from_slice(i.input);
            Opcode::IOCTL
        }
        Op::Poll(p) => {
            out.extend_from_slice(
                abi::PollIn {
                    fh: p.fh.0,
                    kh: p.kh,
                    flags: if p.schedule_notify {
                        flags::POLL_SCHEDULE_NOTIFY
                    } else {
                        0
                    },
                    events: p.events,
                }
                .as_bytes(),
            );
            Opcode::POLL
        }
        // The size the data has (what the parser reads as `size`).
        Op::NotifyReply { offset, data, .. } => {
            out.extend_from_slice(
                abi::NotifyRetrieveIn {
                    offset: *offset,
                    size: len32(data.len())?,
                    ..Default::default()
                }
                .as_bytes(),
            );
            out.extend_from_slice(data);
            Opcode::NOTIFY_REPLY
        }
        Op::Fallocate(f) => {
            out.extend_from_slice(
                abi::FallocateIn {
                    fh: f.fh.0,
                    offset: f.offset,
                    length: f.length,
                    mode: f.mode as u32,
                    padding: 0,
                }
                .as_bytes(),
            );
            Opcode::FALLOCATE
        }
        Op::Lseek(l) => {
            out.extend_from_slice(
                abi::LseekIn {
                    fh: l.fh.0,
                    offset: l.offset,
                    whence: l.whence as u32,
                    padding: 0,
                }
                .as_bytes(),
            );
            Opcode::LSEEK
        }
        Op::CopyFileRange { args, wide } => {
            out.extend_from_slice(
                abi::CopyFileRangeIn {
                    fh_in: args.fh_in.0,
                    off_in: args.off_in,
                    nodeid_out: args.node_out.0,
                    fh_out: args.fh_out.0,
                    off_out: args.off_out,
                    len: args.len,
                    flags: args.flags,
                }
                .as_bytes(),
            );
            let opcode = if *wide {
                Opcode::COPY_FILE_RANGE_64
            } else {
                Opcode::COPY_FILE_RANGE
            };
            return Ok((opcode, args.node_in));
        }
        Op::Syncfs => {
            out.extend_from_slice(abi::SyncfsIn { padding: 0 }.as_bytes());
            Opcode::SYNCFS
        }
        Op::Statx(s) => {
            out.extend_from_slice(
                abi::StatxIn {
                    getattr_flags: if s.fh.is_some() { flags::GETATTR_FH } else { 0 },
                    reserved: 0,
                    fh: s.fh.map_or(0, |f| f.0),
                    sx_flags: s.flags,
                    sx_mask: s.mask,
                }
                .as_bytes(),
            );
            Opcode::STATX
        }
        Op::Unsupported => return Err(EncodeError::Unsupported),
    };
    Ok((opcode, node))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;
    use crate::protocol::ops::*;
    use crate::protocol::parse::parse_contiguous;
    use crate::types::{FileHandle, Timespec};

    fn head() -> RequestHead {
        RequestHead {
            unique: 77,
            node: NodeId(5),
            uid: 1000,
            gid: 100,
            pid: 4242,
        }
    }

    /// Every request reads back as written, header included, in both
    /// SETXATTR layouts and with and without extensions.
    #[test]
    fn every_request_reads_back_as_written() {
        let n = OsStr::new;
        let read = Read {
            fh: FileHandle(3),
            offset: 1 << 33,
            size: 4096,
            flags: libc::O_RDONLY,
            lock_owner: Some(9),
        };
        let release = Release {
            fh: FileHandle(4),
            flags: libc::O_RDWR,
            flush: true,
            flock_unlock: true,
            lock_owner: 11,
            forget_follows: false,
        };
        let lock = Lock {
            fh: FileHandle(6),
            owner: 12,
            start: 10,
            end: 20,
            typ: libc::F_WRLCK,
            pid: 99,
            flock: true,
        };
        let create = Create {
            flags: libc::O_CREAT | libc::O_EXCL,
            mode: 0o100644,
            umask: 0o22,
            kill_suidgid: true,
        };
        let forgets: Vec<u8> = [(NodeId(7), 2u64), (NodeId(8), 1)]
            .iter()
            .flat_map(|(node, k)| {
                abi::ForgetOne {
                    nodeid: node.0,
                    nlookup: *k,
                }
                .as_bytes()
                .to_vec()
            })
            .collect();
        let batch_request = {
            let h = abi::InHeader {
                len: (40 + 8 + forgets.len()) as u32,
                opcode: Opcode::BATCH_FORGET.0,
                ..Default::default()
            };
            let b = abi::BatchForgetIn { count: 2, dummy: 0 };
            [h.as_bytes(), b.as_bytes(), &forgets].concat()
        };
        let batch = parse_contiguous(&batch_request, ParseConfig::default()).unwrap();
        let ops = vec![
            Op::Init(abi::InitIn {
                major: 7,
                minor: 45,
                max_readahead: 1 << 20,
                flags: 3,
                flags2: 1,
                ..Default::default()
            }),
            Op::Destroy,
            Op::Lookup { name: n("a name") },
            Op::Forget { nlookup: 3 },
            batch.op,
            Op::Getattr { fh: None },
            Op::Getattr {
                fh: Some(FileHandle(8)),
            },
            Op::Setattr(SetAttr {
                fh: Some(FileHandle(1)),
                mode: Some(0o640),
                uid: Some(1),
                gid: None,
                size: Some(123),
                atime: Some(TimeOrNow::Now),
                mtime: Some(TimeOrNow::Specific(Timespec { sec: 5, nsec: 6 })),
                ctime: Some(Timespec { sec: 7, nsec: 8 }),
                lock_owner: Some(2),
                kill_suidgid: true,
            }),
            Op::Setattr(SetAttr::default()),
            Op::Readlink,
            Op::Symlink {
                name: n("link"),
                target: n("../target"),
            },
            Op::Mknod {
                name: n("fifo"),
                args: Mknod {
                    mode: libc::S_IFIFO | 0o600,
                    rdev: 0,
                    umask: 0o22,
                },
            },
            Op::Mkdir {
                name: n("dir"),
                args: Mkdir {
                    mode: 0o755,
                    umask: 0o22,
                },
            },
            Op::Unlink { name: n("gone") },
            Op::Rmdir {
                name: n("gone-dir"),
            },
            Op::Rename(Rename {
                parent: NodeId(5),
                name: n("old"),
                new_parent: NodeId(6),
                new_name: n("new"),
                flags: libc::RENAME_NOREPLACE,
            }),
            Op::Link {
                target: NodeId(9),
                new_name: n("hard"),
            },
            Op::Open(Open {
                flags: libc::O_WRONLY | libc::O_APPEND,
                kill_suidgid: true,
            }),
            Op::Opendir(Open {
                flags: libc::O_RDONLY,
                kill_suidgid: false,
            }),
            Op::Read(read),
            Op::Readdir(Read {
                lock_owner: None,
                ..read
            }),
            Op::Readdirplus(read),
            Op::Write(Write {
                fh: FileHandle(3),
                offset: 17,
                data: b"some bytes",
                flags: libc::O_WRONLY,
                lock_owner: Some(4),
                from_cache: true,
                kill_suidgid: true,
            }),
            Op::Statfs,
            Op::Release(release),
            Op::Releasedir(release),
            Op::Fsync {
                fh: FileHandle(3),
                datasync: true,
            },
            Op::Fsyncdir {
                fh: FileHandle(3),
                datasync: false,
            },
            Op::Setxattr(Setxattr {
                name: n("user.x"),
                value: b"value\0with nul",
                flags: libc::XATTR_CREATE,
                setxattr_flags: 0,
            }),
            Op::Getxattr {
                name: n("user.x"),
                size: 64,
            },
            Op::Listxattr { size: 0 },
            Op::Removexattr { name: n("user.x") },
            Op::Flush {
                fh: FileHandle(3),
                lock_owner: 13,
            },
            Op::Getlk(lock),
            Op::Setlk { lock, sleep: true },
            Op::Setlk { lock, sleep: false },
            Op::Access { mask: libc::R_OK },
            Op::Create {
                name: n("new file"),
                args: create,
            },
            Op::Interrupt { unique: 76 },
            Op::Bmap {
                block: 3,
                blocksize: 512,
            },
            Op::Ioctl(Ioctl {
                fh: FileHandle(3),
                flags: 0,
                cmd: 0x5401,
                arg: 0xdead,
                input: b"in",
                out_size: 8,
            }),
            Op::Poll(Poll {
                fh: FileHandle(3),
                kh: 44,
                schedule_notify: true,
                events: 1,
            }),
            Op::NotifyReply {
                offset: 4096,
                size: 3,
                data: b"abc",
            },
            Op::Fallocate(Fallocate {
                fh: FileHandle(3),
                offset: 0,
                length: 1 << 20,
                mode: libc::FALLOC_FL_KEEP_SIZE,
            }),
            Op::Lseek(Lseek {
                fh: FileHandle(3),
                offset: 100,
                whence: libc::SEEK_DATA,
            }),
            Op::CopyFileRange {
                args: CopyFileRange {
                    node_in: NodeId(5),
                    fh_in: FileHandle(1),
                    off_in: 2,
                    node_out: NodeId(6),
                    fh_out: FileHandle(3),
                    off_out: 4,
                    len: 5,
                    flags: 0,
                },
                wide: true,
            },
            Op::Syncfs,
            Op::Tmpfile { args: create },
            Op::Statx(Statx {
                fh: Some(FileHandle(3)),
                flags: 0x100,
                mask: 0xfff,
            }),
        ];
        let ext = [Extension {
            typ: 0x7fff_0001,
            data: &[1, 2, 3, 4, 5, 6, 7, 8],
        }];
        for setxattr_ext in [false, true] {
            let cfg = ParseConfig { setxattr_ext };
            for extensions in [&[][..], &ext[..]] {
                for op in &ops {
                    let mut buf = vec![0xaa; 3];
                    encode_request(&head(), op, cfg, extensions, &mut buf).unwrap();
                    let msg = &buf[3..];
                    let req = parse_contiguous(msg, cfg)
                        .unwrap_or_else(|e| panic!("{op:?} does not parse back: {e}"));
                    assert_eq!(format!("{:?}", req.op), format!("{op:?}"));
                    assert_eq!(req.unique(), 77);
                    assert_eq!(req.node(), NodeId(5));
                    assert_eq!((req.header.uid, req.header.gid), (1000, 100));
                    assert_eq!(req.header.pid, 4242);
                    let got: Vec<_> = super::extensions(msg).map(|e| (e.typ, e.data)).collect();
                    let want: Vec<_> = extensions.iter().map(|e| (e.typ, e.data)).collect();
                    assert_eq!(got, want);
                }
            }
        }
        assert_eq!(
            encode_request(
                &head(),
                &Op::Unsupported,
                ParseConfig::default(),
                &[],
                &mut Vec::new()
            ),
            Err(EncodeError::Unsupported)
        );
    }

    #[test]
    fn malformed_extensions_end_the_list() {
        let mut buf = Vec::new();
        let ext = [Extension {
            typ: 40,
            data: b"12345678",
        }];
        encode_request(&head(), &Op::Statfs, ParseConfig::default(), &ext, &mut buf).unwrap();
        assert_eq!(extensions(&buf).count(), 1);
        // A record claiming more than there is.
        let at = buf.len() - 16;
        buf[at..at + 4].copy_from_slice(&400u32.to_ne_bytes());
        assert_eq!(extensions(&buf).count(), 0);
        assert_eq!(extensions(&buf[..10]).count(), 0);
        // A total_extlen reaching back into the header: no records.
        let mut h = zerocopy::FromBytes::read_from_prefix(&buf[..])
            .map(|(h, _): (abi::InHeader, _)| h)
            .unwrap();
        h.total_extlen = (h.len / 8) as u16;
        buf[..size_of::<abi::InHeader>()].copy_from_slice(h.as_bytes());
        assert_eq!(extensions(&buf).count(), 0);
    }
}
