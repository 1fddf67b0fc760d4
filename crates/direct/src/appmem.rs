//! The application's memory, as system call arguments point into it.
//!
//! A hooked call hands us raw addresses (a path, a buffer, a struct stat to
//! fill), as the kernel would get them, and the kernel answers EFAULT for
//! one that is not mapped (pjdfstest checks). So nothing here dereferences
//! them: every access is a copy by process_vm_readv/process_vm_writev on
//! this process, which fails with EFAULT where the kernel's copy would.
//! The one exception, `fresh_mut`, is memory this layer has just mapped.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use zerocopy::{Immutable, IntoBytes};

use crate::intercept::raw_syscall;

/// This process's id, for process_vm_readv/writev on itself: asked once,
/// not at every copy (`forget_pid` after a fork). A CLONE_VM child
/// (posix_spawn's) keeps its parent's, which names the same memory.
static PID: AtomicU32 = AtomicU32::new(0);

fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            let pid = raw_syscall(libc::SYS_getpid, [0; 6]) as u32;
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// In a forked child: the memory is its own now, under its own id.
pub(crate) fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
}

const PAGE: u64 = 4096;
/// PATH_MAX, with its NUL.
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// Copy `into.len()` bytes from the application's `addr`.
pub(crate) fn read(addr: u64, into: &mut [u8]) -> Result<(), i32> {
    vm_copy(
        libc::SYS_process_vm_readv,
        into.as_mut_ptr(),
        addr,
        into.len(),
    )
}

/// Copy `data` to the application's `addr`.
pub(crate) fn write(addr: u64, data: &[u8]) -> Result<(), i32> {
    vm_copy(
        libc::SYS_process_vm_writev,
        data.as_ptr().cast_mut(),
        addr,
        data.len(),
    )
}

/// process_vm_readv/writev of `len` bytes between `local` (ours) and the
/// application's `remote`, in this process: EFAULT unless all of it.
fn vm_copy(nr: i64, local: *mut u8, remote: u64, len: usize) -> Result<(), i32> {
    if len == 0 {
        return Ok(());
    }
    if remote < PAGE {
        // Page 0: unmapped for the application (the rewriting path's
        // trampoline lives there, readable to us but not its memory).
        return Err(libc::EFAULT);
    }
    let local = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: len,
    };
    let n = raw_syscall(
        nr,
        [
            u64::from(pid()),
            &local as *const _ as u64,
            1,
            &remote as *const _ as u64,
            1,
            0,
        ],
    );
    if n == len as i64 {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// A path argument, copied onto the stack (no allocation: the call may
/// come from inside libc's allocator).
pub(crate) struct CPath {
    buf: [u8; PATH_MAX],
    len: usize,
}

impl std::ops::Deref for CPath {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The NUL-terminated string at `addr`. None for a null pointer, one that
/// cannot be read or one longer than PATH_MAX: the call then goes to the
/// kernel, which answers EFAULT or ENAMETOOLONG itself.
pub(crate) fn c_str(addr: u64) -> Option<CPath> {
    if addr == 0 {
        return None;
    }
    let mut path = CPath {
        buf: [0; PATH_MAX],
        len: 0,
    };
    let mut at = addr;
    // Most paths are short: a small first copy, then up to a page at a time.
    let mut chunk = 256;
    while path.len < PATH_MAX {
        // Up to the end of this page: the next one may not be mapped.
        let room = ((PAGE - at % PAGE) as usize)
            .min(PATH_MAX - path.len)
            .min(chunk);
        chunk = PAGE as usize;
        read(at, &mut path.buf[path.len..path.len + room]).ok()?;
        if let Some(nul) = path.buf[path.len..path.len + room]
            .iter()
            .position(|&c| c == 0)
        {
            path.len += nul;
            return Some(path);
        }
        path.len += room;
        at += room as u64;
    }
    None
}

/// A NUL-terminated string of up to `max` bytes (an environment entry),
/// copied to the heap; None if it cannot be read or is longer.
pub(crate) fn c_string(addr: u64, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let room = (PAGE - at % PAGE) as usize;
        let start = out.len();
        out.resize(start + room, 0);
        read(at, &mut out[start..]).ok()?;
        if let Some(nul) = out[start..].iter().position(|&c| c == 0) {
            out.truncate(start + nul);
            return Some(out);
        }
        at += room as u64;
    }
    None
}

/// `len` bytes the application passed to be read (write(2)'s buffer).
pub(crate) fn bytes(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut v = vec![0; len];
    read(addr, &mut v)?;
    Ok(v)
}

/// A 64-bit value the application passed (a sigset, a pointer).
pub(crate) fn get_u64(addr: u64) -> Result<u64, i32> {
    let mut v = [0u8; 8];
    read(addr, &mut v)?;
    Ok(u64::from_ne_bytes(v))
}

/// Fill the struct the application passed (a struct stat, ...).
pub(crate) fn put<T: IntoBytes + Immutable>(addr: u64, value: &T) -> Result<(), i32> {
    write(addr, value.as_bytes())
}

/// A buffer the application passed to be filled (read(2)'s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserBuf {
    pub addr: u64,
    pub len: usize,
}

impl UserBuf {
    pub(crate) fn new(addr: u64, len: u64) -> UserBuf {
        UserBuf {
            addr,
            len: len as usize,
        }
    }

    /// Write `data` at `offset` into the buffer (within its length).
    pub(crate) fn fill(&self, offset: usize, data: &[u8]) -> Result<(), i32> {
        debug_assert!(offset + data.len() <= self.len);
        write(self.addr + offset as u64, data)
    }
}

/// Memory this layer has just mapped for the application (mmap's copy).
pub(crate) fn fresh_mut<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    // SAFETY: `addr..addr+len` is an anonymous read-write mapping made by
    // the caller a moment ago and not yet handed to the application.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}
