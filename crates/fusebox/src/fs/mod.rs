//! Filesystem APIs: the inode-level [`Filesystem`] trait that dispatch
//! calls, the path-level [`PathFilesystem`] built on top of it, and the
//! async [`AsyncFilesystem`] served through it by [`AsyncAdapter`].

mod asynchronous;
mod inode;
pub mod ops;
mod path;
pub mod recoverable;

pub use asynchronous::{AsyncAdapter, AsyncFilesystem, Ready};
pub use inode::Filesystem;
pub use path::{
    AsyncPathFilesystem, PathAdapter, PathFilesystem, PlusFiller, PlusFillerSend, ReadyPath,
};
