//! The node table: node id <-> kernel file handle, with lookup counts and a
//! bounded cache of O_PATH fds.
//!
//! A node whose fd the cache let go is opened again one of two ways
//! ([`Reopen`]): from its handle with open_by_handle_at, which needs
//! CAP_DAC_READ_SEARCH, or, for an ordinary user, by name from the parent
//! and name it was last seen under, the result checked against the handle
//! so that a name now holding another file answers ESTALE rather than
//! reaching it.
//!
//! A node's cached fd lives in the node itself, so a hit (every GETATTR,
//! SETATTR, LOOKUP in a directory) costs one map lookup and one uncontended
//! lock. The moka cache decides only which nodes may keep one: it holds
//! their ids, and its eviction takes the fd away from the node. A hit does
//! not tell moka (that cost ~0.5 us per request in a profile of stat), so
//! nodes leave in the order they came in, weighed by how often they came.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::mapref::entry::Entry as MapEntry;
use fusebox::protocol::BackingId;
use fusebox::recovery::KeyChanges;
use fusebox::{Errno, FsResult, NodeId};
use rustix::fs::{Mode, OFlags};

use super::proc_fd::ProcFds;
use super::{FastMap, Hasher};
use crate::sys::{self, KernelHandle};

struct Node {
    id: u64,
    handle: KernelHandle,
    dev: u64,
    symlink: bool,
    nlookup: AtomicU64,
    /// `fd` found no cached fd for this node before.
    missed: AtomicBool,
    /// While the node has open files, one of them stays here as its fd: an
    /// unlinked inode can no longer be opened by handle.
    pin: Mutex<Pin>,
}

/// What the last close of a node gives back.
#[derive(Default)]
pub struct Unpinned {
    /// The open file that served as the node's fd.
    pub file: Option<Arc<OwnedFd>>,
    /// The passthrough backing id, to close.
    pub backing: Option<BackingId>,
}

#[derive(Default)]
struct Pin {
    fd: Option<Arc<OwnedFd>>,
    opens: u32,
    /// Passthrough backing file shared by every open of the inode: one
    /// BACKING_OPEN ioctl for the first open, one BACKING_CLOSE after the last.
    backing: Option<BackingId>,
    /// The node's cached O_PATH fd, while the fd cache lets it keep one.
    /// Taken (closed) at once by eviction and by `forget`: an fd kept
    /// longer keeps a deleted file's space allocated.
    path: Option<Arc<OwnedFd>>,
    /// Where the node was last seen by name (kept when reopening by path).
    place: Option<Place>,
}

/// How nodes whose fd the cache let go are opened again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reopen {
    /// From the handle where this process may (CAP_DAC_READ_SEARCH, as
    /// root has), else by path: probed once at start.
    #[default]
    Auto,
    /// open_by_handle_at: one syscall, and a file renamed behind the
    /// daemon's back is still found.
    ByHandle,
    /// openat from the parent, checked against the handle: works for any
    /// user. A file renamed in the source (not through the mount) is lost
    /// until it is looked up again.
    ByPath,
}

/// A parent directory and a name in it.
#[derive(Clone)]
struct Place {
    parent: Parent,
    name: CString,
}

#[derive(Clone)]
enum Parent {
    /// The source's root directory.
    Root,
    /// Held, not merely named: a parent the kernel has forgotten stays
    /// reachable while a node it still knows was seen in it.
    Node(Arc<Node>),
    /// Restored from a previous server's ledger: found by id at first use.
    Restored(u64),
}

impl Parent {
    fn id(&self) -> u64 {
        match self {
            Parent::Root => NodeId::ROOT.0,
            Parent::Node(n) => n.id,
            Parent::Restored(id) => *id,
        }
    }
}

/// The first bytes of a key made by path (a handle key starts with the
/// device number, and no device is all ones).
const PATH_KEY: [u8; 8] = [0xff; 8];

impl Pin {
    /// The fd the node can be reached by: an open file, else the cached one.
    fn any_fd(&self) -> Option<Arc<OwnedFd>> {
        self.fd.as_ref().or(self.path.as_ref()).cloned()
    }

    /// Whether the node's place is `name` in `parent` already (node ids
    /// are never reused, so the id names the parent).
    fn is_at(&self, parent: NodeId, name: &CStr) -> bool {
        self.place
            .as_ref()
            .is_some_and(|p| p.parent.id() == parent.0 && p.name.as_c_str() == name)
    }
}

