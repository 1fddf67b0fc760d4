//! Syscalls rustix does not wrap, for stackfs: kernel file handles and
//! per-thread filesystem credentials. The crate's only `unsafe`.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle the kernel makes.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// A kernel file handle: names an inode without holding it open, so a
/// stackable filesystem can serve millions of files under a 20,000-fd limit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelHandle {
    typ: i32,
    bytes: Box<[u8]>,
}

impl KernelHandle {
    /// A handle saved as its type and bytes (recovery).
    pub fn from_parts(typ: i32, bytes: &[u8]) -> KernelHandle {
        KernelHandle {
            typ,
            bytes: bytes[..bytes.len().min(MAX_HANDLE_SZ)].into(),
        }
    }

    pub fn handle_type(&self) -> i32 {
        self.typ
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// `name_to_handle_at(dir, name, flags)`; `flags` may hold
/// `AT_EMPTY_PATH` (handle of `dir` itself). Never follows a final symlink.
pub fn name_to_handle_at(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<KernelHandle> {
    let mut raw = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a properly laid out `struct file_handle` whose
    // handle_bytes tells the kernel it may write up to MAX_HANDLE_SZ bytes
    // into f_handle; `name` is NUL-terminated; `mount_id` is a valid out
    // pointer; all live for the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut raw as *mut RawHandle as *mut libc::file_handle,
            &mut mount_id,
            flags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(KernelHandle {
        typ: raw.handle_type,
        bytes: raw.f_handle[..len].into(),
    })
}

/// `open_by_handle_at(mount_fd, handle, flags)` (needs CAP_DAC_READ_SEARCH).
pub fn open_by_handle_at(
    mount_fd: BorrowedFd<'_>,
    handle: &KernelHandle,
    flags: i32,
) -> io::Result<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: handle.bytes.len() as u32,
        handle_type: handle.typ,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: `raw` is a valid `struct file_handle` the kernel only reads;
    // it lives for the call.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            &mut raw as *mut RawHandle as *mut libc::file_handle,
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `f` with this thread's filesystem uid/gid set to the caller's, so
/// files it creates get the caller's ownership and the kernel checks the
/// caller's permissions. setfsuid(2) is per-thread; the guard restores root
/// even if `f` panics.
pub fn as_caller<R>(uid: u32, gid: u32, f: impl FnOnce() -> R) -> R {
    /// The thread's previous fs ids, put back on drop.
    struct Restore {
        uid: u32,
        gid: u32,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: setfsuid/setfsgid take plain integers and only change
            // this thread's fs credentials; they cannot fail unsafely.
            unsafe {
                libc::setfsuid(self.uid);
                libc::setfsgid(self.gid);
            }
        }
    }
    if uid == 0 && gid == 0 {
        return f();
    }
    // SAFETY: as above; each call returns the previous value, which the
    // guard restores (not 0: the daemon need not run as root). The gid goes
    // first: after the uid switch the thread keeps CAP_SETGID (not a
    // filesystem capability), but order it anyway.
    let _restore = unsafe {
        let gid_before = libc::setfsgid(gid) as u32;
        let uid_before = libc::setfsuid(uid) as u32;
        Restore {
            uid: uid_before,
            gid: gid_before,
        }
    };
    f()
}
