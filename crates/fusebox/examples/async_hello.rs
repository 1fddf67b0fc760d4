//! A filesystem written with the async API: one file, `hello`, whose bytes
//! come from a (simulated) remote server 5 ms away. Every request is a
//! tokio task; two serving threads keep any number of them in flight.
//!
//! cargo run --example async_hello -- MOUNTPOINT   (Ctrl-C unmounts)

use std::ffi::OsStr;
use std::time::Duration;

use fusebox::fs::ops::{Ctx, Read};
use fusebox::fs::{AsyncAdapter, AsyncFilesystem};
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;

const HELLO: &[u8] = b"hello from far away\n";
const HELLO_NODE: NodeId = NodeId(2);

struct Remote;

impl Remote {
    /// Stands for a network round trip: waits without holding a thread.
    async fn fetch(&self, offset: u64, size: u32) -> Vec<u8> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let start = (offset as usize).min(HELLO.len());
        let end = (start + size as usize).min(HELLO.len());
        HELLO[start..end].to_vec()
    }

    fn attr(node: NodeId) -> FsResult<FileAttr> {
        let now = Timespec::now();
        match node {
            NodeId::ROOT => Ok(FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, now)),
            HELLO_NODE => Ok(FileAttr::synthetic(
                2,
                libc::S_IFREG | 0o444,
                HELLO.len() as u64,
                now,
            )),
            _ => Err(Errno::ENOENT),
        }
    }
}

impl AsyncFilesystem for Remote {
    async fn lookup(&self, _: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent != NodeId::ROOT || name != "hello" {
            return Err(Errno::ENOENT);
        }
        Ok(Entry::new(
            HELLO_NODE,
            Self::attr(HELLO_NODE)?,
            &Timeouts::default(),
        ))
    }

    async fn getattr(
        &self,
        _: &Ctx<'_>,
        node: NodeId,
        _: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: Self::attr(node)?,
            ttl: Duration::from_secs(1),
        })
    }

    async fn read(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        if node != HELLO_NODE {
            return Err(Errno::EISDIR);
        }
        let bytes = self.fetch(args.offset, args.size).await;
        if ctx.interrupted() {
            return Err(Errno::EINTR);
        }
        out.extend_from_slice(&bytes);
        Ok(())
    }

    async fn readdir(
        &self,
        _: &Ctx<'_>,
        _: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        let entries = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (2, FileType::RegularFile, "hello"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(args.offset as usize) {
            if !out.push(*ino, i as u64 + 1, *kind, OsStr::new(name)) {
                break;
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mountpoint = std::env::args()
        .nth(1)
        .ok_or("usage: async_hello MOUNTPOINT")?;
    // Its own tokio runtime; AsyncAdapter::with_runtime(fs, handle) uses yours.
    let fs = AsyncAdapter::new(Remote)?;
    let session = Session::mount(
        fs,
        mountpoint.as_ref(),
        &Options::default(),
        SessionConfig::default(),
    )?;
    session.unmount_on_signals(Duration::from_secs(3))?;
    session.wait()?;
    Ok(())
}
