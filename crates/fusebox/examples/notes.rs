//! A path-level filesystem: a flat directory of in-memory notes that can be
//! created, written, read, truncated, renamed and removed. Requests arrive
//! with paths, as in libfuse's high-level API; `PathAdapter` turns the
//! kernel's node ids into them.
//!
//! cargo run --example notes -- MOUNTPOINT   (Ctrl-C unmounts)

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use fusebox::fs::ops::{Create, Ctx, Open, Read, SetAttr, Write};
use fusebox::protocol::DataOut;
use fusebox::*;

struct Note {
    ino: u64,
    data: Vec<u8>,
    mode: u32,
    mtime: Timespec,
}

#[derive(Default)]
struct Notes {
    /// By name: the directory holds files only, so a path is "/" + name.
    files: Mutex<BTreeMap<OsString, Note>>,
    next_ino: Mutex<u64>,
}

/// The name `path` gives in the root; subdirectories do not exist.
fn name_of(path: &Path) -> FsResult<&OsStr> {
    match path.strip_prefix("/").ok().map(|p| p.as_os_str()) {
        Some(n) if !n.is_empty() && Path::new(n).components().count() == 1 => Ok(n),
        _ => Err(Errno::ENOENT),
    }
}

impl Notes {
    fn files(&self) -> MutexGuard<'_, BTreeMap<OsString, Note>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attr(note: &Note, ctx: &Ctx) -> FileAttr {
        let mut a = FileAttr::synthetic(
            note.ino,
            libc::S_IFREG | note.mode,
            note.data.len() as u64,
            note.mtime,
        );
        (a.uid, a.gid) = (ctx.uid, ctx.gid);
        a
    }
}

impl PathFilesystem for Notes {
    fn getattr(&self, ctx: &Ctx, path: &Path, _: Option<FileHandle>) -> FsResult<FileAttr> {
        if path == Path::new("/") {
            return Ok(FileAttr::synthetic(
                1,
                libc::S_IFDIR | 0o755,
                0,
                Timespec::now(),
            ));
        }
        let files = self.files();
        let note = files.get(name_of(path)?).ok_or(Errno::ENOENT)?;
        Ok(Self::attr(note, ctx))
    }

    fn create(&self, ctx: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
        let name = name_of(path)?.to_owned();
        let mut next = self.next_ino.lock().unwrap_or_else(|e| e.into_inner());
        *next = (*next).max(1) + 1;
        let mode = args.mode & 0o7777 & !args.umask;
        let note = Note {
            ino: *next,
            data: Vec::new(),
            mode,
            mtime: Timespec::now(),
        };
        let mut files = self.files();
        let note = files.entry(name).or_insert(note);
        Ok((Self::attr(note, ctx), Opened::handle(0)))
    }

    fn open(&self, _: &Ctx, path: &Path, _: &Open) -> FsResult<Opened> {
        self.files().get(name_of(path)?).ok_or(Errno::ENOENT)?;
        Ok(Opened::handle(0))
    }

    fn read(&self, _: &Ctx, path: &Path, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let files = self.files();
        let data = &files.get(name_of(path)?).ok_or(Errno::ENOENT)?.data;
        let start = data.len().min(args.offset as usize);
        let end = data.len().min(start + args.size as usize);
        out.extend_from_slice(&data[start..end]);
        Ok(())
    }

    fn write(&self, _: &Ctx, path: &Path, args: &Write) -> FsResult<u32> {
        let mut files = self.files();
        let note = files.get_mut(name_of(path)?).ok_or(Errno::ENOENT)?;
        let end = args.offset as usize + args.data.len();
        if note.data.len() < end {
            note.data.resize(end, 0);
        }
        note.data[args.offset as usize..end].copy_from_slice(args.data);
        note.mtime = Timespec::now();
        Ok(args.data.len() as u32)
    }

    fn setattr(&self, ctx: &Ctx, path: &Path, a: &SetAttr) -> FsResult<FileAttr> {
        let mut files = self.files();
        let note = files.get_mut(name_of(path)?).ok_or(Errno::EPERM)?;
        if let Some(size) = a.size {
            note.data.resize(size as usize, 0);
            note.mtime = Timespec::now();
        }
        if let Some(mode) = a.mode {
            note.mode = mode & 0o7777;
        }
        if let Some(t) = a.mtime {
            note.mtime = match t {
                TimeOrNow::Specific(t) => t,
                TimeOrNow::Now => Timespec::now(),
            };
        }
        Ok(Self::attr(note, ctx))
    }

    fn unlink(&self, _: &Ctx, path: &Path) -> FsResult<()> {
        self.files()
            .remove(name_of(path)?)
            .map(drop)
            .ok_or(Errno::ENOENT)
    }

    fn rename(&self, _: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let mut files = self.files();
        let note = files.remove(name_of(from)?).ok_or(Errno::ENOENT)?;
        files.insert(name_of(to)?.to_owned(), note);
        Ok(())
    }

    fn readdir(
        &self,
        _: &Ctx,
        _: &Path,
        _: FileHandle,
        offset: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        // Offsets 1.. are positions in this listing; the kernel hands the
        // last one back to continue after it.
        let files = self.files();
        let dots = [(OsStr::new("."), 1), (OsStr::new(".."), 1)];
        let names = files.iter().map(|(n, note)| (n.as_os_str(), note.ino));
        for (i, (name, ino)) in dots
            .into_iter()
            .chain(names)
            .enumerate()
            .skip(offset as usize)
        {
            let kind = if ino == 1 {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if !filler(name, kind, ino, i as u64 + 1) {
                break;
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mountpoint = std::env::args().nth(1).ok_or("usage: notes MOUNTPOINT")?;
    let fs = PathAdapter::new(Notes::default());
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
