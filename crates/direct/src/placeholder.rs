//! Placeholder descriptors: the real kernel descriptor every open file of
//! the mount gets (a memfd), so that the program's descriptor numbers,
//! dup, close-on-exec, poll sets and fork behave as the kernel's. Its
//! offset is the file's (the kernel shares it exactly as it would share
//! the file's: between dup'ed descriptors, with forked children, across
//! exec) and its contents are a record of which file it stands for, read
//! by a program this one executes (`read_record`).
//!
//! A new memfd and the first page of its record cost as much as a native
//! create (about 8 us here, against 0.5 us for a dup). So the placeholders
//! of closed files are kept, in a small pool at high descriptor numbers,
//! and the next open gets one of them — but only a placeholder that no
//! other process can hold: one made after this process last handed its
//! descriptors on (fork, vfork, clone, sendmsg; see
//! `intercept::descriptor_shares`) and closed through its last
//! descriptor here. Reusing one another process still held would change
//! what that process's descriptor stands for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::intercept::raw_syscall;

/// The start of a record: then the open flags (4 bytes), whether a
/// directory (1), the inode number (8), the path's length (4), the path.
const MAGIC: &[u8] = b"fusebox-direct open file v3\n";
const HEAD: usize = MAGIC.len() + 17;
/// Where pooled placeholders sit: above what programs usually number
/// their own, beside the cache's shared page (at 1000).
const POOL_FLOOR: u64 = 1008;
const POOL_MAX: usize = 16;
/// What /proc/self/fd/N shows for a placeholder.
pub(crate) const LINK_PREFIX: &[u8] = b"/memfd:fusebox-direct";

/// Which file a placeholder stands for.
pub(crate) struct Record {
    pub flags: i32,
    pub dir: bool,
    pub ino: u64,
    pub path: Vec<u8>,
}

/// The placeholders of closed files, ready for the next open.
#[derive(Default)]
pub(crate) struct Pool {
    fds: Mutex<Vec<i32>>,
    /// Whether `fds` may hold anything (read without the lock on every
    /// close of the program's own descriptors).
    any: AtomicBool,
}

impl Pool {
    fn fds(&self) -> std::sync::MutexGuard<'_, Vec<i32>> {
        self.fds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A placeholder for `record` at the lowest free descriptor number, as
    /// open(2) numbers; from the pool if `reuse` (the caller is this
    /// process's own, not a child sharing its memory) and it has one.
    pub(crate) fn make(&self, record: &Record, cloexec: bool, reuse: bool) -> Result<i32, i32> {
        let pooled = if reuse && self.any.load(Ordering::Acquire) {
            let mut fds = self.fds();
            let fd = fds.pop();
            self.any.store(!fds.is_empty(), Ordering::Release);
            fd
        } else {
            None
        };
        let fd = match pooled {
            Some(p) => {
                let cmd = if cloexec {
                    libc::F_DUPFD_CLOEXEC
                } else {
                    libc::F_DUPFD
                };
                let fd = raw_syscall(libc::SYS_fcntl, [p as u64, cmd as u64, 0, 0, 0, 0]);
                raw_syscall(libc::SYS_close, [p as u64, 0, 0, 0, 0, 0]);
                if fd < 0 {
                    return Err(-fd as i32);
                }
                // A fresh file starts at offset 0.
                raw_syscall(
                    libc::SYS_lseek,
                    [fd as u64, 0, libc::SEEK_SET as u64, 0, 0, 0],
                );
                fd as i32
            }
            None => {
                let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
                let fd = raw_syscall(
                    libc::SYS_memfd_create,
                    [
                        c"fusebox-direct".as_ptr() as u64,
                        u64::from(flags),
                        0,
                        0,
                        0,
                        0,
                    ],
                );
                if fd < 0 {
                    return Err(-fd as i32);
                }
                fd as i32
            }
        };
        write_record(fd, record);
        Ok(fd)
    }

    /// `fd`, a placeholder no other process holds and no other descriptor
    /// of this one, is about to be closed: keep its memfd for the next
    /// open if there is room. The caller closes `fd` either way.
    pub(crate) fn keep(&self, fd: i32) {
        let mut fds = self.fds();
        if fds.len() >= POOL_MAX {
            return;
        }
        let kept = raw_syscall(
            libc::SYS_fcntl,
            [fd as u64, libc::F_DUPFD_CLOEXEC as u64, POOL_FLOOR, 0, 0, 0],
        );
        // Fails where RLIMIT_NOFILE is below the floor: no pool then.
        if kept >= 0 {
            fds.push(kept as i32);
            self.any.store(true, Ordering::Release);
        }
    }

    /// Whether `first..=last` may hold pooled placeholders (answered
    /// without the lock).
    pub(crate) fn may_hold(&self, last: u32) -> bool {
        self.any.load(Ordering::Acquire) && u64::from(last) >= POOL_FLOOR
    }

    /// The program closed or replaced (dup2 onto) descriptors
    /// `first..=last`: those of the pool among them are not ours any more.
    pub(crate) fn lost(&self, first: u32, last: u32) {
        if !self.may_hold(last) {
            return;
        }
        let mut fds = self.fds();
        fds.retain(|&fd| !(first..=last).contains(&(fd as u32)));
        self.any.store(!fds.is_empty(), Ordering::Release);
    }

