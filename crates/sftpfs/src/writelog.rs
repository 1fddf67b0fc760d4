//! The write log: every write sftpfs has answered but the server has not
//! yet confirmed, kept where it outlives the process that answered it.
//!
//! Writes are answered at once and sent behind the application's back
//! (write-behind); until the server says OK, the bytes exist only here. A
//! dropped connection loses the replies, not the writes: they are sent
//! again, in order, once the file is reopened on the next connection. A
//! server process killed with SIGKILL loses its memory, so under the
//! recovery supervisor the log lives in a memfd the supervisor holds (a
//! held area, `fusebox::recovery`), and the next server sends again what
//! the dead one had answered but not seen confirmed. Writing the same bytes
//! at the same offset twice is harmless; order is kept per file.
//!
//! Layout: a 64-byte header, then a ring of records, each 64-byte aligned:
//!
//! ```text
//! header: magic u64 | capacity u64 | head u64 | tail u64 | used u64 | next_seq u64
//! record: state u32 | len u32 | seq u64 | fh u64 | offset u64 | path_len u32 | (28 bytes pad)
//!         | data | remote path, padded
//! ```
//!
//! A record is published by storing its state COMMITTED (Release) after
//! its fields and data are written; the write is answered only after that.
//! A crash mid-record leaves state FREE there, which a reader skips (the
//! kernel sends such a write again itself, it was never answered).

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use fusebox::sys::shared_map::SharedMap;

const MAGIC: u64 = 0x7366_7470_776c_6f67; // "sftpwlog"
const HEADER: usize = 64;
const RECORD_HEADER: usize = 64;
const ALIGN: usize = 64;

const FREE: u32 = 0;
const COMMITTED: u32 = 1;
const DONE: u32 = 2;
/// The rest of the ring up to its end is unused; go on at the start.
const WRAP: u32 = 3;

const H_MAGIC: usize = 0;
const H_CAPACITY: usize = 8;
const H_HEAD: usize = 16;
const H_TAIL: usize = 24;
const H_USED: usize = 32;
const H_SEQ: usize = 40;

/// One write waiting for the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Where the record is; what [`WriteLog::done`] takes.
    pub slot: usize,
    pub seq: u64,
    pub fh: u64,
    pub offset: u64,
    pub len: usize,
    path_len: usize,
}

pub struct WriteLog {
    map: SharedMap,
    /// Allocation: head, tail and used change only under this lock (the
    /// header copies are for the next process).
    alloc: Mutex<()>,
    freed: Condvar,
}

