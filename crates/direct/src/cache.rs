//! Direct mode's metadata cache: the attributes a path resolved to, kept
//! in user space because the kernel's attribute and dentry caches are not
//! on this path (Prefuse's answer to the same problem).
//!
//! The kernel's caches are shared by every process; so is this one: a
//! table in shared memory (a memfd) that all processes of the run map —
//! forked children by inheriting the mapping, executed programs by
//! inheriting its descriptor — so `git status` or `make` run again and
//! again, each a new process, find what the last one looked up. A slot
//! is a seqlock: a reader that raced a writer sees a miss, never a torn
//! entry. A slot knows its path by a 128-bit hash under a key the run
//! draws (SipHash-1-3), not by the path itself: less than half the memory
//! to touch, paths of any length, and no two paths that collide can be
//! named without the key. A program that lost the descriptor (one that
//! closed all others and executed another) runs without the cache rather
//! than with an incoherent one.
//!
//! An entry lives for the attribute TTL the filesystem gave with it, as
//! the kernel would keep it, and only while what it depends on is
//! unchanged anywhere in the run: the inode's attributes (a write, chmod,
//! truncate, a link or unlink of it, a create in it if a directory) and
//! the names its path goes through (unlink, rmdir, rename of any of
//! them). Each change bumps shared counters picked by a hash of the inode
//! number and of the names (`INO_SLOTS`, `NAME_SLOTS`); an entry keeps
//! what they read when it was made. One more counter, the epoch, bumped
//! by every change, keeps out an answer a change raced with. A path that
//! went through a symlink is not kept (its target's names are not in it).
//!
//! Changes made outside the run, straight to the source directory, are
//! seen when the TTL runs out, exactly as on the kernel path.
//!
//! Beside it, the names walks went through (`Dentries`): the node a name
//! in a directory leads to, holding one lookup reference so the
//! filesystem keeps the node, as the kernel's dentry cache does. That
//! reference is what keeps a file's identity: a filesystem that numbers
//! inodes by node (sftpfs: SFTP has no inode numbers) would give a file
//! a new number at every walk if each walk let its node go, and tar,
//! which checks that a directory it made is still the one there before
//! setting its times, fails ("Directory renamed"). An entry answers a
//! walk without asking the filesystem only for the filesystem's entry
//! TTL and while that name was not removed or moved away anywhere in the
//! run: unlink, rmdir and rename bump a shared counter picked by a hash
//! of the name (`NAME_SLOTS` of them), so removing one file leaves the
//! walks through every directory cached. Past its TTL, or with the
//! metadata cache off, an entry still holds its node; the walk asks the
//! filesystem again and the answer replaces it.

#![allow(unsafe_code)]

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::Arc;

use fusebox::fs::Filesystem;
use fusebox::types::{FileAttr, Timespec};
use fusebox::NodeId;

use crate::intercept::raw_syscall;

/// Names the shared page's descriptor to the programs the run executes.
pub const SHARED_VAR: &str = "FUSEBOX_DIRECT_SHARED";
/// Pages of file data the page cache holds per process; 0 turns it off
/// (the default depends on the filesystem).
pub const PAGES_VAR: &str = "FUSEBOX_DIRECT_PAGE_CACHE";
/// How long, in seconds, a page of file data is trusted (unset: until
/// the run itself changes the file): for a filesystem others change behind
/// the run, such as a remote one (sftpfs: its cache timeout).
pub const PAGE_TTL_VAR: &str = "FUSEBOX_DIRECT_PAGE_TTL";
/// The number of paths the cache holds; 0 turns it off.
pub const SIZE_VAR: &str = "FUSEBOX_DIRECT_CACHE";
pub const DEFAULT_ENTRIES: u64 = 65_536;
const MEMFD_NAME: &str = "fusebox-direct-shared";
/// Where the shared page's descriptor goes: above what programs usually
/// number their own (a program may still close it; see above).
const SHARED_FD_FLOOR: i32 = 1000;

