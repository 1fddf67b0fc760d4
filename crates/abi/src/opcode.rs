//! Request and notification codes.

/// Every request opcode up to protocol 7.45. Kept as a plain `u32` newtype
/// rather than a Rust enum: the kernel may send a number we do not know, and
/// that must be a value we can answer ENOSYS to, not a parse failure.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u32);

macro_rules! opcodes {
    ($($name:ident = $val:expr, $text:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("Opcode ", stringify!($val), ": `", $text, "`, named as in `enum fuse_opcode` less any `FUSE_` prefix.")]
                pub const $name: Opcode = Opcode($val);
            )*
            /// All opcodes fusebox knows, in numeric order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name),*];
            /// The kernel's name without the `FUSE_` prefix, e.g. "LOOKUP".
            pub const fn name(self) -> &'static str {
                match self.0 {
                    $($val => $text,)*
                    _ => "UNKNOWN",
                }
            }
        }
    };
}

opcodes! {
    LOOKUP = 1, "LOOKUP";
    FORGET = 2, "FORGET";
    GETATTR = 3, "GETATTR";
    SETATTR = 4, "SETATTR";
    READLINK = 5, "READLINK";
    SYMLINK = 6, "SYMLINK";
    MKNOD = 8, "MKNOD";
    MKDIR = 9, "MKDIR";
    UNLINK = 10, "UNLINK";
    RMDIR = 11, "RMDIR";
    RENAME = 12, "RENAME";
    LINK = 13, "LINK";
    OPEN = 14, "OPEN";
    READ = 15, "READ";
    WRITE = 16, "WRITE";
    STATFS = 17, "STATFS";
    RELEASE = 18, "RELEASE";
    FSYNC = 20, "FSYNC";
    SETXATTR = 21, "SETXATTR";
    GETXATTR = 22, "GETXATTR";
    LISTXATTR = 23, "LISTXATTR";
    REMOVEXATTR = 24, "REMOVEXATTR";
    FLUSH = 25, "FLUSH";
    INIT = 26, "INIT";
    OPENDIR = 27, "OPENDIR";
    READDIR = 28, "READDIR";
    RELEASEDIR = 29, "RELEASEDIR";
    FSYNCDIR = 30, "FSYNCDIR";
    GETLK = 31, "GETLK";
    SETLK = 32, "SETLK";
    SETLKW = 33, "SETLKW";
    ACCESS = 34, "ACCESS";
    CREATE = 35, "CREATE";
    INTERRUPT = 36, "INTERRUPT";
    BMAP = 37, "BMAP";
    DESTROY = 38, "DESTROY";
    IOCTL = 39, "IOCTL";
    POLL = 40, "POLL";
    NOTIFY_REPLY = 41, "NOTIFY_REPLY";
    BATCH_FORGET = 42, "BATCH_FORGET";
    FALLOCATE = 43, "FALLOCATE";
    READDIRPLUS = 44, "READDIRPLUS";
    RENAME2 = 45, "RENAME2";
    LSEEK = 46, "LSEEK";
    COPY_FILE_RANGE = 47, "COPY_FILE_RANGE";
    SETUPMAPPING = 48, "SETUPMAPPING";
    REMOVEMAPPING = 49, "REMOVEMAPPING";
    SYNCFS = 50, "SYNCFS";
    TMPFILE = 51, "TMPFILE";
    STATX = 52, "STATX";
    COPY_FILE_RANGE_64 = 53, "COPY_FILE_RANGE_64";
    CUSE_INIT = 4096, "CUSE_INIT";
}

impl Opcode {
    /// One past the largest FUSE opcode (CUSE_INIT excluded); sizes per-op tables.
    pub const TABLE_LEN: usize = 54;

    /// Index into a per-opcode table of [`Opcode::TABLE_LEN`] slots; unknown
    /// opcodes share slot 0 (no real opcode is 0).
    pub const fn table_index(self) -> usize {
        if (self.0 as usize) < Self::TABLE_LEN {
            self.0 as usize
        } else {
            0
        }
    }
}

impl core::fmt::Debug for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// Codes of unsolicited messages from daemon to kernel (unique = 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
pub enum NotifyCode {
    /// `FUSE_NOTIFY_POLL`: a file the kernel polls through `fuse_poll_in.kh`
    /// is ready; wakes its waiters.
    Poll = 1,
    /// `FUSE_NOTIFY_INVAL_INODE`: drop an inode's cached attributes and a
    /// range of its cached pages.
    InvalInode = 2,
    /// `FUSE_NOTIFY_INVAL_ENTRY`: drop a cached name in a directory.
    InvalEntry = 3,
    /// `FUSE_NOTIFY_STORE`: put data into an inode's page cache.
    Store = 4,
    /// `FUSE_NOTIFY_RETRIEVE`: ask for data from an inode's page cache; it
    /// comes back as a NOTIFY_REPLY request.
    Retrieve = 5,
    /// `FUSE_NOTIFY_DELETE`: a name was removed; drop its entry and, if the
    /// child is cached under it, tell watchers it was deleted.
    Delete = 6,
    /// 7.40: the kernel sends every pending request again.
    Resend = 7,
    /// 7.44: bump the connection epoch, invalidating all cached dentries.
    IncEpoch = 8,
    /// 7.45: ask the kernel to forget unused inodes.
    Prune = 9,
}
