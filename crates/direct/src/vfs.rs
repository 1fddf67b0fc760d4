//! The virtual mount: a fusebox `Filesystem` seen at a path of this
//! process, reached by calling it, not through the kernel.
//!
//! Paths are resolved here as the kernel resolves them under a FUSE mount:
//! component by component with `lookup`, symlinks followed by `readlink`.
//! Every open file gets a real kernel descriptor (a memfd placeholder), so
//! the application's descriptor numbers, dup, close-on-exec and fcntl
//! flags behave as the kernel's own; the table here maps that number to
//! the filesystem's node and handle. Node references taken by a lookup are
//! given back (`forget`) when the call no longer needs them: only open
//! files and a virtual working directory hold one.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::{Arc, Mutex, PoisonError};

use fusebox::fs::ops::Ctx;
use fusebox::fs::ops::{Create, Mkdir, Open, Read, Release, Rename, SetAttr, Write};
use fusebox::fs::Filesystem;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::{Errno, FileAttr, FileHandle, NodeId};

use crate::appmem::UserBuf;
use crate::cache::{CacheStats, Dentries, MetaCache, PageCache, PAGE_BYTES};
use crate::intercept::raw_syscall;
use crate::placeholder::{self, Pool, Twin};
use crate::process;

/// A call's result as the kernel gives it: a value or an errno.
pub(crate) type SysResult = Result<i64, i32>;

/// The longest path a walk leaves the mount for (PATH_MAX).
const ESCAPE_MAX: usize = libc::PATH_MAX as usize;

thread_local! {
    /// Where a walk left the mount through a symlink whose target is
    /// outside it: the target and the rest of the path, and its length
    /// (0: none). Set with the walk's EXDEV; taken by the call's router,
    /// which makes the call again there. A fixed buffer: a thread-local
    /// with a destructor would be registered (an allocation) at a thread's
    /// first use, which may be a call made inside malloc.
    static ESCAPED: std::cell::RefCell<([u8; ESCAPE_MAX], usize)> =
        const { std::cell::RefCell::new(([0; ESCAPE_MAX], 0)) };
}

fn set_escaped(path: &[u8]) {
    let _ = ESCAPED.try_with(|e| {
        let mut e = e.borrow_mut();
        match e.0.get_mut(..path.len()) {
            Some(room) => {
                room.copy_from_slice(path);
                e.1 = path.len();
            }
            None => e.1 = 0,
        }
    });
}

/// The path the last walk of this thread left the mount for, if it did.
/// (`try_with`: a thread's last calls come after its thread-locals are
/// gone.)
pub(crate) fn take_escaped() -> Option<Vec<u8>> {
    ESCAPED
        .try_with(|e| {
            let mut e = e.borrow_mut();
            let n = std::mem::take(&mut e.1);
            (n > 0).then(|| e.0[..n].to_vec())
        })
        .ok()
        .flatten()
}

const MAX_SYMLINKS: usize = 40;
const IO_CHUNK: usize = 1 << 20;

/// Where a read's bytes go: `each` takes a piece at its offset in the
/// destination; `cheap` when that is a plain copy (memory known to take
/// writes), not a system call.
struct Put<F> {
    cheap: bool,
    each: F,
}
// An O_APPEND piece is one request to the run's server: the header, the
// WRITE's arguments and the run's extension records (CPU and APPEND).
const _: () = assert!(
    IO_CHUNK + crate::shared::server::REQUEST_OVERHEAD <= crate::shared::server::MAX_REQUEST
);

/// Write `data` in IO_CHUNK pieces with `one(written so far, piece)`, which
/// says how much of its piece it wrote; stops at a piece nothing of which
/// was written or that failed (an error only if nothing was written).
fn in_chunks(
    data: &[u8],
    mut one: impl FnMut(usize, &[u8]) -> fusebox::FsResult<u32>,
) -> Result<usize, i32> {
    let mut done = 0usize;
    while done < data.len() {
        let chunk = &data[done..(done + IO_CHUNK).min(data.len())];
        match one(done, chunk) {
            Ok(0) => break,
            Ok(n) => done += n as usize,
            Err(e) if done == 0 => return Err(err(e)),
            Err(_) => break,
        }
    }
    Ok(done)
}

fn err(e: Errno) -> i32 {
    if e.0 > 0 {
        e.0
    } else {
        libc::EIO
    }
}

/// One open file: shared by every descriptor dup'ed from it, as the
/// kernel shares an open file description (offset and flags).
pub(crate) struct OpenFile {
    fs: Arc<dyn Filesystem>,
    node: NodeId,
    fh: FileHandle,
    /// Open flags; F_SETFL changes some.
    flags: std::sync::atomic::AtomicI32,
    dir: bool,
    /// The path it was opened by, inside the mount (for fchdir and
    /// relative lookups from it).
    path: Vec<u8>,
    position: Mutex<Position>,
    /// The descriptor record locks and flock(2) act on (see `lock_fd`).
    lock_fd: std::sync::OnceLock<i32>,
    /// Its inode number (whose cached attributes a write makes stale).
    ino: u64,
    /// `intercept::descriptor_shares()` when its placeholder was made
    /// (`u64::MAX` for one inherited across exec): while it is still the
    /// same, no other process holds the placeholder.
    born: u64,
    /// The path the program opened it by and the names stamp of that path
    /// then, if a stat of that path may be cached (see `close`).
    opened_as: Option<(Vec<u8>, u64)>,
    /// Created, truncated or written through this open file.
    dirty: std::sync::atomic::AtomicBool,
    /// For a file this open created write-only (or opened write-only
    /// through `create_without_lookup`), if nothing else changed while it
    /// was made: the attributes the create answered, their TTL, and the
    /// metadata cache's epoch and read count just after the create. While
    /// both are the same (nothing changed and nothing was read anywhere in
    /// the run since: a read moves an access time), they are still the
    /// file's, and its close need not ask the filesystem again
    /// (`remember_attributes`).
    created: Option<Created>,
    /// The pool number its placeholder came from (`placeholder::Twin`).
    twin: Mutex<Option<Twin>>,
}

/// See `OpenFile::created`.
#[derive(Clone, Copy)]
struct Created {
    attr: FileAttr,
    ttl: std::time::Duration,
    epoch: u64,
    reads: u64,
}

impl Created {
    /// The cache's epoch and read count before a create is asked.
    fn before(cache: Option<&MetaCache>) -> Option<(u64, u64)> {
        cache.map(|c| (c.epoch(), c.reads()))
    }

    /// What to remember of a create opened with `flags` that answered
    /// `entry`: only write-only (nothing can be read through it), and only
    /// if `before` shows that the create's own change (now done) was the
    /// only one in between. The read count is the one from before: a read
    /// ending while the create ran may have moved the access time it
    /// answered.
    fn after(
        cache: Option<&MetaCache>,
        before: Option<(u64, u64)>,
        flags: i32,
        entry: &fusebox::Entry,
    ) -> Option<Created> {
        let (cache, (epoch, reads)) = cache.zip(before)?;
        (flags & libc::O_ACCMODE == libc::O_WRONLY && cache.epoch() == epoch + 1).then_some(
            Created {
                attr: entry.attr,
                ttl: entry.attr_ttl,
                epoch: epoch + 1,
                reads,
            },
        )
    }
}

/// In-process position state. A file's offset is not here: it is the
/// placeholder descriptor's own offset, which the kernel shares exactly as
/// it would share the file's (between dup'ed descriptors, with forked
/// children, across exec).
#[derive(Default)]
struct Position {
    /// Directories: the cookie of the next entry to list.
    dir_cookie: u64,
    /// The placeholder's offset as this process last set it: still the
    /// file's while no other process holds the placeholder (see
    /// `OpenFile::born`), which saves asking the kernel (an lseek) on
    /// every read and write.
    known: Option<u64>,
}

impl Position {
    /// The file's offset, which is `fd`'s (the placeholder's).
    fn offset(&self, fd: i32, file: &OpenFile) -> u64 {
        match self.known {
            Some(at) if file.born == crate::intercept::descriptor_shares() => at,
            _ => offset_of(fd),
        }
    }

    fn set(&mut self, fd: i32, offset: u64) {
        set_offset(fd, offset);
        self.known = Some(offset);
    }
}

fn offset_of(fd: i32) -> u64 {
    raw_syscall(
        libc::SYS_lseek,
        [fd as u64, 0, libc::SEEK_CUR as u64, 0, 0, 0],
    )
    .max(0) as u64
}

fn set_offset(fd: i32, offset: u64) {
    raw_syscall(
        libc::SYS_lseek,
        [fd as u64, offset, libc::SEEK_SET as u64, 0, 0, 0],
    );
}

impl OpenFile {
    pub(crate) fn flags(&self) -> i32 {
        self.flags.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// fcntl(F_SETFL): the flags Linux lets change.
    pub(crate) fn set_flags(&self, asked: i32) {
        let settable =
            libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME | libc::O_ASYNC;
        let old = self.flags();
        self.flags.store(
            (old & !settable) | (asked & settable),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let ctx = Ctx::internal();
        let release = Release {
            fh: self.fh,
            flags: self.flags(),
            flush: false,
            flock_unlock: false,
            lock_owner: 0,
            forget_follows: true,
        };
        if let Some(&fd) = self.lock_fd.get() {
            raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
        if self.dir {
            let _ = self.fs.releasedir(&ctx, self.node, &release);
        } else {
            let _ = self.fs.flush(&ctx, self.node, self.fh, 0);
            let _ = self.fs.release(&ctx, self.node, &release);
        }
        self.fs.forget(self.node, 1);
    }
}

/// Ends a change (`VirtualMount::changing`).
struct Change<'a> {
    cache: Option<&'a MetaCache>,
    /// Names removed or moved away by it: cached walks through them are
    /// stale too.
    gone: Vec<Vec<u8>>,
    /// Inodes whose attributes it changes.
    inos: Vec<u64>,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.cache {
            c.changed();
            for name in &self.gone {
                c.name_gone(name);
            }
            for &ino in &self.inos {
                c.ino_changed(ino);
            }
        }
    }
}

/// Lookups made while resolving one path, given back when it is done
/// (nodes from the walk cache are the cache's, not counted here).
struct Looked<'a> {
    fs: &'a dyn Filesystem,
    nodes: Vec<NodeId>,
    /// Nodes of `nodes` found at a name: what nobody keeps goes to the
    /// walk cache, which holds the node (its identity) for the next walk.
    found: Vec<Found>,
    dentries: Option<&'a Dentries>,
}

/// A lookup's answer, for the walk cache.
struct Found {
    parent: NodeId,
    name: Vec<u8>,
    node: NodeId,
    attr: FileAttr,
    ttl: std::time::Duration,
    /// The name's stamp before the lookup.
    names: Option<u64>,
}

impl Looked<'_> {
    /// Keep one reference to `node` beyond this call (an open file's).
    fn keep(&mut self, node: NodeId) {
        if let Some(i) = self.nodes.iter().rposition(|&n| n == node) {
            self.nodes.swap_remove(i);
        }
    }

    /// `name` in `parent` was removed or moved away: the walk cache keeps
    /// no node under it (an unlinked file's node would outlive its last
    /// use there, as the kernel's dentry does not).
    fn gone(&mut self, parent: NodeId, name: &[u8]) {
        self.found.retain(|f| f.parent != parent || f.name != name);
        if let Some(d) = self.dentries {
            d.remove(parent, name);
        }
    }
}