/// Stamps are shared by the names (inodes) hashing to one slot, so a
/// change to one makes the others' entries stale too: the more slots, the
/// fewer such false changes (a stamp is 8 bytes of a page touched when
/// used).
const NAME_SLOTS: usize = 1 << 16;
const INO_SLOTS: usize = 1 << 16;
/// The shared header's size: `Shared`, rounded up to pages.
const SHARED_BYTES: usize = std::mem::size_of::<Shared>().next_multiple_of(4096);

/// The shared header; the table of `slots` slots follows it.
#[repr(C)]
pub struct Shared {
    epoch: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// The table's size, a power of two, set by the run's first process.
    slots: AtomicU64,
    /// The key of the paths' hash (SipHash-1-3, 128 bits), drawn by the
    /// run's first process: an entry is known by that hash alone, and
    /// nobody can name two paths that collide without the key.
    key: [AtomicU64; 2],
    /// Bumped when a name hashing to the slot goes away or moves.
    names: [AtomicU64; NAME_SLOTS],
    /// Bumped when the attributes of an inode hashing to the slot change
    /// (which a write does): also the page cache's stamp.
    inos: [AtomicU64; INO_SLOTS],
    page_hits: AtomicU64,
    page_misses: AtomicU64,
    /// Reads of files through the mount in the run: a read may move an
    /// access time without any change being made (see `reads`).
    reads: AtomicU64,
}

/// The inode number's low bits: the files a program writes one after the
/// other mostly get consecutive numbers, which then never share a stamp
/// (the multiplicative hash this replaced put every file of a 10,000-file
/// run on the stamp of another's, 7,037 numbers on).
fn ino_slot(ino: u64) -> usize {
    (ino % INO_SLOTS as u64) as usize
}

/// FNV-1a: the same in every process (the slots and the table are
/// shared), cheap for short names.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn name_slot(name: &[u8]) -> usize {
    (mixed(fnv1a(name)) % NAME_SLOTS as u64) as usize
}

const ATTR_WORDS: usize = 12;
/// Slots a key may sit in, from its hash on.
const PROBES: usize = 4;
const MAX_SLOTS: u64 = 1 << 20;

/// One entry of the shared table; every field an atomic, as other
/// processes read and write it.
#[repr(C)]
struct Slot {
    /// Even: stable; odd: being written.
    seq: AtomicU64,
    /// The path's hash, first half (picks the slot); 0: empty.
    hash: AtomicU64,
    /// Its second half. A slot holds no path: 144 bytes, where one with
    /// the path held 336, so a run that makes as many entries touches
    /// (and the kernel allocates and zeroes) fewer than half the pages.
    check: AtomicU64,
    /// The names stamp of its path and the inode's stamp, when made.
    names: AtomicU64,
    ino: AtomicU64,
    /// CLOCK_MONOTONIC nanoseconds.
    until: AtomicU64,
    attr: [AtomicU64; ATTR_WORDS],
}

pub struct MetaCache {
    shared: &'static Shared,
    table: &'static [Slot],
    /// Walk-cache entries per process (`Dentries`).
    entries: u64,
    /// The shared memory's descriptor, named to executed programs.
    shared_fd: i32,
}

