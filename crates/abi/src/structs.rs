//! The protocol's fixed-layout structs.
//!
//! Field names follow the kernel's. Every struct is `#[repr(C)]`, has no
//! implicit padding (the kernel pads by hand to 64-bit boundaries), and
//! derives zerocopy's traits so it can be read from and written to bytes
//! safely. `layout.rs` asserts each size.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! abi {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
    };
}

abi! {
    /// `fuse_in_header`: starts every request.
    pub struct InHeader {
        /// `fuse_in_header.len`: total request length in bytes, this header
        /// included.
        pub len: u32,
        /// `fuse_in_header.opcode`: which request this is (an `Opcode`).
        pub opcode: u32,
        /// `fuse_in_header.unique`: the request's id, echoed in the reply's
        /// `fuse_out_header.unique`.
        pub unique: u64,
        /// `fuse_in_header.nodeid`: the node the request is about (0 where
        /// none).
        pub nodeid: u64,
        /// `fuse_in_header.uid`: the caller's filesystem uid.
        pub uid: u32,
        /// `fuse_in_header.gid`: the caller's filesystem gid.
        pub gid: u32,
        /// `fuse_in_header.pid`: the calling thread's id; 0 when no process
        /// is behind the request or it is outside the mount's pid namespace.
        pub pid: u32,
        /// `fuse_in_header.total_extlen`: length of extension records at the
        /// end of the request, in 8-byte units (7.38).
        pub total_extlen: u16,
        /// `fuse_in_header.padding`: unused.
        pub padding: u16,
    }
}

abi! {
    /// `fuse_out_header`: starts every reply and notification.
    pub struct OutHeader {
        /// `fuse_out_header.len`: total reply length in bytes, this header
        /// included.
        pub len: u32,
        /// `fuse_out_header.error`: zero or a negated errno; for
        /// notifications, the notify code.
        pub error: i32,
        /// `fuse_out_header.unique`: the request answered; 0 for a
        /// notification.
        pub unique: u64,
    }
}

abi! {
    /// `fuse_attr`.
    pub struct Attr {
        /// `fuse_attr.ino`: inode number, as stat(2) reports it.
        pub ino: u64,
        /// `fuse_attr.size`: file size in bytes.
        pub size: u64,
        /// `fuse_attr.blocks`: space used, in 512-byte units.
        pub blocks: u64,
        /// `fuse_attr.atime`: last access, seconds since the epoch.
        pub atime: u64,
        /// `fuse_attr.mtime`: last data change, seconds since the epoch.
        pub mtime: u64,
        /// `fuse_attr.ctime`: last status change, seconds since the epoch.
        pub ctime: u64,
        /// `fuse_attr.atimensec`: nanosecond part of `atime`.
        pub atimensec: u32,
        /// `fuse_attr.mtimensec`: nanosecond part of `mtime`.
        pub mtimensec: u32,
        /// `fuse_attr.ctimensec`: nanosecond part of `ctime`.
        pub ctimensec: u32,
        /// `fuse_attr.mode`: file type and permission bits, as `st_mode`.
        pub mode: u32,
        /// `fuse_attr.nlink`: number of hard links.
        pub nlink: u32,
        /// `fuse_attr.uid`: owner.
        pub uid: u32,
        /// `fuse_attr.gid`: group.
        pub gid: u32,
        /// `fuse_attr.rdev`: device number, for device special files.
        pub rdev: u32,
        /// `fuse_attr.blksize`: preferred I/O size in bytes.
        pub blksize: u32,
        /// `fuse_attr.flags`: `attr::SUBMOUNT`, `attr::DAX`.
        pub flags: u32,
    }
}

abi! {
    /// `fuse_sx_time`: statx(2)'s timestamp layout.
    pub struct SxTime {
        /// `fuse_sx_time.tv_sec`: seconds since the epoch.
        pub tv_sec: i64,
        /// `fuse_sx_time.tv_nsec`: nanoseconds.
        pub tv_nsec: u32,
        /// `fuse_sx_time.__reserved`: unused.
        pub reserved: i32,
    }
}

