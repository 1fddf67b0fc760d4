//! The value types a filesystem sees and returns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A kernel node id. [`NodeId::ROOT`] is the mount's root directory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NodeId(pub u64);

impl NodeId {
    /// The mount's root directory, always node 1.
    pub const ROOT: NodeId = NodeId(fusebox_abi::ROOT_ID);
}

/// An opaque handle a filesystem returns from open/opendir/create.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FileHandle(pub u64);

/// File type, the `S_IFMT` part of a mode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FileType {
    /// A regular file.
    RegularFile,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
    /// A FIFO.
    NamedPipe,
    /// A Unix domain socket.
    Socket,
}

impl FileType {
    /// The type in a mode's `S_IFMT` bits; `None` for bits that name no type.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::RegularFile,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::RegularFile => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The `d_type` value readdir reports (`DT_*`).
    pub fn dirent_type(self) -> u32 {
        self.mode_bits() >> 12
    }
}

/// A point in time as seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default)]
pub struct Timespec {
    /// Seconds since the epoch; negative before 1970.
    pub sec: i64,
    /// Nanoseconds past `sec`, below 1 000 000 000.
    pub nsec: u32,
}

impl Timespec {
    /// The current time of day.
    pub fn now() -> Timespec {
        Timespec::from(SystemTime::now())
    }
}

impl From<SystemTime> for Timespec {
    fn from(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Timespec {
                        sec: -(d.as_secs() as i64),
                        nsec: 0,
                    }
                } else {
                    Timespec {
                        sec: -(d.as_secs() as i64) - 1,
                        nsec: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }
}

/// Attributes of a node, as `stat(2)` reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct FileAttr {
    /// Inode number stat(2) reports; the kernel's node id is separate.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// In 512-byte units.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last change of the data.
    pub mtime: Timespec,
    /// Last change of the attributes.
    pub ctime: Timespec,
    /// File type and permission bits together, as in `st_mode`.
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number, for block and character devices.
    pub rdev: u32,
    /// Preferred I/O size in bytes (`st_blksize`).
    pub blksize: u32,
}

impl FileAttr {
    /// Attributes of a node with no backing store (nullfs, timingfs, test
    /// filesystems): owned by root, all times `time`, 2 links for a
    /// directory and 1 otherwise, blocks counted from `size`.
    pub fn synthetic(ino: u64, mode: u32, size: u64, time: Timespec) -> FileAttr {
        let dir = mode & libc::S_IFMT == libc::S_IFDIR;
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            mode,
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    /// The file type in `mode`.
    pub fn kind(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }

    /// As the protocol carries it (`fuse_attr`).
    pub fn to_abi(self) -> fusebox_abi::Attr {
        fusebox_abi::Attr {
            ino: self.ino,
            size: self.size,
            blocks: self.blocks,
            atime: self.atime.sec as u64,
            mtime: self.mtime.sec as u64,
            ctime: self.ctime.sec as u64,
            atimensec: self.atime.nsec,
            mtimensec: self.mtime.nsec,
            ctimensec: self.ctime.nsec,
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: self.blksize,
            flags: 0,
        }
    }
}

impl From<&fusebox_abi::Attr> for FileAttr {
    /// Attributes as a reply carries them (a client of the protocol: direct
    /// mode's run server).
    fn from(a: &fusebox_abi::Attr) -> Self {
        let at = |sec: u64, nsec: u32| Timespec {
            sec: sec as i64,
            nsec,
        };
        FileAttr {
            ino: a.ino,
            size: a.size,
            blocks: a.blocks,
            atime: at(a.atime, a.atimensec),
            mtime: at(a.mtime, a.mtimensec),
            ctime: at(a.ctime, a.ctimensec),
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: a.blksize,
        }
    }
}

impl From<&rustix::fs::Stat> for FileAttr {
    fn from(st: &rustix::fs::Stat) -> Self {
        FileAttr {
            ino: st.st_ino,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: Timespec {
                sec: st.st_atime,
                nsec: st.st_atime_nsec as u32,
            },
            mtime: Timespec {
                sec: st.st_mtime,
                nsec: st.st_mtime_nsec as u32,
            },
            ctime: Timespec {
                sec: st.st_ctime,
                nsec: st.st_ctime_nsec as u32,
            },
            mode: st.st_mode,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
        }
    }
}

/// How long the kernel may cache names and attributes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Timeouts {
    /// For a name that exists.
    pub entry: Duration,
    /// For a node's attributes.
    pub attr: Duration,
    /// For a name that does not exist; zero disables negative caching.
    pub negative: Duration,
}

impl Default for Timeouts {
    /// libfuse's defaults: one second for names and attributes, no negative caching.
    fn default() -> Self {
        Timeouts {
            entry: Duration::from_secs(1),
            attr: Duration::from_secs(1),
            negative: Duration::ZERO,
        }
    }
}

impl Timeouts {
    /// A day for everything, negative lookups included: for a filesystem
    /// that sees every change to its data through the kernel (memfs, or a
    /// stackable one whose source nothing else touches), so no cached
    /// answer can go stale (libfuse passthrough_hp's default).
    pub const DAY: Timeouts = Timeouts {
        entry: Duration::from_secs(86_400),
        attr: Duration::from_secs(86_400),
        negative: Duration::from_secs(86_400),
    };
}

