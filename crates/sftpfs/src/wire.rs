//! The SFTP protocol, version 3 (draft-ietf-secsh-filexfer-02, what
//! OpenSSH speaks), and the OpenSSH extensions sftpfs uses: packets
//! encoded from typed requests and decoded into typed replies. Written from
//! the draft and OpenSSH's PROTOCOL file; no I/O here.
//!
//! A packet is `u32 length, u8 type, body`; every request and reply but
//! INIT/VERSION carries a `u32 id` first in its body. Strings are `u32
//! length, bytes` and are bytes, not text: file names need not be UTF-8.

use std::fmt;

/// Packet types.
pub mod msg {
    pub const INIT: u8 = 1;
    pub const VERSION: u8 = 2;
    pub const OPEN: u8 = 3;
    pub const CLOSE: u8 = 4;
    pub const READ: u8 = 5;
    pub const WRITE: u8 = 6;
    pub const LSTAT: u8 = 7;
    pub const FSTAT: u8 = 8;
    pub const SETSTAT: u8 = 9;
    pub const FSETSTAT: u8 = 10;
    pub const OPENDIR: u8 = 11;
    pub const READDIR: u8 = 12;
    pub const REMOVE: u8 = 13;
    pub const MKDIR: u8 = 14;
    pub const RMDIR: u8 = 15;
    pub const REALPATH: u8 = 16;
    pub const STAT: u8 = 17;
    pub const RENAME: u8 = 18;
    pub const READLINK: u8 = 19;
    pub const SYMLINK: u8 = 20;
    pub const STATUS: u8 = 101;
    pub const HANDLE: u8 = 102;
    pub const DATA: u8 = 103;
    pub const NAME: u8 = 104;
    pub const ATTRS: u8 = 105;
    pub const EXTENDED: u8 = 200;
    pub const EXTENDED_REPLY: u8 = 201;
}

/// The name of a request packet type (for counts of what crossed the wire).
pub fn request_type_name(typ: u8) -> Option<&'static str> {
    Some(match typ {
        msg::INIT => "INIT",
        msg::OPEN => "OPEN",
        msg::CLOSE => "CLOSE",
        msg::READ => "READ",
        msg::WRITE => "WRITE",
        msg::LSTAT => "LSTAT",
        msg::FSTAT => "FSTAT",
        msg::SETSTAT => "SETSTAT",
        msg::FSETSTAT => "FSETSTAT",
        msg::OPENDIR => "OPENDIR",
        msg::READDIR => "READDIR",
        msg::REMOVE => "REMOVE",
        msg::MKDIR => "MKDIR",
        msg::RMDIR => "RMDIR",
        msg::REALPATH => "REALPATH",
        msg::STAT => "STAT",
        msg::RENAME => "RENAME",
        msg::READLINK => "READLINK",
        msg::SYMLINK => "SYMLINK",
        msg::EXTENDED => "EXTENDED",
        _ => return None,
    })
}

/// SSH_FXF_* open flags.
pub mod pflags {
    pub const READ: u32 = 0x01;
    pub const WRITE: u32 = 0x02;
    pub const APPEND: u32 = 0x04;
    pub const CREAT: u32 = 0x08;
    pub const TRUNC: u32 = 0x10;
    pub const EXCL: u32 = 0x20;
}

/// SSH_FX_* status codes.
pub mod status {
    pub const OK: u32 = 0;
    pub const EOF: u32 = 1;
    pub const NO_SUCH_FILE: u32 = 2;
    pub const PERMISSION_DENIED: u32 = 3;
    pub const FAILURE: u32 = 4;
    pub const BAD_MESSAGE: u32 = 5;
    pub const NO_CONNECTION: u32 = 6;
    pub const CONNECTION_LOST: u32 = 7;
    pub const OP_UNSUPPORTED: u32 = 8;
}

const ATTR_SIZE: u32 = 0x1;
const ATTR_UIDGID: u32 = 0x2;
const ATTR_PERMISSIONS: u32 = 0x4;
const ATTR_ACMODTIME: u32 = 0x8;
const ATTR_EXTENDED: u32 = 0x8000_0000;

