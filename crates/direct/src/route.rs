//! Which hooked calls go to the virtual mount, and how their arguments
//! and results map onto it. Everything else passes to the kernel.
//!
//! A call is the mount's when a path argument resolves inside it, or a
//! descriptor argument is one of its open files. Calls on the mount that
//! are not served yet answer ENOSYS (listed in DESIGN.md), never reach the
//! kernel with a placeholder descriptor and return wrong data.

use std::sync::OnceLock;

use crate::appmem::{self, UserBuf};
use crate::intercept::{self, raw_syscall, Action, InterceptError, Syscall};
use crate::kabi;
use crate::vfs::{Place, SysResult, Target, VirtualMount};
use fusebox::fs::ops::SetAttr;
use fusebox::types::{TimeOrNow, Timespec};

static MOUNT: OnceLock<VirtualMount> = OnceLock::new();

/// What a program this one executes needs in its environment to be served
/// too (the launcher's variables), taken from this process's environment
/// when serving starts; None when it was not started that way (a program
/// that serves a mount to itself through the library).
static EXEC_ENV: OnceLock<Option<Vec<EnvVar>>> = OnceLock::new();

/// A variable's name and value.
type EnvVar = (Vec<u8>, Vec<u8>);

/// The variables `fusebox run --fs` sets, carried into every program run
/// from a served one (even if it clears its environment).
const CARRIED: [&str; 3] = ["FUSEBOX_DIRECT_FS", "FUSEBOX_DIRECT_AT", "LD_PRELOAD"];
/// Carried too when set.
const CARRIED_IF_SET: [&str; 7] = [
    intercept::MECHANISM_VAR,
    crate::unix_sockets::RUN_VAR,
    crate::shared::DOOR_VAR,
    crate::cache::SHARED_VAR,
    crate::cache::SIZE_VAR,
    crate::cache::PAGES_VAR,
    STATS_VAR,
];
/// The launcher's process id (which the program it executes keeps): that
/// process prints the cache's figures at its exit.
pub const STATS_VAR: &str = "FUSEBOX_DIRECT_STATS";
/// A served program's working directory inside the mount, for the
/// program it executes (the kernel's stays outside).
pub const CWD_VAR: &str = "FUSEBOX_DIRECT_CWD";

/// This library's path: the first entry of the launcher's LD_PRELOAD
/// (`fusebox run` puts it first).
fn our_library(carried: &[EnvVar]) -> &[u8] {
    let (_, preload) = &carried[2];
    preload
        .split(|&c| c == b':' || c == b' ')
        .next()
        .unwrap_or_default()
}

/// The metadata cache's figures for the run so far, if this process
/// serves a mount with the cache on.
pub fn cache_stats() -> Option<crate::cache::CacheStats> {
    MOUNT.get()?.cache_stats()
}

/// The served filesystem's own figures (for sftpfs: requests sent,
/// connections, its caches), if this process serves a mount.
pub fn fs_counters() -> Vec<fusebox::stats::FsCounter> {
    // A call to the run's server, made at the program's exit.
    crate::sud::as_our_own(|| MOUNT.get().map(|m| m.fs_counters()).unwrap_or_default())
}

/// Serve `mount` to this process (and the threads and children it creates
/// from now on) through system call interception.
pub fn serve(mount: VirtualMount) -> Result<(), InterceptError> {
    // (Descriptors the filesystem made before this are where they are;
    // `keep_descriptors` before building it keeps those too.)
    crate::kept::keep_descriptors();
    use std::os::unix::ffi::OsStringExt;
    let var = |k: &str| std::env::var_os(k).map(|v| (k.as_bytes().to_vec(), v.into_vec()));
    let carried: Option<Vec<_>> = CARRIED.iter().map(|k| var(k)).collect();
    let carried = carried.map(|mut c| {
        c.extend(CARRIED_IF_SET.iter().filter_map(|k| var(k)));
        // The page this process shares, whatever the environment said.
        c.retain(|(k, _)| k != crate::cache::SHARED_VAR.as_bytes());
        if let Some(fd) = mount.cache_shared_fd() {
            c.push((
                crate::cache::SHARED_VAR.as_bytes().to_vec(),
                fd.to_string().into_bytes(),
            ));
        }
        c
    });
    // One run is one mount: its sockets are its own (a program serving
    // a mount to itself, with no run, names it by its process).
    let mut identity = mount.at().to_vec();
    identity.push(0);
    match std::env::var_os(crate::unix_sockets::RUN_VAR) {
        Some(run) => {
            use std::os::unix::ffi::OsStrExt;
            identity.extend_from_slice(run.as_bytes());
        }
        None => identity.extend_from_slice(std::process::id().to_string().as_bytes()),
    }
    crate::unix_sockets::set_identity(identity);
    let _ = EXEC_ENV.set(carried);
    if MOUNT.set(mount).is_err() {
        return Err(InterceptError::AlreadyInstalled);
    }
    intercept::after_fork(|| {
        crate::shared::client::after_fork_child();
        if let Some(m) = MOUNT.get() {
            m.forked_child();
        }
    });
    intercept::around_fork(
        crate::shared::client::before_fork,
        crate::shared::client::after_fork_parent,
    );
    intercept::install(hook, intercept::Mechanism::from_env()?)
}

