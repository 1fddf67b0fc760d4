//! The C ABI: every exported function, bound to its libfuse symbol version.
//!
//! `versioned!(name, "FUSE_3.x")` emits `.symver name, name@@FUSE_3.x`, so
//! the dynamic symbol carries the version node Debian's binaries were
//! linked against (`tests/differential.rs` checks them with `objdump -T`).

#![allow(unsafe_code)]

mod buf;
mod cmdline;
mod connopts;
mod highlevel;
mod lowlevel;
mod opt;
mod parse;
mod session;
mod unsupported;

/// Bind the exported function `$name` to version node `$node` (one of
/// `libfuse3.map`'s).
macro_rules! versioned {
    // Another name (and version) for the same function: an older entry
    // point's default name, e.g. `fuse_parse_cmdline_30 as
    // "fuse_parse_cmdline@FUSE_3.0"` (one `@`: not the default).
    ($name:ident as $versioned:literal) => {
        std::arch::global_asm!(concat!(".symver ", stringify!($name), ", ", $versioned));
    };
    ($name:ident, $node:literal) => {
        std::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@",
            $node
        ));
    };
}
pub(crate) use versioned;

// Exported functions that other Rust code here also calls are exported
// through a wrapper (`#[export_name]`, `export_*`), and the Rust callers
// call the function itself: a `.symver` must name a symbol defined in the
// same object, and an optimized build may place a function that is called
// from other modules elsewhere than the `.symver` beside it.

use std::ffi::{c_char, c_int};

/// `int fuse_version(void)`.
#[no_mangle]
pub extern "C" fn fuse_version() -> c_int {
    crate::FUSE_VERSION
}
versioned!(fuse_version, "FUSE_3.0");

/// `const char *fuse_pkgversion(void)`: a static string.
#[no_mangle]
pub extern "C" fn fuse_pkgversion() -> *const c_char {
    static NUL_TERMINATED: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    NUL_TERMINATED
        .get_or_init(|| std::ffi::CString::new(crate::PKG_VERSION).expect("no NUL inside"))
        .as_ptr()
}
versioned!(fuse_pkgversion, "FUSE_3.0");

extern "C" {
    /// csrc/log.c: hand a finished message to the program's log function
    /// (or stderr), as `fuse_log(level, "%s", msg)`.
    fn fusebox_log_message(level: c_int, msg: *const c_char);
}

/// FUSE_LOG_ERR.
const LOG_ERR: c_int = 3;

/// Report an error the way libfuse does: through fuse_log, so a program
/// that installed a log function (fuse_set_log_func) gets it.
pub(crate) fn log_error(msg: &str) {
    let line =
        std::ffi::CString::new(format!("{msg}\n").replace('\0', " ")).expect("NULs replaced");
    // SAFETY: a NUL-terminated string, used only during the call.
    unsafe { fusebox_log_message(LOG_ERR, line.as_ptr()) };
}

/// An all-zero `struct stat` (every field an integer: zero is valid).
pub(crate) fn zeroed_stat() -> libc::stat {
    // SAFETY: plain integers and padding; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero `struct flock`.
pub(crate) fn zeroed_flock() -> libc::flock {
    // SAFETY: plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero `struct statvfs`.
pub(crate) fn zeroed_statvfs() -> libc::statvfs {
    // SAFETY: plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}
