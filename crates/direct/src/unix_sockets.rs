//! Unix sockets at paths in the mount.
//!
//! The kernel binds a unix socket to an inode of a filesystem it serves
//! (on a FUSE mount: the node MKNOD made, fs/fuse/dir.c); the mount's
//! nodes are not the kernel's. So `bind` does what the kernel does on a
//! FUSE mount, in two steps of ours: it makes the socket's node in the
//! mount (mknod S_IFSOCK, mode 0777 less the umask, EADDRINUSE where the
//! name exists), then binds the real socket at a path of the kernel's
//! named by that node's inode number, in a directory of the user's runtime
//! directory kept for this run (one run is one mount). `connect` (and
//! `sendto`/`sendmsg` to a named peer) to a path in the mount looks the
//! node up as the kernel would (ENOENT, ECONNREFUSED for a node that is
//! not a socket or has no listener, EACCES without write permission) and
//! goes to that path. A node renamed or linked elsewhere in the mount
//! keeps its inode number, so it stays reachable as the kernel's does.
//!
//! The addresses the kernel hands back (`getsockname`, `getpeername`,
//! `accept`, `recvfrom`) name those paths; a link beside each socket
//! holds the path its `bind` was given, which replaces it, as the kernel
//! returns a bound path as it was given, in every process.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use crate::appmem;
use crate::intercept::raw_syscall;
use crate::vfs::{Place, SysResult, VirtualMount};

/// `struct sockaddr_un`: the family (2 bytes) and 108 of path.
const SUN_PATH: usize = 108;
const SOCKADDR_UN: usize = 2 + SUN_PATH;

/// What tells one run from another (`fusebox run` sets it; every process
/// of the run carries it).
pub const RUN_VAR: &str = "FUSEBOX_DIRECT_RUN";

/// This run's socket directory (its path; made by the first bind).
static DIR: OnceLock<Option<Vec<u8>>> = OnceLock::new();
/// What names this mount (set by `serve`).
static IDENTITY: OnceLock<Vec<u8>> = OnceLock::new();

/// Name this mount's socket directory by `identity`: its place and its
/// run (two runs are two mounts, whose inode numbers mean different
/// nodes, as two kernel mounts' sockets are not each other's).
pub(crate) fn set_identity(identity: Vec<u8>) {
    let _ = IDENTITY.set(identity);
}

/// The directory's path: in the user's runtime directory (None without
/// an identity: a program serving a mount to itself through the library).
fn dir() -> Option<&'static [u8]> {
    DIR.get_or_init(|| {
        let identity = IDENTITY.get()?;
        let uid = rustix::process::geteuid().as_raw();
        // FNV-1a: the same in every process and build.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in identity {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
        let dir = fusebox::stats::runtime_dir_for(uid).join(format!("direct-sockets-{h:016x}"));
        Some(dir.as_os_str().as_bytes().to_vec())
    })
    .as_deref()
}

/// The directory, made if it is not there yet, private to the user (as
/// the runtime directory it is in, which is refused if another user made
/// it).
fn made_dir() -> Option<&'static [u8]> {
    let dir = dir()?;
    fusebox::stats::ensure_runtime_dir().ok()?;
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .create(std::ffi::OsStr::from_bytes(dir))
    {
        Ok(()) => Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(dir),
        Err(_) => None,
    }
}

/// The kernel's path of the socket bound to inode `ino`, and its link
/// holding the path given to bind.
fn paths_of(ino: u64, make: bool) -> Option<(Vec<u8>, Vec<u8>)> {
    let dir = if make { made_dir()? } else { dir()? };
    let socket = [dir, format!("/{ino}").as_bytes()].concat();
    let name = [socket.as_slice(), b".name"].concat();
    (socket.len() < SUN_PATH).then_some((socket, name))
}

/// A sockaddr_un the application passed: its path, if it is a unix
/// address with a path (not unnamed, not abstract).
fn unix_path(addr: u64, len: u64) -> Result<Option<Vec<u8>>, i32> {
    if addr == 0 || len < 3 {
        return Ok(None);
    }
    let raw = appmem::bytes(addr, (len as usize).min(SOCKADDR_UN))?;
    if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] == 0 {
        return Ok(None);
    }
    // The kernel's unix_validate_addr.
    if len as usize > SOCKADDR_UN {
        return Err(libc::EINVAL);
    }
    let path = &raw[2..];
    let end = path.iter().position(|&c| c == 0).unwrap_or(path.len());
    Ok(Some(path[..end].to_vec()))
}