/// The largest packet we accept from a server: OpenSSH's own limit is
/// 256 KiB (its limits@openssh.com says so); a length beyond this is a
/// broken stream, not a big reply.
pub const MAX_PACKET: usize = 4 << 20;

/// File attributes as SFTP v3 carries them: every field optional, times in
/// whole seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub size: Option<u64>,
    pub uid_gid: Option<(u32, u32)>,
    /// st_mode, file type bits included (OpenSSH sends them).
    pub perm: Option<u32>,
    /// (atime, mtime), seconds since the epoch.
    pub times: Option<(u32, u32)>,
}

impl Attrs {
    fn flags(&self) -> u32 {
        let mut f = 0;
        if self.size.is_some() {
            f |= ATTR_SIZE;
        }
        if self.uid_gid.is_some() {
            f |= ATTR_UIDGID;
        }
        if self.perm.is_some() {
            f |= ATTR_PERMISSIONS;
        }
        if self.times.is_some() {
            f |= ATTR_ACMODTIME;
        }
        f
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.flags());
        if let Some(s) = self.size {
            put_u64(out, s);
        }
        if let Some((u, g)) = self.uid_gid {
            put_u32(out, u);
            put_u32(out, g);
        }
        if let Some(p) = self.perm {
            put_u32(out, p);
        }
        if let Some((a, m)) = self.times {
            put_u32(out, a);
            put_u32(out, m);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Attrs, WireError> {
        let flags = r.u32()?;
        let mut a = Attrs::default();
        if flags & ATTR_SIZE != 0 {
            a.size = Some(r.u64()?);
        }
        if flags & ATTR_UIDGID != 0 {
            a.uid_gid = Some((r.u32()?, r.u32()?));
        }
        if flags & ATTR_PERMISSIONS != 0 {
            a.perm = Some(r.u32()?);
        }
        if flags & ATTR_ACMODTIME != 0 {
            a.times = Some((r.u32()?, r.u32()?));
        }
        if flags & ATTR_EXTENDED != 0 {
            for _ in 0..r.u32()? {
                r.string()?;
                r.string()?;
            }
        }
        Ok(a)
    }
}

/// What statvfs@openssh.com answers (struct statvfs, field by field).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statvfs {
    pub bsize: u64,
    pub frsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub favail: u64,
    pub fsid: u64,
    pub flag: u64,
    pub namemax: u64,
}

/// What limits@openssh.com answers; 0 means "no limit stated".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_packet: u64,
    pub max_read: u64,
    pub max_write: u64,
    pub max_open_handles: u64,
}

/// A request, borrowing what it sends.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    Open {
        path: &'a [u8],
        pflags: u32,
        attrs: Attrs,
    },
    Close {
        handle: &'a [u8],
    },
    Read {
        handle: &'a [u8],
        offset: u64,
        len: u32,
    },
    Write {
        handle: &'a [u8],
        offset: u64,
        data: &'a [u8],
    },
    Lstat {
        path: &'a [u8],
    },
    Stat {
        path: &'a [u8],
    },
    Fstat {
        handle: &'a [u8],
    },
    Setstat {
        path: &'a [u8],
        attrs: Attrs,
    },
    Fsetstat {
        handle: &'a [u8],
        attrs: Attrs,
    },
    Opendir {
        path: &'a [u8],
    },
    Readdir {
        handle: &'a [u8],
    },
    Remove {
        path: &'a [u8],
    },
    Mkdir {
        path: &'a [u8],
        attrs: Attrs,
    },
    Rmdir {
        path: &'a [u8],
    },
    Realpath {
        path: &'a [u8],
    },
    /// SFTP v3 rename: fails if `to` exists (OpenSSH links and unlinks, so
    /// it is also an atomic "rename unless the target exists").
    Rename {
        from: &'a [u8],
        to: &'a [u8],
    },
    Readlink {
        path: &'a [u8],
    },
    /// `openssh_order`: OpenSSH's server takes the target first, the
    /// reverse of the draft (its PROTOCOL file, "sftp: Reversal of
    /// arguments to SSH_FXP_SYMLINK"), and most servers copied it.
    Symlink {
        link: &'a [u8],
        target: &'a [u8],
        openssh_order: bool,
    },
    /// posix-rename@openssh.com: rename(2), replacing `to`.
    PosixRename {
        from: &'a [u8],
        to: &'a [u8],
    },
    /// statvfs@openssh.com.
    Statvfs {
        path: &'a [u8],
    },
    /// hardlink@openssh.com.
    Hardlink {
        existing: &'a [u8],
        new: &'a [u8],
    },
    /// fsync@openssh.com.
    Fsync {
        handle: &'a [u8],
    },
    /// lsetstat@openssh.com: setstat that does not follow a last symlink.
    Lsetstat {
        path: &'a [u8],
        attrs: Attrs,
    },
    /// limits@openssh.com.
    Limits,
    /// copy-data: server-side copy between two open handles.
    CopyData {
        from: &'a [u8],
        from_offset: u64,
        len: u64,
        to: &'a [u8],
        to_offset: u64,
    },
}