/// execve/execveat of a program outside the mount: its environment gets
/// the launcher's variables back (and the virtual working directory), so
/// the new program is served the same mount.
fn exec(m: &VirtualMount, call: &Syscall, envp_arg: usize) -> Action {
    let Some(Some(carried)) = EXEC_ENV.get() else {
        return Action::Pass;
    };
    let mut env: Vec<Vec<u8>> = Vec::new();
    let mut at = call.args[envp_arg];
    while at != 0 {
        let Ok(ptr) = appmem::get_u64(at) else {
            return answer(Err(libc::EFAULT));
        };
        if ptr == 0 {
            break;
        }
        // MAX_ARG_STRLEN: the kernel's limit for one entry.
        let Some(var) = appmem::c_string(ptr, 32 * 4096) else {
            return answer(Err(libc::EFAULT));
        };
        let var = var.as_slice();
        let name = var.split(|&c| c == b'=').next().unwrap_or_default();
        if name == CWD_VAR.as_bytes() {
            // Ours to set (below), for this program's working directory.
        } else if name == b"LD_PRELOAD" {
            // Theirs, with our library put first unless it is there.
            let theirs = var.get(name.len() + 1..).unwrap_or_default();
            let lib = our_library(carried);
            if theirs.split(|&c| c == b':' || c == b' ').any(|e| e == lib) {
                env.push(var.to_vec());
            } else {
                let mut v = b"LD_PRELOAD=".to_vec();
                v.extend_from_slice(lib);
                if !theirs.is_empty() {
                    v.push(b':');
                    v.extend_from_slice(theirs);
                }
                env.push(v);
            }
        } else {
            // FUSEBOX_DIRECT_FS/AT set by the program (a nested `fusebox
            // run`) stay its own; missing ones are put back below.
            env.push(var.to_vec());
        }
        at += 8;
    }
    for (k, v) in carried {
        let present = env
            .iter()
            .any(|e| e.starts_with(k) && e.get(k.len()) == Some(&b'='));
        if !present {
            let mut e = k.clone();
            e.push(b'=');
            e.extend_from_slice(v);
            env.push(e);
        }
    }
    if let Some(cwd) = m.cwd() {
        let mut e = format!("{CWD_VAR}=").into_bytes();
        e.extend_from_slice(&cwd);
        env.push(e);
    }
    let owned: Vec<std::ffi::CString> = env
        .into_iter()
        .filter_map(|e| std::ffi::CString::new(e).ok())
        .collect();
    let mut ptrs: Vec<u64> = owned.iter().map(|c| c.as_ptr() as u64).collect();
    ptrs.push(0);
    let mut args = call.args;
    args[envp_arg] = ptrs.as_ptr() as u64;
    // Returns only if the exec failed.
    Action::Return(raw_syscall(call.nr, args))
}

/// A rename (its flags) or a link (whether the first path's last link is
/// followed: linkat's AT_SYMLINK_FOLLOW; the second path's never is).
#[derive(Clone, Copy)]
enum TwoPathOp {
    Rename(u32),
    Link(bool),
}

/// Where one path of a two-path call ends up.
enum Side {
    /// In the mount: this path there.
    Inside(Vec<u8>),
    /// The kernel's: relative to this directory descriptor, at this
    /// address of the program's (as it gave it) or this path of ours.
    Outside(i32, OutsidePath),
}

enum OutsidePath {
    Program(u64),
    Ours(std::ffi::CString),
}

impl Side {
    /// `(dirfd, path address)` for the kernel's call.
    fn raw(&self) -> Option<(u64, u64)> {
        match self {
            Side::Inside(_) => None,
            Side::Outside(d, OutsidePath::Program(addr)) => Some((*d as i64 as u64, *addr)),
            Side::Outside(d, OutsidePath::Ours(c)) => Some((*d as i64 as u64, c.as_ptr() as u64)),
        }
    }
}

/// A rename or link with a path in the mount (`first`, `second`: dirfd,
/// path address, and the path in the mount if it is there). Served if
/// both are; else, or if a walk left the mount (`..` above its root, a
/// link out), each path is followed to where it leads, as the kernel would
/// walk it: both in the mount, served; both the kernel's, made by the
/// kernel there (`mv ../a ../b` from the mount's root); one each, EXDEV,
/// as between two filesystems.
fn two_paths(
    m: &VirtualMount,
    first: (i32, u64, Option<Vec<u8>>),
    second: (i32, u64, Option<Vec<u8>>),
    op: TwoPathOp,
) -> Action {
    use libc::{SYS_linkat, SYS_renameat2, AT_FDCWD, AT_SYMLINK_FOLLOW, ELOOP, ENOENT, EXDEV};
    let serve = |a: &[u8], b: &[u8]| match op {
        TwoPathOp::Rename(flags) => m.rename(a, b, flags),
        TwoPathOp::Link(follow) => m.link(a, b, follow),
    };
    if let (Some(a), Some(b)) = (&first.2, &second.2) {
        match serve(a, b) {
            Err(EXDEV) => {}
            r => return answer(r),
        }
    }
    let settle =
        |(dirfd, addr, inside): (i32, u64, Option<Vec<u8>>), follow: bool| -> Result<Side, i32> {
            let Some(mut path) = inside else {
                return Ok(Side::Outside(dirfd, OutsidePath::Program(addr)));
            };
            // Out and back in (`../mnt/x`) and out again: as many times as a
            // walk may follow links.
            for _ in 0..MAX_ESCAPES {
                let Some(outside) = m.leads_to(&path, follow)? else {
                    return Ok(Side::Inside(path));
                };
                match m.place(AT_FDCWD, &outside) {
                    Place::Inside(p) => path = p,
                    Place::Outside => {
                        let c = std::ffi::CString::new(outside).map_err(|_| ENOENT)?;
                        return Ok(Side::Outside(AT_FDCWD, OutsidePath::Ours(c)));
                    }
                }
            }
            Err(ELOOP)
        };
    let follow = matches!(op, TwoPathOp::Link(true));
    let sides = settle(first, follow).and_then(|a| Ok((a, settle(second, false)?)));
    let (a, b) = match sides {
        Ok(s) => s,
        Err(e) => return answer(Err(e)),
    };
    match (&a, &b) {
        (Side::Inside(a), Side::Inside(b)) => answer(serve(a, b)),
        _ => match (a.raw(), b.raw(), op) {
            (Some((d1, p1)), Some((d2, p2)), TwoPathOp::Rename(flags)) => Action::Return(
                raw_syscall(SYS_renameat2, [d1, p1, d2, p2, u64::from(flags), 0]),
            ),
            (Some((d1, p1)), Some((d2, p2)), TwoPathOp::Link(follow)) => {
                let flags = if follow { AT_SYMLINK_FOLLOW } else { 0 };
                Action::Return(raw_syscall(SYS_linkat, [d1, p1, d2, p2, flags as u64, 0]))
            }
            _ => {
                // The kernel copies both paths in before it compares
                // mounts: a path it cannot copy fails first.
                for side in [&a, &b] {
                    if let Side::Outside(_, OutsidePath::Program(addr)) = side {
                        if let Some(e) = uncopyable_path(*addr) {
                            return answer(Err(e));
                        }
                    }
                }
                answer(Err(EXDEV))
            }
        },
    }
}

