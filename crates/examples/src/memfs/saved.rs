//! MemFs's files in a byte stream, for a planned upgrade
//! ([`Filesystem::save_state`](fusebox::Filesystem::save_state)): the old
//! server writes its whole table and every page, the new one reads them.
//!
//! The format is this module's own and versioned by its first line; a
//! server that finds another version refuses, and the upgrade is abandoned
//! with the old server still serving. All numbers are little-endian;
//! byte strings carry a u32 length. Page bytes go out as they are, 4 KiB
//! each, without an intermediate copy.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use fusebox::types::{FileAttr, FileType, Timespec};

use super::data::{Content, Usage};
use super::rlock;
use super::table::{Dir, DirEntry, Inode, Kind, State};

const MAGIC: &[u8] = b"fusebox-memfs-state 1\n";

const KIND_FILE: u8 = 1;
const KIND_DIR: u8 = 2;
const KIND_SYMLINK: u8 = 3;
const KIND_SPECIAL: u8 = 4;

struct Out<'a>(&'a mut dyn Write);

impl Out<'_> {
    fn u8(&mut self, v: u8) -> io::Result<()> {
        self.0.write_all(&[v])
    }
    fn u32(&mut self, v: u32) -> io::Result<()> {
        self.0.write_all(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.0.write_all(&v.to_le_bytes())
    }
    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        let len = u32::try_from(b.len()).map_err(|_| io::Error::other("a string over 4 GiB"))?;
        self.u32(len)?;
        self.0.write_all(b)
    }
    fn time(&mut self, t: Timespec) -> io::Result<()> {
        self.u64(t.sec as u64)?;
        self.u32(t.nsec)
    }
    fn attr(&mut self, a: &FileAttr) -> io::Result<()> {
        for v in [a.ino, a.size, a.blocks] {
            self.u64(v)?;
        }
        for t in [a.atime, a.mtime, a.ctime] {
            self.time(t)?;
        }
        for v in [a.mode, a.nlink, a.uid, a.gid, a.rdev, a.blksize] {
            self.u32(v)?;
        }
        Ok(())
    }
}

struct In<'a>(&'a mut dyn Read);

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("saved memfs state: {what}"),
    )
}

impl In<'_> {
    fn u8(&mut self) -> io::Result<u8> {
        let mut b = [0; 1];
        self.0.read_exact(&mut b)?;
        Ok(b[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0; 4];
        self.0.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut b = [0; 8];
        self.0.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let len = self.u32()? as usize;
        let mut v = Vec::new();
        // Read through `take` so a corrupt length cannot allocate 4 GiB up front.
        let got = (&mut *self.0).take(len as u64).read_to_end(&mut v)?;
        if got != len {
            return Err(corrupt("truncated"));
        }
        Ok(v)
    }
    fn name(&mut self) -> io::Result<OsString> {
        Ok(OsString::from_vec(self.bytes()?))
    }
    fn time(&mut self) -> io::Result<Timespec> {
        Ok(Timespec {
            sec: self.u64()? as i64,
            nsec: self.u32()?,
        })
    }
    fn attr(&mut self) -> io::Result<FileAttr> {
        let (ino, size, blocks) = (self.u64()?, self.u64()?, self.u64()?);
        let (atime, mtime, ctime) = (self.time()?, self.time()?, self.time()?);
        Ok(FileAttr {
            ino,
            size,
            blocks,
            atime,
            mtime,
            ctime,
            mode: self.u32()?,
            nlink: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            rdev: self.u32()?,
            blksize: self.u32()?,
        })
    }
}

fn file_type(k: FileType) -> u8 {
    match k {
        FileType::RegularFile => 1,
        FileType::Directory => 2,
        FileType::Symlink => 3,
        FileType::BlockDevice => 4,
        FileType::CharDevice => 5,
        FileType::NamedPipe => 6,
        FileType::Socket => 7,
    }
}

fn file_type_from(v: u8) -> io::Result<FileType> {
    Ok(match v {
        1 => FileType::RegularFile,
        2 => FileType::Directory,
        3 => FileType::Symlink,
        4 => FileType::BlockDevice,
        5 => FileType::CharDevice,
        6 => FileType::NamedPipe,
        7 => FileType::Socket,
        _ => return Err(corrupt("unknown entry type")),
    })
}