impl Request<'_> {
    /// The request's name, for logs and statistics.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Open { .. } => "OPEN",
            Request::Close { .. } => "CLOSE",
            Request::Read { .. } => "READ",
            Request::Write { .. } => "WRITE",
            Request::Lstat { .. } => "LSTAT",
            Request::Stat { .. } => "STAT",
            Request::Fstat { .. } => "FSTAT",
            Request::Setstat { .. } => "SETSTAT",
            Request::Fsetstat { .. } => "FSETSTAT",
            Request::Opendir { .. } => "OPENDIR",
            Request::Readdir { .. } => "READDIR",
            Request::Remove { .. } => "REMOVE",
            Request::Mkdir { .. } => "MKDIR",
            Request::Rmdir { .. } => "RMDIR",
            Request::Realpath { .. } => "REALPATH",
            Request::Rename { .. } => "RENAME",
            Request::Readlink { .. } => "READLINK",
            Request::Symlink { .. } => "SYMLINK",
            Request::PosixRename { .. } => "posix-rename",
            Request::Statvfs { .. } => "statvfs",
            Request::Hardlink { .. } => "hardlink",
            Request::Fsync { .. } => "fsync",
            Request::Lsetstat { .. } => "lsetstat",
            Request::Limits => "limits",
            Request::CopyData { .. } => "copy-data",
        }
    }

    /// Append the whole packet, length first, to `out`.
    pub fn encode(&self, id: u32, out: &mut Vec<u8>) {
        let start = out.len();
        put_u32(out, 0); // length, filled in below
        let (typ, ext) = self.kind();
        out.push(typ);
        put_u32(out, id);
        if let Some(name) = ext {
            put_str(out, name.as_bytes());
        }
        match *self {
            Request::Open {
                path,
                pflags,
                attrs,
            } => {
                put_str(out, path);
                put_u32(out, pflags);
                attrs.encode(out);
            }
            Request::Close { handle }
            | Request::Fstat { handle }
            | Request::Readdir { handle }
            | Request::Fsync { handle } => put_str(out, handle),
            Request::Read {
                handle,
                offset,
                len,
            } => {
                put_str(out, handle);
                put_u64(out, offset);
                put_u32(out, len);
            }
            Request::Write {
                handle,
                offset,
                data,
            } => {
                put_str(out, handle);
                put_u64(out, offset);
                put_str(out, data);
            }
            Request::Lstat { path }
            | Request::Stat { path }
            | Request::Opendir { path }
            | Request::Remove { path }
            | Request::Rmdir { path }
            | Request::Realpath { path }
            | Request::Readlink { path }
            | Request::Statvfs { path } => put_str(out, path),
            Request::Setstat { path, attrs }
            | Request::Mkdir { path, attrs }
            | Request::Lsetstat { path, attrs } => {
                put_str(out, path);
                attrs.encode(out);
            }
            Request::Fsetstat { handle, attrs } => {
                put_str(out, handle);
                attrs.encode(out);
            }
            Request::Rename { from, to } | Request::PosixRename { from, to } => {
                put_str(out, from);
                put_str(out, to);
            }
            Request::Hardlink { existing, new } => {
                put_str(out, existing);
                put_str(out, new);
            }
            Request::Symlink {
                link,
                target,
                openssh_order,
            } => {
                let (first, second) = if openssh_order {
                    (target, link)
                } else {
                    (link, target)
                };
                put_str(out, first);
                put_str(out, second);
            }
            Request::Limits => {}
            Request::CopyData {
                from,
                from_offset,
                len,
                to,
                to_offset,
            } => {
                put_str(out, from);
                put_u64(out, from_offset);
                put_u64(out, len);
                put_str(out, to);
                put_u64(out, to_offset);
            }
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// The packet type, and the extension name for EXTENDED requests.
    fn kind(&self) -> (u8, Option<&'static str>) {
        match self {
            Request::Open { .. } => (msg::OPEN, None),
            Request::Close { .. } => (msg::CLOSE, None),
            Request::Read { .. } => (msg::READ, None),
            Request::Write { .. } => (msg::WRITE, None),
            Request::Lstat { .. } => (msg::LSTAT, None),
            Request::Stat { .. } => (msg::STAT, None),
            Request::Fstat { .. } => (msg::FSTAT, None),
            Request::Setstat { .. } => (msg::SETSTAT, None),
            Request::Fsetstat { .. } => (msg::FSETSTAT, None),
            Request::Opendir { .. } => (msg::OPENDIR, None),
            Request::Readdir { .. } => (msg::READDIR, None),
            Request::Remove { .. } => (msg::REMOVE, None),
            Request::Mkdir { .. } => (msg::MKDIR, None),
            Request::Rmdir { .. } => (msg::RMDIR, None),
            Request::Realpath { .. } => (msg::REALPATH, None),
            Request::Rename { .. } => (msg::RENAME, None),
            Request::Readlink { .. } => (msg::READLINK, None),
            Request::Symlink { .. } => (msg::SYMLINK, None),
            Request::PosixRename { .. } => (msg::EXTENDED, Some(ext::POSIX_RENAME)),
            Request::Statvfs { .. } => (msg::EXTENDED, Some(ext::STATVFS)),
            Request::Hardlink { .. } => (msg::EXTENDED, Some(ext::HARDLINK)),
            Request::Fsync { .. } => (msg::EXTENDED, Some(ext::FSYNC)),
            Request::Lsetstat { .. } => (msg::EXTENDED, Some(ext::LSETSTAT)),
            Request::Limits => (msg::EXTENDED, Some(ext::LIMITS)),
            Request::CopyData { .. } => (msg::EXTENDED, Some(ext::COPY_DATA)),
        }
    }

    /// The extension this request needs the server to have announced.
    pub fn extension(&self) -> Option<&'static str> {
        self.kind().1
    }

    /// The packet type it goes out as (EXTENDED for an extension).
    pub fn packet_type(&self) -> u8 {
        self.kind().0
    }
}