/// What the kernel's copy of the path at `addr` would fail with
/// (getname: EFAULT, or ENAMETOOLONG without a NUL in PATH_MAX bytes).
fn uncopyable_path(addr: u64) -> Option<i32> {
    let mut path = appmem::CPath::new();
    if appmem::read_c_str(addr, &mut path) {
        return None;
    }
    let readable = addr != 0 && appmem::bytes(addr, libc::PATH_MAX as usize).is_ok();
    Some(if readable {
        libc::ENAMETOOLONG
    } else {
        libc::EFAULT
    })
}

/// How many times `hook` and `two_paths` follow a walk out of the mount
/// and back in before giving up (the kernel's limit on links in a walk).
const MAX_ESCAPES: usize = 40;

fn answer(r: SysResult) -> Action {
    Action::Return(match r {
        Ok(v) => v,
        Err(e) => -(e as i64),
    })
}

fn fd_arg(v: u64) -> i32 {
    v as i32
}

/// The path argument of the calls with one path, whose walk may leave the
/// mount (a symlink out of it, `..` above its root): its index in the
/// arguments. (rename and link: `two_paths`.)
#[allow(non_upper_case_globals)]
fn escaping_path_arg(nr: i64) -> Option<usize> {
    use libc::*;
    Some(match nr {
        SYS_open | SYS_creat | SYS_stat | SYS_access | SYS_truncate | SYS_chmod | SYS_chown
        | SYS_getxattr | SYS_setxattr | SYS_listxattr | SYS_removexattr | SYS_execve
        | SYS_statfs | SYS_utime | SYS_utimes | SYS_chdir => 0,
        SYS_openat | SYS_newfstatat | SYS_statx | SYS_faccessat | SYS_faccessat2 | SYS_fchmodat
        | SYS_fchownat | SYS_utimensat | SYS_execveat | SYS_readlinkat | SYS_futimesat
        | SYS_openat2 | SYS_FCHMODAT2 => 1,
        // The last name is not followed, but the walk to it may leave
        // (readlink of `dir-link/x`, `rm ../x` from the mount's root).
        SYS_readlink | SYS_lstat | SYS_lchown | SYS_lgetxattr | SYS_lsetxattr | SYS_llistxattr
        | SYS_lremovexattr | SYS_mkdir | SYS_unlink | SYS_rmdir | SYS_mknod => 0,
        SYS_mkdirat | SYS_unlinkat | SYS_mknodat | SYS_symlink => 1,
        SYS_symlinkat => 2,
        _ => return None,
    })
}

/// Every hooked call.
fn hook(call: &Syscall) -> Action {
    // A panic in filesystem code is one failed call, as it is one EIO on
    // the kernel path: unwinding out of the hook would cross the signal
    // frame into the application (undefined behaviour), and aborting would
    // take the application down.
    std::panic::catch_unwind(|| serve_call(call)).unwrap_or_else(|_| {
        tracing::error!(
            nr = call.nr,
            "filesystem code panicked in a direct-mode call; answering EIO"
        );
        Action::Return(-(libc::EIO as i64))
    })
}

/// A call whose walk left the mount through a symlink is made again on the
/// path it leads to: served if that is in the mount after all, else by the
/// kernel, as the kernel would have gone on walking there.
fn serve_call(call: &Syscall) -> Action {
    let mut action = route(call);
    let Some(i) = escaping_path_arg(call.nr) else {
        return action;
    };
    // Kept alive for the call made with it.
    let mut outside: std::ffi::CString;
    let mut args = call.args;
    // Out, back in (`../mnt/x`), out again...: as the kernel would walk.
    for _ in 0..MAX_ESCAPES {
        if !matches!(action, Action::Return(r) if r == -(libc::EXDEV as i64)) {
            return action;
        }
        let Some(path) = crate::vfs::take_escaped() else {
            return action;
        };
        let Ok(c) = std::ffi::CString::new(path) else {
            return action;
        };
        outside = c;
        // Absolute: a directory descriptor beside it is ignored.
        args[i] = outside.as_ptr() as u64;
        let again = Syscall {
            nr: call.nr,
            args,
            call_addr: call.call_addr,
        };
        action = match route(&again) {
            Action::Pass => return Action::Return(raw_syscall(call.nr, args)),
            served => served,
        };
    }
    answer(Err(libc::ELOOP))
}

