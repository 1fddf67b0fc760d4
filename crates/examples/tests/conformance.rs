//! One conformance table, run over every example filesystem that holds
//! data: each case runs on a native tmpfs directory and on the mount, and
//! what an application observes (values and errno) must be identical.

mod common;

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use common::{scratch_dir, TestMount};

/// What an application saw, step by step.
#[derive(Default)]
struct Log {
    lines: Vec<String>,
}

fn errno_of(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!("Err({})", rustix::io::Errno::from_raw_os_error(n)),
        None => format!("Err({e})"),
    }
}

impl Log {
    fn r<T: Debug>(&mut self, what: &str, r: std::io::Result<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.lines.push(format!("{what}: Ok({v:?})"));
                Some(v)
            }
            Err(e) => {
                self.lines.push(format!("{what}: {}", errno_of(&e)));
                None
            }
        }
    }
    fn rx<T>(&mut self, what: &str, r: Result<T, rustix::io::Errno>) -> Option<T> {
        match r {
            Ok(v) => {
                self.lines.push(format!("{what}: Ok"));
                Some(v)
            }
            Err(e) => {
                self.lines.push(format!("{what}: Err({e})"));
                None
            }
        }
    }
    fn v<T: Debug>(&mut self, what: &str, v: T) {
        self.lines.push(format!("{what}: {v:?}"));
    }
}

/// Stable parts of a stat: no inode numbers, devices or clock readings.
fn shape(m: &fs::Metadata) -> (u32, u64, u64, u32, u32) {
    (m.mode(), m.size(), m.nlink(), m.uid(), m.gid())
}

fn python(dir: &Path, script: &str) -> std::io::Result<String> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir)
        .output()?;
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        s += &format!(
            " [exit {}: {}]",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(s)
}

mod cases {
    use super::*;
    use rustix::fs::{AtFlags, FallocateFlags, FlockOperation, RenameFlags, XattrFlags, CWD};

