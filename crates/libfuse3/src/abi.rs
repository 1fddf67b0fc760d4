//! The structs a libfuse 3 program shares with the library, laid out as
//! the 3.14 headers (Debian's libfuse3-dev: fuse_common.h, fuse_opt.h,
//! fuse.h, fuse_lowlevel.h) declare them for x86-64 and other LP64 Linux
//! targets. Written from the headers' declarations; `tests/layout.rs`
//! compiles a C program against those headers and fails on any size or
//! offset that differs.
//!
//! Bitfields are one `u32` word here with accessors; GCC allocates the
//! first declared bit field in the lowest bit on these targets (checked by
//! the layout test too).

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// `struct fuse_opt`: one option template (fuse_opt.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuseOpt {
    pub templ: *const c_char,
    /// Offset in the parse's `data`, or `-1U` (FUSE_OPT_KEY: 0xffffffff
    /// here) for "call the processing function with `value` as the key".
    pub offset: c_ulong,
    pub value: c_int,
}

/// `struct fuse_args`: an argument vector the library may own.
#[repr(C)]
#[derive(Debug)]
pub struct FuseArgs {
    pub argc: c_int,
    /// NULL terminated.
    pub argv: *mut *mut c_char,
    /// Whether `argv` (and its strings) were allocated by the library.
    pub allocated: c_int,
}

/// `struct fuse_file_info` (fuse_common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseFileInfo {
    pub flags: c_int,
    /// writepage:1, direct_io:1, keep_cache:1, flush:1, nonseekable:1,
    /// flock_release:1, cache_readdir:1, noflush:1, padding:24.
    pub bits: c_uint,
    /// `padding2:32`.
    pub padding2: c_uint,
    pub fh: u64,
    pub lock_owner: u64,
    pub poll_events: u32,
}

/// The bits of [`FuseFileInfo::bits`], in declaration order.
pub mod file_info_bits {
    pub const WRITEPAGE: u32 = 1 << 0;
    pub const DIRECT_IO: u32 = 1 << 1;
    pub const KEEP_CACHE: u32 = 1 << 2;
    pub const FLUSH: u32 = 1 << 3;
    pub const NONSEEKABLE: u32 = 1 << 4;
    pub const FLOCK_RELEASE: u32 = 1 << 5;
    pub const CACHE_READDIR: u32 = 1 << 6;
    pub const NOFLUSH: u32 = 1 << 7;
}

impl FuseFileInfo {
    pub fn has(&self, bit: u32) -> bool {
        self.bits & bit != 0
    }

    pub fn set(&mut self, bit: u32, on: bool) {
        if on {
            self.bits |= bit;
        } else {
            self.bits &= !bit;
        }
    }
}

/// `struct fuse_loop_config_v1`: what `fuse_loop_mt_32` and the 3.2-3.11
/// `fuse_session_loop_mt` take (3.12 made the config opaque).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseLoopConfigV1 {
    pub clone_fd: c_int,
    pub max_idle_threads: c_uint,
}

/// `struct fuse_conn_info`: what INIT offered and what the filesystem wants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseConnInfo {
    pub proto_major: c_uint,
    pub proto_minor: c_uint,
    pub max_write: c_uint,
    pub max_read: c_uint,
    pub max_readahead: c_uint,
    /// `FUSE_CAP_*` the kernel offers.
    pub capable: c_uint,
    /// `FUSE_CAP_*` the filesystem asks for.
    pub want: c_uint,
    pub max_background: c_uint,
    pub congestion_threshold: c_uint,
    pub time_gran: c_uint,
    pub reserved: [c_uint; 22],
}

/// `struct fuse_buf`: memory or an fd (`flags` & FUSE_BUF_IS_FD).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuseBuf {
    pub size: usize,
    /// `enum fuse_buf_flags`.
    pub flags: c_uint,
    pub mem: *mut c_void,
    pub fd: c_int,
    pub pos: libc::off_t,
}

/// `struct fuse_bufvec`: `count` buffers, the first inline (a C flexible
/// array in all but name: programs allocate more behind it).
#[repr(C)]
#[derive(Debug)]
pub struct FuseBufvec {
    pub count: usize,
    pub idx: usize,
    pub off: usize,
    pub buf: [FuseBuf; 1],
}

/// `struct fuse_config`: the high-level API's settings (`-o` options and
/// what `init` may change).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuseConfig {
    pub set_gid: c_int,
    pub gid: c_uint,
    pub set_uid: c_int,
    pub uid: c_uint,
    pub set_mode: c_int,
    pub umask: c_uint,
    pub entry_timeout: f64,
    pub negative_timeout: f64,
    pub attr_timeout: f64,
    pub intr: c_int,
    pub intr_signal: c_int,
    pub remember: c_int,
    pub hard_remove: c_int,
    pub use_ino: c_int,
    pub readdir_ino: c_int,
    pub direct_io: c_int,
    pub kernel_cache: c_int,
    pub auto_cache: c_int,
    pub no_rofd_flush: c_int,
    pub ac_attr_timeout_set: c_int,
    pub ac_attr_timeout: f64,
    pub nullpath_ok: c_int,
    pub show_help: c_int,
    pub modules: *mut c_char,
    pub debug: c_int,
}