// The libc names of system calls are lower case.
#[allow(non_upper_case_globals)]
fn route(call: &Syscall) -> Action {
    let Some(m) = MOUNT.get() else {
        return Action::Pass;
    };
    let a = call.args;
    use libc::*;
    // Path calls: (dirfd, path) of the path argument.
    let at = |dirfd: i32, addr: u64| -> Option<Vec<u8>> {
        let mut path = appmem::CPath::new();
        if !appmem::read_c_str(addr, &mut path) {
            return None;
        }
        match m.place(dirfd, &path) {
            Place::Inside(p) => Some(p),
            Place::Outside => None,
        }
    };
    match call.nr {
        SYS_open | SYS_creat | SYS_openat => {
            let (dirfd, path, flags, mode) = match call.nr {
                SYS_open => (AT_FDCWD, a[0], a[1] as i32, a[2] as u32),
                SYS_creat => (AT_FDCWD, a[0], O_CREAT | O_WRONLY | O_TRUNC, a[1] as u32),
                _ => (fd_arg(a[0]), a[1], a[2] as i32, a[3] as u32),
            };
            match at(dirfd, path) {
                Some(p) => answer(m.openat(&p, flags, mode)),
                None => Action::Pass,
            }
        }
        SYS_openat2 => match at(fd_arg(a[0]), a[1]) {
            // struct open_how { u64 flags; u64 mode; u64 resolve; }: served
            // without RESOLVE_* restrictions, which are not implemented.
            Some(p) => answer(appmem::bytes(a[2], 24).and_then(|how| {
                let field = |i: usize| {
                    u64::from_ne_bytes(how[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                };
                if a[3] < 24 {
                    return Err(EINVAL);
                }
                if field(2) != 0 {
                    return Err(ENOSYS);
                }
                m.openat(&p, field(0) as i32, field(1) as u32)
            })),
            None => Action::Pass,
        },
        // The shared page of the metadata cache stays open: a program
        // that closes everything before it executes another (Python's
        // subprocess) must not cut that one off from the run's epoch.
        SYS_close if m.cache_shared_fd() == Some(fd_arg(a[0])) => Action::Return(0),
        SYS_close if crate::shared::client::is_internal(fd_arg(a[0])) => Action::Return(0),
        // Not the application's: it never got that number.
        SYS_close if crate::kept::is_kept(fd_arg(a[0])) => answer(Err(EBADF)),
        SYS_close => match m.close(fd_arg(a[0])) {
            Some(r) => answer(r),
            None => {
                m.others_closed(a[0] as u32, a[0] as u32);
                Action::Pass
            }
        },
        SYS_read | SYS_pread64 => match m.file(fd_arg(a[0])) {
            Some(f) => {
                let at = (call.nr == SYS_pread64).then_some(a[3]);
                answer(m.read(fd_arg(a[0]), &f, UserBuf::new(a[1], a[2]), at))
            }
            None => Action::Pass,
        },
        SYS_write | SYS_pwrite64 => match m.file(fd_arg(a[0])) {
            Some(f) => {
                let at = (call.nr == SYS_pwrite64).then_some(a[3]);
                answer(
                    appmem::bytes(a[1], a[2] as usize)
                        .and_then(|data| m.write(fd_arg(a[0]), &f, &data, at)),
                )
            }
            None => Action::Pass,
        },
        SYS_readv | SYS_writev | SYS_preadv | SYS_pwritev | SYS_preadv2 | SYS_pwritev2 => {
            match m.file(fd_arg(a[0])) {
                Some(f) => vectored(m, &f, call),
                None => Action::Pass,
            }
        }
        SYS_lseek => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.lseek(fd_arg(a[0]), &f, a[1] as i64, a[2] as i32)),
            None => Action::Pass,
        },
        SYS_fstat => match m.file(fd_arg(a[0])) {
            Some(f) => answer(
                m.fstat(&f)
                    .and_then(|attr| appmem::put(a[1], &kabi::stat_of(&attr)))
                    .map(|()| 0),
            ),
            None => Action::Pass,
        },
        SYS_stat | SYS_lstat => match at(AT_FDCWD, a[0]) {
            Some(p) => answer(
                m.stat(&p, call.nr == SYS_stat)
                    .and_then(|attr| appmem::put(a[1], &kabi::stat_of(&attr)))
                    .map(|()| 0),
            ),
            None => Action::Pass,
        },
        SYS_newfstatat | SYS_statx => {
            // newfstatat(dirfd, path, buf, flags); statx(dirfd, path, flags, mask, buf).
            let (flags, buf) = if call.nr == SYS_statx {
                (a[2] as i32, a[4])
            } else {
                (a[3] as i32, a[2])
            };
            // statx also takes a NULL path with AT_EMPTY_PATH (Linux 6.11).
            let mut path_buf = appmem::CPath::new();
            let path = appmem::read_c_str(a[1], &mut path_buf).then_some(&path_buf);
            let empty = a[1] == 0 || path.is_some_and(|p| p.is_empty());
            let attr = if empty && flags & AT_EMPTY_PATH != 0 {
                match m.file(fd_arg(a[0])) {
                    Some(f) => m.fstat(&f),
                    None => return Action::Pass,
                }
            } else {
                let Some(path) = path else {
                    return Action::Pass;
                };
                match m.place(fd_arg(a[0]), path) {
                    Place::Inside(p) => m.stat(&p, flags & AT_SYMLINK_NOFOLLOW == 0),
                    Place::Outside => return Action::Pass,
                }
            };
            answer(
                attr.and_then(|attr| {
                    if call.nr == SYS_statx {
                        appmem::put(buf, &kabi::statx_of(&attr))
                    } else {
                        appmem::put(buf, &kabi::stat_of(&attr))
                    }
                })
                .map(|()| 0),
            )
        }
        SYS_access | SYS_faccessat | SYS_faccessat2 => {
            let (dirfd, path, mode, flags) = match call.nr {
                SYS_access => (AT_FDCWD, a[0], a[1] as i32, 0),
                SYS_faccessat => (fd_arg(a[0]), a[1], a[2] as i32, 0),
                _ => (fd_arg(a[0]), a[1], a[2] as i32, a[3] as i32),
            };
            match at(dirfd, path) {
                Some(p) => answer(m.access(&p, mode, flags & AT_SYMLINK_NOFOLLOW == 0)),
                None => Action::Pass,
            }
        }
        SYS_getdents64 => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.getdents64(&f, UserBuf::new(a[1], a[2]))),
            None => Action::Pass,
        },
        SYS_getdents => match m.file(fd_arg(a[0])) {
            Some(_) => answer(Err(ENOSYS)),
            None => Action::Pass,
        },
        SYS_mkdir | SYS_mkdirat => {
            let (dirfd, path, mode) = if call.nr == SYS_mkdir {
                (AT_FDCWD, a[0], a[1] as u32)
            } else {
                (fd_arg(a[0]), a[1], a[2] as u32)
            };
            match at(dirfd, path) {
                Some(p) => answer(m.mkdir(&p, mode)),
                None => Action::Pass,
            }
        }
        SYS_unlink | SYS_rmdir | SYS_unlinkat => {
            let (dirfd, path, dir) = match call.nr {
                SYS_unlink => (AT_FDCWD, a[0], false),
                SYS_rmdir => (AT_FDCWD, a[0], true),
                _ => (fd_arg(a[0]), a[1], a[2] as i32 & AT_REMOVEDIR != 0),
            };
            match at(dirfd, path) {
                Some(p) => answer(m.unlink(&p, dir)),
                None => Action::Pass,
            }
        }
        SYS_rename | SYS_renameat | SYS_renameat2 => {
            let (d1, p1, d2, p2, flags) = match call.nr {
                SYS_rename => (AT_FDCWD, a[0], AT_FDCWD, a[1], 0),
                SYS_renameat => (fd_arg(a[0]), a[1], fd_arg(a[2]), a[3], 0),
                _ => (fd_arg(a[0]), a[1], fd_arg(a[2]), a[3], a[4] as u32),
            };
            match (at(d1, p1), at(d2, p2)) {
                (None, None) => Action::Pass,
                (from, to) => two_paths(m, (d1, p1, from), (d2, p2, to), TwoPathOp::Rename(flags)),
            }
        }
        SYS_readlink | SYS_readlinkat => {
            let (dirfd, path, buf, size) = if call.nr == SYS_readlink {
                (AT_FDCWD, a[0], a[1], a[2])
            } else {
                (fd_arg(a[0]), a[1], a[2], a[3])
            };
            match at(dirfd, path) {
                Some(p) => answer(m.readlink(&p, UserBuf::new(buf, size))),
                None => Action::Pass,
            }
        }
        SYS_symlink | SYS_symlinkat => {
            let (target, dirfd, path) = if call.nr == SYS_symlink {
                (a[0], AT_FDCWD, a[1])
            } else {
                (a[0], fd_arg(a[1]), a[2])
            };
            let mut t = appmem::CPath::new();
            match (at(dirfd, path), appmem::read_c_str(target, &mut t)) {
                (Some(p), true) => answer(m.symlink(&t, &p)),
                _ => Action::Pass,
            }
        }
        SYS_truncate => match at(AT_FDCWD, a[0]) {
            Some(p) => answer(m.truncate(Some(&p), None, a[1] as i64)),
            None => Action::Pass,
        },
        SYS_ftruncate => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.truncate(None, Some(&f), a[1] as i64)),
            None => Action::Pass,
        },
        SYS_fadvise64 => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.fadvise(&f, a[3] as i32)),
            None => Action::Pass,
        },
        SYS_fsync | SYS_fdatasync => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.fsync(&f, call.nr == SYS_fdatasync)),
            None => Action::Pass,
        },
        SYS_chdir => match at(AT_FDCWD, a[0]) {
            Some(p) => answer(m.chdir(&p)),
            None => kernel_chdir(m, call),
        },
        SYS_fchdir => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.fchdir(&f)),
            None => kernel_chdir(m, call),
        },
        SYS_getcwd => match m.getcwd(UserBuf::new(a[0], a[1])) {
            Some(r) => answer(r),
            None => Action::Pass,
        },
        SYS_flock => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.lock(&f, call.nr, a)),
            None => Action::Pass,
        },
        SYS_close_range => {
            let (first, last) = (a[0] as u32, a[1] as u32);
            // Around the shared page, the run's server door and its
            // connections (see close), and the filesystem's descriptors.
            let mut keep: Vec<u32> = m
                .cache_shared_fd()
                .map(|fd| fd as u32)
                .into_iter()
                .chain(crate::shared::client::internal_fds())
                .filter(|fd| (first..=last).contains(fd))
                .chain(crate::kept::kept_in(first, last))
                .collect();
            keep.sort_unstable();
            keep.dedup();
            if a[2] as u32 & CLOSE_RANGE_CLOEXEC == 0 {
                // Out of the pool before the numbers are free: a pooled
                // one must not be dup'ed after the kernel closed it (and
                // maybe gave the number to another thread's open).
                m.others_closed(first, last);
            }
            let mut ret = 0;
            let mut from = Some(first);
            for fd in keep {
                match from {
                    Some(f) if fd > f && ret == 0 => {
                        ret =
                            raw_syscall(call.nr, [u64::from(f), u64::from(fd - 1), a[2], 0, 0, 0]);
                    }
                    _ => {}
                }
                from = fd.checked_add(1);
            }
            if let Some(f) = from.filter(|&f| f <= last && ret == 0) {
                ret = raw_syscall(call.nr, [u64::from(f), u64::from(last), a[2], 0, 0, 0]);
            }
            if ret == 0 && a[2] as u32 & CLOSE_RANGE_CLOEXEC == 0 {
                m.closed_range(a[0] as u32, a[1] as u32);
            }
            Action::Return(ret)
        }
        SYS_sendfile | SYS_splice | SYS_copy_file_range | SYS_tee => {
            // Either end in the mount: not served yet (the kernel would
            // move the placeholder's bytes).
            let other = if call.nr == SYS_sendfile || call.nr == SYS_tee {
                a[1]
            } else {
                a[2]
            };
            if m.file(fd_arg(a[0])).is_some() || m.file(fd_arg(other)).is_some() {
                answer(Err(ENOSYS))
            } else {
                Action::Pass
            }
        }
        SYS_dup => duplicate(m, call, fd_arg(a[0]), None),
        // The filesystem's own descriptor cannot make room (it holds the
        // number): a clear error rather than the filesystem then acting
        // on the application's file.
        SYS_dup2 | SYS_dup3 if crate::kept::is_kept(fd_arg(a[1])) => answer(Err(EBUSY)),
        SYS_dup2 | SYS_dup3 => {
            if m.file(fd_arg(a[1])).is_none() {
                m.others_closed(a[1] as u32, a[1] as u32);
            }
            duplicate(m, call, fd_arg(a[0]), Some(fd_arg(a[1])))
        }
        SYS_umask => Action::Return(crate::process::set_umask(a[0])),
        SYS_setuid | SYS_setgid | SYS_setreuid | SYS_setregid | SYS_setresuid | SYS_setresgid
        | SYS_setfsuid | SYS_setfsgid | SYS_setgroups => {
            crate::process::ids_changing();
            Action::Pass
        }
        // They may carry descriptors (SCM_RIGHTS) to another process.
        SYS_sendmsg | SYS_sendmmsg => {
            crate::intercept::descriptors_shared();
            match call.nr {
                // To a peer named by a path in the mount.
                SYS_sendmsg => answer_or_pass(crate::unix_sockets::sendmsg(m, a)),
                _ => Action::Pass,
            }
        }
        SYS_fcntl => match (m.file(fd_arg(a[0])), a[1] as i32) {
            (Some(_), F_DUPFD | F_DUPFD_CLOEXEC) => duplicate(m, call, fd_arg(a[0]), None),
            (Some(f), F_GETFL) => answer(Ok(i64::from(f_getfl(&f)))),
            (Some(f), F_SETFL) => {
                f.set_flags(a[2] as i32);
                answer(Ok(0))
            }
            (Some(_), F_SETFD | F_GETFD) => Action::Pass,
            (Some(f), F_SETLK | F_SETLKW | F_GETLK | F_OFD_SETLK | F_OFD_SETLKW | F_OFD_GETLK) => {
                answer(m.lock(&f, call.nr, a))
            }
            (Some(_), _) => answer(Err(ENOSYS)),
            (None, _) => Action::Pass,
        },
        SYS_getxattr | SYS_lgetxattr | SYS_fgetxattr | SYS_listxattr | SYS_llistxattr
        | SYS_flistxattr | SYS_setxattr | SYS_lsetxattr | SYS_fsetxattr | SYS_removexattr
        | SYS_lremovexattr | SYS_fremovexattr => {
            let by_fd = matches!(
                call.nr,
                SYS_fgetxattr | SYS_flistxattr | SYS_fsetxattr | SYS_fremovexattr
            );
            let follow = matches!(
                call.nr,
                SYS_getxattr | SYS_listxattr | SYS_setxattr | SYS_removexattr
            );
            let file;
            let path;
            let target = if by_fd {
                file = match m.file(fd_arg(a[0])) {
                    Some(f) => f,
                    None => return Action::Pass,
                };
                Target::File(&file)
            } else {
                path = match at(AT_FDCWD, a[0]) {
                    Some(p) => p,
                    None => return Action::Pass,
                };
                Target::Path(&path, follow)
            };
            let list = matches!(call.nr, SYS_listxattr | SYS_llistxattr | SYS_flistxattr);
            if list {
                return answer(m.getxattr(&target, None, UserBuf::new(a[1], a[2])));
            }
            let mut name = appmem::CPath::new();
            if !appmem::read_c_str(a[1], &mut name) {
                return answer(Err(EFAULT));
            }
            answer(match call.nr {
                SYS_getxattr | SYS_lgetxattr | SYS_fgetxattr => {
                    m.getxattr(&target, Some(&name), UserBuf::new(a[2], a[3]))
                }
                SYS_setxattr | SYS_lsetxattr | SYS_fsetxattr => appmem::bytes(a[2], a[3] as usize)
                    .and_then(|value| m.setxattr(&target, &name, &value, a[4] as i32)),
                _ => m.removexattr(&target, &name),
            })
        }
        SYS_chmod | SYS_fchmodat | SYS_fchmod | SYS_chown | SYS_lchown | SYS_fchownat
        | SYS_fchown => {
            let (target_fd, dirfd, path, follow) = match call.nr {
                SYS_chmod | SYS_chown => (None, AT_FDCWD, a[0], true),
                SYS_lchown => (None, AT_FDCWD, a[0], false),
                SYS_fchmodat => (None, fd_arg(a[0]), a[1], true),
                SYS_fchownat => (
                    None,
                    fd_arg(a[0]),
                    a[1],
                    a[4] as i32 & AT_SYMLINK_NOFOLLOW == 0,
                ),
                _ => (Some(fd_arg(a[0])), AT_FDCWD, 0, true),
            };
            let change = match call.nr {
                SYS_chmod | SYS_fchmod => SetAttr {
                    mode: Some(a[1] as u32 & 0o7777),
                    ..SetAttr::default()
                },
                SYS_fchmodat => SetAttr {
                    mode: Some(a[2] as u32 & 0o7777),
                    ..SetAttr::default()
                },
                SYS_fchownat => owner(a[2], a[3]),
                _ => owner(a[1], a[2]),
            };
            on_target(m, target_fd, dirfd, path, follow, |t| m.setattr(t, change))
        }
        SYS_FCHMODAT2 => {
            let nofollow = a[3] as i32 & AT_SYMLINK_NOFOLLOW != 0;
            let Some(p) = at(fd_arg(a[0]), a[1]) else {
                return Action::Pass;
            };
            let change = SetAttr {
                mode: Some(a[2] as u32 & 0o7777),
                ..SetAttr::default()
            };
            answer(m.stat(&p, !nofollow).and_then(|attr| {
                if attr.mode & S_IFMT == S_IFLNK {
                    // Linux has no modes of their own for symlinks.
                    return Err(EOPNOTSUPP);
                }
                m.setattr(&Target::Path(&p, !nofollow), change)
            }))
        }
        SYS_utimensat => {
            let flags = a[3] as i32;
            let change = match utimens_change(a[2]) {
                Ok(c) => c,
                Err(e) => return answer(Err(e)),
            };
            if a[1] == 0 {
                // futimens(fd).
                on_target(m, Some(fd_arg(a[0])), AT_FDCWD, 0, true, |t| {
                    m.setattr(t, change)
                })
            } else {
                on_target(
                    m,
                    None,
                    fd_arg(a[0]),
                    a[1],
                    flags & AT_SYMLINK_NOFOLLOW == 0,
                    |t| m.setattr(t, change),
                )
            }
        }
        SYS_execve | SYS_execveat => {
            let (dirfd, path, envp) = if call.nr == SYS_execve {
                (AT_FDCWD, a[0], 2)
            } else {
                (fd_arg(a[0]), a[1], 3)
            };
            match at(dirfd, path) {
                // A name that does not resolve gets the walk's error (a PATH
                // search through the mount goes on after ENOENT or EACCES),
                // a symlink out of the mount is followed (EXDEV: `hook` runs
                // the target), and running a program stored in the mount is
                // not served yet.
                Some(p) => {
                    let follow = call.nr == SYS_execve || a[4] as i32 & AT_SYMLINK_NOFOLLOW == 0;
                    // EACCES where the kernel would refuse to run it (no
                    // execute permission; X_OK passes a directory, which
                    // the kernel refuses too, so that one is ENOSYS here).
                    answer(m.access(&p, X_OK, follow).and(Err(ENOSYS)))
                }
                None => exec(m, call, envp),
            }
        }
        SYS_mknod | SYS_mknodat => {
            let (dirfd, path, mode, dev) = if call.nr == SYS_mknod {
                (AT_FDCWD, a[0], a[1] as u32, a[2])
            } else {
                (fd_arg(a[0]), a[1], a[2] as u32, a[3])
            };
            match at(dirfd, path) {
                Some(p) => answer(m.mknod(&p, mode, dev as u32)),
                None => Action::Pass,
            }
        }
        SYS_link | SYS_linkat => {
            let (d1, p1, d2, p2, follow) = if call.nr == SYS_link {
                (AT_FDCWD, a[0], AT_FDCWD, a[1], false)
            } else {
                (
                    fd_arg(a[0]),
                    a[1],
                    fd_arg(a[2]),
                    a[3],
                    a[4] as i32 & AT_SYMLINK_FOLLOW != 0,
                )
            };
            match (at(d1, p1), at(d2, p2)) {
                (None, None) => Action::Pass,
                (from, to) => two_paths(m, (d1, p1, from), (d2, p2, to), TwoPathOp::Link(follow)),
            }
        }
        SYS_fallocate => match m.file(fd_arg(a[0])) {
            Some(f) => answer(m.fallocate(&f, a[1] as i32, a[2] as i64, a[3] as i64)),
            None => Action::Pass,
        },
        SYS_statfs | SYS_fstatfs => {
            let (fd, path, buf) = if call.nr == SYS_statfs {
                (None, a[0], a[1])
            } else {
                (Some(fd_arg(a[0])), 0, a[1])
            };
            on_target(m, fd, AT_FDCWD, path, true, |t| {
                m.statfs(t)
                    .and_then(|st| appmem::put(buf, &kabi::statfs_of(&st)))
                    .map(|()| 0)
            })
        }
        SYS_utime | SYS_utimes | SYS_futimesat => {
            let (dirfd, path, times) = if call.nr == SYS_futimesat {
                (fd_arg(a[0]), a[1], a[2])
            } else {
                (AT_FDCWD, a[0], a[1])
            };
            let change = match old_times(times, call.nr == SYS_utime) {
                Ok(c) => c,
                Err(e) => return answer(Err(e)),
            };
            on_target(m, None, dirfd, path, true, |t| m.setattr(t, change))
        }
        // Path calls on the mount not served yet.
        SYS_inotify_add_watch | SYS_name_to_handle_at => {
            let (dirfd, path) = match call.nr {
                SYS_name_to_handle_at => (fd_arg(a[0]), a[1]),
                SYS_inotify_add_watch => (AT_FDCWD, a[1]),
                _ => (AT_FDCWD, a[0]),
            };
            match at(dirfd, path) {
                Some(_) => answer(Err(ENOSYS)),
                None => Action::Pass,
            }
        }
        // Descriptor calls on the mount's files not served yet.
        SYS_mmap if a[3] as i32 & MAP_ANONYMOUS == 0 => match m.file(fd_arg(a[4])) {
            Some(f) => {
                answer(m.map_copy(fd_arg(a[4]), &f, a[0], a[1], a[2] as i32, a[3] as i32, a[5]))
            }
            None => Action::Pass,
        },
        // What the kernel does for any descriptor (fs/ioctl.c) it does for
        // the placeholder too, close-on-exec being the descriptor's own; a
        // file's own ioctls are not served (as for a FUSE filesystem without
        // ioctl), which programs know as ENOTTY.
        SYS_ioctl => match (m.file(fd_arg(a[0])), a[1]) {
            (Some(_), FIOCLEX | FIONCLEX) => Action::Pass,
            (Some(f), FIONBIO | FIOASYNC) => answer(appmem::bytes(a[2], 4).map(|v| {
                let on = i32::from_ne_bytes(v[..4].try_into().expect("4 bytes")) != 0;
                let bit = if a[1] == FIONBIO { O_NONBLOCK } else { O_ASYNC };
                f.set_flags(if on {
                    f.flags() | bit
                } else {
                    f.flags() & !bit
                });
                0
            })),
            (Some(_), _) => answer(Err(ENOTTY)),
            (None, _) => Action::Pass,
        },
        // Unix sockets at paths in the mount (see `unix_sockets`).
        SYS_bind => answer_or_pass(crate::unix_sockets::bind(m, fd_arg(a[0]), a[1], a[2])),
        SYS_connect => answer_or_pass(crate::unix_sockets::connect(m, fd_arg(a[0]), a[1], a[2])),
        SYS_sendto if a[4] != 0 => answer_or_pass(crate::unix_sockets::sendto(m, a)),
        SYS_getsockname | SYS_getpeername | SYS_accept | SYS_accept4 => {
            returning_address(call, 1, matches!(call.nr, SYS_accept | SYS_accept4))
        }
        SYS_recvfrom if a[4] != 0 => returning_address(call, 4, false),
        _ => Action::Pass,
    }
}