/// CLOCK_MONOTONIC, which every process reads alike (Instant hides it).
fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills the timespec given; the vDSO answers, no system call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// splitmix64's finaliser: FNV-1a's low bits, which pick the stamp, hardly
/// differ between names that differ in their last characters (f1, f2,
/// ...), which then shared their stamps.
fn mixed(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn is_link(attr: &FileAttr) -> bool {
    attr.mode & libc::S_IFMT == libc::S_IFLNK
}

fn attr_words(a: &FileAttr) -> [u64; ATTR_WORDS] {
    [
        a.ino,
        a.size,
        a.blocks,
        a.atime.sec as u64,
        u64::from(a.atime.nsec),
        a.mtime.sec as u64,
        u64::from(a.mtime.nsec),
        a.ctime.sec as u64,
        u64::from(a.ctime.nsec),
        u64::from(a.mode) | u64::from(a.nlink) << 32,
        u64::from(a.uid) | u64::from(a.gid) << 32,
        u64::from(a.rdev) | u64::from(a.blksize) << 32,
    ]
}

fn attr_of(w: &[u64; ATTR_WORDS]) -> FileAttr {
    let ts = |s: u64, n: u64| Timespec {
        sec: s as i64,
        nsec: n as u32,
    };
    FileAttr {
        ino: w[0],
        size: w[1],
        blocks: w[2],
        atime: ts(w[3], w[4]),
        mtime: ts(w[5], w[6]),
        ctime: ts(w[7], w[8]),
        mode: w[9] as u32,
        nlink: (w[9] >> 32) as u32,
        uid: w[10] as u32,
        gid: (w[10] >> 32) as u32,
        rdev: w[11] as u32,
        blksize: (w[11] >> 32) as u32,
    }
}

impl Slot {
    /// The attributes, stamps and deadline if this slot holds `key`
    /// (consistently read).
    fn read(&self, (hash, check): (u64, u64)) -> Option<([u64; ATTR_WORDS], [u64; 3])> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 == 1
            || self.hash.load(Ordering::Relaxed) != hash
            || self.check.load(Ordering::Relaxed) != check
        {
            return None;
        }
        let attr = std::array::from_fn(|i| self.attr[i].load(Ordering::Relaxed));
        let marks = [
            self.names.load(Ordering::Relaxed),
            self.ino.load(Ordering::Relaxed),
            self.until.load(Ordering::Relaxed),
        ];
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == seq).then_some((attr, marks))
    }
}