impl Drop for Looked<'_> {
    fn drop(&mut self) {
        for &n in &self.nodes {
            if let Some(i) = self.found.iter().position(|f| f.node == n) {
                let f = self.found.swap_remove(i);
                if self
                    .dentries
                    .is_some_and(|d| d.put(f.parent, &f.name, n, f.attr, f.ttl, f.names))
                {
                    continue;
                }
            }
            self.fs.forget(n, 1);
        }
        if let Some(d) = self.dentries {
            d.leave();
        }
    }
}

/// The directory holding a path's last component (`parent_of`).
struct Parent {
    node: NodeId,
    ino: u64,
    /// The last component.
    name: Vec<u8>,
    /// The directory's path inside the mount, normalised ("" for the root).
    path: Vec<u8>,
    /// Whether the walk to it followed a symlink.
    via_link: bool,
}

/// A path resolved inside the mount.
struct Resolved {
    /// The directory holding the last component, and that component (None
    /// for the mount's root itself).
    parent: NodeId,
    name: Option<Vec<u8>>,
    /// The node the path names, if it exists.
    node: Option<(NodeId, FileAttr)>,
    /// How long those attributes (always just given by the filesystem,
    /// never from the walk cache) may be trusted.
    attr_ttl: std::time::Duration,
    /// The inode number of the directory holding the last component.
    parent_ino: u64,
    /// Whether the walk followed a symlink.
    via_link: bool,
    /// The path inside the mount, normalised ("" for the root).
    path: Vec<u8>,
}

impl Resolved {
    /// The path's last component `name`, in `parent`, reached through
    /// `done`.
    fn last(
        parent: NodeId,
        done: &[Vec<u8>],
        name: Vec<u8>,
        node: Option<(NodeId, FileAttr)>,
    ) -> Resolved {
        let mut path = join(done);
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        Resolved {
            parent,
            name: Some(name),
            node,
            attr_ttl: Default::default(),
            parent_ino: 0,
            via_link: false,
            path,
        }
    }
}

pub struct VirtualMount {
    /// Where the filesystem appears: absolute, no trailing slash.
    at: Vec<u8>,
    fs: Arc<dyn Filesystem>,
    state: Mutex<State>,
    /// Whether `state.files` holds anything, kept by `StateGuard`.
    any_open: std::sync::atomic::AtomicBool,
    /// Attributes by path (`cache.rs`), when on.
    cache: std::sync::OnceLock<MetaCache>,
    /// Directories walks went through, with it.
    dentries: std::sync::OnceLock<Dentries>,
    root_ino: std::sync::OnceLock<u64>,
    /// File data, when on (`set_page_cache`).
    pages: std::sync::OnceLock<PageCache>,
    /// Placeholders of closed files, for the next opens.
    pool: Arc<Pool>,
}

/// The locked state; when released, `any_open` says again whether any
/// file of the mount is open, whatever the holder changed.
struct StateGuard<'a> {
    guard: std::sync::MutexGuard<'a, State>,
    any_open: &'a std::sync::atomic::AtomicBool,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.any_open.store(
            !self.guard.files.is_empty(),
            std::sync::atomic::Ordering::Release,
        );
    }
}

#[derive(Default)]
struct State {
    files: HashMap<i32, Arc<OpenFile>>,
    /// The working directory, while it is inside the mount (the kernel's
    /// stays where it was): the path inside the mount.
    cwd: Option<Vec<u8>>,
    /// The kernel's working directory (relative paths from it may lead
    /// into the mount).
    real_cwd: Vec<u8>,
    /// The process this table belongs to. A child that shares the memory
    /// but not the descriptors (posix_spawn's CLONE_VM clone) must not
    /// change it: its descriptors are its own.
    owner: u32,
    /// Working directories such children changed to before their exec
    /// (posix_spawn's chdir action), by process: Some inside the mount,
    /// None outside it (the kernel's, which is theirs). Kept through the
    /// child's failed execs (execvp tries each PATH entry); dropped when
    /// another such child finds it no longer shares our memory.
    spawned_cwd: HashMap<SpawnedChild, Option<Vec<u8>>>,
}

/// A process sharing our memory: its id and start time (an id may be
/// reused by a later one).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct SpawnedChild {
    pid: u32,
    started: u64,
}

impl SpawnedChild {
    fn me() -> SpawnedChild {
        let started = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                // starttime: field 22, the 20th after the ")" ending comm.
                let rest = &s[s.rfind(')')? + 2..];
                rest.split_whitespace().nth(19)?.parse().ok()
            })
            .unwrap_or(0);
        SpawnedChild {
            pid: std::process::id(),
            started,
        }
    }

    /// Whether it still shares our memory (it has not executed nor
    /// exited): kcmp(2) KCMP_VM.
    fn shares_memory(&self) -> bool {
        const KCMP_VM: u64 = 1;
        let me = std::process::id();
        raw_syscall(
            libc::SYS_kcmp,
            [u64::from(me), u64::from(self.pid), KCMP_VM, 0, 0, 0],
        ) == 0
    }
}

impl State {
    fn shared_child(&self) -> bool {
        // Asking who we are costs a system call (two per create): only
        // while such a child may exist.
        crate::intercept::may_be_memory_child() && std::process::id() != self.owner
    }

    /// A shared child's working directory change.
    fn spawned_chdir(&mut self, cwd: Option<Vec<u8>>) {
        let me = SpawnedChild::me();
        self.spawned_cwd
            .retain(|c, _| *c == me || c.shares_memory());
        self.spawned_cwd.insert(me, cwd);
    }

    /// The working directory inside the mount of the calling process, or
    /// None if it is the kernel's.
    fn cwd(&self) -> Option<&Vec<u8>> {
        // Asking who we are costs a system call: only when it can matter.
        if !self.spawned_cwd.is_empty() && self.shared_child() {
            if let Some(c) = self.spawned_cwd.get(&SpawnedChild::me()) {
                return c.as_ref();
            }
        }
        self.cwd.as_ref()
    }

    /// The kernel's working directory of the calling process.
    fn real_cwd(&self) -> std::borrow::Cow<'_, [u8]> {
        if !self.spawned_cwd.is_empty()
            && self.shared_child()
            && self.spawned_cwd.contains_key(&SpawnedChild::me())
        {
            return kernel_cwd().into();
        }
        self.real_cwd.as_slice().into()
    }
}

/// Where a path argument points.
pub(crate) enum Place {
    /// Not in the mount: the kernel's business.
    Outside,
    /// In the mount, at this path inside it (not yet normalised).
    Inside(Vec<u8>),
}

impl VirtualMount {
    pub fn new(at: &std::path::Path, fs: Arc<dyn Filesystem>) -> VirtualMount {
        let mut at = at.as_os_str().as_bytes().to_vec();
        while at.len() > 1 && at.ends_with(b"/") {
            at.pop();
        }
        VirtualMount {
            at,
            fs,
            state: Mutex::new(State {
                real_cwd: kernel_cwd(),
                owner: std::process::id(),
                ..State::default()
            }),
            any_open: Default::default(),
            cache: std::sync::OnceLock::new(),
            dentries: std::sync::OnceLock::new(),
            root_ino: std::sync::OnceLock::new(),
            pages: std::sync::OnceLock::new(),
            pool: Arc::new(Pool::default()),
        }
    }

    /// Where the mount is (its path in the kernel's tree).
    pub(crate) fn at(&self) -> &[u8] {
        &self.at
    }

    /// Keep attributes by path in `cache` (see `cache.rs`).
    pub fn set_metadata_cache(&self, cache: MetaCache) {
        let _ = self.dentries.set(cache.dentries(self.fs.clone()));
        let _ = self.cache.set(cache);
    }

    /// Keep file data read through the mount in a page cache of `pages`
    /// pages, each trusted for `ttl` at most (needs the metadata cache,
    /// whose stamps it uses).
    pub fn set_page_cache(&self, pages: u64, ttl: Option<std::time::Duration>) {
        if let (Some(c), true) = (self.cache.get(), pages > 0) {
            let _ = self.pages.set(c.pages(pages, ttl));
        }
    }

    /// The metadata cache's shared page descriptor, if the cache is on.
    pub(crate) fn cache_shared_fd(&self) -> Option<i32> {
        self.cache.get().map(MetaCache::shared_fd)
    }

