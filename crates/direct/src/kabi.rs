//! The kernel structs direct mode fills for the application, written from
//! the x86_64 uapi headers (asm/stat.h; linux/dirent.h's linux_dirent64
//! as getdents64(2) documents it). `struct statx` is the protocol's
//! `fuse_statx`, which has its layout.

use zerocopy::{Immutable, IntoBytes};

use fusebox::abi::{Statx, SxTime};
use fusebox::types::FileAttr;

/// `struct stat` (x86_64 asm/stat.h): 144 bytes.
#[derive(IntoBytes, Immutable, Default)]
#[repr(C)]
pub(crate) struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub pad0: u32,
    pub rdev: u64,
    pub size: i64,
    pub blksize: i64,
    pub blocks: i64,
    pub atime: u64,
    pub atime_nsec: u64,
    pub mtime: u64,
    pub mtime_nsec: u64,
    pub ctime: u64,
    pub ctime_nsec: u64,
    pub unused: [i64; 3],
}

const _: () = assert!(size_of::<Stat>() == 144);

/// The device number the virtual mount's files report (st_dev): an
/// anonymous-device major (0) with a minor no real mount here has, so
/// tools that compare st_dev (find -xdev, du, cp -a) see one filesystem.
pub(crate) const VIRTUAL_DEV_MINOR: u32 = 0xfb5e;

/// STATX_BASIC_STATS: what a FUSE attribute reply carries.
const STATX_BASIC_STATS: u32 = 0x7ff;

pub(crate) fn stat_of(a: &FileAttr) -> Stat {
    Stat {
        dev: libc::makedev(0, VIRTUAL_DEV_MINOR),
        ino: a.ino,
        nlink: u64::from(a.nlink),
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        rdev: u64::from(a.rdev),
        size: a.size as i64,
        blksize: i64::from(if a.blksize == 0 { 4096 } else { a.blksize }),
        blocks: a.blocks as i64,
        atime: a.atime.sec as u64,
        atime_nsec: u64::from(a.atime.nsec),
        mtime: a.mtime.sec as u64,
        mtime_nsec: u64::from(a.mtime.nsec),
        ctime: a.ctime.sec as u64,
        ctime_nsec: u64::from(a.ctime.nsec),
        ..Default::default()
    }
}

pub(crate) fn statx_of(a: &FileAttr) -> Statx {
    let t = |s: &fusebox::types::Timespec| SxTime {
        tv_sec: s.sec,
        tv_nsec: s.nsec,
        reserved: 0,
    };
    Statx {
        mask: STATX_BASIC_STATS,
        blksize: if a.blksize == 0 { 4096 } else { a.blksize },
        attributes: 0,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        mode: a.mode as u16,
        spare0: 0,
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        attributes_mask: 0,
        atime: t(&a.atime),
        btime: SxTime::default(),
        ctime: t(&a.ctime),
        mtime: t(&a.mtime),
        rdev_major: libc::major(u64::from(a.rdev)),
        rdev_minor: libc::minor(u64::from(a.rdev)),
        dev_major: 0,
        dev_minor: VIRTUAL_DEV_MINOR,
        spare2: [0; 14],
    }
}

/// Append one `linux_dirent64` record to `out` if it fits in `room`.
pub(crate) fn push_dirent64(
    out: &mut Vec<u8>,
    room: usize,
    ino: u64,
    off: u64,
    typ: u8,
    name: &[u8],
) -> bool {
    // d_ino, d_off, d_reclen, d_type, name, NUL, padded to 8.
    let len = (8 + 8 + 2 + 1 + name.len() + 1).next_multiple_of(8);
    if out.len() + len > room {
        return false;
    }
    out.extend_from_slice(&ino.to_ne_bytes());
    out.extend_from_slice(&off.to_ne_bytes());
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.push(typ);
    out.extend_from_slice(name);
    out.resize(out.len() + len - (8 + 8 + 2 + 1 + name.len()), 0);
    true
}

/// `struct statfs` (x86_64 asm/statfs.h, 64-bit fields): 120 bytes.
#[derive(IntoBytes, Immutable, Default)]
#[repr(C)]
pub(crate) struct KStatfs {
    pub kind: i64,
    pub bsize: i64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub fsid: [i32; 2],
    pub namelen: i64,
    pub frsize: i64,
    pub flags: i64,
    pub spare: [i64; 4],
}

const _: () = assert!(size_of::<KStatfs>() == 120);

/// What statfs(2) says of a FUSE mount: its magic number.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

pub(crate) fn statfs_of(s: &fusebox::types::Statfs) -> KStatfs {
    KStatfs {
        kind: FUSE_SUPER_MAGIC,
        bsize: i64::from(s.bsize),
        blocks: s.blocks,
        bfree: s.bfree,
        bavail: s.bavail,
        files: s.files,
        ffree: s.ffree,
        namelen: i64::from(s.namelen),
        frsize: i64::from(if s.frsize == 0 { s.bsize } else { s.frsize }),
        ..Default::default()
    }
}