impl Node {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pin> {
        self.pin.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type NodeMap = FastMap<u64, Arc<Node>>;

/// Keyed by (device, handle) rather than (device, inode number): handles
/// carry a generation, so a recycled inode number is never mistaken for
/// the file that had it before.
pub struct NodeTable {
    root: Arc<OwnedFd>,
    nodes: Arc<NodeMap>,
    by_handle: FastMap<(u64, KernelHandle), u64>,
    next: AtomicU64,
    /// Ids of the nodes that hold a cached fd (see the module comment).
    fd_cache: moka::sync::Cache<u64, (), Hasher>,
    /// Opens from a file handle (node fds and files), for tests.
    handle_opens: AtomicU64,
    /// Any fd on each device, for open_by_handle_at's mount argument.
    mount_fds: FastMap<u64, Arc<OwnedFd>>,
    by_path: bool,
    /// To open an O_PATH fd found by path with real flags.
    proc_fds: Option<ProcFds>,
    /// The recovery ledger's, told when a node's place (its key) moves.
    key_changes: OnceLock<KeyChanges>,
}

impl NodeTable {
    /// `root_mount` must be a real (not O_PATH) fd: open_by_handle_at
    /// refuses O_PATH fds as its mount argument.
    pub fn new(root: OwnedFd, root_mount: OwnedFd, fd_cache: u64, reopen: Reopen) -> NodeTable {
        reserve_fd_table(&root, fd_cache + FD_HEADROOM);
        let by_path = match reopen {
            Reopen::ByHandle => false,
            Reopen::ByPath => true,
            Reopen::Auto => !handles_open(&root, &root_mount),
        };
        if by_path {
            tracing::debug!("stackfs reopens nodes by path (open_by_handle_at not permitted)");
        }
        let proc_fds = by_path.then(|| ProcFds::open().ok()).flatten();
        let root = Arc::new(root);
        let mount_fds = FastMap::default();
        if let Ok(st) = rustix::fs::fstat(&root_mount) {
            mount_fds.insert(st.st_dev, Arc::new(root_mount));
        }
        let nodes: Arc<NodeMap> = Arc::default();
        let evicted = Arc::downgrade(&nodes);
        NodeTable {
            root,
            nodes,
            by_handle: FastMap::default(),
            next: AtomicU64::new(NodeId::ROOT.0 + 1),
            fd_cache: moka::sync::Cache::builder()
                .max_capacity(fd_cache.max(16))
                .eviction_listener(move |id: Arc<u64>, (), _| {
                    // Whatever the cause (size, `forget`, `shed`): the node,
                    // if it is still there, gives its cached fd back.
                    let node = evicted
                        .upgrade()
                        .and_then(|m| m.get(&*id).map(|n| n.clone()));
                    if let Some(n) = node {
                        n.lock().path.take();
                    }
                })
                .build_with_hasher(Hasher::default()),
            handle_opens: AtomicU64::new(0),
            mount_fds,
            by_path,
            proc_fds,
            key_changes: OnceLock::new(),
        }
    }

    /// Whether evicted nodes are reopened by path (see [`Reopen`]).
    pub fn by_path(&self) -> bool {
        self.by_path
    }

    /// Report later key changes (nodes reopened by path are keyed by
    /// their place) to the recovery ledger.
    pub fn track_key_changes(&self, changes: KeyChanges) {
        let _ = self.key_changes.set(changes);
    }

