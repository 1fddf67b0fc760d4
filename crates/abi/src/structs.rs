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
        pub len: u32,
        pub opcode: u32,
        pub unique: u64,
        pub nodeid: u64,
        pub uid: u32,
        pub gid: u32,
        pub pid: u32,
        /// Length of extension records at the end of the request, in 8-byte units (7.38).
        pub total_extlen: u16,
        pub padding: u16,
    }
}

abi! {
    /// `fuse_out_header`: starts every reply and notification.
    pub struct OutHeader {
        pub len: u32,
        /// Zero or a negated errno; for notifications, the notify code.
        pub error: i32,
        pub unique: u64,
    }
}

abi! {
    /// `fuse_attr`.
    pub struct Attr {
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub rdev: u32,
        pub blksize: u32,
        pub flags: u32,
    }
}

abi! {
    /// `fuse_sx_time`: statx(2)'s timestamp layout.
    pub struct SxTime {
        pub tv_sec: i64,
        pub tv_nsec: u32,
        pub reserved: i32,
    }
}

abi! {
    /// `fuse_statx`: bit-compatible with `struct statx`'s first 256 bytes.
    pub struct Statx {
        pub mask: u32,
        pub blksize: u32,
        pub attributes: u64,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub mode: u16,
        pub spare0: u16,
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub attributes_mask: u64,
        pub atime: SxTime,
        pub btime: SxTime,
        pub ctime: SxTime,
        pub mtime: SxTime,
        pub rdev_major: u32,
        pub rdev_minor: u32,
        pub dev_major: u32,
        pub dev_minor: u32,
        pub spare2: [u64; 14],
    }
}

abi! {
    /// `fuse_kstatfs`.
    pub struct Kstatfs {
        pub blocks: u64,
        pub bfree: u64,
        pub bavail: u64,
        pub files: u64,
        pub ffree: u64,
        pub bsize: u32,
        pub namelen: u32,
        pub frsize: u32,
        pub padding: u32,
        pub spare: [u32; 6],
    }
}

abi! {
    /// `fuse_file_lock`.
    pub struct FileLock {
        pub start: u64,
        pub end: u64,
        /// F_RDLCK, F_WRLCK or F_UNLCK.
        pub typ: u32,
        pub pid: u32,
    }
}

abi! {
    /// `fuse_entry_out`: reply to LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
    pub struct EntryOut {
        pub nodeid: u64,
        pub generation: u64,
        pub entry_valid: u64,
        pub attr_valid: u64,
        pub entry_valid_nsec: u32,
        pub attr_valid_nsec: u32,
        pub attr: Attr,
    }
}

abi! { pub struct ForgetIn { pub nlookup: u64, } }
abi! { pub struct ForgetOne { pub nodeid: u64, pub nlookup: u64, } }
abi! { pub struct BatchForgetIn { pub count: u32, pub dummy: u32, } }
abi! { pub struct GetattrIn { pub getattr_flags: u32, pub dummy: u32, pub fh: u64, } }

abi! {
    /// `fuse_attr_out`: reply to GETATTR and SETATTR.
    pub struct AttrOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub dummy: u32,
        pub attr: Attr,
    }
}

abi! {
    /// `fuse_statx_in` (7.39).
    pub struct StatxIn {
        pub getattr_flags: u32,
        pub reserved: u32,
        pub fh: u64,
        pub sx_flags: u32,
        pub sx_mask: u32,
    }
}

abi! {
    /// `fuse_statx_out` (7.39).
    pub struct StatxOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub flags: u32,
        pub spare: [u64; 2],
        pub stat: Statx,
    }
}

abi! { pub struct MknodIn { pub mode: u32, pub rdev: u32, pub umask: u32, pub padding: u32, } }
abi! { pub struct MkdirIn { pub mode: u32, pub umask: u32, } }
abi! { pub struct RenameIn { pub newdir: u64, } }
abi! { pub struct Rename2In { pub newdir: u64, pub flags: u32, pub padding: u32, } }
abi! { pub struct LinkIn { pub oldnodeid: u64, } }

abi! {
    /// `fuse_setattr_in`.
    pub struct SetattrIn {
        pub valid: u32,
        pub padding: u32,
        pub fh: u64,
        pub size: u64,
        pub lock_owner: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub unused4: u32,
        pub uid: u32,
        pub gid: u32,
        pub unused5: u32,
    }
}

abi! { pub struct OpenIn { pub flags: u32, pub open_flags: u32, } }
abi! { pub struct CreateIn { pub flags: u32, pub mode: u32, pub umask: u32, pub open_flags: u32, } }

abi! {
    /// `fuse_open_out`. `backing_id` (7.40) names a passthrough backing file.
    pub struct OpenOut { pub fh: u64, pub open_flags: u32, pub backing_id: i32, }
}

abi! { pub struct ReleaseIn { pub fh: u64, pub flags: u32, pub release_flags: u32, pub lock_owner: u64, } }
abi! { pub struct FlushIn { pub fh: u64, pub unused: u32, pub padding: u32, pub lock_owner: u64, } }

abi! {
    /// `fuse_read_in`, also used by READDIR and READDIRPLUS.
    pub struct ReadIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub read_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
}

abi! {
    /// `fuse_write_in`; the data follows it.
    pub struct WriteIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub write_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
}

abi! { pub struct WriteOut { pub size: u32, pub padding: u32, } }
abi! { pub struct StatfsOut { pub st: Kstatfs, } }
abi! { pub struct FsyncIn { pub fh: u64, pub fsync_flags: u32, pub padding: u32, } }
abi! { pub struct SetxattrIn { pub size: u32, pub flags: u32, pub setxattr_flags: u32, pub padding: u32, } }
abi! { pub struct GetxattrIn { pub size: u32, pub padding: u32, } }
abi! { pub struct GetxattrOut { pub size: u32, pub padding: u32, } }
abi! { pub struct LkIn { pub fh: u64, pub owner: u64, pub lk: FileLock, pub lk_flags: u32, pub padding: u32, } }
abi! { pub struct LkOut { pub lk: FileLock, } }
abi! { pub struct AccessIn { pub mask: u32, pub padding: u32, } }

