//! What libfuse 3.14 exports and fusebox's library does not do: present,
//! so that a program linked with BIND_NOW against any of them still
//! starts (and runs, if it never calls them), and loud when called: each
//! logs its own name and fails the way its C signature can say so (-ENOSYS
//! for an int, NULL for a pointer).
//!
//! - `fuse_fs_*`: the stacking API, on which libfuse builds its modules
//!   (subdir, iconv); fusebox serves the high-level operations without
//!   layers.
//! - `cuse_*`: character devices in user space (CUSE), a different kernel
//!   interface (/dev/cuse).
//!
//! Soundness: each stub takes no arguments and reads none; on the C ABIs
//! these targets use, the caller's arguments sit in registers and its own
//! stack, which a callee that ignores them leaves as they are.

use std::ffi::{c_int, c_void};

use super::{log_error, versioned};

fn refuse(name: &str, what: &str) {
    log_error(&format!(
        "fuse: {name} is not supported by fusebox's libfuse3 ({what})"
    ));
}

macro_rules! refused_int {
    ($what:literal, $node:literal: $($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            refuse(stringify!($name), $what);
            -libc::ENOSYS
        }
        versioned!($name, $node);
    )*};
}

macro_rules! refused_ptr {
    ($what:literal, $node:literal: $($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            refuse(stringify!($name), $what);
            std::ptr::null_mut()
        }
        versioned!($name, $node);
    )*};
}

refused_int!("stacked filesystem layers", "FUSE_3.0":
    fuse_fs_access, fuse_fs_bmap, fuse_fs_chmod, fuse_fs_chown, fuse_fs_create,
    fuse_fs_fallocate, fuse_fs_flock, fuse_fs_flush, fuse_fs_fsync, fuse_fs_fsyncdir,
    fuse_fs_getattr, fuse_fs_getxattr, fuse_fs_ioctl, fuse_fs_link, fuse_fs_listxattr,
    fuse_fs_lock, fuse_fs_lseek, fuse_fs_mkdir, fuse_fs_mknod, fuse_fs_open,
    fuse_fs_opendir, fuse_fs_poll, fuse_fs_read, fuse_fs_read_buf, fuse_fs_readdir,
    fuse_fs_readlink, fuse_fs_release, fuse_fs_releasedir, fuse_fs_removexattr,
    fuse_fs_rename, fuse_fs_rmdir, fuse_fs_setxattr, fuse_fs_statfs, fuse_fs_symlink,
    fuse_fs_truncate, fuse_fs_unlink, fuse_fs_utimens, fuse_fs_write, fuse_fs_write_buf,
    fuse_fs_destroy,
);
refused_int!("stacked filesystem layers", "FUSE_3.4": fuse_fs_copy_file_range);
refused_ptr!("stacked filesystem layers", "FUSE_3.0": fuse_fs_new, fuse_fs_init);
refused_int!("CUSE character devices", "FUSE_3.0": cuse_lowlevel_main, cuse_lowlevel_teardown);
refused_ptr!("CUSE character devices", "FUSE_3.0": cuse_lowlevel_new, cuse_lowlevel_setup);
