//! The smallest useful filesystem: one read-only file, `hello`, in the
//! root directory. docs/writing-a-filesystem.md walks through it.
//!
//! cargo run --example hello -- MOUNTPOINT   (Ctrl-C unmounts)

use std::ffi::OsStr;
use std::time::Duration;

use fusebox::fs::ops::{Ctx, Read};
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;

const TEXT: &[u8] = b"Hello, world!\n";
const HELLO: NodeId = NodeId(2);

struct Hello;

fn attr(node: NodeId) -> FsResult<FileAttr> {
    let now = Timespec::now();
    match node {
        NodeId::ROOT => Ok(FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, now)),
        HELLO => Ok(FileAttr::synthetic(
            2,
            libc::S_IFREG | 0o444,
            TEXT.len() as u64,
            now,
        )),
        _ => Err(Errno::ENOENT),
    }
}

impl Filesystem for Hello {
    fn lookup(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent != NodeId::ROOT || name != "hello" {
            return Err(Errno::ENOENT);
        }
        Ok(Entry::new(HELLO, attr(HELLO)?, &Timeouts::default()))
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        let ttl = Duration::from_secs(1);
        Ok(AttrReply {
            attr: attr(node)?,
            ttl,
        })
    }

    fn read(&self, _: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        if node != HELLO {
            return Err(Errno::EISDIR);
        }
        let start = TEXT.len().min(args.offset as usize);
        let end = TEXT.len().min(start + args.size as usize);
        out.extend_from_slice(&TEXT[start..end]);
        Ok(())
    }

    fn readdir(&self, _: &Ctx, _: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        let entries = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (2, FileType::RegularFile, "hello"),
        ];
        // Each entry carries the offset of the next: a listing continues there.
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(args.offset as usize) {
            if !out.push(*ino, i as u64 + 1, *kind, OsStr::new(name)) {
                break;
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mountpoint = std::env::args().nth(1).ok_or("usage: hello MOUNTPOINT")?;
    let session = Session::mount(
        Hello,
        mountpoint.as_ref(),
        &Options::default(),
        SessionConfig::default(),
    )?;
    session.unmount_on_signals(Duration::from_secs(3))?;
    session.wait()?;
    Ok(())
}
