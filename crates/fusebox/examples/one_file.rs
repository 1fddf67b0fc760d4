//! A filesystem whose root is a regular file, mounted on a regular file:
//! what a program that exports one image as one file does (a decompressed
//! view of a compressed image, a block device's contents). Here the file's
//! bytes are generated: line N reads "line N".
//!
//! touch /tmp/lines && cargo run --example one_file -- /tmp/lines 1000

use std::ffi::OsStr;
use std::time::Duration;

use fusebox::fs::ops::{Ctx, Read};
use fusebox::protocol::DataOut;
use fusebox::*;

struct Lines {
    text: Vec<u8>,
}

impl Filesystem for Lines {
    fn lookup(&self, _: &Ctx, _: NodeId, _: &OsStr) -> FsResult<Entry> {
        Err(Errno::ENOTDIR)
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOENT);
        }
        let size = self.text.len() as u64;
        let attr = FileAttr::synthetic(1, libc::S_IFREG | 0o444, size, Timespec::now());
        Ok(AttrReply {
            attr,
            ttl: Duration::from_secs(60),
        })
    }

    fn read(&self, _: &Ctx, _: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let start = self.text.len().min(args.offset as usize);
        let end = self.text.len().min(start + args.size as usize);
        out.extend_from_slice(&self.text[start..end]);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: one_file FILE LINES";
    let mountpoint = args.next().ok_or(usage)?;
    let lines: u64 = args.next().ok_or(usage)?.parse()?;
    let text = (1..=lines)
        .map(|n| format!("line {n}\n"))
        .collect::<String>()
        .into_bytes();
    let session = Session::mount(
        Lines { text },
        mountpoint.as_ref(),
        &Options::default(),
        SessionConfig::default(),
    )?;
    session.unmount_on_signals(Duration::from_secs(3))?;
    session.wait()?;
    Ok(())
}
