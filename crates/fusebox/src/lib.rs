//! fusebox: a FUSE protocol server.
//!
//! Layers, from the kernel up (see DESIGN.md at the repository root):
//!
//! - [`transport`] moves bytes between /dev/fuse and the dispatcher;
//! - [`protocol`] parses requests into typed views and builds replies;
//! - [`dispatch`] calls the filesystem, times the call, catches panics;
//! - [`later`] carries answers given after the call returned ([`ReplyToken`]);
//! - [`fs`] holds the APIs filesystems implement (inode- and path-level);
//! - [`session`] ties a [`mount`] to a transport and a filesystem;
//! - [`stats`] keeps per-request-type counts and latency histograms;
//! - [`recovery`] keeps a mount served across server crashes.
//!
//! Only `sys` may use `unsafe`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod descriptors;
pub mod dispatch;
pub mod error;
pub mod fs;
pub mod later;
pub mod mount;
pub mod protocol;
pub mod recovery;
pub mod session;
pub mod stats;
pub mod sys;
pub mod thread_policy;
pub mod transport;
pub mod types;

pub use error::{Errno, Error, FsResult};
pub use fs::{
    AsyncAdapter, AsyncFilesystem, AsyncPathFilesystem, Filesystem, PathAdapter, PathFilesystem,
};
pub use later::{InterruptHandle, OwnedCtx, ReplyToken};
pub use mount::{FsOptions, MountOptions, Options, TimeoutOverrides};
pub use session::{Session, SessionConfig, ShutdownHandle};
pub use types::*;

/// The kernel ABI, re-exported for filesystems that need raw flags.
pub use fusebox_abi as abi;