fn padded(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

impl WriteLog {
    /// The bytes a log with room for `data` bytes of writes needs.
    pub fn size_for(data: u64) -> usize {
        // Room for the data, a record header per 32 KiB write, and a
        // wrap's worth of slack.
        let d = data as usize;
        HEADER + d + d / 32768 * RECORD_HEADER + (1 << 20)
    }

    /// A log in `map`: a fresh one if `map` holds none, else the previous
    /// process's, whose unconfirmed writes
    /// [`unconfirmed`](WriteLog::unconfirmed) lists.
    pub fn open(map: SharedMap) -> WriteLog {
        let log = WriteLog {
            map,
            alloc: Mutex::new(()),
            freed: Condvar::new(),
        };
        let cap = log.map.len();
        let known = log.h(H_MAGIC).load(Ordering::Acquire) == MAGIC
            && log.h(H_CAPACITY).load(Ordering::Relaxed) == cap as u64;
        if known {
            log.abandon_unpublished();
        } else {
            log.h(H_CAPACITY).store(cap as u64, Ordering::Relaxed);
            log.h(H_HEAD).store(HEADER as u64, Ordering::Relaxed);
            log.h(H_TAIL).store(HEADER as u64, Ordering::Relaxed);
            log.h(H_USED).store(0, Ordering::Relaxed);
            log.h(H_SEQ).store(1, Ordering::Relaxed);
            log.h(H_MAGIC).store(MAGIC, Ordering::Release);
        }
        log
    }

    /// An anonymous log (no supervisor to hold it): survives reconnects,
    /// not the process.
    pub fn anonymous(data: u64) -> std::io::Result<WriteLog> {
        Ok(WriteLog::open(SharedMap::create(
            "sftpfs-write-log",
            WriteLog::size_for(data),
        )?))
    }

    fn h(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        self.map.u64_at(off)
    }

    fn state(&self, slot: usize) -> &std::sync::atomic::AtomicU32 {
        self.map.u32_at(slot)
    }

    /// The ring's end: the mapping's length rounded down to a record's
    /// alignment (a held area need not be a multiple of it).
    fn capacity(&self) -> usize {
        self.map.len() / ALIGN * ALIGN
    }

    /// The largest single write the log takes.
    pub fn max_record(&self) -> usize {
        (self.capacity() - HEADER) / 2 - RECORD_HEADER
    }

    /// Copy a write into the log, waiting for room until `deadline`;
    /// None if none came.
    /// `path` is the file's remote path, for a next process that finds
    /// no open handle to send it through.
    pub fn append(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        path: &[u8],
        deadline: Instant,
    ) -> Option<Pending> {
        assert!(
            data.len() + path.len() <= self.max_record(),
            "write larger than the log"
        );
        let mut g = self.alloc.lock().unwrap_or_else(PoisonError::into_inner);
        let (slot, seq) = loop {
            if let Some(s) = self.reserve(data.len(), path.len()) {
                break s;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = self
                .freed
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        drop(g);
        self.map.u64_at(slot + 8).store(seq, Ordering::Relaxed);
        self.map.u64_at(slot + 16).store(fh, Ordering::Relaxed);
        self.map.u64_at(slot + 24).store(offset, Ordering::Relaxed);
        self.map.write(slot + RECORD_HEADER, data);
        self.map.write(slot + RECORD_HEADER + data.len(), path);
        self.state(slot).store(COMMITTED, Ordering::Release);
        Some(Pending {
            slot,
            seq,
            fh,
            offset,
            len: data.len(),
            path_len: path.len(),
        })
    }

    /// Room for a record of `len` data bytes at the tail (under the
    /// lock): the slot and its sequence number. The slot's state is FREE
    /// until published; its length is set here, so a walk of the ring
    /// steps over it.
    fn reserve(&self, len: usize, path_len: usize) -> Option<(usize, u64)> {
        let need = RECORD_HEADER + padded(len + path_len);
        let cap = self.capacity();
        let head = self.h(H_HEAD).load(Ordering::Relaxed) as usize;
        let mut tail = self.h(H_TAIL).load(Ordering::Relaxed) as usize;
        let used = self.h(H_USED).load(Ordering::Relaxed) as usize;
        let ring = cap - HEADER;
        if used + need > ring {
            return None;
        }
        // Wrapped (tail before head): the gap between them must hold it.
        if used > 0 && tail < head {
            if tail + need > head {
                return None;
            }
        } else if tail + need > cap {
            // Not at the end: wrap, if the start has room before head.
            if used > 0 && HEADER + need > head {
                return None;
            }
            if tail + RECORD_HEADER <= cap {
                self.state(tail).store(WRAP, Ordering::Release);
            }
            let skipped = cap - tail;
            self.h(H_USED)
                .store((used + skipped) as u64, Ordering::Relaxed);
            tail = HEADER;
            if used == 0 {
                // Empty: head follows, so the skipped end is not counted.
                self.h(H_HEAD).store(HEADER as u64, Ordering::Relaxed);
                self.h(H_USED).store(0, Ordering::Relaxed);
            }
        }
        let used = self.h(H_USED).load(Ordering::Relaxed) as usize;
        self.state(tail).store(FREE, Ordering::Relaxed);
        self.map
            .u32_at(tail + 4)
            .store(len as u32, Ordering::Relaxed);
        self.map
            .u32_at(tail + 32)
            .store(path_len as u32, Ordering::Relaxed);
        let seq = self.h(H_SEQ).fetch_add(1, Ordering::Relaxed);
        self.h(H_TAIL)
            .store((tail + need) as u64, Ordering::Relaxed);
        self.h(H_USED)
            .store((used + need) as u64, Ordering::Relaxed);
        Some((tail, seq))
    }

    /// The server confirmed the write (or refused it: either way it is
    /// not sent again). Frees the records at the head that are done.
    pub fn done(&self, p: &Pending) {
        self.state(p.slot).store(DONE, Ordering::Release);
        let _g = self.alloc.lock().unwrap_or_else(PoisonError::into_inner);
        self.advance_head();
        self.freed.notify_all();
    }

    fn advance_head(&self) {
        let cap = self.capacity();
        loop {
            let head = self.h(H_HEAD).load(Ordering::Relaxed) as usize;
            let used = self.h(H_USED).load(Ordering::Relaxed) as usize;
            if used == 0 {
                return;
            }
            // Too near the end for a record: the rest is skipped.
            let size = if head + RECORD_HEADER > cap {
                cap - head
            } else {
                match self.state(head).load(Ordering::Acquire) {
                    DONE => self.record_size(head),
                    WRAP => cap - head,
                    _ => return,
                }
            };
            let next = if head + size >= cap {
                HEADER
            } else {
                head + size
            };
            self.state(head).store(FREE, Ordering::Relaxed);
            self.h(H_HEAD).store(next as u64, Ordering::Relaxed);
            self.h(H_USED)
                .store((used - size) as u64, Ordering::Relaxed);
        }
    }

    /// A previous process reserved these and died before it published
    /// them (and so before it answered their writes, which the kernel
    /// sends again): nothing will ever finish them.
    fn abandon_unpublished(&self) {
        self.walk(|at, state| {
            if state == FREE {
                self.state(at).store(DONE, Ordering::Relaxed);
            }
        });
        self.advance_head();
    }

    /// Visit every record between head and tail: (slot, state).
    fn walk(&self, mut f: impl FnMut(usize, u32)) {
        let cap = self.capacity();
        let mut at = self.h(H_HEAD).load(Ordering::Relaxed) as usize;
        let mut left = self.h(H_USED).load(Ordering::Relaxed) as usize;
        while left > 0 {
            if at + RECORD_HEADER > cap {
                left = left.saturating_sub(cap - at);
                at = HEADER;
                continue;
            }
            let state = self.state(at).load(Ordering::Acquire);
            if state == WRAP {
                left = left.saturating_sub(cap - at);
                at = HEADER;
                continue;
            }
            let size = self.record_size(at);
            f(at, state);
            left = left.saturating_sub(size);
            at += size;
            if at >= cap {
                at = HEADER;
            }
        }
    }

    fn record_size(&self, at: usize) -> usize {
        let len = self.map.u32_at(at + 4).load(Ordering::Relaxed) as usize;
        let path_len = self.map.u32_at(at + 32).load(Ordering::Relaxed) as usize;
        RECORD_HEADER + padded(len + path_len)
    }

    /// The path a record was written for.
    pub fn path(&self, p: &Pending) -> Vec<u8> {
        self.map.read(p.slot + RECORD_HEADER + p.len, p.path_len)
    }

    /// The data of a record, to send again.
    pub fn data(&self, p: &Pending) -> Vec<u8> {
        self.map.read(p.slot + RECORD_HEADER, p.len)
    }

    /// Every write published and not yet done, oldest first: what a
    /// previous process (or connection) left unconfirmed.
    pub fn unconfirmed(&self) -> Vec<Pending> {
        let _g = self.alloc.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v = Vec::new();
        self.walk(|at, state| {
            if state == COMMITTED {
                v.push(Pending {
                    slot: at,
                    seq: self.map.u64_at(at + 8).load(Ordering::Relaxed),
                    fh: self.map.u64_at(at + 16).load(Ordering::Relaxed),
                    offset: self.map.u64_at(at + 24).load(Ordering::Relaxed),
                    len: self.map.u32_at(at + 4).load(Ordering::Relaxed) as usize,
                    path_len: self.map.u32_at(at + 32).load(Ordering::Relaxed) as usize,
                });
            }
        });
        v.sort_by_key(|p| p.seq);
        v
    }

    /// Bytes of records not yet freed (for statistics).
    pub fn used(&self) -> u64 {
        self.h(H_USED).load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(10)
    }

    #[test]
    fn unconfirmed_writes_survive_into_a_second_mapping_in_order() {
        let map = SharedMap::create("t", WriteLog::size_for(1 << 20)).unwrap();
        let fd = map.fd().try_clone().unwrap();
        let log = WriteLog::open(map);
        let a = log.append(1, 0, b"aaaa", b"/f", soon()).unwrap();
        let b = log.append(2, 10, b"bbb", b"/g", soon()).unwrap();
        let c = log.append(1, 4, b"cc", b"/f", soon()).unwrap();
        log.done(&b);
        // A crash: a new process maps the same memfd.
        let again = WriteLog::open(SharedMap::map(fd).unwrap());
        let left = again.unconfirmed();
        assert_eq!(left.len(), 2);
        assert_eq!((left[0].fh, left[0].offset, left[0].len), (1, 0, 4));
        assert_eq!(again.data(&left[0]), b"aaaa");
        assert_eq!(again.data(&left[1]), b"cc");
        assert_eq!(again.path(&left[1]), b"/f");
        assert!(left[0].seq < left[1].seq);
        again.done(&left[0]);
        again.done(&left[1]);
        assert_eq!(again.used(), 0);
        let _ = (a, c);
    }

    #[test]
    fn the_ring_wraps_and_waits_when_full() {
        let map = SharedMap::create("t", WriteLog::size_for(256 << 10)).unwrap();
        let log = WriteLog::open(map);
        let chunk = vec![7u8; 100_000];
        let mut live = std::collections::VecDeque::new();
        for i in 0..200u64 {
            let p = match log.append(1, i, &chunk, b"/p", soon()) {
                Some(p) => p,
                None => {
                    // Full: confirming the oldest makes room.
                    assert!(live.len() >= 2, "full with {} records", live.len());
                    log.done(&live.pop_front().unwrap());
                    log.append(1, i, &chunk, b"/p", soon())
                        .expect("room after done")
                }
            };
            live.push_back(p);
            let left = log.unconfirmed();
            assert_eq!(left.len(), live.len());
            assert!(left.iter().zip(&live).all(|(a, b)| a == b));
        }
        while let Some(p) = live.pop_front() {
            log.done(&p);
        }
        assert_eq!(log.used(), 0);
    }

    #[test]
    fn a_record_never_published_is_not_listed() {
        let map = SharedMap::create("t", WriteLog::size_for(1 << 20)).unwrap();
        let log = WriteLog::open(map);
        let _g = log.alloc.lock().unwrap();
        // Reserved (as by a process killed before it copied the data).
        let (slot, _) = log.reserve(64, 0).unwrap();
        drop(_g);
        assert_eq!(log.state(slot).load(Ordering::Relaxed), FREE);
        assert!(log.unconfirmed().is_empty());
        // The next record after it is still found.
        let p = log.append(3, 0, b"x", b"/x", soon()).unwrap();
        assert_eq!(log.unconfirmed(), std::slice::from_ref(&p));
        // A new process gives the abandoned one up, so the head moves on
        // once the live one is done.
        let fd = log.map.fd().try_clone().unwrap();
        let again = WriteLog::open(SharedMap::map(fd).unwrap());
        assert_eq!(again.unconfirmed(), std::slice::from_ref(&p));
        again.done(&p);
        assert_eq!(again.used(), 0);
    }
}
