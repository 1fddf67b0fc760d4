//! io_uring rings a supervisor owns and its servers drive, so that a
//! server's death cancels nothing (DESIGN.md, "Recovery over io_uring").
//!
//! The supervisor creates one ring per queue thread with
//! IORING_SETUP_SQPOLL: the kernel's SQ thread, a thread of the supervisor,
//! issues every command, so every FUSE request delivery and every commit
//! runs in that thread, in the supervisor's memory. The entries' buffers
//! are in a memfd (the ring area) the supervisor maps and registers by its
//! own addresses; a server maps the same memfd wherever it likes and reads
//! requests and writes answers there. A server only writes SQEs into the
//! shared submission ring and reads CQEs from the shared completion ring
//! (both mapped from the inherited ring fd); it never registers anything
//! with the ring, so its exit leaves no io_uring task context to cancel.
//!
//! Each entry also has a slot in the area saying where it stands, kept by
//! the serving process so the next one can go on from there (see
//! [`SlotState`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use io_uring::{cqueue, squeue, IoUring, Parameters};
use serde::{Deserialize, Serialize};

use super::shared_map::SharedMap;
use fusebox_abi as abi;

const PAGE: usize = 4096;

/// Bytes of `io_uring_params` (include/uapi/linux/io_uring.h).
pub const PARAMS_LEN: usize = 120;
/// `IORING_OFF_SQ_RING`: the mmap offset of the submission ring.
const OFF_SQ_RING: u64 = 0;

/// Fixed-file index of the /dev/fuse fd in a held ring.
pub const DEVICE_INDEX: u32 = 0;
/// Fixed-file index of the ring's wake-up eventfd.
pub const WAKE_INDEX: u32 = 1;

/// One slot per entry, and one more per ring for its wake-up read.
const SLOT: usize = 256;
/// Slot fields (byte offsets).
const SLOT_STATE: usize = 0;
const SLOT_POS: usize = 4;
const SLOT_OP: usize = 8;
const SLOT_REPLY_LEN: usize = 12;
const SLOT_COMMIT_ID: usize = 16;
const SLOT_UNDO_LEN: usize = 24;
const SLOT_RES: usize = 28;
/// A copy of the request's `fuse_in_header` (an answer overwrites it).
const SLOT_IN_HEADER: usize = 32;
/// The wake-up read's 8-byte buffer (wake slot only).
const SLOT_WAKE_BUF: usize = 72;
/// A copy of the request's `fuse_uring_ent_in_out` (a commit overwrites it).
const SLOT_ENT_IN_OUT: usize = 96;
/// The iovec pair REGISTER names: supervisor addresses of the buffers.
const SLOT_IOV: usize = 128;
/// Where in an entry's header page the bytes an answer overwrites are
/// saved first, and how many fit.
const UNDO_AT: usize = 512;
/// Most bytes of a request an answer may overwrite and still be undone.
pub const UNDO_CAP: usize = PAGE - UNDO_AT;
/// `undo_len` of an answer that overwrote more than [`UNDO_CAP`].
const UNDO_LOST: u32 = u32::MAX;

const IN_HEADER_LEN: usize = size_of::<abi::InHeader>();
const ENT_IN_OUT: usize = 256;
const ENT_IN_OUT_LEN: usize = size_of::<abi::UringEntInOut>();
/// `sizeof(struct fuse_uring_req_header)`.
pub const HEADER_LEN: usize = size_of::<abi::UringReqHeader>();

