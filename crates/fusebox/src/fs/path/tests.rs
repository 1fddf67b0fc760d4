//! The adapter against an in-memory path filesystem: node ids, lookup
//! counts, renames and listings, without a kernel.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::time::Duration;

use super::*;

const ROOT: NodeId = NodeId::ROOT;

/// Paths to attributes; lists directories in the offset-less style. An
/// open file's handle is its ino, and answers for it by itself.
#[derive(Default)]
struct MemFs {
    files: Mutex<BTreeMap<PathBuf, FileAttr>>,
    open: Mutex<BTreeMap<u64, FileAttr>>,
    negative: Duration,
    /// readdirplus hands out each entry's attributes itself.
    plus_attrs: bool,
    /// The adapter may look entries up inside READDIRPLUS.
    no_plus_lookups: bool,
}

impl MemFs {
    fn insert(&self, path: &Path, mode: u32) -> FsResult<FileAttr> {
        let mut f = self.files.lock().unwrap();
        let attr = FileAttr {
            ino: f.len() as u64 + 100,
            mode,
            nlink: 1,
            ..Default::default()
        };
        f.insert(path.to_owned(), attr);
        Ok(attr)
    }
}

impl PathFilesystem for MemFs {
    fn timeouts(&self) -> Timeouts {
        Timeouts {
            negative: self.negative,
            ..Timeouts::default()
        }
    }

    fn getattr(&self, _: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        if let Some(attr) = fh.and_then(|fh| self.open.lock().unwrap().get(&fh.0).copied()) {
            return Ok(attr);
        }
        self.files
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .ok_or(Errno::ENOENT)
    }

    fn mkdir(&self, _: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        self.insert(path, libc::S_IFDIR | args.mode)
    }

    fn create(&self, _: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
        let attr = self.insert(path, libc::S_IFREG | args.mode)?;
        self.open.lock().unwrap().insert(attr.ino, attr);
        Ok((attr, Opened::handle(attr.ino)))
    }

    fn release(&self, _: &Ctx, _: &Path, args: &Release) -> FsResult<()> {
        self.open.lock().unwrap().remove(&args.fh.0);
        Ok(())
    }

    fn link(&self, _: &Ctx, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        let mut f = self.files.lock().unwrap();
        let attr = *f.get(existing).ok_or(Errno::ENOENT)?;
        f.insert(new.to_owned(), attr);
        Ok(attr)
    }

    fn unlink(&self, _: &Ctx, path: &Path) -> FsResult<()> {
        self.files
            .lock()
            .unwrap()
            .remove(path)
            .map(drop)
            .ok_or(Errno::ENOENT)
    }

    fn rename(&self, _: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        let mut f = self.files.lock().unwrap();
        if !f.contains_key(from) {
            return Err(Errno::ENOENT);
        }
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        for (k, attr) in std::mem::take(&mut *f) {
            let new = match (k.strip_prefix(from), k.strip_prefix(to)) {
                (Ok(rest), _) => to.join(rest),
                (_, Ok(rest)) if exchange => from.join(rest),
                (_, Ok(_)) => continue,
                _ => k,
            };
            f.insert(new, attr);
        }
        Ok(())
    }

    fn readdir(
        &self,
        _: &Ctx,
        path: &Path,
        _: FileHandle,
        _: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        self.list(path, &mut |name, kind, ino, next, _| {
            filler(name, kind, ino, next)
        });
        Ok(())
    }

    fn readdirplus(
        &self,
        _: &Ctx,
        path: &Path,
        _: FileHandle,
        _: u64,
        filler: &mut PlusFiller<'_>,
    ) -> FsResult<()> {
        self.list(path, filler);
        Ok(())
    }

    fn lookups_in_readdirplus(&self) -> bool {
        !self.no_plus_lookups
    }
}

