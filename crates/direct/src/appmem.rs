//! The application's memory, as system call arguments point into it.
//!
//! A hooked call hands us raw addresses (a path, a buffer, a struct stat to
//! fill), as the kernel would get them, and the kernel answers EFAULT for
//! one that is not mapped (pjdfstest checks). So the first access to a
//! page is a copy by process_vm_readv/process_vm_writev on this process,
//! which fails with EFAULT where the kernel's copy would. A page that
//! copied fine is remembered (per thread, a few ranges of pages, read and
//! write apart) and copied directly after, until the application changes its
//! mappings (munmap, mremap, mprotect, brk, a MAP_FIXED mmap: `mappings_
//! may_change`, called before such a call runs). What that leaves: a
//! buffer another thread unmaps while the call is being served faults
//! instead of giving EFAULT, as it would with a racing user of the
//! memory anyway. `fresh_mut` is memory this layer has just mapped.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use zerocopy::{Immutable, IntoBytes};

use crate::intercept::raw_syscall;

const PAGE: u64 = 4096;
/// PATH_MAX, with its NUL.
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// This process's id, for process_vm_readv/writev on itself: asked once,
/// not at every copy (`forget_pid` after a fork). A CLONE_VM child
/// (posix_spawn's) keeps its parent's, which names the same memory.
static PID: AtomicU32 = AtomicU32::new(0);

