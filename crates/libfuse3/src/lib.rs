//! A drop-in `libfuse3.so.3` built on fusebox (issue 16, in progress).
//!
//! Debian links libfuse 3 programs with BIND_NOW against versioned symbols
//! (`fuse_new@FUSE_3.1`, ...). This crate builds a shared library with the
//! same SONAME (build.rs) and version nodes (`libfuse3.map`) and binds each
//! function it implements to its node (`ffi`), so that pointing the loader
//! at it (`LD_LIBRARY_PATH`) runs an unchanged binary on fusebox.
//!
//! What exists so far: the shared structs laid out as the 3.14 headers
//! declare them ([`abi`], checked against the headers by
//! `tests/layout.rs`), the version functions, fuse_opt.h whole
//! (`fuse_opt_parse` and the argument-vector and option-list helpers:
//! [`args`], `ffi`), `fuse_parse_cmdline` in both ABIs and
//! `fuse_buf_size` / `fuse_buf_copy`, and logging (`fuse_log`,
//! `fuse_set_log_func`: C, in csrc/log.c), checked against Debian's own libfuse3 by
//! `tests/differential.rs` (the same Debian-linked program on both
//! libraries, same output). Not yet: the sessions, the high- and
//! low-level APIs; until they exist the library does not load a real
//! filesystem binary (its missing symbols stop the loader at start, which
//! is loud, not silent).

pub mod abi;
pub mod args;
mod ffi;

/// What `fuse_version()` answers: the API the headers this library
/// follows define (`FUSE_MAKE_VERSION(3, 14)` = 3 * 100 + 14).
pub const FUSE_VERSION: i32 = 314;

/// What `fuse_pkgversion()` answers: the libfuse release whose ABI this
/// follows, and who serves it.
pub const PKG_VERSION: &str = concat!("3.14.0 (fusebox ", env!("CARGO_PKG_VERSION"), ")");
