//! The state file: one memfd, held by the supervisor, mapped by every
//! server generation. It holds what a new server needs and cannot ask the
//! kernel for: what INIT negotiated, the node ids the kernel knows with
//! their lookup counts, the open handles, and the recovery counters that
//! `fusebox stats` shows.
//!
//! ```text
//! 0        header (4 KiB): magic, layout, counters, INIT's outcome, status
//! 4 KiB    node slots:   id | nlookup | key length | stamp | key (288 bytes)
//! ...      handle slots: live | kind | fh | node | flags
//! ...      journal slots: state | opcode | unique | before | outcome
//! ```
//!
//! A slot is written by the one thread that claimed it and published by a
//! Release store of its id (nodes) or `live` word (handles); a reader (the
//! next generation, after this one is gone) loads that word first. Freed
//! slots are zeroed words, so a crash between any two stores leaves either
//! the old or the new record, never half of one: a node whose key was
//! being written is not yet published.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

pub use crate::fs::recoverable::{HandleRecord, MAX_KEY};
pub use crate::stats::RecoveryTotals;
use crate::sys::shared_map::SharedMap;

const MAGIC: u64 = u64::from_le_bytes(*b"fbxstat1");
const HEADER: usize = 4096;

const NODE_SLOT: usize = 320;
const HANDLE_SLOT: usize = 32;
const JOURNAL_SLOT: usize = 512;
const J_BODY: usize = 48;
/// Largest reply body a journal slot holds (CREATE's is 144 bytes).
pub const MAX_JOURNALED_REPLY: usize = JOURNAL_SLOT - J_BODY;

// Header offsets.
const H_MAGIC: usize = 0;
const H_NODES: usize = 8;
const H_HANDLES: usize = 16;
const H_GENERATION: usize = 24;
const H_RESTARTS: usize = 32;
const H_REPLAYS: usize = 40;
const H_LAST_PAUSE_US: usize = 48;
const H_SERVER_PID: usize = 56;
const H_CONN_LEN: usize = 64;
const H_STATUS_LEN: usize = 68;
const H_NODES_LIVE: usize = 72;
/// One past the highest node / handle slot ever used: scans stop there, so
/// a restore does not touch (and make resident) the untouched rest.
const H_NODE_HWM: usize = 80;
const H_HANDLE_HWM: usize = 88;
const H_JOURNAL: usize = 96;
const H_JOURNAL_HWM: usize = 104;
/// Which of the two statistics halves holds the latest copy, and lengths.
const H_STATS_WHICH: usize = 112;
const H_STATS_LEN: usize = 116; // two u32s
/// Stamps node slot changes (see `node_changes_since`).
const H_NODE_SEQ: usize = 128;
const N_STAMP: usize = 24;
const N_KEY: usize = 32;
/// Per-request statistics carried to the next generation: two halves,
/// written in turn, so a crash mid-write leaves the previous copy.
const STATS_HALF: usize = 64 << 10;
const H_CONN: usize = 1024;
const CONN_MAX: usize = 1024;
const H_STATUS: usize = 2048;
const STATUS_MAX: usize = 1024;

/// How many nodes and open handles a state file can hold.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// Nodes the kernel may hold at once and still be recorded.
    pub nodes: usize,
    /// Open files and directories that can be recorded at once.
    pub handles: usize,
    /// Non-idempotent requests in flight at once that the journal covers.
    pub journal: usize,
}

impl Default for Capacity {
    /// A million nodes, 256 Ki open handles and 4,096 journaled requests
    /// in flight: 330 MiB of address space in a sparse memfd, of which only
    /// slots ever used take memory (320 bytes a node, 32 an open handle,
    /// 512 a journaled request).
    fn default() -> Self {
        Capacity {
            nodes: 1 << 20,
            handles: 1 << 18,
            journal: 4096,
        }
    }
}

/// The state file's mapping, in the supervisor or in a server.
pub struct StateFile {
    map: SharedMap,
    cap: Capacity,
}

impl StateFile {
    /// A new, empty state file sized for `cap` (the supervisor makes it).
    pub fn create(cap: Capacity) -> io::Result<StateFile> {
        let map = SharedMap::create("fusebox-state", Self::len(cap))?;
        map.u64_at(H_NODES)
            .store(cap.nodes as u64, Ordering::Relaxed);
        map.u64_at(H_HANDLES)
            .store(cap.handles as u64, Ordering::Relaxed);
        map.u64_at(H_JOURNAL)
            .store(cap.journal as u64, Ordering::Relaxed);
        map.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
        Ok(StateFile { map, cap })
    }