impl MemFs {
    fn list(&self, path: &Path, filler: &mut PlusFiller<'_>) {
        for (k, a) in self
            .files
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.parent() == Some(path))
        {
            let attr = self.plus_attrs.then_some(a);
            if !filler(k.file_name().unwrap(), a.kind().unwrap(), a.ino, 0, attr) {
                break;
            }
        }
    }
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn mkdir(a: &PathAdapter<MemFs>, parent: NodeId, name: &str) -> NodeId {
    a.mkdir(
        &Ctx::internal(),
        parent,
        os(name),
        &Mkdir {
            mode: 0o755,
            umask: 0,
        },
    )
    .unwrap()
    .node
}

fn release_args(fh: FileHandle) -> Release {
    Release {
        fh,
        flags: 0,
        flush: false,
        flock_unlock: false,
        lock_owner: 0,
        forget_follows: false,
    }
}

/// Create and keep open: the node and its handle.
fn open_new(a: &PathAdapter<MemFs>, parent: NodeId, name: &str) -> (NodeId, FileHandle) {
    let args = Create {
        flags: libc::O_RDWR,
        mode: 0o644,
        umask: 0,
        kill_suidgid: false,
    };
    let (e, o) = a.create(&Ctx::internal(), parent, os(name), &args).unwrap();
    (e.node, o.fh)
}

fn mkfile(a: &PathAdapter<MemFs>, parent: NodeId, name: &str) -> NodeId {
    let (node, fh) = open_new(a, parent, name);
    a.release(&Ctx::internal(), node, &release_args(fh))
        .unwrap();
    node
}

fn nlookup(a: &PathAdapter<MemFs>, node: NodeId) -> Option<u64> {
    a.read().nodes.get(&node).map(|n| n.nlookup)
}

fn rename(
    a: &PathAdapter<MemFs>,
    from: (NodeId, &str),
    to: (NodeId, &str),
    flags: u32,
) -> FsResult<()> {
    let args = Rename {
        parent: from.0,
        name: os(from.1),
        new_parent: to.0,
        new_name: os(to.1),
        flags,
    };
    a.rename(&Ctx::internal(), &args)
}

#[test]
fn lookup_gives_stable_ids_and_counts_references() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let f = mkfile(&a, ROOT, "f");
    let e = a.lookup(&ctx, ROOT, os("f")).unwrap();
    assert_eq!(
        (e.node, a.lookup(&ctx, ROOT, os("f")).unwrap().node),
        (f, f)
    );
    assert_eq!(
        e.attr.ino, 100,
        "the filesystem's own ino is passed through"
    );
    assert_eq!(nlookup(&a, f), Some(3));
    assert_eq!(a.node_of(Path::new("/f")), Some(f));
}

#[test]
fn forget_drops_nodes_but_keeps_parents_of_live_children() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let d = mkdir(&a, ROOT, "d");
    let x = mkfile(&a, d, "x");
    a.forget(d, 1);
    assert_eq!(nlookup(&a, d), Some(0), "d must outlive its child");
    assert_eq!(a.path_of(x).unwrap(), Path::new("/d/x"));
    a.forget(x, 1);
    assert_eq!(
        (nlookup(&a, x), nlookup(&a, d), a.read().names.len()),
        (None, None, 0)
    );
    a.forget(ROOT, 5);
    let d2 = a.lookup(&ctx, ROOT, os("d")).unwrap().node;
    assert!(d2 != d && d2 != x, "ids are never reused");
    assert_eq!(a.getattr(&ctx, d, None), Err(Errno::ENOENT));
}

#[test]
fn rename_moves_a_subtree() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let da = mkdir(&a, ROOT, "a");
    let x = mkfile(&a, da, "x");
    let other = mkdir(&a, ROOT, "o");
    rename(&a, (ROOT, "a"), (ROOT, "b"), 0).unwrap();
    assert_eq!(a.path_of(x).unwrap(), Path::new("/b/x"));
    assert!(a.getattr(&ctx, x, None).is_ok());
    assert_eq!(a.lookup(&ctx, ROOT, os("b")).unwrap().node, da);
    assert_eq!(a.lookup(&ctx, ROOT, os("a")).unwrap_err(), Errno::ENOENT);
    rename(&a, (da, "x"), (other, "y"), 0).unwrap();
    assert_eq!(a.path_of(x).unwrap(), Path::new("/o/y"));
    assert_eq!(a.lookup(&ctx, other, os("y")).unwrap().node, x);
}

