//! The device as a filesystem: a root directory holding one file, `disk`,
//! whose bytes are the driver's blocks. A loop device on that file is the
//! block device the system sees.
//!
//! The file is opened direct (FOPEN_DIRECT_IO, parallel direct writes), so
//! no page cache sits between the loop device and the driver: every block
//! request is one READ, WRITE, FALLOCATE or FSYNC here, and nothing is
//! cached twice. Block requests from the loop device are aligned; anything
//! else opening the file gets reads widened to whole blocks and unaligned
//! writes refused (EINVAL), so a driver only ever sees whole blocks.

use std::ffi::OsStr;
use std::sync::Arc;

use fusebox::abi::flags::{fopen, init};
use fusebox::fs::ops::*;
use fusebox::protocol::{Connection, DataOut, DirEntries, Notifier};
use fusebox::recovery::HandleRecord;
use fusebox::*;

use crate::driver::{
    BlkError, BlockDriver, Capabilities, Geometry, ReadCompletion, WriteCompletion,
};

/// The one file's name under the mount.
pub const DISK_NAME: &str = "disk";
const DISK: NodeId = NodeId(2);

const KEY_ROOT: &[u8] = b"blk:root";
const KEY_DISK: &[u8] = b"blk:disk";

// fallocate(2) modes the loop device sends (linux/falloc.h).
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_NO_HIDE_STALE: i32 = 0x04;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;
const FALLOC_FL_WRITE_ZEROES: i32 = 0x80;

pub struct BlockFs<D: BlockDriver> {
    driver: Arc<D>,
    geometry: Geometry,
    caps: Capabilities,
    created: Timespec,
    uid: u32,
    gid: u32,
}

impl<D: BlockDriver> BlockFs<D> {
    /// Fails if the driver's geometry cannot be served.
    pub fn new(driver: D) -> Result<BlockFs<D>, BlkError> {
        Self::shared(Arc::new(driver))
    }

    pub fn shared(driver: Arc<D>) -> Result<BlockFs<D>, BlkError> {
        let geometry = driver.geometry();
        geometry.check()?;
        let caps = driver.capabilities();
        Ok(BlockFs {
            driver,
            geometry,
            caps,
            created: Timespec::now(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        })
    }

    pub fn driver(&self) -> &Arc<D> {
        &self.driver
    }

    fn attr(&self, node: NodeId) -> FileAttr {
        let mut a = if node == NodeId::ROOT {
            FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, self.created)
        } else {
            let perm = if self.caps.write { 0o600 } else { 0o400 };
            let mut a = FileAttr::synthetic(
                DISK.0,
                libc::S_IFREG | perm,
                self.geometry.size,
                self.created,
            );
            a.blksize = self.geometry.physical_block_size;
            a
        };
        a.uid = self.uid;
        a.gid = self.gid;
        a
    }

    fn block(&self) -> u64 {
        u64::from(self.geometry.logical_block_size)
    }

    /// Whole blocks inside the device, or why not.
    fn check_range(&self, offset: u64, len: u64) -> FsResult<()> {
        let b = self.block();
        if !offset.is_multiple_of(b) || !len.is_multiple_of(b) {
            tracing::debug!(offset, len, "unaligned block request refused");
            return Err(Errno::EINVAL);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.geometry.size => Ok(()),
            _ => Err(Errno::ENOSPC),
        }
    }

    /// A read that is not whole blocks (a program reading the file, not the
    /// loop device): read the blocks around it and hand back the part asked.
    fn read_unaligned(&self, offset: u64, len: u64, out: &mut DataOut) -> FsResult<()> {
        let b = self.block();
        let start = offset / b * b;
        let end = (offset + len).div_ceil(b) * b;
        let mut buf = vec![0u8; (end - start) as usize];
        self.driver
            .read(start, &mut buf)
            .map_err(|e| driver_failed("read", &e))?;
        let from = (offset - start) as usize;
        out.extend_from_slice(&buf[from..from + len as usize]);
        Ok(())
    }

    fn zero(&self, offset: u64, len: u64, may_unmap: bool) -> FsResult<()> {
        let r = if may_unmap && self.caps.trim && self.caps.trim_zeroes {
            self.driver.trim(offset, len)
        } else if self.caps.write_zeroes || self.caps.write {
            self.driver.write_zeroes(offset, len)
        } else {
            Err(BlkError::Unsupported)
        };
        r.map_err(|e| driver_failed("write-zeroes", &e))
    }
}

fn driver_failed(what: &str, e: &BlkError) -> Errno {
    if !matches!(e, BlkError::Unsupported) {
        tracing::warn!(error = %e, "driver {what} failed");
    }
    e.errno()
}

impl<D: BlockDriver> Filesystem for BlockFs<D> {
    fn init(&self, conn: &mut Connection, _: &Notifier) -> FsResult<()> {
        // Direct I/O from the loop device is asynchronous (many blocks in
        // flight), and counts against max_background.
        conn.enable(init::ASYNC_DIO);
        conn.enable(init::PARALLEL_DIROPS);
        conn.disable(init::WRITEBACK_CACHE);
        conn.max_background = conn.max_background.max(128);
        conn.congestion_threshold = conn.congestion_threshold.max(96);
        Ok(())
    }