/// Where an entry stands, as its serving process last recorded it. Every
/// change is recorded before the step it announces, so a process killed
/// between any two instructions leaves a state its successor can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never handed to the kernel.
    Empty,
    /// A command (REGISTER, COMMIT_AND_FETCH, the wake-up read) is going
    /// into the submission ring at position `pos`: the kernel has it once
    /// the ring's tail has passed `pos`.
    Pushing {
        /// Its position in the submission ring.
        pos: u32,
        /// The command (`uring_cmd` op, or `WAKE_OP`).
        op: u32,
        /// The commit id it carries.
        commit_id: u64,
    },
    /// Its completion was reaped: a request is in the buffers (saved
    /// header in the slot), being served.
    Held,
    /// An answer is being written over the request; what it overwrites
    /// was saved first (`Answering { undo_len }` bytes of payload).
    Answering {
        /// Payload bytes saved, or `None` if there were too many.
        undo_len: Option<u32>,
    },
    /// The answer is whole in the buffers (its body `reply_len` bytes),
    /// its commit not yet pushed.
    Answered {
        /// Bytes of the answer's body in the payload buffer.
        reply_len: u32,
        /// The request's commit id.
        commit_id: u64,
    },
    /// Its completion was reaped and carried an error (`res`), no request.
    Failed {
        /// The completion's result.
        res: i32,
    },
    /// Its command is in the kernel's hands (published, or taken over as
    /// published): its completion will come. What the command was stays
    /// in the slot (`last_command`).
    WithKernel,
    /// Its request was torn by an answer that overwrote more than could
    /// be saved: only an error answer may go back for it.
    Lost,
}

const ST_EMPTY: u32 = 0;
const ST_PUSHING: u32 = 1;
const ST_HELD: u32 = 2;
const ST_ANSWERING: u32 = 3;
const ST_FAILED: u32 = 4;
const ST_ANSWERED: u32 = 5;
const ST_WITH_KERNEL: u32 = 6;
const ST_LOST: u32 = 7;

/// How the ring area is laid out: the slots, then one header page and one
/// payload buffer per entry, ring after ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AreaLayout {
    /// Rings (queue threads).
    pub rings: usize,
    /// Entries per ring.
    pub depth: usize,
    /// Bytes of each entry's payload buffer.
    pub payload_len: usize,
}

impl AreaLayout {
    fn slots_len(&self) -> usize {
        (self.rings * (self.depth + 1) * SLOT).next_multiple_of(PAGE)
    }

    fn stride(&self) -> usize {
        PAGE + self.payload_len.next_multiple_of(PAGE)
    }

    /// Offset of slot `idx` of ring `ring` (`idx == depth`: the wake slot).
    fn slot(&self, ring: usize, idx: usize) -> usize {
        (ring * (self.depth + 1) + idx) * SLOT
    }

    /// Offset of an entry's header buffer.
    fn header(&self, ring: usize, idx: usize) -> usize {
        self.slots_len() + (ring * self.depth + idx) * self.stride()
    }

    /// Offset of an entry's payload buffer.
    fn payload(&self, ring: usize, idx: usize) -> usize {
        self.header(ring, idx) + PAGE
    }

    /// Bytes of the whole area.
    pub fn total(&self) -> usize {
        self.slots_len() + self.rings * self.depth * self.stride()
    }
}

/// What a server needs to drive one held ring, besides its fd.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeldRingInfo {
    /// The fd number the ring is inherited at.
    pub fd: i32,
    /// The queue (CPU) its entries serve.
    pub qid: u16,
    /// `io_uring_params` as the kernel filled them in at setup.
    pub params: Vec<u8>,
}

/// What a server needs to drive the held rings: they come inherited (the
/// kernel refuses io_uring fds in SCM_RIGHTS), the area and the wake-up
/// eventfds come with the handoff message.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeldRingsInfo {
    /// The area's layout.
    pub layout: AreaLayout,
    /// Where the supervisor mapped the area: the addresses the kernel
    /// copies to and from.
    pub kernel_base: u64,
    /// One per ring, in ring order.
    pub rings: Vec<HeldRingInfo>,
}

/// The rings a supervisor holds for its servers.
pub struct HeldRings {
    rings: Vec<IoUring<squeue::Entry128, cqueue::Entry>>,
    wakes: Vec<OwnedFd>,
    qids: Vec<u16>,
    area: Arc<SharedMap>,
    layout: AreaLayout,
}

