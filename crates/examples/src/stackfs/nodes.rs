//! The node table: node id <-> kernel file handle, with lookup counts and a
//! bounded cache of O_PATH fds.
//!
//! A node's cached fd lives in the node itself, so a hit (every GETATTR,
//! SETATTR, LOOKUP in a directory) costs one map lookup and one uncontended
//! lock. The moka cache decides only which nodes may keep one: it holds
//! their ids, and its eviction takes the fd away from the node. A hit does
//! not tell moka (that cost ~0.5 us per request in a profile of stat), so
//! nodes leave in the order they came in, weighed by how often they came.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::mapref::entry::Entry as MapEntry;
use fusebox::protocol::BackingId;
use fusebox::{Errno, FsResult, NodeId};

use super::{FastMap, Hasher};
use crate::sys::{self, KernelHandle};

struct Node {
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
}

impl Pin {
    /// The fd the node can be reached by: an open file, else the cached one.
    fn any_fd(&self) -> Option<Arc<OwnedFd>> {
        self.fd.as_ref().or(self.path.as_ref()).cloned()
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
}

impl NodeTable {
    /// `root_mount` must be a real (not O_PATH) fd: open_by_handle_at
    /// refuses O_PATH fds as its mount argument.
    pub fn new(root: OwnedFd, root_mount: OwnedFd, fd_cache: u64) -> NodeTable {
        reserve_fd_table(&root, fd_cache + FD_HEADROOM);
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
                        n.pin.lock().unwrap_or_else(|p| p.into_inner()).path.take();
                    }
                })
                .build_with_hasher(Hasher::default()),
            handle_opens: AtomicU64::new(0),
            mount_fds,
        }
    }

    /// Find or add the node for `handle` and take one lookup reference.
    /// `open_mount_fd` opens a real fd of it, needed only for a device seen
    /// for the first time (the root of a filesystem mounted in the source).
    pub fn register(
        &self,
        handle: KernelHandle,
        st: &rustix::fs::Stat,
        open_mount_fd: impl FnOnce() -> FsResult<OwnedFd>,
    ) -> FsResult<NodeId> {
        let dev = st.st_dev;
        match self.by_handle.entry((dev, handle.clone())) {
            MapEntry::Occupied(o) => {
                let id = *o.get();
                if let Some(n) = self.nodes.get(&id) {
                    n.nlookup.fetch_add(1, Ordering::AcqRel);
                }
                Ok(NodeId(id))
            }
            MapEntry::Vacant(v) => {
                if !self.mount_fds.contains_key(&dev) {
                    let fd = fusebox::descriptors::keep(open_mount_fd()?);
                    self.mount_fds.insert(dev, Arc::new(fd));
                }
                let id = self.next.fetch_add(1, Ordering::Relaxed);
                let node = Node {
                    handle,
                    dev,
                    symlink: st.st_mode & libc::S_IFMT == libc::S_IFLNK,
                    nlookup: AtomicU64::new(1),
                    missed: AtomicBool::new(false),
                    pin: Mutex::new(Pin::default()),
                };
                self.nodes.insert(id, Arc::new(node));
                v.insert(id);
                Ok(NodeId(id))
            }
        }
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
        if let Some(fd) = n.pin.lock().unwrap_or_else(|p| p.into_inner()).any_fd() {
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
        let fd = n.pin.lock().unwrap_or_else(|p| p.into_inner()).any_fd();
        Ok(fd)
    }

    /// Open `id` from its handle with `flags` (open(2) flags), bypassing
    /// the cache.
    pub fn open_by_handle(&self, id: NodeId, flags: i32) -> FsResult<OwnedFd> {
        self.open_node(&*self.node(id)?, flags)
    }

    fn open_node(&self, n: &Node, flags: i32) -> FsResult<OwnedFd> {
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

    /// The process ran out of fds: close an eighth of the cached ones
    /// (at least one) so the open that failed can be retried. Returns how
    /// many were closed.
    pub fn shed(&self) -> usize {
        let want = (self.fd_cache.entry_count() / 8).max(1) as usize;
        let victims: Vec<Arc<u64>> = self.fd_cache.iter().take(want).map(|(k, _)| k).collect();
        let mut closed = 0;
        for id in victims {
            if let Some(n) = self.nodes.get(&*id) {
                if n.pin
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .path
                    .take()
                    .is_some()
                {
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
            && self.nodes.get(&id.0).is_some_and(|n| {
                n.pin
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .path
                    .is_none()
            })
    }

    fn cache(&self, id: NodeId, n: &Node, fd: Arc<OwnedFd>) {
        n.pin.lock().unwrap_or_else(|p| p.into_inner()).path = Some(fd);
        self.fd_cache.insert(id.0, ());
        // A FORGET between the node lookup and here removed the node from
        // the map but found no fd to take: take it now.
        if !self.nodes.contains_key(&id.0) {
            n.pin.lock().unwrap_or_else(|p| p.into_inner()).path.take();
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
        let mut pin = n.pin.lock().unwrap_or_else(|p| p.into_inner());
        pin.opens += 1;
        pin.fd.get_or_insert(file);
        Ok(())
    }

    /// The node's pinned open file, if it has one.
    pub fn open_file(&self, id: NodeId) -> Option<Arc<OwnedFd>> {
        let n = self.nodes.get(&id.0)?.clone();
        let pin = n.pin.lock().unwrap_or_else(|p| p.into_inner());
        pin.fd.clone()
    }

    /// One open of `id` ended. After the last, the node's pinned file and
    /// passthrough backing id are handed back for the caller to close.
    pub fn unpin(&self, id: NodeId) -> Unpinned {
        let Ok(n) = self.node(id) else {
            return Unpinned::default();
        };
        let mut pin = n.pin.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut pin = n.pin.lock().unwrap_or_else(|p| p.into_inner());
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
            let kept = n.pin.lock().unwrap_or_else(|p| p.into_inner()).path.take();
            if kept.is_some() {
                self.fd_cache.invalidate(&id.0);
            }
        }
    }

    /// What finds `id` again in another process: its device, whether it
    /// is a symlink, and its kernel file handle.
    pub fn key(&self, id: NodeId) -> Option<Vec<u8>> {
        let n = self.nodes.get(&id.0)?.clone();
        let mut k = Vec::with_capacity(13 + n.handle.bytes().len());
        k.extend_from_slice(&n.dev.to_le_bytes());
        k.extend_from_slice(&n.handle.handle_type().to_le_bytes());
        k.push(n.symlink as u8);
        k.extend_from_slice(n.handle.bytes());
        Some(k)
    }

    /// Take back a node an earlier server gave the kernel (recovery). Its
    /// file is not opened now: the first request for it does that, and a
    /// file deleted meanwhile answers ESTALE then.
    pub fn restore(&self, id: NodeId, key: &[u8], nlookup: u64) -> FsResult<()> {
        let bad = || Errno::EINVAL;
        let dev = u64::from_le_bytes(
            key.get(..8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        let typ = i32::from_le_bytes(
            key.get(8..12)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        let symlink = *key.get(12).ok_or_else(bad)? != 0;
        let handle = KernelHandle::from_parts(typ, &key[13..]);
        if !self.mount_fds.contains_key(&dev) {
            // A filesystem mounted inside the source, found by a lookup
            // the previous server made: not reachable from here.
            return Err(Errno(libc::ESTALE));
        }
        self.next.fetch_max(id.0 + 1, Ordering::AcqRel);
        self.by_handle.insert((dev, handle.clone()), id.0);
        self.nodes.insert(
            id.0,
            Arc::new(Node {
                handle,
                dev,
                symlink,
                nlookup: AtomicU64::new(nlookup),
                missed: AtomicBool::new(false),
                pin: Mutex::new(Pin::default()),
            }),
        );
        Ok(())
    }

    /// A restored open of `id` reuses the passthrough backing id the kernel
    /// still holds for it.
    pub fn restore_backing(&self, id: NodeId, backing: BackingId) -> FsResult<()> {
        let n = self.node(id)?;
        n.pin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .backing
            .get_or_insert(backing);
        Ok(())
    }

    /// Nodes currently known.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
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
        let _table = NodeTable::new(open(), open(), 8192);
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
        );
        for i in 0..16 {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, b"x").unwrap();
            let fd = open(&p, rustix::fs::OFlags::PATH);
            let st = rustix::fs::fstat(&fd).unwrap();
            let handle = sys::name_to_handle_at(fd.as_fd(), c"", libc::AT_EMPTY_PATH).unwrap();
            let id = table
                .register(handle, &st, || unreachable!("device known"))
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