    /// In a forked child: the pool's memfds are its parent's too (the
    /// child's copies of the descriptors name the same files), so the
    /// child lets them go.
    pub(crate) fn drop_all(&self) {
        let mut fds = self.fds();
        for fd in fds.drain(..) {
            raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
        self.any.store(false, Ordering::Release);
    }
}

/// Write `record` over the placeholder's contents. Its length is in it, so
/// a longer record left by an earlier use of a pooled memfd is harmless.
fn write_record(fd: i32, r: &Record) {
    let mut bytes = Vec::with_capacity(HEAD + r.path.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&r.flags.to_le_bytes());
    bytes.push(u8::from(r.dir));
    bytes.extend_from_slice(&r.ino.to_le_bytes());
    bytes.extend_from_slice(&(r.path.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&r.path);
    raw_syscall(
        libc::SYS_pwrite64,
        [
            fd as u64,
            bytes.as_ptr() as u64,
            bytes.len() as u64,
            0,
            0,
            0,
        ],
    );
}

/// The record of placeholder `fd` (one whose /proc/self/fd link starts
/// with `LINK_PREFIX`), if it holds one.
pub(crate) fn read_record(fd: i32) -> Option<Record> {
    let mut bytes = vec![0u8; HEAD + libc::PATH_MAX as usize];
    let n = raw_syscall(
        libc::SYS_pread64,
        [
            fd as u64,
            bytes.as_mut_ptr() as u64,
            bytes.len() as u64,
            0,
            0,
            0,
        ],
    );
    if n < HEAD as i64 || !bytes.starts_with(MAGIC) {
        return None;
    }
    let at = MAGIC.len();
    let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let flags = word(at) as i32;
    let dir = bytes[at + 4] != 0;
    let ino = u64::from_le_bytes(bytes[at + 5..at + 13].try_into().expect("8 bytes"));
    let len = word(at + 13) as usize;
    let path = bytes
        .get(HEAD..HEAD + len)
        .filter(|_| HEAD + len <= n as usize)?;
    Some(Record {
        flags,
        dir,
        ino,
        path: path.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &[u8]) -> Record {
        Record {
            flags: libc::O_RDWR,
            dir: false,
            ino: 42,
            path: path.to_vec(),
        }
    }

    fn close(fd: i32) {
        raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_pooled_placeholder_comes_back_with_the_new_record_at_offset_zero() {
        let pool = Pool::default();
        let long = record(b"a/long/path/to/the/first/file");
        let fd = pool.make(&long, true, true).unwrap();
        raw_syscall(libc::SYS_lseek, [fd as u64, 77, 0, 0, 0, 0]);
        pool.keep(fd);
        close(fd);
        let kept = pool.fds().clone();
        assert_eq!(kept.len(), 1, "kept for the next open");
        assert!(kept[0] as u64 >= POOL_FLOOR);
        let again = pool.make(&record(b"b"), false, true).unwrap();
        assert!(pool.fds().is_empty());
        let r = read_record(again).unwrap();
        assert_eq!(
            (r.path.as_slice(), r.ino, r.flags),
            (&b"b"[..], 42, libc::O_RDWR)
        );
        let offset = raw_syscall(
            libc::SYS_lseek,
            [again as u64, 0, libc::SEEK_CUR as u64, 0, 0, 0],
        );
        assert_eq!(offset, 0);
        // Without close-on-exec, as asked.
        let fd_flags = raw_syscall(
            libc::SYS_fcntl,
            [again as u64, libc::F_GETFD as u64, 0, 0, 0, 0],
        );
        assert_eq!(fd_flags & i64::from(libc::FD_CLOEXEC), 0);
        // The pool's descriptor is gone: only `again` names the memfd.
        let gone = raw_syscall(
            libc::SYS_fcntl,
            [kept[0] as u64, libc::F_GETFD as u64, 0, 0, 0, 0],
        );
        assert_eq!(gone, -i64::from(libc::EBADF));
        close(again);
    }

    #[test]
    fn numbers_the_program_closed_leave_the_pool_and_a_child_drops_it() {
        let pool = Pool::default();
        let fds: Vec<i32> = (0..3)
            .map(|_| pool.make(&record(b"x"), true, true).unwrap())
            .collect();
        for &fd in &fds {
            pool.keep(fd);
            close(fd);
        }
        let kept = pool.fds().clone();
        assert_eq!(kept.len(), 3);
        pool.lost(kept[1] as u32, kept[1] as u32);
        assert_eq!(pool.fds().len(), 2);
        close(kept[1]);
        pool.drop_all();
        assert!(pool.fds().is_empty());
        for fd in [kept[0], kept[2]] {
            let r = raw_syscall(
                libc::SYS_fcntl,
                [fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0],
            );
            assert_eq!(r, -i64::from(libc::EBADF));
        }
        // Without reuse (a child sharing the memory): a new memfd.
        let fd = pool.make(&record(b"y"), true, false).unwrap();
        assert!(read_record(fd).is_some());
        close(fd);
    }

    #[test]
    fn a_record_that_is_not_ours_is_refused() {
        let fd = Pool::default().make(&record(b"z"), true, false).unwrap();
        raw_syscall(
            libc::SYS_pwrite64,
            [fd as u64, b"garbage".as_ptr() as u64, 7, 0, 0, 0],
        );
        assert!(read_record(fd).is_none());
        close(fd);
    }
}