impl HeldRings {
    /// Rings for `qids` (one per queue thread, the queue it serves), each
    /// of `layout.depth` entries, on the connection of `device`.
    ///
    /// Each CPU queue gets its own SQ thread, pinned to that CPU
    /// (IORING_SETUP_SQ_AFF) and shared by the queue's rings
    /// (IORING_SETUP_ATTACH_WQ). The kernel picks a request's queue by the
    /// CPU its caller runs on and the queue's thread is pinned there, so
    /// caller, SQ thread and server then hand the request on without
    /// waking another CPU. One thread for every ring crossed CPUs twice
    /// per request: measured on two vCPUs with two callers, it alone cost
    /// 0.82x of the stat rate (DESIGN.md, "Recovery over io_uring"). An SQ
    /// thread sleeps after `sq_idle_ms` without work.
    pub fn create(
        device: BorrowedFd<'_>,
        qids: &[u16],
        layout: AreaLayout,
        sq_idle_ms: u32,
    ) -> io::Result<HeldRings> {
        let area = Arc::new(SharedMap::create("fusebox-ring-area", layout.total())?);
        let base = area.base().as_ptr() as u64;
        let mut rings: Vec<IoUring<squeue::Entry128, cqueue::Entry>> = Vec::new();
        let mut wakes = Vec::new();
        for (r, &qid) in qids.iter().enumerate() {
            let sq_thread_of = qids[..r]
                .iter()
                .position(|&q| q == qid)
                .map(|first| rings[first].as_raw_fd());
            let ring = Self::build_ring(layout.depth, sq_idle_ms, qid, sq_thread_of)?;
            // Blocking, as a queue thread's own (see `RingMailbox`).
            let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
            ring.submitter()
                .register_files(&[device.as_raw_fd(), wake.as_raw_fd()])?;
            // Servers inherit the ring fds: nothing else may carry them.
            rustix::io::fcntl_setfd(
                // SAFETY: the ring's fd is open for as long as `ring`.
                unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) },
                rustix::io::FdFlags::empty(),
            )?;
            for idx in 0..layout.depth {
                let iov = [
                    (base + layout.header(r, idx) as u64, HEADER_LEN as u64),
                    (
                        base + layout.payload(r, idx) as u64,
                        layout.payload_len as u64,
                    ),
                ];
                let at = layout.slot(r, idx) + SLOT_IOV;
                for (k, (addr, len)) in iov.into_iter().enumerate() {
                    area.u64_at(at + 16 * k).store(addr, Ordering::Relaxed);
                    area.u64_at(at + 16 * k + 8).store(len, Ordering::Relaxed);
                }
            }
            rings.push(ring);
            wakes.push(wake);
        }
        Ok(HeldRings {
            rings,
            wakes,
            qids: qids.to_vec(),
            area,
            layout,
        })
    }

    /// One ring: sharing the SQ thread of `sq_thread_of`'s ring, or with
    /// a new one pinned to CPU `qid` (unpinned where this process may not
    /// run there: SQ_AFF is then refused with EINVAL).
    fn build_ring(
        depth: usize,
        sq_idle_ms: u32,
        qid: u16,
        sq_thread_of: Option<i32>,
    ) -> io::Result<IoUring<squeue::Entry128, cqueue::Entry>> {
        let entries = (depth + 1).next_power_of_two() as u32;
        let builder = |pin: bool| {
            let mut b = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
            b.setup_sqpoll(sq_idle_ms);
            b.setup_cqsize((2 * depth + 4) as u32);
            match sq_thread_of {
                Some(fd) => {
                    b.setup_attach_wq(fd);
                }
                None if pin => {
                    b.setup_sqpoll_cpu(u32::from(qid));
                }
                None => {}
            }
            b
        };
        match builder(true).build(entries) {
            Err(e) if sq_thread_of.is_none() && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(qid, error = %e, "SQ thread not pinned to its queue's CPU");
                builder(false).build(entries)
            }
            built => built,
        }
    }

    /// What a server is told about the rings.
    pub fn info(&self) -> HeldRingsInfo {
        HeldRingsInfo {
            layout: self.layout,
            kernel_base: self.area.base().as_ptr() as u64,
            rings: self
                .rings
                .iter()
                .zip(&self.qids)
                .map(|(ring, &qid)| HeldRingInfo {
                    fd: ring.as_raw_fd(),
                    qid,
                    params: params_bytes(ring.params()).to_vec(),
                })
                .collect(),
        }
    }

    /// The fds a server gets in the handoff message: the area, then each
    /// ring's wake-up eventfd.
    pub fn handoff_fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = vec![self.area.fd().as_fd()];
        fds.extend(self.wakes.iter().map(|w| w.as_fd()));
        fds
    }

    /// The rings as a server in this process would take them: for the
    /// supervisor itself, when it answers requests with no server.
    pub fn attach_here(&self) -> io::Result<Vec<Attached>> {
        let info = self.info();
        let mut out = Vec::new();
        for (r, ring) in info.rings.into_iter().enumerate() {
            let fd = rustix::io::fcntl_dupfd_cloexec(
                // SAFETY: the ring's fd is open for as long as `self`.
                unsafe { BorrowedFd::borrow_raw(ring.fd) },
                0,
            )?;
            out.push(Attached {
                fd,
                qid: ring.qid,
                index: r,
                params: ring.params,
                area: self.area.clone(),
                layout: self.layout,
                kernel_base: info.kernel_base,
                wake: self.wakes[r].try_clone()?,
            });
        }
        Ok(out)
    }
}

