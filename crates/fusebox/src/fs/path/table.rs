//! The adapter's node table: which names the kernel knows, by node id.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::error::{Errno, FsResult};
use crate::types::{FileAttr, FileHandle, NodeId};

type Name = (NodeId, OsString);

pub(super) struct Node {
    pub(super) parent: NodeId,
    /// The name under `parent`; for an unlinked node, the last one it had.
    pub(super) name: OsString,
    /// Further names of the same file: hard links made through the mount.
    /// Kept on one node so that the kernel sees one inode, as it would
    /// natively, and its cached size and link count stay right for every
    /// name. (Links made behind the mount's back cannot be told apart from
    /// distinct files by path, so those get nodes of their own.)
    pub(super) aliases: Vec<Name>,
    /// Kernel references (lookups minus forgets).
    pub(super) nlookup: u64,
    /// Names (primary or alias) held in this directory. A node must outlive
    /// them, or their paths could no longer be derived; the kernel forgets
    /// children first anyway, but a stray order must not leave dangling
    /// parents.
    pub(super) kids: u64,
    /// False once unlinked or replaced: no name leads here any more.
    pub(super) linked: bool,
    /// The `S_IFMT` bits seen at lookup.
    pub(super) kind: u32,
    /// Handles of the node's open files, as open and create returned them.
    open: Vec<FileHandle>,
}

impl Node {
    fn unplaced() -> Node {
        Node {
            parent: NOWHERE,
            name: OsString::new(),
            aliases: Vec::new(),
            nlookup: 0,
            kids: 0,
            linked: false,
            kind: libc::S_IFDIR,
            open: Vec::new(),
        }
    }
}

pub(super) struct Table {
    pub(super) nodes: HashMap<NodeId, Node>,
    /// (parent, name) -> node, for linked nodes only.
    pub(super) names: HashMap<Name, NodeId>,
    next: u64,
    /// Under a supervisor: nodes whose primary name changed since the
    /// adapter last looked (their recovery key with it).
    pub(super) moved: Option<Vec<NodeId>>,
}

/// The parent recorded for a node restored without a place: unlinked,
/// or a directory only seen as some restored node's parent. No path goes
/// through it.
const NOWHERE: NodeId = NodeId(0);

impl Table {
    pub(super) fn new() -> Table {
        let root = Node {
            parent: NodeId::ROOT,
            name: OsString::new(),
            aliases: Vec::new(),
            nlookup: 1,
            kids: 0,
            linked: true,
            kind: libc::S_IFDIR,
            open: Vec::new(),
        };
        Table {
            nodes: HashMap::from([(NodeId::ROOT, root)]),
            names: HashMap::new(),
            next: NodeId::ROOT.0 + 1,
            moved: None,
        }
    }

    fn note_moved(&mut self, id: NodeId) {
        if let Some(m) = &mut self.moved {
            m.push(id);
        }
    }

    /// A new server: `id` is known to the kernel with `nlookup`
    /// references, at `place` (parent and name) or, unlinked, nowhere.
    /// Nodes come in any order, and again for one that changed during an
    /// upgrade: a parent not seen yet stands in as a node without a path
    /// until it comes.
    pub(super) fn restore(&mut self, id: NodeId, names: Vec<Name>, kind: u32, nlookup: u64) {
        if id == NodeId::ROOT || id == NOWHERE {
            return;
        }
        self.next = self.next.max(id.0 + 1);
        // Again: forget where it was.
        if let Some(n) = self.nodes.get_mut(&id) {
            let old = std::mem::replace(&mut n.parent, NOWHERE);
            let old_name = std::mem::take(&mut n.name);
            let aliases = std::mem::take(&mut n.aliases);
            n.linked = false;
            for key in std::iter::once((old, old_name)).chain(aliases) {
                if self.names.get(&key) == Some(&id) {
                    self.names.remove(&key);
                }
                if key.0 != NOWHERE {
                    if let Some(p) = self.nodes.get_mut(&key.0) {
                        p.kids = p.kids.saturating_sub(1);
                    }
                }
            }
        }
        let node = self.nodes.entry(id).or_insert_with(Node::unplaced);
        node.nlookup = nlookup;
        node.kind = kind;
        for (i, key) in names.into_iter().enumerate() {
            self.nodes.entry(key.0).or_insert_with(Node::unplaced).kids += 1;
            // A name two restored nodes claim: the later record wins.
            if let Some(other) = self.names.insert(key.clone(), id).filter(|o| *o != id) {
                if let Some(o) = self.nodes.get_mut(&other) {
                    if o.parent == key.0 && o.name == key.1 {
                        o.linked = false;
                    } else {
                        o.aliases.retain(|a| *a != key);
                    }
                }
            }
            let n = self.nodes.get_mut(&id).expect("inserted above");
            if i == 0 {
                n.parent = key.0;
                n.name = key.1;
                n.linked = true;
            } else {
                n.aliases.push(key);
            }
        }
    }

