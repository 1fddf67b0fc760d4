//! objfs: an S3 bucket (or a prefix of one) as a filesystem, served by
//! fusebox.
//!
//! ```text
//! fusebox mount objfs s3://BUCKET[/PREFIX] MOUNTPOINT [-o endpoint=URL,profile=NAME,...]
//! ```
//!
//! Objects are files, one to one: a file written through the mount is an
//! ordinary object every S3 tool reads, and the other way round.
//! Prefixes are directories. Mode, owner and times travel in s3fs's
//! object metadata ([`meta`]).
//!
//! The pieces:
//! - [`options`]: `s3://BUCKET[/PREFIX]` and the `-o` options;
//! - [`store`]: the S3 requests, through aws-sdk-s3, counted;
//! - [`meta`]: the metadata convention;
//! - [`staging`]: files being written and closed files awaiting upload,
//!   on local disk, with their journal;
//! - [`reader`]: ranged GETs and sequential prefetch;
//! - `stream`: multipart uploads that follow a file as it is written;
//! - [`fs`]: the [`PathFilesystem`](fusebox::PathFilesystem) itself.

pub mod fs;
pub mod meta;
pub mod options;
pub mod reader;
pub mod staging;
pub mod store;
mod stream;

pub use fs::{ObjFs, StartError};
pub use options::{Attrs, BucketUrl, ObjOptions, OptionError, Upload};