/// Hits and misses of every process of the run so far (pages: of the
/// page cache, 0 when it is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub page_hits: u64,
    pub page_misses: u64,
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
        let (shared_fd, shared, table) = match std::env::var(SHARED_VAR) {
            Ok(fd) => {
                let fd = fd.parse().ok()?;
                let (shared, table) = inherited(fd)?;
                (fd, shared, table)
            }
            Err(_) => create(entries.next_power_of_two().min(MAX_SLOTS))?,
        };
        Some(MetaCache {
            shared,
            table,
            entries,
            shared_fd,
        })
    }

    /// The descriptor of the run's shared page, for `SHARED_VAR`.
    pub fn shared_fd(&self) -> i32 {
        self.shared_fd
    }

    /// `path`'s hash under the run's key: (slot-picking half, never 0;
    /// other half).
    fn key(&self, path: &[u8]) -> (u64, u64) {
        let k = |i: usize| self.shared.key[i].load(Ordering::Relaxed);
        let h = siphasher::sip128::SipHasher13::new_with_keys(k(0), k(1)).hash(path);
        (h.h1.max(1), h.h2)
    }

    fn probes(&self, hash: u64) -> impl Iterator<Item = &Slot> {
        let mask = self.table.len() as u64 - 1;
        (0..PROBES as u64).map(move |i| &self.table[((hash + i) & mask) as usize])
    }

    /// The attributes cached for `path`, if still good.
    pub fn get(&self, path: &[u8], follow: bool) -> Option<FileAttr> {
        let hit = self.lookup(path, follow);
        let counter = if hit.is_some() {
            &self.shared.hits
        } else {
            &self.shared.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// One entry per path, whether the last link is followed or not: an
    /// entry is made only for a path that went through no symlink (see
    /// `put`), so both answers are the same, except for a symlink at the
    /// end, whose entry answers only lstat.
    fn lookup(&self, path: &[u8], follow: bool) -> Option<FileAttr> {
        let key = self.key(path);
        let (attr, [names, ino, until]) = self.probes(key.0).find_map(|s| s.read(key))?;
        let attr = attr_of(&attr);
        if follow && is_link(&attr) {
            return None;
        }
        (names == self.names_stamp(path) && ino == self.ino_stamp(attr.ino) && until > now_ns())
            .then_some(attr)
    }

    /// What the names `path` goes through were stamped: changes when any
    /// of them goes away or moves (the counters only grow).
    pub fn names_stamp(&self, path: &[u8]) -> u64 {
        path.split(|&c| c == b'/')
            .filter(|c| !c.is_empty() && *c != b"." && *c != b"..")
            .map(|c| self.shared.names[name_slot(c)].load(Ordering::Acquire))
            .fold(0u64, u64::wrapping_add)
    }

    fn ino_stamp(&self, ino: u64) -> u64 {
        self.shared.inos[ino_slot(ino)].load(Ordering::Acquire)
    }

    /// The attributes of inode `ino` changed.
    pub fn ino_changed(&self, ino: u64) {
        self.shared.inos[ino_slot(ino)].fetch_add(1, Ordering::AcqRel);
    }

    /// Remember `attr` for `path` for `ttl`, if nothing changed since
    /// `epoch` and `names` (`epoch()` and `names_stamp(path)`, read before
    /// the filesystem was asked). A slot another process is writing is
    /// left to it.
    pub fn put(
        &self,
        path: &[u8],
        follow: bool,
        attr: FileAttr,
        ttl: Duration,
        epoch: u64,
        names: u64,
    ) {
        // What a followed link led to is not the path's own (a resolution
        // through a link is never kept; this is the belt to those braces).
        if ttl.is_zero() || epoch != self.epoch() || (follow && is_link(&attr)) {
            return;
        }
        let ino = self.ino_stamp(attr.ino);
        let (hash, check) = self.key(path);
        let now = now_ns();
        // The key's own slot, else a free or expired one, else the one
        // closest to expiring.
        let slot = self
            .probes(hash)
            .find(|s| {
                s.hash.load(Ordering::Relaxed) == hash && s.check.load(Ordering::Relaxed) == check
            })
            .or_else(|| {
                self.probes(hash).find(|s| {
                    s.hash.load(Ordering::Relaxed) == 0 || s.until.load(Ordering::Relaxed) <= now
                })
            })
            .unwrap_or_else(|| {
                self.probes(hash)
                    .min_by_key(|s| s.until.load(Ordering::Relaxed))
                    .expect("PROBES > 0")
            });
        let seq = slot.seq.load(Ordering::Relaxed);
        if seq & 1 == 1
            || slot
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        slot.hash.store(hash, Ordering::Relaxed);
        slot.check.store(check, Ordering::Relaxed);
        for (d, w) in slot.attr.iter().zip(attr_words(&attr)) {
            d.store(w, Ordering::Relaxed);
        }
        slot.names.store(names, Ordering::Relaxed);
        slot.ino.store(ino, Ordering::Relaxed);
        let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        slot.until
            .store(now.saturating_add(ttl_ns), Ordering::Relaxed);
        slot.seq.store(seq + 2, Ordering::Release);
    }

    /// Reads made so far in the run (`read_made`): attributes read before
    /// one may hold an access time it has moved since.
    pub fn reads(&self) -> u64 {
        self.shared.reads.load(Ordering::Acquire)
    }

    /// A file was read through the mount.
    pub fn read_made(&self) {
        self.shared.reads.fetch_add(1, Ordering::AcqRel);
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

    /// A page cache of `pages` pages (per process), whose pages stay good
    /// while their inode's stamp does.
    /// A page cache of `pages` pages, each trusted for `ttl` at most
    /// (None: until the run changes its file).
    pub fn pages(&self, pages: u64, ttl: Option<std::time::Duration>) -> PageCache {
        let mut b = moka::sync::Cache::builder().max_capacity(pages);
        if let Some(ttl) = ttl {
            b = b.time_to_live(ttl.max(std::time::Duration::from_millis(1)));
        }
        PageCache {
            pages: b.build(),
            shared: self.shared,
        }
    }

    /// The directory-walk cache for `fs`, sized like this one, sharing
    /// its page.
    pub(crate) fn dentries(&self, fs: Arc<dyn Filesystem>) -> Dentries {
        Dentries::new(fs, self.entries, Some(self.shared))
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
            page_hits: self.shared.page_hits.load(Ordering::Relaxed),
            page_misses: self.shared.page_misses.load(Ordering::Relaxed),
        }
    }
}

type Mapped = (&'static Shared, &'static [Slot]);

fn table_bytes(slots: u64) -> u64 {
    slots * std::mem::size_of::<Slot>() as u64
}

fn create(slots: u64) -> Option<(i32, &'static Shared, &'static [Slot])> {
    let fd = rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::empty()).ok()?;
    // Sparse: pages are used as slots are written.
    rustix::fs::ftruncate(&fd, SHARED_BYTES as u64 + table_bytes(slots)).ok()?;
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
    let (shared, table) = map(fd.as_raw_fd(), Some(slots))?;
    Some((fd.into_raw_fd(), shared, table))
}

