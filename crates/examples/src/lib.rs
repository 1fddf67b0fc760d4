//! Example filesystems: each is both documentation of the fusebox API and a
//! benchmark or test subject.
//!
//! - [`NullFs`]: only the root exists; everything else succeeds with
//!   nothing. Measures the framework alone (RFUSE's NullFS).
//! - [`StackFs`]: passthrough of a source directory (Vangoor's Stackfs).
//! - [`PathPassthrough`]: the same through the path-level API, like
//!   libfuse's high-level passthrough example.
//! - [`MemFs`]: an in-memory filesystem.
//! - [`TimingFs`]: emulated storage latency (XFUSE's TimingFS).

#![deny(unsafe_code)]

mod host;
pub mod memfs;
pub mod nullfs;
pub mod pathfs;
pub mod stackfs;
mod sys;
pub mod timingfs;

pub use memfs::MemFs;
pub use nullfs::NullFs;
pub use pathfs::PathPassthrough;
pub use stackfs::StackFs;
pub use timingfs::{AsyncTimingFs, TimingFs, TimingProfile, Waiting};
