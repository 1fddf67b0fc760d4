//! Block devices in user space (SPEC section 9, after BDUS and nbdkit).
//!
//! A driver is a [`BlockDriver`]: a size and a read, plus whatever else it
//! supports (write, flush, trim, write-zeroes), said through
//! [`Capabilities`]. fusebox serves it as the one file of a FUSE mount of
//! its own ([`BlockFs`]: direct I/O, block-aligned, trim and write-zeroes
//! as fallocate) and puts a loop device on that file ([`loopdev`]), so the
//! system sees a real `/dev/loopN` with a stable name under
//! `/dev/fusebox/`. The device is served under fusebox's recovery
//! supervisor ([`device`]): the driver process can be replaced, or die, and
//! the block device's I/O goes on without an error.
//!
//! This kernel has neither ublk nor nbd; the loop device is the one
//! exposure built here. A ublk backend would replace [`BlockFs`] +
//! [`loopdev`] (serving the same `BlockDriver` from ublk's io_uring
//! commands) and keep everything else.

pub mod device;
pub mod driver;
pub mod drivers;
pub mod fs;
pub mod loopdev;
pub mod registry;
mod sys;

pub use device::{DeviceConfig, DeviceError};
pub use driver::{BlkError, BlockDriver, Capabilities, Geometry, ReadCompletion, WriteCompletion};
pub use fs::BlockFs;
