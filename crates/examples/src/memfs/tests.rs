//! Unit tests calling the trait methods directly. Real-mount tests (against
//! tmpfs, pjdfstest) cover readdir framing and kernel interplay.

use super::*;

fn ctx() -> Ctx<'static> {
    Ctx::internal()
}

fn user(uid: u32, gid: u32) -> Ctx<'static> {
    let mut c = Ctx::internal();
    c.uid = uid;
    c.gid = gid;
    c
}

fn fs() -> MemFs {
    MemFs::with_capacity(Timeouts::default(), 1 << 30)
}

fn n(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn mkfile(fs: &MemFs, parent: NodeId, name: &str) -> NodeId {
    let args = Mknod {
        mode: libc::S_IFREG | 0o666,
        rdev: 0,
        umask: 0o022,
    };
    fs.mknod(&ctx(), parent, n(name), &args).unwrap().node
}

fn mkdir(fs: &MemFs, parent: NodeId, name: &str) -> NodeId {
    fs.mkdir(
        &ctx(),
        parent,
        n(name),
        &Mkdir {
            mode: 0o777,
            umask: 0o022,
        },
    )
    .unwrap()
    .node
}

fn attr(fs: &MemFs, node: NodeId) -> FsResult<FileAttr> {
    fs.getattr(&ctx(), node, None).map(|r| r.attr)
}

fn write_at(
    fs: &MemFs,
    node: NodeId,
    offset: u64,
    data: &[u8],
    kill_suidgid: bool,
) -> FsResult<u32> {
    let w = Write {
        fh: FileHandle(0),
        offset,
        data,
        flags: 0,
        lock_owner: None,
        from_cache: false,
        kill_suidgid,
    };
    fs.write(&ctx(), node, &w)
}

fn read_at(fs: &MemFs, node: NodeId, offset: u64, size: u32) -> Vec<u8> {
    let mut out = DataOut::with_capacity(size as usize);
    out.reset(size as usize);
    let r = Read {
        fh: FileHandle(0),
        offset,
        size,
        flags: 0,
        lock_owner: None,
    };
    fs.read(&ctx(), node, &r, &mut out).unwrap();
    out.as_slice().to_vec()
}

fn rename(fs: &MemFs, p: NodeId, a: &str, np: NodeId, b: &str, flags: u32) -> FsResult<()> {
    fs.rename(
        &ctx(),
        &Rename {
            parent: p,
            name: n(a),
            new_parent: np,
            new_name: n(b),
            flags,
        },
    )
}

fn lookup(fs: &MemFs, parent: NodeId, name: &str) -> FsResult<NodeId> {
    fs.lookup(&ctx(), parent, n(name)).map(|e| e.node)
}

/// (next offset, name) of everything after `offset`, as readdir would list it.
fn list(fs: &MemFs, dir: NodeId, offset: u64) -> Vec<(u64, String)> {
    let st = fs.table();
    let d = st.dir(dir.0).unwrap();
    listing(dir.0, d, offset)
        .map(|l| (l.next, l.name.to_string_lossy().into_owned()))
        .collect()
}

#[test]
fn sparse_write_far_out_reads_zeros_before_the_data() {
    let fs = fs();
    let f = mkfile(&fs, NodeId::ROOT, "big");
    let off = 5u64 << 30;
    assert_eq!(write_at(&fs, f, off, b"hello", false), Ok(5));
    let a = attr(&fs, f).unwrap();
    assert_eq!(a.size, off + 5);
    assert_eq!(a.blocks, 8, "one 4 KiB page, not 5 GiB");
    assert_eq!(a.mode, libc::S_IFREG | 0o644);

    let got = read_at(&fs, f, off - 4096, 8192);
    assert_eq!(got.len(), 4096 + 5, "short read at EOF");
    assert!(got[..4096].iter().all(|&b| b == 0));
    assert_eq!(&got[4096..], b"hello");
    assert!(read_at(&fs, f, off + 5, 10).is_empty());

    let seek = |offset, whence| {
        fs.lseek(
            &ctx(),
            f,
            &Lseek {
                fh: FileHandle(0),
                offset,
                whence,
            },
        )
    };
    assert_eq!(seek(0, libc::SEEK_DATA), Ok(off));
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(0));
    assert_eq!(seek(off, libc::SEEK_HOLE), Ok(off + 5));
    assert_eq!(seek(off + 5, libc::SEEK_DATA), Err(Errno::ENXIO));
}

