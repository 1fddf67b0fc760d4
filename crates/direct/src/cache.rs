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
//!
//! Beside it, the directories a walk passes through (`Dentries`): the
//! node a name in a directory leads to, holding one lookup reference so
//! the filesystem keeps the node (as the kernel's dentry cache does), for
//! the filesystem's entry TTL and while that name was not removed or
//! moved away anywhere in the run: unlink, rmdir and rename bump a shared
//! counter picked by a hash of the name (`NAME_SLOTS` of them), so
//! removing one file leaves the walks through every directory cached.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::Arc;

use fusebox::fs::Filesystem;
use fusebox::types::FileAttr;
use fusebox::NodeId;

/// Names the shared page's descriptor to the programs the run executes.
pub const SHARED_VAR: &str = "FUSEBOX_DIRECT_SHARED";
/// The number of paths the cache holds; 0 turns it off.
pub const SIZE_VAR: &str = "FUSEBOX_DIRECT_CACHE";
pub const DEFAULT_ENTRIES: u64 = 65_536;
const MEMFD_NAME: &str = "fusebox-direct-shared";
/// Where the shared page's descriptor goes: above what programs usually
/// number their own (a program may still close it; see above).
const SHARED_FD_FLOOR: i32 = 1000;

const NAME_SLOTS: usize = 2048;
/// The shared memory's size: `Shared`, rounded up to pages.
const SHARED_BYTES: usize = 5 * 4096;

/// The shared page.
#[repr(C)]
pub struct Shared {
    epoch: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Bumped when a name hashing to the slot goes away or moves.
    names: [AtomicU64; NAME_SLOTS],
}

const _: () = assert!(std::mem::size_of::<Shared>() <= SHARED_BYTES);

fn name_slot(name: &[u8]) -> usize {
    // FNV-1a: stable across processes (the slots are shared), cheap.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % NAME_SLOTS as u64) as usize
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

    /// `name` was removed or moved away somewhere in the run: cached
    /// walks through it may be wrong.
    pub fn name_gone(&self, name: &[u8]) {
        self.shared.names[name_slot(name)].fetch_add(1, Ordering::AcqRel);
    }

    /// The directory-walk cache for `fs`, sized like this one, sharing
    /// its page.
    pub(crate) fn dentries(&self, fs: Arc<dyn Filesystem>) -> Dentries {
        let graveyard: Arc<Mutex<Vec<NodeId>>> = Arc::default();
        let dead = graveyard.clone();
        Dentries {
            entries: moka::sync::Cache::builder()
                .max_capacity(
                    self.entries
                        .policy()
                        .max_capacity()
                        .unwrap_or(DEFAULT_ENTRIES),
                )
                .eviction_listener(move |_, d: Dentry, _| {
                    dead.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(d.node)
                })
                .build(),
            shared: self.shared,
            fs,
            walks: AtomicUsize::new(0),
            graveyard,
        }
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
    rustix::fs::ftruncate(&fd, SHARED_BYTES as u64).ok()?;
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
    // A page of another layout (another build's run) is not joined.
    let len = std::fs::metadata(format!("/proc/self/fd/{fd}")).ok()?.len();
    if len != SHARED_BYTES as u64 {
        return None;
    }
    map(fd)
}

fn map(fd: i32) -> Option<&'static Shared> {
    // SAFETY: a new shared mapping of the first SHARED_BYTES of a memfd
    // that long (made so by `create`; `inherited` checks the size); it is never unmapped, so
    // the reference lives as long as the process. The page holds only
    // atomics, which every process of the run updates atomically.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SHARED_BYTES,
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

#[derive(Clone, Copy)]
pub(crate) struct Dentry {
    pub node: NodeId,
    pub attr: FileAttr,
    names: u64,
    until: Instant,
}

/// Names in directories that walks went through (see the module doc). An
/// entry owns one lookup reference of its node, given back (forget) when
/// it leaves the cache for whatever reason — but not while any walk is
/// under way, as one may be using the node it just got from here: those
/// wait in the graveyard until no walk is.
pub(crate) struct Dentries {
    entries: moka::sync::Cache<(NodeId, Vec<u8>), Dentry>,
    shared: &'static Shared,
    fs: Arc<dyn Filesystem>,
    /// Operations under way that may hold a node got from here.
    walks: AtomicUsize,
    graveyard: Arc<Mutex<Vec<NodeId>>>,
}

impl Dentries {
    pub fn get(&self, parent: NodeId, name: &[u8]) -> Option<Dentry> {
        let key = (parent, name.to_vec());
        let d = self.entries.get(&key)?;
        if d.names == self.name_stamp(name) && d.until > Instant::now() {
            return Some(d);
        }
        self.entries.invalidate(&key);
        None
    }

    /// Keep `node` (whose lookup reference the caller hands over) under
    /// `name` in `parent` for `ttl`, if the name did not go away since
    /// `names` (its `name_stamp`, read before the lookup). Returns false,
    /// the reference not taken, when it is not kept.
    pub fn put(
        &self,
        parent: NodeId,
        name: &[u8],
        node: NodeId,
        attr: FileAttr,
        ttl: Duration,
        names: u64,
    ) -> bool {
        if ttl.is_zero() || names != self.name_stamp(name) {
            return false;
        }
        let d = Dentry {
            node,
            attr,
            names,
            until: Instant::now() + ttl,
        };
        self.entries.insert((parent, name.to_vec()), d);
        true
    }

    pub fn name_stamp(&self, name: &[u8]) -> u64 {
        self.shared.names[name_slot(name)].load(Ordering::Acquire)
    }

    /// An operation that may use nodes from here starts.
    pub fn enter(&self) {
        self.walks.fetch_add(1, Ordering::AcqRel);
    }

    /// It is done; the last one out gives back what left the cache.
    pub fn leave(&self) {
        if self.walks.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let mut dead = self
            .graveyard
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Checked again under the lock: a walk that started since may
        // hold one of these (it cannot get one after: they are out of the
        // cache).
        if self.walks.load(Ordering::Acquire) != 0 {
            return;
        }
        for node in dead.drain(..) {
            self.fs.forget(node, 1);
        }
    }

    /// In a forked child: walks of other threads were left behind.
    pub fn forked(&self) {
        self.walks.store(0, Ordering::Release);
    }
}
