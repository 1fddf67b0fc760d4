//! A filesystem's own descriptors, kept clear of the program it serves.
//!
//! Served through /dev/fuse, a filesystem's descriptors are its daemon's
//! alone. Served inside an application's process (direct mode, the
//! `fusebox-direct` crate), they sit in the application's descriptor
//! table, where the application may close them (a close of every
//! descriptor before an exec, as Python's subprocess does) or put one of
//! its own over them (dup2: bash's `exec 3>file`) — after which the
//! filesystem would act on the application's file. So direct mode installs
//! a keeper at start, and a filesystem hands each descriptor it holds on to
//! to [`keep`]: the keeper moves it to a reserved range and remembers it
//! there, where the application's close, close_range and dup2 leave it
//! alone. Without a keeper (the kernel path) `keep` gives the descriptor
//! back as it is, at the cost of one atomic load.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

static KEEPER: OnceLock<fn(OwnedFd) -> OwnedFd> = OnceLock::new();

/// Install the keeper for this process (direct mode). False if one was
/// installed already.
pub fn set_keeper(keeper: fn(OwnedFd) -> OwnedFd) -> bool {
    KEEPER.set(keeper).is_ok()
}

/// `fd`, which the filesystem keeps beyond the call at hand (a node's
/// descriptor, an open file's, its root's), possibly renumbered: use the
/// returned one.
#[inline]
pub fn keep(fd: OwnedFd) -> OwnedFd {
    match KEEPER.get() {
        Some(keeper) => keeper(fd),
        None => fd,
    }
}