    /// Find or add the node for `handle` and take one lookup reference.
    /// `seen` is where it was found by name (None for an O_TMPFILE).
    /// `open_mount_fd` opens a real fd of it, needed only for a device seen
    /// for the first time (the root of a filesystem mounted in the source)
    /// when reopening by handle.
    pub fn register(
        &self,
        handle: KernelHandle,
        st: &rustix::fs::Stat,
        seen: Option<(NodeId, &CStr)>,
        open_mount_fd: impl FnOnce() -> FsResult<OwnedFd>,
    ) -> FsResult<NodeId> {
        let dev = st.st_dev;
        let seen = seen.filter(|_| self.by_path);
        let (id, moved) = match self.by_handle.entry((dev, handle.clone())) {
            MapEntry::Occupied(o) => {
                let id = *o.get();
                let mut moved = false;
                if let Some(n) = self.nodes.get(&id) {
                    n.nlookup.fetch_add(1, Ordering::AcqRel);
                    // Most lookups find a node where it was: nothing to
                    // allocate then.
                    if let Some((parent, name)) = seen {
                        moved = self.move_to(&n, parent, name);
                    }
                }
                (id, moved)
            }
            MapEntry::Vacant(v) => {
                let place = match seen {
                    Some((parent, name)) => Some(Place {
                        parent: self.parent(parent)?,
                        name: name.to_owned(),
                    }),
                    None => None,
                };
                if !self.by_path && !self.mount_fds.contains_key(&dev) {
                    let fd = fusebox::descriptors::keep(open_mount_fd()?);
                    self.mount_fds.insert(dev, Arc::new(fd));
                }
                let id = self.next.fetch_add(1, Ordering::Relaxed);
                let node = Node {
                    id,
                    handle,
                    dev,
                    symlink: st.st_mode & libc::S_IFMT == libc::S_IFLNK,
                    nlookup: AtomicU64::new(1),
                    missed: AtomicBool::new(false),
                    pin: Mutex::new(Pin {
                        place,
                        ..Pin::default()
                    }),
                };
                self.nodes.insert(id, Arc::new(node));
                v.insert(id);
                (id, false)
            }
        };
        if moved {
            self.key_changed(NodeId(id));
        }
        Ok(NodeId(id))
    }

    /// `name` in `dir` was renamed onto by this mount (or found so after a
    /// crash): the node it now holds, if known, is to be reopened there.
    pub fn renamed(&self, dir: NodeId, dir_fd: &OwnedFd, name: &CStr) {
        if !self.by_path {
            return;
        }
        let Ok(st) = rustix::fs::statat(dir_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) else {
            return;
        };
        let Ok(handle) = sys::name_to_handle_at(dir_fd.as_fd(), name, 0) else {
            return;
        };
        let Some(id) = self.by_handle.get(&(st.st_dev, handle)).map(|v| *v) else {
            return;
        };
        let Some(n) = self.nodes.get(&id).map(|n| n.clone()) else {
            return;
        };
        if self.move_to(&n, dir, name) {
            self.key_changed(NodeId(id));
        }
    }

    /// Record that `n` is `name` in `parent`; true if that is not where it
    /// was. A parent no longer known leaves the old place.
    fn move_to(&self, n: &Node, parent: NodeId, name: &CStr) -> bool {
        if n.lock().is_at(parent, name) {
            return false;
        }
        let Ok(parent) = self.parent(parent) else {
            return false;
        };
        n.lock().place = Some(Place {
            parent,
            name: name.to_owned(),
        });
        true
    }

    fn key_changed(&self, node: NodeId) {
        if let Some(changes) = self.key_changes.get() {
            changes.changed(node);
        }
    }

    /// `id` as the parent of a place.
    fn parent(&self, id: NodeId) -> FsResult<Parent> {
        if id == NodeId::ROOT {
            return Ok(Parent::Root);
        }
        Ok(Parent::Node(self.node(id)?))
    }

    fn node(&self, id: NodeId) -> FsResult<Arc<Node>> {
        // ESTALE: the kernel names a node we no longer know.
        self.nodes
            .get(&id.0)
            .map(|n| n.clone())
            .ok_or(Errno(libc::ESTALE))
    }

    /// An O_PATH fd of `id`, reopened by handle if the cache let it go.
    ///
    /// The reopened fd is cached while the cache has room, or when this
    /// node missed before; otherwise it is used once and closed. Once the
    /// cache is full, inserting every miss only churns it: a scan of more
    /// nodes than it holds gets no hits whatever is evicted, and each
    /// insert then costs an eviction and a close. A node asked for again is
    /// worth its slot.
    pub fn fd(&self, id: NodeId) -> FsResult<Arc<OwnedFd>> {
        if id == NodeId::ROOT {
            return Ok(self.root.clone());
        }
        let n = self.node(id)?;
        if let Some(fd) = n.lock().any_fd() {
            return Ok(fd);
        }
        let fd = Arc::new(self.open_node(&n, libc::O_PATH | libc::O_CLOEXEC)?);
        if n.missed.swap(true, Ordering::Relaxed) || self.cache_has_room() {
            self.cache(id, &n, fd.clone());
        }
        Ok(fd)
    }

