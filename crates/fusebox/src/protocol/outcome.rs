//! The reply vocabulary: what a filesystem call answered ([`Outcome`]),
//! before it is put on the wire, and the one function that puts it there
//! for answers given at once and later alike. It names the kernel's reply
//! structs only: which request takes which answer is the opcode table's
//! business (`fits`).

use fusebox_abi as abi;
use fusebox_abi::Opcode;
use zerocopy::IntoBytes;

use super::opcodes::Answer;
use super::reply::{send_error, send_reply, Body, DataOut, ReplySink};
use crate::error::Errno;
use crate::types::{AttrReply, Entry, Opened};

/// A successful reply, before it is put on the wire. Small structs are held
/// by value; variable data stays in the worker's [`DataOut`].
pub(crate) enum Outcome {
    NoReply,
    /// A reply token was taken; it answers.
    Later,
    Empty,
    Entry(abi::EntryOut),
    Attr(abi::AttrOut),
    Open(abi::OpenOut),
    Create(abi::EntryOut, abi::OpenOut),
    Write(abi::WriteOut),
    Statfs(abi::StatfsOut),
    Data,
    XattrSize(abi::GetxattrOut),
    Lk(abi::LkOut),
    Bmap(abi::BmapOut),
    Ioctl(abi::IoctlOut),
    Poll(abi::PollOut),
    Lseek(abi::LseekOut),
    CopyRange64(abi::CopyFileRangeOut),
    Statx(Box<abi::StatxOut>),
}

pub(crate) fn entry_out(e: Entry) -> Outcome {
    Outcome::Entry(e.to_abi())
}

impl Outcome {
    /// The kind of answer this is, in the opcode table's terms; None for
    /// the two that are not answers on the wire (none, later).
    pub(crate) fn answer(&self) -> Option<Answer> {
        Some(match self {
            Outcome::NoReply | Outcome::Later => return None,
            Outcome::Empty => Answer::Empty,
            Outcome::Entry(_) => Answer::Entry,
            Outcome::Attr(_) => Answer::Attr,
            Outcome::Open(_) => Answer::Open,
            Outcome::Create(..) => Answer::Create,
            Outcome::Write(_) => Answer::Written,
            Outcome::Statfs(_) => Answer::Statfs,
            Outcome::Data | Outcome::XattrSize(_) => Answer::Data,
            Outcome::Lk(_) => Answer::Lock,
            Outcome::Bmap(_) => Answer::Bmap,
            Outcome::Ioctl(_) => Answer::Ioctl,
            Outcome::Poll(_) => Answer::Poll,
            Outcome::Lseek(_) => Answer::Offset,
            Outcome::CopyRange64(_) => Answer::Copied64,
            Outcome::Statx(_) => Answer::Statx,
        })
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Outcome::NoReply => "none",
            Outcome::Later => "later",
            Outcome::Empty => "ok",
            Outcome::Entry(_) => "entry",
            Outcome::Attr(_) => "attr",
            Outcome::Open(_) => "opened",
            Outcome::Create(..) => "created",
            Outcome::Write(_) => "written",
            Outcome::Statfs(_) => "statfs",
            Outcome::Data => "data",
            Outcome::XattrSize(_) => "data",
            Outcome::Lk(_) => "lock",
            Outcome::Bmap(_) => "bmap",
            Outcome::Ioctl(_) => "ioctl",
            Outcome::Poll(_) => "poll",
            Outcome::Lseek(_) => "offset",
            Outcome::CopyRange64(_) => "copied",
            Outcome::Statx(_) => "statx",
        }
    }
}

/// Whether `o` is an answer `opcode` can take (checked for answers given
/// later, where the compiler cannot tie the answer to the request).
pub(crate) fn fits(opcode: Opcode, o: &Outcome) -> bool {
    let expected = super::opcodes::facts(opcode).answer;
    match o.answer() {
        Some(given) => given == expected,
        None => false,
    }
}

pub(crate) fn statfs_out(s: crate::types::Statfs) -> Outcome {
    Outcome::Statfs(abi::StatfsOut { st: s.to_abi() })
}