/// Extension names as servers announce them in VERSION.
pub mod ext {
    pub const POSIX_RENAME: &str = "posix-rename@openssh.com";
    pub const STATVFS: &str = "statvfs@openssh.com";
    pub const HARDLINK: &str = "hardlink@openssh.com";
    pub const FSYNC: &str = "fsync@openssh.com";
    pub const LSETSTAT: &str = "lsetstat@openssh.com";
    pub const LIMITS: &str = "limits@openssh.com";
    pub const COPY_DATA: &str = "copy-data";
}

/// The INIT packet: we speak version 3.
pub fn encode_init(out: &mut Vec<u8>) {
    put_u32(out, 5);
    out.push(msg::INIT);
    put_u32(out, 3);
}

/// The server's VERSION: its version and the extensions it announced.
#[derive(Clone, Debug, Default)]
pub struct Version {
    pub version: u32,
    pub extensions: Vec<(String, Vec<u8>)>,
}

impl Version {
    pub fn decode(body: &[u8]) -> Result<Version, WireError> {
        let mut r = Reader::new(body);
        if r.u8()? != msg::VERSION {
            return Err(WireError::Unexpected(
                "the server's first packet is not VERSION",
            ));
        }
        let version = r.u32()?;
        let mut extensions = Vec::new();
        while !r.is_empty() {
            let name = String::from_utf8_lossy(r.string()?).into_owned();
            let data = r.string()?.to_vec();
            extensions.push((name, data));
        }
        Ok(Version {
            version,
            extensions,
        })
    }

    pub fn has(&self, name: &str) -> bool {
        self.extensions.iter().any(|(n, _)| n == name)
    }
}

