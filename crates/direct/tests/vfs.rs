//! The virtual mount seen by this very process: stackfs over a scratch
//! directory served at a path that does not exist in the kernel, the same
//! workload run there and on a native directory, every observation
//! compared; then the stackfs source must hold what the native directory
//! holds. Runs in a forked child (interception is per process).

#![allow(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fusebox_direct::VirtualMount;
use fusebox_examples::stackfs::{StackFs, StackOptions};

fn observe(log: &mut Vec<String>, what: &str, r: std::io::Result<String>) {
    log.push(match r {
        Ok(v) => format!("{what}: {v}"),
        Err(e) => format!("{what}: error {:?}", e.raw_os_error()),
    });
}

fn listing(dir: &Path) -> std::io::Result<String> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .map(|e| {
            e.map(|e| {
                let t = e.file_type().map(|t| {
                    if t.is_dir() {
                        "d"
                    } else if t.is_symlink() {
                        "l"
                    } else {
                        "f"
                    }
                });
                format!("{}:{}", e.file_name().to_string_lossy(), t.unwrap_or("?"))
            })
        })
        .collect::<Result<_, _>>()?;
    names.sort();
    Ok(names.join(","))
}

fn meta(p: &Path) -> std::io::Result<String> {
    let m = fs::symlink_metadata(p)?;
    let size = if m.is_dir() { 0 } else { m.len() };
    Ok(format!(
        "{:o} size {size} nlink {}",
        m.permissions().mode(),
        if m.is_dir() { 0 } else { m.nlink() }
    ))
}

/// The workload: every result recorded, paths relative to `root`.
fn workload(root: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let l = &mut log;
    observe(
        l,
        "mkdir a/b",
        fs::create_dir_all(root.join("a/b")).map(|()| String::new()),
    );
    observe(
        l,
        "mkdir a again",
        fs::create_dir(root.join("a")).map(|()| String::new()),
    );
    observe(
        l,
        "write f",
        fs::write(root.join("a/f"), b"hello\n").map(|()| String::new()),
    );
    observe(
        l,
        "append f",
        (|| {
            let mut f = OpenOptions::new().append(true).open(root.join("a/f"))?;
            f.write_all(b"world\n")?;
            Ok(String::new())
        })(),
    );
    observe(l, "read f", fs::read_to_string(root.join("a/f")));
    observe(l, "stat f", meta(&root.join("a/f")));
    observe(l, "stat a", meta(&root.join("a")));
    observe(l, "missing", meta(&root.join("a/nope")));
    observe(
        l,
        "create_new twice",
        (|| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join("a/x"))?;
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join("a/x"))?;
            Ok(String::new())
        })(),
    );
    observe(
        l,
        "big write and read",
        (|| {
            let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
            fs::write(root.join("a/b/big"), &data)?;
            let back = fs::read(root.join("a/b/big"))?;
            Ok(format!("{} equal {}", back.len(), back == data))
        })(),
    );
    observe(
        l,
        "seek and shared offset",
        (|| {
            let mut f = File::open(root.join("a/f"))?;
            f.seek(SeekFrom::Start(6))?;
            let mut dup = f.try_clone()?;
            let mut s = String::new();
            dup.read_to_string(&mut s)?;
            let end = f.stream_position()?;
            Ok(format!("{s:?} at {end}"))
        })(),
    );
    observe(
        l,
        "set_len",
        (|| {
            let f = OpenOptions::new().write(true).open(root.join("a/f"))?;
            f.set_len(3)?;
            fs::read_to_string(root.join("a/f"))
        })(),
    );
    observe(
        l,
        "symlink",
        std::os::unix::fs::symlink("b/big", root.join("a/link")).map(|()| String::new()),
    );
    observe(
        l,
        "readlink",
        fs::read_link(root.join("a/link")).map(|p| p.display().to_string()),
    );
    observe(
        l,
        "through link",
        fs::metadata(root.join("a/link")).map(|m| m.len().to_string()),
    );
    observe(
        l,
        "rename",
        fs::rename(root.join("a/x"), root.join("a/b/y")).map(|()| String::new()),
    );
    observe(l, "list a", listing(&root.join("a")));
    observe(l, "list a/b", listing(&root.join("a/b")));
    observe(
        l,
        "cwd inside",
        (|| {
            let before = std::env::current_dir()?;
            std::env::set_current_dir(root.join("a/b"))?;
            let here = std::env::current_dir()?;
            let rel = fs::read(Path::new("big")).map(|d| d.len());
            let up = listing(Path::new(".."));
            std::env::set_current_dir(before)?;
            Ok(format!(
                "{} {:?} {:?}",
                here.strip_prefix(root)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                rel.ok(),
                up.ok()
            ))
        })(),
    );
    observe(
        l,
        "unlink",
        fs::remove_file(root.join("a/link")).map(|()| String::new()),
    );
    observe(
        l,
        "rmdir not empty",
        fs::remove_dir(root.join("a/b")).map(|()| String::new()),
    );
    observe(
        l,
        "remove_dir_all",
        fs::remove_dir_all(root.join("a/b")).map(|()| String::new()),
    );
    observe(l, "list a at end", listing(&root.join("a")));
    log
}

