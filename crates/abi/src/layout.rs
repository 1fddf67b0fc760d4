//! Compile-time checks that each struct has the size the kernel expects.

use crate::structs::*;
use core::mem::size_of;

macro_rules! assert_size {
    ($($t:ty = $n:expr),* $(,)?) => { $(const _: () = assert!(size_of::<$t>() == $n);)* };
}

assert_size! {
    InHeader = 40, OutHeader = 16, Attr = 88, SxTime = 16, Statx = 256,
    Kstatfs = 80, FileLock = 24, EntryOut = 128, ForgetIn = 8, ForgetOne = 16,
    BatchForgetIn = 8, GetattrIn = 16, AttrOut = 104, StatxIn = 24, StatxOut = 288,
    MknodIn = 16, MkdirIn = 8, RenameIn = 8, Rename2In = 16, LinkIn = 8,
    SetattrIn = 88, OpenIn = 8, CreateIn = 16, OpenOut = 16, ReleaseIn = 24,
    FlushIn = 24, ReadIn = 40, WriteIn = 40, WriteOut = 8, StatfsOut = 80,
    FsyncIn = 16, SetxattrIn = 16, GetxattrIn = 8, GetxattrOut = 8, LkIn = 48,
    LkOut = 24, AccessIn = 8, InitIn = 64, InitOut = 64, InterruptIn = 8,
    BmapIn = 16, BmapOut = 8, IoctlIn = 32, IoctlIovec = 16, IoctlOut = 16,
    PollIn = 24, PollOut = 8, NotifyPollWakeupOut = 8, FallocateIn = 32,
    Dirent = 24, NotifyInvalInodeOut = 24, NotifyInvalEntryOut = 16,
    NotifyDeleteOut = 24, NotifyStoreOut = 24, NotifyRetrieveOut = 32,
    NotifyRetrieveIn = 40, NotifyPruneOut = 16, BackingMap = 16, LseekIn = 24,
    LseekOut = 8, CopyFileRangeIn = 56, CopyFileRangeOut = 8, SyncfsIn = 8,
    ExtHeader = 8, UringEntInOut = 32, UringReqHeader = 288, UringCmdReq = 24,
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::{FromBytes, IntoBytes};

    /// Byte-exact: the kernel reads little-endian fields at fixed offsets.
    #[test]
    fn in_header_field_offsets() {
        let h = InHeader {
            len: 0x0102_0304,
            opcode: 26,
            unique: 0x1122_3344_5566_7788,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            total_extlen: 3,
            padding: 0,
        };
        let b = h.as_bytes();
        assert_eq!(&b[0..4], &0x0102_0304u32.to_le_bytes());
        assert_eq!(&b[4..8], &26u32.to_le_bytes());
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[24..28], &1000u32.to_le_bytes());
        assert_eq!(&b[36..38], &3u16.to_le_bytes());
        assert_eq!(InHeader::read_from_bytes(b).unwrap(), h);
    }

    #[test]
    fn init_out_tail_offsets() {
        let o = InitOut {
            max_pages: 7,
            flags2: 9,
            request_timeout: 5,
            ..Default::default()
        };
        let b = o.as_bytes();
        assert_eq!(&b[28..30], &7u16.to_le_bytes());
        assert_eq!(&b[32..36], &9u32.to_le_bytes());
        assert_eq!(&b[40..42], &5u16.to_le_bytes());
    }

    #[test]
    fn ioctl_numbers_match_linux_encoding() {
        // CLONE as printed by a C program against Debian's <linux/fuse.h>; the
        // BACKING_* ones (newer than that header) follow the same _IOW encoding.
        assert_eq!(crate::ioctl::DEV_IOC_CLONE, 0x8004_e500);
        assert_eq!(crate::ioctl::DEV_IOC_BACKING_OPEN, 0x4010_e501);
        assert_eq!(crate::ioctl::DEV_IOC_BACKING_CLOSE, 0x4004_e502);
    }
}