    fn lookup(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent != NodeId::ROOT || name != DISK_NAME {
            return Err(Errno::ENOENT);
        }
        Ok(Entry::new(DISK, self.attr(DISK), &Timeouts::DAY))
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node),
            ttl: Timeouts::DAY.attr,
        })
    }

    fn setattr(&self, _: &Ctx, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        // The size is the device's; times and modes are not kept. Truncating
        // (an O_TRUNC open) would be a wiped disk: refused.
        if attr
            .size
            .is_some_and(|s| node != DISK || s != self.geometry.size)
        {
            return Err(Errno::EPERM);
        }
        Ok(AttrReply {
            attr: self.attr(node),
            ttl: Timeouts::DAY.attr,
        })
    }

    fn open(&self, _: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        if node != DISK {
            return Err(Errno::EISDIR);
        }
        if args.flags & libc::O_ACCMODE != libc::O_RDONLY && !self.caps.write {
            return Err(Errno(libc::EROFS));
        }
        Ok(Opened {
            fh: FileHandle(0),
            flags: fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES,
            backing_id: 0,
        })
    }

    fn read(&self, ctx: &Ctx, _: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let size = self.geometry.size;
        if args.offset >= size {
            return Ok(());
        }
        let len = u64::from(args.size).min(size - args.offset);
        if self.check_range(args.offset, len).is_err() {
            return self.read_unaligned(args.offset, len, out);
        }
        if self.caps.answers_later {
            let token = ctx.reply_later()?;
            self.driver
                .submit_read(args.offset, len as usize, ReadCompletion::new(token));
            return Err(Errno::LATER);
        }
        out.fill_with(len as usize, |buf| {
            self.driver.read(args.offset, buf).map(|()| buf.len())
        })
        .map_err(|e| driver_failed("read", &e))?;
        Ok(())
    }

    fn write(&self, ctx: &Ctx, _: NodeId, args: &Write) -> FsResult<u32> {
        if !self.caps.write {
            return Err(Errno(libc::EROFS));
        }
        self.check_range(args.offset, args.data.len() as u64)?;
        if self.caps.answers_later {
            let token = ctx.reply_later()?;
            let done = WriteCompletion::new(token, args.data.len() as u32);
            self.driver.submit_write(args.offset, args.data, done);
            return Err(Errno::LATER);
        }
        self.driver
            .write(args.offset, args.data)
            .map_err(|e| driver_failed("write", &e))?;
        Ok(args.data.len() as u32)
    }

    fn flush(&self, _: &Ctx, _: NodeId, _: FileHandle, _: u64) -> FsResult<()> {
        Ok(())
    }

    fn release(&self, _: &Ctx, _: NodeId, _: &Release) -> FsResult<()> {
        Ok(())
    }

    fn fsync(&self, _: &Ctx, _: NodeId, _: FileHandle, _: bool) -> FsResult<()> {
        if !self.caps.flush {
            return Ok(());
        }
        self.driver.flush().map_err(|e| driver_failed("flush", &e))
    }

    fn fallocate(&self, _: &Ctx, node: NodeId, args: &Fallocate) -> FsResult<()> {
        if node != DISK {
            return Err(Errno::EISDIR);
        }
        if !self.caps.write {
            return Err(Errno(libc::EROFS));
        }
        let mode = args.mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_NO_HIDE_STALE);
        let (offset, len) = (args.offset, args.length);
        if mode == 0 {
            // Preallocation: every block of a device exists already; only a
            // range past the end would need a size it cannot grow to.
            return match offset.checked_add(len) {
                Some(end) if end <= self.geometry.size => Ok(()),
                _ => Err(Errno::ENOSPC),
            };
        }
        self.check_range(offset, len)?;
        match mode {
            // The loop device's discard, and its write-zeroes that may unmap.
            FALLOC_FL_PUNCH_HOLE => self.zero(offset, len, true),
            FALLOC_FL_ZERO_RANGE | FALLOC_FL_WRITE_ZEROES => self.zero(offset, len, false),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    fn opendir(&self, _: &Ctx, node: NodeId, _: &Open) -> FsResult<Opened> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOTDIR);
        }
        Ok(Opened::default())
    }

    fn readdir(&self, _: &Ctx, node: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        let entries = [
            (OsStr::new("."), 1u64, FileType::Directory, 1u64),
            (OsStr::new(".."), 2, FileType::Directory, 1),
            (OsStr::new(DISK_NAME), 3, FileType::RegularFile, DISK.0),
        ];
        for (name, off, kind, ino) in entries.into_iter().skip(args.offset as usize) {
            if node != NodeId::ROOT || !out.push(ino, off, kind, name) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _: &Ctx, _: NodeId, _: &Release) -> FsResult<()> {
        Ok(())
    }

    fn statfs(&self, _: &Ctx, _: NodeId) -> FsResult<Statfs> {
        // The loop device takes its discard granularity from f_bsize.
        let b = self.geometry.logical_block_size;
        let blocks = self.geometry.size / u64::from(b);
        Ok(Statfs {
            blocks,
            bfree: 0,
            bavail: 0,
            files: 2,
            ffree: 0,
            bsize: b,
            namelen: 255,
            frsize: b,
        })
    }

    fn access(&self, _: &Ctx, _: NodeId, _: i32) -> FsResult<()> {
        Ok(())
    }

    // Recovery: the two nodes are fixed and handles carry no state, so a
    // new server (a replaced or restarted driver) takes over at once.
    fn node_key(&self, node: NodeId) -> Option<Vec<u8>> {
        match node {
            NodeId::ROOT => Some(KEY_ROOT.to_vec()),
            DISK => Some(KEY_DISK.to_vec()),
            _ => None,
        }
    }

    fn restore_node(&self, node: NodeId, key: &[u8], _: u64) -> FsResult<()> {
        match (node, key) {
            (NodeId::ROOT, KEY_ROOT) | (DISK, KEY_DISK) => Ok(()),
            _ => Err(Errno(libc::ESTALE)),
        }
    }

    fn restore_handle(&self, handle: &HandleRecord) -> FsResult<()> {
        let _ = handle;
        Ok(())
    }
}
