//! A memfd mapped shared: the memory that outlives a crashed server.
//!
//! The supervisor creates the memfd and keeps it; every server generation
//! maps it. What one generation stored is there for the next, because the
//! pages belong to the memfd, not to the process that wrote them.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A shared mapping of a whole memfd.
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory reached only through atomics
// and bounds-checked raw copies (below); it may be used from any thread.
unsafe impl Send for SharedMap {}
// SAFETY: as for Send: no method hands out a non-atomic `&mut`.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// A new zero-filled memfd of `len` bytes, mapped. Pages cost memory
    /// only once written.
    pub fn create(name: &str, len: usize) -> io::Result<SharedMap> {
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        SharedMap::map(fd)
    }

    /// Map an existing memfd (one handed over by the supervisor).
    pub fn map(fd: OwnedFd) -> io::Result<SharedMap> {
        let len = rustix::fs::fstat(&fd)?.st_size as usize;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "empty state memfd",
            ));
        }
        // SAFETY: a fresh shared mapping of the whole file at an address the
        // kernel picks overlaps no Rust object; it lives until Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd.as_fd(),
                0,
            )
        }?;
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(SharedMap { ptr, len, fd })
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a mapping of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, to hand to another process.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The mapping's first byte, for memory the kernel reads and writes by
    /// address (io_uring ring entries in `sys::uring`). `sys::uring` makes
    /// slices over entry buffers in it while it owns those entries; the
    /// copies below are only ever given ranges of the slots and undo areas,
    /// which no such slice covers.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    fn checked(&self, offset: usize, len: usize, align: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len)
                && offset.is_multiple_of(align),
            "shared map access out of bounds or misaligned: {offset}+{len} of {}",
            self.len
        );
        // SAFETY: in bounds, checked just above.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// The 8 bytes at `offset` as an atomic shared with other processes.
    /// Panics if out of bounds or not 8-aligned.
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        let p = self.checked(offset, 8, 8);
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned);
        // AtomicU64 has u64's layout, any bit pattern is valid, and the
        // memory lives as long as `self`. Other processes touch it only
        // through atomics too.
        unsafe { &*p.cast::<AtomicU64>() }
    }

    /// The 4 bytes at `offset` as an atomic shared with other processes.
    /// Panics if out of bounds or not 4-aligned.
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        let p = self.checked(offset, 4, 4);
        // SAFETY: as for `u64_at`, with 4 bytes and 4-alignment.
        unsafe { &*p.cast::<AtomicU32>() }
    }

    /// Copy `bytes` in. State (the recovery ledger) is published afterwards
    /// with a Release store to an atomic that readers load with Acquire
    /// first, and no region is written while another thread reads it;
    /// block data may be (see `read_into`).
    pub fn write(&self, offset: usize, bytes: &[u8]) {
        let p = self.checked(offset, bytes.len(), 1);
        debug_assert!(
            !(p as *const u8 <= bytes.as_ptr() && bytes.as_ptr() < p.wrapping_add(bytes.len()))
        );
        // SAFETY: in bounds; `bytes` does not overlap the destination: it is
        // either memory outside the mapping or (`sys::uring`) an entry
        // buffer, while the destination is a slot or undo area.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) }
    }

    /// Copy `buf.len()` bytes out into `buf` (see `write`). Memory shared
    /// with other processes, such as a RAM disk's blocks, is reached only
    /// through these copies (the one exception: `sys::uring`'s entry
    /// buffers in its ring area, which it owns while it slices them), so
    /// a concurrent write of the same bytes (overlapping block requests)
    /// leaves the copy's contents unspecified, as on a real disk, and
    /// nothing else.
    pub fn read_into(&self, offset: usize, buf: &mut [u8]) {
        let p = self.checked(offset, buf.len(), 1);
        // SAFETY: in bounds; `buf` does not overlap the source: it is memory
        // outside the mapping or (`sys::uring`) an entry buffer, while the
        // source is a slot or undo area.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
    }

    /// Copy `len` bytes out (see `write` for the publication protocol).
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let p = self.checked(offset, len, 1);
        let mut v = vec![0u8; len];
        // SAFETY: in bounds; the destination is a fresh vector.
        unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), len) }
        v
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length; every reference handed
        // out borrows `self`, so none outlives the mapping.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::warn!(error = %e, "munmap of the state memfd failed");
        }
    }
}
