//! Unchanged Debian programs on the drop-in: each is started with the
//! loader pointed at fusebox's libfuse3.so.3 (`LD_LIBRARY_PATH`), mounts
//! for real, and what applications see through it is compared with the
//! same operations on a native directory. Every mount is removed and
//! every program ended even when a test fails (a guard), and a program
//! that never mounts fails the test after a timeout instead of hanging it.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

#[test]
fn squashfuse_ll_serves_an_image_like_the_tree_it_was_made_from() {
    let Some(_) = which("squashfuse_ll").and(which("mksquashfs")) else {
        return skip("squashfuse_ll or mksquashfs");
    };
    let s = scratch("sqll");
    let src = s.path().join("src");
    make_tree(&src, 7);
    let img = s.path().join("tree.img");
    run(Command::new("mksquashfs").arg(&src).arg(&img).args([
        "-quiet",
        "-noappend",
        "-no-progress",
    ]));
    let mnt = s.path().join("mnt");
    let m = Mounted::start(
        Command::new("squashfuse_ll").arg("-f").arg(&img).arg(&mnt),
        &mnt,
    );
    assert_same_tree(&src, &mnt);
    // tar of both, byte for byte (names, modes, sizes, contents, links).
    assert_eq!(tar_listing(&src), tar_listing(&mnt));
    // fusebox serves it: its statistics answer, and count the reads.
    let snap = fusebox::stats::fetch(&mnt).expect("fusebox stats on a drop-in mount");
    assert!(
        snap.ops.iter().any(|o| o.name == "READ" && o.count > 0),
        "{snap:?}"
    );
    m.unmount();
}

#[test]
fn fuse_overlayfs_matches_the_same_changes_made_natively() {
    let Some(_) = which("fuse-overlayfs") else {
        return skip("fuse-overlayfs");
    };
    let s = scratch("ovl");
    let lower = s.path().join("lower");
    make_tree(&lower, 11);
    // The native side: the lower tree copied, changed the same way.
    let native = s.path().join("native");
    run(Command::new("cp").arg("-a").arg(&lower).arg(&native));
    let (upper, work, mnt) = (
        s.path().join("upper"),
        s.path().join("work"),
        s.path().join("mnt"),
    );
    for d in [&upper, &work] {
        std::fs::create_dir(d).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let m = Mounted::start(
        Command::new("fuse-overlayfs")
            .arg("-f")
            .arg("-o")
            .arg(&opts)
            .arg(&mnt),
        &mnt,
    );
    assert_same_tree(&native, &mnt);
    let extra = s.path().join("extra");
    make_tree(&extra, 3);
    for root in [&native, &mnt] {
        change_tree(root, &extra);
    }
    assert_same_tree(&native, &mnt);
    assert_eq!(tar_listing(&native), tar_listing(&mnt));
    m.unmount();
    // The lower layer is untouched.
    let pristine = s.path().join("pristine");
    make_tree(&pristine, 11);
    assert_same_tree(&pristine, &lower);
}

#[test]
fn pyfuse3_serves_a_filesystem_through_its_own_event_loop() {
    if !python_has("pyfuse3") {
        return skip("python3-pyfuse3");
    }
    let s = scratch("pyfuse3");
    let script = s.path().join("tree.py");
    std::fs::write(&script, PYFUSE3_TREE).unwrap();
    let mnt = s.path().join("mnt");
    let m = Mounted::start(
        Command::new("/usr/bin/python3").arg(&script).arg(&mnt),
        &mnt,
    );
    let mut names: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.txt", "c.txt"]);
    for n in &names {
        let got = std::fs::read(mnt.join(n)).unwrap();
        assert_eq!(got, format!("contents of {n}\n").repeat(1000).into_bytes());
    }
    assert_eq!(
        std::fs::metadata(mnt.join("zzz")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert!(fusebox::stats::fetch(&mnt).is_ok());
    m.unmount();
}

/// A small read-only pyfuse3 filesystem: three files served from memory,
/// answering from trio tasks (replies after the handler has returned).
const PYFUSE3_TREE: &str = r#"
import errno, stat, sys, pyfuse3, trio
NAMES = [b"a.txt", b"b.txt", b"c.txt"]
DATA = {i + 2: (b"contents of " + n + b"\n") * 1000 for i, n in enumerate(NAMES)}
class Tree(pyfuse3.Operations):
    async def getattr(self, inode, ctx=None):
        e = pyfuse3.EntryAttributes()
        if inode == pyfuse3.ROOT_INODE:
            e.st_mode, e.st_size = stat.S_IFDIR | 0o755, 0
        elif inode in DATA:
            e.st_mode, e.st_size = stat.S_IFREG | 0o644, len(DATA[inode])
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        e.st_ino = inode
        return e
    async def lookup(self, parent, name, ctx=None):
        if parent == pyfuse3.ROOT_INODE and name in NAMES:
            await trio.sleep(0.001)
            return await self.getattr(NAMES.index(name) + 2)
        raise pyfuse3.FUSEError(errno.ENOENT)
    async def opendir(self, inode, ctx):
        return inode
    async def readdir(self, fh, off, token):
        for i, n in enumerate(NAMES[off:], start=off):
            if not pyfuse3.readdir_reply(token, n, await self.getattr(i + 2), i + 1):
                break
    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode)
    async def read(self, fh, off, size):
        await trio.sleep(0)
        return DATA[fh][off:off + size]
pyfuse3.init(Tree(), sys.argv[1], set(pyfuse3.default_options))
try:
    trio.run(pyfuse3.main)
finally:
    pyfuse3.close(unmount=True)
"#;

/// The same changes to a tree at `root`: copies, appends, renames,
/// removals (files and a whole directory), a symlink and a hard link.
fn change_tree(root: &Path, extra: &Path) {
    run(Command::new("cp")
        .arg("-r")
        .arg(extra)
        .arg(root.join("copied")));
    std::fs::write(root.join("new.txt"), b"new file\n").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("f1"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"appended\n").unwrap();
    drop(f);
    std::fs::rename(root.join("f2"), root.join("f2.renamed")).unwrap();
    // mv, as a user would: an overlay answers EXDEV for a directory from
    // the lower layer (as the kernel's overlayfs does without
    // redirect_dir), and mv then copies.
    run(Command::new("mv")
        .arg(root.join("d1"))
        .arg(root.join("d1.renamed")));
    std::fs::remove_file(root.join("f3")).unwrap();
    run(Command::new("rm").arg("-r").arg(root.join("d0")));
    std::os::unix::fs::symlink("new.txt", root.join("new.link")).unwrap();
    std::fs::hard_link(root.join("new.txt"), root.join("new.hard")).unwrap();
    std::fs::create_dir(root.join("empty")).unwrap();
}