/// One entry of a NAME reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameEntry {
    pub name: Vec<u8>,
    pub attrs: Attrs,
}

/// A reply's body, by type.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Status { code: u32, message: String },
    Handle(Vec<u8>),
    Data(Vec<u8>),
    Name(Vec<NameEntry>),
    Attrs(Attrs),
    Extended(Vec<u8>),
}

impl Reply {
    /// What a trace shows of a reply: its type, and a status's code.
    pub fn summary(&self) -> String {
        match self {
            Reply::Status { code, message } => format!("STATUS {code} {message:?}"),
            Reply::Handle(_) => "HANDLE".into(),
            Reply::Data(d) => format!("DATA {} bytes", d.len()),
            Reply::Name(n) => format!("NAME {} entries", n.len()),
            Reply::Attrs(_) => "ATTRS".into(),
            Reply::Extended(b) => format!("EXTENDED_REPLY {} bytes", b.len()),
        }
    }

    /// Decode a reply packet's body (type byte first, length stripped):
    /// its id and the reply.
    pub fn decode(body: &[u8]) -> Result<(u32, Reply), WireError> {
        let mut r = Reader::new(body);
        let typ = r.u8()?;
        let id = r.u32()?;
        let reply = match typ {
            msg::STATUS => {
                let code = r.u32()?;
                // Version 3 servers may leave out message and language.
                let message = if r.is_empty() {
                    String::new()
                } else {
                    String::from_utf8_lossy(r.string()?).into_owned()
                };
                Reply::Status { code, message }
            }
            msg::HANDLE => Reply::Handle(r.string()?.to_vec()),
            msg::DATA => Reply::Data(r.string()?.to_vec()),
            msg::NAME => {
                let n = r.u32()?;
                // Each entry is at least 4 + 4 + 4 bytes: a count that
                // cannot fit is a broken packet, not a reason to allocate.
                if n as usize > r.remaining() / 12 {
                    return Err(WireError::Short);
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let name = r.string()?.to_vec();
                    r.string()?; // longname: ls -l text, not needed with attrs
                    let attrs = Attrs::decode(&mut r)?;
                    v.push(NameEntry { name, attrs });
                }
                Reply::Name(v)
            }
            msg::ATTRS => Reply::Attrs(Attrs::decode(&mut r)?),
            msg::EXTENDED_REPLY => Reply::Extended(r.rest().to_vec()),
            _ => return Err(WireError::UnknownType(typ)),
        };
        Ok((id, reply))
    }

    /// The body of a DATA reply arrives in its own buffer (see
    /// `Connection`): only its header is decoded here.
    pub fn data_header(head: &[u8]) -> Result<(u32, u32), WireError> {
        let mut r = Reader::new(head);
        if r.u8()? != msg::DATA {
            return Err(WireError::Unexpected("not a DATA reply"));
        }
        Ok((r.u32()?, r.u32()?))
    }
}

impl Statvfs {
    pub fn decode(body: &[u8]) -> Result<Statvfs, WireError> {
        let mut r = Reader::new(body);
        Ok(Statvfs {
            bsize: r.u64()?,
            frsize: r.u64()?,
            blocks: r.u64()?,
            bfree: r.u64()?,
            bavail: r.u64()?,
            files: r.u64()?,
            ffree: r.u64()?,
            favail: r.u64()?,
            fsid: r.u64()?,
            flag: r.u64()?,
            namemax: r.u64()?,
        })
    }
}

impl Limits {
    pub fn decode(body: &[u8]) -> Result<Limits, WireError> {
        let mut r = Reader::new(body);
        Ok(Limits {
            max_packet: r.u64()?,
            max_read: r.u64()?,
            max_write: r.u64()?,
            max_open_handles: r.u64()?,
        })
    }
}

/// A packet that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("a packet ends early")]
    Short,
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    #[error("{0}")]
    Unexpected(&'static str),
    #[error("a packet of {0} bytes is longer than any server sends")]
    TooLong(usize),
}

/// Reads big-endian fields from a packet, every length checked.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Short);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    pub fn string(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
}

pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s);
}

/// A status code's name, for messages.
pub struct StatusName(pub u32);

