//! Getting a /dev/fuse fd attached to a mountpoint, and letting go of it.
//!
//! As root fusebox calls mount(2) itself; otherwise it asks the setuid
//! helper fusermount3, which passes the device fd back over a socket.

mod options;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

pub use options::{FsOptions, MountOptions, Options, TimeoutOverrides};

use crate::error::Error;

const FUSECTL_DIR: &str = "/sys/fs/fuse/connections";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Syscall,
    Fusermount,
    /// Made by a supervisor and handed to this server: unmounted only when
    /// asked (`unmount`), never on drop, since a server that dies or exits
    /// for an upgrade must leave the mount to the next one.
    Adopted,
}

/// A live FUSE mount and the device fd that serves it.
#[derive(Debug)]
pub struct Mount {
    mountpoint: PathBuf,
    device: OwnedFd,
    method: Method,
    mounted: AtomicBool,
    identity: MountIdentity,
}

/// What tells our mount from one made at the same path after ours went
/// away. Connection numbers and mount ids are both reused at once (lowest
/// free number), so the unique mount id (Linux 6.8+) is what decides; the
/// connection number is the fallback on older kernels.
#[derive(Debug)]
struct MountIdentity {
    unique_id: Option<u64>,
    connection: Option<u32>,
}

impl MountIdentity {
    /// Whether the mount on top at `mountpoint` is still the one we made.
    /// When that cannot be told (no /proc, statx failing), answer yes: the
    /// old behaviour, unmounting by path, beats leaving our mount behind.
    fn is_on_top_at(&self, mountpoint: &Path) -> bool {
        if let Some(id) = self.unique_id {
            // With nothing mounted there, statx reports the parent's mount.
            return unique_mount_id(mountpoint).is_none_or(|now| now == id);
        }
        match (self.connection, top_mount_at(mountpoint)) {
            (Some(ours), Some(top)) => top == TopMount::Fuse(ours),
            _ => true,
        }
    }
}

impl Mount {
    /// Mount at `mountpoint` with `opts`.
    pub fn new(mountpoint: &Path, opts: &MountOptions) -> Result<Mount, Error> {
        let mountpoint = std::fs::canonicalize(mountpoint)
            .map_err(|_| Error::BadMountpoint(mountpoint.into()))?;
        // What libfuse accepts: a directory, or a regular file for a
        // filesystem whose root is one (a disk image exported as one file,
        // mounted on the image's own path). The kernel then requires the
        // root's type to match the mountpoint's (rootmode below).
        let kind = std::fs::metadata(&mountpoint)
            .map_err(|_| Error::BadMountpoint(mountpoint.clone()))?
            .file_type();
        if !kind.is_dir() && !kind.is_file() {
            return Err(Error::BadMountpoint(mountpoint));
        }
        let (device, method) = if rustix::process::geteuid().is_root() {
            (mount_syscall(&mountpoint, opts)?, Method::Syscall)
        } else {
            (mount_fusermount(&mountpoint, opts)?, Method::Fusermount)
        };
        let identity = MountIdentity {
            unique_id: unique_mount_id(&mountpoint),
            connection: connection_id(&mountpoint),
        };
        Ok(Mount {
            mountpoint,
            device,
            method,
            mounted: AtomicBool::new(true),
            identity,
        })
    }

    /// A mount a supervisor made, served through `device` (handed over).
    pub fn adopt(mountpoint: &Path, device: OwnedFd) -> Mount {
        Mount {
            mountpoint: mountpoint.to_path_buf(),
            device,
            method: Method::Adopted,
            mounted: AtomicBool::new(true),
            identity: MountIdentity {
                unique_id: unique_mount_id(mountpoint),
                connection: connection_id(mountpoint),
            },
        }
    }

    /// Where the filesystem is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The session's /dev/fuse fd.
    pub fn device(&self) -> &OwnedFd {
        &self.device
    }

    /// Detach the mount (lazily: open files keep working until closed, and
    /// the daemon's workers see ENODEV once the last one goes).
    pub fn unmount(&self) -> Result<(), Error> {
        if !self.mounted.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        // Unmounting goes by path, and once someone else has unmounted us
        // (umount, fusermount -u) the path may already hold a new mount,
        // e.g. the next daemon's: unmount only what is still ours.
        if !self.identity.is_on_top_at(&self.mountpoint) {
            tracing::info!(
                mountpoint = %self.mountpoint.display(),
                "already unmounted (the path may hold another mount now); leaving it alone"
            );
            return Ok(());
        }
        unmount_path(&self.mountpoint, self.method == Method::Fusermount)
    }

    /// False once `unmount` or `disown` has run: dropping the `Mount` then
    /// leaves the mount alone.
    pub fn is_mounted(&self) -> bool {
        self.mounted.load(Ordering::Acquire)
    }

