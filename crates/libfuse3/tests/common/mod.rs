//! What the drop-in's program tests share: the library as the loader will
//! find it, scratch trees, a mount guard, and tree comparison.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where cargo put the cdylib: beside the test binary in `deps` (where
/// `cargo test` builds it).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libfuse3.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

/// A directory holding the library under the name the loader looks for.
pub fn library_dir(scratch: &Path) -> PathBuf {
    let dir = scratch.join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libfuse3.so.3");
    if !link.exists() {
        std::os::unix::fs::symlink(built_library(), &link).unwrap();
    }
    dir
}

/// A directory in /dev/shm removed when dropped; `fusebox-lf3-` names it
/// for the suite's leftover check.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("fusebox-lf3-{tag}-"))
        .tempdir_in("/dev/shm")
        .unwrap()
}

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

pub fn python_has(module: &str) -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A program the tests need is missing: fail, naming the fix (the test
/// command installs them all; a skipped test would pass for nothing).
pub fn skip(what: &str) {
    panic!("{what} is not installed: run scripts/setup.sh");
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tree of files, directories and symlinks whose contents follow `seed`.
pub fn make_tree(root: &Path, seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for d in 0..4 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in 0..6 {
            let len = (next() % 70_000) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            std::fs::write(dir.join(format!("g{f}")), &data).unwrap();
        }
        std::fs::write(dir.join("sub/leaf"), format!("leaf {d} {seed}\n")).unwrap();
    }
    for f in 0..5 {
        let data: Vec<u8> = (0..(next() % 300_000) as usize)
            .map(|_| next() as u8)
            .collect();
        std::fs::write(root.join(format!("f{f}")), &data).unwrap();
    }
    std::fs::write(root.join("empty.txt"), b"").unwrap();
    std::os::unix::fs::symlink("f0", root.join("link")).unwrap();
    std::os::unix::fs::symlink("d1/sub", root.join("dirlink")).unwrap();
}

/// Every entry under `a` and `b`: the same names, kinds, permission bits,
/// sizes, contents and link targets.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let (la, lb) = (listing(a), listing(b));
    if la != lb {
        let only_a: Vec<_> = la.iter().filter(|x| !lb.contains(x)).collect();
        let only_b: Vec<_> = lb.iter().filter(|x| !la.contains(x)).collect();
        panic!(
            "{} and {} differ:\n  only in the first: {only_a:?}\n  only in the second: {only_b:?}",
            a.display(),
            b.display()
        );
    }
}

fn listing(root: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap_or_else(|e| panic!("{}: {e}", root.join(&rel).display()))
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = rel.join(e.file_name());
            let full = root.join(&path);
            let md = std::fs::symlink_metadata(&full).unwrap();
            let mode = md.permissions().mode() & 0o7777;
            let line = if md.file_type().is_symlink() {
                format!(
                    "L {} -> {}",
                    path.display(),
                    std::fs::read_link(&full).unwrap().display()
                )
            } else if md.is_dir() {
                stack.push(path.clone());
                format!("D {} {mode:o}", path.display())
            } else {
                let data = std::fs::read(&full).unwrap();
                format!(
                    "F {} {mode:o} {} {:016x}",
                    path.display(),
                    data.len(),
                    fnv(&data)
                )
            };
            out.push(line);
        }
    }
    out.sort();
    out
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// `tar` of the tree (sorted, times and owners fixed): what it recorded,
/// as a listing with each member's size and kind.
pub fn tar_listing(root: &Path) -> String {
    let out = Command::new("tar")
        .arg("-C")
        .arg(root)
        .args([
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
            "-",
            ".",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new("tar")
        .args(["-tvf", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = out.stdout.clone();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
    let listed = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    format!(
        "{}\n{} bytes, {:016x}",
        String::from_utf8_lossy(&listed.stdout),
        out.stdout.len(),
        fnv(&out.stdout)
    )
}

/// A program serving a mount through the drop-in, ended (and its mount
/// removed) when dropped.
pub struct Mounted {
    child: Option<Child>,
    mnt: PathBuf,
    log: PathBuf,
}

impl Mounted {
    /// Start `cmd` with the loader pointed at fusebox's library and wait
    /// (up to 20 s) for `mnt` to be a FUSE mount.
    pub fn start(cmd: &mut Command, mnt: &Path) -> Mounted {
        // A mountpoint made beforehand may be a regular file.
        if !mnt.exists() {
            std::fs::create_dir_all(mnt).unwrap();
        }
        let scratch = mnt.parent().unwrap();
        let log = scratch.join(format!(
            "{}.log",
            mnt.file_name().unwrap().to_string_lossy()
        ));
        let child = cmd
            .env("LD_LIBRARY_PATH", library_dir(scratch))
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        let mut m = Mounted {
            child: Some(child),
            mnt: std::fs::canonicalize(mnt).unwrap(),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while fusebox::mount::fuse_mount_at(&m.mnt).is_none() {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{cmd:?} exited ({status}) before mounting:\n{}",
                    m.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{cmd:?} did not mount in 20 s:\n{}",
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmount as a user would (umount), and expect the program to end
    /// by itself, successfully.
    pub fn unmount(self) {
        run(Command::new("umount").arg(&self.mnt));
        self.wait_exit();
    }

    /// Expect the program to end by itself (the mount is gone),
    /// successfully.
    pub fn wait_exit(mut self) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the program did not end after umount:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "exit {status}:\n{}", self.log_text());
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if fusebox::mount::fuse_mount_at(&self.mnt).is_some() {
            if let Some(info) = fusebox::mount::fuse_mount_at(&self.mnt) {
                let _ = fusebox::mount::abort_connection(info.connection);
            }
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The same changes to a tree at `root`: copies, appends, renames,
/// removals (files and a whole directory), a symlink and a hard link.
pub fn change_tree(root: &Path, extra: &Path) {
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
