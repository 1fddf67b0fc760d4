//! Direct mode's metadata cache: the attributes a path resolved to, kept
//! in user space because the kernel's attribute and dentry caches are not
//! on this path (Prefuse's answer to the same problem).
//!
//! An entry lives for the attribute TTL the filesystem gave with it, as
//! the kernel would keep it, and only while nothing was changed through
//! the mount since it was made: every change (create, write, rename,
//! chmod, ...) in any process of the run bumps one shared counter, the
//! epoch, and an entry from an older epoch is a miss. The counter and the
//! hit/miss statistics live in one shared page (a memfd) that forked
//! children share by mapping and executed programs by inheriting its
//! descriptor; a program that lost the descriptor (one that closed all
//! others) runs without the cache rather than with an incoherent one.
//!
//! Changes made outside the run, straight to the source directory, are
//! seen when the TTL runs out, exactly as on the kernel path.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fusebox::types::FileAttr;

/// Names the shared page's descriptor to the programs the run executes.
pub const SHARED_VAR: &str = "FUSEBOX_DIRECT_SHARED";
/// The number of paths the cache holds; 0 turns it off.
pub const SIZE_VAR: &str = "FUSEBOX_DIRECT_CACHE";
pub const DEFAULT_ENTRIES: u64 = 65_536;
const MEMFD_NAME: &str = "fusebox-direct-shared";
/// Where the shared page's descriptor goes: above what programs usually
/// number their own (a program may still close it; see above).
const SHARED_FD_FLOOR: i32 = 1000;

/// The shared page.
#[repr(C)]
pub struct Shared {
    epoch: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Clone, Copy)]
struct Cached {
    attr: FileAttr,
    epoch: u64,
    until: Instant,
}

pub struct MetaCache {
    entries: moka::sync::Cache<(Vec<u8>, bool), Cached>,
    shared: &'static Shared,
    /// The shared page's descriptor, named to executed programs.
    shared_fd: i32,
}

/// Hits and misses of every process of the run so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

impl MetaCache {
    /// The cache for this process: joins the run's shared page (named in
    /// the environment) or, in the run's first process, makes it (the
    /// programs it executes are told of it: `shared_fd`). None when sized
    /// 0, or when the page was inherited in name only.
    pub fn for_process(entries: u64) -> Option<MetaCache> {
        if entries == 0 {
            return None;
        }
        // Not put into this process's environment: the program may have
        // its own setenv (bash does), not ready this early.
        let (shared_fd, shared) = match std::env::var(SHARED_VAR) {
            Ok(fd) => {
                let fd = fd.parse().ok()?;
                (fd, inherited(fd)?)
            }
            Err(_) => create()?,
        };
        Some(MetaCache {
            entries: moka::sync::Cache::new(entries),
            shared,
            shared_fd,
        })
    }

    /// The descriptor of the run's shared page, for `SHARED_VAR`.
    pub fn shared_fd(&self) -> i32 {
        self.shared_fd
    }

    /// The attributes cached for `path`, if still good.
    pub fn get(&self, path: &[u8], follow: bool) -> Option<FileAttr> {
        let hit = self
            .entries
            .get(&(path.to_vec(), follow))
            .filter(|c| c.epoch == self.epoch() && c.until > Instant::now());
        let counter = if hit.is_some() {
            &self.shared.hits
        } else {
            &self.shared.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit.map(|c| c.attr)
    }

    /// Remember `attr` for `path` for `ttl`, if nothing changed since
    /// `epoch` (read before the filesystem was asked).
    pub fn put(&self, path: &[u8], follow: bool, attr: FileAttr, ttl: Duration, epoch: u64) {
        if ttl.is_zero() || epoch != self.epoch() {
            return;
        }
        let cached = Cached {
            attr,
            epoch,
            until: Instant::now() + ttl,
        };
        self.entries.insert((path.to_vec(), follow), cached);
    }

    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Something changed through the mount: every entry made before is
    /// stale, in every process of the run.
    pub fn changed(&self) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
        }
    }
}

fn create() -> Option<(i32, &'static Shared)> {
    let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).ok()?;
    rustix::fs::ftruncate(&fd, 4096).ok()?;
    use std::os::fd::{AsRawFd, IntoRawFd};
    // Inherited by executed programs, so not close-on-exec.
    let high = rustix::io::fcntl_dupfd_cloexec(&fd, SHARED_FD_FLOOR)
        .ok()
        .and_then(|h| {
            rustix::io::fcntl_setfd(&h, rustix::io::FdFlags::empty()).ok()?;
            Some(h)
        });
    let fd = match high {
        Some(h) => h,
        None => fd,
    };
    let page = map(fd.as_raw_fd())?;
    Some((fd.into_raw_fd(), page))
}

/// The page behind an inherited descriptor, if it is still ours.
fn inherited(fd: i32) -> Option<&'static Shared> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let expected = format!("/memfd:{MEMFD_NAME}");
    if !link.to_string_lossy().starts_with(&expected) {
        return None;
    }
    map(fd)
}

fn map(fd: i32) -> Option<&'static Shared> {
    // SAFETY: a new shared mapping of one page of a memfd that is at
    // least a page long (made so by `create`); it is never unmapped, so
    // the reference lives as long as the process. The page holds only
    // atomics, which every process of the run updates atomically.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(&*(p as *const Shared))
    }
}