abi! {
    /// `fuse_statx`: bit-compatible with `struct statx`'s first 256 bytes.
    pub struct Statx {
        /// `fuse_statx.mask`: which fields are filled in (statx(2)'s
        /// `STATX_*` bits).
        pub mask: u32,
        /// `fuse_statx.blksize`: preferred I/O size in bytes.
        pub blksize: u32,
        /// `fuse_statx.attributes`: `STATX_ATTR_*` bits (immutable,
        /// append-only, ...).
        pub attributes: u64,
        /// `fuse_statx.nlink`: number of hard links.
        pub nlink: u32,
        /// `fuse_statx.uid`: owner.
        pub uid: u32,
        /// `fuse_statx.gid`: group.
        pub gid: u32,
        /// `fuse_statx.mode`: file type and permission bits.
        pub mode: u16,
        /// `fuse_statx.__spare0`: unused.
        pub spare0: u16,
        /// `fuse_statx.ino`: inode number.
        pub ino: u64,
        /// `fuse_statx.size`: file size in bytes.
        pub size: u64,
        /// `fuse_statx.blocks`: space used, in 512-byte units.
        pub blocks: u64,
        /// `fuse_statx.attributes_mask`: which `attributes` bits the
        /// filesystem supports.
        pub attributes_mask: u64,
        /// `fuse_statx.atime`: last access.
        pub atime: SxTime,
        /// `fuse_statx.btime`: creation (birth) time.
        pub btime: SxTime,
        /// `fuse_statx.ctime`: last status change.
        pub ctime: SxTime,
        /// `fuse_statx.mtime`: last data change.
        pub mtime: SxTime,
        /// `fuse_statx.rdev_major`: major of the device number, for device
        /// special files.
        pub rdev_major: u32,
        /// `fuse_statx.rdev_minor`: minor of the device number, for device
        /// special files.
        pub rdev_minor: u32,
        /// `fuse_statx.dev_major`: major of the device the file lives on.
        pub dev_major: u32,
        /// `fuse_statx.dev_minor`: minor of the device the file lives on.
        pub dev_minor: u32,
        /// `fuse_statx.__spare2`: unused.
        pub spare2: [u64; 14],
    }
}

abi! {
    /// `fuse_kstatfs`.
    pub struct Kstatfs {
        /// `fuse_kstatfs.blocks`: size of the filesystem, in `frsize` units.
        pub blocks: u64,
        /// `fuse_kstatfs.bfree`: free blocks.
        pub bfree: u64,
        /// `fuse_kstatfs.bavail`: free blocks an unprivileged user may use.
        pub bavail: u64,
        /// `fuse_kstatfs.files`: total inodes.
        pub files: u64,
        /// `fuse_kstatfs.ffree`: free inodes.
        pub ffree: u64,
        /// `fuse_kstatfs.bsize`: preferred block size in bytes.
        pub bsize: u32,
        /// `fuse_kstatfs.namelen`: longest file name, in bytes.
        pub namelen: u32,
        /// `fuse_kstatfs.frsize`: fragment size: the unit of `blocks` (7.4).
        pub frsize: u32,
        /// `fuse_kstatfs.padding`: unused.
        pub padding: u32,
        /// `fuse_kstatfs.spare`: unused.
        pub spare: [u32; 6],
    }
}

abi! {
    /// `fuse_file_lock`.
    pub struct FileLock {
        /// `fuse_file_lock.start`: first byte of the range.
        pub start: u64,
        /// `fuse_file_lock.end`: last byte of the range, inclusive
        /// (`OFFSET_MAX` for to the end of the file).
        pub end: u64,
        /// `fuse_file_lock.type`: F_RDLCK, F_WRLCK or F_UNLCK.
        pub typ: u32,
        /// `fuse_file_lock.pid`: the owning process; in GETLK's answer, the
        /// holder of the conflicting lock.
        pub pid: u32,
    }
}

abi! {
    /// `fuse_entry_out`: reply to LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
    pub struct EntryOut {
        /// `fuse_entry_out.nodeid`: the node id the kernel uses for this name
        /// from now on.
        pub nodeid: u64,
        /// `fuse_entry_out.generation`: inode generation: node id and
        /// generation together must never repeat for the filesystem's
        /// lifetime (NFS file handles rely on it).
        pub generation: u64,
        /// `fuse_entry_out.entry_valid`: seconds the kernel may cache the name.
        pub entry_valid: u64,
        /// `fuse_entry_out.attr_valid`: seconds the kernel may cache `attr`.
        pub attr_valid: u64,
        /// `fuse_entry_out.entry_valid_nsec`: nanosecond part of `entry_valid`.
        pub entry_valid_nsec: u32,
        /// `fuse_entry_out.attr_valid_nsec`: nanosecond part of `attr_valid`.
        pub attr_valid_nsec: u32,
        /// `fuse_entry_out.attr`: the node's attributes.
        pub attr: Attr,
    }
}

abi! {
    /// `fuse_forget_in`: FORGET's argument; the kernel drops references to
    /// `fuse_in_header.nodeid`.
    pub struct ForgetIn {
        /// `fuse_forget_in.nlookup`: how many lookups the kernel forgets.
        pub nlookup: u64,
    }
}

abi! {
    /// `fuse_forget_one`: one node of a BATCH_FORGET.
    pub struct ForgetOne {
        /// `fuse_forget_one.nodeid`: the node forgotten.
        pub nodeid: u64,
        /// `fuse_forget_one.nlookup`: how many lookups the kernel forgets.
        pub nlookup: u64,
    }
}

abi! {
    /// `fuse_batch_forget_in`: BATCH_FORGET's argument; `count` `ForgetOne`s
    /// follow.
    pub struct BatchForgetIn {
        /// `fuse_batch_forget_in.count`: number of `ForgetOne` records that
        /// follow.
        pub count: u32,
        /// `fuse_batch_forget_in.dummy`: unused.
        pub dummy: u32,
    }
}