/// One held ring as a server takes it, ready for `QueueRing::attach`.
pub struct Attached {
    /// The ring's fd (this process's own).
    pub fd: OwnedFd,
    /// The queue its entries serve.
    pub qid: u16,
    /// Its index in the area.
    pub index: usize,
    /// `io_uring_params` from setup.
    pub params: Vec<u8>,
    /// The area, mapped in this process.
    pub area: Arc<SharedMap>,
    /// The area's layout.
    pub layout: AreaLayout,
    /// The supervisor's address of the area.
    pub kernel_base: u64,
    /// The ring's wake-up eventfd (fixed file [`WAKE_INDEX`] in the ring).
    pub wake: OwnedFd,
}

impl HeldRingsInfo {
    /// Take the rings in a server: the inherited ring fds, the area and
    /// the eventfds handed over (`fds`, in [`HeldRings::handoff_fds`]
    /// order).
    pub fn take(self, fds: Vec<OwnedFd>) -> io::Result<Vec<Attached>> {
        if fds.len() != 1 + self.rings.len() {
            return Err(io::Error::other(format!(
                "expected the ring area and {} eventfds, got {} fds",
                self.rings.len(),
                fds.len()
            )));
        }
        let mut fds = fds.into_iter();
        let area = Arc::new(SharedMap::map(fds.next().expect("counted"))?);
        if area.len() < self.layout.total() {
            return Err(io::Error::other("the ring area is smaller than its layout"));
        }
        let mut out = Vec::new();
        for (r, ring) in self.rings.into_iter().enumerate() {
            let fd = super::take_inherited_ring(ring.fd)?;
            out.push(Attached {
                fd,
                qid: ring.qid,
                index: r,
                params: ring.params,
                area: area.clone(),
                layout: self.layout,
                kernel_base: self.kernel_base,
                wake: fds.next().expect("counted"),
            });
        }
        Ok(out)
    }
}

fn params_bytes(p: &Parameters) -> [u8; PARAMS_LEN] {
    const { assert!(size_of::<Parameters>() == PARAMS_LEN) };
    // SAFETY: `Parameters` is #[repr(transparent)] over the kernel's
    // `io_uring_params`, a #[repr(C)] struct of PARAMS_LEN bytes of plain
    // integers with no padding: every byte is initialised.
    unsafe { std::ptr::read((p as *const Parameters).cast::<[u8; PARAMS_LEN]>()) }
}

/// A held ring as a server drives it: the submission ring, its SQEs and
/// the completion ring, mapped from the inherited ring fd. The io-uring
/// crate builds a ring of 128-byte SQEs only by creating it, so this is
/// the crate's mapping done again for a ring someone else made; it also
/// lets the completion head move only after the entry's slot says what the
/// completion brought.
pub(crate) struct HeldRing {
    fd: OwnedFd,
    maps: Vec<(NonNull<u8>, usize)>,
    sq_head: NonNull<AtomicU32>,
    sq_tail: NonNull<AtomicU32>,
    sq_flags: NonNull<AtomicU32>,
    sq_mask: u32,
    sq_entries: u32,
    sq_array: NonNull<u32>,
    sqes: NonNull<[u8; 128]>,
    cq_head: NonNull<AtomicU32>,
    cq_tail: NonNull<AtomicU32>,
    cq_mask: u32,
    cqes: NonNull<[u8; 16]>,
}

// SAFETY: the mappings belong to this value alone; the shared words in them
// are reached through atomics.
unsafe impl Send for HeldRing {}

