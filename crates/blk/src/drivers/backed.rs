//! Drivers whose blocks live in a file: `ram` (a memfd, mapped) and
//! `file` (an image or a partition, read and written positionally).

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::FallocateFlags;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use fusebox::sys::shared_map::SharedMap;

use crate::driver::{BlkError, BlockDriver, Capabilities, Geometry};

/// One page-aligned page: O_DIRECT wants buffers aligned to the medium's
/// block, and the request buffers fusebox hands a driver sit after a
/// protocol header.
#[derive(Clone, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C, align(4096))]
struct Page([u8; 4096]);

thread_local! {
    static BOUNCE: RefCell<Vec<Page>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on an aligned buffer of `len` bytes (a multiple of 512).
fn with_bounce<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BOUNCE.with(|b| {
        let mut pages = b.borrow_mut();
        let n = len.div_ceil(4096);
        if pages.len() < n {
            pages.resize(n, Page::new_zeroed());
        }
        f(&mut pages[..n].as_mut_bytes()[..len])
    })
}

fn pread_all(fd: &OwnedFd, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pread(fd, &mut *buf, offset) {
            Ok(0) => {
                // Past the end of a file shorter than the device: zeros.
                buf.fill(0);
                return Ok(());
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn pwrite_all(fd: &OwnedFd, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match rustix::io::pwrite(fd, data, offset) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            Ok(n) => {
                data = &data[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Blocks in a file, read and written positionally.
struct Backed {
    /// O_DIRECT where the file took it.
    direct: Option<OwnedFd>,
    buffered: OwnedFd,
    geometry: Geometry,
}

impl Backed {
    fn is_einval(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::EINVAL)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        if let Some(fd) = &self.direct {
            match with_bounce(buf.len(), |b| {
                pread_all(fd, offset, b).map(|()| buf.copy_from_slice(b))
            }) {
                Ok(()) => return Ok(()),
                // The medium wants a bigger alignment than this request's.
                Err(e) if Self::is_einval(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(pread_all(&self.buffered, offset, buf)?)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        if let Some(fd) = &self.direct {
            match with_bounce(data.len(), |b| {
                b.copy_from_slice(data);
                pwrite_all(fd, offset, b)
            }) {
                Ok(()) => return Ok(()),
                Err(e) if Self::is_einval(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(pwrite_all(&self.buffered, offset, data)?)
    }

    fn zero(&self, offset: u64, len: u64, mode: FallocateFlags) -> Result<(), BlkError> {
        match rustix::fs::fallocate(
            &self.buffered,
            mode | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        ) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP) => {
                let zeros = vec![0u8; len.min(1 << 20) as usize];
                let mut at = offset;
                while at < offset + len {
                    let n = (offset + len - at).min(zeros.len() as u64) as usize;
                    self.write(at, &zeros[..n])?;
                    at += n as u64;
                }
                Ok(())
            }
            Err(e) => Err(io::Error::from(e).into()),
        }
    }
}

/// A RAM disk whose memory is a memfd, mapped. Under a supervisor the
/// memfd is the supervisor's: a replaced or crashed driver process leaves
/// the data there for the next one.
pub struct RamDriver {
    memory: SharedMap,
    geometry: Geometry,
}

impl RamDriver {
    /// A new zero-filled RAM disk; memory is used only where written.
    pub fn create(size: u64, logical_block_size: u32) -> Result<RamDriver, BlkError> {
        Self::from_memfd(create_memory(size)?, logical_block_size)
    }

    /// The RAM disk in `memfd` (its size is the device's).
    pub fn from_memfd(memfd: OwnedFd, logical_block_size: u32) -> Result<RamDriver, BlkError> {
        let size = rustix::fs::fstat(&memfd).map_err(io::Error::from)?.st_size as u64;
        let geometry = Geometry::new(size, logical_block_size);
        geometry.check()?;
        Ok(RamDriver {
            memory: SharedMap::map(memfd)?,
            geometry,
        })
    }

    /// Give the range's memory back; it reads as zeros after.
    fn punch(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        rustix::fs::fallocate(
            self.memory.fd(),
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        )
        .map_err(io::Error::from)?;
        Ok(())
    }
}

/// A memfd of `size` bytes for a RAM disk.
pub fn create_memory(size: u64) -> Result<OwnedFd, BlkError> {
    let fd = rustix::fs::memfd_create("fusebox-blk-ram", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(io::Error::from)?;
    rustix::fs::ftruncate(&fd, size).map_err(io::Error::from)?;
    Ok(fd)
}

impl BlockDriver for RamDriver {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            write: true,
            flush: false,
            trim: true,
            trim_zeroes: true,
            write_zeroes: true,
            answers_later: false,
        }
    }

    // Copies to and from the mapping: no system call per block. The serving
    // layer has checked that the range lies inside the device.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        self.memory.read_into(offset as usize, buf);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        self.memory.write(offset as usize, data);
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.punch(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.punch(offset, len)
    }
}

/// A device over an image file or a partition, with O_DIRECT where the
/// file system under it takes it (else buffered, and durable on flush).
pub struct FileDriver {
    inner: Backed,
    read_only: bool,
}

impl FileDriver {
    /// Open `path`. With `size`, a regular file shorter than that is
    /// extended (sparse) to it; without, the device is the file's size.
    pub fn open(
        path: &Path,
        size: Option<u64>,
        logical_block_size: u32,
        read_only: bool,
    ) -> Result<FileDriver, BlkError> {
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            if size.is_some() && !read_only {
                o.create(true);
            }
            o.open(path).map(OwnedFd::from)
        };
        let buffered = open(false)
            .map_err(|e| BlkError::Invalid(format!("opening {}: {e}", path.display())))?;
        let stat = rustix::fs::fstat(&buffered).map_err(io::Error::from)?;
        let is_file = rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file();
        // lseek to the end gives a block device's size too.
        let current =
            rustix::fs::seek(&buffered, rustix::fs::SeekFrom::End(0)).map_err(io::Error::from)?;
        let size = match size {
            Some(s) if s > current && is_file && !read_only => {
                rustix::fs::ftruncate(&buffered, s).map_err(io::Error::from)?;
                s
            }
            Some(s) if s > current => {
                return Err(BlkError::Invalid(format!(
                    "{} holds {current} bytes, less than the {s} asked for",
                    path.display()
                )))
            }
            Some(s) => s,
            None => current,
        };
        let geometry = Geometry::new(size, logical_block_size);
        geometry.check()?;
        let direct = match open(true) {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::info!(error = %e, path = %path.display(), "no O_DIRECT here; buffered I/O, made durable on flush");
                None
            }
        };
        Ok(FileDriver {
            inner: Backed {
                direct,
                buffered,
                geometry,
            },
            read_only,
        })
    }

    /// Whether reads and writes bypass the page cache.
    pub fn direct(&self) -> bool {
        self.inner.direct.is_some()
    }
}

impl BlockDriver for FileDriver {
    fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    fn capabilities(&self) -> Capabilities {
        let write = !self.read_only;
        Capabilities {
            write,
            flush: write,
            trim: write,
            trim_zeroes: write,
            write_zeroes: write,
            answers_later: false,
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        self.inner.read(offset, buf)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        self.inner.write(offset, data)
    }

    fn flush(&self) -> Result<(), BlkError> {
        rustix::fs::fdatasync(self.inner.buffered.as_fd()).map_err(io::Error::from)?;
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.inner.zero(offset, len, FallocateFlags::PUNCH_HOLE)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.inner.zero(offset, len, FallocateFlags::ZERO_RANGE)
    }
}
