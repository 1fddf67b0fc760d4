//! The driver API: what a block device written in user space implements.
//!
//! Offsets and lengths a driver sees are whole logical blocks inside the
//! device (the serving layer checks before calling). A read-only driver is
//! a [`Geometry`] and a [`BlockDriver::read`]; everything else has a
//! default that refuses, and [`Capabilities`] tells the serving layer (and
//! through it the loop device) what to offer.

use fusebox::{Errno, ReplyToken};

/// The shape of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes; a multiple of `logical_block_size`.
    pub size: u64,
    /// The unit of addressing: 512 or 4096 (a power of two, 512..=4096,
    /// as the loop device accepts).
    pub logical_block_size: u32,
    /// The unit the medium writes without read-modify-write (≥ logical).
    pub physical_block_size: u32,
}

impl Geometry {
    pub fn new(size: u64, logical_block_size: u32) -> Geometry {
        Geometry {
            size,
            logical_block_size,
            physical_block_size: logical_block_size,
        }
    }

    /// Why this geometry cannot be served, if it cannot.
    pub fn check(&self) -> Result<(), BlkError> {
        let lbs = self.logical_block_size;
        if !(512..=4096).contains(&lbs) || !lbs.is_power_of_two() {
            return Err(BlkError::Invalid(format!(
                "logical block size {lbs} is not a power of two from 512 to 4096"
            )));
        }
        if self.physical_block_size < lbs || !self.physical_block_size.is_power_of_two() {
            return Err(BlkError::Invalid(format!(
                "physical block size {} is not a power of two at least the logical block size {lbs}",
                self.physical_block_size
            )));
        }
        if self.size == 0 || !self.size.is_multiple_of(u64::from(lbs)) {
            return Err(BlkError::Invalid(format!(
                "size {} is not a positive multiple of the block size {lbs}",
                self.size
            )));
        }
        Ok(())
    }
}

/// What a driver supports beyond reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub write: bool,
    /// Writes are volatile until `flush` (a write cache): the device
    /// advertises one and forwards flushes. Without it `flush` is not
    /// called.
    pub flush: bool,
    /// Discard: `trim` frees the range (reads after it may return zeros
    /// or the old data: say `trim_zeroes` if zeros).
    pub trim: bool,
    /// Reads of a trimmed range return zeros.
    pub trim_zeroes: bool,
    /// `write_zeroes` is cheaper than writing zeros (else the serving
    /// layer writes zero blocks itself).
    pub write_zeroes: bool,
    /// The driver answers through `submit_read`/`submit_write`, later and
    /// from any thread, so many requests can be in flight at once.
    pub answers_later: bool,
}

impl Capabilities {
    pub const READ_ONLY: Capabilities = Capabilities {
        write: false,
        flush: false,
        trim: false,
        trim_zeroes: false,
        write_zeroes: false,
        answers_later: false,
    };
}

#[derive(Debug, thiserror::Error)]
pub enum BlkError {
    /// The medium failed: the application sees EIO for this request.
    #[error("I/O error: {0}")]
    Io(String),
    #[error("not supported by this driver")]
    Unsupported,
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("no space left")]
    NoSpace,
    #[error(transparent)]
    Os(#[from] std::io::Error),
}

impl BlkError {
    /// The errno the request fails with. A loop device turns every error
    /// into EIO for its own caller; the errno still shows in `fusebox stats`.
    pub fn errno(&self) -> Errno {
        match self {
            BlkError::Io(_) => Errno::EIO,
            BlkError::Unsupported => Errno::EOPNOTSUPP,
            BlkError::Invalid(_) => Errno::EINVAL,
            BlkError::NoSpace => Errno::ENOSPC,
            BlkError::Os(e) => e.raw_os_error().map_or(Errno::EIO, Errno),
        }
    }
}

/// A block device driver. Methods are called from several serving
/// threads at once.
pub trait BlockDriver: Send + Sync + 'static {
    fn geometry(&self) -> Geometry;

    fn capabilities(&self) -> Capabilities {
        Capabilities::READ_ONLY
    }

    /// Fill `buf` from `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError>;

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        let _ = (offset, data);
        Err(BlkError::Unsupported)
    }

    /// Make every completed write durable.
    fn flush(&self) -> Result<(), BlkError> {
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        let _ = (offset, len);
        Err(BlkError::Unsupported)
    }

    /// Make the range read as zeros. By default: zero blocks written
    /// through `write`, 64 KiB at a time.
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        let zeros = vec![0u8; len.min(64 << 10) as usize];
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (end - at).min(zeros.len() as u64) as usize;
            self.write(at, &zeros[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// With `answers_later`: start a read and answer through `done`, now or
    /// later, from any thread. By default a synchronous `read`.
    fn submit_read(&self, offset: u64, len: usize, done: ReadCompletion) {
        let mut buf = vec![0u8; len];
        done.complete(self.read(offset, &mut buf).map(|()| &buf[..]));
    }

    /// With `answers_later`: start a write (copy `data` if it is needed
    /// after returning) and answer through `done`. By default `write`.
    fn submit_write(&self, offset: u64, data: &[u8], done: WriteCompletion) {
        done.complete(self.write(offset, data));
    }
}

/// The answer to one read, given once, from any thread. Dropped without
/// an answer, the request fails with EIO.
pub struct ReadCompletion {
    token: ReplyToken,
}

impl ReadCompletion {
    pub(crate) fn new(token: ReplyToken) -> ReadCompletion {
        ReadCompletion { token }
    }

    pub fn complete(self, result: Result<&[u8], BlkError>) {
        match result {
            Ok(bytes) => self.token.data(bytes),
            Err(e) => {
                tracing::debug!(error = %e, "read failed");
                self.token.error(e.errno())
            }
        }
    }

    /// The request was interrupted (the application gave up on it).
    pub fn interrupted(&self) -> bool {
        self.token.interrupted()
    }
}

/// The answer to one write.
pub struct WriteCompletion {
    token: ReplyToken,
    len: u32,
}

impl WriteCompletion {
    pub(crate) fn new(token: ReplyToken, len: u32) -> WriteCompletion {
        WriteCompletion { token, len }
    }

    pub fn complete(self, result: Result<(), BlkError>) {
        match result {
            Ok(()) => self.token.written(self.len),
            Err(e) => {
                tracing::debug!(error = %e, "write failed");
                self.token.error(e.errno())
            }
        }
    }

    pub fn interrupted(&self) -> bool {
        self.token.interrupted()
    }
}