#[test]
fn rename_exchange_swaps() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let p = mkfile(&a, ROOT, "p");
    let q = mkdir(&a, ROOT, "q");
    let c = mkfile(&a, q, "c");
    let p_ino = a.getattr(&ctx, p, None).unwrap().attr.ino;
    rename(&a, (ROOT, "p"), (ROOT, "q"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(a.path_of(p).unwrap(), Path::new("/q"));
    assert_eq!(a.path_of(c).unwrap(), Path::new("/p/c"));
    assert_eq!(a.getattr(&ctx, p, None).unwrap().attr.ino, p_ino);
    assert_eq!(a.lookup(&ctx, ROOT, os("p")).unwrap().node, q);
}

#[test]
fn rename_over_a_target_detaches_it() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let s = mkfile(&a, ROOT, "s");
    let t = mkfile(&a, ROOT, "t");
    rename(&a, (ROOT, "s"), (ROOT, "t"), 0).unwrap();
    assert_eq!(a.lookup(&ctx, ROOT, os("t")).unwrap().node, s);
    assert_eq!(a.getattr(&ctx, t, None), Err(Errno::ENOENT));
    assert_eq!(
        a.path_of(t).unwrap(),
        Path::new("/t"),
        "known by id until forgotten"
    );
    a.forget(t, 1);
    assert_eq!(a.path_of(t), None);
    assert_eq!(a.path_of(s).unwrap(), Path::new("/t"));
}

#[test]
fn unlink_makes_the_name_unresolvable() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let f = mkfile(&a, ROOT, "f");
    a.unlink(&ctx, ROOT, os("f")).unwrap();
    assert_eq!(a.node_of(Path::new("/f")), None);
    assert_eq!(a.lookup(&ctx, ROOT, os("f")).unwrap_err(), Errno::ENOENT);
    assert_eq!(a.getattr(&ctx, f, None), Err(Errno::ENOENT));
    let rel = release_args(FileHandle(7));
    assert_eq!(
        a.release(&ctx, f, &rel),
        Ok(()),
        "calls with a handle still get through"
    );
    let f2 = mkfile(&a, ROOT, "f");
    assert_ne!(f2, f);
    a.forget(f, 1);
    assert_eq!(a.path_of(f2).unwrap(), Path::new("/f"));
}

#[test]
fn unknown_nodes_and_missing_names() {
    let a = PathAdapter::new(MemFs {
        negative: Duration::from_secs(3),
        ..MemFs::default()
    });
    let (ctx, bogus) = (Ctx::internal(), NodeId(999));
    assert_eq!(a.getattr(&ctx, bogus, None), Err(Errno::ENOENT));
    assert_eq!(a.lookup(&ctx, bogus, os("x")).unwrap_err(), Errno::ENOENT);
    assert_eq!(rename(&a, (bogus, "x"), (ROOT, "y"), 0), Err(Errno::ENOENT));
    a.forget(bogus, 1);
    let e = a.lookup(&ctx, ROOT, os("nope")).unwrap();
    assert_eq!((e.node, e.entry_ttl), (NodeId(0), Duration::from_secs(3)));
}

