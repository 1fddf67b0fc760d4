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
//!
//! A pooled memfd stays open at its pool number while the open file it
//! was given to is in use (its twin): the open is then one dup, and the
//! last close hands the number back with no system call at all, where
//! moving the memfd out of the pool and back again took a close and a dup
//! more per file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::intercept::raw_syscall;

/// The start of a record: then the open flags (4 bytes), whether a
/// directory (1), the inode number (8), the path's length (4), the path.
const MAGIC: &[u8] = b"fusebox-direct open file v3\n";
const HEAD: usize = MAGIC.len() + 17;
/// Where pooled placeholders sit: above what programs usually number
/// their own, beside the cache's shared page (at 1000).
const POOL_FLOOR: u64 = 1008;
/// Pool numbers at most, free or the twin of an open file.
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
pub(crate) struct Pool {
    numbers: Mutex<Numbers>,
    /// Whether `numbers.all` may hold anything (read without the lock on
    /// every close of the program's own descriptors).
    any: AtomicBool,
}

/// A pool number, and the generation it was kept in: a number the program
/// took from the pool (close, dup2) and the pool got again later is
/// another entry, which a twin of the first must not act on.
pub(crate) type Entry = (i32, u64);

struct Numbers {
    /// Ready for the next open.
    free: Vec<Entry>,
    /// Every pool number this process holds: the free ones and the twins
    /// of open files.
    all: Vec<Entry>,
    generation: u64,
}

impl Default for Pool {
    fn default() -> Pool {
        // Room for all of them now: the pool is changed where allocating
        // is not safe (a close the program makes in a signal handler).
        Pool {
            numbers: Mutex::new(Numbers {
                free: Vec::with_capacity(POOL_MAX),
                all: Vec::with_capacity(POOL_MAX),
                generation: 0,
            }),
            any: AtomicBool::new(false),
        }
    }
}

/// A placeholder just made: its descriptor, and the pool entry it came
/// from, still open on the same memfd (to hand back at the last close).
pub(crate) struct Made {
    pub fd: i32,
    pub twin: Option<Entry>,
}

impl Pool {
    fn numbers(&self) -> std::sync::MutexGuard<'_, Numbers> {
        self.numbers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A placeholder at the lowest free descriptor number, as open(2)
    /// numbers, at offset 0; from the pool if `reuse` (the caller is this
    /// process's own, not a child sharing its memory) and it has one. The
    /// caller writes its record (a pooled one still holds its last
    /// file's).
    pub(crate) fn make(&self, cloexec: bool, reuse: bool) -> Result<Made, i32> {
        let mut pooled = None;
        if reuse && self.any.load(Ordering::Acquire) {
            // Dup'ed under the lock: another thread's close_range and keep
            // must not put another memfd at the number meanwhile.
            let mut n = self.numbers();
            if let Some(p) = n.free.pop() {
                let cmd = if cloexec {
                    libc::F_DUPFD_CLOEXEC
                } else {
                    libc::F_DUPFD
                };
                let fd = raw_syscall(libc::SYS_fcntl, [p.0 as u64, cmd as u64, 0, 0, 0, 0]);
                if fd == -i64::from(libc::EBADF) {
                    // The program closed the number just now (its
                    // close_range is told to `lost` after): a new memfd.
                    n.all.retain(|&e| e != p);
                    self.any.store(!n.all.is_empty(), Ordering::Release);
                } else if fd < 0 {
                    n.free.push(p);
                    return Err(-fd as i32);
                } else {
                    pooled = Some((p, fd));
                }
            }
        }
        if let Some((p, fd)) = pooled {
            // A fresh file starts at offset 0.
            raw_syscall(
                libc::SYS_lseek,
                [fd as u64, 0, libc::SEEK_SET as u64, 0, 0, 0],
            );
            return Ok(Made {
                fd: fd as i32,
                twin: Some(p),
            });
        }
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
        Ok(Made {
            fd: fd as i32,
            twin: None,
        })
    }

    /// The open file `twin` was given to is closed: the number is free for
    /// the next open if `reuse` (no other process can hold the memfd),
    /// else closed. False, and nothing done, if that entry left the pool
    /// meanwhile (the program closed the number or put a file of its own
    /// there, a forked child dropped the pool), even if the number is in
    /// the pool again by now.
    pub(crate) fn hand_back(&self, twin: Entry, reuse: bool) -> bool {
        let mut n = self.numbers();
        let Some(i) = n.all.iter().position(|&e| e == twin) else {
            return false;
        };
        if reuse {
            if !n.free.contains(&twin) {
                n.free.push(twin);
            }
        } else {
            n.all.swap_remove(i);
            n.free.retain(|&e| e != twin);
            raw_syscall(libc::SYS_close, [twin.0 as u64, 0, 0, 0, 0, 0]);
            self.any.store(!n.all.is_empty(), Ordering::Release);
        }
        true
    }