    /// The metadata cache's hits and misses, if it is on.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.get().map(MetaCache::stats)
    }

    /// The filesystem's own figures (`Filesystem::counters`).
    pub fn fs_counters(&self) -> Vec<fusebox::stats::FsCounter> {
        self.fs.counters()
    }

    /// A change through the mount is being made: cached attributes are
    /// stale once it is done (when the guard drops: what was read while it
    /// ran must not outlive it).
    fn changing(&self) -> Change<'_> {
        Change {
            cache: self.cache.get(),
            gone: Vec::new(),
            inos: Vec::new(),
        }
    }

    fn state(&self) -> StateGuard<'_> {
        StateGuard {
            guard: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            any_open: &self.any_open,
        }
    }

    /// The open file descriptor `fd` stands for, if it is one of ours.
    /// Asked on every read, write, close, ... of the program: while it
    /// has none of the mount's files open, answered without the lock.
    pub(crate) fn file(&self, fd: i32) -> Option<Arc<OpenFile>> {
        if fd < 0 || !self.any_open.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.state().files.get(&fd).cloned()
    }

    /// Where `path`, relative to `dirfd`, points. Absolute paths outside
    /// the mount are decided without allocating (the common case, and the
    /// one a call made from inside libc's allocator can come with).
    pub(crate) fn place(&self, dirfd: i32, path: &[u8]) -> Place {
        if path.first() == Some(&b'/') {
            if let Some((fd, rest)) = proc_fd(path) {
                // A descriptor's magic link (/proc/self/fd/N, /dev/fd/N):
                // for one of ours, the file it was opened by.
                if let Some(f) = self.file(fd) {
                    let mut p = f.path.clone();
                    p.extend_from_slice(rest);
                    return Place::Inside(p);
                }
            }
            return self.inside(path);
        }
        let base = if dirfd == libc::AT_FDCWD {
            let st = self.state();
            match st.cwd() {
                Some(cwd) => return Place::Inside(join_inside(cwd, path)),
                // Most relative paths of most programs: decided here,
                // without a copy.
                None if !self.may_lead_inside(&st.real_cwd(), path) => return Place::Outside,
                None => st.real_cwd().into_owned(),
            }
        } else if let Some(f) = self.file(dirfd) {
            return Place::Inside(join_inside(&f.path, path));
        } else {
            // A directory of the kernel's: the path may still lead into
            // the mount ("x/f" from the mount's parent).
            match fd_path(dirfd) {
                Some(p) => p,
                None => return Place::Outside,
            }
        };
        let mut full = base;
        full.push(b'/');
        full.extend_from_slice(path);
        self.inside(&normalize(&full))
    }

    /// Whether `rel`, from the kernel's directory `base`, can end inside
    /// the mount: only if it climbs (".."), or `base` is above the mount
    /// point or below it.
    fn may_lead_inside(&self, base: &[u8], rel: &[u8]) -> bool {
        let under = |outer: &[u8], inner: &[u8]| {
            inner
                .strip_prefix(outer)
                .is_some_and(|r| r.is_empty() || r[0] == b'/' || outer.ends_with(b"/"))
        };
        rel.split(|&c| c == b'/').any(|c| c == b"..")
            || under(base, &self.at)
            || under(&self.at, base)
    }

    fn inside(&self, path: &[u8]) -> Place {
        match path.strip_prefix(self.at.as_slice()) {
            Some(rest) if rest.is_empty() || rest[0] == b'/' => Place::Inside(rest.to_vec()),
            _ if self.at == b"/" => Place::Inside(path.to_vec()),
            _ => Place::Outside,
        }
    }

    /// Where `path` (in the mount) leads: None if its walk stays in the
    /// mount, else the kernel's path it leaves for (`..` above the root, a
    /// link out). Walked as a call that makes or removes the last name
    /// walks it, or following a link there (`follow`).
    pub(crate) fn leads_to(&self, path: &[u8], follow: bool) -> Result<Option<Vec<u8>>, i32> {
        let mut looked = self.looked();
        let walked = if follow {
            self.resolve(path, true, &mut looked)
        } else {
            self.resolve_name(path, &mut looked)
        };
        match walked {
            Ok(_) => Ok(None),
            Err(libc::EXDEV) => take_escaped().map(Some).ok_or(libc::EXDEV),
            Err(e) => Err(e),
        }
    }

    /// The kernel's working directory changed (a chdir it served).
    pub(crate) fn kernel_cwd_changed(&self) {
        let mut st = self.state();
        if st.shared_child() {
            st.spawned_chdir(None);
            return;
        }
        st.cwd = None;
        st.real_cwd = kernel_cwd();
    }

    fn ctx() -> Ctx<'static> {
        let mut ctx = Ctx::internal();
        (ctx.uid, ctx.gid) = process::effective_ids();
        // A posix_spawn child, sharing our memory, reports its parent's:
        // the id is information for the filesystem, not a permission.
        ctx.pid = crate::appmem::pid();
        ctx
    }

    /// Resolve `path` (inside the mount). `follow`: follow a symlink in the
    /// last component.
    ///
    /// A trailing slash wants a directory there, through a symlink if need
    /// be, as the kernel's LOOKUP_FOLLOW | LOOKUP_DIRECTORY: `stat
    /// link-to-dir/` is the directory's, `stat file/` ENOTDIR. Calls that
    /// make or remove the name itself use `resolve_name`.
    fn resolve<'a>(
        &'a self,
        path: &[u8],
        follow: bool,
        looked: &mut Looked<'a>,
    ) -> Result<Resolved, i32> {
        let wants_dir = wants_directory(path);
        let r = self.resolve_as(path, follow || wants_dir, looked, true)?;
        match r.node {
            Some((_, a)) if wants_dir && a.mode & libc::S_IFMT != libc::S_IFDIR => {
                Err(libc::ENOTDIR)
            }
            _ => Ok(r),
        }
    }

    /// `resolve` for a call that makes, removes or renames the last name
    /// (mkdir, unlink, rmdir, rename, link's new name): a trailing slash
    /// never follows a symlink there (`rmdir link/` must not remove the
    /// directory it points to); each call checks what the slash asks of it.
    fn resolve_name<'a>(&'a self, path: &[u8], looked: &mut Looked<'a>) -> Result<Resolved, i32> {
        self.resolve_as(path, false, looked, true)
    }

    /// The directory holding `path`'s last component, and that name, for a
    /// call that knows what the name holds (`unlink`): no lookup of the
    /// name, and the directory's node as the walk cache has it. None if
    /// the path does not end in a plain name.
    fn resolve_parent<'a>(
        &'a self,
        path: &[u8],
        looked: &mut Looked<'a>,
    ) -> Result<Option<(NodeId, u64, Vec<u8>)>, i32> {
        Ok(self
            .parent_of(path, looked)?
            .map(|p| (p.node, p.ino, p.name)))
    }

    /// `resolve_parent`, with what the walk to the directory found.
    fn parent_of<'a>(
        &'a self,
        path: &[u8],
        looked: &mut Looked<'a>,
    ) -> Result<Option<Parent>, i32> {
        let (dir, name) = match path.iter().rposition(|&c| c == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&b""[..], path),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Ok(None);
        }
        if dir.iter().all(|&c| c == b'/') {
            return Ok(Some(Parent {
                node: NodeId::ROOT,
                ino: self.ino_of((NodeId::ROOT, None))?,
                name: name.to_vec(),
                path: Vec::new(),
                via_link: false,
            }));
        }
        let r = match self.resolve_as(dir, true, looked, false) {
            Ok(r) => r,
            Err(libc::EXDEV) => {
                // The walk left the mount: the name goes with it.
                if let Some(mut outside) = take_escaped() {
                    outside.push(b'/');
                    outside.extend_from_slice(name);
                    set_escaped(&outside);
                }
                return Err(libc::EXDEV);
            }
            Err(e) => return Err(e),
        };
        let Some((node, attr)) = r.node else {
            return Err(libc::ENOENT);
        };
        if attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(libc::ENOTDIR);
        }
        Ok(Some(Parent {
            node,
            ino: attr.ino,
            name: name.to_vec(),
            path: r.path,
            via_link: r.via_link,
        }))
    }

    /// `resolve`; `fresh_end`: a directory the path ends at, if the walk
    /// cache has it, is looked up again for fresh attributes and a
    /// reference of `looked`'s own (else the cache's node and attributes
    /// are given, valid while `looked` lives).
    fn resolve_as<'a>(
        &'a self,
        path: &[u8],
        follow: bool,
        looked: &mut Looked<'a>,
        fresh_end: bool,
    ) -> Result<Resolved, i32> {
        let ctx = Self::ctx();
        // Only this walk's escape may be taken after it.
        set_escaped(&[]);
        let mut pending: Vec<Vec<u8>> = split(path);
        let mut done: Vec<Vec<u8>> = Vec::new();
        // The root's attributes are asked for only if the path ends there:
        // it is a directory, which is all the walk needs to know of it.
        let mut stack: Vec<(NodeId, Option<FileAttr>)> = Vec::new();
        let mut here: (NodeId, Option<FileAttr>) = (NodeId::ROOT, None);
        // Whether `looked` holds a reference to `here` (the root needs none).
        let mut here_owned = true;
        let mut here_ttl = std::time::Duration::ZERO;
        let mut stack_owned: Vec<bool> = Vec::new();
        let dentries = looked.dentries;
        let mut links = 0;
        pending.reverse();
        while let Some(comp) = pending.pop() {
            let last = pending.is_empty();
            // Only a directory has names, "." and ".." included
            // (`file/.` is ENOTDIR).
            if here
                .1
                .is_some_and(|a| a.mode & libc::S_IFMT != libc::S_IFDIR)
            {
                return Err(libc::ENOTDIR);
            }
            match comp.as_slice() {
                b"." => continue,
                b".." => {
                    if let Some(up) = stack.pop() {
                        here = up;
                        here_owned = stack_owned.pop().unwrap_or(true);
                        done.pop();
                        continue;
                    }
                    // Above the mount's root: the rest of the walk is the
                    // kernel's, from the mount point's parent on, as past a
                    // kernel mount's root (route.rs makes the call there).
                    return Err(escape(parent_dir(&self.at), &pending, path));
                }
                _ => {}
            }
            // A directory (or link) on the way may come from the walk
            // cache; the last component is asked for (so its node is
            // looked's and its attributes are fresh) unless the caller
            // wants only a directory's node (`fresh_end` false).
            let walked = !last || !fresh_end;
            let cached = if walked {
                dentries.and_then(|d| d.get(here.0, &comp))
            } else {
                None
            };
            // The name's stamp before asking, for an entry the walk cache
            // may keep.
            let names = dentries
                .filter(|_| cached.is_none())
                .map(|d| d.name_stamp(&comp));
            let found = match cached {
                Some(d) => Ok(fusebox::Entry {
                    node: d.node,
                    generation: 0,
                    attr: d.attr,
                    entry_ttl: Default::default(),
                    attr_ttl: Default::default(),
                }),
                None => self.fs.lookup(&ctx, here.0, OsStr::from_bytes(&comp)),
            };
            match found {
                Ok(e) if e.node.0 != 0 => {
                    let owned = if cached.is_some() {
                        false
                    } else if walked
                        && dentries.zip(names).is_some_and(|(d, n)| {
                            d.put(here.0, &comp, e.node, e.attr, e.entry_ttl, n)
                        })
                    {
                        // Its reference went to the cache.
                        false
                    } else {
                        looked.nodes.push(e.node);
                        if let Some(names) = names {
                            looked.found.push(Found {
                                parent: here.0,
                                name: comp.clone(),
                                node: e.node,
                                attr: e.attr,
                                ttl: e.entry_ttl,
                                names,
                            });
                        }
                        true
                    };
                    let is_link = e.attr.mode & libc::S_IFMT == libc::S_IFLNK;
                    if is_link && (!last || follow) {
                        links += 1;
                        if links > MAX_SYMLINKS {
                            return Err(libc::ELOOP);
                        }
                        let mut out = DataOut::with_capacity(libc::PATH_MAX as usize);
                        self.fs.readlink(&ctx, e.node, &mut out).map_err(err)?;
                        let target = out.as_slice().to_vec();
                        let mut more = if target.first() == Some(&b'/') {
                            match target.strip_prefix(self.at.as_slice()) {
                                Some(rest) if rest.is_empty() || rest[0] == b'/' => {
                                    stack.clear();
                                    stack_owned.clear();
                                    done.clear();
                                    here = (NodeId::ROOT, None);
                                    here_owned = true;
                                    split(rest)
                                }
                                // A link out of the mount: the rest of
                                // the walk is the kernel's, from the
                                // link's target on (route.rs makes the
                                // call again on that path).
                                _ => return Err(escape(&target, &pending, path)),
                            }
                        } else {
                            split(&target)
                        };
                        more.reverse();
                        pending.extend(more);
                        continue;
                    }
                    if last {
                        let mut r = Resolved::last(here.0, &done, comp, Some((e.node, e.attr)));
                        r.attr_ttl = e.attr_ttl;
                        r.parent_ino = self.ino_of(here)?;
                        r.via_link = links > 0;
                        return Ok(r);
                    }
                    stack.push(here);
                    stack_owned.push(here_owned);
                    here = (e.node, Some(e.attr));
                    here_owned = owned;
                    here_ttl = e.attr_ttl;
                    done.push(comp);
                }
                Ok(_) | Err(Errno::ENOENT) => {
                    if last {
                        let mut r = Resolved::last(here.0, &done, comp, None);
                        r.parent_ino = self.ino_of(here)?;
                        r.via_link = links > 0;
                        return Ok(r);
                    }
                    return Err(libc::ENOENT);
                }
                Err(e) => return Err(err(e)),
            }
        }
        // The path named a directory we walked into (or the root).
        let parent = stack.last().map_or(NodeId::ROOT, |p| p.0);
        if !here_owned && fresh_end {
            // From the walk cache: a reference of looked's own (a caller
            // may keep the node) and fresh attributes.
            let name = done.last().ok_or(libc::ENOENT)?;
            let names = dentries.map(|d| d.name_stamp(name));
            let e = self
                .fs
                .lookup(&ctx, parent, OsStr::from_bytes(name))
                .map_err(err)?;
            if e.node.0 == 0 {
                return Err(libc::ENOENT);
            }
            looked.nodes.push(e.node);
            if let Some(names) = names {
                looked.found.push(Found {
                    parent,
                    name: name.clone(),
                    node: e.node,
                    attr: e.attr,
                    ttl: e.entry_ttl,
                    names,
                });
            }
            here = (e.node, Some(e.attr));
            here_ttl = e.attr_ttl;
        }
        let (attr, attr_ttl) = match here.1 {
            Some(a) => (a, here_ttl),
            None => {
                let reply = self.fs.getattr(&ctx, here.0, None).map_err(err)?;
                (reply.attr, reply.ttl)
            }
        };
        let parent_ino = match stack.last() {
            Some(&p) => self.ino_of(p)?,
            None => attr.ino,
        };
        Ok(Resolved {
            parent,
            name: done.last().cloned(),
            node: Some((here.0, attr)),
            attr_ttl,
            parent_ino,
            via_link: links > 0,
            path: join(&done),
        })
    }

    /// The inode number of a directory on a walk (the root's asked once).
    fn ino_of(&self, (node, attr): (NodeId, Option<FileAttr>)) -> Result<u64, i32> {
        if let Some(a) = attr {
            return Ok(a.ino);
        }
        if let Some(&ino) = self.root_ino.get() {
            return Ok(ino);
        }
        let ino = self
            .fs
            .getattr(&Self::ctx(), node, None)
            .map_err(err)?
            .attr
            .ino;
        if node == NodeId::ROOT {
            let _ = self.root_ino.set(ino);
        }
        Ok(ino)
    }

    /// OPEN or OPENDIR of `node`. ENOSYS means the filesystem keeps no
    /// state per open file, as it does through the kernel (which stops
    /// asking): the file opens with handle 0.
    fn open_node(
        &self,
        ctx: &Ctx,
        node: NodeId,
        open: &Open,
        dir: bool,
    ) -> Result<fusebox::Opened, i32> {
        let opened = if dir {
            self.fs.opendir(ctx, node, open)
        } else {
            self.fs.open(ctx, node, open)
        };
        match opened {
            Err(Errno::ENOSYS) => Ok(fusebox::Opened::default()),
            r => r.map_err(err),
        }
    }

    fn looked(&self) -> Looked<'_> {
        // With the metadata cache off, the walk cache still keeps nodes
        // (their identity), answering nothing.
        let d = self
            .dentries
            .get_or_init(|| Dentries::identity_only(self.fs.clone()));
        d.enter();
        Looked {
            fs: &*self.fs,
            nodes: Vec::new(),
            found: Vec::new(),
            dentries: Some(d),
        }
    }

    fn install_file(&self, mut file: OpenFile, ino: u64) -> SysResult {
        let cloexec = file.flags() & libc::O_CLOEXEC != 0;
        file.born = crate::intercept::descriptor_shares();
        let own = !self.state().shared_child();
        let made = self.pool.make(cloexec, own)?;
        // Who this descriptor is, for a program this one executes: it
        // inherits the descriptor and finds the file again from this.
        placeholder::write_record(made.fd, file.flags(), file.dir, ino, &file.path);
        // New or rewound.
        file.position
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .known = Some(0);
        file.twin = Mutex::new(made.twin.map(|t| Twin::new(t, &self.pool)));
        if own {
            self.state().files.insert(made.fd, Arc::new(file));
        }
        Ok(i64::from(made.fd))
    }

    /// Take over the placeholders this process inherited across exec: each
    /// is opened again by the path it was opened by (its offset is the
    /// placeholder's own, so it carries over). A file that cannot be found
    /// again (unlinked meanwhile) is left as it is: its descriptor then
    /// reads the placeholder's record, so it is closed instead.
    pub fn adopt_inherited(&self) {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        let fds: Vec<i32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for fd in fds {
            let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
                continue;
            };
            if !target
                .as_os_str()
                .as_bytes()
                .starts_with(placeholder::LINK_PREFIX)
            {
                continue;
            }
            let Some(record) = placeholder::read_record(fd) else {
                continue;
            };
            // The same file, not another one renamed over its name since.
            let reopened = self
                .reopen(&record.path, record.flags, record.dir)
                .and_then(|f| match self.fstat(&f) {
                    Ok(attr) if attr.ino == record.ino => Ok(f),
                    _ => Err(libc::ESTALE),
                });
            match reopened {
                Ok(file) => {
                    self.state().files.insert(fd, Arc::new(file));
                }
                Err(_) => {
                    raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
                }
            }
        }
    }

    fn reopen(&self, path: &[u8], flags: i32, dir: bool) -> Result<OpenFile, i32> {
        let ctx = Self::ctx();
        let mut looked = self.looked();
        let r = self.resolve(path, flags & libc::O_NOFOLLOW == 0, &mut looked)?;
        let (node, attr) = r.node.ok_or(libc::ENOENT)?;
        let ino = attr.ino;
        let open = Open {
            flags: flags
                & !(libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_TRUNC
                    | libc::O_NOCTTY
                    | libc::O_CLOEXEC),
            kill_suidgid: false,
        };
        let opened = if flags & libc::O_PATH != 0 {
            Default::default()
        } else {
            self.open_node(&ctx, node, &open, dir)?
        };
        looked.keep(node);
        Ok(OpenFile {
            fs: self.fs.clone(),
            node,
            fh: opened.fh,
            flags: flags.into(),
            dir,
            path: r.path,
            position: Default::default(),
            lock_fd: Default::default(),
            ino,
            born: u64::MAX,
            opened_as: None,
            dirty: Default::default(),
            created: None,
            twin: Default::default(),
        })
    }

    /// The kernel descriptor an open file's locks are taken on: one per
    /// open file, of a lock file per (mount, inode) that every process
    /// serving the mount shares. The kernel then gives record locks and
    /// flock(2) their own semantics across processes: per process and
    /// inode for fcntl locks (dropped at any close of the file), per open
    /// file for flock and OFD locks.
    fn lock_fd(&self, file: &OpenFile) -> Result<i32, i32> {
        if let Some(&fd) = file.lock_fd.get() {
            return Ok(fd);
        }
        let ino = self
            .fs
            .getattr(&Self::ctx(), file.node, None)
            .map_err(err)?
            .attr
            .ino;
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let mount_id = self.at.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
            (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
        });
        let dir = format!("{dir}/fusebox-direct-locks");
        let _ = std::fs::create_dir(&dir);
        let path = format!("{dir}/{mount_id:016x}-{ino}\0");
        let fd = raw_syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                path.as_ptr() as u64,
                (libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC) as u64,
                0o600,
                0,
                0,
            ],
        );
        if fd < 0 {
            return Err(-fd as i32);
        }
        let fd = crate::kept::keep_raw(fd as i32);
        match file.lock_fd.set(fd) {
            Ok(()) => Ok(fd),
            Err(_) => {
                // Another thread got there first.
                raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
                Ok(*file.lock_fd.get().expect("set"))
            }
        }
    }

    /// fcntl's lock commands and flock(2) on an open file of the mount.
    pub(crate) fn lock(&self, file: &OpenFile, nr: i64, args: [u64; 6]) -> SysResult {
        let fd = self.lock_fd(file)?;
        let mut args = args;
        args[0] = fd as u64;
        let ret = raw_syscall(nr, args);
        if ret < 0 {
            Err(-ret as i32)
        } else {
            Ok(ret)
        }
    }

    /// mmap(2) of a file of the mount: a private copy, read in when the
    /// map is made. Private maps behave as the kernel's (writes stay in
    /// the process); a shared read-only map does not see later changes to
    /// the file; a shared writable map, whose writes would have to reach
    /// the file, is refused with ENODEV, as for files without mmap.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn map_copy(
        &self,
        fd: i32,
        file: &OpenFile,
        addr: u64,
        len: u64,
        prot: i32,
        flags: i32,
        offset: u64,
    ) -> SysResult {
        let shared = flags & (libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE) != 0;
        if shared && prot & libc::PROT_WRITE != 0 {
            return Err(libc::ENODEV);
        }
        if len == 0 {
            return Err(libc::EINVAL);
        }
        let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE);
        let ret = raw_syscall(
            libc::SYS_mmap,
            [
                addr,
                len,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (keep | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                u64::MAX,
                0,
            ],
        );
        if ret < 0 {
            return Err(-ret as i32);
        }
        let map = ret as u64;
        let size = self.fstat(file)?.size;
        let wanted = size.saturating_sub(offset).min(len) as usize;
        if wanted > 0 {
            let fresh = crate::appmem::fresh_mut(map, wanted);
            let put = Put {
                cheap: true,
                each: |at, data: &[u8]| {
                    fresh[at..at + data.len()].copy_from_slice(data);
                    Ok(())
                },
            };
            let copied = self.read_with(fd, file, wanted, Some(offset), put);
            if let Err(e) = copied {
                raw_syscall(libc::SYS_munmap, [map, len, 0, 0, 0, 0]);
                return Err(e);
            }
        }
        raw_syscall(libc::SYS_mprotect, [map, len, prot as u64, 0, 0, 0]);
        Ok(map as i64)
    }

    /// The working directory inside the mount, as a new program starts
    /// with it (from the program that executed it).
    pub fn set_cwd(&self, path: &[u8]) -> Result<(), i32> {
        self.chdir(path).map(|_| ())
    }

    /// The working directory inside the mount, if it is there.
    pub(crate) fn cwd(&self) -> Option<Vec<u8>> {
        self.state().cwd().cloned()
    }

    pub(crate) fn openat(&self, path: &[u8], flags: i32, mode: u32) -> SysResult {
        let mut tries = 0;
        loop {
            match self.open_once(path, flags, mode) {
                // Another process made the name between our lookup and
                // create: open what it made, as the kernel's open does.
                Err(libc::EEXIST)
                    if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL == 0 && tries < 8 =>
                {
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    fn open_once(&self, path: &[u8], flags: i32, mode: u32) -> SysResult {
        // A create through a path that wants a directory: the kernel's
        // EISDIR, whether or not the name exists, once the walk to it
        // found its directory.
        if flags & libc::O_CREAT != 0 && (wants_directory(path) || ends_in_dots(path).is_some()) {
            self.resolve_name(path, &mut self.looked())?;
            return Err(libc::EISDIR);
        }
        if flags & (libc::O_CREAT | libc::O_DIRECTORY | libc::O_PATH) == libc::O_CREAT
            && self.fs.create_opens_existing()
        {
            if let Some(fd) = self.create_without_lookup(path, flags, mode)? {
                return Ok(fd);
            }
        }
        let mut change = (flags & (libc::O_CREAT | libc::O_TRUNC) != 0).then(|| self.changing());
        let ctx = Self::ctx();
        let mut looked = self.looked();
        // O_CREAT|O_EXCL never follows a symlink at the end: it fails on
        // the link, as the kernel's does (the temp-file attack).
        let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
        let follow = flags & libc::O_NOFOLLOW == 0 && !excl;
        let changes = flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        // For the attributes remembered at close, only by a file that may
        // change through this open; read before resolving: a rename
        // meanwhile keeps them out of the cache.
        let names = self
            .cache
            .get()
            .filter(|_| changes || flags & libc::O_ACCMODE != libc::O_RDONLY)
            .map(|c| c.names_stamp(path));
        let r = self.resolve(path, follow, &mut looked)?;
        if let Some(c) = change.as_mut() {
            // A create changes the directory, a truncate the file.
            c.inos.push(r.parent_ino);
            c.inos.extend(r.node.map(|(_, a)| a.ino));
        }
        let open_flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_CLOEXEC);
        let mut created = None;
        let (node, attr, opened) = match r.node {
            Some(_) if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 => {
                return Err(libc::EEXIST)
            }
            Some((node, attr)) => {
                let is_dir = attr.mode & libc::S_IFMT == libc::S_IFDIR;
                // O_CREAT opens no directory (the kernel's do_open).
                if is_dir && flags & libc::O_CREAT != 0 {
                    return Err(libc::EISDIR);
                }
                if flags & libc::O_DIRECTORY != 0 && !is_dir {
                    return Err(libc::ENOTDIR);
                }
                // A symlink is opened itself only as O_PATH|O_NOFOLLOW.
                if attr.mode & libc::S_IFMT == libc::S_IFLNK && flags & libc::O_PATH == 0 {
                    return Err(libc::ELOOP);
                }
                // A socket is reached by connect, not open (the kernel's
                // no_open).
                if attr.mode & libc::S_IFMT == libc::S_IFSOCK && flags & libc::O_PATH == 0 {
                    return Err(libc::ENXIO);
                }
                // O_TRUNC asks for write access too (the kernel's
                // build_open_flags); O_PATH asks for none.
                let writes =
                    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
                if is_dir && writes && flags & libc::O_PATH == 0 {
                    return Err(libc::EISDIR);
                }
                if flags & libc::O_PATH != 0 || is_dir {
                    let opened = if flags & libc::O_PATH != 0 {
                        Default::default()
                    } else {
                        let open = Open {
                            flags: open_flags,
                            kill_suidgid: false,
                        };
                        self.open_node(&ctx, node, &open, true)?
                    };
                    looked.keep(node);
                    return self.install_file(
                        OpenFile {
                            fs: self.fs.clone(),
                            node,
                            fh: opened.fh,
                            flags: flags.into(),
                            dir: is_dir && flags & libc::O_PATH == 0,
                            path: r.path,
                            position: Default::default(),
                            lock_fd: Default::default(),
                            ino: attr.ino,
                            born: u64::MAX,
                            opened_as: None,
                            dirty: Default::default(),
                            created: None,
                            twin: Default::default(),
                        },
                        attr.ino,
                    );
                }
                if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
                    let truncate = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    self.fs.setattr(&ctx, node, &truncate).map_err(err)?;
                }
                let open = Open {
                    flags: open_flags & !libc::O_TRUNC,
                    kill_suidgid: false,
                };
                let opened = self.open_node(&ctx, node, &open, false)?;
                (node, attr, opened)
            }
            None if flags & libc::O_CREAT != 0 => {
                let name = r.name.as_deref().ok_or(libc::EISDIR)?;
                let umask = process::umask();
                let args = Create {
                    flags: open_flags,
                    mode: (mode & !umask & 0o7777) | libc::S_IFREG,
                    umask,
                    kill_suidgid: false,
                };
                let before = Created::before(self.cache.get());
                let (entry, opened) = self
                    .fs
                    .create(&ctx, r.parent, OsStr::from_bytes(name), &args)
                    .map_err(err)?;
                looked.nodes.push(entry.node);
                drop(change.take());
                created = Created::after(self.cache.get(), before, flags, &entry);
                (entry.node, entry.attr, opened)
            }
            None => return Err(libc::ENOENT),
        };
        looked.keep(node);
        self.install_file(
            OpenFile {
                fs: self.fs.clone(),
                node,
                fh: opened.fh,
                flags: flags.into(),
                dir: false,
                path: r.path,
                position: Default::default(),
                lock_fd: Default::default(),
                ino: attr.ino,
                born: u64::MAX,
                opened_as: names.filter(|_| !r.via_link).map(|n| (path.to_vec(), n)),
                dirty: changes.into(),
                created,
                twin: Default::default(),
            },
            attr.ino,
        )
    }

    /// open(2) with O_CREAT through a filesystem whose create opens an
    /// existing name as open(2) does (`Filesystem::create_opens_existing`):
    /// the create is asked at once, without the lookup of the name before
    /// it (a third of a create's system calls in stackfs). None where the
    /// name is a symlink, which the walk follows (`open_once` then goes the
    /// usual way), or the path does not end in a name.
    fn create_without_lookup(
        &self,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<Option<i64>, i32> {
        // Read before the walk, as `open_once` reads it.
        let names = self.cache.get().map(|c| c.names_stamp(path));
        let mut looked = self.looked();
        let Some(parent) = self.parent_of(path, &mut looked)? else {
            return Ok(None);
        };
        let before = Created::before(self.cache.get());
        let umask = process::umask();
        let args = Create {
            flags: (flags & !(libc::O_CREAT | libc::O_NOCTTY | libc::O_CLOEXEC)) | libc::O_NOFOLLOW,
            mode: (mode & !umask & 0o7777) | libc::S_IFREG,
            umask,
            kill_suidgid: false,
        };
        let made = self.fs.create(
            &Self::ctx(),
            parent.node,
            OsStr::from_bytes(&parent.name),
            &args,
        );
        if matches!(&made, Err(e) if e.0 == libc::ELOOP) {
            // The name is a symlink: nothing was made or opened.
            return Ok(None);
        }
        // Made or opened (and maybe truncated), or failed part way: the
        // directory and the file may have changed (marked once the create
        // is done, as a guard through it would).
        let mut change = self.changing();
        change.inos.push(parent.ino);
        let (entry, opened) = made.map_err(err)?;
        change.inos.push(entry.attr.ino);
        drop(change);
        let created = Created::after(self.cache.get(), before, flags, &entry);
        let mut inside = parent.path;
        if !inside.is_empty() {
            inside.push(b'/');
        }
        inside.extend_from_slice(&parent.name);
        drop(looked);
        self.install_file(
            OpenFile {
                fs: self.fs.clone(),
                node: entry.node,
                fh: opened.fh,
                flags: flags.into(),
                dir: false,
                path: inside,
                position: Default::default(),
                lock_fd: Default::default(),
                ino: entry.attr.ino,
                born: u64::MAX,
                opened_as: names
                    .filter(|_| !parent.via_link)
                    .map(|n| (path.to_vec(), n)),
                dirty: true.into(),
                created,
                twin: Default::default(),
            },
            entry.attr.ino,
        )
        .map(Some)
    }

    /// This process was forked: the table copy is its own.
    pub(crate) fn forked_child(&self) {
        if let Some(d) = self.dentries.get() {
            d.forked();
        }
        self.pool.drop_all();
        self.state().owner = std::process::id();
    }

    /// close(2) of a descriptor in the table.
    pub(crate) fn close(&self, fd: i32) -> Option<SysResult> {
        let file = {
            let mut st = self.state();
            if st.shared_child() {
                st.files.get(&fd)?;
                None
            } else {
                Some(st.files.remove(&fd)?)
            }
        };
        // Its last descriptor anywhere: none other here (the table held
        // the only other reference), none in another process.
        if let Some(f) = &file {
            if Arc::strong_count(f) == 1 {
                self.remember_attributes(f);
                if f.born == crate::intercept::descriptor_shares() {
                    let twin = f.twin.lock().unwrap_or_else(PoisonError::into_inner).take();
                    if !twin.is_some_and(Twin::reuse) {
                        self.pool.keep(fd);
                    }
                }
            }
        }
        let ret = raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        drop(file);
        Some(if ret < 0 { Err(-ret as i32) } else { Ok(0) })
    }

    /// The program closed or replaced (dup2 onto) descriptors
    /// `first..=last` that are not the mount's files: pooled placeholders
    /// among them are gone.
    pub(crate) fn others_closed(&self, first: u32, last: u32) {
        // A child sharing our memory closed its own copies, not ours.
        if self.pool.may_hold(last) && !self.state().shared_child() {
            self.pool.lost(first, last);
        }
    }

    /// The last close here of a file changed through it: its attributes go
    /// into the metadata cache under the path it was opened by, where the
    /// change left them stale, as NFS's close-to-open GETATTR refreshes
    /// them. The stat that so often follows (make, ls, a test of what was
    /// written) is then answered from the cache: one getattr on the open
    /// file now against a lookup by name then.
    fn remember_attributes(&self, file: &OpenFile) {
        let (Some(c), Some((path, names))) = (self.cache.get(), &file.opened_as) else {
            return;
        };
        if file.dir || !file.dirty.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let epoch = c.epoch();
        if let Some(made) = file.created {
            if made.epoch == epoch && made.reads == c.reads() {
                // A regular file: stat and lstat agree (a FIFO or device
                // opened with O_CREAT is not kept).
                if made.attr.mode & libc::S_IFMT == libc::S_IFREG {
                    c.put(path, false, made.attr, made.ttl, epoch, *names);
                }
                return;
            }
        }
        if let Ok(reply) = self.fs.getattr(&Self::ctx(), file.node, Some(file.fh)) {
            // A regular file: stat and lstat agree.
            if reply.attr.mode & libc::S_IFMT == libc::S_IFREG {
                c.put(path, false, reply.attr, reply.ttl, epoch, *names);
            }
        }
    }

    /// close_range(2) closed `first..=last`.
    pub(crate) fn closed_range(&self, first: u32, last: u32) {
        self.others_closed(first, last);
        let gone: Vec<Arc<OpenFile>> = {
            let mut st = self.state();
            if st.shared_child() {
                return;
            }
            let fds: Vec<i32> = st
                .files
                .keys()
                .copied()
                .filter(|&fd| (first..=last).contains(&(fd as u32)))
                .collect();
            fds.iter().filter_map(|fd| st.files.remove(fd)).collect()
        };
        drop(gone);
    }

    /// The kernel made `new` a copy of `old` (dup, dup2, dup3, F_DUPFD):
    /// the table follows.
    pub(crate) fn duplicated(&self, old: i32, new: i32) {
        let mut st = self.state();
        if st.shared_child() {
            return;
        }
        match st.files.get(&old).cloned() {
            Some(f) => {
                st.files.insert(new, f);
            }
            None => {
                st.files.remove(&new);
            }
        }
    }

    pub(crate) fn read(
        &self,
        fd: i32,
        file: &OpenFile,
        buf: UserBuf,
        at: Option<u64>,
    ) -> SysResult {
        let put = Put {
            cheap: buf.known_writable(),
            each: |offset, data: &[u8]| buf.fill(offset, data),
        };
        self.read_with(fd, file, buf.len, at, put)
    }

    /// read(2) of `len` bytes, each piece handed to `put` at its offset in
    /// the destination.
    fn read_with(
        &self,
        fd: i32,
        file: &OpenFile,
        len: usize,
        at: Option<u64>,
        put: Put<impl FnMut(usize, &[u8]) -> Result<(), i32>>,
    ) -> SysResult {
        let read = self.read_uncounted(fd, file, len, at, put);
        // Counted once done: the access time it may move has moved.
        if let Some(c) = self.cache.get() {
            c.read_made();
        }
        read
    }

    /// `read_with`, before the read is counted.
    fn read_uncounted(
        &self,
        fd: i32,
        file: &OpenFile,
        len: usize,
        at: Option<u64>,
        put: Put<impl FnMut(usize, &[u8]) -> Result<(), i32>>,
    ) -> SysResult {
        let Put {
            cheap,
            each: mut put,
        } = put;
        if file.dir {
            return Err(libc::EISDIR);
        }
        if file.flags() & libc::O_ACCMODE == libc::O_WRONLY || file.flags() & libc::O_PATH != 0 {
            return Err(libc::EBADF);
        }
        let mut pos = file.position.lock().unwrap_or_else(PoisonError::into_inner);
        let start = at.unwrap_or_else(|| pos.offset(fd, file));
        let ctx = Self::ctx();
        if let Some(pages) = self
            .pages
            .get()
            .filter(|_| file.flags() & libc::O_DIRECT == 0)
        {
            let done = self.read_paged(pages, &ctx, file, start, len, cheap, put)?;
            if at.is_none() {
                pos.set(fd, start + done as u64);
            }
            return Ok(done as i64);
        }
        let mut done = 0usize;
        while done < len {
            let want = (len - done).min(IO_CHUNK);
            let mut out = DataOut::with_capacity(want);
            let args = Read {
                fh: file.fh,
                offset: start + done as u64,
                size: want as u32,
                flags: file.flags(),
                lock_owner: None,
            };
            if let Err(e) = file.fs.read(&ctx, file.node, &args, &mut out) {
                if done == 0 {
                    return Err(err(e));
                }
                break;
            }
            let got = out.as_slice().len().min(want);
            if let Err(e) = put(done, &out.as_slice()[..got]) {
                if done == 0 {
                    return Err(e);
                }
                break;
            }
            done += got;
            if got < want {
                break;
            }
        }
        if at.is_none() {
            pos.set(fd, start + done as u64);
        }
        Ok(done as i64)
    }

    /// `read_with` through the page cache: pages it holds are copied, a
    /// missing one is read with those after it that the request covers,
    /// in one read of whole pages, which then serves the request as far
    /// as it goes (a full cache may not keep what it was given: served
    /// from the cache again, each page would be read again). A page
    /// shorter than PAGE_BYTES is the file's end. Unless `put` is `cheap`,
    /// pages found are gathered and handed to it together: a `put` can be a
    /// system call into the application's memory (process_vm_writev), and
    /// one per page made a 1 MiB read from the cache cost 256 of them
    /// (2.5 ms); a cheap one is a copy, and gathering would copy twice.
    #[allow(clippy::too_many_arguments)]
    fn read_paged(
        &self,
        pages: &PageCache,
        ctx: &Ctx<'_>,
        file: &OpenFile,
        start: u64,
        len: usize,
        cheap: bool,
        mut put: impl FnMut(usize, &[u8]) -> Result<(), i32>,
    ) -> Result<usize, i32> {
        /// Hand `piece` to `put` after the `done` bytes handed so far:
        /// false if it failed after something was handed over (the read
        /// ends there, short), its error if nothing was.
        fn give(
            put: &mut impl FnMut(usize, &[u8]) -> Result<(), i32>,
            done: &mut usize,
            piece: &[u8],
        ) -> Result<bool, i32> {
            if piece.is_empty() {
                return Ok(true);
            }
            match put(*done, piece) {
                Ok(()) => {
                    *done += piece.len();
                    Ok(true)
                }
                Err(e) if *done == 0 => Err(e),
                Err(_) => Ok(false),
            }
        }
        /// `give` what was gathered, emptying it.
        fn hand_over(
            put: &mut impl FnMut(usize, &[u8]) -> Result<(), i32>,
            done: &mut usize,
            gathered: &mut Vec<u8>,
        ) -> Result<bool, i32> {
            let r = give(put, done, gathered);
            gathered.clear();
            r
        }
        let page_bytes = PAGE_BYTES as u64;
        // Bytes handed to `put`; after them, those gathered from the cache.
        let mut done = 0usize;
        let mut gathered: Vec<u8> = Vec::new();
        loop {
            let reached = done + gathered.len();
            if reached >= len {
                break;
            }
            let offset = start + reached as u64;
            let (index, within) = (offset / page_bytes, (offset % page_bytes) as usize);
            if let Some(page) = pages.get(file.ino, index) {
                if within >= page.len() {
                    break;
                }
                let n = (page.len() - within).min(len - reached);
                if cheap {
                    if !give(&mut put, &mut done, &page[within..within + n])? {
                        return Ok(done);
                    }
                } else {
                    if gathered.capacity() == 0 {
                        gathered.reserve(len.min(IO_CHUNK));
                    }
                    gathered.extend_from_slice(&page[within..within + n]);
                    if gathered.len() >= IO_CHUNK && !hand_over(&mut put, &mut done, &mut gathered)?
                    {
                        return Ok(done);
                    }
                }
                if page.len() < PAGE_BYTES && within + n == page.len() {
                    break;
                }
                continue;
            }
            if !hand_over(&mut put, &mut done, &mut gathered)? {
                return Ok(done);
            }
            let count = (within + len - done)
                .div_ceil(PAGE_BYTES)
                .min(IO_CHUNK / PAGE_BYTES);
            let stamp = pages.stamp(file.ino);
            let mut out = DataOut::with_capacity(count * PAGE_BYTES);
            let args = Read {
                fh: file.fh,
                offset: index * page_bytes,
                size: (count * PAGE_BYTES) as u32,
                flags: file.flags(),
                lock_owner: None,
            };
            match file.fs.read(ctx, file.node, &args, &mut out) {
                Ok(()) => {}
                Err(e) if done == 0 => return Err(err(e)),
                Err(_) => break,
            }
            let data = out.as_slice();
            for (i, chunk) in data.chunks(PAGE_BYTES).enumerate() {
                pages.put(file.ino, index + i as u64, chunk, stamp);
            }
            if data.len() < count * PAGE_BYTES && data.len().is_multiple_of(PAGE_BYTES) {
                // The end falls on a page boundary: an empty page marks it.
                pages.put(
                    file.ino,
                    index + (data.len() / PAGE_BYTES) as u64,
                    &[],
                    stamp,
                );
            }
            if within >= data.len() {
                break;
            }
            // Nothing is gathered here (handed over before the read).
            let n = (data.len() - within).min(len - done);
            if !give(&mut put, &mut done, &data[within..within + n])? {
                return Ok(done);
            }
            if data.len() < count * PAGE_BYTES {
                break;
            }
        }
        hand_over(&mut put, &mut done, &mut gathered)?;
        Ok(done)
    }

    pub(crate) fn write(
        &self,
        fd: i32,
        file: &OpenFile,
        data: &[u8],
        at: Option<u64>,
    ) -> SysResult {
        let mut change = self.changing();
        change.inos.push(file.ino);
        if file.dir {
            return Err(libc::EISDIR);
        }
        if file.flags() & libc::O_ACCMODE == libc::O_RDONLY || file.flags() & libc::O_PATH != 0 {
            return Err(libc::EBADF);
        }
        file.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
        let ctx = Self::ctx();
        let mut pos = file.position.lock().unwrap_or_else(PoisonError::into_inner);
        if at.is_none() && file.flags() & libc::O_APPEND != 0 {
            if let Some(server) = crate::shared::client::appender(&file.fs) {
                // The run's server appends where the end is when it
                // writes, among all the run's processes.
                let mut end = 0;
                let done = in_chunks(data, |_, chunk| {
                    let (at, n) = server.append(&ctx, file.node, file.fh, file.flags(), chunk)?;
                    end = at + u64::from(n);
                    Ok(n)
                })?;
                if done > 0 {
                    pos.set(fd, end);
                }
                return Ok(done as i64);
            }
        }
        let start = match at {
            Some(off) => off,
            None if file.flags() & libc::O_APPEND != 0 => {
                file.fs
                    .getattr(&ctx, file.node, Some(file.fh))
                    .map_err(err)?
                    .attr
                    .size
            }
            None => pos.offset(fd, file),
        };
        let done = in_chunks(data, |done, chunk| {
            let args = Write {
                fh: file.fh,
                offset: start + done as u64,
                data: chunk,
                flags: file.flags(),
                lock_owner: None,
                from_cache: false,
                kill_suidgid: false,
            };
            file.fs.write(&ctx, file.node, &args)
        })?;
        if at.is_none() {
            pos.set(fd, start + done as u64);
        }
        Ok(done as i64)
    }

    pub(crate) fn lseek(&self, fd: i32, file: &OpenFile, offset: i64, whence: i32) -> SysResult {
        let mut pos = file.position.lock().unwrap_or_else(PoisonError::into_inner);
        if file.dir {
            // Only rewinding a listing is meaningful (rewinddir).
            if whence == libc::SEEK_SET && offset == 0 {
                pos.dir_cookie = 0;
                return Ok(0);
            }
            return Err(libc::EINVAL);
        }
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => pos.offset(fd, file) as i64,
            libc::SEEK_END => {
                let attr = self
                    .fs
                    .getattr(&Self::ctx(), file.node, Some(file.fh))
                    .map_err(err)?;
                attr.attr.size as i64
            }
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let args = fusebox::fs::ops::Lseek {
                    fh: file.fh,
                    offset: offset as u64,
                    whence,
                };
                let at = self.fs.lseek(&Self::ctx(), file.node, &args).map_err(err)?;
                pos.set(fd, at);
                return Ok(at as i64);
            }
            _ => return Err(libc::EINVAL),
        };
        let new = base
            .checked_add(offset)
            .filter(|&n| n >= 0)
            .ok_or(libc::EINVAL)?;
        pos.set(fd, new as u64);
        Ok(new)
    }

    pub(crate) fn fstat(&self, file: &OpenFile) -> Result<FileAttr, i32> {
        let fh = (!file.dir && file.flags() & libc::O_PATH == 0).then_some(file.fh);
        Ok(self
            .fs
            .getattr(&Self::ctx(), file.node, fh)
            .map_err(err)?
            .attr)
    }

    pub(crate) fn stat(&self, path: &[u8], follow: bool) -> Result<FileAttr, i32> {
        let cache = self.cache.get();
        if let Some(attr) = cache.and_then(|c| c.get(path, follow)) {
            return Ok(attr);
        }
        // Read before asking: a change made meanwhile keeps this answer
        // out of the cache.
        let stamps = cache.map(|c| (c.epoch(), c.names_stamp(path)));
        let mut looked = self.looked();
        let r = self.resolve(path, follow, &mut looked)?;
        // Attributes just given with the lookup, as the kernel uses a
        // LOOKUP reply's for a stat.
        let (_, attr) = r.node.ok_or(libc::ENOENT)?;
        if let (Some(c), Some((epoch, names)), false) = (cache, stamps, r.via_link) {
            c.put(path, follow, attr, r.attr_ttl, epoch, names);
        }
        Ok(attr)
    }

    pub(crate) fn access(&self, path: &[u8], mode: i32, follow: bool) -> SysResult {
        let attr = self.stat(path, follow)?;
        if mode == libc::F_OK {
            return Ok(0);
        }
        let (uid, gid) = process::effective_ids();
        let bits = if uid == 0 {
            // Root: read and write always; execute if anyone may, or a
            // directory.
            let x = attr.mode & 0o111 != 0 || attr.mode & libc::S_IFMT == libc::S_IFDIR;
            0o6 | if x { 1 } else { 0 }
        } else if attr.uid == uid {
            (attr.mode >> 6) & 7
        } else if attr.gid == gid {
            (attr.mode >> 3) & 7
        } else {
            attr.mode & 7
        };
        if (mode as u32) & !bits & 7 != 0 {
            return Err(libc::EACCES);
        }
        Ok(0)
    }

    pub(crate) fn getdents64(&self, file: &OpenFile, buf: UserBuf) -> SysResult {
        if !file.dir {
            return Err(libc::ENOTDIR);
        }
        let mut pos = file.position.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = DataOut::with_capacity(32 << 10);
        let mut listing = DirEntries::new(&mut out, false);
        let _ = listing.is_plus();
        let args = Read {
            fh: file.fh,
            offset: pos.dir_cookie,
            size: 32 << 10,
            flags: file.flags(),
            lock_owner: None,
        };
        self.fs
            .readdir(&Self::ctx(), file.node, &args, &mut listing)
            .map_err(err)?;
        let mut records = Vec::with_capacity(buf.len.min(32 << 10));
        let mut raw = out.as_slice();
        let mut any = false;
        // struct fuse_dirent: ino, off, namelen, type, name, padded to 8.
        while raw.len() >= 24 {
            let ino = u64::from_ne_bytes(raw[0..8].try_into().expect("8 bytes"));
            let off = u64::from_ne_bytes(raw[8..16].try_into().expect("8 bytes"));
            let namelen = u32::from_ne_bytes(raw[16..20].try_into().expect("4 bytes")) as usize;
            let typ = u32::from_ne_bytes(raw[20..24].try_into().expect("4 bytes"));
            let Some(name) = raw.get(24..24 + namelen) else {
                break;
            };
            if !crate::kabi::push_dirent64(&mut records, buf.len, ino, off, typ as u8, name) {
                if !any {
                    return Err(libc::EINVAL);
                }
                break;
            }
            any = true;
            pos.dir_cookie = off;
            let step = (24 + namelen).next_multiple_of(8);
            raw = raw.get(step..).unwrap_or(&[]);
        }
        buf.fill(0, &records)?;
        Ok(records.len() as i64)
    }

    /// Where a new entry at `path` goes (its directory and name; EEXIST
    /// if the name is taken), and the change it makes to that directory.
    /// `dir`: the entry is a directory (only then may the path end in a
    /// slash, as in the kernel's filename_create).
    fn new_entry<'a>(
        &'a self,
        path: &[u8],
        dir: bool,
        looked: &mut Looked<'a>,
    ) -> Result<(Change<'a>, NodeId, Vec<u8>), i32> {
        let r = self.resolve_name(path, looked)?;
        if r.node.is_some() || ends_in_dots(path).is_some() {
            return Err(libc::EEXIST);
        }
        if !dir && wants_directory(path) {
            return Err(libc::ENOENT);
        }
        let name = r.name.ok_or(libc::EEXIST)?;
        let mut change = self.changing();
        change.inos.push(r.parent_ino);
        Ok((change, r.parent, name))
    }

    pub(crate) fn mkdir(&self, path: &[u8], mode: u32) -> SysResult {
        let mut looked = self.looked();
        let (_change, parent, name) = self.new_entry(path, true, &mut looked)?;
        let umask = process::umask();
        let args = Mkdir {
            mode: mode & !umask & 0o7777,
            umask,
        };
        let e = self
            .fs
            .mkdir(&Self::ctx(), parent, OsStr::from_bytes(&name), &args)
            .map_err(err)?;
        looked.nodes.push(e.node);
        Ok(0)
    }

    pub(crate) fn mknod(&self, path: &[u8], mode: u32, rdev: u32) -> SysResult {
        let mut looked = self.looked();
        let (_change, parent, name) = self.new_entry(path, false, &mut looked)?;
        let kind = match mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            k
            @ (libc::S_IFREG | libc::S_IFIFO | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFSOCK) => k,
            _ => return Err(libc::EINVAL),
        };
        let umask = process::umask();
        let args = fusebox::fs::ops::Mknod {
            mode: kind | (mode & !umask & 0o7777),
            rdev,
            umask,
        };
        let e = self
            .fs
            .mknod(&Self::ctx(), parent, OsStr::from_bytes(&name), &args)
            .map_err(err)?;
        looked.nodes.push(e.node);
        Ok(0)
    }

    pub(crate) fn link(&self, from: &[u8], to: &[u8], follow: bool) -> SysResult {
        let mut change = self.changing();
        let mut looked = self.looked();
        // A trailing slash follows (`resolve`): a directory, EPERM.
        let a = self.resolve(from, follow, &mut looked)?;
        let (node, attr) = a.node.ok_or(libc::ENOENT)?;
        change.inos.push(attr.ino);
        if attr.mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(libc::EPERM);
        }
        let b = self.resolve_name(to, &mut looked)?;
        if b.node.is_some() || ends_in_dots(to).is_some() {
            return Err(libc::EEXIST);
        }
        if wants_directory(to) {
            return Err(libc::ENOENT);
        }
        change.inos.push(b.parent_ino);
        let name = b.name.ok_or(libc::EEXIST)?;
        let e = self
            .fs
            .link(&Self::ctx(), node, b.parent, OsStr::from_bytes(&name))
            .map_err(err)?;
        looked.nodes.push(e.node);
        Ok(0)
    }

    pub(crate) fn unlink(&self, path: &[u8], dir: bool) -> SysResult {
        let mut change = self.changing();
        let mut looked = self.looked();
        // What the name holds, from the metadata cache if it has it: the
        // kernel too decides (EISDIR, ENOTDIR, whose attributes change)
        // with the inode its dentry cache holds, within the same TTL.
        let cached = self
            .cache
            .get()
            .and_then(|c| c.get(path, false))
            .map(|attr| {
                self.resolve_parent(path, &mut looked)
                    .map(|p| p.map(|p| (p, attr)))
            })
            .transpose()?
            .flatten();
        let (parent, parent_ino, name, attr) = match cached {
            Some(((parent, parent_ino, name), attr)) => (parent, parent_ino, name, attr),
            None => {
                let r = self.resolve_name(path, &mut looked)?;
                let (_, attr) = r.node.ok_or(libc::ENOENT)?;
                // `rm dir/.`, `rmdir dir/..`: the kernel's answers.
                match (ends_in_dots(path), dir) {
                    (Some(_), false) => return Err(libc::EISDIR),
                    (Some(b"."), true) => return Err(libc::EINVAL),
                    (Some(_), true) => return Err(libc::ENOTEMPTY),
                    (None, _) => {}
                }
                (r.parent, r.parent_ino, r.name.ok_or(libc::EBUSY)?, attr)
            }
        };
        change.gone.push(name.clone());
        change.inos.extend([parent_ino, attr.ino]);
        let is_dir = attr.mode & libc::S_IFMT == libc::S_IFDIR;
        let name = OsStr::from_bytes(&name);
        let ctx = Self::ctx();
        match (dir, is_dir) {
            (true, true) => self.fs.rmdir(&ctx, parent, name).map_err(err)?,
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            // `unlink file/`: the slash wants a directory.
            (false, false) if wants_directory(path) => return Err(libc::ENOTDIR),
            (false, false) => self.fs.unlink(&ctx, parent, name).map_err(err)?,
        }
        looked.gone(parent, name.as_bytes());
        Ok(0)
    }

    pub(crate) fn rename(&self, from: &[u8], to: &[u8], flags: u32) -> SysResult {
        let mut change = self.changing();
        let mut looked = self.looked();
        if ends_in_dots(from).is_some() || ends_in_dots(to).is_some() {
            return Err(libc::EBUSY);
        }
        let a = self.resolve_name(from, &mut looked)?;
        let b = self.resolve_name(to, &mut looked)?;
        let (_, moved) = a.node.ok_or(libc::ENOENT)?;
        // Trailing slashes only when a directory moves (the kernel's
        // do_renameat2).
        if moved.mode & libc::S_IFMT != libc::S_IFDIR
            && (wants_directory(from) || wants_directory(to))
        {
            return Err(libc::ENOTDIR);
        }
        let (Some(na), Some(nb)) = (a.name, b.name) else {
            return Err(libc::EBUSY);
        };
        change.gone.push(na.clone());
        change.gone.push(nb.clone());
        change.inos.extend([a.parent_ino, b.parent_ino]);
        change
            .inos
            .extend(a.node.iter().chain(b.node.iter()).map(|(_, x)| x.ino));
        let args = Rename {
            parent: a.parent,
            name: OsStr::from_bytes(&na),
            new_parent: b.parent,
            new_name: OsStr::from_bytes(&nb),
            flags,
        };
        self.fs.rename(&Self::ctx(), &args).map_err(err)?;
        looked.gone(a.parent, &na);
        looked.gone(b.parent, &nb);
        Ok(0)
    }

    pub(crate) fn readlink(&self, path: &[u8], buf: UserBuf) -> SysResult {
        let mut looked = self.looked();
        let r = self.resolve(path, false, &mut looked)?;
        let (node, attr) = r.node.ok_or(libc::ENOENT)?;
        if attr.mode & libc::S_IFMT != libc::S_IFLNK {
            return Err(libc::EINVAL);
        }
        let mut out = DataOut::with_capacity(libc::PATH_MAX as usize);
        self.fs
            .readlink(&Self::ctx(), node, &mut out)
            .map_err(err)?;
        let n = out.as_slice().len().min(buf.len);
        buf.fill(0, &out.as_slice()[..n])?;
        Ok(n as i64)
    }

    pub(crate) fn symlink(&self, target: &[u8], path: &[u8]) -> SysResult {
        let mut looked = self.looked();
        let (_change, parent, name) = self.new_entry(path, false, &mut looked)?;
        let e = self
            .fs
            .symlink(
                &Self::ctx(),
                parent,
                OsStr::from_bytes(&name),
                OsStr::from_bytes(target),
            )
            .map_err(err)?;
        looked.nodes.push(e.node);
        Ok(0)
    }

    pub(crate) fn truncate(
        &self,
        path: Option<&[u8]>,
        file: Option<&OpenFile>,
        size: i64,
    ) -> SysResult {
        let mut change = self.changing();
        if size < 0 {
            return Err(libc::EINVAL);
        }
        let mut looked = self.looked();
        let (node, fh) = match (path, file) {
            (_, Some(f)) => {
                if f.flags() & libc::O_ACCMODE == libc::O_RDONLY {
                    return Err(libc::EINVAL);
                }
                change.inos.push(f.ino);
                (f.node, Some(f.fh))
            }
            (Some(p), None) => {
                let (node, attr) = self
                    .resolve(p, true, &mut looked)?
                    .node
                    .ok_or(libc::ENOENT)?;
                change.inos.push(attr.ino);
                (node, None)
            }
            (None, None) => return Err(libc::EBADF),
        };
        let args = SetAttr {
            fh,
            size: Some(size as u64),
            ..SetAttr::default()
        };
        self.fs.setattr(&Self::ctx(), node, &args).map_err(err)?;
        Ok(0)
    }

    pub(crate) fn fallocate(&self, file: &OpenFile, mode: i32, offset: i64, len: i64) -> SysResult {
        let mut change = self.changing();
        change.inos.push(file.ino);
        if offset < 0 || len <= 0 {
            return Err(libc::EINVAL);
        }
        if file.dir || file.flags() & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(libc::EBADF);
        }
        let args = fusebox::fs::ops::Fallocate {
            fh: file.fh,
            offset: offset as u64,
            length: len as u64,
            mode,
        };
        match self.fs.fallocate(&Self::ctx(), file.node, &args) {
            Ok(()) => Ok(0),
            Err(Errno::ENOSYS) => Err(libc::EOPNOTSUPP),
            Err(e) => Err(err(e)),
        }
    }

    pub(crate) fn statfs(&self, target: &Target<'_>) -> Result<fusebox::types::Statfs, i32> {
        let (node, _, _looked) = self.node_of(target)?;
        self.fs.statfs(&Self::ctx(), node).map_err(err)
    }

    /// posix_fadvise: a hint, answered as the kernel answers it; only
    /// DONTNEED does anything, dropping the file's pages here and in the
    /// filesystem's own cache, as the kernel drops its page cache's. The
    /// whole file's, whatever range was named: neither cache can drop a
    /// range, and a page dropped too many is only read again. (The
    /// inode's stamp also makes its cached attributes be asked again.)
    pub(crate) fn fadvise(&self, file: &OpenFile, advice: i32) -> SysResult {
        if !(libc::POSIX_FADV_NORMAL..=libc::POSIX_FADV_NOREUSE).contains(&advice) {
            return Err(libc::EINVAL);
        }
        if file.flags() & libc::O_PATH != 0 {
            return Err(libc::EBADF);
        }
        if advice == libc::POSIX_FADV_DONTNEED && !file.dir {
            // The page cache's stamp is the inode's: its pages are
            // never read again.
            if let Some(c) = self.cache.get() {
                c.ino_changed(file.ino);
            }
            self.fs.drop_cached_data(file.node);
        }
        Ok(0)
    }

    pub(crate) fn fsync(&self, file: &OpenFile, datasync: bool) -> SysResult {
        let ctx = Self::ctx();
        let r = if file.dir {
            self.fs.fsyncdir(&ctx, file.node, file.fh, datasync)
        } else {
            self.fs.fsync(&ctx, file.node, file.fh, datasync)
        };
        match r {
            Ok(()) | Err(Errno::ENOSYS) => Ok(0),
            Err(e) => Err(err(e)),
        }
    }

    pub(crate) fn chdir(&self, path: &[u8]) -> SysResult {
        let mut looked = self.looked();
        let r = self.resolve(path, true, &mut looked)?;
        let (_, attr) = r.node.ok_or(libc::ENOENT)?;
        if attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(libc::ENOTDIR);
        }
        let mut st = self.state();
        if st.shared_child() {
            st.spawned_chdir(Some(r.path));
            return Ok(0);
        }
        st.cwd = Some(r.path);
        Ok(0)
    }

    pub(crate) fn fchdir(&self, file: &OpenFile) -> SysResult {
        if !file.dir && file.flags() & libc::O_PATH == 0 {
            return Err(libc::ENOTDIR);
        }
        let mut st = self.state();
        if st.shared_child() {
            st.spawned_chdir(Some(file.path.clone()));
            return Ok(0);
        }
        st.cwd = Some(file.path.clone());
        Ok(0)
    }

    /// getcwd(2) while the working directory is inside the mount.
    pub(crate) fn getcwd(&self, buf: UserBuf) -> Option<SysResult> {
        let cwd = self.state().cwd()?.clone();
        let mut full = self.at.clone();
        if !cwd.is_empty() {
            if full != b"/" {
                full.push(b'/');
            }
            full.extend_from_slice(&cwd);
        }
        full.push(0);
        if full.len() > buf.len {
            return Some(Err(libc::ERANGE));
        }
        Some(buf.fill(0, &full).map(|()| full.len() as i64))
    }
}