    pub fn create_read_write_append_truncate(d: &Path, l: &mut Log) {
        let p = d.join("f");
        l.r("write", fs::write(&p, b"hello world"));
        l.r("read", fs::read(&p));
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        l.r("append", f.write_all(b"!!"));
        drop(f);
        l.r("read after append", fs::read(&p));
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        l.r("truncate 5", f.set_len(5));
        l.r("truncate 100", f.set_len(100));
        l.r("stat", fs::metadata(&p).map(|m| shape(&m)));
        l.r(
            "read truncated",
            fs::read(&p).map(|v| (v.len(), v[..5].to_vec(), v[5..].iter().all(|b| *b == 0))),
        );
        l.r(
            "O_TRUNC",
            OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&p)
                .map(|_| ()),
        );
        l.r("size after O_TRUNC", fs::metadata(&p).map(|m| m.size()));
        l.r(
            "O_EXCL on existing",
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .map(|_| ()),
        );
        l.r("open missing", File::open(d.join("missing")).map(|_| ()));
        let mut f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        l.r("write at 3", f.write_at(b"abc", 3));
        l.r("seek", f.seek(SeekFrom::Start(0)));
        let mut s = String::new();
        l.r("read back", f.read_to_string(&mut s).map(|_| s.clone()));
    }

    pub fn o_direct_io(d: &Path, l: &mut Log) {
        let p = d.join("direct");
        fs::write(&p, vec![7u8; 64 << 10]).unwrap();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p);
        let f = match f {
            Ok(f) => f,
            Err(e) => return l.v("open O_DIRECT", errno_of(&e)),
        };
        // O_DIRECT wants aligned buffers: find a 4 KiB-aligned window.
        let mut raw = vec![0u8; 3 * 4096];
        let off = raw.as_ptr().align_offset(4096);
        let buf = &mut raw[off..off + 4096];
        buf.fill(9);
        l.r("direct write 4K at 8K", f.write_at(buf, 8192));
        buf.fill(0);
        l.r("direct read 4K at 8K", f.read_at(buf, 8192));
        l.v("data", (buf[0], buf[4095]));
        l.r("direct read at EOF", f.read_at(buf, 64 << 10));
        l.r(
            "buffered view",
            fs::read(&p).map(|v| (v[8191], v[8192], v[12287], v[12288])),
        );
    }

    pub fn mmap_io(d: &Path, l: &mut Log) {
        let script = r#"
import mmap, os, sys
p = os.path.join(sys.argv[1], "m")
with open(p, "wb") as f: f.write(b"\0" * 65536)
with open(p, "r+b") as f:
    m = mmap.mmap(f.fileno(), 65536)
    m[100:105] = b"mmapd"; m.flush(); m.close()
with open(p, "rb") as f: d = f.read()
print(d[100:105], len(d))
with open(p, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); print(m[98:107]); m.close()
"#;
        l.r("python mmap", python(d, script));
    }

    pub fn sparse_beyond_4g(d: &Path, l: &mut Log) {
        let p = d.join("sparse");
        let f = File::create(&p).unwrap();
        let off = 5u64 << 30;
        l.r("write at 5 GiB", f.write_at(b"tail", off));
        l.r("size", fs::metadata(&p).map(|m| m.size()));
        let mut b = [1u8; 8];
        l.r(
            "read hole at 4 GiB",
            f.read_at(&mut b, 4 << 30).map(|n| (n, b)),
        );
        let mut b = [0u8; 8];
        l.r("read data", f.read_at(&mut b, off).map(|n| (n, b)));
        l.r("blocks small", fs::metadata(&p).map(|m| m.blocks() < 1024));
        l.r("truncate above 4 GiB", f.set_len((4 << 30) + 17));
        l.r("size after", fs::metadata(&p).map(|m| m.size()));
    }

    pub fn mkdir_rmdir(d: &Path, l: &mut Log) {
        let p = d.join("dir");
        l.r("mkdir", fs::create_dir(&p));
        l.r("mkdir again", fs::create_dir(&p));
        l.r("nlink parent", fs::metadata(d).map(|m| m.nlink()));
        l.r("mkdir nested", fs::create_dir(p.join("sub")));
        l.r("nlink dir", fs::metadata(&p).map(|m| m.nlink()));
        l.r("rmdir non-empty", fs::remove_dir(&p));
        l.r("rmdir sub", fs::remove_dir(p.join("sub")));
        fs::write(p.join("file"), b"x").unwrap();
        l.r("rmdir file", fs::remove_dir(p.join("file")));
        l.r("unlink dir", fs::remove_file(&p));
        l.r("mkdir under file", fs::create_dir(p.join("file/x")));
        l.r("remove file", fs::remove_file(p.join("file")));
        l.r("rmdir", fs::remove_dir(&p));
        l.r("stat gone", fs::metadata(&p).map(|_| ()));
        l.r("nlink parent after", fs::metadata(d).map(|m| m.nlink()));
    }

    pub fn readdir_10000(d: &Path, l: &mut Log) {
        let p = d.join("big");
        fs::create_dir(&p).unwrap();
        for i in 0..10_000 {
            File::create(p.join(format!("entry-{i:05}-{}", "x".repeat(i % 40)))).unwrap();
        }
        let names = |p: &Path| -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        let all = names(&p);
        let mut dedup = all.clone();
        dedup.dedup();
        l.v("count", all.len());
        l.v("no duplicates", dedup.len() == all.len());
        l.v("first/last", (all.first().cloned(), all.last().cloned()));
        // Offsets must survive changes between READDIR calls: delete every
        // other entry while listing, the rest must all be seen once.
        let mut seen = std::collections::BTreeSet::new();
        let mut removed = 0;
        for (i, e) in fs::read_dir(&p).unwrap().enumerate() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(seen.insert(name.clone()), "{name} listed twice");
            if i.is_multiple_of(2) {
                fs::remove_file(p.join(&name)).unwrap();
                removed += 1;
            }
        }
        l.v("listed while deleting", (seen.len(), removed));
        l.v("left", names(&p).len());
    }

    pub fn rename_flags(d: &Path, l: &mut Log) {
        fs::write(d.join("a"), b"A").unwrap();
        fs::write(d.join("b"), b"B").unwrap();
        l.rx(
            "noreplace onto existing",
            rustix::fs::renameat_with(CWD, d.join("a"), CWD, d.join("b"), RenameFlags::NOREPLACE),
        );
        l.rx(
            "noreplace to new",
            rustix::fs::renameat_with(CWD, d.join("a"), CWD, d.join("c"), RenameFlags::NOREPLACE),
        );
        l.rx(
            "exchange",
            rustix::fs::renameat_with(CWD, d.join("b"), CWD, d.join("c"), RenameFlags::EXCHANGE),
        );
        l.r("b", fs::read(d.join("b")));
        l.r("c", fs::read(d.join("c")));
        l.rx(
            "exchange with missing",
            rustix::fs::renameat_with(CWD, d.join("b"), CWD, d.join("zz"), RenameFlags::EXCHANGE),
        );
        l.r(
            "plain rename overwrite",
            fs::rename(d.join("b"), d.join("c")),
        );
        l.r("c after", fs::read(d.join("c")));
        fs::create_dir_all(d.join("d1/d2")).unwrap();
        l.r(
            "dir into own subdir",
            fs::rename(d.join("d1"), d.join("d1/d2/d3")),
        );
        fs::create_dir(d.join("e1")).unwrap();
        fs::write(d.join("e1/f"), b"").unwrap();
        l.r(
            "dir over non-empty dir",
            fs::rename(d.join("d1"), d.join("e1")),
        );
        l.r("file over dir", fs::rename(d.join("c"), d.join("e1")));
        l.r("dir over file", fs::rename(d.join("e1"), d.join("c")));
        l.r("dir rename", fs::rename(d.join("d1"), d.join("d9")));
        l.r(
            "moved child",
            fs::metadata(d.join("d9/d2")).map(|m| m.is_dir()),
        );
    }

    pub fn hard_links(d: &Path, l: &mut Log) {
        let a = d.join("a");
        fs::write(&a, b"linked").unwrap();
        l.r("link", fs::hard_link(&a, d.join("b")));
        l.r("link to existing", fs::hard_link(&a, d.join("b")));
        l.r("nlink a", fs::metadata(&a).map(|m| m.nlink()));
        l.r("nlink b", fs::metadata(d.join("b")).map(|m| m.nlink()));
        l.r(
            "same inode",
            Ok::<_, std::io::Error>(
                fs::metadata(&a).unwrap().ino() == fs::metadata(d.join("b")).unwrap().ino(),
            ),
        );
        fs::write(d.join("b"), b"through b").unwrap();
        l.r("read a", fs::read(&a));
        l.r("unlink a", fs::remove_file(&a));
        l.r(
            "nlink b after",
            fs::metadata(d.join("b")).map(|m| m.nlink()),
        );
        fs::create_dir(d.join("dir")).unwrap();
        l.r("link dir", fs::hard_link(d.join("dir"), d.join("dir2")));
    }

    pub fn symlinks(d: &Path, l: &mut Log) {
        fs::write(d.join("target"), b"T").unwrap();
        l.r("symlink", std::os::unix::fs::symlink("target", d.join("s")));
        l.r("readlink", fs::read_link(d.join("s")));
        l.r("follow", fs::read(d.join("s")));
        l.r(
            "lstat",
            fs::symlink_metadata(d.join("s")).map(|m| (m.file_type().is_symlink(), m.size())),
        );
        l.r(
            "dangling",
            std::os::unix::fs::symlink("nowhere/x", d.join("dangle")),
        );
        l.r("follow dangling", fs::read(d.join("dangle")));
        l.r("readlink dangling", fs::read_link(d.join("dangle")));
        l.r(
            "symlink exists",
            std::os::unix::fs::symlink("x", d.join("s")),
        );
        l.r("readlink non-link", fs::read_link(d.join("target")));
        let long = "y".repeat(1000);
        l.r(
            "long target",
            std::os::unix::fs::symlink(&long, d.join("long")),
        );
        l.r(
            "readlink long",
            fs::read_link(d.join("long")).map(|p| p.as_os_str().len()),
        );
    }

    pub fn xattrs(d: &Path, l: &mut Log) {
        let p = d.join("x");
        fs::write(&p, b"").unwrap();
        let mut buf = [0u8; 64];
        l.rx(
            "set",
            rustix::fs::setxattr(&p, "user.k1", b"v1", XattrFlags::empty()),
        );
        l.rx(
            "set create existing",
            rustix::fs::setxattr(&p, "user.k1", b"v", XattrFlags::CREATE),
        );
        l.rx(
            "set replace missing",
            rustix::fs::setxattr(&p, "user.k2", b"v", XattrFlags::REPLACE),
        );
        l.rx(
            "set k2",
            rustix::fs::setxattr(&p, "user.k2", b"value-two", XattrFlags::CREATE),
        );
        let n = l.rx("get k2", rustix::fs::getxattr(&p, "user.k2", &mut buf[..]));
        l.v("k2", n.map(|n| buf[..n].to_vec()));
        let n = l.rx(
            "get size probe",
            rustix::fs::getxattr(&p, "user.k2", &mut [0u8; 0][..]),
        );
        l.v("probed size", n);
        l.rx(
            "get too small",
            rustix::fs::getxattr(&p, "user.k2", &mut buf[..3]),
        );
        l.rx(
            "get missing",
            rustix::fs::getxattr(&p, "user.none", &mut buf[..]),
        );
        let n = rustix::fs::listxattr(&p, &mut buf[..]).unwrap_or(0);
        let mut names: Vec<&[u8]> = buf[..n]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .collect();
        names.sort();
        l.v(
            "list",
            names
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>(),
        );
        l.rx("remove", rustix::fs::removexattr(&p, "user.k1"));
        l.rx("remove again", rustix::fs::removexattr(&p, "user.k1"));
        fs::create_dir(d.join("xd")).unwrap();
        l.rx(
            "set on dir",
            rustix::fs::setxattr(d.join("xd"), "user.d", b"1", XattrFlags::empty()),
        );
        l.rx(
            "big value",
            rustix::fs::setxattr(&p, "user.big", &vec![5u8; 4000], XattrFlags::empty()),
        );
        let mut big = vec![0u8; 8192];
        let n = l.rx(
            "get big",
            rustix::fs::getxattr(&p, "user.big", &mut big[..]),
        );
        l.v("big size", n);
    }

    pub fn chmod_chown_utimensat(d: &Path, l: &mut Log) {
        let p = d.join("perm");
        fs::write(&p, b"x").unwrap();
        l.r(
            "chmod 4755",
            fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)),
        );
        l.r("mode", fs::metadata(&p).map(|m| m.mode()));
        l.rx(
            "chown 1000:1000",
            rustix::fs::chownat(
                CWD,
                &p,
                Some(rustix::fs::Uid::from_raw(1000)),
                Some(rustix::fs::Gid::from_raw(1000)),
                AtFlags::empty(),
            ),
        );
        l.r(
            "owner",
            fs::metadata(&p).map(|m| (m.uid(), m.gid(), m.mode())),
        );
        let ts = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 1_000_000_000,
                tv_nsec: 123,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: 1_500_000_000,
                tv_nsec: 456_789,
            },
        };
        l.rx(
            "utimensat",
            rustix::fs::utimensat(CWD, &p, &ts, AtFlags::empty()),
        );
        l.r(
            "times",
            fs::metadata(&p).map(|m| (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())),
        );
        l.r(
            "chmod missing",
            fs::set_permissions(d.join("nope"), fs::Permissions::from_mode(0o600)),
        );
        std::os::unix::fs::symlink("perm", d.join("ln")).unwrap();
        l.rx(
            "lchown",
            rustix::fs::chownat(
                CWD,
                d.join("ln"),
                Some(rustix::fs::Uid::from_raw(7)),
                None,
                AtFlags::SYMLINK_NOFOLLOW,
            ),
        );
        l.r(
            "link owner",
            fs::symlink_metadata(d.join("ln")).map(|m| m.uid()),
        );
        l.r("target owner", fs::metadata(&p).map(|m| m.uid()));
    }

    pub fn statfs(d: &Path, l: &mut Log) {
        let s = rustix::fs::statvfs(d);
        l.v("statvfs ok", s.is_ok());
        l.v("namemax", s.map(|s| s.f_namemax).ok());
    }

    pub fn fsync_fdatasync(d: &Path, l: &mut Log) {
        let mut f = File::create(d.join("sync")).unwrap();
        f.write_all(b"data").unwrap();
        l.r("fsync", f.sync_all());
        l.r("fdatasync", f.sync_data());
        let dir = File::open(d).unwrap();
        l.r("fsync dir", dir.sync_all());
    }

    pub fn fallocate(d: &Path, l: &mut Log) {
        let p = d.join("falloc");
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        l.rx(
            "allocate 1 MiB",
            rustix::fs::fallocate(&f, FallocateFlags::empty(), 0, 1 << 20),
        );
        l.r("size", fs::metadata(&p).map(|m| m.size()));
        l.rx(
            "keep size",
            rustix::fs::fallocate(&f, FallocateFlags::KEEP_SIZE, 1 << 20, 1 << 20),
        );
        l.r("size kept", fs::metadata(&p).map(|m| m.size()));
        f.write_at(&vec![3u8; 256 << 10], 0).unwrap();
        l.rx(
            "punch hole",
            rustix::fs::fallocate(
                &f,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                64 << 10,
                64 << 10,
            ),
        );
        let mut b = vec![0u8; 192 << 10];
        l.r(
            "read around hole",
            f.read_at(&mut b, 0).map(|n| {
                (
                    n,
                    b[(64 << 10) - 1],
                    b[64 << 10],
                    b[(128 << 10) - 1],
                    b[128 << 10],
                )
            }),
        );
    }

    pub fn lseek_data_hole(d: &Path, l: &mut Log) {
        // 64 KiB-aligned extents: memfs tracks data in 64 KiB chunks, tmpfs
        // in pages; aligned to both, the answers must agree.
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(d.join("holes"))
            .unwrap();
        f.write_at(&vec![1u8; 64 << 10], 0).unwrap();
        f.write_at(&vec![2u8; 64 << 10], 1 << 20).unwrap();
        for (what, whence, off) in [
            ("data from 0", libc::SEEK_DATA, 0u64),
            ("hole from 0", libc::SEEK_HOLE, 0),
            ("data from 128K", libc::SEEK_DATA, 128 << 10),
            ("hole from 1M", libc::SEEK_HOLE, 1 << 20),
            ("data past EOF", libc::SEEK_DATA, 4 << 20),
        ] {
            let from = if whence == libc::SEEK_DATA {
                rustix::fs::SeekFrom::Data(off)
            } else {
                rustix::fs::SeekFrom::Hole(off)
            };
            match rustix::fs::seek(&f, from) {
                Ok(v) => l.v(what, v),
                Err(e) => l.v(what, format!("Err({e})")),
            }
        }
        l.r("seek end", f.seek(SeekFrom::End(0)));
    }

    pub fn copy_file_range(d: &Path, l: &mut Log) {
        fs::write(
            d.join("src"),
            (0..100_000u32).map(|i| i as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        let a = File::open(d.join("src")).unwrap();
        let b = File::create(d.join("dst")).unwrap();
        let (mut oi, mut oo) = (1000u64, 10u64);
        let r = rustix::fs::copy_file_range(&a, Some(&mut oi), &b, Some(&mut oo), 50_000);
        l.v("copied", r.map_err(|e| e.to_string()));
        l.v("offsets", (oi, oo));
        l.r(
            "dst",
            fs::read(d.join("dst")).map(|v| (v.len(), v[10], v[50_009])),
        );
    }

    pub fn unlink_open_file(d: &Path, l: &mut Log) {
        let p = d.join("ghost");
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        l.r("unlink", fs::remove_file(&p));
        l.r("stat path", fs::metadata(&p).map(|_| ()));
        l.r("write after unlink", f.write_all(b"still here"));
        l.r("fstat", f.metadata().map(|m| (m.nlink(), m.size())));
        let mut s = String::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        l.r(
            "read after unlink",
            f.read_to_string(&mut s).map(|_| s.clone()),
        );
        l.r("recreate same name", fs::write(&p, b"new"));
        l.r("new content", fs::read(&p));
        l.r("old fd content", f.read_at(&mut [0u8; 5], 0));
    }

    pub fn locks(d: &Path, l: &mut Log) {
        let p = d.join("lock");
        fs::write(&p, b"").unwrap();
        let a = File::open(&p).unwrap();
        let b = File::open(&p).unwrap();
        l.rx(
            "flock a",
            rustix::fs::flock(&a, FlockOperation::NonBlockingLockExclusive),
        );
        l.rx(
            "flock b conflicts",
            rustix::fs::flock(&b, FlockOperation::NonBlockingLockExclusive),
        );
        l.rx("unlock a", rustix::fs::flock(&a, FlockOperation::Unlock));
        l.rx(
            "flock b",
            rustix::fs::flock(&b, FlockOperation::NonBlockingLockShared),
        );
        let script = r#"
import fcntl, os, sys
p = os.path.join(sys.argv[1], "lock")
f = open(p, "r+")
fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
pid = os.fork()
if pid == 0:
    g = open(p, "r+")
    try:
        fcntl.lockf(g, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0); print("child got overlapping lock")
    except OSError as e: print("child blocked", e.errno)
    try:
        fcntl.lockf(g, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 100); print("child got disjoint lock")
    except OSError as e: print("child blocked disjoint", e.errno)
    os._exit(0)
os.waitpid(pid, 0)
"#;
        l.r("fcntl byte-range locks", python(d, script));
    }

    pub fn concurrent_writers(d: &Path, l: &mut Log) {
        let p = d.join("shared");
        File::create(&p).unwrap().set_len(8 << 20).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let p = p.clone();
                s.spawn(move || {
                    let f = OpenOptions::new().write(true).open(&p).unwrap();
                    for i in 0..64u64 {
                        let off = ((i * 4 + t as u64) * 32) << 10;
                        f.write_all_at(&vec![t + 1; 32 << 10], off).unwrap();
                    }
                });
            }
        });
        let v = fs::read(&p).unwrap();
        let ok = v
            .chunks(32 << 10)
            .enumerate()
            .all(|(i, c)| c.iter().all(|b| *b == (i % 4) as u8 + 1));
        l.v("every region holds its writer's bytes", ok);
        let a = d.join("appended");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let a = a.clone();
                s.spawn(move || {
                    let mut f = OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&a)
                        .unwrap();
                    for _ in 0..100 {
                        f.write_all(&[b'a' + t; 100]).unwrap();
                    }
                });
            }
        });
        let v = fs::read(&a).unwrap();
        let whole = v.chunks(100).all(|c| c.iter().all(|b| *b == c[0]));
        l.v("appends", (v.len(), whole));
    }

    /// Come back to many nodes after making them: a filesystem that keeps
    /// only some of them open must reopen the others correctly (open for
    /// read and write, truncate and chmod by path, list and create inside
    /// a directory).
    pub fn revisit_many_nodes(d: &Path, l: &mut Log) {
        for i in 0..40 {
            let sub = d.join(format!("d{i}"));
            fs::create_dir(&sub).unwrap();
            for j in 0..5 {
                fs::write(sub.join(format!("f{j}")), format!("{i}/{j} contents")).unwrap();
            }
        }
        for i in 0..40 {
            let sub = d.join(format!("d{i}"));
            let f = sub.join("f0");
            l.r("read", fs::read_to_string(&f));
            l.r(
                "append",
                OpenOptions::new()
                    .append(true)
                    .open(&f)
                    .and_then(|mut h| h.write_all(b"+")),
            );
            l.r(
                "chmod",
                fs::set_permissions(sub.join("f1"), fs::Permissions::from_mode(0o600)),
            );
            let mut names: Vec<_> = fs::read_dir(&sub)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            l.v("listed", names);
            l.r("create inside", fs::write(sub.join("new"), b"n"));
        }
        l.v(
            "truncate by path",
            python(d, "import os,sys\nfor i in range(40): os.truncate(os.path.join(sys.argv[1], f'd{i}', 'f2'), 2)\nprint('ok')"),
        );
        for i in 0..40 {
            let sub = d.join(format!("d{i}"));
            for name in ["f0", "f1", "f2", "new"] {
                l.r(name, fs::metadata(sub.join(name)).map(|m| shape(&m)));
            }
            l.r("read f0", fs::read_to_string(sub.join("f0")));
            l.r("read f2", fs::read_to_string(sub.join("f2")));
        }
    }

    /// Files and directories renamed (and exchanged) through the mount,
    /// then visited after enough other nodes to push them out of a small
    /// fd cache: a node reopened by path must be found where it went.
    pub fn moves_then_revisits(d: &Path, l: &mut Log) {
        let dir = |i: usize| {
            d.join(format!(
                "{}{i}",
                if i.is_multiple_of(2) { "n" } else { "m" }
            ))
        };
        let file = |i: usize| dir(i).join(if i.is_multiple_of(2) { "f" } else { "f2" });
        for i in 0..20 {
            let m = d.join(format!("m{i}"));
            fs::create_dir_all(m.join("sub")).unwrap();
            fs::write(m.join("f"), format!("file {i}")).unwrap();
            fs::write(m.join("sub/g"), format!("deeper {i}")).unwrap();
        }
        // Held open across the moves: requests made through these name
        // the directory by node, with no lookup to say where it went.
        let held: Vec<File> = (0..20)
            .map(|i| File::open(d.join(format!("m{i}"))).unwrap())
            .collect();
        for i in 0..20usize {
            if i.is_multiple_of(2) {
                l.r("rename dir", fs::rename(d.join(format!("m{i}")), dir(i)));
            } else {
                l.r("rename file", fs::rename(dir(i).join("f"), file(i)));
            }
        }
        l.rx(
            "exchange",
            rustix::fs::renameat_with(CWD, file(0), CWD, file(1), RenameFlags::EXCHANGE),
        );
        // Each other node asked for more often than the moved ones, so
        // that a small cache's frequency-based admission keeps them.
        for j in 0..40 {
            let x = d.join(format!("x{j}"));
            fs::write(&x, b"x").unwrap();
            for mode in [0o600, 0o640, 0o644, 0o600, 0o640, 0o644, 0o600, 0o644] {
                l.r(
                    "chmod other",
                    fs::set_permissions(&x, fs::Permissions::from_mode(mode)),
                );
            }
        }
        // First through the held directories, before any lookup by the
        // new names could tell stackfs where they went.
        for h in &held {
            let made = rustix::fs::openat(
                h,
                "made-by-fd",
                rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY,
                rustix::fs::Mode::from_raw_mode(0o644),
            );
            l.rx("create in held dir", made.map(|_| ()));
            l.rx(
                "mkdir in held dir",
                rustix::fs::mkdirat(h, "dir-by-fd", rustix::fs::Mode::from_raw_mode(0o755)),
            );
        }
        for i in 0..20 {
            l.r(
                "seen by name",
                fs::metadata(dir(i).join("made-by-fd")).map(|m| m.len()),
            );
            l.r("read moved", fs::read_to_string(file(i)));
            let g = dir(i).join("sub/g");
            l.r(
                "chmod below moved",
                fs::set_permissions(&g, fs::Permissions::from_mode(0o640)),
            );
            l.r(
                "append below moved",
                OpenOptions::new()
                    .append(true)
                    .open(&g)
                    .and_then(|mut h| h.write_all(b"+")),
            );
            l.r("read below moved", fs::read_to_string(&g));
            l.r("stat below moved", fs::metadata(&g).map(|m| shape(&m)));
        }
    }

    pub fn fifty_thousand_files(d: &Path, l: &mut Log) {
        let p = d.join("many");
        fs::create_dir(&p).unwrap();
        for i in 0..50_000 {
            File::create(p.join(i.to_string())).unwrap();
        }
        l.v("listed", fs::read_dir(&p).unwrap().count());
        l.r("stat one", fs::metadata(p.join("49999")).map(|m| m.size()));
        for i in 0..50_000 {
            fs::remove_file(p.join(i.to_string())).unwrap();
        }
        l.r("rmdir", fs::remove_dir(&p));
    }

    pub fn errno_table(d: &Path, l: &mut Log) {
        fs::write(d.join("file"), b"").unwrap();
        l.r(
            "open dir for write",
            OpenOptions::new().write(true).open(d).map(|_| ()),
        );
        l.r("readdir of file", fs::read_dir(d.join("file")).map(|_| ()));
        l.r(
            "name too long",
            File::create(d.join("n".repeat(256))).map(|_| ()),
        );
        l.r(
            "name 255",
            File::create(d.join("n".repeat(255))).map(|_| ()),
        );
        l.r("file as dir", File::open(d.join("file/x")).map(|_| ()));
        l.r(
            "mknod fifo",
            rustix::fs::mknodat(
                CWD,
                d.join("fifo"),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .map_err(std::io::Error::from),
        );
        l.r(
            "fifo type",
            fs::symlink_metadata(d.join("fifo")).map(|m| m.mode()),
        );
    }
}

