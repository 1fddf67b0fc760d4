//! Building replies.
//!
//! A reply is a 16-byte header plus at most two borrowed parts (a fixed
//! struct and variable data), handed to the transport as one gather write:
//! nothing is copied or allocated on the way out.

use std::io;

use fusebox_abi as abi;
use zerocopy::IntoBytes;

use crate::error::Errno;

/// Where replies go: the transport's side of the parse contract.
pub trait ReplySink {
    /// Send one message made of `parts` laid end to end. The out header
    /// (the first part) may count more bytes than the parts hold: the rest
    /// is already in place in the transport's buffer ([`Body::in_place`]);
    /// only a transport that lends its buffers gets such replies.
    fn send(&self, parts: &[&[u8]]) -> io::Result<()>;
}

/// A reply on /dev/fuse is one `writev` on the fd its request came from.
impl ReplySink for crate::device::DevChannel {
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        self.write_message(parts)
    }
}

/// The body of a successful reply: up to two byte slices, or data the
/// transport's buffer already holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Body<'a> {
    /// The opcode's fixed reply struct as bytes; empty for none.
    pub fixed: &'a [u8],
    /// Variable data after it (file data, names, directory entries).
    pub data: &'a [u8],
    /// Bytes of the body already in place in the transport's reply buffer
    /// (io_uring payload), after `fixed` and `data`: counted in the
    /// header's length, not sent as a part.
    pub in_place: usize,
}

impl<'a> Body<'a> {
    /// Success with nothing after the header.
    pub const EMPTY: Body<'static> = Body {
        fixed: &[],
        data: &[],
        in_place: 0,
    };
    /// A body of one fixed reply struct.
    pub fn fixed<T: IntoBytes + zerocopy::Immutable>(v: &'a T) -> Body<'a> {
        Body {
            fixed: v.as_bytes(),
            data: &[],
            in_place: 0,
        }
    }
    /// A body of variable data alone.
    pub fn data(d: &'a [u8]) -> Body<'a> {
        Body {
            fixed: &[],
            data: d,
            in_place: 0,
        }
    }
    /// A body of `n` bytes the transport's reply buffer already holds.
    pub fn in_place(n: usize) -> Body<'static> {
        Body {
            fixed: &[],
            data: &[],
            in_place: n,
        }
    }
    /// Bytes the header counts for the body, in-place ones included.
    pub fn len(&self) -> usize {
        self.fixed.len() + self.data.len() + self.in_place
    }
    /// True for a body of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const OUT_HEADER_LEN: usize = size_of::<abi::OutHeader>();

/// Send the answer to request `unique`.
pub fn send_reply(
    sink: &dyn ReplySink,
    unique: u64,
    result: Result<Body<'_>, Errno>,
) -> io::Result<()> {
    match result {
        Ok(body) => {
            let header = abi::OutHeader {
                len: (OUT_HEADER_LEN + body.len()) as u32,
                error: 0,
                unique,
            };
            sink.send(&[header.as_bytes(), body.fixed, body.data])
        }
        Err(e) => send_error(sink, unique, e),
    }
}

/// Answer request `unique` with `e`. Values the kernel refuses (outside
/// 1..=511) go out as EIO, so a filesystem's bad errno cannot break the
/// connection.
pub fn send_error(sink: &dyn ReplySink, unique: u64, e: Errno) -> io::Result<()> {
    // The kernel accepts only errors in 1..=511 (and rejects 0 with data); clamp
    // anything else to EIO so a buggy filesystem cannot break the protocol.
    let errno = if (1..512).contains(&e.0) {
        e.0
    } else {
        libc::EIO
    };
    let header = abi::OutHeader {
        len: OUT_HEADER_LEN as u32,
        error: -errno,
        unique,
    };
    sink.send(&[header.as_bytes()])
}

/// Where variable-length reply data (READ, READLINK, xattrs, READDIR) is
/// written. Each worker owns one that keeps its capacity between requests,
/// so steady-state requests allocate nothing. The io_uring transport lends
/// one over the ring entry's own payload buffer instead, for replies that
/// are data alone: a READ is then read straight into the buffer the kernel
/// copies the answer from, with no copy in between.
#[derive(Debug)]
pub struct DataOut<'a> {
    store: Store<'a>,
    limit: usize,
}

/// A [`DataOut`] after [`DataOut::detach`].
#[derive(Debug)]
pub enum Detached {
    /// The reply's bytes, this many, are in the lent buffer.
    InPlace(usize),
    /// The data outgrew the lent buffer and moved into a vector of its own.
    Spilled(DataOut<'static>),
}

#[derive(Debug)]
enum Store<'a> {
    Own(Vec<u8>),
    /// `len` bytes of `buf` written so far.
    Lent {
        buf: &'a mut [u8],
        len: usize,
    },
}

impl Default for DataOut<'_> {
    fn default() -> Self {
        DataOut::with_capacity(0)
    }
}