    /// The fusectl connection number (the mount's device minor), read from
    /// mountinfo so that no request is sent to the mount itself.
    pub fn connection_id(&self) -> Option<u32> {
        // The number taken at mount time: after a lazy unmount our mount is
        // gone from mountinfo (its connection lives on while requests do),
        // and the path may hold someone else's mount by then.
        self.identity
            .connection
            .or_else(|| connection_id(&self.mountpoint))
    }

    fn known_connection_id(&self) -> Result<u32, Error> {
        self.connection_id()
            .ok_or_else(|| Error::Io(io::Error::other("mount not found in mountinfo")))
    }

    /// Set the mount's readahead window. The kernel takes INIT's
    /// max_readahead only as a cap on its own default (128 KiB), so a larger
    /// window goes through the mount's backing device in sysfs, named after
    /// the anonymous device FUSE mounts on (major 0).
    pub fn set_read_ahead(&self, bytes: u32) -> Result<(), Error> {
        let id = self.known_connection_id()?;
        let path = PathBuf::from(format!("/sys/class/bdi/0:{id}/read_ahead_kb"));
        std::fs::write(&path, format!("{}\n", bytes / 1024))
            .map_err(|source| Error::ReadAhead { path, source })
    }

    /// Abort the connection: every pending and future request fails with
    /// ENOTCONN, and the workers see ENODEV. The last resort against a hung
    /// daemon.
    pub fn abort(&self) -> Result<(), Error> {
        abort_connection(self.known_connection_id()?)
    }
}

impl Mount {
    /// Leave the mount in place when this is dropped: only the device is
    /// closed, and the kernel then fails the mount's requests
    /// (ENOTCONN) until someone unmounts it. What libfuse's
    /// fuse_session_destroy does for a program that did not unmount.
    pub fn disown(&self) {
        self.mounted.store(false, Ordering::Release);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.method == Method::Adopted {
            return;
        }
        if let Err(e) = self.unmount() {
            tracing::warn!(error = %e, "unmount on drop failed");
        }
    }
}

fn mount_syscall(mountpoint: &Path, opts: &MountOptions) -> Result<OwnedFd, Error> {
    use rustix::mount::MountFlags;
    let device = rustix::fs::open(
        "/dev/fuse",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::OpenDevice { source: e.into() })?;
    let st = rustix::fs::stat(mountpoint).map_err(|e| Error::Mount {
        mountpoint: mountpoint.into(),
        source: e.into(),
    })?;
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        device.as_raw_fd(),
        st.st_mode & libc::S_IFMT,
        opts.user_id
            .unwrap_or_else(|| rustix::process::geteuid().as_raw()),
        opts.group_id
            .unwrap_or_else(|| rustix::process::getegid().as_raw())
    );
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    if opts.default_permissions {
        data.push_str(",default_permissions");
    }
    if let Some(m) = opts.max_read {
        data.push_str(&format!(",max_read={m}"));
    }
    if let Some(b) = opts.blksize {
        data.push_str(&format!(",blksize={b}"));
    }
    let mut flags = MountFlags::empty();
    for (on, flag) in [
        (opts.read_only, MountFlags::RDONLY),
        (opts.nosuid, MountFlags::NOSUID),
        (opts.nodev, MountFlags::NODEV),
        (opts.noexec, MountFlags::NOEXEC),
        (opts.noatime, MountFlags::NOATIME),
        (opts.sync, MountFlags::SYNCHRONOUS),
        (opts.dirsync, MountFlags::DIRSYNC),
    ] {
        if on {
            flags |= flag;
        }
    }
    let fstype = match &opts.subtype {
        Some(s) => format!("fuse.{s}"),
        None => "fuse".to_string(),
    };
    let source = opts.fsname.clone().unwrap_or_else(|| "fusebox".into());
    // What the user chose, for the error if the kernel refuses it (the fd
    // and root mode are ours).
    let chosen = data
        .split(',')
        .filter(|o| !o.starts_with("fd=") && !o.starts_with("rootmode="))
        .collect::<Vec<_>>()
        .join(",");
    let data = std::ffi::CString::new(data).map_err(|_| Error::BadOption {
        option: "mount data".into(),
        reason: "contains NUL".into(),
    })?;
    rustix::mount::mount(
        source.as_str(),
        mountpoint,
        fstype.as_str(),
        flags,
        Some(data.as_c_str()),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::INVAL {
            Error::MountRefused {
                mountpoint: mountpoint.into(),
                options: chosen,
                source: e.into(),
            }
        } else {
            Error::Mount {
                mountpoint: mountpoint.into(),
                source: e.into(),
            }
        }
    })?;
    Ok(device)
}

