//! The inode table: directories with stable readdir cookies, inodes, and
//! the bookkeeping that decides when an inode may go.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use fusebox::error::{Errno, FsResult};
use fusebox::types::*;

use super::data::Content;
use super::{rlock, BOGO_DIRENT, FIRST_COOKIE, ROOT};

#[derive(Clone, Copy, Debug)]
pub(super) struct DirEntry {
    pub(super) ino: u64,
    pub(super) kind: FileType,
    /// Position-independent readdir offset: entries are listed by cookie, so
    /// an offset the kernel holds stays valid whatever is added or removed.
    pub(super) cookie: u64,
}

#[derive(Debug)]
pub(super) struct Dir {
    pub(super) entries: BTreeMap<OsString, DirEntry>,
    pub(super) by_cookie: BTreeMap<u64, OsString>,
    pub(super) next_cookie: u64,
    pub(super) parent: u64,
}

impl Dir {
    pub(super) fn new(parent: u64) -> Dir {
        Dir {
            entries: BTreeMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            parent,
        }
    }

    pub(super) fn insert(&mut self, name: &OsStr, ino: u64, kind: FileType) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.by_cookie.insert(cookie, name.to_owned());
        if let Some(old) = self
            .entries
            .insert(name.to_owned(), DirEntry { ino, kind, cookie })
        {
            self.by_cookie.remove(&old.cookie);
        }
    }

    pub(super) fn remove(&mut self, name: &OsStr) -> Option<DirEntry> {
        let e = self.entries.remove(name)?;
        self.by_cookie.remove(&e.cookie);
        Some(e)
    }
}

/// One row of a listing: the offset that follows it, and the entry.
pub(super) struct Listed<'a> {
    pub(super) next: u64,
    pub(super) ino: u64,
    pub(super) kind: FileType,
    pub(super) name: &'a OsStr,
    pub(super) dot: bool,
}

/// Everything after `offset` in `dir` (whose own inode is `ino`): "." and
/// ".." first, then the entries in cookie order.
pub(super) fn listing(ino: u64, dir: &Dir, offset: u64) -> impl Iterator<Item = Listed<'_>> {
    let dots = [(1, ino, "."), (2, dir.parent, "..")]
        .into_iter()
        .filter(move |&(next, _, _)| next > offset)
        .map(|(next, ino, name)| Listed {
            next,
            ino,
            kind: FileType::Directory,
            name: OsStr::new(name),
            dot: true,
        });
    let rest = dir
        .by_cookie
        .range((Bound::Excluded(offset.max(2)), Bound::Unbounded))
        .filter_map(|(&cookie, name)| {
            let e = dir.entries.get(name)?;
            Some(Listed {
                next: cookie,
                ino: e.ino,
                kind: e.kind,
                name: name.as_os_str(),
                dot: false,
            })
        });
    dots.chain(rest)
}

#[derive(Debug)]
pub(super) enum Kind {
    File(Arc<RwLock<Content>>),
    Dir(Dir),
    Symlink(OsString),
    /// FIFOs, sockets and device nodes: the kernel does their I/O, we only
    /// keep the attributes (rdev included).
    Special,
}

#[derive(Debug)]
pub(super) struct Inode {
    /// size and blocks of files, dirs and symlinks are derived in `attr()`.
    pub(super) attr: FileAttr,
    pub(super) kind: Kind,
    /// Atomic so lookup and READDIRPLUS can take references under the read
    /// lock; dropping one to zero (forget) happens under the write lock.
    pub(super) lookups: AtomicU64,
    /// Open handles (files and directories).
    pub(super) opens: u64,
    pub(super) xattrs: BTreeMap<OsString, Vec<u8>>,
}

impl Inode {
    pub(super) fn attr(&self) -> FileAttr {
        let mut a = self.attr;
        match &self.kind {
            Kind::File(c) => {
                let c = rlock(c);
                a.size = c.size();
                a.blocks = c.blocks();
            }
            Kind::Dir(d) => a.size = (d.entries.len() as u64 + 2) * BOGO_DIRENT,
            Kind::Symlink(t) => a.size = t.len() as u64,
            Kind::Special => {}
        }
        a
    }

    pub(super) fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir(_))
    }
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) inodes: HashMap<u64, Inode>,
    pub(super) next_ino: u64,
    pub(super) next_fh: u64,
    /// Handle → inode, so release can find the inode and a stale or repeated
    /// release cannot drop someone else's open count.
    pub(super) handles: HashMap<u64, u64>,
}

impl State {
    pub(super) fn get(&self, ino: u64) -> FsResult<&Inode> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn get_mut(&mut self, ino: u64) -> FsResult<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn dir(&self, ino: u64) -> FsResult<&Dir> {
        match &self.get(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    pub(super) fn dir_mut(&mut self, ino: u64) -> FsResult<&mut Dir> {
        match &mut self.get_mut(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// A directory that can still receive entries (not removed).
    pub(super) fn live_dir(&self, ino: u64) -> FsResult<&Dir> {
        let d = self.dir(ino)?;
        if self.get(ino)?.attr.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(d)
    }

    pub(super) fn set_nlink(&mut self, ino: u64, f: impl FnOnce(u32) -> u32) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.attr.nlink = f(i.attr.nlink);
        }
    }

    /// Directory content changed: mtime and ctime.
    pub(super) fn touch(&mut self, ino: u64, now: Timespec) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.attr.mtime = now;
            i.attr.ctime = now;
        }
    }

    pub(super) fn touch_ctime(&mut self, ino: u64, now: Timespec) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.attr.ctime = now;
        }
    }

    pub(super) fn open_handle(&mut self, ino: u64) -> FsResult<Opened> {
        self.get_mut(ino)?.opens += 1;
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, ino);
        // Memory has nothing to flush: spare close(2) its FLUSH round trip.
        Ok(Opened {
            flags: fusebox::abi::flags::fopen::NOFLUSH,
            ..Opened::handle(fh)
        })
    }

    /// Drop the inode once nothing refers to it: no name, no kernel lookup
    /// reference, no open handle. The root stays forever.
    pub(super) fn maybe_free(&mut self, ino: u64) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        if ino != ROOT && i.attr.nlink == 0 && i.lookups.load(Relaxed) == 0 && i.opens == 0 {
            self.inodes.remove(&ino);
        }
    }

    /// True if `anc` is `ino` or one of its ancestors.
    pub(super) fn is_ancestor(&self, anc: u64, mut ino: u64) -> bool {
        // Bounded by the table size so a corrupted parent chain cannot spin.
        for _ in 0..=self.inodes.len() {
            if ino == anc {
                return true;
            }
            match self.inodes.get(&ino).map(|i| &i.kind) {
                Some(Kind::Dir(d)) if ino != ROOT => ino = d.parent,
                _ => return false,
            }
        }
        false
    }
}
