//! Direct mode: a fusebox filesystem reached from inside the application's
//! own process, with no request through the kernel's FUSE path.
//!
//! Built bottom-up. What exists so far is the layer every other piece
//! stands on: [`intercept`], which catches every system call a process
//! makes, from any code (libc or not, loaded before or after), in every
//! thread it creates and in the children it forks, and hands each to a
//! hook that answers it or lets it run. The virtual mount, descriptors and
//! caches come on top of it (DESIGN.md, "Direct mode").

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod appmem;
pub mod cache;
pub mod intercept;
mod kabi;
mod kept;
mod placeholder;
mod process;
mod rewrite;
mod route;
pub mod shared;
mod sud;
mod unix_sockets;
pub mod vfs;

pub use cache::MetaCache;
pub use intercept::{Action, InterceptError, Mechanism, Syscall};
pub use kept::keep_descriptors;
pub use route::{cache_stats, fs_counters, serve, CWD_VAR, STATS_VAR};
pub use unix_sockets::RUN_VAR;
pub use vfs::VirtualMount;