fn sockaddr_of(path: &[u8]) -> Result<[u8; SOCKADDR_UN], i32> {
    if path.len() >= SUN_PATH {
        return Err(libc::ENAMETOOLONG);
    }
    let mut sa = [0u8; SOCKADDR_UN];
    sa[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
    sa[2..2 + path.len()].copy_from_slice(path);
    Ok(sa)
}

/// A unix address in the mount: the path as the application gave it,
/// and where it is in the mount.
struct InMount {
    given: Vec<u8>,
    path: Vec<u8>,
}

/// Where a unix address the application passed points: in the mount,
/// or (None) elsewhere or no path at all.
fn place(m: &VirtualMount, addr: u64, len: u64) -> Result<Option<InMount>, i32> {
    let Some(given) = unix_path(addr, len)? else {
        return Ok(None);
    };
    Ok(match m.place(libc::AT_FDCWD, &given) {
        Place::Inside(path) => Some(InMount { given, path }),
        Place::Outside => None,
    })
}

/// How many times a walk may leave the mount and come back in (the
/// kernel's limit on links in a walk).
const MAX_ESCAPES: usize = 40;

/// `op` on `path`, followed out of the mount and back in while it
/// answers EXDEV (the walk left the mount).
fn settled<T>(
    m: &VirtualMount,
    mut path: Vec<u8>,
    mut op: impl FnMut(&[u8]) -> Result<T, i32>,
) -> Result<Result<T, Vec<u8>>, i32> {
    for _ in 0..MAX_ESCAPES {
        match op(&path) {
            Err(libc::EXDEV) => {
                let out = crate::vfs::take_escaped().ok_or(libc::EXDEV)?;
                match m.place(libc::AT_FDCWD, &out) {
                    Place::Inside(p) => path = p,
                    Place::Outside => return Ok(Err(out)),
                }
            }
            r => return r.map(Ok),
        }
    }
    Err(libc::ELOOP)
}

/// The socket type of `fd` (SO_TYPE), or the kernel's error.
fn socket_type(fd: i32) -> Result<i32, i32> {
    let mut ty: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as u32;
    let r = raw_syscall(
        libc::SYS_getsockopt,
        [
            fd as u64,
            libc::SOL_SOCKET as u64,
            libc::SO_TYPE as u64,
            &mut ty as *mut i32 as u64,
            &mut len as *mut u32 as u64,
            0,
        ],
    );
    if r < 0 {
        return Err(-r as i32);
    }
    Ok(ty)
}

/// Whether `fd` is a unix socket bound to an address already.
fn unix_and_bound(fd: i32) -> Result<(bool, bool), i32> {
    let mut sa = [0u8; SOCKADDR_UN];
    let mut sa_len = SOCKADDR_UN as u32;
    let r = raw_syscall(
        libc::SYS_getsockname,
        [
            fd as u64,
            sa.as_mut_ptr() as u64,
            &mut sa_len as *mut u32 as u64,
            0,
            0,
            0,
        ],
    );
    if r < 0 {
        return Err(-r as i32);
    }
    Ok((
        u16::from_ne_bytes([sa[0], sa[1]]) == libc::AF_UNIX as u16,
        sa_len > 2,
    ))
}

/// bind(2) to a path in the mount; None where the call is the kernel's.
pub(crate) fn bind(m: &VirtualMount, fd: i32, addr: u64, len: u64) -> Option<SysResult> {
    let at = match place(m, addr, len) {
        Ok(p) => p?,
        Err(e) => return Some(Err(e)),
    };
    let (unix, bound) = match unix_and_bound(fd) {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    if !unix {
        // Another family's socket: the kernel refuses the address alone.
        return None;
    }
    let made = settled(m, at.path, |path| {
        // The kernel's order (unix_bind_bsd): the name is made first
        // (EADDRINUSE where it exists), then a socket already bound is
        // EINVAL, and no node is left.
        if bound {
            return Err(match m.stat(path, false) {
                Ok(_) => libc::EADDRINUSE,
                Err(libc::EXDEV) => libc::EXDEV,
                Err(_) => libc::EINVAL,
            });
        }
        match m.mknod(path, libc::S_IFSOCK | 0o777, 0) {
            Ok(_) => Ok(path.to_vec()),
            Err(libc::EEXIST) => Err(libc::EADDRINUSE),
            Err(e) => Err(e),
        }
    });
    Some(match made {
        Ok(Ok(path)) => bind_to_node(m, fd, &at.given, &path),
        // Out of the mount: the kernel binds there.
        Ok(Err(outside)) => sockaddr_of(&outside).and_then(|sa| {
            result_of(raw_syscall(
                libc::SYS_bind,
                [fd as u64, sa.as_ptr() as u64, SOCKADDR_UN as u64, 0, 0, 0],
            ))
        }),
        Err(e) => Err(e),
    })
}

fn result_of(r: i64) -> SysResult {
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok(r)
    }
}

/// Binds `fd` at our path of the socket node just made at `path`.
fn bind_to_node(m: &VirtualMount, fd: i32, given: &[u8], path: &[u8]) -> SysResult {
    let bound = (|| {
        let ino = m.stat(path, false)?.ino;
        let (socket, name) = paths_of(ino, true).ok_or(libc::EPERM)?;
        let (socket_c, name_c) = (cstring(&socket)?, cstring(&name)?);
        // A node just made: what the directory holds under its number
        // is a socket of a node that is gone.
        raw_syscall(libc::SYS_unlink, [socket_c.as_ptr() as u64, 0, 0, 0, 0, 0]);
        raw_syscall(libc::SYS_unlink, [name_c.as_ptr() as u64, 0, 0, 0, 0, 0]);
        let given_c = cstring(given)?;
        raw_syscall(
            libc::SYS_symlink,
            [given_c.as_ptr() as u64, name_c.as_ptr() as u64, 0, 0, 0, 0],
        );
        let sa = sockaddr_of(&socket)?;
        let r = raw_syscall(
            libc::SYS_bind,
            [fd as u64, sa.as_ptr() as u64, SOCKADDR_UN as u64, 0, 0, 0],
        );
        if r < 0 {
            raw_syscall(libc::SYS_unlink, [name_c.as_ptr() as u64, 0, 0, 0, 0, 0]);
            return Err(-r as i32);
        }
        Ok(0)
    })();
    if bound.is_err() {
        // As the kernel: no node is left by a bind that failed.
        let _ = m.unlink(path, false);
    }
    bound
}

fn cstring(bytes: &[u8]) -> Result<CString, i32> {
    CString::new(bytes).map_err(|_| libc::EINVAL)
}

/// The kernel's address of the socket at `path` in the mount, for a
/// connect or a send to it, and whether it is one of ours.
fn peer_address(m: &VirtualMount, path: Vec<u8>) -> Result<([u8; SOCKADDR_UN], bool), i32> {
    // The kernel's order (unix_find_bsd): the walk, write permission,
    // then whether the node is a socket.
    let found = settled(m, path, |path| {
        let attr = m.stat(path, true)?;
        m.access(path, libc::W_OK, true)?;
        Ok(attr)
    })?;
    let attr = match found {
        Ok(attr) => attr,
        // A link out of the mount: the kernel's path it leads to.
        Err(outside) => return Ok((sockaddr_of(&outside)?, false)),
    };
    if attr.mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(libc::ECONNREFUSED);
    }
    let (socket, _) = paths_of(attr.ino, false).ok_or(libc::ECONNREFUSED)?;
    Ok((sockaddr_of(&socket)?, true))
}

