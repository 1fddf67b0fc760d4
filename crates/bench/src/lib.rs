//! `fusebox bench`: the source papers' workloads, run side by side on the
//! native filesystem, fusebox and peer frameworks, in one interleaved run.
//!
//! - [`workload`]: the named, versioned suites;
//! - [`subject`], [`peers`], [`compat`], [`blk`], [`direct`] and [`sftp`]: what is
//!   measured, each mounted over (or serving) the same backing directory;
//! - [`engine`] and [`personality`]: running one workload once (fio, or our
//!   own engine for metadata, FxMark, latency and filebench personalities);
//! - [`floor`]: what one round trip between two processes costs here;
//! - [`remote`]: an sshd on loopback and a delaying proxy, for network
//!   filesystems;
//! - [`objstore`] and [`objfs`]: S3 stores on loopback (gofakes3, a Garage
//!   cluster) and the objfs suite's subjects, with the bench's own S3
//!   client;
//! - [`runner`]: repetitions, interleaving, CPU time, statistics;
//! - [`results`] and [`report`]: the JSON schema, the terminal table, the
//!   Markdown report with SVG charts.

#![deny(unsafe_code)]

pub mod blk;
pub mod compat;
pub mod direct;
pub mod engine;
pub mod floor;
pub mod objfs;
pub mod objstore;
pub mod peers;
pub mod personality;
pub mod remote;
pub mod report;
pub mod results;
pub mod runner;
pub mod sftp;
pub mod soak;
pub mod subject;
pub mod workload;
pub use personality::Rng;