fn snapshot(root: &Path, rel: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = fs::read_dir(root.join(rel))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    entries.sort();
    for name in entries {
        let rel = rel.join(&name);
        let m = fs::symlink_metadata(root.join(&rel)).unwrap();
        if m.is_dir() {
            out.push(format!("{} dir", rel.display()));
            snapshot(root, &rel, out);
        } else if m.is_symlink() {
            out.push(format!(
                "{} -> {}",
                rel.display(),
                fs::read_link(root.join(&rel)).unwrap().display()
            ));
        } else {
            out.push(format!(
                "{} {:?}",
                rel.display(),
                fs::read(root.join(&rel)).unwrap()
            ));
        }
    }
}

fn run() -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let source = scratch.path().join("source");
    let native = scratch.path().join("native");
    fs::create_dir(&source)
        .and(fs::create_dir(&native))
        .map_err(|e| e.to_string())?;
    let at = PathBuf::from(format!("/fusebox-direct-test-{}", std::process::id()));
    let opts = StackOptions {
        fd_cache: 256,
        ..StackOptions::default()
    };
    let fs = StackFs::new(&source, opts).map_err(|e| e.to_string())?;
    fusebox_direct::serve(VirtualMount::new(&at, Arc::new(fs))).map_err(|e| e.to_string())?;
    if fs::metadata("/").is_err() {
        return Err("the kernel's own paths stopped working".into());
    }
    let virt = workload(&at);
    let real = workload(&native);
    let mut diff = Vec::new();
    for (v, r) in virt.iter().zip(&real) {
        if v != r {
            diff.push(format!("  direct: {v}\n  native: {r}"));
        }
    }
    if !diff.is_empty() || virt.len() != real.len() {
        return Err(format!(
            "direct mode differs from native:\n{}",
            diff.join("\n")
        ));
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    snapshot(&source, Path::new(""), &mut a);
    snapshot(&native, Path::new(""), &mut b);
    if a != b {
        return Err(format!("the source holds {a:?}, native {b:?}"));
    }
    if fs::metadata(&at).is_err() || fs::metadata(&at).map(|m| m.is_dir()).ok() != Some(true) {
        return Err("the mount's root is not a directory".into());
    }
    bad_pointers_get_efault(&at)?;
    openat2_opens_as_openat(&at)?;
    println!("{} observations equal", virt.len());
    Ok(())
}

/// Pointers the kernel would refuse with EFAULT get EFAULT from the
/// mount too (pjdfstest passes such pointers), never a crash.
fn bad_pointers_get_efault(at: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let file = std::ffi::CString::new(at.join("efault").as_os_str().as_bytes()).unwrap();
    fs::write(at.join("efault"), b"data").map_err(|e| e.to_string())?;
    let errno = || std::io::Error::last_os_error().raw_os_error();
    // SAFETY: deliberately unmapped addresses handed to system calls, which
    // must refuse them; nothing here dereferences them.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let bad = usize::MAX as *const libc::c_char;
        if libc::stat(bad, &mut st) != -1 || errno() != Some(libc::EFAULT) {
            return Err("stat of a bad path pointer".into());
        }
        if libc::stat(file.as_ptr(), std::ptr::dangling_mut::<libc::stat>()) != -1
            || errno() != Some(libc::EFAULT)
        {
            return Err("stat into a bad buffer".into());
        }
        let fd = libc::open(file.as_ptr(), libc::O_RDWR);
        if fd < 0 {
            return Err("open".into());
        }
        if libc::read(fd, 8 as *mut libc::c_void, 4) != -1 || errno() != Some(libc::EFAULT) {
            return Err("read into a bad buffer".into());
        }
        if libc::write(fd, 8 as *const libc::c_void, 4) != -1 || errno() != Some(libc::EFAULT) {
            return Err("write from a bad buffer".into());
        }
        // A buffer that took reads, then was made read-only or unmapped:
        // what the layer knew took a copy is forgotten.
        let len = 2 * 4096;
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if map == libc::MAP_FAILED {
            return Err("mmap".into());
        }
        for _ in 0..2 {
            if libc::pread(fd, map, 4, 0) != 4 {
                return Err("read into a fresh mapping".into());
            }
        }
        libc::mprotect(map, len, libc::PROT_READ);
        if libc::pread(fd, map, 4, 0) != -1 || errno() != Some(libc::EFAULT) {
            return Err("read into a buffer made read-only".into());
        }
        libc::munmap(map, len);
        if libc::pread(fd, map, 4, 0) != -1 || errno() != Some(libc::EFAULT) {
            return Err("read into an unmapped buffer".into());
        }
        libc::close(fd);
    }
    Ok(())
}

fn main() {
    // SAFETY: single-threaded here; the child runs the case and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a hung case is ended by the alarm.
        unsafe { libc::alarm(60) };
        let code = match run() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        };
        // SAFETY: ends the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    println!(
        "test direct_mode_matches_native_for_a_file_workload ... {}",
        if ok { "ok" } else { "FAILED" }
    );
    if !ok {
        std::process::exit(1);
    }
}

/// openat2 without RESOLVE_* restrictions opens as openat does.
fn openat2_opens_as_openat(at: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let file = std::ffi::CString::new(at.join("efault").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path, a valid struct open_how and a local buffer.
    unsafe {
        // openat2 (no RESOLVE_* flags) opens as openat does.
        let how: [u64; 3] = [libc::O_RDONLY as u64, 0, 0];
        let fd = libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            file.as_ptr(),
            how.as_ptr(),
            24,
        ) as i32;
        let mut buf = [0u8; 4];
        if fd < 0 || libc::read(fd, buf.as_mut_ptr().cast(), 4) != 4 || &buf != b"data" {
            return Err("openat2 and read".into());
        }
        libc::close(fd);
    }
    Ok(())
}