const OFF_CQ_RING: u64 = 0x800_0000;
const OFF_SQES: u64 = 0x1000_0000;
const FEAT_SINGLE_MMAP: u32 = 1;
const SETUP_SQPOLL: u32 = 2;
const SQ_NEED_WAKEUP: u32 = 1;
const ENTER_GETEVENTS: u32 = 1;
const ENTER_SQ_WAKEUP: u32 = 2;

impl HeldRing {
    /// Map the ring behind `fd`, set up with `params`.
    pub(crate) fn map(fd: OwnedFd, params: &[u8]) -> io::Result<HeldRing> {
        if params.len() != PARAMS_LEN {
            return Err(io::Error::other("io_uring_params of the wrong size"));
        }
        let word = |at: usize| u32::from_ne_bytes(params[at..at + 4].try_into().expect("4 bytes"));
        let (sq_entries, cq_entries, flags, features) = (word(0), word(4), word(8), word(20));
        if flags & SETUP_SQPOLL == 0 {
            return Err(io::Error::other("a held ring must be set up with SQPOLL"));
        }
        let sq = |f: usize| word(40 + f) as usize;
        let cq = |f: usize| word(80 + f) as usize;
        let sq_len = sq(24) + 4 * sq_entries as usize;
        let cq_len = cq(20) + 16 * cq_entries as usize;
        let map = |len: usize, offset: u64| -> io::Result<(NonNull<u8>, usize)> {
            // SAFETY: a fresh shared mapping of the ring's own memory at an
            // address the kernel picks; nothing else refers to it, and it
            // is unmapped in Drop.
            let p = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                    rustix::mm::MapFlags::SHARED | rustix::mm::MapFlags::POPULATE,
                    &fd,
                    offset,
                )
            }?;
            Ok((
                NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?,
                len,
            ))
        };
        let mut maps = Vec::new();
        let single = features & FEAT_SINGLE_MMAP != 0;
        let sq_map = map(
            if single { sq_len.max(cq_len) } else { sq_len },
            OFF_SQ_RING,
        )?;
        maps.push(sq_map);
        let cq_map = if single {
            sq_map
        } else {
            let m = map(cq_len, OFF_CQ_RING)?;
            maps.push(m);
            m
        };
        let sqe_map = map(128 * sq_entries as usize, OFF_SQES)?;
        maps.push(sqe_map);
        let check = |(_, len): (NonNull<u8>, usize), off: usize, size: usize| {
            if off + size > len {
                Err(io::Error::other("io_uring_params point outside the ring"))
            } else {
                Ok(())
            }
        };
        for f in [0, 4, 8, 16] {
            check(sq_map, sq(f), 4)?;
        }
        check(sq_map, sq(24), 4 * sq_entries as usize)?;
        for f in [0, 4, 8] {
            check(cq_map, cq(f), 4)?;
        }
        check(cq_map, cq(20), 16 * cq_entries as usize)?;
        let at = |(p, _): (NonNull<u8>, usize), off: usize| {
            // SAFETY: every offset used below is inside its mapping (checked
            // just above), at the alignment the kernel lays it out with.
            unsafe { NonNull::new_unchecked(p.as_ptr().add(off)) }
        };
        let mask = |m, off| {
            // SAFETY: as for `at`; the ring mask words are written once, at
            // setup, before the supervisor handed the ring on.
            unsafe { at(m, off).cast::<u32>().as_ptr().read() }
        };
        Ok(HeldRing {
            sq_head: at(sq_map, sq(0)).cast(),
            sq_tail: at(sq_map, sq(4)).cast(),
            sq_mask: mask(sq_map, sq(8)),
            sq_flags: at(sq_map, sq(16)).cast(),
            sq_array: at(sq_map, sq(24)).cast(),
            sq_entries,
            sqes: at(sqe_map, 0).cast(),
            cq_head: at(cq_map, cq(0)).cast(),
            cq_tail: at(cq_map, cq(4)).cast(),
            cq_mask: mask(cq_map, cq(8)),
            cqes: at(cq_map, cq(20)).cast(),
            fd,
            maps,
        })
    }

    fn word(p: NonNull<AtomicU32>) -> &'static AtomicU32 {
        // SAFETY: points into a mapping that lives as long as the HeldRing;
        // the 'static is never let out of the methods below.
        unsafe { &*p.as_ptr() }
    }

    /// The submission tail as published: every SQE before it is the
    /// kernel's (or will be, once the SQ thread looks).
    pub(crate) fn tail(&self) -> u32 {
        Self::word(self.sq_tail).load(Ordering::Acquire)
    }

    /// Publish one 128-byte SQE. Only one thread pushes to a ring.
    pub(crate) fn push(&self, sqe: &[u8; 128]) -> io::Result<()> {
        let tail = Self::word(self.sq_tail).load(Ordering::Relaxed);
        let head = Self::word(self.sq_head).load(Ordering::Acquire);
        if tail.wrapping_sub(head) >= self.sq_entries {
            return Err(io::Error::other("submission queue full"));
        }
        let i = tail & self.sq_mask;
        // SAFETY: `i` < sq_entries (mask), inside the SQE and index arrays;
        // the kernel reads slot `i` only once the tail passes it, below.
        unsafe {
            self.sqes.as_ptr().add(i as usize).write(*sqe);
            self.sq_array.as_ptr().add(i as usize).write(i);
        }
        Self::word(self.sq_tail).store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// The next completion (user_data, res) without consuming it.
    pub(crate) fn peek(&self) -> Option<(u64, i32)> {
        let head = Self::word(self.cq_head).load(Ordering::Relaxed);
        let tail = Self::word(self.cq_tail).load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        // SAFETY: index masked into the CQE array; the kernel wrote it
        // before moving the tail (Acquire above) and leaves it until the
        // head passes it.
        let cqe = unsafe {
            self.cqes
                .as_ptr()
                .add((head & self.cq_mask) as usize)
                .read()
        };
        Some((
            u64::from_ne_bytes(cqe[..8].try_into().expect("8 bytes")),
            i32::from_ne_bytes(cqe[8..12].try_into().expect("4 bytes")),
        ))
    }

    /// Consume the completion [`HeldRing::peek`] gave.
    pub(crate) fn advance(&self) {
        let head = Self::word(self.cq_head).load(Ordering::Relaxed);
        Self::word(self.cq_head).store(head.wrapping_add(1), Ordering::Release);
    }

    /// Wake the SQ thread if it sleeps and wait for `want` completions
    /// (0: only wake). Returns at once when nothing needs the kernel.
    pub(crate) fn enter(&self, want: u32) -> io::Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        let mut flags = 0;
        if Self::word(self.sq_flags).load(Ordering::Relaxed) & SQ_NEED_WAKEUP != 0 {
            flags |= ENTER_SQ_WAKEUP;
        }
        if want > 0 {
            if self.peek().is_some() {
                return Ok(());
            }
            flags |= ENTER_GETEVENTS;
        }
        if flags == 0 {
            return Ok(());
        }
        // SAFETY: nothing to submit here (the SQ thread takes the SQEs,
        // whose memory `push`'s callers vouch for).
        unsafe { super::uring::io_uring_enter(self.fd.as_raw_fd(), 0, want, flags) }.map(|_| ())
    }
}

