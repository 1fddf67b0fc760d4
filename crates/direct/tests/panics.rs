//! A filesystem that panics, served in this very process by direct mode:
//! the call that reached the panic fails with EIO, as it would through the
//! kernel, and the program and its mount go on. Runs in a forked child
//! (interception is per process).

#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fusebox::fs::ops::{Ctx, Read};
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;
use fusebox_direct::VirtualMount;

const OK: NodeId = NodeId(2);
const TEXT: &[u8] = b"still here\n";

/// `ok` reads as TEXT; looking up `boom` panics.
struct Fragile;

fn attr(node: NodeId) -> FsResult<FileAttr> {
    let now = Timespec::now();
    match node {
        NodeId::ROOT => Ok(FileAttr::synthetic(1, libc::S_IFDIR | 0o755, 0, now)),
        OK => Ok(FileAttr::synthetic(
            2,
            libc::S_IFREG | 0o444,
            TEXT.len() as u64,
            now,
        )),
        _ => Err(Errno::ENOENT),
    }
}

impl Filesystem for Fragile {
    fn lookup(&self, _: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        match name.to_str() {
            Some("ok") => Ok(Entry::new(OK, attr(OK)?, &Timeouts::default())),
            Some("boom") => panic!("a bug in the filesystem"),
            _ => Err(Errno::ENOENT),
        }
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: attr(node)?,
            ttl: Duration::from_secs(1),
        })
    }

    fn read(&self, _: &Ctx, _: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let start = TEXT.len().min(args.offset as usize);
        let end = TEXT.len().min(start + args.size as usize);
        out.extend_from_slice(&TEXT[start..end]);
        Ok(())
    }

    fn readdir(&self, _: &Ctx, _: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        let entries = [
            (1, FileType::Directory, "."),
            (2, FileType::RegularFile, "ok"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(args.offset as usize) {
            if !out.push(*ino, i as u64 + 1, *kind, OsStr::new(name)) {
                break;
            }
        }
        Ok(())
    }
}

fn run() -> Result<(), String> {
    let at = PathBuf::from(format!("/fusebox-direct-panics-{}", std::process::id()));
    fusebox_direct::serve(VirtualMount::new(&at, Arc::new(Fragile))).map_err(|e| e.to_string())?;
    // Keep the expected panic's report short.
    std::panic::set_hook(Box::new(|_| eprintln!("(the expected panic)")));
    match std::fs::metadata(at.join("boom")) {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => return Err(format!("stat of the panicking name: {other:?}")),
    }
    // And again: the mount still serves, the panic did not poison it.
    match std::fs::read(at.join("boom")) {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => return Err(format!("open of the panicking name: {other:?}")),
    }
    let read = std::fs::read(at.join("ok")).map_err(|e| format!("read after the panic: {e}"))?;
    if read != TEXT {
        return Err(format!("read {read:?}"));
    }
    let names: Vec<_> = std::fs::read_dir(&at)
        .map_err(|e| e.to_string())?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if names != ["ok"] {
        return Err(format!("listing {names:?}"));
    }
    Ok(())
}

fn main() {
    // SAFETY: single-threaded here; the child runs the case and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a hung case is ended by the alarm.
        unsafe { libc::alarm(60) };
        let code = match run() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        };
        // SAFETY: ends the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    println!(
        "test a_panic_in_filesystem_code_is_one_eio_in_direct_mode ... {}",
        if ok { "ok" } else { "FAILED" }
    );
    if !ok {
        std::process::exit(1);
    }
}