    /// An fd of `id` this table already holds (its open file, or the
    /// cache's O_PATH fd), opening nothing.
    pub fn held_fd(&self, id: NodeId) -> FsResult<Option<Arc<OwnedFd>>> {
        if id == NodeId::ROOT {
            return Ok(Some(self.root.clone()));
        }
        let n = self.node(id)?;
        let fd = n.lock().any_fd();
        Ok(fd)
    }

    /// Open `id` from its handle with `flags` (open(2) flags), bypassing
    /// the cache.
    pub fn open_by_handle(&self, id: NodeId, flags: i32) -> FsResult<OwnedFd> {
        self.open_node(&*self.node(id)?, flags)
    }

    fn open_node(&self, n: &Node, flags: i32) -> FsResult<OwnedFd> {
        if self.by_path {
            if flags & libc::O_PATH != 0 {
                self.handle_opens.fetch_add(1, Ordering::Relaxed);
                return self.find_by_path(n);
            }
            // Through the node's O_PATH fd, which the cache may keep: the
            // walk found it is not repeated for the node's next request.
            let fd = self.fd(NodeId(n.id))?;
            let proc = self.proc_fds.as_ref().ok_or(Errno(libc::ESTALE))?;
            let flags = OFlags::from_bits_retain(flags as _) | OFlags::CLOEXEC;
            return proc
                .at(fd.as_fd(), |dir, name| {
                    rustix::fs::openat(dir, name, flags, Mode::empty())
                })
                .map(fusebox::descriptors::keep)
                .map_err(Errno::from);
        }
        let mount = self
            .mount_fds
            .get(&n.dev)
            .map(|m| m.clone())
            .ok_or(Errno(libc::ESTALE))?;
        self.handle_opens.fetch_add(1, Ordering::Relaxed);
        let open = || sys::open_by_handle_at(mount.as_fd(), &n.handle, flags).map_err(Errno::from);
        match open() {
            Err(Errno::EMFILE | Errno::ENFILE) if self.shed() > 0 => open(),
            r => r,
        }
        .map(fusebox::descriptors::keep)
    }

    /// An O_PATH fd of `n` opened from its parent by the name it was last
    /// seen under, checked to be the same file (same handle).
    fn find_by_path(&self, n: &Node) -> FsResult<OwnedFd> {
        let place = n.lock().place.clone().ok_or(Errno(libc::ESTALE))?;
        let dir = match &place.parent {
            Parent::Root => self.root.clone(),
            Parent::Node(p) => self.parent_fd(p)?,
            Parent::Restored(id) => {
                let p = self.node(NodeId(*id))?;
                let fd = self.parent_fd(&p)?;
                let mut pin = n.lock();
                if let Some(Place { parent, .. }) = pin.place.as_mut() {
                    if parent.id() == *id {
                        *parent = Parent::Node(p);
                    }
                }
                fd
            }
        };
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let open = || rustix::fs::openat(&*dir, &place.name, flags, Mode::empty());
        let fd = match open() {
            Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) if self.shed() > 0 => open(),
            r => r,
        }
        // The name is gone: so is this node, as far as a path can tell.
        .map_err(|_| Errno(libc::ESTALE))?;
        let fd = fusebox::descriptors::keep(fd);
        let st = rustix::fs::fstat(&fd).map_err(Errno::from)?;
        let handle = sys::name_to_handle_at(fd.as_fd(), c"", libc::AT_EMPTY_PATH)
            .map_err(|_| Errno(libc::ESTALE))?;
        if st.st_dev != n.dev || handle != n.handle {
            return Err(Errno(libc::ESTALE));
        }
        Ok(fd)
    }

    /// An fd of directory `p`: the cache's while `p` is a node the kernel
    /// knows, else one found by path for this walk only.
    fn parent_fd(&self, p: &Arc<Node>) -> FsResult<Arc<OwnedFd>> {
        let known = self.nodes.get(&p.id).is_some_and(|n| Arc::ptr_eq(&n, p));
        if known {
            return self.fd(NodeId(p.id));
        }
        if let Some(fd) = p.lock().any_fd() {
            return Ok(fd);
        }
        Ok(Arc::new(self.find_by_path(p)?))
    }

