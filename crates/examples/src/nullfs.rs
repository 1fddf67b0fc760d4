//! NullFS: the cost of the framework with a filesystem that does nothing.
//!
//! The root directory exists and is empty; LOOKUP of any name says "no such
//! file" (so CREATE reaches us), and every other request succeeds at once:
//! CREATE hands back a fresh empty file, WRITE swallows its data, READ
//! returns end of file. Nothing is remembered.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fusebox::fs::ops::*;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;

pub struct NullFs {
    timeouts: Timeouts,
    next_node: AtomicU64,
    created: Timespec,
}

impl NullFs {
    /// `timeouts.attr` zero makes every stat a GETATTR round trip, which is
    /// what the RFUSE latency breakdown measures.
    pub fn new(timeouts: Timeouts) -> NullFs {
        NullFs {
            timeouts,
            next_node: AtomicU64::new(2),
            created: Timespec::now(),
        }
    }

    fn attr(&self, node: NodeId) -> FileAttr {
        let mode = if node == NodeId::ROOT {
            libc::S_IFDIR | 0o755
        } else {
            libc::S_IFREG | 0o644
        };
        FileAttr::synthetic(node.0, mode, 0, self.created)
    }

    fn new_entry(&self) -> Entry {
        let node = NodeId(self.next_node.fetch_add(1, Ordering::Relaxed));
        Entry::new(node, self.attr(node), &self.timeouts)
    }
}

impl Filesystem for NullFs {
    fn lookup(&self, _: &Ctx, _: NodeId, _: &OsStr) -> FsResult<Entry> {
        if self.timeouts.negative > Duration::ZERO {
            Ok(Entry::negative(self.timeouts.negative))
        } else {
            Err(Errno::ENOENT)
        }
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node),
            ttl: self.timeouts.attr,
        })
    }

    fn setattr(&self, _: &Ctx, node: NodeId, _: &SetAttr) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node),
            ttl: self.timeouts.attr,
        })
    }

    fn mknod(&self, _: &Ctx, _: NodeId, _: &OsStr, _: &Mknod) -> FsResult<Entry> {
        Ok(self.new_entry())
    }

    fn create(&self, _: &Ctx, _: NodeId, _: &OsStr, _: &Create) -> FsResult<(Entry, Opened)> {
        Ok((self.new_entry(), Opened::default()))
    }

    fn unlink(&self, _: &Ctx, _: NodeId, _: &OsStr) -> FsResult<()> {
        Ok(())
    }

    fn open(&self, _: &Ctx, _: NodeId, _: &Open) -> FsResult<Opened> {
        Ok(Opened::default())
    }

    fn read(&self, _: &Ctx, _: NodeId, _: &Read, _: &mut DataOut) -> FsResult<()> {
        Ok(())
    }

    fn write(&self, _: &Ctx, _: NodeId, args: &Write) -> FsResult<u32> {
        Ok(args.data.len() as u32)
    }

    fn flush(&self, _: &Ctx, _: NodeId, _: FileHandle, _: u64) -> FsResult<()> {
        Ok(())
    }

    fn fsync(&self, _: &Ctx, _: NodeId, _: FileHandle, _: bool) -> FsResult<()> {
        Ok(())
    }

    fn opendir(&self, _: &Ctx, _: NodeId, _: &Open) -> FsResult<Opened> {
        Ok(Opened::default())
    }

    fn readdir(&self, _: &Ctx, node: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        let dots = [(OsStr::new("."), 1u64), (OsStr::new(".."), 2u64)];
        for (name, off) in dots.into_iter().skip(args.offset as usize) {
            if !out.push(node.0, off, FileType::Directory, name) {
                break;
            }
        }
        Ok(())
    }

    fn access(&self, _: &Ctx, _: NodeId, _: i32) -> FsResult<()> {
        Ok(())
    }
}