/// A call that writes a socket address at argument `at` (its length's
/// address next to it): see `unix_sockets::returning_address`.
fn returning_address(call: &Syscall, at: usize, accepts: bool) -> Action {
    let a = call.args;
    let made = crate::unix_sockets::returning_address(a[at], a[at + 1], accepts, |addr, len| {
        let mut args = a;
        (args[at], args[at + 1]) = (addr, len);
        intercept::call_as_program(call.nr, args)
    });
    made.map_or(Action::Pass, Action::Return)
}

fn answer_or_pass(r: Option<SysResult>) -> Action {
    r.map_or(Action::Pass, answer)
}

/// fchmodat2(2) (Linux 6.6), not in every libc's list yet.
const SYS_FCHMODAT2: i64 = 452;

fn f_getfl(f: &crate::vfs::OpenFile) -> i32 {
    f.flags() & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC | libc::O_CLOEXEC)
}

/// chdir/fchdir the kernel serves: on success the virtual cwd is left.
fn kernel_chdir(m: &VirtualMount, call: &Syscall) -> Action {
    let ret = raw_syscall(call.nr, call.args);
    if ret == 0 {
        m.kernel_cwd_changed();
    }
    Action::Return(ret)
}

/// dup, dup2, dup3, F_DUPFD: the kernel copies the descriptor (the
/// placeholder, for the mount's files), the table follows.
fn duplicate(m: &VirtualMount, call: &Syscall, old: i32, new: Option<i32>) -> Action {
    let involved = m.file(old).is_some() || new.is_some_and(|n| m.file(n).is_some());
    if !involved {
        return Action::Pass;
    }
    if new == Some(old) {
        return Action::Pass;
    }
    let ret = raw_syscall(call.nr, call.args);
    if ret >= 0 {
        m.duplicated(old, ret as i32);
    }
    Action::Return(ret)
}