#[test]
fn hard_links_and_directory_link_counts() {
    let fs = fs();
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 2);
    let sub = mkdir(&fs, NodeId::ROOT, "sub");
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 3);
    assert_eq!(attr(&fs, sub).unwrap().nlink, 2);

    let f = mkfile(&fs, NodeId::ROOT, "a");
    write_at(&fs, f, 0, b"data", false).unwrap();
    let e = fs.link(&ctx(), f, sub, n("b")).unwrap();
    assert_eq!((e.node, e.attr.nlink), (f, 2));
    fs.link(&ctx(), f, NodeId::ROOT, n("c")).unwrap();
    assert_eq!(attr(&fs, f).unwrap().nlink, 3);
    assert_eq!(fs.link(&ctx(), f, sub, n("b")).unwrap_err(), Errno::EEXIST);
    assert_eq!(
        fs.link(&ctx(), sub, NodeId::ROOT, n("d")).unwrap_err(),
        Errno::EPERM
    );

    fs.unlink(&ctx(), NodeId::ROOT, n("a")).unwrap();
    assert_eq!(attr(&fs, f).unwrap().nlink, 2);
    assert_eq!(
        read_at(&fs, lookup(&fs, sub, "b").unwrap(), 0, 100),
        b"data"
    );

    assert_eq!(
        fs.rmdir(&ctx(), NodeId::ROOT, n("sub")).unwrap_err(),
        Errno::ENOTEMPTY
    );
    fs.unlink(&ctx(), sub, n("b")).unwrap();
    fs.rmdir(&ctx(), NodeId::ROOT, n("sub")).unwrap();
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 2);
}

#[test]
fn rename_exchange_and_flags() {
    let fs = fs();
    let file = mkfile(&fs, NodeId::ROOT, "a");
    let sub = mkdir(&fs, NodeId::ROOT, "sub");
    let inner = mkdir(&fs, sub, "b");
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 3);
    assert_eq!(attr(&fs, sub).unwrap().nlink, 3);

    let (noreplace, exchange) = (libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE);
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", sub, "b", noreplace),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", sub, "none", exchange),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", sub, "b", noreplace | exchange),
        Err(Errno::EINVAL)
    );

    rename(&fs, NodeId::ROOT, "a", sub, "b", exchange).unwrap();
    assert_eq!(lookup(&fs, NodeId::ROOT, "a"), Ok(inner));
    assert_eq!(lookup(&fs, sub, "b"), Ok(file));
    // The directory moved up a level: link counts and ".." follow it.
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 4);
    assert_eq!(attr(&fs, sub).unwrap().nlink, 2);
    assert_eq!(lookup(&fs, inner, ".."), Ok(NodeId::ROOT));

    // Plain renames: type mismatches, loops, replacing an empty directory.
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", sub, "b", 0),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        rename(&fs, sub, "b", NodeId::ROOT, "a", 0),
        Err(Errno::EISDIR)
    );
    let deep = mkdir(&fs, inner, "deep");
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", deep, "x", 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        rename(&fs, NodeId::ROOT, "a", inner, "x", 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        rename(&fs, NodeId::ROOT, "sub", NodeId::ROOT, "a", 0),
        Err(Errno::ENOTEMPTY)
    );
    fs.rmdir(&ctx(), inner, n("deep")).unwrap();
    fs.unlink(&ctx(), sub, n("b")).unwrap();
    rename(&fs, NodeId::ROOT, "sub", NodeId::ROOT, "a", 0).unwrap();
    assert_eq!(lookup(&fs, NodeId::ROOT, "a"), Ok(sub));
    assert_eq!(lookup(&fs, NodeId::ROOT, "sub"), Err(Errno::ENOENT));
    assert_eq!(attr(&fs, NodeId::ROOT).unwrap().nlink, 3);
}

