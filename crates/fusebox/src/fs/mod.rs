//! Filesystem APIs: the inode-level [`Filesystem`] trait that dispatch
//! calls, and the path-level [`PathFilesystem`] built on top of it.

mod inode;
pub mod ops;
mod path;

pub use inode::Filesystem;
pub use path::{PathAdapter, PathFilesystem};