    /// The process ran out of fds: close an eighth of the cached ones
    /// (at least one) so the open that failed can be retried. Returns how
    /// many were closed.
    pub fn shed(&self) -> usize {
        let want = (self.fd_cache.entry_count() / 8).max(1) as usize;
        let victims: Vec<Arc<u64>> = self.fd_cache.iter().take(want).map(|(k, _)| k).collect();
        let mut closed = 0;
        for id in victims {
            if let Some(n) = self.nodes.get(&*id) {
                if n.lock().path.take().is_some() {
                    closed += 1;
                }
            }
            self.fd_cache.invalidate(&*id);
        }
        tracing::debug!(closed, "out of fds: node cache shed");
        closed
    }

    /// Cache `fd`, an fd of `id` (O_PATH or a read-only file), as if
    /// `fd(id)` had opened it.
    pub fn keep_fd(&self, id: NodeId, fd: Arc<OwnedFd>) {
        if id == NodeId::ROOT {
            return;
        }
        // A FORGET may have removed the node meanwhile (FORGETs and
        // RELEASEs travel apart): then the fd just closes here.
        if let Ok(n) = self.node(id) {
            self.cache(id, &n, fd);
        }
    }

    /// Whether an O_PATH fd of `id` opened now would be kept: the node has
    /// none cached and the cache has room (see `cache_has_room`).
    pub fn wants_fd(&self, id: NodeId) -> bool {
        id != NodeId::ROOT
            && self.cache_has_room()
            && self
                .nodes
                .get(&id.0)
                .is_some_and(|n| n.lock().path.is_none())
    }

    fn cache(&self, id: NodeId, n: &Node, fd: Arc<OwnedFd>) {
        n.lock().path = Some(fd);
        self.fd_cache.insert(id.0, ());
        // A FORGET between the node lookup and here removed the node from
        // the map but found no fd to take: take it now.
        if !self.nodes.contains_key(&id.0) {
            n.lock().path.take();
            self.fd_cache.invalidate(&id.0);
        }
    }

    /// Whether the fd cache has room for one more without evicting. When it
    /// is full, moka admits a new fd only over one read less often, so an
    /// fd opened ahead of any request would be dropped unused.
    pub fn cache_has_room(&self) -> bool {
        let cap = self.fd_cache.policy().max_capacity().unwrap_or(u64::MAX);
        self.fd_cache.entry_count() < cap
    }

    /// Opens from a file handle so far.
    pub fn handle_opens(&self) -> u64 {
        self.handle_opens.load(Ordering::Relaxed)
    }

    pub fn is_symlink(&self, id: NodeId) -> bool {
        self.nodes.get(&id.0).is_some_and(|n| n.symlink)
    }

    /// A file of `id` was opened as `file`: keep it as the node's fd until
    /// the last close (an unlinked inode can no longer be opened by handle).
    /// Being a real open file, fd-based calls such as fgetxattr work on it.
    pub fn pin_with(&self, id: NodeId, file: Arc<OwnedFd>) -> FsResult<()> {
        if id == NodeId::ROOT {
            return Ok(());
        }
        let n = self.node(id)?;
        let mut pin = n.lock();
        pin.opens += 1;
        pin.fd.get_or_insert(file);
        Ok(())
    }

    /// The node's pinned open file, if it has one.
    pub fn open_file(&self, id: NodeId) -> Option<Arc<OwnedFd>> {
        let n = self.nodes.get(&id.0)?.clone();
        let pin = n.lock();
        pin.fd.clone()
    }

    /// One open of `id` ended. After the last, the node's pinned file and
    /// passthrough backing id are handed back for the caller to close.
    pub fn unpin(&self, id: NodeId) -> Unpinned {
        let Ok(n) = self.node(id) else {
            return Unpinned::default();
        };
        let mut pin = n.lock();
        pin.opens = pin.opens.saturating_sub(1);
        if pin.opens == 0 {
            return Unpinned {
                file: pin.fd.take(),
                backing: pin.backing.take(),
            };
        }
        Unpinned::default()
    }