    pub(super) fn node(&self, id: NodeId) -> FsResult<&Node> {
        self.nodes.get(&id).ok_or(Errno::ENOENT)
    }

    pub(super) fn child(&self, parent: NodeId, name: &OsStr) -> Option<NodeId> {
        self.names.get(&(parent, name.to_os_string())).copied()
    }

    /// Derive `id`'s path from the parent chain. Unless `stale_ok`, a node
    /// no longer reachable by name (or below one that is not) is ENOENT.
    pub(super) fn path(&self, id: NodeId, stale_ok: bool) -> FsResult<PathBuf> {
        let mut names = Vec::new();
        let mut cur = id;
        while cur != NodeId::ROOT {
            let n = self.node(cur)?;
            if n.parent == NOWHERE {
                return Err(Errno::ENOENT);
            }
            if !n.linked && !stale_ok {
                return Err(Errno::ENOENT);
            }
            names.push(n.name.as_os_str());
            // Only a filesystem that accepted moving a directory into its
            // own subtree could make a cycle; fail rather than spin.
            if names.len() > self.nodes.len() {
                return Err(Errno::ELOOP);
            }
            cur = n.parent;
        }
        let mut path = PathBuf::with_capacity(1 + names.iter().map(|n| n.len() + 1).sum::<usize>());
        path.push("/");
        for name in names.iter().rev() {
            path.push(name);
        }
        Ok(path)
    }

    /// The path for a call the kernel sent with `fh` (or without). Once no
    /// name leads to the node, a call without a handle gets the last path
    /// and one of the node's open handles, if it has any: fstat(2) or
    /// fchmod(2) on an unlinked open file arrive without one, and must
    /// still reach that file rather than fail.
    pub(super) fn path_with_fh(
        &self,
        id: NodeId,
        fh: Option<FileHandle>,
    ) -> FsResult<(PathBuf, Option<FileHandle>)> {
        if fh.is_some() {
            return Ok((self.path(id, true)?, fh));
        }
        match self.path(id, false) {
            Err(Errno::ENOENT) => match self.nodes.get(&id).and_then(|n| n.open.first()) {
                Some(&open) => Ok((self.path(id, true)?, Some(open))),
                None => Err(Errno::ENOENT),
            },
            r => Ok((r?, None)),
        }
    }