#[test]
fn offsetless_listings_are_numbered_and_resumed() {
    let a = PathAdapter::new(MemFs::default());
    for name in ["a", "b", "c"] {
        mkfile(&a, ROOT, name);
    }
    let list = |offset: u64| -> Vec<(OsString, u64)> {
        let mut out = DataOut::with_capacity(64);
        out.reset(64); // room for two 32-byte records
        let args = Read {
            fh: FileHandle(0),
            offset,
            size: 64,
            flags: 0,
            lock_owner: None,
        };
        a.readdir(
            &Ctx::internal(),
            ROOT,
            &args,
            &mut DirEntries::new(&mut out, false),
        )
        .unwrap();
        let (buf, mut i, mut entries) = (out.as_slice(), 0, Vec::new());
        while i + 24 <= buf.len() {
            let off = u64::from_le_bytes(buf[i + 8..i + 16].try_into().unwrap());
            let len = u32::from_le_bytes(buf[i + 16..i + 20].try_into().unwrap()) as usize;
            entries.push((
                OsStr::from_bytes(&buf[i + 24..i + 24 + len]).to_owned(),
                off,
            ));
            i += (24 + len + 7) & !7;
        }
        entries
    };
    assert_eq!(
        list(0),
        vec![(OsString::from("a"), 1), (OsString::from("b"), 2)]
    );
    assert_eq!(list(2), vec![(OsString::from("c"), 3)]);
    assert_eq!(list(3), vec![]);
}

fn link(a: &PathAdapter<MemFs>, node: NodeId, parent: NodeId, name: &str) -> NodeId {
    a.link(&Ctx::internal(), node, parent, os(name))
        .unwrap()
        .node
}

#[test]
fn hard_links_share_a_node_and_survive_losing_a_name() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let d = mkdir(&a, ROOT, "d");
    let f = mkfile(&a, ROOT, "f");
    assert_eq!(link(&a, f, d, "g"), f, "one file, one node");
    assert_eq!(a.lookup(&ctx, d, os("g")).unwrap().node, f);
    assert_eq!(nlookup(&a, f), Some(3));
    a.unlink(&ctx, ROOT, os("f")).unwrap();
    assert_eq!(
        a.path_of(f).unwrap(),
        Path::new("/d/g"),
        "the link takes over"
    );
    assert!(a.getattr(&ctx, f, None).is_ok());
    rename(&a, (d, "g"), (ROOT, "h"), 0).unwrap();
    assert_eq!(a.path_of(f).unwrap(), Path::new("/h"));
    a.forget(d, 1);
    assert_eq!(nlookup(&a, d), None, "d holds no name of f any more");
    a.unlink(&ctx, ROOT, os("h")).unwrap();
    assert_eq!(a.getattr(&ctx, f, None), Err(Errno::ENOENT));
    a.forget(f, 3);
    assert_eq!((a.read().nodes.len(), a.read().names.len()), (1, 0));
}

#[test]
fn links_renamed_and_replaced() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let d = mkdir(&a, ROOT, "d");
    let f = mkfile(&a, ROOT, "f");
    link(&a, f, d, "g");
    link(&a, f, ROOT, "h");
    rename(&a, (ROOT, "h"), (d, "g"), 0).unwrap();
    assert_eq!(
        (a.node_of(Path::new("/h")), a.node_of(Path::new("/d/g"))),
        (Some(f), Some(f)),
        "renaming one name of a file onto another changes nothing"
    );
    let o = mkfile(&a, ROOT, "o");
    rename(&a, (ROOT, "o"), (d, "g"), 0).unwrap();
    assert_eq!(a.node_of(Path::new("/d/g")), Some(o));
    assert_eq!(a.path_of(f).unwrap(), Path::new("/f"));
    a.unlink(&ctx, ROOT, os("f")).unwrap();
    assert_eq!(a.path_of(f).unwrap(), Path::new("/h"));
    a.forget(o, 1);
    a.forget(d, 1);
    assert_eq!(nlookup(&a, d), None);
}

#[test]
fn an_unlinked_open_file_answers_getattr_through_its_handle() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let (f, fh) = open_new(&a, ROOT, "f");
    let ino = a.getattr(&ctx, f, None).unwrap().attr.ino;
    a.unlink(&ctx, ROOT, os("f")).unwrap();
    mkfile(&a, ROOT, "f");
    assert_eq!(
        a.getattr(&ctx, f, None).unwrap().attr.ino,
        ino,
        "not the newcomer's"
    );
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    assert_eq!(
        a.setattr(&ctx, f, &chmod),
        Err(Errno::ENOSYS),
        "reached the filesystem"
    );
    a.release(&ctx, f, &release_args(fh)).unwrap();
    assert_eq!(a.getattr(&ctx, f, None), Err(Errno::ENOENT));
}

