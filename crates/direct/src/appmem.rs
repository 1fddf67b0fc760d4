//! The application's memory, as system call arguments point into it.
//!
//! A hooked call hands us raw addresses (a path, a buffer, a struct stat to
//! fill), exactly as the kernel would get them. The kernel checks them with
//! copy_from_user and answers EFAULT for a bad one; we cannot, so we rely
//! on what the kernel would have relied on too: the calling thread is
//! blocked in its system call (in our SIGSYS handler), so the memory it
//! passed is its own and alive for the call's duration. A bad pointer
//! faults here as it would have made the kernel return EFAULT: the
//! difference (a crash instead of an error) is listed in DESIGN.md.

#![allow(unsafe_code)]

use zerocopy::{Immutable, IntoBytes};

/// The NUL-terminated string at `addr` (a path argument), without the NUL;
/// None for a null pointer.
pub(crate) fn c_str<'a>(addr: u64) -> Option<&'a [u8]> {
    if addr == 0 {
        return None;
    }
    // SAFETY: see the module comment: the caller passed a C string here and
    // is blocked in its call while we read it.
    Some(unsafe { std::ffi::CStr::from_ptr(addr as *const libc::c_char) }.to_bytes())
}

/// `len` bytes the application passed to be read (write(2)'s buffer).
pub(crate) fn bytes<'a>(addr: u64, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: as above, for a buffer of `len` bytes.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// `len` bytes the application passed to be filled (read(2)'s buffer).
pub(crate) fn bytes_mut<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: as above, for a writable buffer of `len` bytes that nothing
    // else touches while its owner is blocked in the call.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// Fill the struct the application passed (a struct stat, ...).
pub(crate) fn put<T: IntoBytes + Immutable>(addr: u64, value: &T) {
    bytes_mut(addr, size_of::<T>()).copy_from_slice(value.as_bytes());
}