fn fusermount_opts(opts: &MountOptions) -> String {
    let mut o = vec![];
    let name = opts.fsname.clone().unwrap_or_else(|| "fusebox".into());
    o.push(format!("fsname={name}"));
    if let Some(s) = &opts.subtype {
        o.push(format!("subtype={s}"));
    }
    for (on, s) in [
        (opts.allow_other, "allow_other"),
        (opts.default_permissions, "default_permissions"),
        (opts.read_only, "ro"),
        (opts.nosuid, "nosuid"),
        (opts.nodev, "nodev"),
        (opts.noexec, "noexec"),
        (opts.noatime, "noatime"),
        (opts.sync, "sync"),
        (opts.dirsync, "dirsync"),
    ] {
        if on {
            o.push(s.into());
        }
    }
    if let Some(m) = opts.max_read {
        o.push(format!("max_read={m}"));
    }
    o.join(",")
}

fn mount_fusermount(mountpoint: &Path, opts: &MountOptions) -> Result<OwnedFd, Error> {
    use rustix::net::{
        AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags,
        SocketType,
    };
    let fail = |reason: String| Error::Fusermount {
        mountpoint: mountpoint.into(),
        reason,
    };
    // A user's mount is theirs: their own ids may be named (fstab's
    // `user,uid=...` does), others not.
    let others = opts
        .user_id
        .is_some_and(|u| u != rustix::process::getuid().as_raw())
        || opts
            .group_id
            .is_some_and(|g| g != rustix::process::getgid().as_raw());
    if others {
        return Err(fail(
            "user_id/group_id (uid=, gid=) other than your own need root: a user's mount belongs to that user".into(),
        ));
    }
    // Our end is close-on-exec; fusermount3's end must survive exec.
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::empty(),
        None,
    )
    .map_err(|e| fail(format!("socketpair: {e}")))?;
    rustix::io::fcntl_setfd(&ours, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| fail(format!("fcntl: {e}")))?;
    let out = Command::new("fusermount3")
        .arg("-o")
        .arg(fusermount_opts(opts))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            fail(format!(
                "cannot run fusermount3 ({e}); install it with: apt-get install fuse3"
            ))
        })?;
    drop(theirs);
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let hint = if msg.contains("/dev/fuse") {
            "; a non-root user needs read-write access to /dev/fuse (e.g. chmod 0666 /dev/fuse), or mount as root"
        } else if msg.contains("allow_other") {
            "; allow_other needs user_allow_other in /etc/fuse.conf"
        } else {
            ""
        };
        return Err(fail(format!("{msg} ({}){hint}", out.status)));
    }
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        &ours,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| fail(format!("receiving the device fd: {e}")))?;
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            if let Some(fd) = fds.next() {
                return Ok(fd);
            }
        }
    }
    Err(fail("fusermount3 passed no device fd".into()))
}

/// Unmount `mountpoint` lazily; `fusermount` for a mount made by a non-root user.
pub fn unmount_path(mountpoint: &Path, fusermount: bool) -> Result<(), Error> {
    if fusermount || !rustix::process::geteuid().is_root() {
        let out = Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(mountpoint)
            .output()
            .map_err(|e| Error::Unmount {
                mountpoint: mountpoint.into(),
                source: e,
            })?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(Error::Unmount {
                mountpoint: mountpoint.into(),
                source: io::Error::other(msg),
            });
        }
        return Ok(());
    }
    rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH).map_err(|e| {
        Error::Unmount {
            mountpoint: mountpoint.into(),
            source: e.into(),
        }
    })
}

/// A FUSE mount as /proc/self/mountinfo lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuseMountInfo {
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// Its type: `fuse`, `fuseblk`, or `fuse.SUBTYPE`.
    pub fstype: String,
    /// Its source (`fsname`).
    pub source: String,
    /// Device minor = fusectl connection number.
    pub connection: u32,
    /// Whose mount it is (the `user_id=` the kernel shows).
    pub user_id: Option<u32>,
}

/// Every FUSE mount visible to this process.
pub fn fuse_mounts() -> Vec<FuseMountInfo> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return vec![];
    };
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// The topmost FUSE mount at `mountpoint` (an absolute, canonical path).
pub fn fuse_mount_at(mountpoint: &Path) -> Option<FuseMountInfo> {
    fuse_mounts()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == mountpoint)
}

/// mountinfo escapes space, tab, newline and backslash as \ooo; paths are
/// bytes, not necessarily UTF-8.
fn unescape_mountinfo(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    std::ffi::OsString::from_vec(out)
}