/// The answer to a name lookup: a node and its attributes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    /// `NodeId(0)` marks a negative entry (the name does not exist).
    pub node: NodeId,
    /// With the node id, names the file for its whole life: a node id used
    /// again for another file needs another generation (NFS export relies on
    /// it).
    pub generation: u64,
    /// The node's attributes.
    pub attr: FileAttr,
    /// How long the kernel may cache the name.
    pub entry_ttl: Duration,
    /// How long the kernel may cache `attr`.
    pub attr_ttl: Duration,
}

impl Entry {
    /// An entry cached as long as `t` allows, generation 0.
    pub fn new(node: NodeId, attr: FileAttr, t: &Timeouts) -> Entry {
        Entry {
            node,
            generation: 0,
            attr,
            entry_ttl: t.entry,
            attr_ttl: t.attr,
        }
    }

    /// "No such name, and remember that for `ttl`."
    pub fn negative(ttl: Duration) -> Entry {
        Entry {
            node: NodeId(0),
            generation: 0,
            attr: FileAttr::default(),
            entry_ttl: ttl,
            attr_ttl: Duration::ZERO,
        }
    }

    /// An entry as a reply carries it.
    pub fn from_abi(e: &fusebox_abi::EntryOut) -> Entry {
        Entry {
            node: NodeId(e.nodeid),
            generation: e.generation,
            attr: FileAttr::from(&e.attr),
            entry_ttl: Duration::new(e.entry_valid, e.entry_valid_nsec),
            attr_ttl: Duration::new(e.attr_valid, e.attr_valid_nsec),
        }
    }

    /// As the protocol carries it (`fuse_entry_out`).
    pub fn to_abi(self) -> fusebox_abi::EntryOut {
        fusebox_abi::EntryOut {
            nodeid: self.node.0,
            generation: self.generation,
            entry_valid: self.entry_ttl.as_secs(),
            attr_valid: self.attr_ttl.as_secs(),
            entry_valid_nsec: self.entry_ttl.subsec_nanos(),
            attr_valid_nsec: self.attr_ttl.subsec_nanos(),
            attr: self.attr.to_abi(),
        }
    }
}

/// Attributes plus how long the kernel may cache them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AttrReply {
    /// The node's attributes.
    pub attr: FileAttr,
    /// How long the kernel may cache them.
    pub ttl: Duration,
}

/// What open, opendir and create return.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Opened {
    /// The handle every later request on this open file carries.
    pub fh: FileHandle,
    /// `FOPEN_*` flags from [`fusebox_abi::flags::fopen`].
    pub flags: u32,
    /// A passthrough backing id from `BackingFiles::open`, or 0.
    pub backing_id: i32,
}

impl Opened {
    /// Just a handle: no `FOPEN_*` flags, no passthrough.
    pub fn handle(fh: u64) -> Opened {
        Opened {
            fh: FileHandle(fh),
            flags: 0,
            backing_id: 0,
        }
    }
}

/// Filesystem statistics, as `statfs(2)` reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Statfs {
    /// Size of the filesystem, in `frsize` units.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks an unprivileged user may use.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Preferred block size in bytes.
    pub bsize: u32,
    /// Longest name, in bytes.
    pub namelen: u32,
    /// Fragment size: the unit of `blocks` and `bfree`.
    pub frsize: u32,
}

impl Statfs {
    /// As the protocol carries it (`fuse_kstatfs`).
    pub fn to_abi(self) -> fusebox_abi::Kstatfs {
        fusebox_abi::Kstatfs {
            blocks: self.blocks,
            bfree: self.bfree,
            bavail: self.bavail,
            files: self.files,
            ffree: self.ffree,
            bsize: self.bsize,
            namelen: self.namelen,
            frsize: self.frsize,
            padding: 0,
            spare: [0; 6],
        }
    }
}

impl From<&fusebox_abi::Kstatfs> for Statfs {
    fn from(s: &fusebox_abi::Kstatfs) -> Self {
        Statfs {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.frsize,
        }
    }
}

/// A POSIX byte-range lock as GETLK reports it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LockInfo {
    /// First byte locked.
    pub start: u64,
    /// Last byte locked, inclusive; `OFFSET_MAX` (`i64::MAX`) for "to the
    /// end of the file".
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// The process holding the lock.
    pub pid: u32,
}

/// A time to set: a given instant, or "now" as the daemon sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeOrNow {
    /// This instant.
    Specific(Timespec),
    /// The daemon's clock when it handles the request (`UTIME_NOW`).
    Now,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_statfs_read_back_from_the_wire_as_written() {
        let attr = FileAttr {
            ino: 9,
            size: 4097,
            blocks: 9,
            atime: Timespec { sec: -5, nsec: 7 },
            mtime: Timespec {
                sec: 1_700_000_000,
                nsec: 999_999_999,
            },
            ctime: Timespec { sec: 3, nsec: 0 },
            mode: libc::S_IFREG | 0o640,
            nlink: 2,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
        };
        let e = Entry {
            node: NodeId(42),
            generation: 3,
            attr,
            entry_ttl: Duration::new(1, 500),
            attr_ttl: Duration::new(86_400, 0),
        };
        assert_eq!(Entry::from_abi(&e.to_abi()), e);
        let s = Statfs {
            blocks: 1,
            bfree: 2,
            bavail: 3,
            files: 4,
            ffree: 5,
            bsize: 4096,
            namelen: 255,
            frsize: 512,
        };
        assert_eq!(Statfs::from(&s.to_abi()), s);
    }
}