/// What a supervised session's ledger would hold: every node the kernel
/// has a reference to, with its key and count.
fn ledger_view(a: &PathAdapter<MemFs>) -> Vec<(NodeId, Vec<u8>, u64)> {
    let ids: Vec<(NodeId, u64)> = a
        .read()
        .nodes
        .iter()
        .filter(|(id, n)| **id != ROOT && n.nlookup > 0)
        .map(|(id, n)| (*id, n.nlookup))
        .collect();
    ids.into_iter()
        .map(|(id, n)| (id, a.node_key(id).unwrap(), n))
        .collect()
}

#[test]
fn a_new_adapter_restores_names_links_and_counts_from_node_keys() {
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let d = mkdir(&a, ROOT, "d");
    let e = mkdir(&a, d, "e");
    let f = mkfile(&a, e, "f");
    link(&a, f, ROOT, "g");
    rename(&a, (ROOT, "d"), (ROOT, "d2"), 0).unwrap();
    let gone = mkfile(&a, ROOT, "gone");
    a.unlink(&ctx, ROOT, os("gone")).unwrap();
    // Children before parents, as a ledger may list them.
    let mut keys = ledger_view(&a);
    keys.sort_by_key(|(id, _, _)| std::cmp::Reverse(id.0));
    let b = PathAdapter::new(MemFs::default());
    for (id, key, n) in &keys {
        b.restore_node(*id, key, *n).unwrap();
    }
    for node in [d, e, f] {
        assert_eq!(b.path_of(node), a.path_of(node), "node {node:?}");
        assert_eq!(nlookup(&b, node), nlookup(&a, node));
    }
    assert_eq!(b.node_of(Path::new("/g")), Some(f), "the hard link");
    assert_eq!(b.node_of(Path::new("/d2/e/f")), Some(f));
    assert_eq!(b.read().path(gone, false), Err(Errno::ENOENT), "unlinked");
    assert_eq!(b.read().path(gone, true), Err(Errno::ENOENT), "nowhere");
    // New ids follow the restored ones.
    let h = mkdir(&b, ROOT, "h");
    assert!(keys.iter().all(|(id, _, _)| id.0 < h.0));
    // Restored again (an upgrade's catch-up): the node moves.
    rename(&a, (d, "e"), (ROOT, "e2"), 0).unwrap();
    b.restore_node(e, &a.node_key(e).unwrap(), 1).unwrap();
    assert_eq!(b.path_of(f).unwrap(), Path::new("/e2/f"));
    assert_eq!(b.node_of(Path::new("/d2/e")), None);
    assert!(b.restore_node(NodeId(99), b"garbage", 1).is_err());
}

#[test]
fn the_journal_probe_leaves_the_table_alone_and_a_replayed_change_lands_once() {
    use crate::recovery::AppliedChange;
    let (a, ctx) = (PathAdapter::new(MemFs::default()), Ctx::internal());
    let f = mkfile(&a, ROOT, "a");
    let nodes = a.read().nodes.len();
    assert!(a.probe(&ctx, ROOT, os("a")).is_ok());
    assert_eq!(a.probe(&ctx, ROOT, os("nothing")), Err(Errno::ENOENT));
    assert_eq!((a.read().nodes.len(), nlookup(&a, f)), (nodes, Some(1)));
    // The old server renamed a -> c and died before its table did.
    let args = Rename {
        parent: ROOT,
        name: os("a"),
        new_parent: ROOT,
        new_name: os("c"),
        flags: 0,
    };
    a.applied_before_crash(&AppliedChange::Renamed(&args));
    assert_eq!(a.path_of(f).unwrap(), Path::new("/c"));
    assert_eq!(a.node_of(Path::new("/c")), Some(f));
    // Its table had: nothing moves again (and "c" keeps leading to f).
    a.applied_before_crash(&AppliedChange::Renamed(&args));
    assert_eq!(a.path_of(f).unwrap(), Path::new("/c"));
    assert_eq!(a.node_of(Path::new("/c")), Some(f));
    assert_eq!(a.read().path(f, false).unwrap(), Path::new("/c"));
    a.applied_before_crash(&AppliedChange::Removed {
        parent: ROOT,
        name: os("c"),
    });
    assert_eq!(a.read().path(f, false), Err(Errno::ENOENT));
}

