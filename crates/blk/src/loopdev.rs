//! Loop devices: the block device the system sees, over the device's file.
//!
//! Attached with autoclear: the kernel detaches the device when its last
//! opener closes it. The process that attached it (the supervisor) keeps
//! one fd open for the device's life, so a device nobody mounted goes away
//! with that process even if it is killed, and a mounted one when it is
//! unmounted: no loop device outlives its driver's supervisor for long.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sys;

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(
        "no loop device support: {0} (a kernel with CONFIG_BLK_DEV_LOOP, and /dev/loop-control)"
    )]
    Unsupported(io::Error),
    #[error("no free loop device: {0}")]
    NoneFree(io::Error),
    #[error("attaching {device}: {source}")]
    Attach {
        device: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{device} is in use (mounted, or held open exclusively): unmount it first")]
    Busy { device: PathBuf },
    #[error("{device}: {source}")]
    Io {
        device: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct AttachOptions {
    pub block_size: u32,
    pub read_only: bool,
    /// Ask for direct I/O on the backing file (no page cache of the loop
    /// device's own over the file's).
    pub direct_io: bool,
}

/// An attached loop device, held open.
pub struct LoopDevice {
    number: u32,
    file: File,
}

pub fn device_path(number: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{number}"))
}

/// The file behind loop device `number`, if it is attached.
pub fn backing_file(number: u32) -> Option<PathBuf> {
    let p = format!("/sys/block/loop{number}/loop/backing_file");
    let s = std::fs::read_to_string(p).ok()?;
    Some(PathBuf::from(s.trim_end_matches('\n')))
}

impl LoopDevice {
    /// Attach a free loop device to `backing` (opened read-write, or
    /// read-only for a read-only device; O_DIRECT with `direct_io`).
    pub fn attach(backing: &Path, opts: AttachOptions) -> Result<LoopDevice, LoopError> {
        let control = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/loop-control")
            .map_err(LoopError::Unsupported)?;
        let mut backing_opts = OpenOptions::new();
        backing_opts.read(true).write(!opts.read_only);
        if opts.direct_io {
            backing_opts.custom_flags(libc::O_DIRECT);
        }
        let file = backing_opts.open(backing).map_err(|source| LoopError::Io {
            device: backing.to_path_buf(),
            source,
        })?;
        let mut flags = sys::LO_FLAGS_AUTOCLEAR;
        if opts.read_only {
            flags |= sys::LO_FLAGS_READ_ONLY;
        }
        if opts.direct_io {
            flags |= sys::LO_FLAGS_DIRECT_IO;
        }
        let name = backing.as_os_str().as_encoded_bytes();
        // Another program may take the free device between asking and
        // attaching (EBUSY): ask again.
        let mut tries = 0;
        loop {
            let number = sys::get_free(control.as_fd()).map_err(LoopError::NoneFree)?;
            let device = device_path(number);
            let dev = match open_device(&device, number, !opts.read_only) {
                Ok(d) => d,
                Err(source) => return Err(LoopError::Attach { device, source }),
            };
            match sys::configure(dev.as_fd(), file.as_fd(), opts.block_size, flags, name) {
                Ok(()) => return Ok(LoopDevice { number, file: dev }),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 20 => tries += 1,
                Err(source) => return Err(LoopError::Attach { device, source }),
            }
        }
    }

    /// Hold loop device `number`, attached by this process earlier or by
    /// another.
    pub fn open(number: u32) -> Result<LoopDevice, LoopError> {
        let device = device_path(number);
        let file = open_device(&device, number, false)
            .map_err(|source| LoopError::Io { device, source })?;
        Ok(LoopDevice { number, file })
    }

    pub fn number(&self) -> u32 {
        self.number
    }

    pub fn path(&self) -> PathBuf {
        device_path(self.number)
    }

    /// Whether the kernel serves it with direct I/O on the backing file.
    pub fn direct_io(&self) -> bool {
        sys::status(self.file.as_fd()).is_ok_and(|i| i.lo_flags & sys::LO_FLAGS_DIRECT_IO != 0)
    }

    /// Detach: refused while the device is mounted or held exclusively;
    /// otherwise it goes once every other opener has closed it (waited
    /// for up to `wait`). Returns whether it is gone.
    pub fn detach(self, wait: Duration) -> Result<bool, LoopError> {
        let path = self.path();
        if in_use(&path) {
            return Err(LoopError::Busy { device: path });
        }
        sys::clear(self.file.as_fd()).map_err(|source| LoopError::Io {
            device: path.clone(),
            source,
        })?;
        let number = self.number;
        drop(self.file);
        Ok(wait_detached(number, wait))
    }
}

/// Whether a filesystem (or mkfs, or another exclusive user) has the
/// device: an exclusive open fails. An exclusive open that was just
/// closed (a checking `fusebox blk destroy`, a failed mount's probe) can
/// still show for a moment, so a refusal is asked again for a second.
pub fn in_use(device: &Path) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(device)
        {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            _ => return false,
        }
        if Instant::now() >= until {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until loop device `number` has no backing file.
pub fn wait_detached(number: u32, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    loop {
        if backing_file(number).is_none() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Detach loop device `number` from outside the process that attached it
/// (teardown after that process died): as `LoopDevice::detach`.
pub fn detach_number(number: u32, wait: Duration) -> Result<bool, LoopError> {
    if !device_path(number).exists() {
        return Ok(true);
    }
    LoopDevice::open(number)?.detach(wait)
}

fn open_device(device: &Path, number: u32, write: bool) -> io::Result<File> {
    let open = || OpenOptions::new().read(true).write(write).open(device);
    match open() {
        // A container's /dev without udev: make the node (block major 7).
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                device,
                rustix::fs::FileType::BlockDevice,
                rustix::fs::Mode::from_raw_mode(0o660),
                rustix::fs::makedev(7, number),
            )?;
            open()
        }
        r => r,
    }
}