/// Write `st` (the caller holds it still: the server is paused).
pub(super) fn save(st: &State, out: &mut dyn Write) -> io::Result<()> {
    let mut o = Out(out);
    o.0.write_all(MAGIC)?;
    o.u64(st.next_ino)?;
    o.u64(st.next_fh)?;
    o.u64(st.handles.len() as u64)?;
    for (&fh, &ino) in &st.handles {
        o.u64(fh)?;
        o.u64(ino)?;
    }
    o.u64(st.inodes.len() as u64)?;
    for (&ino, inode) in &st.inodes {
        o.u64(ino)?;
        o.attr(&inode.attr)?;
        o.u64(inode.lookups.load(std::sync::atomic::Ordering::Relaxed))?;
        o.u64(inode.opens)?;
        o.u64(inode.xattrs.len() as u64)?;
        for (name, value) in &inode.xattrs {
            o.bytes(name.as_bytes())?;
            o.bytes(value)?;
        }
        match &inode.kind {
            Kind::File(c) => {
                o.u8(KIND_FILE)?;
                rlock(c).save(o.0)?;
            }
            Kind::Dir(d) => {
                o.u8(KIND_DIR)?;
                o.u64(d.parent)?;
                o.u64(d.next_cookie)?;
                o.u64(d.entries.len() as u64)?;
                for (name, e) in &d.entries {
                    o.bytes(name.as_bytes())?;
                    o.u64(e.ino)?;
                    o.u8(file_type(e.kind))?;
                    o.u64(e.cookie)?;
                }
            }
            Kind::Symlink(target) => {
                o.u8(KIND_SYMLINK)?;
                o.bytes(target.as_bytes())?;
            }
            Kind::Special => o.u8(KIND_SPECIAL)?,
        }
    }
    Ok(())
}

/// Read what `save` wrote; file pages are charged to `usage`.
pub(super) fn load(input: &mut dyn Read, usage: &Arc<Usage>) -> io::Result<State> {
    let mut i = In(input);
    let mut magic = vec![0; MAGIC.len()];
    i.0.read_exact(&mut magic)?;
    if magic != MAGIC {
        return Err(corrupt(&format!(
            "not a state this version reads (it starts {:?})",
            String::from_utf8_lossy(&magic)
        )));
    }
    let next_ino = i.u64()?;
    let next_fh = i.u64()?;
    let n = i.u64()?;
    let mut handles = HashMap::new();
    for _ in 0..n {
        handles.insert(i.u64()?, i.u64()?);
    }
    let n = i.u64()?;
    let mut inodes = HashMap::new();
    for _ in 0..n {
        let ino = i.u64()?;
        let attr = i.attr()?;
        let lookups = AtomicU64::new(i.u64()?);
        let opens = i.u64()?;
        let mut xattrs = BTreeMap::new();
        for _ in 0..i.u64()? {
            xattrs.insert(i.name()?, i.bytes()?);
        }
        let kind = match i.u8()? {
            KIND_FILE => Kind::File(Arc::new(RwLock::new(Content::load(i.0, usage.clone())?))),
            KIND_DIR => {
                let mut d = Dir::new(i.u64()?);
                d.next_cookie = i.u64()?;
                for _ in 0..i.u64()? {
                    let name = i.name()?;
                    let e = DirEntry {
                        ino: i.u64()?,
                        kind: file_type_from(i.u8()?)?,
                        cookie: i.u64()?,
                    };
                    d.by_cookie.insert(e.cookie, name.clone());
                    d.entries.insert(name, e);
                }
                Kind::Dir(d)
            }
            KIND_SYMLINK => Kind::Symlink(i.name()?),
            KIND_SPECIAL => Kind::Special,
            _ => return Err(corrupt("unknown inode kind")),
        };
        inodes.insert(
            ino,
            Inode {
                attr,
                kind,
                lookups,
                opens,
                xattrs,
            },
        );
    }
    if !inodes.contains_key(&super::ROOT) {
        return Err(corrupt("no root directory"));
    }
    Ok(State {
        inodes,
        next_ino,
        next_fh,
        handles,
    })
}