fn run_case(mount: TestMount, case: fn(&Path, &mut Log)) {
    let native = scratch_dir("native");
    let mut want = Log::default();
    case(native.path(), &mut want);
    let mut got = Log::default();
    case(&mount.mnt, &mut got);
    let diff: Vec<String> = want
        .lines
        .iter()
        .zip(
            got.lines
                .iter()
                .chain(std::iter::repeat(&String::from("<missing>"))),
        )
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  native: {a}\n  mount:  {b}"))
        .collect();
    assert!(
        diff.is_empty() && want.lines.len() == got.lines.len(),
        "mount differs from native:\n{}",
        diff.join("\n")
    );
}

macro_rules! table {
    ($($case:ident),* $(,)?) => {
        mod stackfs {
            $(#[test] fn $case() { super::run_case(super::TestMount::stackfs(), super::cases::$case) })*
        }
        mod memfs {
            $(#[test] fn $case() { super::run_case(super::TestMount::memfs(), super::cases::$case) })*
        }
        mod pathfs {
            $(#[test] fn $case() { super::run_case(super::TestMount::pathfs(), super::cases::$case) })*
        }
        /// stackfs with the smallest node fd cache: the paths that reopen
        /// evicted nodes by handle.
        mod stackfs_small_fd_cache {
            $(#[test] fn $case() { super::run_case(super::TestMount::stackfs_small_fd_cache(), super::cases::$case) })*
        }
        /// stackfs as an ordinary user's daemon runs it: evicted nodes
        /// reopened by parent and name (and a 16-fd cache, so they are).
        mod stackfs_by_path {
            $(#[test] fn $case() { super::run_case(super::TestMount::stackfs_by_path(), super::cases::$case) })*
        }
        /// stackfs with FUSE passthrough, over both transports.
        mod passthrough {
            use super::common::{passthrough_options, uring_or_skip, TestMount};
            use fusebox::transport::TransportKind::{Classic, Uring};
            mod classic {
                use super::*;
                $(#[test] fn $case() {
                    super::super::run_case(TestMount::stackfs_with(Classic, &passthrough_options()), super::super::cases::$case)
                })*
            }
            mod uring {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::stackfs_with(Uring, &passthrough_options()), super::super::cases::$case)
                    }
                })*
            }
        }
        /// Through the async API (every request a tokio task answered with
        /// its reply token): memfs over classic, stackfs over io_uring, and
        /// pathfs through the path-level async API over classic.
        mod async_api {
            use super::common::{uring_or_skip, TestMount};
            use fusebox::transport::TransportKind::{Classic, Uring};
            mod memfs_classic {
                use super::*;
                $(#[test] fn $case() {
                    super::super::run_case(TestMount::memfs_async_on(Classic), super::super::cases::$case)
                })*
            }
            mod stackfs_uring {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::stackfs_async_on(Uring), super::super::cases::$case)
                    }
                })*
            }
            /// The path-level async API (`AsyncPathFilesystem`).
            mod pathfs_classic {
                use super::*;
                $(#[test] fn $case() {
                    super::super::run_case(TestMount::pathfs_async_on(Classic), super::super::cases::$case)
                })*
            }
        }
        /// The same table over FUSE-over-io_uring.
        mod uring {
            use super::common::{uring_or_skip, TestMount};
            use fusebox::transport::TransportKind::Uring;
            mod stackfs {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::stackfs_on(Uring), super::super::cases::$case)
                    }
                })*
            }
            mod memfs {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::memfs_on(Uring), super::super::cases::$case)
                    }
                })*
            }
            mod pathfs {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::pathfs_on(Uring), super::super::cases::$case)
                    }
                })*
            }
            /// Two rings per queue (`--queue-threads 2 --queue-depth 1`).
            mod stackfs_two_threads_per_queue {
                use super::*;
                $(#[test] fn $case() {
                    if uring_or_skip() {
                        super::super::run_case(TestMount::stackfs_two_threads_per_queue(), super::super::cases::$case)
                    }
                })*
            }
        }
    };
}