impl Drop for HeldRing {
    fn drop(&mut self) {
        for &(p, len) in &self.maps {
            // SAFETY: mapped in `map` with this length; the pointers into it
            // die with `self`.
            let _ = unsafe { rustix::mm::munmap(p.as_ptr().cast(), len) };
        }
    }
}

/// One ring's slots in the area.
pub(crate) struct Slots {
    area: Arc<SharedMap>,
    layout: AreaLayout,
    ring: usize,
}

impl Slots {
    pub(crate) fn new(area: Arc<SharedMap>, layout: AreaLayout, ring: usize) -> Slots {
        Slots { area, layout, ring }
    }

    fn at(&self, idx: usize, field: usize) -> usize {
        self.layout.slot(self.ring, idx) + field
    }

    /// This process's address of entry `idx`'s header and payload buffers.
    pub(crate) fn buffers(&self, idx: usize) -> (NonNull<u8>, NonNull<u8>) {
        let base = self.area.base().as_ptr();
        let (h, p) = (
            self.layout.header(self.ring, idx),
            self.layout.payload(self.ring, idx),
        );
        assert!(p + self.layout.payload_len <= self.area.len());
        // SAFETY: both offsets are inside the mapping (asserted above).
        unsafe {
            (
                NonNull::new_unchecked(base.add(h)),
                NonNull::new_unchecked(base.add(p)),
            )
        }
    }