abi! {
    /// `fuse_getattr_in`: GETATTR's argument.
    pub struct GetattrIn {
        /// `fuse_getattr_in.getattr_flags`: `GETATTR_FH` when `fh` is valid.
        pub getattr_flags: u32,
        /// `fuse_getattr_in.dummy`: unused.
        pub dummy: u32,
        /// `fuse_getattr_in.fh`: the open file the call came through
        /// (fstat(2)).
        pub fh: u64,
    }
}

abi! {
    /// `fuse_attr_out`: reply to GETATTR and SETATTR.
    pub struct AttrOut {
        /// `fuse_attr_out.attr_valid`: seconds the kernel may cache `attr`.
        pub attr_valid: u64,
        /// `fuse_attr_out.attr_valid_nsec`: nanosecond part of `attr_valid`.
        pub attr_valid_nsec: u32,
        /// `fuse_attr_out.dummy`: unused.
        pub dummy: u32,
        /// `fuse_attr_out.attr`: the node's attributes.
        pub attr: Attr,
    }
}

abi! {
    /// `fuse_statx_in` (7.39).
    pub struct StatxIn {
        /// `fuse_statx_in.getattr_flags`: `GETATTR_FH` when `fh` is valid.
        pub getattr_flags: u32,
        /// `fuse_statx_in.reserved`: unused.
        pub reserved: u32,
        /// `fuse_statx_in.fh`: the open file the call came through.
        pub fh: u64,
        /// `fuse_statx_in.sx_flags`: statx(2)'s `AT_STATX_*` synchronisation
        /// flags.
        pub sx_flags: u32,
        /// `fuse_statx_in.sx_mask`: the `STATX_*` fields the caller asked for.
        pub sx_mask: u32,
    }
}

abi! {
    /// `fuse_statx_out` (7.39).
    pub struct StatxOut {
        /// `fuse_statx_out.attr_valid`: seconds the kernel may cache `stat`.
        pub attr_valid: u64,
        /// `fuse_statx_out.attr_valid_nsec`: nanosecond part of `attr_valid`.
        pub attr_valid_nsec: u32,
        /// `fuse_statx_out.flags`: no flags are defined; 0.
        pub flags: u32,
        /// `fuse_statx_out.spare`: unused.
        pub spare: [u64; 2],
        /// `fuse_statx_out.stat`: the node's attributes.
        pub stat: Statx,
    }
}