fn parse_mountinfo_line(line: &str) -> Option<FuseMountInfo> {
    let (left, right) = line.split_once(" - ")?;
    let fields: Vec<&str> = left.split(' ').collect();
    let mut r = right.split(' ');
    let fstype = r.next()?;
    if fstype != "fuse" && !fstype.starts_with("fuse.") && fstype != "fuseblk" {
        return None;
    }
    let source = r.next().unwrap_or("");
    let user_id = r
        .next()
        .unwrap_or("")
        .split(',')
        .find_map(|o| o.strip_prefix("user_id=")?.parse().ok());
    let (_, minor) = fields.get(2)?.split_once(':')?;
    Some(FuseMountInfo {
        mountpoint: PathBuf::from(unescape_mountinfo(fields.get(4)?)),
        fstype: fstype.into(),
        source: unescape_mountinfo(source).to_string_lossy().into_owned(),
        connection: minor.parse().ok()?,
        user_id,
    })
}

/// What is mounted on top at a path.
#[derive(Debug, PartialEq)]
enum TopMount {
    Nothing,
    /// A FUSE mount, with its connection number.
    Fuse(u32),
    Other,
}

/// What is mounted on top at `mountpoint`; `None` if mountinfo cannot be
/// read. mountinfo lists mounts at one path bottom to top.
fn top_mount_at(mountpoint: &Path) -> Option<TopMount> {
    use std::os::unix::ffi::OsStrExt;
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.as_os_str().as_bytes();
    let top = text.lines().rev().find(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|mp| unescape_mountinfo(mp).as_bytes() == want)
    });
    Some(match top {
        None => TopMount::Nothing,
        Some(line) => {
            parse_mountinfo_line(line).map_or(TopMount::Other, |m| TopMount::Fuse(m.connection))
        }
    })
}

/// The never-reused id of the mount on top at `mountpoint`
/// (STATX_MNT_ID_UNIQUE, Linux 6.8+). DONT_SYNC: statx must not send a
/// request to a FUSE daemon, which may be ourselves, not serving yet.
fn unique_mount_id(mountpoint: &Path) -> Option<u64> {
    use rustix::fs::{AtFlags, StatxFlags, CWD};
    const STATX_MNT_ID_UNIQUE: u32 = 0x4000;
    let st = rustix::fs::statx(
        CWD,
        mountpoint,
        AtFlags::STATX_DONT_SYNC,
        StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE),
    )
    .ok()?;
    (st.stx_mask & STATX_MNT_ID_UNIQUE != 0).then_some(st.stx_mnt_id)
}

fn connection_id(mountpoint: &Path) -> Option<u32> {
    fuse_mount_at(mountpoint).map(|m| m.connection)
}

/// fusectl for one abort: the system's, if it is mounted at
/// /sys/fs/fuse/connections, or else a private mount of it in a directory
/// of its own, made for this call and removed after (fusectl has a single
/// superblock, so any mount of it shows every connection). A mount made on
/// demand at the system path could be unmounted under us by another
/// process finishing its own abort (two `fusebox umount --abort` at once:
/// the second then found no connection and failed); a private one cannot.
struct Fusectl {
    dir: PathBuf,
    private: bool,
}

impl Fusectl {
    /// Make fusectl available (a private mount needs root).
    fn open() -> Result<Fusectl, Error> {
        let system = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| {
                t.lines()
                    .any(|l| l.contains(" - fusectl ") && l.split(' ').nth(4) == Some(FUSECTL_DIR))
            })
            .unwrap_or(false);
        if system {
            return Ok(Fusectl {
                dir: FUSECTL_DIR.into(),
                private: false,
            });
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fusebox-fusectl-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mount_err = |e: io::Error| Error::Mount {
            mountpoint: dir.clone(),
            source: e,
        };
        std::fs::create_dir(&dir).map_err(mount_err)?;
        if let Err(e) = rustix::mount::mount(
            "fusectl",
            &dir,
            "fusectl",
            rustix::mount::MountFlags::empty(),
            None,
        ) {
            let _ = std::fs::remove_dir(&dir);
            return Err(mount_err(e.into()));
        }
        Ok(Fusectl { dir, private: true })
    }
}

impl Drop for Fusectl {
    fn drop(&mut self) {
        if self.private {
            let _ = rustix::mount::unmount(&self.dir, rustix::mount::UnmountFlags::DETACH);
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Abort FUSE connection `id` through fusectl.
pub fn abort_connection(id: u32) -> Result<(), Error> {
    let fusectl = Fusectl::open()?;
    let path = fusectl.dir.join(id.to_string()).join("abort");
    std::fs::write(&path, b"1")
        .map_err(|e| Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed() {
        let l = "612 30 0:77 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:300 - fuse.stackfs src rw,user_id=0,group_id=0";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!(m.mountpoint, PathBuf::from("/tmp/a b"));
        assert_eq!(m.connection, 77);
        assert_eq!(m.fstype, "fuse.stackfs");
        assert!(parse_mountinfo_line("1 2 0:5 / /proc rw - proc proc rw").is_none());
    }
}