/// The kernel says ENOENT for our path when no socket was ever bound to
/// the node here; for the node, the kernel would say ECONNREFUSED.
fn refused_if_absent(r: i64, ours: bool) -> SysResult {
    match r {
        r if ours && r == -(libc::ENOENT as i64) => Err(libc::ECONNREFUSED),
        r => result_of(r),
    }
}

/// connect(2) to a path in the mount.
pub(crate) fn connect(m: &VirtualMount, fd: i32, addr: u64, len: u64) -> Option<SysResult> {
    let at = match place(m, addr, len) {
        Ok(p) => p?,
        Err(e) => return Some(Err(e)),
    };
    if !matches!(unix_and_bound(fd), Ok((true, _))) {
        return None;
    }
    Some(peer_address(m, at.path).and_then(|(sa, ours)| {
        refused_if_absent(
            raw_syscall(
                libc::SYS_connect,
                [fd as u64, sa.as_ptr() as u64, SOCKADDR_UN as u64, 0, 0, 0],
            ),
            ours,
        )
    }))
}

/// Whether a send with an address on `fd` goes to that address: only a
/// datagram socket's does (a stream socket refuses an address before
/// looking at it, which the kernel answers alone).
fn sends_to_address(fd: i32) -> bool {
    matches!(unix_and_bound(fd), Ok((true, _))) && socket_type(fd) == Ok(libc::SOCK_DGRAM)
}

/// sendto(2) naming a peer in the mount.
pub(crate) fn sendto(m: &VirtualMount, a: [u64; 6]) -> Option<SysResult> {
    let at = match place(m, a[4], a[5]) {
        Ok(p) => p?,
        Err(e) => return Some(Err(e)),
    };
    if !sends_to_address(a[0] as i32) {
        return None;
    }
    Some(peer_address(m, at.path).and_then(|(sa, ours)| {
        refused_if_absent(
            raw_syscall(
                libc::SYS_sendto,
                [
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    sa.as_ptr() as u64,
                    SOCKADDR_UN as u64,
                ],
            ),
            ours,
        )
    }))
}