    pub(super) fn opened(&mut self, id: NodeId, fh: FileHandle) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.open.push(fh);
        }
    }

    pub(super) fn released(&mut self, id: NodeId, fh: FileHandle) {
        if let Some(n) = self.nodes.get_mut(&id) {
            if let Some(i) = n.open.iter().position(|h| *h == fh) {
                n.open.swap_remove(i);
            }
        }
    }

    /// One more kernel reference to `parent/name`, creating its node on first sight.
    pub(super) fn register(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        attr: &FileAttr,
    ) -> FsResult<NodeId> {
        let kind = attr.mode & libc::S_IFMT;
        let key = (parent, name.to_os_string());
        if let Some(&id) = self.names.get(&key) {
            match self.nodes.get_mut(&id) {
                Some(n) if n.kind == kind => {
                    n.nlookup += 1;
                    return Ok(id);
                }
                // Another type under the same name means the file was
                // replaced behind our back; the kernel rejects a node whose
                // type changes, so the newcomer needs a node of its own.
                _ => self.detach_name(parent, name),
            }
        }
        let p = self.nodes.get_mut(&parent).ok_or(Errno::ENOENT)?;
        p.kids += 1;
        let id = NodeId(self.next);
        self.next += 1;
        self.nodes.insert(
            id,
            Node {
                parent,
                name: key.1.clone(),
                aliases: Vec::new(),
                nlookup: 1,
                kids: 0,
                linked: true,
                kind,
                open: Vec::new(),
            },
        );
        self.names.insert(key, id);
        Ok(id)
    }

    /// As [`register`](Self::register), for an entry a listing reported
    /// (READDIRPLUS): a name whose node has another type is left alone
    /// (`None`), since the listing's attributes may be older than the
    /// node; a LOOKUP of the name decides that case.
    pub(super) fn register_listed(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        attr: &FileAttr,
    ) -> Option<NodeId> {
        let kind = attr.mode & libc::S_IFMT;
        let known = self.names.get(&(parent, name.to_os_string()));
        if known.is_some_and(|id| self.nodes.get(id).is_some_and(|n| n.kind != kind)) {
            return None;
        }
        self.register(parent, name, attr).ok()
    }

    /// `parent/name` was made a hard link to `id`: one more name, and one
    /// more kernel reference, for the same node.
    pub(super) fn link(
        &mut self,
        id: NodeId,
        parent: NodeId,
        name: &OsStr,
        attr: &FileAttr,
    ) -> FsResult<NodeId> {
        // A mapping left for the new name means its old file vanished
        // behind our back (the link succeeded, so the name was free).
        self.detach_name(parent, name);
        let same = |n: &Node| n.linked && n.kind == attr.mode & libc::S_IFMT;
        if !self.nodes.get(&id).is_some_and(same) || !self.nodes.contains_key(&parent) {
            return self.register(parent, name, attr);
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.kids += 1;
        }
        let key = (parent, name.to_os_string());
        if let Some(n) = self.nodes.get_mut(&id) {
            n.aliases.push(key.clone());
            n.nlookup += 1;
            self.note_moved(id);
        }
        self.names.insert(key, id);
        Ok(id)
    }

    /// `parent/name` no longer exists: the node it led to loses that name;
    /// without names left it lives on until forgotten, reachable only by id.
    pub(super) fn detach_name(&mut self, parent: NodeId, name: &OsStr) {
        let key = (parent, name.to_os_string());
        if let Some(id) = self.names.remove(&key) {
            self.drop_name(id, &key);
        }
    }

    /// Take `key` off `id`'s names (the caller has cleared the mapping).
    fn drop_name(&mut self, id: NodeId, key: &Name) {
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        if n.linked && n.parent == key.0 && n.name == key.1 {
            match n.aliases.pop() {
                // Another name takes over, so paths stay valid.
                Some((parent, name)) => {
                    let old = std::mem::replace(&mut n.parent, parent);
                    n.name = name;
                    self.note_moved(id);
                    self.lose_kid(old);
                }
                None => {
                    n.linked = false;
                    self.note_moved(id);
                    self.collect(id);
                }
            }
        } else if let Some(i) = n.aliases.iter().position(|a| a == key) {
            n.aliases.swap_remove(i);
            self.note_moved(id);
            self.lose_kid(key.0);
        }
    }

    fn lose_kid(&mut self, dir: NodeId) {
        if let Some(d) = self.nodes.get_mut(&dir) {
            d.kids = d.kids.saturating_sub(1);
        }
        self.collect(dir);
    }

    pub(super) fn forget(&mut self, id: NodeId, n: u64) {
        if id == NodeId::ROOT {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&id) {
            node.nlookup = node.nlookup.saturating_sub(n);
            self.collect(id);
        }
    }

    /// Drop `id` if nothing needs it any more, then any directories that
    /// were kept only for its sake.
    fn collect(&mut self, id: NodeId) {
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            if id == NodeId::ROOT {
                continue;
            }
            match self.nodes.get(&id) {
                Some(n) if n.nlookup == 0 && n.kids == 0 => {}
                _ => continue,
            }
            let Some(n) = self.nodes.remove(&id) else {
                continue;
            };
            for key in std::iter::once((n.parent, n.name)).chain(n.aliases) {
                if self.names.get(&key) == Some(&id) {
                    self.names.remove(&key);
                }
                if let Some(p) = self.nodes.get_mut(&key.0) {
                    p.kids = p.kids.saturating_sub(1);
                }
                work.push(key.0);
            }
        }
    }

    /// Mirror a rename the filesystem accepted.
    pub(super) fn rename(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        new_parent: NodeId,
        new_name: &OsStr,
        exchange: bool,
    ) {
        let from = (parent, name.to_os_string());
        let to = (new_parent, new_name.to_os_string());
        let src = self.names.get(&from).copied();
        let dst = self.names.get(&to).copied();
        // Two names of one file: rename(2) leaves both in place.
        if src.is_some() && src == dst {
            return;
        }
        self.names.remove(&from);
        self.names.remove(&to);
        if let Some(s) = src {
            self.move_name(s, &from, &to);
        }
        match dst {
            Some(d) if exchange => self.move_name(d, &to, &from),
            // Replaced: open handles on it go on working, by id only.
            Some(d) => self.drop_name(d, &to),
            None => {}
        }
        // A directory might have lost the last child that kept it alive.
        self.collect(parent);
        self.collect(new_parent);
    }

    /// Rename `id`'s name `old` to `new`; the caller has cleared both
    /// mappings and collects the old directory afterwards.
    fn move_name(&mut self, id: NodeId, old: &Name, new: &Name) {
        if old.0 != new.0 {
            let Some(p) = self.nodes.get_mut(&new.0) else {
                // The kernel holds the target directory during a rename, so
                // this cannot happen; an unreachable node beats a dangling one.
                self.drop_name(id, old);
                return;
            };
            p.kids += 1;
            if let Some(op) = self.nodes.get_mut(&old.0) {
                op.kids = op.kids.saturating_sub(1);
            }
        }
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        if n.linked && n.parent == old.0 && n.name == old.1 {
            n.parent = new.0;
            n.name = new.1.clone();
            self.note_moved(id);
        } else if let Some(a) = n.aliases.iter_mut().find(|a| *a == old) {
            *a = new.clone();
            self.note_moved(id);
        }
        self.names.insert(new.clone(), id);
    }
}