abi! {
    /// `fuse_init_in` as of 7.36; older kernels send only the first 16 bytes.
    pub struct InitIn {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub flags2: u32,
        pub unused: [u32; 11],
    }
}

abi! {
    /// `fuse_init_out` as of 7.43.
    pub struct InitOut {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub max_background: u16,
        pub congestion_threshold: u16,
        pub max_write: u32,
        pub time_gran: u32,
        pub max_pages: u16,
        pub map_alignment: u16,
        pub flags2: u32,
        pub max_stack_depth: u32,
        /// Seconds after which the kernel aborts an unanswered request (7.43).
        pub request_timeout: u16,
        pub unused: [u16; 11],
    }
}

abi! { pub struct InterruptIn { pub unique: u64, } }
abi! { pub struct BmapIn { pub block: u64, pub blocksize: u32, pub padding: u32, } }
abi! { pub struct BmapOut { pub block: u64, } }

abi! {
    /// `fuse_ioctl_in`; `in_size` bytes of input follow.
    pub struct IoctlIn {
        pub fh: u64,
        pub flags: u32,
        pub cmd: u32,
        pub arg: u64,
        pub in_size: u32,
        pub out_size: u32,
    }
}

abi! { pub struct IoctlIovec { pub base: u64, pub len: u64, } }
abi! { pub struct IoctlOut { pub result: i32, pub flags: u32, pub in_iovs: u32, pub out_iovs: u32, } }
abi! { pub struct PollIn { pub fh: u64, pub kh: u64, pub flags: u32, pub events: u32, } }
abi! { pub struct PollOut { pub revents: u32, pub padding: u32, } }
abi! { pub struct NotifyPollWakeupOut { pub kh: u64, } }
abi! { pub struct FallocateIn { pub fh: u64, pub offset: u64, pub length: u64, pub mode: u32, pub padding: u32, } }

abi! {
    /// `fuse_dirent` without its trailing name; records are 8-byte aligned.
    pub struct Dirent { pub ino: u64, pub off: u64, pub namelen: u32, pub typ: u32, }
}

abi! { pub struct NotifyInvalInodeOut { pub ino: u64, pub off: i64, pub len: i64, } }
abi! { pub struct NotifyInvalEntryOut { pub parent: u64, pub namelen: u32, pub flags: u32, } }
abi! { pub struct NotifyDeleteOut { pub parent: u64, pub child: u64, pub namelen: u32, pub padding: u32, } }
abi! { pub struct NotifyStoreOut { pub nodeid: u64, pub offset: u64, pub size: u32, pub padding: u32, } }
abi! { pub struct NotifyRetrieveOut { pub notify_unique: u64, pub nodeid: u64, pub offset: u64, pub size: u32, pub padding: u32, } }

abi! {
    /// `fuse_notify_retrieve_in`: the kernel's answer to a RETRIEVE
    /// notification arrives as a NOTIFY_REPLY request with this header.
    pub struct NotifyRetrieveIn {
        pub dummy1: u64,
        pub offset: u64,
        pub size: u32,
        pub dummy2: u32,
        pub dummy3: u64,
        pub dummy4: u64,
    }
}

abi! { pub struct NotifyPruneOut { pub count: u32, pub padding: u32, pub spare: u64, } }

abi! {
    /// `fuse_backing_map`: argument of FUSE_DEV_IOC_BACKING_OPEN.
    pub struct BackingMap { pub fd: i32, pub flags: u32, pub padding: u64, }
}

abi! { pub struct LseekIn { pub fh: u64, pub offset: u64, pub whence: u32, pub padding: u32, } }
abi! { pub struct LseekOut { pub offset: u64, } }

abi! {
    /// `fuse_copy_file_range_in`, for both COPY_FILE_RANGE and COPY_FILE_RANGE_64.
    pub struct CopyFileRangeIn {
        pub fh_in: u64,
        pub off_in: u64,
        pub nodeid_out: u64,
        pub fh_out: u64,
        pub off_out: u64,
        pub len: u64,
        pub flags: u64,
    }
}

abi! { pub struct CopyFileRangeOut { pub bytes_copied: u64, } }
abi! { pub struct SyncfsIn { pub padding: u64, } }
abi! { pub struct ExtHeader { pub size: u32, pub typ: u32, } }

abi! {
    /// `fuse_uring_ent_in_out`: per-entry bookkeeping in an io_uring header.
    pub struct UringEntInOut { pub flags: u64, pub commit_id: u64, pub payload_sz: u32, pub padding: u32, pub reserved: u64, }
}

/// `fuse_uring_req_header`: the fixed part of one io_uring ring entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UringReqHeader {
    /// An `InHeader` on the way in, an `OutHeader` on the way out.
    pub in_out: [u8; 128],
    /// The opcode's fixed argument struct.
    pub op_in: [u8; 128],
    pub ring_ent_in_out: UringEntInOut,
}

abi! {
    /// `fuse_uring_cmd_req`: lives in the 80-byte command area of a 128-byte SQE.
    pub struct UringCmdReq { pub flags: u64, pub commit_id: u64, pub qid: u16, pub padding: [u8; 6], }
}

/// Sub-commands of the io_uring FUSE command (`enum fuse_uring_cmd`).
pub mod uring_cmd {
    pub const REGISTER: u32 = 1;
    pub const COMMIT_AND_FETCH: u32 = 2;
}