/// stackfs with a day of caching and the writeback cache (what
/// passthrough_hp runs by default), over io_uring (classic when the kernel
/// lacks it: the point here is the cache, not the transport). The whole
/// table but `lseek_data_hole`: see `cached_lseek_sees_unwritten_data`.
macro_rules! cached_table {
    ($($case:ident),* $(,)?) => {
        mod cached {
            use super::common::TestMount;
            use fusebox::transport::TransportKind::{Classic, Uring};
            pub fn transport() -> fusebox::transport::TransportKind {
                if fusebox::transport::uring::availability().is_ok() { Uring } else { Classic }
            }
            $(#[test] fn $case() {
                super::run_case(TestMount::stackfs_cached(transport()), super::cases::$case)
            })*
        }
    };
}

/// Every case runs on every column; the cached column skips the cases whose
/// answers a kernel-side cache legitimately changes.
macro_rules! conformance {
    (everywhere: [$($case:ident),* $(,)?], uncached: [$($u:ident),* $(,)?] $(,)?) => {
        table!($($case,)* $($u,)*);
        cached_table!($($case),*);
    };
}

conformance!(
    everywhere: [
        create_read_write_append_truncate,
        o_direct_io,
        mmap_io,
        sparse_beyond_4g,
        mkdir_rmdir,
        readdir_10000,
        rename_flags,
        hard_links,
        symlinks,
        xattrs,
        chmod_chown_utimensat,
        statfs,
        fsync_fdatasync,
        fallocate,
        copy_file_range,
        unlink_open_file,
        locks,
        concurrent_writers,
        fifty_thousand_files,
        errno_table,
        revisit_many_nodes,
        moves_then_revisits,
    ],
    uncached: [lseek_data_hole],
);