/// readv/writev and their positional forms, one segment after another.
fn vectored(m: &VirtualMount, f: &crate::vfs::OpenFile, call: &Syscall) -> Action {
    let a = call.args;
    let write = matches!(
        call.nr,
        libc::SYS_writev | libc::SYS_pwritev | libc::SYS_pwritev2
    );
    let positional = !matches!(call.nr, libc::SYS_readv | libc::SYS_writev);
    let mut at = positional.then_some(a[3]);
    if at == Some(u64::MAX) {
        // preadv2/pwritev2 with offset -1: the file's position.
        at = None;
    }
    let count = (a[2] as usize).min(1024);
    let iov = match appmem::bytes(a[1], count * 16) {
        Ok(iov) => iov,
        Err(e) => return answer(Err(e)),
    };
    let mut total = 0i64;
    for seg in iov.chunks_exact(16) {
        let base = u64::from_ne_bytes(seg[..8].try_into().expect("8 bytes"));
        let len = u64::from_ne_bytes(seg[8..].try_into().expect("8 bytes")) as usize;
        let fd = fd_arg(a[0]);
        let r = if write {
            appmem::bytes(base, len).and_then(|data| m.write(fd, f, &data, at))
        } else {
            m.read(fd, f, UserBuf::new(base, len as u64), at)
        };
        match r {
            Ok(n) => {
                total += n;
                if let Some(off) = at.as_mut() {
                    *off += n as u64;
                }
                if (n as usize) < len {
                    break;
                }
            }
            Err(e) if total == 0 => return answer(Err(e)),
            Err(_) => break,
        }
    }
    answer(Ok(total))
}

