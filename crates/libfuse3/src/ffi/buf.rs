//! `fuse_buf_size` and `fuse_buf_copy`: moving data between buffer
//! vectors whose buffers are memory or file descriptors (fuse_common.h).
//!
//! A copy walks both vectors from their current position (`idx`, `off`),
//! a piece at a time: the smaller of what is left in the current source
//! and destination buffers. Memory to memory is a memmove; with an fd on
//! either side it is read(2)/write(2), or pread/pwrite at `pos` plus the
//! offset into that buffer when the buffer says FUSE_BUF_FD_SEEK; with
//! FUSE_BUF_FD_RETRY a short transfer is retried until done or end of
//! file. fd to fd goes through a bounce buffer (no splice: the same bytes,
//! one copy more). A short piece (end of file) ends the copy; an error
//! ends it too, returned as -errno only if nothing was copied before.
//! Both vectors are advanced by what was copied.
//!
//! Soundness: the vectors are the caller's, valid per the header: `count`
//! buffers, each memory buffer `size` bytes long, each fd open.

use std::ffi::c_void;

use super::versioned;
use crate::abi::{FuseBuf, FuseBufvec};

const IS_FD: u32 = 1 << 1;
const FD_SEEK: u32 = 1 << 2;
const FD_RETRY: u32 = 1 << 3;

/// `size_t fuse_buf_size(const struct fuse_bufvec *bufv)`: the sum of the
/// buffers' sizes (all of them, from the first), SIZE_MAX if any is.
pub unsafe extern "C" fn fuse_buf_size(bufv: *const FuseBufvec) -> usize {
    // SAFETY: `count` buffers follow the header (caller's contract).
    unsafe {
        let Some(v) = bufv.as_ref() else {
            return 0;
        };
        let bufs = std::slice::from_raw_parts(v.buf.as_ptr(), v.count);
        let mut total = 0usize;
        for b in bufs {
            if b.size == usize::MAX {
                return usize::MAX;
            }
            total = total.saturating_add(b.size);
        }
        total
    }
}

/// `fuse_buf_size` as exported (see the note in mod.rs).
#[export_name = "fuse_buf_size"]
pub unsafe extern "C" fn export_fuse_buf_size(bufv: *const FuseBufvec) -> usize {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_buf_size(bufv) }
}
versioned!(fuse_buf_size, "FUSE_3.0");

/// The buffer at the vector's position, if any is left.
///
/// # Safety
/// `v` is a valid vector.
unsafe fn current(v: &FuseBufvec) -> Option<FuseBuf> {
    // SAFETY: idx < count, within the buffers that follow the header.
    (v.idx < v.count).then(|| unsafe { *v.buf.as_ptr().add(v.idx) })
}

/// Move `v`'s position `n` bytes on within its current buffer, to the
/// next buffer once this one is used up; false once the last one is (the
/// offset then stays at its end, as libfuse leaves it).
fn advance(v: &mut FuseBufvec, buf: &FuseBuf, n: usize) -> bool {
    v.off += n;
    if v.off >= buf.size {
        v.idx += 1;
        if v.idx >= v.count {
            return false;
        }
        v.off = 0;
    }
    true
}

/// One read or write of an fd buffer: at `pos + off` if it seeks.
fn fd_io(buf: &FuseBuf, off: usize, mem: *mut c_void, len: usize, write: bool) -> isize {
    let seek = buf.flags & FD_SEEK != 0;
    let at = buf.pos + off as libc::off_t;
    // SAFETY: `mem` holds `len` bytes (a caller's buffer or our bounce
    // buffer); the fd is the caller's.
    unsafe {
        match (write, seek) {
            (false, true) => libc::pread(buf.fd, mem, len, at),
            (false, false) => libc::read(buf.fd, mem, len),
            (true, true) => libc::pwrite(buf.fd, mem, len, at),
            (true, false) => libc::write(buf.fd, mem, len),
        }
    }
}