/// The small-cache column really takes the reopen-by-handle paths (with a
/// larger cache it would quietly test the default). Nodes not cached yet
/// are opened by handle with any cache size, so the measure is against the
/// default cache on the same case (437 against 240 when written).
#[test]
fn small_fd_cache_reopens_nodes_by_handle() {
    let opens = |m: TestMount| {
        cases::revisit_many_nodes(&m.mnt, &mut Log::default());
        m.filesystem::<fusebox_examples::StackFs>().handle_opens()
    };
    let small = opens(TestMount::stackfs_small_fd_cache());
    let default = opens(TestMount::stackfs());
    assert!(small >= 40, "only {small} opens by handle");
    assert!(
        small >= default + 40,
        "a 16-fd cache reopened {small} times, the default one {default}: no evictions?"
    );
}

/// The stackfs, memfs and pathfs columns (each over both transports) as
/// an ordinary user: this binary again, run as nobody, mounting through
/// fusermount3 (without allow_other) and comparing with native directories
/// it owns. stackfs then reopens nodes by path, as it must without
/// CAP_DAC_READ_SEARCH.
#[test]
fn conformance_as_an_ordinary_user() {
    if !rustix::process::geteuid().is_root() {
        fusebox_test_support::skipped(None, "needs root to switch users");
        return;
    }
    let _dev = fusebox_test_support::FuseDeviceOpen::new();
    // A copy nobody can run: the build directory may not be reachable.
    let dir = scratch_dir("as-user");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("conformance");
    fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let out = common::as_nobody(&exe)
        .args(["--test-threads=2", "stackfs::", "memfs::", "pathfs::"])
        .args(["--skip", "async_api", "--skip", "cached"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = stdout
        .lines()
        .filter(|l| l.starts_with("test ") && l.ends_with(" ok"))
        .count();
    assert!(
        out.status.success(),
        "as nobody: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Each filesystem over each transport, every case: not a filter that
    // quietly matched nothing.
    assert!(
        passed >= 120,
        "only {passed} cases ran as nobody:\n{stdout}"
    );
}

/// The by-path column really reopens by path, and does so for evicted
/// nodes (not only for the first visit of each).
#[test]
fn by_path_column_reopens_evicted_nodes_by_path() {
    let m = TestMount::stackfs_by_path();
    let fs = m.filesystem::<fusebox_examples::StackFs>();
    assert!(fs.reopens_by_path());
    cases::moves_then_revisits(&m.mnt, &mut Log::default());
    let opens = fs.handle_opens();
    assert!(opens >= 40, "only {opens} reopens by path");
    // As root the default is by handle.
    if rustix::process::geteuid().is_root() {
        let root = TestMount::stackfs();
        assert!(!root
            .filesystem::<fusebox_examples::StackFs>()
            .reopens_by_path());
    }
}

/// A file read and closed through the mount is often stat'ed next: its
/// node keeps the read-only fd after the last close, so that GETATTR opens
/// nothing. With the fd closed at RELEASE, every stat here reopened its
/// file by handle (200 opens).
#[test]
fn stat_after_close_reopens_nothing() {
    // Attributes never cached: every stat below is a GETATTR. No
    // default_permissions: its GETATTR before each open would cache the
    // node's fd on its own.
    let m = TestMount::stackfs_with_options("allow_other,attr_timeout=0");
    for i in 0..200 {
        fs::write(m.mnt.join(format!("w{i}")), b"0123456789abcdef").unwrap();
    }
    // Read back: the last close of a read-only file leaves its fd with
    // the node (RELEASE travels on its own after close(2) returns).
    for i in 0..200 {
        assert_eq!(fs::read(m.mnt.join(format!("w{i}"))).unwrap().len(), 16);
    }
    m.snapshot_when(|s| s.op("RELEASE").is_some_and(|o| o.count >= 400));
    let getattrs = |m: &TestMount| m.snapshot().op("GETATTR").map_or(0, |o| o.count);
    let (before, getattrs_before) = (
        m.filesystem::<fusebox_examples::StackFs>().handle_opens(),
        getattrs(&m),
    );
    for i in 0..200 {
        assert_eq!(fs::metadata(m.mnt.join(format!("w{i}"))).unwrap().len(), 16);
    }
    assert!(
        getattrs(&m) - getattrs_before >= 200,
        "the stats were not GETATTRs"
    );
    let opens = m.filesystem::<fusebox_examples::StackFs>().handle_opens() - before;
    assert_eq!(
        opens, 0,
        "{opens} reopens by handle for 200 stats after close"
    );
}

/// Under the writeback cache, data not yet written back must still count as
/// data: SEEK_DATA/SEEK_HOLE may be coarse (the whole file is data) but
/// never report a hole over bytes just written.
#[test]
fn cached_lseek_sees_unwritten_data() {
    let m = TestMount::stackfs_cached(cached::transport());
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(m.mnt.join("holes"))
        .unwrap();
    f.write_at(&[1u8; 4096], 0).unwrap();
    f.write_at(&[2u8; 4096], 1 << 20).unwrap();
    let size = (1 << 20) + 4096;
    let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(0)).unwrap();
    assert_eq!(data, 0);
    let hole = rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(0)).unwrap();
    assert!((4096..=size).contains(&hole), "hole at {hole}");
    let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(1 << 20)).unwrap();
    assert_eq!(data, 1 << 20);
    let past = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(size + 1));
    assert_eq!(past, Err(rustix::io::Errno::NXIO));
}