impl fmt::Display for StatusName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.0 {
            status::OK => "ok",
            status::EOF => "end of file",
            status::NO_SUCH_FILE => "no such file",
            status::PERMISSION_DENIED => "permission denied",
            status::FAILURE => "failure",
            status::BAD_MESSAGE => "bad message",
            status::NO_CONNECTION => "no connection",
            status::CONNECTION_LOST => "connection lost",
            status::OP_UNSUPPORTED => "operation unsupported",
            n => return write!(f, "status {n}"),
        };
        f.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_byte_exact() {
        let mut out = Vec::new();
        Request::Read {
            handle: b"h1",
            offset: 0x0102_0304_0506_0708,
            len: 65536,
        }
        .encode(7, &mut out);
        let want: Vec<u8> = [
            &[0, 0, 0, 23][..],
            &[msg::READ],
            &[0, 0, 0, 7],
            &[0, 0, 0, 2],
            b"h1",
            &[1, 2, 3, 4, 5, 6, 7, 8],
            &[0, 1, 0, 0],
        ]
        .concat();
        assert_eq!(out, want);

        out.clear();
        Request::Open {
            path: b"/a",
            pflags: pflags::READ | pflags::CREAT,
            attrs: Attrs {
                perm: Some(0o644),
                ..Default::default()
            },
        }
        .encode(1, &mut out);
        let want: Vec<u8> = [
            &[0, 0, 0, 23][..],
            &[msg::OPEN],
            &[0, 0, 0, 1],
            &[0, 0, 0, 2],
            b"/a",
            &[0, 0, 0, 9],
            &[0, 0, 0, 4],
            &0o644u32.to_be_bytes(),
        ]
        .concat();
        assert_eq!(out, want);
    }

    #[test]
    fn extensions_carry_their_names_and_symlink_order_follows_the_server() {
        let mut out = Vec::new();
        Request::Fsync { handle: b"h" }.encode(2, &mut out);
        let mut r = Reader::new(&out[4..]);
        assert_eq!(r.u8().unwrap(), msg::EXTENDED);
        assert_eq!(r.u32().unwrap(), 2);
        assert_eq!(r.string().unwrap(), ext::FSYNC.as_bytes());
        assert_eq!(r.string().unwrap(), b"h");
        assert!(r.is_empty());

        for (openssh_order, first) in [(true, b"target"), (false, b"link\0\0")] {
            out.clear();
            Request::Symlink {
                link: b"link",
                target: b"target",
                openssh_order,
            }
            .encode(3, &mut out);
            let mut r = Reader::new(&out[9..]);
            let got = r.string().unwrap();
            assert_eq!(got, &first[..got.len()]);
        }
    }

    #[test]
    fn replies_decode_and_short_ones_are_errors() {
        let mut body = vec![msg::NAME];
        put_u32(&mut body, 9);
        put_u32(&mut body, 1);
        put_str(&mut body, b"f\xff"); // not UTF-8: kept as bytes
        put_str(&mut body, b"-rw-r--r-- ...");
        Attrs {
            size: Some(5),
            uid_gid: Some((1, 2)),
            perm: Some(0o100644),
            times: Some((10, 20)),
        }
        .encode(&mut body);
        let (id, reply) = Reply::decode(&body).unwrap();
        assert_eq!(id, 9);
        let Reply::Name(v) = reply else {
            panic!("not NAME")
        };
        assert_eq!(v[0].name, b"f\xff");
        assert_eq!(v[0].attrs.times, Some((10, 20)));
        for n in 0..body.len() {
            assert!(Reply::decode(&body[..n]).is_err(), "{n} bytes decoded");
        }
        // A count far beyond what the packet holds is refused up front.
        let mut bad = vec![msg::NAME];
        put_u32(&mut bad, 1);
        put_u32(&mut bad, u32::MAX);
        assert_eq!(Reply::decode(&bad).unwrap_err(), WireError::Short);
        // Status without message or language (some v3 servers).
        let mut st = vec![msg::STATUS];
        put_u32(&mut st, 4);
        put_u32(&mut st, status::EOF);
        assert_eq!(
            Reply::decode(&st).unwrap(),
            (
                4,
                Reply::Status {
                    code: status::EOF,
                    message: String::new()
                }
            )
        );
    }
}