/// The shared memory behind an inherited descriptor, if it is still ours.
fn inherited(fd: i32) -> Option<Mapped> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let expected = format!("/memfd:{MEMFD_NAME}");
    if !link.to_string_lossy().starts_with(&expected) {
        return None;
    }
    map(fd, None)
}

/// Map the header, set (`Some`, the creator) or read the table's size,
/// check the memory is that long (a run of another build is not joined),
/// then map the table.
fn map(fd: i32, set_slots: Option<u64>) -> Option<Mapped> {
    let len = std::fs::metadata(format!("/proc/self/fd/{fd}")).ok()?.len();
    let header = map_shared(fd, 0, SHARED_BYTES)?;
    // SAFETY: `map_shared` returned SHARED_BYTES of shared memory, never
    // unmapped, which `Shared` (atomics only) fits in (asserted above).
    let shared: &'static Shared = unsafe { &*(header as *const Shared) };
    if let Some(n) = set_slots {
        let mut key = [0u64; 2];
        let got = raw_syscall(
            libc::SYS_getrandom,
            [key.as_mut_ptr() as u64, 16, 0, 0, 0, 0],
        );
        if got != 16 {
            return None;
        }
        for (k, v) in shared.key.iter().zip(key) {
            k.store(v, Ordering::Relaxed);
        }
        shared.slots.store(n, Ordering::Release);
    }
    let slots = shared.slots.load(Ordering::Acquire);
    if !slots.is_power_of_two()
        || slots > MAX_SLOTS
        || len != SHARED_BYTES as u64 + table_bytes(slots)
    {
        return None;
    }
    let table = map_shared(fd, SHARED_BYTES as u64, table_bytes(slots) as usize)?;
    // SAFETY: `slots` slots of shared memory, never unmapped; a `Slot` is
    // atomics only, valid for any bytes (zero: empty), and every process
    // touches them atomically.
    Some((shared, unsafe {
        std::slice::from_raw_parts(table as *const Slot, slots as usize)
    }))
}

/// `len` bytes of `fd` from `offset`, shared, for the process's lifetime.
fn map_shared(fd: i32, offset: u64, len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: a new shared mapping of a range the caller checked the memfd
    // holds; it does not overlap anything (the kernel picks the address).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset as libc::off_t,
        )
    };
    (p != libc::MAP_FAILED).then_some(p)
}

/// Bytes per page of the page cache.
pub const PAGE_BYTES: usize = 4096;

#[derive(Clone)]
struct Page {
    /// PAGE_BYTES, or fewer for the last page of a file (its end).
    data: Arc<[u8]>,
    stamp: u64,
}