pub(crate) fn lk_out(i: crate::types::LockInfo) -> Outcome {
    Outcome::Lk(abi::LkOut {
        lk: abi::FileLock {
            start: i.start,
            end: i.end,
            typ: i.typ as u32,
            pid: i.pid,
        },
    })
}

pub(crate) fn copy_out(n: u64, wide: bool) -> Outcome {
    if wide {
        Outcome::CopyRange64(abi::CopyFileRangeOut { bytes_copied: n })
    } else {
        Outcome::Write(abi::WriteOut {
            size: n.min(u32::MAX as u64) as u32,
            padding: 0,
        })
    }
}

pub(crate) fn statx_out(stat: abi::Statx, ttl: std::time::Duration) -> Outcome {
    Outcome::Statx(Box::new(abi::StatxOut {
        attr_valid: ttl.as_secs(),
        attr_valid_nsec: ttl.subsec_nanos(),
        flags: 0,
        spare: [0; 2],
        stat,
    }))
}

pub(crate) fn attr_out(a: AttrReply) -> Outcome {
    Outcome::Attr(abi::AttrOut {
        attr_valid: a.ttl.as_secs(),
        attr_valid_nsec: a.ttl.subsec_nanos(),
        dummy: 0,
        attr: a.attr.to_abi(),
    })
}

pub(crate) fn open_out(o: Opened) -> abi::OpenOut {
    abi::OpenOut {
        fh: o.fh.0,
        open_flags: o.flags,
        backing_id: o.backing_id,
    }
}

/// Where a reply's variable data is.
#[derive(Clone, Copy)]
pub enum ReplyData<'a> {
    /// In a [`DataOut`] (the worker's, or one a transport lent that had to
    /// move into a vector of its own).
    Buffer(&'a DataOut<'a>),
    /// Already in the transport's reply buffer, this many bytes, where the
    /// reply's body starts ([`DataOut::in_place`]).
    InPlace(usize),
}

/// Xattr replies: a size probe gets the size, a short buffer ERANGE.
pub(crate) fn xattr_reply(requested: u32, out: &DataOut) -> Result<Outcome, Errno> {
    if requested == 0 {
        Ok(Outcome::XattrSize(abi::GetxattrOut {
            size: out.len() as u32,
            padding: 0,
        }))
    } else if out.len() > requested as usize {
        Err(Errno::ERANGE)
    } else {
        Ok(Outcome::Data)
    }
}

/// Put an outcome on the wire (answers given at once and later alike).
pub(crate) fn send_outcome(
    unique: u64,
    result: Result<Outcome, Errno>,
    data: ReplyData<'_>,
    sink: &dyn ReplySink,
) -> std::io::Result<()> {
    let wire = match data {
        ReplyData::Buffer(d) => d.wire(),
        ReplyData::InPlace(_) => &[],
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return send_error(sink, unique, e),
    };
    let body = match &outcome {
        Outcome::NoReply | Outcome::Later => return Ok(()),
        Outcome::Empty => Body::EMPTY,
        Outcome::Entry(e) => Body::fixed(e),
        Outcome::Attr(a) => Body::fixed(a),
        Outcome::Open(o) => Body::fixed(o),
        Outcome::Create(e, o) => Body {
            fixed: e.as_bytes(),
            data: o.as_bytes(),
            in_place: 0,
        },
        Outcome::Write(o) => Body::fixed(o),
        Outcome::Statfs(s) => Body::fixed(s),
        Outcome::Data => match data {
            ReplyData::Buffer(_) => Body::data(wire),
            ReplyData::InPlace(n) => Body::in_place(n),
        },
        Outcome::XattrSize(s) => Body::fixed(s),
        Outcome::Lk(l) => Body::fixed(l),
        Outcome::Bmap(b) => Body::fixed(b),
        Outcome::Ioctl(i) => Body {
            fixed: i.as_bytes(),
            data: wire,
            in_place: 0,
        },
        Outcome::Poll(p) => Body::fixed(p),
        Outcome::Lseek(l) => Body::fixed(l),
        Outcome::CopyRange64(c) => Body::fixed(c),
        Outcome::Statx(s) => Body::fixed(s.as_ref()),
    };
    send_reply(sink, unique, Ok(body))
}