    /// `fd`, a placeholder no other process holds and no other descriptor
    /// of this one, with no twin, is about to be closed: keep its memfd for
    /// the next open if there is room. The caller closes `fd` either way.
    pub(crate) fn keep(&self, fd: i32) {
        let mut n = self.numbers();
        if n.all.len() >= POOL_MAX {
            return;
        }
        let kept = raw_syscall(
            libc::SYS_fcntl,
            [fd as u64, libc::F_DUPFD_CLOEXEC as u64, POOL_FLOOR, 0, 0, 0],
        );
        // Fails where RLIMIT_NOFILE is below the floor: no pool then.
        if kept >= 0 {
            n.generation += 1;
            let entry = (kept as i32, n.generation);
            n.all.push(entry);
            n.free.push(entry);
            self.any.store(true, Ordering::Release);
        }
    }

    /// Whether `first..=last` may hold pool numbers (answered without the
    /// lock).
    pub(crate) fn may_hold(&self, last: u32) -> bool {
        self.any.load(Ordering::Acquire) && u64::from(last) >= POOL_FLOOR
    }

    /// The program closed or replaced (dup2 onto) descriptors
    /// `first..=last`: the pool numbers among them are not ours any more.
    pub(crate) fn lost(&self, first: u32, last: u32) {
        if !self.may_hold(last) {
            return;
        }
        let mut n = self.numbers();
        let gone = |e: &Entry| (first..=last).contains(&(e.0 as u32));
        n.all.retain(|e| !gone(e));
        n.free.retain(|e| !gone(e));
        self.any.store(!n.all.is_empty(), Ordering::Release);
    }

    /// In a forked child: the pool's memfds are its parent's too (the
    /// child's copies of the descriptors name the same files), so the
    /// child lets them go, twins included.
    pub(crate) fn drop_all(&self) {
        let mut n = self.numbers();
        for (fd, _) in n.all.drain(..) {
            raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
        n.free.clear();
        self.any.store(false, Ordering::Release);
    }
}

/// A pool number lent to an open file (see the module's doc): handed back
/// at the file's last close if no other process can hold the memfd, else
/// closed when the file goes.
pub(crate) struct Twin {
    entry: Entry,
    pool: Arc<Pool>,
    reuse: bool,
}

impl Twin {
    pub(crate) fn new(entry: Entry, pool: &Arc<Pool>) -> Twin {
        Twin {
            entry,
            pool: pool.clone(),
            reuse: false,
        }
    }