    /// The passthrough backing id of an open node, registering it with
    /// `open` on first use. Call between `pin` and `unpin`.
    pub fn backing(
        &self,
        id: NodeId,
        open: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> FsResult<BackingId> {
        let n = self.node(id)?;
        let mut pin = n.lock();
        if let Some(b) = pin.backing {
            return Ok(b);
        }
        let b = open().map_err(Errno::from)?;
        pin.backing = Some(b);
        Ok(b)
    }

    /// Give back `count` lookup references; the node goes at zero.
    pub fn forget(&self, id: NodeId, count: u64) {
        if id == NodeId::ROOT {
            return;
        }
        let Ok(n) = self.node(id) else { return };
        // One atomic step: two concurrent FORGETs must not wrap the count.
        let before = n
            .nlookup
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(count))
            })
            .unwrap_or(0);
        if before > count {
            return;
        }
        // Remove only if no lookup revived it meanwhile: register bumps the
        // count while holding this same map entry.
        let removed = self
            .by_handle
            .remove_if(&(n.dev, n.handle.clone()), |_, v| {
                *v == id.0 && n.nlookup.load(Ordering::Acquire) == 0
            });
        if removed.is_some() {
            self.nodes.remove(&id.0);
            // Only a node with a kept fd is in the fd cache (`cache` puts
            // both, and takes both back if this runs in between); moka's
            // invalidate costs a garbage-collection flush even for a key it
            // does not hold, on every forget.
            let kept = n.lock().path.take();
            if kept.is_some() {
                self.fd_cache.invalidate(&id.0);
            }
        }
    }

    /// What finds `id` again in another process: its device, whether it
    /// is a symlink, and its kernel file handle; when reopening by path,
    /// also its parent's id and its name there.
    pub fn key(&self, id: NodeId) -> Option<Vec<u8>> {
        let n = self.nodes.get(&id.0)?.clone();
        let mut k = Vec::with_capacity(64 + n.handle.bytes().len());
        if self.by_path {
            let place = n.lock().place.clone()?;
            let name = place.name.as_bytes();
            k.extend_from_slice(&PATH_KEY);
            k.extend_from_slice(&place.parent.id().to_le_bytes());
            k.extend_from_slice(&u16::try_from(name.len()).ok()?.to_le_bytes());
            k.extend_from_slice(name);
        }
        k.extend_from_slice(&n.dev.to_le_bytes());
        k.extend_from_slice(&n.handle.handle_type().to_le_bytes());
        k.push(n.symlink as u8);
        k.extend_from_slice(n.handle.bytes());
        (k.len() <= fusebox::recovery::state::MAX_KEY).then_some(k)
    }

    /// Take back a node an earlier server gave the kernel (recovery). Its
    /// file is not opened now: the first request for it does that, and a
    /// file deleted meanwhile answers ESTALE then.
    pub fn restore(&self, id: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        let mut key = Bytes(key);
        let place = if key.0.starts_with(&PATH_KEY) {
            key.take(PATH_KEY.len())?;
            let parent = u64::from_le_bytes(key.array()?);
            let len = u16::from_le_bytes(key.array()?) as usize;
            let name = CString::new(key.take(len)?).map_err(|_| Errno::EINVAL)?;
            let parent = match parent {
                p if p == NodeId::ROOT.0 => Parent::Root,
                p => Parent::Restored(p),
            };
            Some(Place { parent, name })
        } else {
            None
        };
        // A server that reopens by handle cannot use a key made by path,
        // nor the other way round (the two never alternate for one user).
        if place.is_some() != self.by_path {
            return Err(Errno(libc::ESTALE));
        }
        let dev = u64::from_le_bytes(key.array()?);
        let typ = i32::from_le_bytes(key.array()?);
        let symlink = key.array::<1>()?[0] != 0;
        let handle = KernelHandle::from_parts(typ, key.0);
        if !self.by_path && !self.mount_fds.contains_key(&dev) {
            // A filesystem mounted inside the source, found by a lookup
            // the previous server made: not reachable from here.
            return Err(Errno(libc::ESTALE));
        }
        self.next.fetch_max(id.0 + 1, Ordering::AcqRel);
        self.by_handle.insert((dev, handle.clone()), id.0);
        self.nodes.insert(
            id.0,
            Arc::new(Node {
                id: id.0,
                handle,
                dev,
                symlink,
                nlookup: AtomicU64::new(nlookup),
                missed: AtomicBool::new(false),
                pin: Mutex::new(Pin {
                    place,
                    ..Pin::default()
                }),
            }),
        );
        Ok(())
    }

    /// A restored open of `id` reuses the passthrough backing id the kernel
    /// still holds for it.
    pub fn restore_backing(&self, id: NodeId, backing: BackingId) -> FsResult<()> {
        let n = self.node(id)?;
        n.lock().backing.get_or_insert(backing);
        Ok(())
    }

    /// Nodes currently known.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// A key being read, front to back; running short is EINVAL.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> FsResult<&'a [u8]> {
        if self.0.len() < n {
            return Err(Errno::EINVAL);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> FsResult<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
}

