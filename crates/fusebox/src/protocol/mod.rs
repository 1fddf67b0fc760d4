//! The wire protocol: parse requests into typed views, build replies,
//! negotiate INIT, send notifications. No I/O of its own: transports feed
//! it bytes and give it a [`ReplySink`].

mod dirent;
pub mod encode;
pub mod init;
mod notify;
pub mod opcodes;
pub mod ops;
pub(crate) mod outcome;
mod parse;
pub mod references;
pub mod reply;

pub use dirent::{dir_records, DirEntries, DirRecord};
pub use init::{Connection, InitConfig};
pub use notify::{BackingId, Notifier};
pub use outcome::ReplyData;
pub use parse::{
    parse_contiguous, parse_header, parse_split, BatchForgetList, Op, ParseConfig, ParseError,
    Request,
};
pub use reply::{send_error, send_reply, Body, DataOut, ReplySink};
