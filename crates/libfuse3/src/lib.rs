//! A drop-in `libfuse3.so.3` built on fusebox (issue 16, in progress).
//!
//! Debian links libfuse 3 programs with BIND_NOW against versioned symbols
//! (`fuse_new@FUSE_3.1`, ...). This crate builds a shared library with the
//! same SONAME (build.rs) and version nodes (`libfuse3.map`) and binds each
//! function it implements to its node (`ffi`), so that pointing the loader
//! at it (`LD_LIBRARY_PATH`) runs an unchanged binary on fusebox.
//!
//! What exists: everything Debian's libfuse3 3.14 exports, under every
//! symbol version it has. The shared structs are laid out as the 3.14
//! headers declare them ([`abi`], checked by `tests/layout.rs`); fuse_opt.h,
//! `fuse_parse_cmdline`, `fuse_buf_copy` and logging are checked against
//! Debian's own library by `tests/differential.rs`; the low-level API
//! (`ffi::lowlevel`: a program's `fuse_lowlevel_ops` bridged to a fusebox
//! `Filesystem`, every request answered through a reply token, at once or
//! later from any thread) and the high-level API (`ffi::highlevel`: the
//! program's `fuse_operations` as a `PathFilesystem` under fusebox's path
//! layer) run on fusebox sessions (`ffi::session`), whose transport and
//! threads the `FUSEBOX_*` environment picks ([`env`](mod@env)). The stacking API
//! and CUSE refuse loudly (`ffi::unsupported`). `tests/programs.rs`,
//! `tests/examples.rs` and `tests/pyfuse3_suite.rs` run unchanged Debian
//! programs, libfuse's examples and pyfuse3's own suite on it.

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