/// sendmsg(2) naming a peer in the mount: the same message header with
/// the kernel's address in it.
pub(crate) fn sendmsg(m: &VirtualMount, a: [u64; 6]) -> Option<SysResult> {
    // struct msghdr: msg_name (8), msg_namelen (4, padded to 8), then
    // the rest (iov, iovlen, control, controllen, flags): 56 bytes.
    let header = appmem::bytes(a[1], 56).ok()?;
    let name = u64::from_ne_bytes(header[..8].try_into().expect("8 bytes"));
    let name_len = u32::from_ne_bytes(header[8..12].try_into().expect("4 bytes"));
    let at = match place(m, name, u64::from(name_len)) {
        Ok(p) => p?,
        Err(e) => return Some(Err(e)),
    };
    if !sends_to_address(a[0] as i32) {
        return None;
    }
    Some(peer_address(m, at.path).and_then(|(sa, ours)| {
        let mut with_ours = header;
        with_ours[..8].copy_from_slice(&(sa.as_ptr() as u64).to_ne_bytes());
        with_ours[8..12].copy_from_slice(&(SOCKADDR_UN as u32).to_ne_bytes());
        refused_if_absent(
            raw_syscall(
                libc::SYS_sendmsg,
                [a[0], with_ours.as_ptr() as u64, a[2], 0, 0, 0],
            ),
            ours,
        )
    }))
}

/// Room for any socket address (`struct sockaddr_storage`).
const SOCKADDR_STORAGE: usize = 128;

/// `call(addr, len_at)`, a call that writes a socket address (accept,
/// accept4, getsockname, getpeername, recvfrom), made with a buffer of
/// ours; the address is then one of our paths replaced by the path its
/// bind was given, copied to the application's `addr` cut to the room
/// its `len_at` said, with the full length written back, as the kernel
/// does. None where the kernel may take the call as it is (no address
/// asked for, or a length the kernel refuses by itself). `accepts`: the
/// call returns a new descriptor, closed again if the address cannot
/// be given (the kernel's accept fails with EFAULT then too).
pub(crate) fn returning_address(
    addr: u64,
    len_at: u64,
    accepts: bool,
    call: impl FnOnce(u64, u64) -> i64,
) -> Option<i64> {
    if addr == 0 || len_at == 0 {
        return None;
    }
    let room = i32::from_ne_bytes(appmem::bytes(len_at, 4).ok()?[..4].try_into().ok()?);
    if room < 0 {
        return None;
    }
    let room = room as usize;
    let mut buf = [0u8; SOCKADDR_STORAGE];
    let mut len = SOCKADDR_STORAGE as u32;
    let r = call(buf.as_mut_ptr() as u64, &mut len as *mut u32 as u64);
    if r < 0 {
        return Some(r);
    }
    let got = (len as usize).min(SOCKADDR_STORAGE);
    let (bytes, full) = match given_path_for(&buf[..got]) {
        Some(sa) => {
            let full = 2 + sa[2..].iter().position(|&c| c == 0).unwrap_or(SUN_PATH) + 1;
            (sa[..full.min(SOCKADDR_UN)].to_vec(), full)
        }
        None => (buf[..got].to_vec(), len as usize),
    };
    let copied = appmem::write(addr, &bytes[..bytes.len().min(room)])
        .and_then(|()| appmem::write(len_at, &(full as u32).to_ne_bytes()));
    if copied.is_err() {
        if accepts {
            raw_syscall(libc::SYS_close, [r as u64, 0, 0, 0, 0, 0]);
        }
        return Some(-(libc::EFAULT as i64));
    }
    Some(r)
}

/// The address the application is given for the kernel's `raw`: one of
/// our paths becomes the path its bind was given; None for any other.
fn given_path_for(raw: &[u8]) -> Option<[u8; SOCKADDR_UN]> {
    let dir = dir()?;
    if raw.len() < 3 || u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 {
        return None;
    }
    let path = &raw[2..];
    let path = &path[..path.iter().position(|&c| c == 0).unwrap_or(path.len())];
    if !path.starts_with(dir) || path.get(dir.len()) != Some(&b'/') {
        return None;
    }
    let name = cstring(&[path, b".name"].concat()).ok()?;
    let mut given = [0u8; SUN_PATH];
    let n = raw_syscall(
        libc::SYS_readlink,
        [
            name.as_ptr() as u64,
            given.as_mut_ptr() as u64,
            SUN_PATH as u64,
            0,
            0,
            0,
        ],
    );
    if n <= 0 || n as usize >= SUN_PATH {
        return None;
    }
    sockaddr_of(&given[..n as usize]).ok()
}