/// Whether this process may open files from their handles (open_by_handle_at
/// needs CAP_DAC_READ_SEARCH in the source's user namespace).
pub(crate) fn handles_open(root: &OwnedFd, root_mount: &OwnedFd) -> bool {
    sys::name_to_handle_at(root.as_fd(), c"", libc::AT_EMPTY_PATH)
        .and_then(|h| {
            sys::open_by_handle_at(root_mount.as_fd(), &h, libc::O_PATH | libc::O_CLOEXEC)
        })
        .is_ok()
}

/// Fds the process is expected to hold beyond the cache: open files, the
/// device clones, rings, sockets.
const FD_HEADROOM: u64 = 1024;

/// Grow this process's fd table to hold `fds` descriptors now, while the
/// daemon is still single-threaded. The kernel grows it by doubling as
/// descriptors are opened, and in a multi-threaded process each growth
/// waits for an RCU grace period (milliseconds on a VM): filling an
/// 8,192-fd cache in a fresh daemon cost a dozen such waits inside
/// requests, about 4 us per GETATTR over the first 15,000. Capped by the
/// soft fd limit; failure only means the growth happens later.
fn reserve_fd_table(any: &OwnedFd, fds: u64) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let highest = fds.min(limit.saturating_sub(1));
    if let Ok(highest) = i32::try_from(highest) {
        // The lowest free number at or above `highest`: the table grows to
        // cover it, and stays grown after the close.
        drop(rustix::io::fcntl_dupfd_cloexec(any, highest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd_table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("FDSize in /proc/self/status")
    }

    #[test]
    fn the_fd_table_is_grown_for_the_cache_up_front() {
        let open = || {
            rustix::fs::open("/", rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap()
        };
        let _table = NodeTable::new(open(), open(), 8192, Reopen::ByHandle);
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let want = (8192 + FD_HEADROOM).min(limit.saturating_sub(1));
        assert!(
            fd_table_size() > want,
            "FDSize {} for {want} fds",
            fd_table_size()
        );
    }

    #[test]
    fn out_of_fds_the_cache_gives_some_back() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let open = |p: &std::path::Path, flags| {
            rustix::fs::open(p, flags, rustix::fs::Mode::empty()).unwrap()
        };
        let table = NodeTable::new(
            open(dir.path(), rustix::fs::OFlags::PATH),
            open(dir.path(), rustix::fs::OFlags::RDONLY),
            64,
            Reopen::ByHandle,
        );
        for i in 0..16 {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, b"x").unwrap();
            let fd = open(&p, rustix::fs::OFlags::PATH);
            let st = rustix::fs::fstat(&fd).unwrap();
            let handle = sys::name_to_handle_at(fd.as_fd(), c"", libc::AT_EMPTY_PATH).unwrap();
            let id = table
                .register(handle, &st, None, || unreachable!("device known"))
                .unwrap();
            table.keep_fd(id, Arc::new(fd));
        }
        table.fd_cache.run_pending_tasks();
        assert_eq!(table.fd_cache.entry_count(), 16);
        // An eighth of 16, and those fds are closed, not just forgotten.
        assert_eq!(table.shed(), 2);
        table.fd_cache.run_pending_tasks();
        assert_eq!(table.fd_cache.entry_count(), 14);
    }

    #[test]
    fn the_default_fd_cache_leaves_room_under_the_fd_limit() {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let cache = crate::stackfs::default_fd_cache();
        assert!((256..=262_144).contains(&cache));
        if limit >= 2048 {
            assert!(
                cache + 1024 <= limit,
                "{cache} cached fds under a limit of {limit}"
            );
        }
    }
}
