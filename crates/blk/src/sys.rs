//! The loop device ioctls (linux/loop.h): the only raw system calls of
//! this crate. Structures written from the uapi header's layout.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const LOOP_CLR_FD: libc::Ioctl = 0x4C01;
const LOOP_GET_STATUS64: libc::Ioctl = 0x4C05;
const LOOP_CONFIGURE: libc::Ioctl = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::Ioctl = 0x4C82;

pub const LO_FLAGS_READ_ONLY: u32 = 1;
pub const LO_FLAGS_AUTOCLEAR: u32 = 4;
pub const LO_FLAGS_DIRECT_IO: u32 = 16;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LoopInfo64 {
    pub lo_device: u64,
    pub lo_inode: u64,
    pub lo_rdevice: u64,
    pub lo_offset: u64,
    pub lo_sizelimit: u64,
    pub lo_number: u32,
    pub lo_encrypt_type: u32,
    pub lo_encrypt_key_size: u32,
    pub lo_flags: u32,
    pub lo_file_name: [u8; LO_NAME_SIZE],
    pub lo_crypt_name: [u8; LO_NAME_SIZE],
    pub lo_encrypt_key: [u8; LO_KEY_SIZE],
    pub lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

impl LoopInfo64 {
    fn zeroed() -> LoopInfo64 {
        LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: 0,
            lo_file_name: [0; LO_NAME_SIZE],
            lo_crypt_name: [0; LO_NAME_SIZE],
            lo_encrypt_key: [0; LO_KEY_SIZE],
            lo_init: [0; 2],
        }
    }
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// LOOP_CTL_GET_FREE on /dev/loop-control: the number of a free device
/// (made if none is).
pub fn get_free(control: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: this ioctl takes no argument and only returns a number.
    let r = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
    check(r).map(|n| n as u32)
}

/// LOOP_CONFIGURE: back `device` by `backing`.
pub fn configure(
    device: BorrowedFd<'_>,
    backing: BorrowedFd<'_>,
    block_size: u32,
    flags: u32,
    name: &[u8],
) -> io::Result<()> {
    let mut info = LoopInfo64::zeroed();
    info.lo_flags = flags;
    let n = name.len().min(LO_NAME_SIZE - 1);
    info.lo_file_name[..n].copy_from_slice(&name[..n]);
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size,
        info,
        reserved: [0; 8],
    };
    // SAFETY: `config` is a fully initialised loop_config (layout checked
    // above) that outlives the call; the kernel only reads it.
    let r = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            LOOP_CONFIGURE,
            &config as *const LoopConfig,
        )
    };
    check(r).map(drop)
}

/// LOOP_CLR_FD: detach (deferred to the last close while others hold it).
pub fn clear(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: no argument.
    let r = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CLR_FD) };
    check(r).map(drop)
}

/// LOOP_GET_STATUS64.
pub fn status(device: BorrowedFd<'_>) -> io::Result<LoopInfo64> {
    let mut info = LoopInfo64::zeroed();
    // SAFETY: `info` is a writable loop_info64 that outlives the call; the
    // kernel fills it, and every bit pattern is valid for its fields.
    let r = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            LOOP_GET_STATUS64,
            &mut info as *mut LoopInfo64,
        )
    };
    check(r).map(|_| info)
}

/// Own an fd this process inherited across exec (its number passed in the
/// environment): checked open first.
pub fn own_inherited(fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only reads the fd's flags; on a closed number it
    // fails with EBADF and nothing happens.
    check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: the fd is open (checked just above) and no other owner
    // exists in this process: it was inherited, and its number is taken
    // from the environment once (the caller removes the variable).
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}
