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
    /// Send one message made of `parts` laid end to end.
    fn send(&self, parts: &[&[u8]]) -> io::Result<()>;
}

/// The body of a successful reply: up to two byte slices.
#[derive(Clone, Copy, Debug, Default)]
pub struct Body<'a> {
    pub fixed: &'a [u8],
    pub data: &'a [u8],
}

impl<'a> Body<'a> {
    pub const EMPTY: Body<'static> = Body {
        fixed: &[],
        data: &[],
    };
    pub fn fixed<T: IntoBytes + zerocopy::Immutable>(v: &'a T) -> Body<'a> {
        Body {
            fixed: v.as_bytes(),
            data: &[],
        }
    }
    pub fn data(d: &'a [u8]) -> Body<'a> {
        Body {
            fixed: &[],
            data: d,
        }
    }
    pub fn len(&self) -> usize {
        self.fixed.len() + self.data.len()
    }
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

/// A reusable buffer for variable-length reply data (READ, READLINK, xattrs,
/// READDIR). Each worker owns one; it keeps its capacity between requests so
/// steady-state requests allocate nothing.
#[derive(Debug, Default)]
pub struct DataOut {
    buf: Vec<u8>,
    limit: usize,
}

impl DataOut {
    pub fn with_capacity(cap: usize) -> DataOut {
        DataOut {
            buf: Vec::with_capacity(cap),
            limit: cap,
        }
    }

    /// Empty the buffer for a request that accepts at most `limit` bytes.
    pub fn reset(&mut self, limit: usize) {
        self.buf.clear();
        self.limit = limit;
    }

    /// The most bytes the kernel accepts in this reply.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Room left before [`DataOut::limit`].
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.buf.len())
    }

    pub fn extend_from_slice(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// The underlying vector, e.g. to `pread` into its spare capacity with
    /// `rustix::buffer::spare_capacity`.
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
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
        crate::sys::pread_append(fd, &mut self.buf, len, offset)
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// What goes on the wire: never more than the kernel asked for.
    pub(crate) fn wire(&self) -> &[u8] {
        &self.buf[..self.buf.len().min(self.limit)]
    }
}