/// A node's recovery key: what a new server needs to put it back in the
/// table. `b'p'`, the kind (4 bytes LE), then its names, the primary one
/// first: each a parent id (8 bytes LE), a length (2 bytes LE) and the
/// bytes. An unlinked node has no names (no path may reach it again).
/// Hard links beyond what fits in `max` bytes are left out: the next
/// server gives such a name a node of its own on lookup, as for a link
/// made behind the mount's back.
pub(super) fn encode_key(n: &Node, max: usize) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut k = Vec::with_capacity(5 + 10 + n.name.len());
    k.push(b'p');
    k.extend_from_slice(&n.kind.to_le_bytes());
    if !n.linked {
        return Some(k);
    }
    for (i, (parent, name)) in std::iter::once((n.parent, &n.name))
        .chain(n.aliases.iter().map(|(p, a)| (*p, a)))
        .enumerate()
    {
        if k.len() + 10 + name.len() > max {
            // Without its primary name the node could not be found.
            return (i > 0).then_some(k);
        }
        k.extend_from_slice(&parent.0.to_le_bytes());
        k.extend_from_slice(&(name.len() as u16).to_le_bytes());
        k.extend_from_slice(name.as_bytes());
    }
    Some(k)
}

/// The names (primary first; none if unlinked) and kind a key records.
pub(super) fn decode_key(mut k: &[u8]) -> FsResult<(Vec<Name>, u32)> {
    use std::os::unix::ffi::OsStrExt;
    if k.len() < 5 || k[0] != b'p' {
        return Err(Errno::EINVAL);
    }
    let kind = u32::from_le_bytes(k[1..5].try_into().expect("4 bytes"));
    k = &k[5..];
    let mut names = Vec::new();
    while !k.is_empty() {
        if k.len() < 10 {
            return Err(Errno::EINVAL);
        }
        let parent = NodeId(u64::from_le_bytes(k[..8].try_into().expect("8 bytes")));
        let len = u16::from_le_bytes(k[8..10].try_into().expect("2 bytes")) as usize;
        let name = k.get(10..10 + len).ok_or(Errno::EINVAL)?;
        if parent == NOWHERE || name.is_empty() {
            return Err(Errno::EINVAL);
        }
        names.push((parent, OsStr::from_bytes(name).to_os_string()));
        k = &k[10 + len..];
    }
    Ok((names, kind))
}