/// Run `op` on what a path call (dirfd, path) or a descriptor call names,
/// if that is in the mount.
fn on_target(
    m: &VirtualMount,
    fd: Option<i32>,
    dirfd: i32,
    path: u64,
    follow: bool,
    op: impl FnOnce(&Target<'_>) -> SysResult,
) -> Action {
    if let Some(fd) = fd {
        return match m.file(fd) {
            Some(f) => answer(op(&Target::File(&f))),
            None => Action::Pass,
        };
    }
    let mut p = appmem::CPath::new();
    if !appmem::read_c_str(path, &mut p) {
        return Action::Pass;
    }
    match m.place(dirfd, &p) {
        Place::Inside(p) => answer(op(&Target::Path(&p, follow))),
        Place::Outside => Action::Pass,
    }
}

/// chown's owner and group; -1 leaves one as it is.
fn owner(uid: u64, gid: u64) -> SetAttr {
    let keep = |v: u64| (v as u32 != u32::MAX).then_some(v as u32);
    SetAttr {
        uid: keep(uid),
        gid: keep(gid),
        ..SetAttr::default()
    }
}

/// utime's `struct utimbuf` (seconds) or utimes/futimesat's two
/// timevals (seconds, microseconds); NULL: both now.
fn old_times(addr: u64, utimbuf: bool) -> Result<SetAttr, i32> {
    let mut change = SetAttr::default();
    if addr == 0 {
        change.atime = Some(TimeOrNow::Now);
        change.mtime = Some(TimeOrNow::Now);
        return Ok(change);
    }
    let len = if utimbuf { 16 } else { 32 };
    let raw = appmem::bytes(addr, len)?;
    let field = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let at = |sec: i64, usec: i64| -> Result<Option<TimeOrNow>, i32> {
        if !(0..1_000_000).contains(&usec) {
            return Err(libc::EINVAL);
        }
        Ok(Some(TimeOrNow::Specific(Timespec {
            sec,
            nsec: (usec * 1000) as u32,
        })))
    };
    if utimbuf {
        change.atime = at(field(0), 0)?;
        change.mtime = at(field(1), 0)?;
    } else {
        change.atime = at(field(0), field(1))?;
        change.mtime = at(field(2), field(3))?;
    }
    Ok(change)
}

/// utimensat's two timespecs (NULL: both now; UTIME_OMIT, UTIME_NOW).
fn utimens_change(addr: u64) -> Result<SetAttr, i32> {
    let mut change = SetAttr::default();
    if addr == 0 {
        change.atime = Some(TimeOrNow::Now);
        change.mtime = Some(TimeOrNow::Now);
        return Ok(change);
    }
    let raw = appmem::bytes(addr, 32)?;
    let field = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let one = |sec: i64, nsec: i64| match nsec {
        libc::UTIME_OMIT => None,
        libc::UTIME_NOW => Some(TimeOrNow::Now),
        n => Some(TimeOrNow::Specific(Timespec {
            sec,
            nsec: n as u32,
        })),
    };
    change.atime = one(field(0), field(1));
    change.mtime = one(field(2), field(3));
    Ok(change)
}