/// File data read through the mount, by inode and page, in user space
/// (Prefuse's page cache): for filesystems whose data does not already sit
/// in the kernel's page cache (not stackfs or pathfs, whose reads reach the
/// source's). A write through the mount, in any process of the run, bumps
/// the inode's shared stamp, and its pages are stale from then; data
/// changed behind the filesystem's back is seen once a page's time to live
/// (`PAGE_TTL_VAR`) has passed, or never without one, which is why it is
/// off for filesystems over a directory others may write.
pub struct PageCache {
    pages: moka::sync::Cache<(u64, u64), Page>,
    shared: &'static Shared,
}

impl PageCache {
    /// The stamp to give pages read from now on.
    pub fn stamp(&self, ino: u64) -> u64 {
        self.shared.inos[ino_slot(ino)].load(Ordering::Acquire)
    }

    pub fn get(&self, ino: u64, index: u64) -> Option<Arc<[u8]>> {
        let hit = self
            .pages
            .get(&(ino, index))
            .filter(|p| p.stamp == self.stamp(ino))
            .map(|p| p.data);
        let counter = if hit.is_some() {
            &self.shared.page_hits
        } else {
            &self.shared.page_misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Keep `data` (at most a page) as page `index` of `ino`, read under
    /// `stamp`.
    pub fn put(&self, ino: u64, index: u64, data: &[u8], stamp: u64) {
        if stamp == self.stamp(ino) {
            let page = Page {
                data: data.into(),
                stamp,
            };
            self.pages.insert((ino, index), page);
        }
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
/// it leaves the cache for whatever reason, replaced included — but not
/// while any walk is under way, as one may be using the node it just got
/// from here: those wait in the graveyard until no walk is.
pub(crate) struct Dentries {
    entries: moka::sync::Cache<(NodeId, Vec<u8>), Dentry>,
    /// The run's name stamps; None when the metadata cache is off: then
    /// entries keep nodes (identity) and never answer a walk.
    shared: Option<&'static Shared>,
    fs: Arc<dyn Filesystem>,
    /// Operations under way that may hold a node got from here.
    walks: AtomicUsize,
    graveyard: Arc<Mutex<Vec<NodeId>>>,
}

/// Entries kept with the metadata cache off, for identity alone: the
/// directories and files a run works in, not a whole tree's.
const IDENTITY_ENTRIES: u64 = 4096;

impl Dentries {
    fn new(fs: Arc<dyn Filesystem>, capacity: u64, shared: Option<&'static Shared>) -> Dentries {
        let graveyard: Arc<Mutex<Vec<NodeId>>> = Arc::default();
        let dead = graveyard.clone();
        Dentries {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .eviction_listener(move |_, d: Dentry, _| {
                    dead.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(d.node)
                })
                .build(),
            shared,
            fs,
            walks: AtomicUsize::new(0),
            graveyard,
        }
    }

    /// With the metadata cache off: nodes kept for identity only.
    pub(crate) fn identity_only(fs: Arc<dyn Filesystem>) -> Dentries {
        Dentries::new(fs, IDENTITY_ENTRIES, None)
    }

    /// The entry for `name` in `parent`, if it may answer a walk.
    pub fn get(&self, parent: NodeId, name: &[u8]) -> Option<Dentry> {
        let stamp = self.name_stamp(name)?;
        let key = (parent, name.to_vec());
        let d = self.entries.get(&key)?;
        if d.names != stamp {
            // The name went away: so does what it led to.
            self.entries.invalidate(&key);
            return None;
        }
        (d.until > Instant::now()).then_some(d)
    }

    /// Keep `node` (whose lookup reference the caller hands over) under
    /// `name` in `parent`, trusted for `ttl`, if the name did not go away
    /// since `names` (its `name_stamp`, read before the lookup). Returns
    /// false, the reference not taken, when it is not kept. An entry it
    /// replaces gives its reference back, the same node's included.
    pub fn put(
        &self,
        parent: NodeId,
        name: &[u8],
        node: NodeId,
        attr: FileAttr,
        ttl: Duration,
        names: Option<u64>,
    ) -> bool {
        if names != self.name_stamp(name) {
            return false;
        }
        let d = Dentry {
            node,
            attr,
            names: names.unwrap_or(0),
            until: Instant::now() + ttl,
        };
        self.entries.insert((parent, name.to_vec()), d);
        true
    }

    /// Drop the entry for `name` in `parent` (its node is given back once
    /// no walk is under way).
    pub fn remove(&self, parent: NodeId, name: &[u8]) {
        self.entries.invalidate(&(parent, name.to_vec()));
    }

    /// The stamp of `name` (None with the metadata cache off).
    pub fn name_stamp(&self, name: &[u8]) -> Option<u64> {
        self.shared
            .map(|s| s.names[name_slot(name)].load(Ordering::Acquire))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64, size: u64) -> FileAttr {
        FileAttr {
            ino,
            size,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            mtime: Timespec {
                sec: -5,
                nsec: 999_999_999,
            },
            ..FileAttr::default()
        }
    }

    #[test]
    fn the_shared_table_answers_until_a_change_or_the_ttl() {
        let cache = MetaCache::for_process(64).unwrap();
        let ttl = Duration::from_secs(60);
        let a = attr(7, 123);
        let put = |path: &[u8], follow, a, ttl, epoch| {
            cache.put(path, follow, a, ttl, epoch, cache.names_stamp(path))
        };
        put(b"dir/f", true, a, ttl, cache.epoch());
        assert_eq!(cache.get(b"dir/f", true), Some(a));
        // Not a link: stat and lstat alike.
        assert_eq!(cache.get(b"dir/f", false), Some(a));
        assert_eq!(cache.get(b"dir/g", true), None);
        // A link's own attributes answer lstat only.
        let link = FileAttr {
            mode: libc::S_IFLNK | 0o777,
            ..attr(8, 4)
        };
        put(b"dir/l", false, link, ttl, cache.epoch());
        assert_eq!(cache.get(b"dir/l", false), Some(link));
        assert_eq!(cache.get(b"dir/l", true), None);
        put(b"dir/l2", true, link, ttl, cache.epoch());
        assert_eq!(cache.get(b"dir/l2", false), None, "never kept as followed");
        // An answer read before a change is not kept.
        let before = cache.epoch();
        cache.changed();
        put(b"dir/h", true, a, ttl, before);
        assert_eq!(cache.get(b"dir/h", true), None);
        assert_eq!(
            cache.get(b"dir/f", true),
            Some(a),
            "another change leaves it"
        );
        // Its inode's attributes change, or a name on its path goes.
        cache.ino_changed(7);
        assert_eq!(cache.get(b"dir/f", true), None);
        put(b"dir/f", true, a, ttl, cache.epoch());
        cache.name_gone(b"dir");
        assert_eq!(cache.get(b"dir/f", true), None);
        // Overwritten in place; no TTL, not kept.
        put(b"dir/f", true, attr(7, 1), ttl, cache.epoch());
        assert_eq!(cache.get(b"dir/f", true).map(|a| a.size), Some(1));
        put(b"dir/z", true, a, Duration::ZERO, cache.epoch());
        assert_eq!(cache.get(b"dir/z", true), None);
        let long = vec![b'x'; 4000];
        put(&long, true, a, ttl, cache.epoch());
        assert_eq!(cache.get(&long, true), Some(a), "any length kept");
        assert_eq!(cache.get(&long[1..], true), None);
        // Many keys in a small table: what is found is right.
        for i in 0..500u64 {
            put(
                format!("k{i}").as_bytes(),
                false,
                attr(i, i),
                ttl,
                cache.epoch(),
            );
        }
        for i in 0..500u64 {
            if let Some(got) = cache.get(format!("k{i}").as_bytes(), false) {
                assert_eq!(got, attr(i, i));
            }
        }
        assert!(cache.stats().hits > 0);
    }
}
