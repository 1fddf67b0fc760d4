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

/// `prog` (squashfuse or squashfuse_ll) serving an image of a tree made
/// for the test: the same names, contents and tar stream as the tree;
/// then `check` on the mount.
fn squashfuse_serves_its_image(prog: &str, seed: u64, check: impl FnOnce(&Path)) {
    let Some(_) = which(prog).and(which("mksquashfs")) else {
        return skip(&format!("{prog} or mksquashfs"));
    };
    let s = scratch(prog);
    let src = s.path().join("src");
    make_tree(&src, seed);
    let img = s.path().join("tree.img");
    run(Command::new("mksquashfs").arg(&src).arg(&img).args([
        "-quiet",
        "-noappend",
        "-no-progress",
    ]));
    let mnt = s.path().join("mnt");
    let m = Mounted::start(Command::new(prog).arg("-f").arg(&img).arg(&mnt), &mnt);
    assert_same_tree(&src, &mnt);
    // tar of both, byte for byte (names, modes, sizes, contents, links).
    assert_eq!(tar_listing(&src), tar_listing(&mnt));
    check(&mnt);
    m.unmount();
}

#[test]
fn squashfuse_ll_serves_an_image_like_the_tree_it_was_made_from() {
    squashfuse_serves_its_image("squashfuse_ll", 7, |mnt| {
        // fusebox serves it: its statistics answer, and count the reads.
        let snap = fusebox::stats::fetch(mnt).expect("fusebox stats on a drop-in mount");
        assert!(
            snap.ops.iter().any(|o| o.name == "READ" && o.count > 0),
            "{snap:?}"
        );
    });
}

#[test]
fn squashfuse_high_level_serves_the_same_image() {
    squashfuse_serves_its_image("squashfuse", 5, |mnt| {
        // Distinct inode numbers (node ids, as libfuse gives without
        // use_ino): find and tar tell files apart by them.
        let ino =
            |p: &str| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(mnt.join(p)).unwrap());
        assert_ne!(ino("f0"), ino("f1"));
    });
}

/// sshd's path, if sshfs and an OpenSSH server are installed.
fn sshfs_and_sshd() -> Option<&'static Path> {
    which("sshfs")?;
    ["/usr/sbin/sshd"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
}

/// sshfs mounting `remote` from `server` (loopback, its key) at `mnt`.
fn mount_sshfs(server: &Sshd, remote: &Path, mnt: &Path) -> Mounted {
    let opts = format!(
        "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR,port={}",
        server.key.display(),
        server.port
    );
    Mounted::start(
        Command::new("sshfs")
            .arg("-f")
            .arg("-o")
            .arg(&opts)
            .arg(format!("root@127.0.0.1:{}", remote.display()))
            .arg(mnt),
        mnt,
    )
}

#[test]
fn sshfs_over_a_local_openssh_server_matches_the_same_changes_made_natively() {
    let Some(sshd) = sshfs_and_sshd() else {
        return skip("sshfs or openssh-server");
    };
    let s = scratch("sshfs");
    let server = Sshd::start(s.path(), sshd);
    let remote = s.path().join("remote");
    make_tree(&remote, 13);
    let native = s.path().join("native");
    run(Command::new("cp").arg("-a").arg(&remote).arg(&native));
    let mnt = s.path().join("mnt");
    let m = mount_sshfs(&server, &remote, &mnt);
    assert_same_tree(&native, &mnt);
    assert_eq!(tar_listing(&native), tar_listing(&mnt));
    let extra = s.path().join("extra");
    make_tree(&extra, 17);
    for root in [&native, &mnt] {
        change_tree(root, &extra);
    }
    assert_same_tree(&native, &mnt);
    // What went through sshfs reached the server.
    assert_same_tree(&native, &remote);
    // A 4 MiB file copied in and read back.
    let big: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(mnt.join("big.bin"), &big).unwrap();
    assert_eq!(std::fs::read(remote.join("big.bin")).unwrap(), big);
    assert!(fusebox::stats::fetch(&mnt).is_ok());
    m.unmount();
}

/// Every entry of `dir`, each stated as soon as it is listed (as `ls -l`
/// and walkers do): the kernel then asks READDIRPLUS past the first batch,
/// which the drop-in answers with lookups of its own.
fn stat_while_listing(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        out.push(format!(
            "{:?} {:o} {} {} {}",
            e.file_name(),
            md.mode(),
            md.len(),
            md.nlink(),
            md.mtime()
        ));
    }
    out.sort();
    out
}