/// Transfer `len` bytes between an fd buffer and memory, retrying short
/// transfers if the buffer asks; the bytes moved, or -errno.
fn fd_transfer(buf: &FuseBuf, off: usize, mem: *mut u8, len: usize, write: bool) -> isize {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `mem` + done stays within its `len` bytes.
        let p = unsafe { mem.add(done) }.cast();
        let n = fd_io(buf, off + done, p, len - done, write);
        if n < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return if done > 0 {
                done as isize
            } else {
                -(e as isize)
            };
        }
        done += n as usize;
        if n == 0 || buf.flags & FD_RETRY == 0 {
            break;
        }
    }
    done as isize
}

/// One piece: `len` bytes from `src` at `soff` to `dst` at `doff`.
fn copy_piece(dst: &FuseBuf, doff: usize, src: &FuseBuf, soff: usize, len: usize) -> isize {
    let (sfd, dfd) = (src.flags & IS_FD != 0, dst.flags & IS_FD != 0);
    match (sfd, dfd) {
        (false, false) => {
            // SAFETY: both memory buffers hold their `size` bytes, and
            // the piece lies within both; they may overlap.
            unsafe {
                std::ptr::copy(
                    src.mem.cast::<u8>().add(soff),
                    dst.mem.cast::<u8>().add(doff),
                    len,
                );
            }
            len as isize
        }
        // The memory side's pointer is only offset here (wrapping_add: no
        // unsafe); it holds the piece, which fd_transfer relies on.
        (true, false) => fd_transfer(
            src,
            soff,
            dst.mem.cast::<u8>().wrapping_add(doff),
            len,
            false,
        ),
        (false, true) => fd_transfer(
            dst,
            doff,
            src.mem.cast::<u8>().wrapping_add(soff),
            len,
            true,
        ),
        (true, true) => {
            let mut bounce = vec![0u8; len.min(1 << 20)];
            let mut done = 0usize;
            while done < len {
                let chunk = bounce.len().min(len - done);
                let r = fd_transfer(src, soff + done, bounce.as_mut_ptr(), chunk, false);
                if r <= 0 {
                    return if done > 0 { done as isize } else { r };
                }
                let w = fd_transfer(dst, doff + done, bounce.as_mut_ptr(), r as usize, true);
                if w < 0 {
                    return if done > 0 { done as isize } else { w };
                }
                done += w as usize;
                if (w as usize) < chunk {
                    break;
                }
            }
            done as isize
        }
    }
}

/// `ssize_t fuse_buf_copy(struct fuse_bufvec *dst, struct fuse_bufvec *src,
/// enum fuse_buf_copy_flags flags)`. The splice flags change nothing here.
pub unsafe extern "C" fn fuse_buf_copy(
    dst: *mut FuseBufvec,
    src: *mut FuseBufvec,
    _flags: u32,
) -> isize {
    // SAFETY: two valid vectors (caller's contract); `current` reads
    // within them.
    unsafe {
        let (Some(dst), Some(src)) = (dst.as_mut(), src.as_mut()) else {
            return -(libc::EINVAL as isize);
        };
        let mut copied = 0isize;
        while let (Some(s), Some(d)) = (current(src), current(dst)) {
            let (s_left, d_left) = (s.size - src.off.min(s.size), d.size - dst.off.min(d.size));
            let len = s_left.min(d_left);
            if len == 0 {
                // An empty buffer: step over it.
                if (s_left == 0 && !advance(src, &s, 0)) || (d_left == 0 && !advance(dst, &d, 0)) {
                    break;
                }
                continue;
            }
            let n = copy_piece(&d, dst.off, &s, src.off, len);
            if n < 0 {
                return if copied > 0 { copied } else { n };
            }
            copied += n;
            // The source first: once it is used up the destination keeps
            // its position (libfuse's order, which programs may observe).
            if !advance(src, &s, n as usize) || !advance(dst, &d, n as usize) {
                break;
            }
            if (n as usize) < len {
                break;
            }
        }
        copied
    }
}

/// `fuse_buf_copy` as exported (see the note in mod.rs).
#[export_name = "fuse_buf_copy"]
pub unsafe extern "C" fn export_fuse_buf_copy(
    dst: *mut FuseBufvec,
    src: *mut FuseBufvec,
    _flags: u32,
) -> isize {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_buf_copy(dst, src, _flags) }
}
versioned!(fuse_buf_copy, "FUSE_3.0");
