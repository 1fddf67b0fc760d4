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

/// A keeper: given a descriptor and, when the filesystem has just read
/// them, the device and inode it opens (the keeper tells its descriptors
/// from the application's by them and need not ask again), it returns the
/// descriptor to use from now on.
pub type Keeper = fn(OwnedFd, Option<(u64, u64)>) -> OwnedFd;

static KEEPER: OnceLock<Keeper> = OnceLock::new();

/// Install the keeper for this process (direct mode). False if one was
/// installed already.
pub fn set_keeper(keeper: Keeper) -> bool {
    KEEPER.set(keeper).is_ok()
}

/// `fd`, which the filesystem keeps beyond the call at hand (a node's
/// descriptor, an open file's, its root's), possibly renumbered: use the
/// returned one.
#[inline]
pub fn keep(fd: OwnedFd) -> OwnedFd {
    match KEEPER.get() {
        Some(keeper) => keeper(fd, None),
        None => fd,
    }
}

/// [`keep`], for a descriptor whose device and inode the filesystem has
/// just read (an fstat of it): one system call fewer in direct mode.
#[inline]
pub fn keep_identified(fd: OwnedFd, dev: u64, ino: u64) -> OwnedFd {
    match KEEPER.get() {
        Some(keeper) => keeper(fd, Some((dev, ino))),
        None => fd,
    }
}