impl<'a> DataOut<'a> {
    /// An owned buffer with room for `cap` bytes, the reply limit too.
    pub fn with_capacity(cap: usize) -> DataOut<'static> {
        DataOut {
            store: Store::Own(Vec::with_capacity(cap)),
            limit: cap,
        }
    }

    /// Reply data written in place into `buf`, for a request that accepts
    /// at most `limit` bytes. Writing past the end of `buf` moves what was
    /// written into a vector of its own (the reply is then copied as usual).
    pub fn lent(buf: &'a mut [u8], limit: usize) -> DataOut<'a> {
        DataOut {
            store: Store::Lent { buf, len: 0 },
            limit,
        }
    }

    /// How many bytes, written in place into a lent buffer, form the reply;
    /// `None` when the data is not (or no longer) in the lent buffer.
    pub fn in_place(&self) -> Option<usize> {
        match &self.store {
            Store::Lent { len, .. } => Some((*len).min(self.limit)),
            Store::Own(_) => None,
        }
    }

    /// Let go of a lent buffer: how many bytes of the reply are in place
    /// there, or the data itself if it had to move out.
    pub fn detach(self) -> Detached {
        match self.store {
            Store::Lent { len, .. } => Detached::InPlace(len.min(self.limit)),
            Store::Own(v) => Detached::Spilled(DataOut {
                store: Store::Own(v),
                limit: self.limit,
            }),
        }
    }

    /// Empty the buffer for a request that accepts at most `limit` bytes.
    pub fn reset(&mut self, limit: usize) {
        match &mut self.store {
            Store::Own(v) => v.clear(),
            Store::Lent { len, .. } => *len = 0,
        }
        self.limit = limit;
    }

    /// Change how many bytes the reply may carry (a later answer built
    /// before its request's limit was applied).
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The most bytes the kernel accepts in this reply.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Room left before [`DataOut::limit`].
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.len())
    }

    /// Room for `n` more bytes: a lent buffer too small gives way to an
    /// owned vector holding what was written.
    fn make_room(&mut self, n: usize) {
        if let Store::Lent { buf, len } = &self.store {
            if len + n > buf.len() {
                let mut v = Vec::with_capacity((len + n).max(self.limit));
                v.extend_from_slice(&buf[..*len]);
                self.store = Store::Own(v);
            }
        }
    }

    /// Append `b`; a lent buffer too small gives way to an owned vector.
    pub fn extend_from_slice(&mut self, b: &[u8]) {
        self.make_room(b.len());
        match &mut self.store {
            Store::Own(v) => v.extend_from_slice(b),
            Store::Lent { buf, len } => {
                buf[*len..*len + b.len()].copy_from_slice(b);
                *len += b.len();
            }
        }
    }

    /// Append `n` zero bytes (holes of a sparse file).
    pub fn extend_zeroed(&mut self, n: usize) {
        self.make_room(n);
        match &mut self.store {
            Store::Own(v) => v.resize(v.len() + n, 0),
            Store::Lent { buf, len } => {
                buf[*len..*len + n].fill(0);
                *len += n;
            }
        }
    }

    /// Append up to `n` bytes that `fill` writes into the slice it gets
    /// (zeroed first in an owned buffer); it returns how many it wrote, and
    /// on error nothing is appended.
    pub fn fill_with<E>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.make_room(n);
        match &mut self.store {
            Store::Own(v) => {
                let start = v.len();
                v.resize(start + n, 0);
                let r = fill(&mut v[start..]);
                v.truncate(start + r.as_ref().map_or(0, |&k| k.min(n)));
                r
            }
            Store::Lent { buf, len } => {
                let r = fill(&mut buf[*len..*len + n]);
                if let Ok(k) = &r {
                    *len += (*k).min(n);
                }
                r
            }
        }
    }

    /// Append up to `len` bytes read from `fd` at `offset` (no zero-fill);
    /// returns how many arrived (fewer at end of file).
    pub fn pread(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<usize> {
        let len = len.min(self.remaining());
        self.make_room(len);
        match &mut self.store {
            Store::Own(v) => crate::sys::pread_append(fd, v, len, offset),
            Store::Lent { buf, len: used } => {
                let n = rustix::io::pread(fd, &mut buf[*used..*used + len], offset)?;
                *used += n;
                Ok(n)
            }
        }
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        match &self.store {
            Store::Own(v) => v,
            Store::Lent { buf, len } => &buf[..*len],
        }
    }

    /// How many bytes are written so far.
    pub fn len(&self) -> usize {
        match &self.store {
            Store::Own(v) => v.len(),
            Store::Lent { len, .. } => *len,
        }
    }

    /// True until something is written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop everything past the first `n` bytes.
    pub fn truncate(&mut self, n: usize) {
        match &mut self.store {
            Store::Own(v) => v.truncate(n),
            Store::Lent { len, .. } => *len = (*len).min(n),
        }
    }

    /// What goes on the wire: never more than the kernel asked for.
    pub(crate) fn wire(&self) -> &[u8] {
        let s = self.as_slice();
        &s[..s.len().min(self.limit)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_takes_data_in_place_until_it_is_full() {
        let mut backing = [0xffu8; 8];
        let mut out = DataOut::lent(&mut backing, 8);
        out.extend_from_slice(b"abc");
        out.extend_zeroed(2);
        assert_eq!(
            out.fill_with(2, |b| {
                b.copy_from_slice(b"xy");
                Ok::<_, ()>(2)
            }),
            Ok(2)
        );
        assert_eq!(out.in_place(), Some(7));
        assert_eq!(out.as_slice(), b"abc\0\0xy");
        // Past the end: moved to a vector of its own, nothing lost.
        out.extend_from_slice(b"0123");
        assert_eq!(out.in_place(), None);
        assert_eq!(out.as_slice(), b"abc\0\0xy0123");
        assert_eq!(out.wire(), b"abc\0\0xy0");
        drop(out);
        assert_eq!(&backing[..7], b"abc\0\0xy");
    }

    #[test]
    fn a_failed_fill_appends_nothing() {
        let mut out = DataOut::with_capacity(16);
        out.extend_from_slice(b"ab");
        assert_eq!(out.fill_with(4, |_| Err::<usize, _>("no")), Err("no"));
        assert_eq!(out.as_slice(), b"ab");
        let mut backing = [0u8; 8];
        let mut lent = DataOut::lent(&mut backing, 8);
        assert!(lent.fill_with(4, |_| Err::<usize, _>(())).is_err());
        assert_eq!(lent.in_place(), Some(0));
    }
}