/// The writeback cache reads around partial writes through whatever file is
/// open, and computes O_APPEND offsets itself: a write-only open and an
/// append must still land exactly where they do natively, in the source too.
#[test]
fn cached_write_only_and_append_reach_the_source() {
    let m = TestMount::stackfs_cached(cached::transport());
    let src = m.src.as_ref().expect("stackfs has a source");
    let p = m.mnt.join("f");
    // Written behind the mount, so no page of it is cached: the partial
    // write below must read the rest of its page through the handle.
    fs::write(src.join("f"), b"0123456789").unwrap();
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.write_at(b"ab", 3).unwrap();
    drop(f);
    let mut f = OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"XY").unwrap();
    f.write_all(b"Z").unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"012ab56789XYZ");
    let f = File::open(&p).unwrap();
    f.sync_all().unwrap();
    // Written back on close at the latest (fuse_release under writeback).
    assert_eq!(fs::read(src.join("f")).unwrap(), b"012ab56789XYZ");
}

/// A running program cannot be truncated (ETXTBSY), and the refusal must
/// leave it whole: with atomic_o_trunc the kernel sends O_TRUNC inside OPEN
/// before it checks that the file is being executed, so the filesystem
/// truncated the program under the running process while open(2) still
/// failed. The reason atomic_o_trunc is off by default.
fn running_program_stays_whole(m: TestMount) {
    use std::os::unix::process::CommandExt;
    let prog = m.mnt.join("prog");
    let original = fs::read("/bin/sleep").expect("/bin/sleep to copy");
    fs::write(&prog, &original).unwrap();
    fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
    // Another test of this binary forking at the moment `prog` was open for
    // writing leaves a copy of that handle in its child until the child
    // execs: the exec fails with ETXTBSY for that moment.
    let mut tries = 0;
    let mut child = loop {
        // argv[0] "sleep": multi-call binaries (busybox, coreutils-single)
        // pick their applet from it.
        match std::process::Command::new(&prog)
            .arg0("sleep")
            .arg("30")
            .spawn()
        {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => break r.expect("run a program from the mount"),
        }
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the copied sleep exited at once: it cannot stand for a running program here"
    );
    let try_open = |flags: i32| {
        OpenOptions::new()
            .read(flags & libc::O_ACCMODE == libc::O_RDONLY)
            .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
            .custom_flags(flags & !libc::O_ACCMODE)
            .open(&prog)
            .map(|_| ())
            .map_err(|e| e.raw_os_error())
    };
    let results = [
        try_open(libc::O_WRONLY),
        try_open(libc::O_RDONLY | libc::O_TRUNC),
        try_open(libc::O_WRONLY | libc::O_TRUNC),
    ];
    let size = fs::metadata(&prog).unwrap().len();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(results, [Err(Some(libc::ETXTBSY)); 3]);
    assert_eq!(size, original.len() as u64, "the program was truncated");
    if let Some(src) = &m.src {
        assert_eq!(fs::read(src.join("prog")).unwrap(), original);
    }
    // Without the running program, the same open truncates.
    try_open(libc::O_RDONLY | libc::O_TRUNC).unwrap();
    assert_eq!(fs::metadata(&prog).unwrap().len(), 0);
}

#[test]
fn running_program_stays_whole_stackfs() {
    running_program_stays_whole(TestMount::stackfs());
}

#[test]
fn running_program_stays_whole_memfs() {
    running_program_stays_whole(TestMount::memfs());
}

/// With `-o atomic_o_trunc` the filesystems truncate inside OPEN
/// themselves: the O_TRUNC cases must still match native there.
mod atomic_o_trunc {
    use super::common::{test_options, TestMount};
    use fusebox::transport::TransportKind::Classic;

    fn options() -> fusebox::Options {
        let mut o = test_options();
        o.apply("atomic_o_trunc").unwrap();
        o
    }

    fn run(m: TestMount) {
        m.assert_negotiated("atomic_o_trunc");
        super::run_case(m, super::cases::create_read_write_append_truncate);
    }

    #[test]
    fn stackfs() {
        run(TestMount::stackfs_with(Classic, &options()));
    }

    #[test]
    fn memfs() {
        run(TestMount::memfs_with(Classic, &options()));
    }

    #[test]
    fn pathfs() {
        run(TestMount::pathfs_with(Classic, &options()));
    }
}