    /// The kernel's (supervisor's) address of entry `idx`'s iovec pair.
    pub(crate) fn kernel_iov(&self, kernel_base: u64, idx: usize) -> u64 {
        kernel_base + self.at(idx, SLOT_IOV) as u64
    }

    /// The kernel's address of the wake-up read's buffer.
    pub(crate) fn kernel_wake_buf(&self, kernel_base: u64) -> u64 {
        kernel_base + self.at(self.layout.depth, SLOT_WAKE_BUF) as u64
    }

    /// The wake-up read's slot index.
    pub(crate) fn wake_slot(&self) -> usize {
        self.layout.depth
    }

    pub(crate) fn state(&self, idx: usize) -> SlotState {
        let word = |f| self.area.u32_at(self.at(idx, f)).load(Ordering::Acquire);
        match word(SLOT_STATE) {
            ST_PUSHING => SlotState::Pushing {
                pos: word(SLOT_POS),
                op: word(SLOT_OP),
                commit_id: self
                    .area
                    .u64_at(self.at(idx, SLOT_COMMIT_ID))
                    .load(Ordering::Acquire),
            },
            ST_HELD => SlotState::Held,
            ST_ANSWERING => SlotState::Answering {
                undo_len: Some(word(SLOT_UNDO_LEN)).filter(|&n| n != UNDO_LOST),
            },
            ST_FAILED => SlotState::Failed {
                res: word(SLOT_RES) as i32,
            },
            ST_WITH_KERNEL => SlotState::WithKernel,
            ST_LOST => SlotState::Lost,
            ST_ANSWERED => SlotState::Answered {
                reply_len: word(SLOT_REPLY_LEN),
                commit_id: self
                    .area
                    .u64_at(self.at(idx, SLOT_ENT_IN_OUT) + 8)
                    .load(Ordering::Acquire),
            },
            _ => SlotState::Empty,
        }
    }

    fn set(&self, idx: usize, st: u32) {
        self.area
            .u32_at(self.at(idx, SLOT_STATE))
            .store(st, Ordering::Release);
    }

    fn raw(&self, idx: usize) -> u32 {
        self.area
            .u32_at(self.at(idx, SLOT_STATE))
            .load(Ordering::Acquire)
    }

    /// The slot's state word, to put back if a step fails before it
    /// happened (`restore`).
    pub(crate) fn save(&self, idx: usize) -> u32 {
        self.raw(idx)
    }

    /// Put back a state word [`Slots::save`] gave.
    pub(crate) fn restore(&self, idx: usize, saved: u32) {
        self.set(idx, saved);
    }

    /// The last command recorded for `idx` (op, commit id).
    pub(crate) fn last_command(&self, idx: usize) -> (u32, u64) {
        (
            self.area
                .u32_at(self.at(idx, SLOT_OP))
                .load(Ordering::Acquire),
            self.area
                .u64_at(self.at(idx, SLOT_COMMIT_ID))
                .load(Ordering::Acquire),
        )
    }

    /// `idx`'s command is published: from here on it is the kernel's
    /// however long it waits (a `Pushing` slot is only ever the one push
    /// in flight, so its position is never compared across a wrap of the
    /// ring's 32-bit tail).
    pub(crate) fn with_kernel(&self, idx: usize) {
        self.set(idx, ST_WITH_KERNEL);
    }

    /// A command for `idx` goes into the submission ring at `pos`.
    pub(crate) fn pushing(&self, idx: usize, pos: u32, op: u32, commit_id: u64) {
        self.area
            .u32_at(self.at(idx, SLOT_POS))
            .store(pos, Ordering::Relaxed);
        self.area
            .u32_at(self.at(idx, SLOT_OP))
            .store(op, Ordering::Relaxed);
        self.area
            .u64_at(self.at(idx, SLOT_COMMIT_ID))
            .store(commit_id, Ordering::Relaxed);
        self.set(idx, ST_PUSHING);
    }