#[test]
fn unlinked_inode_lives_until_forget_and_release() {
    let fs = fs();
    let f = mkfile(&fs, NodeId::ROOT, "f"); // lookup count 1
    assert_eq!(lookup(&fs, NodeId::ROOT, "f"), Ok(f)); // 2
    fs.unlink(&ctx(), NodeId::ROOT, n("f")).unwrap();
    assert_eq!(lookup(&fs, NodeId::ROOT, "f"), Err(Errno::ENOENT));
    assert_eq!(attr(&fs, f).unwrap().nlink, 0);
    fs.forget(f, 1);
    assert!(attr(&fs, f).is_ok());
    fs.forget(f, 1);
    assert_eq!(attr(&fs, f).unwrap_err(), Errno::ENOENT);

    // An open handle keeps it too, and its pages go back to the pool at the end.
    let create = Create {
        flags: libc::O_RDWR,
        mode: 0o644,
        umask: 0,
        kill_suidgid: false,
    };
    let (e, opened) = fs.create(&ctx(), NodeId::ROOT, n("g"), &create).unwrap();
    write_at(&fs, e.node, 0, &[1; 10000], false).unwrap();
    assert_eq!(fs.usage.used(), 3);
    fs.unlink(&ctx(), NodeId::ROOT, n("g")).unwrap();
    fs.forget(e.node, 1);
    assert_eq!(read_at(&fs, e.node, 9999, 10), [1]);
    let release = Release {
        fh: opened.fh,
        flags: 0,
        flush: false,
        flock_unlock: false,
        lock_owner: 0,
        forget_follows: false,
    };
    fs.release(&ctx(), e.node, &release).unwrap();
    assert_eq!(attr(&fs, e.node).unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.usage.used(), 0);
    assert_eq!(fs.release(&ctx(), e.node, &release), Err(Errno::EBADF));
}

#[test]
fn readdir_offsets_survive_inserts_and_removals() {
    let fs = fs();
    for name in ["a", "b", "c"] {
        mkfile(&fs, NodeId::ROOT, name);
    }
    let all = list(&fs, NodeId::ROOT, 0);
    let names: Vec<&str> = all.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(names, [".", "..", "a", "b", "c"]);
    assert_eq!((all[0].0, all[1].0), (1, 2));
    // Stop after "a", then change the directory before continuing.
    let after_a = all[2].0;
    mkfile(&fs, NodeId::ROOT, "0");
    fs.unlink(&ctx(), NodeId::ROOT, n("b")).unwrap();
    let rest: Vec<String> = list(&fs, NodeId::ROOT, after_a)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(rest, ["c", "0"], "nothing skipped, nothing repeated");
    assert!(list(&fs, NodeId::ROOT, u64::MAX).is_empty());
}

