//! sftpfs: a directory on another machine, reached over SFTP through the
//! system's `ssh`, served by fusebox.
//!
//! ```text
//! fusebox mount sftpfs [user@]host:[dir] MOUNTPOINT [-o sshfs options]
//! ```
//!
//! The pieces, from the wire up:
//!
//! - [`wire`]: SFTP version 3 and OpenSSH's extensions, as bytes;
//! - [`ssh`]: how the stream is made (`ssh ... -s sftp`, or `directport`);
//! - [`connection`]: one session, any number of requests in flight;
//! - [`client`]: reconnects when the link drops, bounds every wait;
//! - [`writelog`]: writes answered but not yet confirmed, kept where they
//!   survive a reconnect and (under a supervisor) the process;
//! - [`files`]: open files, their readahead and write-behind;
//! - [`pages`]: file data in sftpfs's memory (direct mode);
//! - [`cache`]: names and attributes, with their timeouts;
//! - [`listing`]: directory listings, fetched ahead where a walk goes;
//! - [`fs`]: the [`PathFilesystem`](fusebox::PathFilesystem) itself;
//! - [`options`]: `[user@]host:[dir]` and sshfs's `-o` options.

pub mod cache;
pub mod client;
pub mod connection;
mod errors;
pub mod files;
pub mod fs;
pub mod idmap;
pub mod listing;
pub mod options;
pub mod pages;
pub mod smallfiles;
pub mod ssh;
mod sys;
pub mod wire;
pub mod writelog;

pub use fs::{SftpFs, StartError};
pub use options::{OptionError, Remote, SftpOptions};