    /// The file's last close, where no other process can hold the memfd:
    /// the number is free for the next open. False if the program took the
    /// number meanwhile.
    pub(crate) fn reuse(mut self) -> bool {
        self.reuse = true;
        self.pool.hand_back(self.entry, true)
    }
}

impl Drop for Twin {
    fn drop(&mut self) {
        if !self.reuse {
            self.pool.hand_back(self.entry, false);
        }
    }
}

/// Write the record of a file (`flags`, whether a directory, inode
/// number, path inside the mount) over placeholder `fd`'s contents, in
/// one pwritev of its parts (no buffer to build). Its length is in it, so
/// a longer record left by an earlier use of a pooled memfd is harmless.
pub(crate) fn write_record(fd: i32, flags: i32, dir: bool, ino: u64, path: &[u8]) {
    let mut fields = [0u8; 17];
    fields[..4].copy_from_slice(&flags.to_le_bytes());
    fields[4] = u8::from(dir);
    fields[5..13].copy_from_slice(&ino.to_le_bytes());
    fields[13..].copy_from_slice(&(path.len() as u32).to_le_bytes());
    let iov = [
        libc::iovec {
            iov_base: MAGIC.as_ptr() as *mut libc::c_void,
            iov_len: MAGIC.len(),
        },
        libc::iovec {
            iov_base: fields.as_ptr() as *mut libc::c_void,
            iov_len: fields.len(),
        },
        libc::iovec {
            iov_base: path.as_ptr() as *mut libc::c_void,
            iov_len: path.len(),
        },
    ];
    raw_syscall(
        libc::SYS_pwritev,
        [fd as u64, iov.as_ptr() as u64, iov.len() as u64, 0, 0, 0],
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

    fn write(fd: i32, path: &[u8]) {
        write_record(fd, libc::O_RDWR, false, 42, path);
    }

    fn close(fd: i32) {
        raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    }

    fn is_open(fd: i32) -> bool {
        raw_syscall(
            libc::SYS_fcntl,
            [fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0],
        ) >= 0
    }

    #[test]
    fn a_pooled_placeholder_is_a_dup_of_its_twin_and_takes_the_new_record() {
        let pool = Pool::default();
        let first = pool.make(true, true).unwrap();
        assert!(first.twin.is_none(), "an empty pool makes a memfd");
        write(first.fd, b"a/long/path/to/the/first/file");
        raw_syscall(libc::SYS_lseek, [first.fd as u64, 77, 0, 0, 0, 0]);
        pool.keep(first.fd);
        close(first.fd);
        let kept = pool.numbers().free.clone();
        assert_eq!(kept.len(), 1, "kept for the next open");
        let number = kept[0].0;
        assert!(number as u64 >= POOL_FLOOR);

        let again = pool.make(false, true).unwrap();
        assert_eq!(again.twin, Some(kept[0]));
        assert!(pool.numbers().free.is_empty());
        assert!(is_open(number), "the twin stays open while the file is");
        let offset = raw_syscall(
            libc::SYS_lseek,
            [again.fd as u64, 0, libc::SEEK_CUR as u64, 0, 0, 0],
        );
        assert_eq!(offset, 0, "rewound");
        // The same open file: what the caller writes is seen through both.
        write(again.fd, b"b");
        let r = read_record(number).unwrap();
        assert_eq!(
            (r.path.as_slice(), r.ino, r.flags, r.dir),
            (&b"b"[..], 42, libc::O_RDWR, false)
        );
        // Without close-on-exec, as asked.
        let fd_flags = raw_syscall(
            libc::SYS_fcntl,
            [again.fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0],
        );
        assert_eq!(fd_flags & i64::from(libc::FD_CLOEXEC), 0);

        close(again.fd);
        assert!(pool.hand_back(kept[0], true));
        assert_eq!(pool.numbers().free, kept, "free again, still open");
        assert!(is_open(number));
        let third = pool.make(true, true).unwrap();
        close(third.fd);
        // Another process may hold it: closed, out of the pool.
        assert!(pool.hand_back(kept[0], false));
        assert!(!is_open(number));
        assert!(pool.numbers().all.is_empty());
        assert!(!pool.may_hold(u32::MAX));
    }

    #[test]
    fn numbers_the_program_took_leave_the_pool_and_a_child_drops_it() {
        let pool = Pool::default();
        let fds: Vec<i32> = (0..3).map(|_| pool.make(true, true).unwrap().fd).collect();
        for &fd in &fds {
            pool.keep(fd);
            close(fd);
        }
        let kept = pool.numbers().all.clone();
        assert_eq!(kept.len(), 3);
        // One lent as a twin, then closed by the program (close_range):
        // handing it back must not close what the number is by then.
        let used = pool.make(true, true).unwrap();
        let twin = used.twin.unwrap();
        pool.lost(twin.0 as u32, twin.0 as u32);
        close(twin.0);
        let theirs = raw_syscall(
            libc::SYS_fcntl,
            [used.fd as u64, libc::F_DUPFD as u64, twin.0 as u64, 0, 0, 0],
        );
        assert_eq!(
            theirs,
            i64::from(twin.0),
            "the program's file at that number"
        );
        assert!(!pool.hand_back(twin, true));
        assert!(is_open(twin.0), "left to the program");
        assert!(!pool.numbers().free.iter().any(|e| e.0 == twin.0));
        close(twin.0);
        assert_eq!(pool.numbers().all.len(), 2);
        // The pool gets the same number again (another file's placeholder):
        // the old twin is not that entry, whether it is reused or dropped.
        let other = pool.make(true, false).unwrap();
        pool.keep(other.fd);
        close(other.fd);
        let again = *pool.numbers().all.last().unwrap();
        assert_eq!(again.0, twin.0, "the lowest free number at the floor");
        assert_ne!(again, twin);
        assert!(!pool.hand_back(twin, false));
        assert!(is_open(twin.0), "the new entry is left open");
        assert!(!pool.hand_back(twin, true));
        assert_eq!(
            pool.numbers().free.iter().filter(|&&e| e == again).count(),
            1
        );
        close(used.fd);

        pool.drop_all();
        assert!(pool.numbers().all.is_empty() && pool.numbers().free.is_empty());
        for (fd, _) in kept.iter().chain([&again]) {
            assert!(!is_open(*fd));
        }
        // Without reuse (a child sharing the memory): a new memfd.
        let fresh = pool.make(true, false).unwrap();
        assert!(fresh.twin.is_none());
        close(fresh.fd);
    }

    #[test]
    fn a_record_that_is_not_ours_is_refused() {
        let fd = Pool::default().make(true, false).unwrap().fd;
        write(fd, b"z");
        assert!(read_record(fd).is_some());
        raw_syscall(
            libc::SYS_pwrite64,
            [fd as u64, b"garbage".as_ptr() as u64, 7, 0, 0, 0],
        );
        assert!(read_record(fd).is_none());
        close(fd);
    }
}
