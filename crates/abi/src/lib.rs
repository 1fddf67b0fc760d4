//! The Linux FUSE kernel ABI, protocol 7.45.
//!
//! Every struct here mirrors the layout the kernel documents in
//! `include/uapi/linux/fuse.h`; the facts come from there, the code is ours.
//! Structs derive zerocopy's traits, so reading one out of a byte buffer
//! needs no `unsafe` anywhere in fusebox. Sizes are asserted at compile time
//! in a private `layout` module so a wrong field breaks the build, not a mount.
//!
//! Names follow the kernel's (`fuse_in_header` becomes [`InHeader`]) so that
//! the uapi header can be read side by side with this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod consts;
pub mod flags;
mod layout;
pub mod opcode;
pub mod structs;

pub use consts::*;
pub use opcode::{NotifyCode, Opcode};
pub use structs::*;