#[test]
fn ownership_umask_and_setgid_inheritance() {
    let fs = fs();
    let set = SetAttr {
        mode: Some(0o2777),
        gid: Some(100),
        ..SetAttr::default()
    };
    fs.setattr(&ctx(), NodeId::ROOT, &set).unwrap();
    let me = user(1000, 1000);
    let d = fs
        .mkdir(
            &me,
            NodeId::ROOT,
            n("d"),
            &Mkdir {
                mode: 0o6777,
                umask: 0o022,
            },
        )
        .unwrap()
        .attr;
    assert_eq!((d.mode, d.uid, d.gid), (S_IFDIR | 0o2755, 1000, 100));
    let f = fs.mknod(
        &me,
        NodeId::ROOT,
        n("f"),
        &Mknod {
            mode: libc::S_IFREG | 0o666,
            rdev: 0,
            umask: 0o002,
        },
    );
    let f = f.unwrap().attr;
    assert_eq!((f.mode, f.uid, f.gid), (libc::S_IFREG | 0o664, 1000, 100));

    // A write asking to kill setuid/setgid, then chown, then truncate.
    let node = NodeId(f.ino);
    fs.setattr(
        &ctx(),
        node,
        &SetAttr {
            mode: Some(0o6755),
            ..SetAttr::default()
        },
    )
    .unwrap();
    write_at(&fs, node, 0, b"x", true).unwrap();
    assert_eq!(attr(&fs, node).unwrap().mode & 0o7777, 0o755);
    fs.setattr(
        &ctx(),
        node,
        &SetAttr {
            mode: Some(0o6755),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.setattr(
        &ctx(),
        node,
        &SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(attr(&fs, node).unwrap().mode & 0o7777, 0o755);
    fs.setattr(
        &ctx(),
        node,
        &SetAttr {
            mode: Some(0o4644),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let trunc = SetAttr {
        size: Some(0),
        kill_suidgid: true,
        ..SetAttr::default()
    };
    let a = fs.setattr(&ctx(), node, &trunc).unwrap().attr;
    assert_eq!((a.mode & 0o7777, a.size), (0o644, 0));
}

#[test]
fn xattrs_names_and_bad_nodes() {
    let fs = fs();
    let f = mkfile(&fs, NodeId::ROOT, "f");
    let set = |name: &str, value: &[u8], flags| {
        fs.setxattr(
            &ctx(),
            f,
            &Setxattr {
                name: n(name),
                value,
                flags,
                setxattr_flags: 0,
            },
        )
    };
    assert_eq!(
        set("user.a", b"1", libc::XATTR_REPLACE),
        Err(Errno::ENODATA)
    );
    set("user.a", b"1", libc::XATTR_CREATE).unwrap();
    assert_eq!(set("user.a", b"2", libc::XATTR_CREATE), Err(Errno::EEXIST));
    set("user.a", b"2", libc::XATTR_REPLACE).unwrap();
    set("user.b", b"", 0).unwrap();
    assert_eq!(set("bogus", b"", 0), Err(Errno::EOPNOTSUPP));

    let mut out = DataOut::with_capacity(64);
    out.reset(64);
    fs.getxattr(&ctx(), f, n("user.a"), &mut out).unwrap();
    assert_eq!(out.as_slice(), b"2");
    out.reset(64);
    fs.listxattr(&ctx(), f, &mut out).unwrap();
    assert_eq!(out.as_slice(), b"user.a\0user.b\0");
    fs.removexattr(&ctx(), f, n("user.a")).unwrap();
    assert_eq!(fs.removexattr(&ctx(), f, n("user.a")), Err(Errno::ENODATA));
    assert_eq!(
        fs.getxattr(&ctx(), f, n("user.a"), &mut out),
        Err(Errno::ENODATA)
    );

    let long = "x".repeat(256);
    assert_eq!(
        fs.lookup(&ctx(), NodeId::ROOT, n(&long)).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    let args = Mknod {
        mode: libc::S_IFREG | 0o644,
        rdev: 0,
        umask: 0,
    };
    assert_eq!(
        fs.mknod(&ctx(), NodeId::ROOT, n(&long), &args).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(attr(&fs, NodeId(999)).unwrap_err(), Errno::ENOENT);
    assert_eq!(
        write_at(&fs, NodeId(999), 0, b"x", false),
        Err(Errno::ENOENT)
    );
    assert_eq!(fs.lookup(&ctx(), f, n("x")).unwrap_err(), Errno::ENOTDIR);
    fs.forget(NodeId(999), 5);
}

#[test]
fn fallocate_copy_and_symlinks() {
    let fs = fs();
    let a = mkfile(&fs, NodeId::ROOT, "a");
    let b = mkfile(&fs, NodeId::ROOT, "b");
    write_at(&fs, a, 0, &[9; 8192], false).unwrap();
    let falloc = |mode, offset, length| {
        fs.fallocate(
            &ctx(),
            a,
            &Fallocate {
                fh: FileHandle(0),
                offset,
                length,
                mode,
            },
        )
    };
    falloc(0, 0, 20000).unwrap();
    assert_eq!(attr(&fs, a).unwrap().size, 20000);
    falloc(libc::FALLOC_FL_KEEP_SIZE, 0, 40000).unwrap();
    assert_eq!(attr(&fs, a).unwrap().size, 20000);
    assert_eq!(
        falloc(libc::FALLOC_FL_PUNCH_HOLE, 0, 10),
        Err(Errno::EOPNOTSUPP)
    );
    falloc(
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        10,
        10,
    )
    .unwrap();
    assert_eq!(read_at(&fs, a, 8, 4), [9, 9, 0, 0]);

    let cfr = CopyFileRange {
        node_in: a,
        fh_in: FileHandle(0),
        off_in: 8190,
        node_out: b,
        fh_out: FileHandle(0),
        off_out: 100,
        len: 1 << 40,
        flags: 0,
    };
    assert_eq!(fs.copy_file_range(&ctx(), &cfr), Ok(20000 - 8190));
    assert_eq!(attr(&fs, b).unwrap().size, 100 + 20000 - 8190);
    assert_eq!(read_at(&fs, b, 98, 6), [0, 0, 9, 9, 0, 0]);

    let target = n("../somewhere");
    let s = fs.symlink(&ctx(), NodeId::ROOT, n("s"), target).unwrap();
    assert_eq!((s.attr.mode, s.attr.size), (libc::S_IFLNK | 0o777, 12));
    let mut out = DataOut::with_capacity(64);
    out.reset(64);
    fs.readlink(&ctx(), s.node, &mut out).unwrap();
    assert_eq!(out.as_slice(), b"../somewhere");
    assert_eq!(fs.readlink(&ctx(), a, &mut out), Err(Errno::EINVAL));
}