    /// Map a state file a supervisor handed over.
    pub fn open(fd: OwnedFd) -> io::Result<StateFile> {
        let map = SharedMap::map(fd)?;
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if map.len() < HEADER || map.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(bad("not a fusebox state file (bad magic)"));
        }
        let cap = Capacity {
            nodes: map.u64_at(H_NODES).load(Ordering::Relaxed) as usize,
            handles: map.u64_at(H_HANDLES).load(Ordering::Relaxed) as usize,
            journal: map.u64_at(H_JOURNAL).load(Ordering::Relaxed) as usize,
        };
        if Self::len(cap) > map.len() {
            return Err(bad("state file shorter than its capacity says"));
        }
        Ok(StateFile { map, cap })
    }

    fn len(cap: Capacity) -> usize {
        Self::stats_off(cap) + 2 * STATS_HALF
    }

    fn stats_off(cap: Capacity) -> usize {
        HEADER + cap.nodes * NODE_SLOT + cap.handles * HANDLE_SLOT + cap.journal * JOURNAL_SLOT
    }

    /// Keep `bytes` (serialized statistics) for the next generation.
    pub fn set_stats(&self, bytes: &[u8]) {
        if bytes.len() > STATS_HALF {
            tracing::debug!(len = bytes.len(), "statistics too large to carry over");
            return;
        }
        let next = 1 - self.map.u32_at(H_STATS_WHICH).load(Ordering::Acquire) as usize % 2;
        self.map
            .write(Self::stats_off(self.cap) + next * STATS_HALF, bytes);
        self.map
            .u32_at(H_STATS_LEN + 4 * next)
            .store(bytes.len() as u32, Ordering::Release);
        self.map
            .u32_at(H_STATS_WHICH)
            .store(next as u32, Ordering::Release);
    }

    /// What the last generation kept, if anything.
    pub fn stats(&self) -> Option<Vec<u8>> {
        let which = self.map.u32_at(H_STATS_WHICH).load(Ordering::Acquire) as usize % 2;
        let len = self
            .map
            .u32_at(H_STATS_LEN + 4 * which)
            .load(Ordering::Acquire) as usize;
        (len > 0 && len <= STATS_HALF).then(|| {
            self.map
                .read(Self::stats_off(self.cap) + which * STATS_HALF, len)
        })
    }

    /// The memfd, to hand to a server.
    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }

    /// What the file was sized for.
    pub fn capacity(&self) -> Capacity {
        self.cap
    }

    // ---------------------------------------------------------- counters

    /// The generation of the server serving now (or last): 1 for the first.
    pub fn generation(&self) -> u64 {
        self.map.u64_at(H_GENERATION).load(Ordering::Acquire)
    }

    /// Record that generation `g` serves.
    pub fn set_generation(&self, g: u64) {
        self.map.u64_at(H_GENERATION).store(g, Ordering::Release);
    }

    /// Count a server started again after one died.
    pub fn add_restart(&self) {
        self.map.u64_at(H_RESTARTS).fetch_add(1, Ordering::AcqRel);
    }

    /// Count a resent request answered from the journal or found applied.
    pub fn add_replay(&self) {
        self.map.u64_at(H_REPLAYS).fetch_add(1, Ordering::AcqRel);
    }

    /// Record how long the mount last went unserved, in microseconds.
    pub fn set_last_pause_us(&self, us: u64) {
        self.map
            .u64_at(H_LAST_PAUSE_US)
            .store(us, Ordering::Release);
    }

    /// Record the serving process.
    pub fn set_server_pid(&self, pid: u32) {
        self.map
            .u64_at(H_SERVER_PID)
            .store(pid as u64, Ordering::Release);
    }

    /// The serving process, as recorded; 0 before the first.
    pub fn server_pid(&self) -> u32 {
        self.map.u64_at(H_SERVER_PID).load(Ordering::Acquire) as u32
    }

    /// The counters, for `fusebox stats`.
    pub fn totals(&self) -> RecoveryTotals {
        RecoveryTotals {
            generation: self.generation(),
            restarts: self.map.u64_at(H_RESTARTS).load(Ordering::Acquire),
            replays: self.map.u64_at(H_REPLAYS).load(Ordering::Acquire),
            last_pause_us: self.map.u64_at(H_LAST_PAUSE_US).load(Ordering::Acquire),
            nodes: self.map.u64_at(H_NODES_LIVE).load(Ordering::Acquire),
            status: self.status(),
        }
    }

    // ------------------------------------------------- connection, status

    /// INIT's outcome, written once by the first server before it serves.
    pub fn set_connection(&self, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() > CONN_MAX {
            return Err(io::Error::other(
                "negotiated connection too large for the state file",
            ));
        }
        self.map.write(H_CONN, bytes);
        self.map
            .u32_at(H_CONN_LEN)
            .store(bytes.len() as u32, Ordering::Release);
        Ok(())
    }

    /// INIT's outcome as the first server wrote it; `None` before that.
    pub fn connection(&self) -> Option<Vec<u8>> {
        match self.map.u32_at(H_CONN_LEN).load(Ordering::Acquire) as usize {
            0 => None,
            n => Some(self.map.read(H_CONN, n.min(CONN_MAX))),
        }
    }

    /// Set by the supervisor only, while no server runs.
    pub fn set_status(&self, s: &str) {
        let b = &s.as_bytes()[..s.len().min(STATUS_MAX)];
        self.map.u32_at(H_STATUS_LEN).store(0, Ordering::Release);
        self.map.write(H_STATUS, b);
        self.map
            .u32_at(H_STATUS_LEN)
            .store(b.len() as u32, Ordering::Release);
    }

    /// Why the mount is no longer served; empty while it is.
    pub fn status(&self) -> String {
        let n = self.map.u32_at(H_STATUS_LEN).load(Ordering::Acquire) as usize;
        String::from_utf8_lossy(&self.map.read(H_STATUS, n.min(STATUS_MAX))).into_owned()
    }

    // -------------------------------------------------------------- nodes

    fn node_off(&self, slot: usize) -> usize {
        assert!(slot < self.cap.nodes);
        HEADER + slot * NODE_SLOT
    }

    /// Publish `id` with `key` and `nlookup` in a slot this thread owns.
    pub fn node_put(&self, slot: usize, id: u64, key: &[u8], nlookup: u64) {
        let off = self.node_off(slot);
        debug_assert!(key.len() <= MAX_KEY);
        self.map.u64_at(off + 8).store(nlookup, Ordering::Relaxed);
        self.map
            .u32_at(off + 16)
            .store(key.len() as u32, Ordering::Relaxed);
        self.map.write(off + N_KEY, key);
        self.map
            .u64_at(H_NODE_HWM)
            .fetch_max(slot as u64 + 1, Ordering::AcqRel);
        self.map.u64_at(off).store(id, Ordering::Release);
        self.stamp(off);
        self.map.u64_at(H_NODES_LIVE).fetch_add(1, Ordering::AcqRel);
    }

    /// Give a published node another key (its filesystem moved it). The
    /// length goes to 0 while the bytes change, so a reader (or a crash)
    /// in between sees no key, never half of one: such a node is not
    /// restored, rather than restored as something else.
    pub fn node_set_key(&self, slot: usize, key: &[u8]) {
        let off = self.node_off(slot);
        debug_assert!(key.len() <= MAX_KEY);
        let len = self.map.u32_at(off + 16);
        len.store(0, Ordering::Release);
        self.map.write(off + N_KEY, key);
        len.store(key.len() as u32, Ordering::Release);
        self.stamp(off);
    }

    /// Mark the slot at `off` changed, after the change: a reader that
    /// loaded the sequence before this sees a stamp above what it loaded.
    fn stamp(&self, off: usize) {
        let n = self.map.u64_at(H_NODE_SEQ).fetch_add(1, Ordering::AcqRel) + 1;
        self.map.u64_at(off + N_STAMP).store(n, Ordering::Release);
    }

    /// The change sequence now (for `node_changes_since`).
    pub fn node_seq(&self) -> u64 {
        self.map.u64_at(H_NODE_SEQ).load(Ordering::Acquire)
    }

    /// Slots changed after the sequence was `seen`, as they are now:
    /// (slot, id or 0, key, nlookup).
    pub fn node_changes_since(&self, seen: u64) -> Vec<(usize, u64, Vec<u8>, u64)> {
        let hwm =
            (self.map.u64_at(H_NODE_HWM).load(Ordering::Acquire) as usize).min(self.cap.nodes);
        (0..hwm)
            .filter_map(|slot| {
                let off = self.node_off(slot);
                if self.map.u64_at(off + N_STAMP).load(Ordering::Acquire) <= seen {
                    return None;
                }
                Some(self.node_at(slot))
            })
            .collect()
    }

    fn node_at(&self, slot: usize) -> (usize, u64, Vec<u8>, u64) {
        let off = self.node_off(slot);
        let id = self.map.u64_at(off).load(Ordering::Acquire);
        let nlookup = self.map.u64_at(off + 8).load(Ordering::Acquire);
        let len = (self.map.u32_at(off + 16).load(Ordering::Acquire) as usize).min(MAX_KEY);
        (slot, id, self.map.read(off + N_KEY, len), nlookup)
    }

    /// Add `delta` (may be negative) to a published node's count; returns
    /// the new count.
    pub fn node_add(&self, slot: usize, delta: i64) -> u64 {
        let off = self.node_off(slot);
        let c = self.map.u64_at(off + 8);
        if delta == 0 {
            return c.load(Ordering::Acquire);
        }
        let now = if delta > 0 {
            c.fetch_add(delta as u64, Ordering::AcqRel) + delta as u64
        } else {
            let d = delta.unsigned_abs();
            let prev = c
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v.saturating_sub(d))
                })
                .unwrap_or(0);
            prev.saturating_sub(d)
        };
        self.stamp(off);
        now
    }

    /// Unpublish the node in `slot` (its count reached 0).
    pub fn node_clear(&self, slot: usize) {
        let off = self.node_off(slot);
        if self.map.u64_at(off).swap(0, Ordering::AcqRel) != 0 {
            self.stamp(off);
            self.map.u64_at(H_NODES_LIVE).fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Every published node: (slot, id, key, nlookup).
    pub fn nodes(&self) -> Vec<(usize, u64, Vec<u8>, u64)> {
        let mut v = Vec::new();
        let hwm =
            (self.map.u64_at(H_NODE_HWM).load(Ordering::Acquire) as usize).min(self.cap.nodes);
        for slot in 0..hwm {
            if self.map.u64_at(self.node_off(slot)).load(Ordering::Acquire) == 0 {
                continue;
            }
            v.push(self.node_at(slot));
        }
        v
    }

    // ------------------------------------------------------------ handles

    fn handle_off(&self, slot: usize) -> usize {
        assert!(slot < self.cap.handles);
        HEADER + self.cap.nodes * NODE_SLOT + slot * HANDLE_SLOT
    }

    /// Publish `h` in a slot this thread owns.
    pub fn handle_put(&self, slot: usize, h: &HandleRecord) {
        let off = self.handle_off(slot);
        self.map.u64_at(off + 8).store(h.fh, Ordering::Relaxed);
        self.map.u64_at(off + 16).store(h.node, Ordering::Relaxed);
        self.map.u32_at(off + 24).store(h.flags, Ordering::Relaxed);
        self.map
            .u32_at(off + 28)
            .store(h.backing_id as u32, Ordering::Relaxed);
        self.map
            .u32_at(off + 4)
            .store(h.dir as u32, Ordering::Relaxed);
        self.map
            .u64_at(H_HANDLE_HWM)
            .fetch_max(slot as u64 + 1, Ordering::AcqRel);
        self.map.u32_at(off).store(1, Ordering::Release);
    }

    /// The open(2) flags recorded in `slot`.
    pub fn handle_flags(&self, slot: usize) -> u32 {
        self.map
            .u32_at(self.handle_off(slot) + 24)
            .load(Ordering::Relaxed)
    }

    /// Unpublish the handle in `slot` (released).
    pub fn handle_clear(&self, slot: usize) {
        self.map
            .u32_at(self.handle_off(slot))
            .store(0, Ordering::Release);
    }

    /// Every published handle, with its slot.
    pub fn handles(&self) -> Vec<(usize, HandleRecord)> {
        let mut v = Vec::new();
        let hwm =
            (self.map.u64_at(H_HANDLE_HWM).load(Ordering::Acquire) as usize).min(self.cap.handles);
        for slot in 0..hwm {
            let off = self.handle_off(slot);
            if self.map.u32_at(off).load(Ordering::Acquire) == 0 {
                continue;
            }
            v.push((
                slot,
                HandleRecord {
                    fh: self.map.u64_at(off + 8).load(Ordering::Relaxed),
                    node: self.map.u64_at(off + 16).load(Ordering::Relaxed),
                    flags: self.map.u32_at(off + 24).load(Ordering::Relaxed),
                    backing_id: self.map.u32_at(off + 28).load(Ordering::Relaxed) as i32,
                    dir: self.map.u32_at(off + 4).load(Ordering::Relaxed) != 0,
                },
            ));
        }
        v
    }

    // ------------------------------------------------------------ journal

    fn journal_off(&self, slot: usize) -> usize {
        assert!(slot < self.cap.journal);
        HEADER + self.cap.nodes * NODE_SLOT + self.cap.handles * HANDLE_SLOT + slot * JOURNAL_SLOT
    }

    /// A non-idempotent request is about to be applied; `before` is what
    /// the name (or file) looked like.
    pub fn journal_begin(&self, slot: usize, unique: u64, opcode: u32, before: Before) {
        let off = self.journal_off(slot);
        self.map.u32_at(off).store(0, Ordering::Release);
        self.map.u32_at(off + 4).store(opcode, Ordering::Relaxed);
        self.map.u64_at(off + 8).store(unique, Ordering::Relaxed);
        let (kind, a) = before.encode();
        self.map.u32_at(off + 32).store(kind, Ordering::Relaxed);
        self.map.u64_at(off + 16).store(a, Ordering::Relaxed);
        self.map
            .u64_at(H_JOURNAL_HWM)
            .fetch_max(slot as u64 + 1, Ordering::AcqRel);
        self.map.u32_at(off).store(JOURNAL_BEGUN, Ordering::Release);
    }

    /// It was applied, and this is its answer (an errno, or a body).
    pub fn journal_done(&self, slot: usize, error: i32, body: &[u8]) {
        let off = self.journal_off(slot);
        let body = &body[..body.len().min(MAX_JOURNALED_REPLY)];
        self.map
            .u32_at(off + 36)
            .store(error as u32, Ordering::Relaxed);
        self.map
            .u32_at(off + 40)
            .store(body.len() as u32, Ordering::Relaxed);
        self.map.write(off + J_BODY, body);
        self.map.u32_at(off).store(JOURNAL_DONE, Ordering::Release);
    }

    /// Free the journal slot: the request's answer reached the kernel.
    pub fn journal_clear(&self, slot: usize) {
        self.map
            .u32_at(self.journal_off(slot))
            .store(0, Ordering::Release);
    }

    /// The record of `unique` (without the resend bit), if any.
    pub fn journal_find(&self, unique: u64) -> Option<JournalRecord> {
        let hwm =
            (self.map.u64_at(H_JOURNAL_HWM).load(Ordering::Acquire) as usize).min(self.cap.journal);
        (0..hwm).find_map(|slot| {
            let off = self.journal_off(slot);
            let state = self.map.u32_at(off).load(Ordering::Acquire);
            if state == 0 || self.map.u64_at(off + 8).load(Ordering::Relaxed) != unique {
                return None;
            }
            let before = Before::decode(
                self.map.u32_at(off + 32).load(Ordering::Relaxed),
                self.map.u64_at(off + 16).load(Ordering::Relaxed),
            );
            let done = (state == JOURNAL_DONE).then(|| {
                let len = (self.map.u32_at(off + 40).load(Ordering::Relaxed) as usize)
                    .min(MAX_JOURNALED_REPLY);
                (
                    self.map.u32_at(off + 36).load(Ordering::Relaxed) as i32,
                    self.map.read(off + J_BODY, len),
                )
            });
            Some(JournalRecord {
                slot,
                opcode: self.map.u32_at(off + 4).load(Ordering::Relaxed),
                before,
                done,
            })
        })
    }

    /// Slots in use (after a restore, by requests of a dead server).
    pub fn journal_used(&self) -> Vec<usize> {
        let hwm =
            (self.map.u64_at(H_JOURNAL_HWM).load(Ordering::Acquire) as usize).min(self.cap.journal);
        (0..hwm)
            .filter(|&s| self.map.u32_at(self.journal_off(s)).load(Ordering::Acquire) != 0)
            .collect()
    }
}

const JOURNAL_BEGUN: u32 = 1;
const JOURNAL_DONE: u32 = 2;

/// What a name or file looked like before a non-idempotent request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Before {
    /// Not looked at (the request is rerun if it comes back unanswered).
    Unknown,
    /// The name did not exist.
    Absent,
    /// The name was this inode.
    Present {
        /// Its inode number.
        ino: u64,
    },
    /// The file had this size (an append).
    Size(u64),
}

impl Before {
    fn encode(self) -> (u32, u64) {
        match self {
            Before::Unknown => (0, 0),
            Before::Absent => (1, 0),
            Before::Present { ino } => (2, ino),
            Before::Size(s) => (3, s),
        }
    }

    fn decode(kind: u32, a: u64) -> Before {
        match kind {
            1 => Before::Absent,
            2 => Before::Present { ino: a },
            3 => Before::Size(a),
            _ => Before::Unknown,
        }
    }
}

/// A journaled request found again after a crash.
#[derive(Clone, Debug)]
pub struct JournalRecord {
    /// The journal slot it is in.
    pub slot: usize,
    /// The request's opcode.
    pub opcode: u32,
    /// What the name or file looked like before.
    pub before: Before,
    /// Applied and answered with (errno or 0, body); None: begun only.
    pub done: Option<(i32, Vec<u8>)>,
}