fn ls_long(dir: &Path) -> String {
    let text = run(Command::new("ls")
        .args(["-ln", "--time-style=+%s"])
        .arg(dir));
    text.lines()
        .filter(|l| !l.starts_with("total"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_wide_directory_stated_while_listed_matches_native_through_sshfs() {
    let Some(sshd) = sshfs_and_sshd() else {
        return skip("sshfs or openssh-server");
    };
    use std::os::unix::fs::PermissionsExt;
    let s = scratch("sshfs-wide");
    let server = Sshd::start(s.path(), sshd);
    let remote = s.path().join("remote");
    let wide = remote.join("wide");
    std::fs::create_dir_all(&wide).unwrap();
    const FILES: usize = 2_000;
    for i in 0..FILES {
        let f = wide.join(format!("f{i}"));
        std::fs::write(&f, vec![b'x'; i % 97]).unwrap();
        let mode = [0o644, 0o600, 0o755][i % 3];
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        if i % 50 == 0 {
            std::os::unix::fs::symlink(format!("f{i}"), wide.join(format!("l{i}"))).unwrap();
        }
    }
    let mnt = s.path().join("mnt");
    let m = mount_sshfs(&server, &remote, &mnt);
    let seen = mnt.join("wide");
    assert_eq!(stat_while_listing(&wide), stat_while_listing(&seen));
    // The listing answered the stats: far fewer LOOKUPs than entries.
    let snap = fusebox::stats::fetch(&mnt).expect("fusebox stats");
    let count = |name: &str| {
        snap.ops
            .iter()
            .find(|o| o.name == name)
            .map_or(0, |o| o.count)
    };
    assert!(count("READDIRPLUS") > 0, "{snap:?}");
    assert!(
        count("LOOKUP") < FILES as u64 / 2,
        "{} LOOKUPs for {FILES} files",
        count("LOOKUP")
    );
    // Names looked up by a listing behave as any: renamed, removed,
    // rewritten and chmodded through the mount, then listed again.
    std::fs::rename(seen.join("f10"), seen.join("g10")).unwrap();
    std::fs::remove_file(seen.join("f11")).unwrap();
    std::fs::write(seen.join("f12"), b"now longer than before\n").unwrap();
    std::fs::set_permissions(seen.join("f13"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::rename(seen.join("f14"), seen.join("f15")).unwrap();
    assert_eq!(stat_while_listing(&wide), stat_while_listing(&seen));
    assert_eq!(ls_long(&wide), ls_long(&seen));
    assert_eq!(std::fs::read(seen.join("f15")).unwrap(), vec![b'x'; 14]);
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

/// An OpenSSH server on loopback for one test, with a key made for it;
/// ended when dropped.
struct Sshd {
    child: std::process::Child,
    port: u16,
    key: std::path::PathBuf,
}

impl Sshd {
    fn start(dir: &Path, sshd: &Path) -> Sshd {
        let d = dir.join("sshd");
        std::fs::create_dir_all(&d).unwrap();
        for k in ["host", "user"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(k)));
        }
        std::fs::copy(d.join("user.pub"), d.join("authorized_keys")).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        // A free port: bind one, let it go, hand it to sshd.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
             PidFile none\nSubsystem sftp internal-sftp\n",
            host = d.join("host").display(),
            auth = d.join("authorized_keys").display(),
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stderr(std::fs::File::create(d.join("log")).unwrap())
            .spawn()
            .unwrap();
        let server = Sshd {
            child,
            port,
            key: d.join("user"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "sshd did not listen on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        server
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_user_mounts_through_fusermount3_as_with_debians_libfuse3() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_) = which("squashfuse_ll").and(which("fusermount3")) else {
        return skip("squashfuse_ll or fusermount3");
    };
    let user = "fbtest";
    if Command::new("id")
        .arg(user)
        .output()
        .map_or(true, |o| !o.status.success())
    {
        run(Command::new("useradd").args(["-M", "-U", "-s", "/usr/sbin/nologin", user]));
    }
    let uid: u32 = run(Command::new("id").args(["-u", user]))
        .trim()
        .parse()
        .unwrap();
    let s = scratch("user");
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = s.path().join("src");
    make_tree(&src, 3);
    let img = s.path().join("tree.img");
    run(Command::new("mksquashfs").arg(&src).arg(&img).args([
        "-quiet",
        "-noappend",
        "-no-progress",
    ]));
    let mnt = s.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run(Command::new("chown").arg(user).arg(&mnt));
    // fusermount3 opens /dev/fuse as the user: this machine's 0600 keeps
    // users out (Debian's libfuse3 fails the same way), so open it up for
    // the test and put it back after.
    let _dev = fusebox_test_support::FuseDeviceOpen::new();
    let lib = library_dir(s.path());
    let script = format!(
        "LD_LIBRARY_PATH={} exec squashfuse_ll -f {} {}",
        lib.display(),
        img.display(),
        mnt.display()
    );
    let m = Mounted::start(
        Command::new("su").args([user, "-s", "/bin/sh", "-c", &script]),
        &mnt,
    );
    // Mounted by fusermount3 for the user, named as libfuse names it.
    let info = fusebox::mount::fuse_mount_at(&mnt).unwrap();
    assert_eq!(info.fstype, "fuse.squashfuse_ll");
    assert_eq!(info.source, "squashfuse_ll");
    // Only its user may look inside (no allow_other): not even root.
    assert_eq!(
        std::fs::metadata(mnt.join("f0"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EACCES)
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(&*mnt.to_string_lossy()))
        .unwrap();
    assert!(line.contains(&format!("user_id={uid}")), "{line}");
    // The user reads the files (the mount is theirs alone, no allow_other).
    let listed = run(Command::new("su").args([
        user,
        "-s",
        "/bin/sh",
        "-c",
        &format!("md5sum {0}/f0 {0}/d2/g3", mnt.display()),
    ]));
    let native = run(Command::new("md5sum")
        .arg(src.join("f0"))
        .arg(src.join("d2/g3")));
    let sums = |t: &str| {
        t.lines()
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(sums(&listed), sums(&native));
    // And unmounts it the way users do.
    run(Command::new("su").args([
        user,
        "-s",
        "/bin/sh",
        "-c",
        &format!("fusermount3 -u {}", mnt.display()),
    ]));
    m.wait_exit();
}

/// A libfuse program whose root is a regular file, mounted on a regular
/// file (as programs that export one image as one file are): Debian's
/// libfuse3 serves it, and so must the drop-in, with the same bytes.
const FILE_ROOT: &str = r#"
#define FUSE_USE_VERSION 31
#include <fuse.h>
#include <errno.h>
#include <string.h>

static const char text[] = "the root of this filesystem is a file\n";

static int fr_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    if (strcmp(path, "/") != 0) return -ENOENT;
    memset(st, 0, sizeof *st);
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = sizeof text - 1;
    return 0;
}

static int fr_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi) {
    (void)path; (void)fi;
    size_t len = sizeof text - 1;
    if ((size_t)off >= len) return 0;
    if (off + size > len) size = len - off;
    memcpy(buf, text + off, size);
    return (int)size;
}

static const struct fuse_operations ops = { .getattr = fr_getattr, .read = fr_read };

int main(int argc, char *argv[]) { return fuse_main(argc, argv, &ops, NULL); }
"#;

#[test]
fn a_file_rooted_filesystem_mounts_on_a_regular_file_as_with_debians_libfuse3() {
    let Some(_) = which("gcc") else {
        return skip("gcc");
    };
    let s = scratch("file-root");
    let src = s.path().join("file_root.c");
    std::fs::write(&src, FILE_ROOT).unwrap();
    let exe = s.path().join("file_root");
    run(Command::new("gcc")
        .args(["-I/usr/include/fuse3", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lfuse3"));
    let want = "the root of this filesystem is a file\n";
    // Debian's library, as linked.
    let debian_mnt = s.path().join("debian-image");
    std::fs::write(&debian_mnt, "the file underneath\n").unwrap();
    let mut debian = Command::new(&exe)
        .arg("-f")
        .arg(&debian_mnt)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fusebox::mount::fuse_mount_at(&debian_mnt).is_none() {
        if std::time::Instant::now() > deadline || debian.try_wait().unwrap().is_some() {
            let _ = debian.kill();
            panic!("Debian's libfuse3 did not mount on a regular file");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let debian_read = std::fs::read_to_string(&debian_mnt);
    let _ = Command::new("umount").arg(&debian_mnt).status();
    let _ = debian.wait();
    assert_eq!(debian_read.unwrap(), want, "Debian's libfuse3");
    // The drop-in.
    let mnt = s.path().join("image");
    std::fs::write(&mnt, "the file underneath\n").unwrap();
    let m = Mounted::start(Command::new(&exe).arg("-f").arg(&mnt), &mnt);
    assert_eq!(std::fs::read_to_string(&mnt).unwrap(), want);
    assert!(std::fs::metadata(&mnt).unwrap().is_file());
    m.unmount();
    assert_eq!(
        std::fs::read_to_string(&mnt).unwrap(),
        "the file underneath\n"
    );
}