/// A READDIRPLUS answer of `room` bytes at `offset`: (name, node, offset)
/// per record.
fn list_plus(
    a: &PathAdapter<MemFs>,
    dir: NodeId,
    offset: u64,
    room: usize,
) -> Vec<(OsString, u64, u64)> {
    let mut out = DataOut::with_capacity(room);
    out.reset(room);
    let args = Read {
        fh: FileHandle(0),
        offset,
        size: room as u32,
        flags: 0,
        lock_owner: None,
    };
    a.readdirplus(
        &Ctx::internal(),
        dir,
        &args,
        &mut DirEntries::new(&mut out, true),
    )
    .unwrap();
    let entry_len = size_of::<fusebox_abi::EntryOut>();
    let (buf, mut i, mut entries) = (out.as_slice(), 0, Vec::new());
    while i + entry_len + 24 <= buf.len() {
        let node = u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
        let d = i + entry_len;
        let off = u64::from_le_bytes(buf[d + 8..d + 16].try_into().unwrap());
        let len = u32::from_le_bytes(buf[d + 16..d + 20].try_into().unwrap()) as usize;
        entries.push((
            OsStr::from_bytes(&buf[d + 24..d + 24 + len]).to_owned(),
            node,
            off,
        ));
        i = d + ((24 + len + 7) & !7);
    }
    entries
}

/// Files the kernel has not looked up: made behind the adapter's back.
fn unseen_files(fs: &MemFs, names: &[&str]) {
    for n in names {
        fs.insert(&Path::new("/").join(n), libc::S_IFREG | 0o644)
            .unwrap();
    }
}

#[test]
fn readdirplus_looks_entries_up_only_past_the_first_batch_and_only_what_it_answers() {
    let a = PathAdapter::new(MemFs::default());
    unseen_files(a.fs(), &["a", "b", "c", "d"]);
    a.plus_auto.store(true, Ordering::Relaxed);
    let known = a.read().nodes.len();
    // The first batch (the kernel always asks plus there): plain entries.
    let first = list_plus(&a, ROOT, 0, 4096);
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|(_, node, _)| *node == 0), "{first:?}");
    assert_eq!(a.read().nodes.len(), known);
    // Past it: looked up, one reference each, and only as many as fit.
    let two = 2 * DirEntries::record_len(true, os("b"));
    let batch = list_plus(&a, ROOT, 1, two);
    let names: Vec<_> = batch.iter().map(|(n, _, off)| (n.clone(), *off)).collect();
    assert_eq!(
        names,
        vec![(OsString::from("b"), 2), (OsString::from("c"), 3)]
    );
    for (name, node, _) in &batch {
        assert_ne!(*node, 0, "{name:?} has no node");
        assert_eq!(nlookup(&a, NodeId(*node)), Some(1));
        assert_eq!(a.path_of(NodeId(*node)).unwrap(), Path::new("/").join(name));
    }
    assert_eq!(
        a.read().nodes.len(),
        known + 2,
        "d did not fit and must not be held"
    );
    // A later LOOKUP of the same name shares the node.
    let b = NodeId(batch[0].1);
    assert_eq!(a.lookup(&Ctx::internal(), ROOT, os("b")).unwrap().node, b);
    assert_eq!(nlookup(&a, b), Some(2));
    a.forget(b, 2);
    a.forget(NodeId(batch[1].1), 1);
    assert_eq!(a.read().nodes.len(), known);
}