/// What a call that takes a path or a descriptor acts on.
pub(crate) enum Target<'a> {
    /// A path inside the mount; `true`: follow a symlink at its end.
    Path(&'a [u8], bool),
    File(&'a OpenFile),
}

impl VirtualMount {
    /// The node `target` names, with the lookups that found it (given
    /// back when the guard goes).
    fn node_of(
        &self,
        target: &Target<'_>,
    ) -> Result<(NodeId, Option<FileHandle>, Looked<'_>), i32> {
        self.node_and_ino_of(target).map(|(n, fh, _, l)| (n, fh, l))
    }

    /// `node_of`, with the inode number.
    fn node_and_ino_of(
        &self,
        target: &Target<'_>,
    ) -> Result<(NodeId, Option<FileHandle>, u64, Looked<'_>), i32> {
        let mut looked = self.looked();
        match target {
            Target::File(f) => {
                let fh = (!f.dir && f.flags() & libc::O_PATH == 0).then_some(f.fh);
                Ok((f.node, fh, f.ino, looked))
            }
            Target::Path(p, follow) => {
                let r = self.resolve(p, *follow, &mut looked)?;
                let (node, attr) = r.node.ok_or(libc::ENOENT)?;
                Ok((node, None, attr.ino, looked))
            }
        }
    }

    /// getxattr and listxattr: `size` 0 asks for the size.
    pub(crate) fn getxattr(
        &self,
        target: &Target<'_>,
        name: Option<&[u8]>,
        buf: UserBuf,
    ) -> SysResult {
        let (node, _, _looked) = self.node_of(target)?;
        let mut out = DataOut::with_capacity(XATTR_MAX);
        let ctx = Self::ctx();
        let r = match name {
            Some(n) => self.fs.getxattr(&ctx, node, OsStr::from_bytes(n), &mut out),
            None => self.fs.listxattr(&ctx, node, &mut out),
        };
        match r {
            Ok(()) => {}
            // No xattrs at all: none to list, none to get.
            Err(Errno::ENOSYS) if name.is_some() => return Err(libc::EOPNOTSUPP),
            Err(Errno::ENOSYS) => return Ok(0),
            Err(e) => return Err(err(e)),
        }
        let value = out.as_slice();
        if buf.len == 0 {
            return Ok(value.len() as i64);
        }
        if value.len() > buf.len {
            return Err(libc::ERANGE);
        }
        buf.fill(0, value)?;
        Ok(value.len() as i64)
    }

    pub(crate) fn setxattr(
        &self,
        target: &Target<'_>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> SysResult {
        let mut change = self.changing();
        let (node, _, ino, _looked) = self.node_and_ino_of(target)?;
        change.inos.push(ino);
        let args = fusebox::fs::ops::Setxattr {
            name: OsStr::from_bytes(name),
            value,
            flags,
            setxattr_flags: 0,
        };
        match self.fs.setxattr(&Self::ctx(), node, &args) {
            Ok(()) => Ok(0),
            Err(Errno::ENOSYS) => Err(libc::EOPNOTSUPP),
            Err(e) => Err(err(e)),
        }
    }

    pub(crate) fn removexattr(&self, target: &Target<'_>, name: &[u8]) -> SysResult {
        let mut change = self.changing();
        let (node, _, ino, _looked) = self.node_and_ino_of(target)?;
        change.inos.push(ino);
        match self
            .fs
            .removexattr(&Self::ctx(), node, OsStr::from_bytes(name))
        {
            Ok(()) => Ok(0),
            Err(Errno::ENOSYS) => Err(libc::EOPNOTSUPP),
            Err(e) => Err(err(e)),
        }
    }

    /// chmod, chown, utimensat: a SETATTR with the fields given.
    pub(crate) fn setattr(&self, target: &Target<'_>, mut change: SetAttr) -> SysResult {
        let mut changing = self.changing();
        let (node, fh, ino, _looked) = self.node_and_ino_of(target)?;
        changing.inos.push(ino);
        change.fh = fh;
        self.fs.setattr(&Self::ctx(), node, &change).map_err(err)?;
        Ok(0)
    }
}

const XATTR_MAX: usize = 64 << 10;

/// `/proc/self/fd/N...`, `/proc/PID/fd/N...` (this process) and
/// `/dev/fd/N...`: N and what follows it.
fn proc_fd(path: &[u8]) -> Option<(i32, &[u8])> {
    let rest = if let Some(r) = path.strip_prefix(b"/dev/fd/") {
        r
    } else {
        let r = path.strip_prefix(b"/proc/")?;
        let (who, r) = r.split_at(r.iter().position(|&c| c == b'/')?);
        let own = who == b"self"
            || who == b"thread-self"
            || who == std::process::id().to_string().as_bytes();
        if !own {
            return None;
        }
        r.strip_prefix(b"/fd/")?
    };
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let fd = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    Some((fd, &rest[digits..]))
}

/// The kernel's working directory.
fn kernel_cwd() -> Vec<u8> {
    std::env::current_dir()
        .map(|p| p.into_os_string().into_vec())
        .unwrap_or_default()
}

/// The path of a directory descriptor of the kernel's.
fn fd_path(fd: i32) -> Option<Vec<u8>> {
    let link = format!("/proc/self/fd/{fd}\0");
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let n = raw_syscall(
        libc::SYS_readlink,
        [
            link.as_ptr() as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            0,
            0,
            0,
        ],
    );
    if n <= 0 || buf[0] != b'/' {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

/// `base` (inside the mount) joined with a relative `path`.
fn join_inside(base: &[u8], path: &[u8]) -> Vec<u8> {
    let mut joined = base.to_vec();
    joined.push(b'/');
    joined.extend_from_slice(path);
    joined
}

/// The walk of `path` leaves the mount for `base`: the call is to be made
/// again on `base` plus the components still `pending` (in reverse order,
/// as the walk pops them) and `path`'s trailing slash ("must be a
/// directory"). Returns the walk's EXDEV, beside which that path is left.
fn escape(base: &[u8], pending: &[Vec<u8>], path: &[u8]) -> i32 {
    let mut outside = base.to_vec();
    for c in pending.iter().rev() {
        outside.push(b'/');
        outside.extend_from_slice(c);
    }
    if path.ends_with(b"/") {
        outside.push(b'/');
    }
    set_escaped(&outside);
    libc::EXDEV
}

/// The directory holding absolute `path` ("/" for "/x").
fn parent_dir(path: &[u8]) -> &[u8] {
    let trimmed = &path[..path.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1)];
    match trimmed.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/",
        Some(i) => &trimmed[..i],
    }
}

/// Whether `path`'s last component is "." or ".." (trailing slashes
/// aside): not a name a call can make, remove or rename (the kernel's
/// LAST_DOT and LAST_DOTDOT).
fn ends_in_dots(path: &[u8]) -> Option<&'static [u8]> {
    let end = path.iter().rposition(|&c| c != b'/')? + 1;
    let last = path[..end].rsplit(|&c| c == b'/').next()?;
    match last {
        b"." => Some(b"."),
        b".." => Some(b".."),
        _ => None,
    }
}

/// Whether `path` ends in a slash after a name: the kernel then wants a
/// directory there, whatever the call.
fn wants_directory(path: &[u8]) -> bool {
    path.ends_with(b"/") && path.iter().any(|&c| c != b'/')
}

/// "." and ".." taken out by name (the kernel would walk them; the paths
/// this is used for are the kernel's own directories); a trailing slash,
/// or a last "." or "..", leaves a trailing slash.
fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&c| c == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    } else if path.ends_with(b"/") || ends_in_dots(path).is_some() {
        // "Must be a directory", kept for the walk.
        out.push(b'/');
    }
    out
}

/// Path components, empty ones and "." dropped later by the walk.
fn split(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&c| c == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn join(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.join(&b'/')
}