abi! {
    /// `fuse_mknod_in`: MKNOD's argument; the new name follows.
    pub struct MknodIn {
        /// `fuse_mknod_in.mode`: file type and permissions of the new node.
        pub mode: u32,
        /// `fuse_mknod_in.rdev`: device number, for device special files.
        pub rdev: u32,
        /// `fuse_mknod_in.umask`: the caller's umask, left for the filesystem
        /// to apply under `init::DONT_MASK` (7.12).
        pub umask: u32,
        /// `fuse_mknod_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_mkdir_in`: MKDIR's argument; the new name follows.
    pub struct MkdirIn {
        /// `fuse_mkdir_in.mode`: permissions of the new directory.
        pub mode: u32,
        /// `fuse_mkdir_in.umask`: the caller's umask, left for the filesystem
        /// to apply under `init::DONT_MASK`.
        pub umask: u32,
    }
}

abi! {
    /// `fuse_rename_in`: RENAME's argument; the old and new names follow.
    pub struct RenameIn {
        /// `fuse_rename_in.newdir`: node id of the directory the name moves to.
        pub newdir: u64,
    }
}

abi! {
    /// `fuse_rename2_in`: RENAME2's argument; the old and new names follow.
    pub struct Rename2In {
        /// `fuse_rename2_in.newdir`: node id of the directory the name moves
        /// to.
        pub newdir: u64,
        /// `fuse_rename2_in.flags`: renameat2(2) flags: `RENAME_NOREPLACE`,
        /// `RENAME_EXCHANGE`, `RENAME_WHITEOUT`.
        pub flags: u32,
        /// `fuse_rename2_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_link_in`: LINK's argument; `fuse_in_header.nodeid` is the new
    /// parent and the new name follows.
    pub struct LinkIn {
        /// `fuse_link_in.oldnodeid`: node id of the existing file.
        pub oldnodeid: u64,
    }
}

abi! {
    /// `fuse_setattr_in`.
    pub struct SetattrIn {
        /// `fuse_setattr_in.valid`: `fattr::*` bits saying which of the
        /// fields below are set.
        pub valid: u32,
        /// `fuse_setattr_in.padding`: unused.
        pub padding: u32,
        /// `fuse_setattr_in.fh`: the open file the change came through, with
        /// `fattr::FH`.
        pub fh: u64,
        /// `fuse_setattr_in.size`: new size in bytes (truncate).
        pub size: u64,
        /// `fuse_setattr_in.lock_owner`: the caller's lock owner, with
        /// `fattr::LOCKOWNER`.
        pub lock_owner: u64,
        /// `fuse_setattr_in.atime`: new last access time, seconds since the
        /// epoch.
        pub atime: u64,
        /// `fuse_setattr_in.mtime`: new last data change time, seconds since
        /// the epoch.
        pub mtime: u64,
        /// `fuse_setattr_in.ctime`: new status change time, seconds since the
        /// epoch.
        pub ctime: u64,
        /// `fuse_setattr_in.atimensec`: nanosecond part of `atime`.
        pub atimensec: u32,
        /// `fuse_setattr_in.mtimensec`: nanosecond part of `mtime`.
        pub mtimensec: u32,
        /// `fuse_setattr_in.ctimensec`: nanosecond part of `ctime`.
        pub ctimensec: u32,
        /// `fuse_setattr_in.mode`: new permission bits.
        pub mode: u32,
        /// `fuse_setattr_in.unused4`: unused.
        pub unused4: u32,
        /// `fuse_setattr_in.uid`: new owner.
        pub uid: u32,
        /// `fuse_setattr_in.gid`: new group.
        pub gid: u32,
        /// `fuse_setattr_in.unused5`: unused.
        pub unused5: u32,
    }
}

abi! {
    /// `fuse_open_in`: OPEN's and OPENDIR's argument.
    pub struct OpenIn {
        /// `fuse_open_in.flags`: the caller's open(2) flags, less O_CREAT,
        /// O_EXCL and O_NOCTTY.
        pub flags: u32,
        /// `fuse_open_in.open_flags`: `open_in::*` bits.
        pub open_flags: u32,
    }
}

abi! {
    /// `fuse_create_in`: CREATE's (and TMPFILE's) argument; the new name
    /// follows.
    pub struct CreateIn {
        /// `fuse_create_in.flags`: the caller's open(2) flags.
        pub flags: u32,
        /// `fuse_create_in.mode`: file type and permissions of the new file.
        pub mode: u32,
        /// `fuse_create_in.umask`: the caller's umask, left for the
        /// filesystem to apply under `init::DONT_MASK`.
        pub umask: u32,
        /// `fuse_create_in.open_flags`: `open_in::*` bits.
        pub open_flags: u32,
    }
}

abi! {
    /// `fuse_open_out`. `backing_id` (7.40) names a passthrough backing file.
    pub struct OpenOut {
        /// `fuse_open_out.fh`: the handle the filesystem chose; every request
        /// on this open file carries it back.
        pub fh: u64,
        /// `fuse_open_out.open_flags`: `fopen::*` bits.
        pub open_flags: u32,
        /// `fuse_open_out.backing_id`: with `fopen::PASSTHROUGH`, the backing
        /// file registered by `DEV_IOC_BACKING_OPEN`.
        pub backing_id: i32,
    }
}

abi! {
    /// `fuse_release_in`: RELEASE's and RELEASEDIR's argument.
    pub struct ReleaseIn {
        /// `fuse_release_in.fh`: the handle being closed.
        pub fh: u64,
        /// `fuse_release_in.flags`: the open(2) flags the file was opened with.
        pub flags: u32,
        /// `fuse_release_in.release_flags`: `release::*` bits.
        pub release_flags: u32,
        /// `fuse_release_in.lock_owner`: the owner whose flock(2) lock to
        /// drop, with `release::FLOCK_UNLOCK`.
        pub lock_owner: u64,
    }
}

abi! {
    /// `fuse_flush_in`: FLUSH's argument, sent on every close(2) of a
    /// descriptor.
    pub struct FlushIn {
        /// `fuse_flush_in.fh`: the open file being closed.
        pub fh: u64,
        /// `fuse_flush_in.unused`: unused.
        pub unused: u32,
        /// `fuse_flush_in.padding`: unused.
        pub padding: u32,
        /// `fuse_flush_in.lock_owner`: the closing process's lock owner,
        /// whose POSIX locks go with it.
        pub lock_owner: u64,
    }
}

abi! {
    /// `fuse_read_in`, also used by READDIR and READDIRPLUS.
    pub struct ReadIn {
        /// `fuse_read_in.fh`: the open file (or directory) read.
        pub fh: u64,
        /// `fuse_read_in.offset`: where to start: a byte offset, or for
        /// READDIR the `off` of the last entry returned.
        pub offset: u64,
        /// `fuse_read_in.size`: most bytes the reply may carry.
        pub size: u32,
        /// `fuse_read_in.read_flags`: `READ_LOCKOWNER` when `lock_owner` is
        /// valid.
        pub read_flags: u32,
        /// `fuse_read_in.lock_owner`: the caller's lock owner.
        pub lock_owner: u64,
        /// `fuse_read_in.flags`: the open(2) flags of the file (7.9).
        pub flags: u32,
        /// `fuse_read_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_write_in`; the data follows it.
    pub struct WriteIn {
        /// `fuse_write_in.fh`: the open file written.
        pub fh: u64,
        /// `fuse_write_in.offset`: byte offset to write at.
        pub offset: u64,
        /// `fuse_write_in.size`: bytes of data that follow.
        pub size: u32,
        /// `fuse_write_in.write_flags`: `write::*` bits.
        pub write_flags: u32,
        /// `fuse_write_in.lock_owner`: the caller's lock owner, with
        /// `write::LOCKOWNER`.
        pub lock_owner: u64,
        /// `fuse_write_in.flags`: the open(2) flags of the file (7.9).
        pub flags: u32,
        /// `fuse_write_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_write_out`: WRITE's reply (and COPY_FILE_RANGE's).
    pub struct WriteOut {
        /// `fuse_write_out.size`: bytes written.
        pub size: u32,
        /// `fuse_write_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_statfs_out`: STATFS's reply.
    pub struct StatfsOut {
        /// `fuse_statfs_out.st`: the filesystem's figures.
        pub st: Kstatfs,
    }
}

abi! {
    /// `fuse_fsync_in`: FSYNC's and FSYNCDIR's argument.
    pub struct FsyncIn {
        /// `fuse_fsync_in.fh`: the open file to sync.
        pub fh: u64,
        /// `fuse_fsync_in.fsync_flags`: `FSYNC_FDATASYNC` for fdatasync(2):
        /// data only.
        pub fsync_flags: u32,
        /// `fuse_fsync_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_setxattr_in`: SETXATTR's argument; the name and value follow.
    pub struct SetxattrIn {
        /// `fuse_setxattr_in.size`: length of the value in bytes.
        pub size: u32,
        /// `fuse_setxattr_in.flags`: setxattr(2) flags: `XATTR_CREATE`,
        /// `XATTR_REPLACE`.
        pub flags: u32,
        /// `fuse_setxattr_in.setxattr_flags`: `SETXATTR_ACL_KILL_SGID`; sent
        /// only under `init::SETXATTR_EXT` (7.33).
        pub setxattr_flags: u32,
        /// `fuse_setxattr_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_getxattr_in`: GETXATTR's and LISTXATTR's argument (GETXATTR's
    /// name follows).
    pub struct GetxattrIn {
        /// `fuse_getxattr_in.size`: the caller's buffer size; 0 asks only for
        /// the size needed.
        pub size: u32,
        /// `fuse_getxattr_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_getxattr_out`: the reply to GETXATTR or LISTXATTR asked with
    /// size 0.
    pub struct GetxattrOut {
        /// `fuse_getxattr_out.size`: bytes the value (or the list) needs.
        pub size: u32,
        /// `fuse_getxattr_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_lk_in`: GETLK's, SETLK's and SETLKW's argument.
    pub struct LkIn {
        /// `fuse_lk_in.fh`: the open file the lock is on.
        pub fh: u64,
        /// `fuse_lk_in.owner`: the lock owner (a per-process or per-open-file
        /// cookie).
        pub owner: u64,
        /// `fuse_lk_in.lk`: the lock asked about, taken or released.
        pub lk: FileLock,
        /// `fuse_lk_in.lk_flags`: `LK_FLOCK` when the lock came from flock(2).
        pub lk_flags: u32,
        /// `fuse_lk_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_lk_out`: GETLK's reply.
    pub struct LkOut {
        /// `fuse_lk_out.lk`: the conflicting lock, or the request's with type
        /// F_UNLCK if none.
        pub lk: FileLock,
    }
}

abi! {
    /// `fuse_access_in`: ACCESS's argument.
    pub struct AccessIn {
        /// `fuse_access_in.mask`: access(2) mode: `R_OK`, `W_OK`, `X_OK`
        /// bits, or `F_OK`.
        pub mask: u32,
        /// `fuse_access_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_init_in` as of 7.36; older kernels send only the first 16 bytes.
    pub struct InitIn {
        /// `fuse_init_in.major`: the kernel's protocol major version.
        pub major: u32,
        /// `fuse_init_in.minor`: the kernel's protocol minor version.
        pub minor: u32,
        /// `fuse_init_in.max_readahead`: most readahead the kernel will do,
        /// in bytes.
        pub max_readahead: u32,
        /// `fuse_init_in.flags`: `init::*` bits 0..31 the kernel offers.
        pub flags: u32,
        /// `fuse_init_in.flags2`: `init::*` bits 32..63, with
        /// `init::INIT_EXT` (7.36).
        pub flags2: u32,
        /// `fuse_init_in.unused`: unused.
        pub unused: [u32; 11],
    }
}

abi! {
    /// `fuse_init_out` as of 7.43.
    pub struct InitOut {
        /// `fuse_init_out.major`: the protocol major version the server speaks.
        pub major: u32,
        /// `fuse_init_out.minor`: the protocol minor version the server speaks.
        pub minor: u32,
        /// `fuse_init_out.max_readahead`: most readahead the server wants, in
        /// bytes.
        pub max_readahead: u32,
        /// `fuse_init_out.flags`: `init::*` bits 0..31 the server takes up.
        pub flags: u32,
        /// `fuse_init_out.max_background`: most background requests
        /// (readahead, writeback) the kernel keeps outstanding.
        pub max_background: u16,
        /// `fuse_init_out.congestion_threshold`: outstanding background
        /// requests past which the kernel reports congestion.
        pub congestion_threshold: u16,
        /// `fuse_init_out.max_write`: largest WRITE payload, in bytes.
        pub max_write: u32,
        /// `fuse_init_out.time_gran`: timestamp granularity in nanoseconds
        /// (7.23).
        pub time_gran: u32,
        /// `fuse_init_out.max_pages`: most pages per request, with
        /// `init::MAX_PAGES` (7.28).
        pub max_pages: u16,
        /// `fuse_init_out.map_alignment`: log2 of the DAX mapping alignment,
        /// with `init::MAP_ALIGNMENT`.
        pub map_alignment: u16,
        /// `fuse_init_out.flags2`: `init::*` bits 32..63, with
        /// `init::INIT_EXT` (7.36).
        pub flags2: u32,
        /// `fuse_init_out.max_stack_depth`: how many filesystems deep a
        /// passthrough backing file may be stacked (7.40).
        pub max_stack_depth: u32,
        /// `fuse_init_out.request_timeout`: seconds after which the kernel
        /// aborts an unanswered request (7.43).
        pub request_timeout: u16,
        /// `fuse_init_out.unused`: unused.
        pub unused: [u16; 11],
    }
}

abi! {
    /// `fuse_interrupt_in`: INTERRUPT's argument.
    pub struct InterruptIn {
        /// `fuse_interrupt_in.unique`: the `unique` of the request the caller
        /// gave up on.
        pub unique: u64,
    }
}

abi! {
    /// `fuse_bmap_in`: BMAP's argument (block-device-backed mounts).
    pub struct BmapIn {
        /// `fuse_bmap_in.block`: block number within the file.
        pub block: u64,
        /// `fuse_bmap_in.blocksize`: block size in bytes.
        pub blocksize: u32,
        /// `fuse_bmap_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_bmap_out`: BMAP's reply.
    pub struct BmapOut {
        /// `fuse_bmap_out.block`: block number on the device.
        pub block: u64,
    }
}

abi! {
    /// `fuse_ioctl_in`; `in_size` bytes of input follow.
    pub struct IoctlIn {
        /// `fuse_ioctl_in.fh`: the open file the ioctl is on.
        pub fh: u64,
        /// `fuse_ioctl_in.flags`: `ioctl::*` bits.
        pub flags: u32,
        /// `fuse_ioctl_in.cmd`: the ioctl request number.
        pub cmd: u32,
        /// `fuse_ioctl_in.arg`: the ioctl's argument: a value, or an address
        /// in the caller's memory.
        pub arg: u64,
        /// `fuse_ioctl_in.in_size`: bytes of input that follow.
        pub in_size: u32,
        /// `fuse_ioctl_in.out_size`: most bytes of output the reply may carry.
        pub out_size: u32,
    }
}

abi! {
    /// `fuse_ioctl_iovec`: a buffer in the caller's memory, named in an ioctl
    /// retry.
    pub struct IoctlIovec {
        /// `fuse_ioctl_iovec.base`: address in the caller's memory.
        pub base: u64,
        /// `fuse_ioctl_iovec.len`: length in bytes.
        pub len: u64,
    }
}

abi! {
    /// `fuse_ioctl_out`: IOCTL's reply; output data or retry iovecs follow.
    pub struct IoctlOut {
        /// `fuse_ioctl_out.result`: the ioctl's return value.
        pub result: i32,
        /// `fuse_ioctl_out.flags`: `ioctl::RETRY` to be called again with the
        /// iovecs that follow.
        pub flags: u32,
        /// `fuse_ioctl_out.in_iovs`: number of input iovecs that follow, for
        /// a retry.
        pub in_iovs: u32,
        /// `fuse_ioctl_out.out_iovs`: number of output iovecs that follow,
        /// for a retry.
        pub out_iovs: u32,
    }
}

abi! {
    /// `fuse_poll_in`: POLL's argument.
    pub struct PollIn {
        /// `fuse_poll_in.fh`: the open file polled.
        pub fh: u64,
        /// `fuse_poll_in.kh`: the kernel's poll handle, to name in a later
        /// NOTIFY_POLL.
        pub kh: u64,
        /// `fuse_poll_in.flags`: `POLL_SCHEDULE_NOTIFY` when the kernel wants
        /// that notification.
        pub flags: u32,
        /// `fuse_poll_in.events`: poll(2) events the caller waits for (7.21).
        pub events: u32,
    }
}

abi! {
    /// `fuse_poll_out`: POLL's reply.
    pub struct PollOut {
        /// `fuse_poll_out.revents`: poll(2) events ready now.
        pub revents: u32,
        /// `fuse_poll_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_notify_poll_wakeup_out`: NOTIFY_POLL's body.
    pub struct NotifyPollWakeupOut {
        /// `fuse_notify_poll_wakeup_out.kh`: the poll handle from
        /// `fuse_poll_in.kh` whose waiters to wake.
        pub kh: u64,
    }
}

abi! {
    /// `fuse_fallocate_in`: FALLOCATE's argument.
    pub struct FallocateIn {
        /// `fuse_fallocate_in.fh`: the open file.
        pub fh: u64,
        /// `fuse_fallocate_in.offset`: first byte of the range.
        pub offset: u64,
        /// `fuse_fallocate_in.length`: length of the range in bytes.
        pub length: u64,
        /// `fuse_fallocate_in.mode`: fallocate(2) mode bits (`FALLOC_FL_*`).
        pub mode: u32,
        /// `fuse_fallocate_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_dirent` without its trailing name; records are 8-byte aligned.
    pub struct Dirent {
        /// `fuse_dirent.ino`: inode number.
        pub ino: u64,
        /// `fuse_dirent.off`: where the next READDIR continues after this
        /// entry.
        pub off: u64,
        /// `fuse_dirent.namelen`: length of the name that follows, in bytes.
        pub namelen: u32,
        /// `fuse_dirent.type`: file type as in `d_type` (`DT_*`).
        pub typ: u32,
    }
}

abi! {
    /// `fuse_notify_inval_inode_out`: NOTIFY_INVAL_INODE's body.
    pub struct NotifyInvalInodeOut {
        /// `fuse_notify_inval_inode_out.ino`: node id of the inode.
        pub ino: u64,
        /// `fuse_notify_inval_inode_out.off`: first byte of cached data to
        /// drop; negative drops only the attributes.
        pub off: i64,
        /// `fuse_notify_inval_inode_out.len`: bytes to drop; 0 or less means
        /// to the end of the file.
        pub len: i64,
    }
}

abi! {
    /// `fuse_notify_inval_entry_out`: NOTIFY_INVAL_ENTRY's body; the name
    /// follows.
    pub struct NotifyInvalEntryOut {
        /// `fuse_notify_inval_entry_out.parent`: node id of the directory.
        pub parent: u64,
        /// `fuse_notify_inval_entry_out.namelen`: length of the name that
        /// follows, in bytes.
        pub namelen: u32,
        /// `fuse_notify_inval_entry_out.flags`: `EXPIRE_ONLY` to expire the
        /// entry rather than drop it.
        pub flags: u32,
    }
}

abi! {
    /// `fuse_notify_delete_out`: NOTIFY_DELETE's body; the name follows.
    pub struct NotifyDeleteOut {
        /// `fuse_notify_delete_out.parent`: node id of the directory.
        pub parent: u64,
        /// `fuse_notify_delete_out.child`: node id the name pointed to.
        pub child: u64,
        /// `fuse_notify_delete_out.namelen`: length of the name that follows,
        /// in bytes.
        pub namelen: u32,
        /// `fuse_notify_delete_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_notify_store_out`: NOTIFY_STORE's body; the data follows.
    pub struct NotifyStoreOut {
        /// `fuse_notify_store_out.nodeid`: node id of the file.
        pub nodeid: u64,
        /// `fuse_notify_store_out.offset`: byte offset to store the data at.
        pub offset: u64,
        /// `fuse_notify_store_out.size`: bytes of data that follow.
        pub size: u32,
        /// `fuse_notify_store_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_notify_retrieve_out`: NOTIFY_RETRIEVE's body.
    pub struct NotifyRetrieveOut {
        /// `fuse_notify_retrieve_out.notify_unique`: an id the kernel's
        /// NOTIFY_REPLY will carry back as its `unique`.
        pub notify_unique: u64,
        /// `fuse_notify_retrieve_out.nodeid`: node id of the file.
        pub nodeid: u64,
        /// `fuse_notify_retrieve_out.offset`: first byte wanted.
        pub offset: u64,
        /// `fuse_notify_retrieve_out.size`: most bytes wanted.
        pub size: u32,
        /// `fuse_notify_retrieve_out.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_notify_retrieve_in`: the kernel's answer to a RETRIEVE
    /// notification arrives as a NOTIFY_REPLY request with this header.
    pub struct NotifyRetrieveIn {
        /// `fuse_notify_retrieve_in.dummy1`: unused.
        pub dummy1: u64,
        /// `fuse_notify_retrieve_in.offset`: byte offset of the data that
        /// follows.
        pub offset: u64,
        /// `fuse_notify_retrieve_in.size`: bytes of data that follow.
        pub size: u32,
        /// `fuse_notify_retrieve_in.dummy2`: unused.
        pub dummy2: u32,
        /// `fuse_notify_retrieve_in.dummy3`: unused.
        pub dummy3: u64,
        /// `fuse_notify_retrieve_in.dummy4`: unused.
        pub dummy4: u64,
    }
}

abi! {
    /// `fuse_notify_prune_out`: NOTIFY_PRUNE's body; `count` node ids follow
    /// (7.45).
    pub struct NotifyPruneOut {
        /// `fuse_notify_prune_out.count`: number of node ids that follow.
        pub count: u32,
        /// `fuse_notify_prune_out.padding`: unused.
        pub padding: u32,
        /// `fuse_notify_prune_out.spare`: unused.
        pub spare: u64,
    }
}

abi! {
    /// `fuse_backing_map`: argument of FUSE_DEV_IOC_BACKING_OPEN.
    pub struct BackingMap {
        /// `fuse_backing_map.fd`: descriptor of the backing file, in the
        /// server's process.
        pub fd: i32,
        /// `fuse_backing_map.flags`: no flags are defined at this protocol
        /// version; 0.
        pub flags: u32,
        /// `fuse_backing_map.padding`: unused.
        pub padding: u64,
    }
}

abi! {
    /// `fuse_lseek_in`: LSEEK's argument (the kernel sends only SEEK_DATA and
    /// SEEK_HOLE).
    pub struct LseekIn {
        /// `fuse_lseek_in.fh`: the open file.
        pub fh: u64,
        /// `fuse_lseek_in.offset`: where to start looking.
        pub offset: u64,
        /// `fuse_lseek_in.whence`: `SEEK_DATA` or `SEEK_HOLE`.
        pub whence: u32,
        /// `fuse_lseek_in.padding`: unused.
        pub padding: u32,
    }
}

abi! {
    /// `fuse_lseek_out`: LSEEK's reply.
    pub struct LseekOut {
        /// `fuse_lseek_out.offset`: the offset found.
        pub offset: u64,
    }
}

abi! {
    /// `fuse_copy_file_range_in`, for both COPY_FILE_RANGE and COPY_FILE_RANGE_64.
    pub struct CopyFileRangeIn {
        /// `fuse_copy_file_range_in.fh_in`: the source's open file (the
        /// source node is `fuse_in_header.nodeid`).
        pub fh_in: u64,
        /// `fuse_copy_file_range_in.off_in`: byte offset in the source.
        pub off_in: u64,
        /// `fuse_copy_file_range_in.nodeid_out`: node id of the destination
        /// file.
        pub nodeid_out: u64,
        /// `fuse_copy_file_range_in.fh_out`: the destination's open file.
        pub fh_out: u64,
        /// `fuse_copy_file_range_in.off_out`: byte offset in the destination.
        pub off_out: u64,
        /// `fuse_copy_file_range_in.len`: bytes to copy.
        pub len: u64,
        /// `fuse_copy_file_range_in.flags`: copy_file_range(2) flags.
        pub flags: u64,
    }
}

abi! {
    /// `fuse_copy_file_range_out`: COPY_FILE_RANGE_64's reply (7.45), wide
    /// enough for copies of 4 GiB and more.
    pub struct CopyFileRangeOut {
        /// `fuse_copy_file_range_out.bytes_copied`: bytes copied.
        pub bytes_copied: u64,
    }
}

abi! {
    /// `fuse_syncfs_in`: SYNCFS's argument.
    pub struct SyncfsIn {
        /// `fuse_syncfs_in.padding`: unused.
        pub padding: u64,
    }
}

abi! {
    /// `fuse_ext_header`: heads each extension record after a request's
    /// arguments (see `InHeader::total_extlen`).
    pub struct ExtHeader {
        /// `fuse_ext_header.size`: length of the record in bytes, this header
        /// included; a multiple of 8.
        pub size: u32,
        /// `fuse_ext_header.type`: what the record holds (security context,
        /// supplementary groups).
        pub typ: u32,
    }
}

abi! {
    /// `fuse_uring_ent_in_out`: per-entry bookkeeping in an io_uring header.
    pub struct UringEntInOut {
        /// `fuse_uring_ent_in_out.flags`: no flags are defined; 0.
        pub flags: u64,
        /// `fuse_uring_ent_in_out.commit_id`: id to name in
        /// `fuse_uring_cmd_req.commit_id` when committing this entry's reply.
        pub commit_id: u64,
        /// `fuse_uring_ent_in_out.payload_sz`: bytes used in the entry's
        /// payload buffer, in either direction.
        pub payload_sz: u32,
        /// `fuse_uring_ent_in_out.padding`: unused.
        pub padding: u32,
        /// `fuse_uring_ent_in_out.reserved`: unused.
        pub reserved: u64,
    }
}

/// `fuse_uring_req_header`: the fixed part of one io_uring ring entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UringReqHeader {
    /// `fuse_uring_req_header.in_out`: an `InHeader` on the way in, an
    /// `OutHeader` on the way out.
    pub in_out: [u8; 128],
    /// `fuse_uring_req_header.op_in`: the opcode's fixed argument struct.
    pub op_in: [u8; 128],
    /// `fuse_uring_req_header.ring_ent_in_out`: the entry's commit id and
    /// payload size.
    pub ring_ent_in_out: UringEntInOut,
}

abi! {
    /// `fuse_uring_cmd_req`: lives in the 80-byte command area of a 128-byte SQE.
    pub struct UringCmdReq {
        /// `fuse_uring_cmd_req.flags`: no flags are defined; 0.
        pub flags: u64,
        /// `fuse_uring_cmd_req.commit_id`: the entry whose reply is committed
        /// (COMMIT_AND_FETCH).
        pub commit_id: u64,
        /// `fuse_uring_cmd_req.qid`: index of the queue the command is for
        /// (one per CPU).
        pub qid: u16,
        /// `fuse_uring_cmd_req.padding`: unused.
        pub padding: [u8; 6],
    }
}

/// Sub-commands of the io_uring FUSE command (`enum fuse_uring_cmd`).
pub mod uring_cmd {
    /// `FUSE_IO_URING_CMD_REGISTER`: hand the kernel an entry's buffers and
    /// wait for a request in them.
    pub const REGISTER: u32 = 1;
    /// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: send the entry's reply and wait
    /// for the next request in the same buffers.
    pub const COMMIT_AND_FETCH: u32 = 2;
}