#[test]
fn readdirplus_takes_the_filesystems_attributes_and_honours_its_refusal() {
    // Attributes from the listing itself count even in the first batch.
    let a = PathAdapter::new(MemFs {
        plus_attrs: true,
        ..MemFs::default()
    });
    unseen_files(a.fs(), &["x", "y"]);
    mkdir(&a, ROOT, "sub");
    let listed = list_plus(&a, ROOT, 0, 4096);
    assert_eq!(listed.len(), 3);
    for (name, node, _) in &listed {
        let want = if name == "sub" { 2 } else { 1 };
        assert_eq!(nlookup(&a, NodeId(*node)), Some(want), "{name:?}");
    }
    // A filesystem that refuses lookups inside READDIRPLUS, or a
    // connection without readdirplus_auto: plain entries past the start.
    let refusing = PathAdapter::new(MemFs {
        no_plus_lookups: true,
        ..MemFs::default()
    });
    unseen_files(refusing.fs(), &["p", "q"]);
    refusing.plus_auto.store(true, Ordering::Relaxed);
    assert!(list_plus(&refusing, ROOT, 1, 4096)
        .iter()
        .all(|(_, node, _)| *node == 0));
    let no_auto = PathAdapter::new(MemFs::default());
    unseen_files(no_auto.fs(), &["p", "q"]);
    assert!(list_plus(&no_auto, ROOT, 1, 4096)
        .iter()
        .all(|(_, node, _)| *node == 0));
    // A directory with no name left (removed while open) hangs nothing.
    let gone = PathAdapter::new(MemFs {
        plus_attrs: true,
        ..MemFs::default()
    });
    let sub = mkdir(&gone, ROOT, "sub");
    unseen_files(gone.fs(), &["sub/z"]);
    gone.unlink(&Ctx::internal(), ROOT, os("sub")).unwrap();
    let before = gone.read().nodes.len();
    let _ = list_plus(&gone, sub, 0, 4096);
    assert_eq!(gone.read().nodes.len(), before);
}

#[test]
fn a_listed_entry_of_another_type_never_evicts_the_node_the_kernel_holds() {
    let a = PathAdapter::new(MemFs::default());
    let f = mkfile(&a, ROOT, "f");
    let as_dir = FileAttr {
        ino: 7,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        ..Default::default()
    };
    assert_eq!(a.write().register_listed(ROOT, os("f"), &as_dir), None);
    assert_eq!(a.node_of(Path::new("/f")), Some(f));
    assert_eq!(nlookup(&a, f), Some(1));
    let as_file = FileAttr {
        mode: libc::S_IFREG | 0o644,
        ..as_dir
    };
    assert_eq!(a.write().register_listed(ROOT, os("f"), &as_file), Some(f));
    assert_eq!(nlookup(&a, f), Some(2));
}

#[test]
fn fillers_take_nothing_after_their_first_refusal() {
    let long = OsString::from("a-name-too-long-for-what-is-left");
    let room = DirEntries::record_len(true, os("first")) + DirEntries::record_len(true, os("b"));
    let mut listed = Vec::new();
    {
        let mut plus = plus_filler(&mut listed, room, 0);
        assert!(plus(os("first"), FileType::RegularFile, 1, 0, None));
        assert!(!plus(&long, FileType::RegularFile, 2, 0, None));
        assert!(!plus(os("b"), FileType::RegularFile, 3, 0, None));
    }
    assert_eq!(listed.len(), 1);
    let mut out = DataOut::with_capacity(64);
    out.reset(64);
    let mut entries = DirEntries::new(&mut out, false);
    let mut plain = dir_filler(&mut entries, 0);
    assert!(plain(os("first"), FileType::RegularFile, 1, 0));
    assert!(!plain(&long, FileType::RegularFile, 2, 0));
    assert!(!plain(os("b"), FileType::RegularFile, 3, 0));
}
