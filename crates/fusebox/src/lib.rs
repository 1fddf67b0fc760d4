//! fusebox: a FUSE protocol server.
//!
//! Layers, from the bottom up (DESIGN.md, "Module layers", which
//! `scripts/import-graph.py --check` holds the code to):
//!
//! - [`sys`], [`types`], [`error`], [`device`] (one /dev/fuse fd and the one
//!   rule for its errors), [`descriptors`], [`thread_policy`];
//! - [`protocol`] parses requests into typed views, holds the per-opcode
//!   table ([`protocol::opcodes`]) and builds replies;
//! - [`mount`] mounts (mount(2) or fusermount3);
//! - [`stats`] keeps per-request-type counts and latency histograms;
//! - [`later`] carries a request's context and answers given after the call
//!   returned ([`ReplyToken`]);
//! - [`fs`] holds the APIs filesystems implement (inode- and path-level);
//! - [`recovery`] keeps a mount served across server crashes and upgrades;
//! - [`dispatch`] calls the filesystem, times the call, catches panics;
//! - [`transport`] moves requests between /dev/fuse or io_uring and the
//!   dispatcher;
//! - [`session`] ties a [`mount`] to a transport and a filesystem.
//!
//! Only `sys` may use `unsafe`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod descriptors;
pub mod device;
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
