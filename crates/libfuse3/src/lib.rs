//! A drop-in `libfuse3.so.3` built on fusebox (issue 16, in progress).
//!
//! Debian links libfuse 3 programs with BIND_NOW against versioned symbols
//! (`fuse_new@FUSE_3.1`, ...). This crate builds a shared library with the
//! same SONAME (build.rs) and version nodes (`libfuse3.map`) and binds each
//! function it implements to its node (`ffi`), so that pointing the loader
//! at it (`LD_LIBRARY_PATH`) runs an unchanged binary on fusebox.
//!
//! What exists: the shared structs laid out as the 3.14 headers declare
//! them ([`abi`], checked against the headers by `tests/layout.rs`), the
//! version functions, fuse_opt.h whole, `fuse_parse_cmdline` in both ABIs,
//! `fuse_buf_size`/`fuse_buf_copy` and logging (checked against Debian's
//! own library by `tests/differential.rs`), and the low-level API: sessions
//! (`fuse_session_new/mount/loop/loop_mt` in every version,
//! `receive_buf`/`process_buf`, exit, signal handlers, `fuse_daemonize`),
//! every `fuse_reply_*`, `fuse_req_*`, directory entries and
//! notifications, served by fusebox's session (`ffi::lowlevel` bridges a
//! program's `fuse_lowlevel_ops` to a fusebox `Filesystem`; every request
//! is answered through a reply token, at once or later from any thread).
//! `tests/programs.rs` runs Debian's squashfuse_ll, fuse-overlayfs and
//! a pyfuse3 filesystem on it. The `FUSEBOX_*` environment ([`env`])
//! picks the transport and threads. Not yet: the high-level API
//! (`fuse_new`, `fuse_main_real`: sshfs, squashfuse), whose symbols are
//! missing, so such a program stops at start (loud, not silent).

pub mod abi;
pub mod args;
pub mod caps;
pub mod convert;
pub mod env;
mod ffi;
pub mod groups;
pub mod help;
pub mod hl_opts;
pub mod session_opts;

/// What `fuse_version()` answers: the API the headers this library
/// follows define (`FUSE_MAKE_VERSION(3, 14)` = 3 * 100 + 14).
pub const FUSE_VERSION: i32 = 314;

/// What `fuse_pkgversion()` answers: the libfuse release whose ABI this
/// follows, and who serves it.
pub const PKG_VERSION: &str = concat!("3.14.0 (fusebox ", env!("CARGO_PKG_VERSION"), ")");