pub(crate) fn pid() -> u32 {
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

/// Bumped whenever the mappings may change: pages known before are not
/// known any more.
static MAPPINGS: AtomicU64 = AtomicU64::new(1);
const KNOWN: usize = 8;

thread_local! {
    // (first page, page after the last, MAPPINGS when the range copied
    // fine); const-initialised, no destructor: usable in a signal handler
    // and a fresh thread. Ranges, not pages: a program reading 1 MiB at a
    // time into one buffer copies straight into it from its second read
    // on (per page, a buffer of 256 pages never stayed known: every read
    // went through process_vm_writev, pinning each page).
    static READABLE: Cell<[(u64, u64, u64); KNOWN]> = const { Cell::new([(0, 0, 0); KNOWN]) };
    static WRITABLE: Cell<[(u64, u64, u64); KNOWN]> = const { Cell::new([(0, 0, 0); KNOWN]) };
    static NEXT_SLOT: Cell<usize> = const { Cell::new(0) };
}

/// The application is about to make a call that may unmap or protect
/// memory.
pub(crate) fn mappings_may_change() {
    MAPPINGS.fetch_add(1, Ordering::AcqRel);
}

/// Whether a system call may change the mappings (see the module doc).
pub(crate) fn changes_mappings(nr: i64, a: &[u64; 6]) -> bool {
    match nr {
        libc::SYS_munmap
        | libc::SYS_mremap
        | libc::SYS_mprotect
        | libc::SYS_pkey_mprotect
        | libc::SYS_brk
        | libc::SYS_shmdt
        | libc::SYS_remap_file_pages => true,
        libc::SYS_mmap => a[3] & libc::MAP_FIXED as u64 != 0,
        // Any advice but those known to leave pages mapped as they were
        // (newer ones, such as guard pages, may not).
        libc::SYS_madvise => !matches!(
            a[2] as i32,
            libc::MADV_NORMAL
                | libc::MADV_RANDOM
                | libc::MADV_SEQUENTIAL
                | libc::MADV_WILLNEED
                | libc::MADV_DONTDUMP
                | libc::MADV_DODUMP
                | libc::MADV_HUGEPAGE
                | libc::MADV_NOHUGEPAGE
                | libc::MADV_MERGEABLE
                | libc::MADV_UNMERGEABLE
                | libc::MADV_COLD
                | libc::MADV_PAGEOUT
        ),
        _ => false,
    }
}

type Known = std::thread::LocalKey<Cell<[(u64, u64, u64); KNOWN]>>;

/// The pages `addr..addr+len` (len > 0) covers: first, and one past the
/// last.
fn pages(addr: u64, len: usize) -> Option<(u64, u64)> {
    let last = addr.checked_add(len as u64 - 1)?;
    Some((addr / PAGE, last / PAGE + 1))
}

fn all_known(set: &'static Known, addr: u64, len: usize) -> bool {
    let Some((first, end)) = pages(addr, len) else {
        return false;
    };
    let now = MAPPINGS.load(Ordering::Acquire);
    set.with(Cell::get)
        .iter()
        .any(|&(f, e, epoch)| epoch == now && f <= first && end <= e)
}

fn remember(set: &'static Known, addr: u64, len: usize, epoch: u64) {
    let Some((first, end)) = pages(addr, len) else {
        return;
    };
    set.with(|c| {
        let mut known = c.get();
        if known
            .iter()
            .any(|&(f, e, k)| k == epoch && f <= first && end <= e)
        {
            return;
        }
        let slot = NEXT_SLOT.with(|n| {
            let i = n.get();
            n.set((i + 1) % KNOWN);
            i
        });
        known[slot] = (first, end, epoch);
        c.set(known);
    });
}

/// Copy `into.len()` bytes from the application's `addr`.
pub(crate) fn read(addr: u64, into: &mut [u8]) -> Result<(), i32> {
    if into.is_empty() {
        return Ok(());
    }
    if addr >= PAGE && all_known(&READABLE, addr, into.len()) {
        // SAFETY: every page of the range copied fine through the kernel
        // since the mappings last may have changed (module doc). A copy
        // that may overlap: a read to the end of a page can take in our
        // own buffer, on the same heap or stack page as the argument.
        unsafe {
            std::ptr::copy(addr as *const u8, into.as_mut_ptr(), into.len());
        }
        return Ok(());
    }
    let epoch = MAPPINGS.load(Ordering::Acquire);
    vm_copy(
        libc::SYS_process_vm_readv,
        into.as_mut_ptr(),
        addr,
        into.len(),
    )?;
    remember(&READABLE, addr, into.len(), epoch);
    Ok(())
}

/// Copy `data` to the application's `addr`.
pub(crate) fn write(addr: u64, data: &[u8]) -> Result<(), i32> {
    if data.is_empty() {
        return Ok(());
    }
    if addr >= PAGE && all_known(&WRITABLE, addr, data.len()) {
        // SAFETY: as in `read`, for pages that took a write; the
        // application handed this range to the call to be filled.
        unsafe {
            std::ptr::copy(data.as_ptr(), addr as *mut u8, data.len());
        }
        return Ok(());
    }
    let epoch = MAPPINGS.load(Ordering::Acquire);
    vm_copy(
        libc::SYS_process_vm_writev,
        data.as_ptr().cast_mut(),
        addr,
        data.len(),
    )?;
    remember(&WRITABLE, addr, data.len(), epoch);
    Ok(())
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
/// come from inside libc's allocator). Filled in place by `read_c_str`:
/// returned by value (in an Option) it was copied twice, 4 KiB each time,
/// on every path call.
pub(crate) struct CPath {
    buf: [u8; PATH_MAX],
    len: usize,
}

impl CPath {
    pub(crate) fn new() -> CPath {
        CPath {
            buf: [0; PATH_MAX],
            len: 0,
        }
    }
}

impl std::ops::Deref for CPath {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Read the NUL-terminated string at `addr` into `path`. False for a null
/// pointer, one that cannot be read or one longer than PATH_MAX: the call
/// then goes to the kernel, which answers EFAULT or ENAMETOOLONG itself.
pub(crate) fn read_c_str(addr: u64, path: &mut CPath) -> bool {
    path.len = 0;
    if addr == 0 {
        return false;
    }
    let mut at = addr;
    // Most paths are short: a small first copy, then up to a page at a time.
    let mut chunk = 256;
    while path.len < PATH_MAX {
        // Up to the end of this page: the next one may not be mapped.
        let room = ((PAGE - at % PAGE) as usize)
            .min(PATH_MAX - path.len)
            .min(chunk);
        chunk = PAGE as usize;
        if read(at, &mut path.buf[path.len..path.len + room]).is_err() {
            path.len = 0;
            return false;
        }
        if let Some(nul) = path.buf[path.len..path.len + room]
            .iter()
            .position(|&c| c == 0)
        {
            path.len += nul;
            return true;
        }
        path.len += room;
        at += room as u64;
    }
    path.len = 0;
    false
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

    /// Whether the whole buffer took a copy through the kernel since the
    /// mappings last may have changed: `fill` is then a plain copy.
    pub(crate) fn known_writable(&self) -> bool {
        self.addr >= PAGE && self.len > 0 && all_known(&WRITABLE, self.addr, self.len)
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