/// A callback slot of an operations table: a C function pointer, kept
/// untyped here (each call site casts it to its documented signature).
pub type Callback = Option<unsafe extern "C" fn()>;

/// `struct fuse_operations` (fuse.h, 3.14): 42 callbacks in this order.
/// Older programs pass a shorter table with its size (`fuse_new`'s
/// `op_size`); slots past it are treated as NULL.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseOperations {
    pub getattr: Callback,
    pub readlink: Callback,
    pub mknod: Callback,
    pub mkdir: Callback,
    pub unlink: Callback,
    pub rmdir: Callback,
    pub symlink: Callback,
    pub rename: Callback,
    pub link: Callback,
    pub chmod: Callback,
    pub chown: Callback,
    pub truncate: Callback,
    pub open: Callback,
    pub read: Callback,
    pub write: Callback,
    pub statfs: Callback,
    pub flush: Callback,
    pub release: Callback,
    pub fsync: Callback,
    pub setxattr: Callback,
    pub getxattr: Callback,
    pub listxattr: Callback,
    pub removexattr: Callback,
    pub opendir: Callback,
    pub readdir: Callback,
    pub releasedir: Callback,
    pub fsyncdir: Callback,
    pub init: Callback,
    pub destroy: Callback,
    pub access: Callback,
    pub create: Callback,
    pub lock: Callback,
    pub utimens: Callback,
    pub bmap: Callback,
    pub ioctl: Callback,
    pub poll: Callback,
    pub write_buf: Callback,
    pub read_buf: Callback,
    pub flock: Callback,
    pub fallocate: Callback,
    pub copy_file_range: Callback,
    pub lseek: Callback,
}

/// `struct fuse_lowlevel_ops` (fuse_lowlevel.h, 3.14): 44 callbacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseLowlevelOps {
    pub init: Callback,
    pub destroy: Callback,
    pub lookup: Callback,
    pub forget: Callback,
    pub getattr: Callback,
    pub setattr: Callback,
    pub readlink: Callback,
    pub mknod: Callback,
    pub mkdir: Callback,
    pub unlink: Callback,
    pub rmdir: Callback,
    pub symlink: Callback,
    pub rename: Callback,
    pub link: Callback,
    pub open: Callback,
    pub read: Callback,
    pub write: Callback,
    pub flush: Callback,
    pub release: Callback,
    pub fsync: Callback,
    pub opendir: Callback,
    pub readdir: Callback,
    pub releasedir: Callback,
    pub fsyncdir: Callback,
    pub statfs: Callback,
    pub setxattr: Callback,
    pub getxattr: Callback,
    pub listxattr: Callback,
    pub removexattr: Callback,
    pub access: Callback,
    pub create: Callback,
    pub getlk: Callback,
    pub setlk: Callback,
    pub bmap: Callback,
    pub ioctl: Callback,
    pub poll: Callback,
    pub write_buf: Callback,
    pub retrieve_reply: Callback,
    pub forget_multi: Callback,
    pub flock: Callback,
    pub fallocate: Callback,
    pub readdirplus: Callback,
    pub copy_file_range: Callback,
    pub lseek: Callback,
}

/// `struct fuse_entry_param`: a lookup's answer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FuseEntryParam {
    pub ino: u64,
    pub generation: u64,
    pub attr: libc::stat,
    pub attr_timeout: f64,
    pub entry_timeout: f64,
}

/// `struct fuse_ctx`: who made the request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseCtx {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub pid: libc::pid_t,
    pub umask: libc::mode_t,
}

/// The high-level API's `struct fuse_context` (fuse.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuseContext {
    pub fuse: *mut c_void,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub pid: libc::pid_t,
    pub private_data: *mut c_void,
    pub umask: libc::mode_t,
}

/// `struct fuse_forget_data`: one entry of `forget_multi`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuseForgetData {
    pub ino: u64,
    pub nlookup: u64,
}

/// `struct fuse_cmdline_opts`: what `fuse_parse_cmdline` (3.12) fills.
/// The 3.0 variant (`fuse_parse_cmdline_30`) ends before `max_threads`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuseCmdlineOpts {
    pub singlethread: c_int,
    pub foreground: c_int,
    pub debug: c_int,
    pub nodefault_subtype: c_int,
    pub mountpoint: *mut c_char,
    pub show_version: c_int,
    pub show_help: c_int,
    pub clone_fd: c_int,
    pub max_idle_threads: c_uint,
    pub max_threads: c_uint,
}