    /// `idx`'s completion is reaped with a request in `header`: save what
    /// an answer will overwrite of the header buffer.
    pub(crate) fn held(&self, idx: usize, header: &[u8]) {
        self.area
            .write(self.at(idx, SLOT_IN_HEADER), &header[..IN_HEADER_LEN]);
        self.area.write(
            self.at(idx, SLOT_ENT_IN_OUT),
            &header[ENT_IN_OUT..ENT_IN_OUT + ENT_IN_OUT_LEN],
        );
        self.set(idx, ST_HELD);
    }

    /// `idx`'s completion is reaped with an error.
    pub(crate) fn failed(&self, idx: usize, res: i32) {
        self.area
            .u32_at(self.at(idx, SLOT_RES))
            .store(res as u32, Ordering::Relaxed);
        self.set(idx, ST_FAILED);
    }

    /// Nothing is outstanding for `idx` (the wake-up read was reaped).
    pub(crate) fn empty(&self, idx: usize) {
        self.set(idx, ST_EMPTY);
    }

    /// An answer is about to overwrite `idx`'s request: `payload` is the
    /// part of the request's payload it will overwrite, saved first.
    pub(crate) fn answering(&self, idx: usize, payload: &[u8]) {
        // A second try at an answer (the first did not fit) must not save
        // over the first save what the first already overwrote, nor may a
        // torn request's error answer make it look whole.
        if matches!(self.raw(idx), ST_ANSWERING | ST_LOST) {
            return;
        }
        let undo_len = if payload.len() <= UNDO_CAP {
            let undo = self.layout.header(self.ring, idx) + UNDO_AT;
            self.area.write(undo, payload);
            payload.len() as u32
        } else {
            tracing::warn!(
                bytes = payload.len(),
                "an answer overwrites more of its request than can be saved: a crash now fails it"
            );
            UNDO_LOST
        };
        self.area
            .u32_at(self.at(idx, SLOT_UNDO_LEN))
            .store(undo_len, Ordering::Relaxed);
        self.set(idx, ST_ANSWERING);
    }

    /// The answer to `idx`'s request is whole in its buffers, `reply_len`
    /// bytes of body: the next server commits it as it is. (A torn
    /// request's error answer too: it needs nothing of the request.)
    pub(crate) fn answered(&self, idx: usize, reply_len: usize) {
        self.area
            .u32_at(self.at(idx, SLOT_REPLY_LEN))
            .store(reply_len as u32, Ordering::Relaxed);
        self.set(idx, ST_ANSWERED);
    }

    /// The request's payload size, as reaped.
    pub(crate) fn payload_sz(&self, idx: usize) -> usize {
        let at = self.at(idx, SLOT_ENT_IN_OUT) + 16;
        self.area.u32_at(at).load(Ordering::Acquire) as usize
    }

    /// Put back what a half-written answer overwrote of `idx`'s request
    /// (`undo_len` payload bytes), so the request can be served again.
    pub(crate) fn undo(&self, idx: usize, undo_len: usize, header: &mut [u8], payload: &mut [u8]) {
        self.area
            .read_into(self.at(idx, SLOT_IN_HEADER), &mut header[..IN_HEADER_LEN]);
        self.area.read_into(
            self.at(idx, SLOT_ENT_IN_OUT),
            &mut header[ENT_IN_OUT..ENT_IN_OUT + ENT_IN_OUT_LEN],
        );
        let undo = self.layout.header(self.ring, idx) + UNDO_AT;
        self.area.read_into(undo, &mut payload[..undo_len]);
        self.set(idx, ST_HELD);
    }

    /// Put back only the headers of `idx`'s request (its payload is torn)
    /// and record it as lost, so that an error answer can be written.
    pub(crate) fn undo_headers(&self, idx: usize, header: &mut [u8]) {
        self.area
            .read_into(self.at(idx, SLOT_IN_HEADER), &mut header[..IN_HEADER_LEN]);
        self.area.read_into(
            self.at(idx, SLOT_ENT_IN_OUT),
            &mut header[ENT_IN_OUT..ENT_IN_OUT + ENT_IN_OUT_LEN],
        );
        self.set(idx, ST_LOST);
    }
}
