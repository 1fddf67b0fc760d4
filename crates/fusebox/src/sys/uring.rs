//! FUSE-over-io_uring ring entries: buffers the kernel writes into while a
//! command is outstanding, and the SQEs that hand them over.
//!
//! Ownership rule that makes this sound: an entry's buffers belong to the
//! kernel from the moment its REGISTER or COMMIT_AND_FETCH is pushed until
//! its completion is reaped; only in between does [`QueueRing`] hand out
//! slices of them. Buffers of entries still with the kernel when the ring is
//! dropped are leaked rather than freed.
//!
//! A ring can also be one its supervisor holds ([`QueueRing::attach`], see
//! `sys::ring_area`): the buffers are then in the shared ring area, the
//! kernel reaches them at the supervisor's addresses, and each step is
//! recorded in the entry's slot so the next server can go on from it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use fusebox_abi::{self as abi, uring_cmd};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use zerocopy::{FromBytes, IntoBytes};

use super::ring_area::{self, Attached, HeldRing, SlotState, Slots, HEADER_LEN};

const PAGE: usize = 4096;
const IN_OUT: usize = 0;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;

/// A page-aligned anonymous mapping, addressed only through raw pointers
/// while the kernel may write it. Mapped rather than allocated zeroed: the
/// allocator zeroes an over-aligned block by writing it, which made every
/// entry resident at once (two queues of 6,000 entries held 5 GB
/// before a request came); mapped pages cost memory only once written.
struct KernelBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// False once leaked: the kernel may still write it.
    owned: bool,
}

// SAFETY: a KernelBuf is plain memory with one owner; moving it between
// threads moves that ownership.
unsafe impl Send for KernelBuf {}

impl KernelBuf {
    fn new(len: usize) -> io::Result<KernelBuf> {
        let mapped = len.max(1).next_multiple_of(PAGE);
        // SAFETY: a fresh private anonymous mapping at an address the kernel
        // picks aliases no Rust object; it reads as zeroes until written.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                mapped,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(KernelBuf {
            ptr,
            len,
            owned: true,
        })
    }
}

impl Drop for KernelBuf {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: mapped in `new` with this length, unmapped once; no
            // reference into it outlives the buffer.
            if let Err(e) = unsafe {
                rustix::mm::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len.max(1).next_multiple_of(PAGE),
                )
            } {
                tracing::warn!(error = %e, "munmap of a ring buffer failed");
            }
        }
    }
}

/// Buffers this process mapped for an entry of its own ring.
struct OwnBuffers {
    header: KernelBuf,
    payload: KernelBuf,
    /// The two iovecs REGISTER points the kernel at; kept for the entry's
    /// life (and leaked with the buffers: io_uring may re-issue a REGISTER
    /// from its worker pool, reading them, after the ring fd is closed).
    iov: Option<Box<[libc::iovec; 2]>>,
}

struct RingEntry {
    /// This process's address of the header buffer.
    header: NonNull<u8>,
    /// This process's address of the payload buffer.
    payload: NonNull<u8>,
    payload_len: usize,
    /// Where the kernel reads the iovec pair naming the buffers.
    kernel_iov: u64,
    /// None for an entry in a held ring's area.
    own: Option<OwnBuffers>,
    with_kernel: bool,
    /// The last command pushed (op, commit id), to resubmit it unchanged
    /// when the kernel answers EAGAIN/EINTR.
    last: (u32, u64),
}

// SAFETY: the buffers an entry points at are its own (or its slot's in the
// area); moving the entry moves that use with it.
unsafe impl Send for RingEntry {}

/// A request as the kernel left it in an entry.
pub struct RingRequest<'a> {
    /// The request's header, from the entry's `in_out` area.
    pub header: abi::InHeader,
    /// The opcode's fixed argument struct.
    pub op_in: &'a [u8],
    /// Names, write data and other variable parts.
    pub payload: &'a [u8],
    /// What COMMIT_AND_FETCH must quote to answer this request.
    pub commit_id: u64,
}

/// Where an answer goes: `in_out` takes the out header, `payload` the body.
pub struct ReplyBuffers<'a> {
    /// The entry's header area: the out header goes here.
    pub in_out: &'a mut [u8],
    /// The entry's payload buffer: the reply's body goes here.
    pub payload: &'a mut [u8],
    /// In a held ring: the entry's slot, told before the request is
    /// overwritten.
    held: Option<(&'a Slots, usize)>,
}

impl ReplyBuffers<'_> {
    /// Call before writing an answer of `body_len` bytes: in a held ring,
    /// what it will overwrite of the request is saved first, so a server
    /// that dies half-way leaves the request whole for the next one.
    pub fn begin(&mut self, body_len: usize) {
        if let Some((slots, idx)) = self.held {
            let overwritten = body_len.min(slots.payload_sz(idx)).min(self.payload.len());
            slots.answering(idx, &self.payload[..overwritten]);
        }
    }

    /// Call once the answer is whole, `body_len` bytes of body: in a held
    /// ring, the next server commits it as it is from here on (the
    /// journal may forget the request once this returns).
    pub fn done(&mut self, body_len: usize) {
        if let Some((slots, idx)) = self.held {
            slots.answered(idx, body_len);
        }
    }
}

/// A queue's io_uring: made by this thread, or held by the supervisor.
enum Ring {
    Own(IoUring<squeue::Entry128, cqueue::Entry>),
    Held(HeldRing),
}

/// What a server found in a held ring it took over, for its queue loop.
#[derive(Debug, Default)]
pub struct TakenOver {
    /// Entries to handle as if just completed: (entry, result, whether the
    /// request in it had reached the previous server).
    pub completions: Vec<(usize, i32, bool)>,
    /// Entries whose request was lost with the previous server (its answer
    /// overwrote more than could be saved): fail them.
    pub lost: Vec<usize>,
}

/// One queue's io_uring and its ring entries.
pub struct QueueRing {
    // Dropped first: closing the ring cancels the outstanding commands.
    ring: Ring,
    entries: Vec<RingEntry>,
    /// Owned so the number cannot be closed and reused under the ring
    /// (None for a held ring: its fixed file 0 is the supervisor's).
    device: Option<OwnedFd>,
    /// A held ring's slots, one per entry and one for the wake-up read.
    held: Option<Slots>,
    flags: RingFlags,
    qid: u16,
    unsubmitted: usize,
    /// The device is the ring's registered file 0: commands name it by
    /// index, sparing the kernel an fget/fput per command.
    device_fixed: bool,
    /// The ring's own fd registered with this thread (IORING_REGISTER_RING_FDS):
    /// io_uring_enter then names the ring by this index, sparing an fd-table
    /// lookup and a reference count per call.
    enter_index: Option<u32>,
    /// A read of an eventfd kept armed on the ring, so another thread can
    /// wake the queue thread out of io_uring_enter (answers given later).
    wake: Option<WakeRead>,
    /// Not Send: the registered ring fd (and a single-issuer ring) belong to
    /// the thread that built the ring.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

/// The eventfd read behind [`QueueRing::arm_wake`]. Its 8-byte buffer
/// belongs to the kernel while the read is armed.
struct WakeRead {
    target: WakeTarget,
    /// The buffer's address as the kernel sees it.
    kernel_buf: u64,
    /// The buffer, when this process allocated it (not in a held ring).
    own: Option<NonNull<u64>>,
    armed: bool,
}

// SAFETY: the buffer is a heap allocation owned by this struct alone.
unsafe impl Send for WakeRead {}

impl Drop for WakeRead {
    fn drop(&mut self) {
        if let (Some(buf), false) = (self.own, self.armed) {
            // SAFETY: allocated by Box::leak in `arm_wake`, freed once,
            // and no read of the kernel's targets it any more.
            drop(unsafe { Box::from_raw(buf.as_ptr()) });
        }
        // Armed: the kernel may still write it; leaked (8 bytes).
    }
}

#[derive(Clone, Copy)]
enum WakeTarget {
    Fd(std::os::fd::RawFd),
    Fixed(u32),
}

/// `op` recorded in the slot of the wake-up read.
const WAKE_OP: u32 = u32::MAX;

/// `user_data` of the wake-up read's completions (entries use their index).
const WAKE_USER_DATA: u64 = u64::MAX;

/// A completion reaped from a queue ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Entry `idx` came back with `res` (a request, or an error).
    Entry {
        /// The entry's index in the ring.
        idx: usize,
        /// The command's result: 0 for a request, or a negated errno.
        res: i32,
    },
    /// The wake-up read finished (`res` < 0: it failed; re-arm anyway).
    Wake {
        /// The read's result.
        res: i32,
    },
}

/// Ring setup choices that are measured rather than assumed.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingFlags {
    /// `IORING_SETUP_SINGLE_ISSUER`: only the queue thread submits.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN`: completion work runs only when the
    /// thread waits for completions (implies `single_issuer`).
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN`: completion work waits for the thread's
    /// next system call instead of interrupting it.
    pub coop_taskrun: bool,
}

impl QueueRing {
    /// A ring of `depth` entries for queue `qid`, each with a payload buffer
    /// of `payload_len` bytes, on /dev/fuse fd `device`.
    pub fn new(
        device: OwnedFd,
        qid: u16,
        depth: usize,
        payload_len: usize,
        flags: RingFlags,
    ) -> io::Result<QueueRing> {
        let mut b = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
        // Every entry and the wake-up read may complete at once.
        b.setup_cqsize((2 * depth + 4) as u32);
        if flags.single_issuer || flags.defer_taskrun {
            b.setup_single_issuer();
        }
        if flags.defer_taskrun {
            b.setup_defer_taskrun();
        }
        if flags.coop_taskrun {
            b.setup_coop_taskrun();
        }
        let ring = b.build((depth + 1).next_power_of_two() as u32)?;
        // Both registrations are optimisations: a kernel that refuses them
        // still runs the ring the plain way.
        let device_fixed = ring
            .submitter()
            .register_files(&[device.as_raw_fd()])
            .inspect_err(
                |e| tracing::debug!(error = %e, "io_uring: device not registered as a fixed file"),
            )
            .is_ok();
        let enter_index = register_ring_fd(ring.as_raw_fd())
            .inspect_err(|e| tracing::debug!(error = %e, "io_uring: ring fd not registered"))
            .ok();
        let mut entries = Vec::with_capacity(depth);
        for _ in 0..depth {
            let header = KernelBuf::new(HEADER_LEN)?;
            let payload = KernelBuf::new(payload_len)?;
            let iov = Box::new([
                libc::iovec {
                    iov_base: header.ptr.as_ptr().cast(),
                    iov_len: HEADER_LEN,
                },
                libc::iovec {
                    iov_base: payload.ptr.as_ptr().cast(),
                    iov_len: payload_len,
                },
            ]);
            entries.push(RingEntry {
                header: header.ptr,
                payload: payload.ptr,
                payload_len,
                kernel_iov: iov.as_ptr() as u64,
                own: Some(OwnBuffers {
                    header,
                    payload,
                    iov: Some(iov),
                }),
                last: (uring_cmd::REGISTER, 0),
                with_kernel: false,
            });
        }
        Ok(QueueRing {
            ring: Ring::Own(ring),
            entries,
            device: Some(device),
            held: None,
            flags,
            qid,
            unsubmitted: 0,
            device_fixed,
            enter_index,
            wake: None,
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// Drive a ring the supervisor holds (`sys::ring_area`): its entries'
    /// buffers are in the ring area, and where each stands is recorded in
    /// its slot. Call [`QueueRing::take_over`] next.
    pub fn attach(ring: Attached) -> io::Result<QueueRing> {
        let io = HeldRing::map(ring.fd, &ring.params)?;
        let slots = Slots::new(ring.area.clone(), ring.layout, ring.index);
        let entries = (0..ring.layout.depth)
            .map(|idx| {
                let (header, payload) = slots.buffers(idx);
                RingEntry {
                    header,
                    payload,
                    payload_len: ring.layout.payload_len,
                    kernel_iov: slots.kernel_iov(ring.kernel_base, idx),
                    own: None,
                    with_kernel: false,
                    last: (uring_cmd::REGISTER, 0),
                }
            })
            .collect();
        let wake = WakeRead {
            target: WakeTarget::Fixed(ring_area::WAKE_INDEX),
            kernel_buf: slots.kernel_wake_buf(ring.kernel_base),
            own: None,
            armed: false,
        };
        Ok(QueueRing {
            ring: Ring::Held(io),
            entries,
            device: None,
            held: Some(slots),
            flags: RingFlags::default(),
            qid: ring.qid,
            unsubmitted: 0,
            device_fixed: true,
            // Registering the ring fd would give this process an io_uring
            // task context on the ring, which its exit would cancel.
            enter_index: None,
            wake: Some(wake),
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// Take over a held ring where the previous server (or none) left it:
    /// entries never registered are registered, commands that did not reach
    /// the submission ring are pushed again, completions already posted are
    /// reaped, and requests the previous server held come back to be
    /// served again (their answers, if half-written, undone first).
    pub fn take_over(&mut self) -> io::Result<TakenOver> {
        let mut out = TakenOver::default();
        let depth = self.entries.len();
        // First the one push that may have been in flight (a slot is
        // `Pushing` only between its record and the publish): published,
        // it is the kernel's; not, it goes again now, before any other SQE
        // could take its position and make it look published. The wake-up
        // read is simply armed afresh later.
        let mut first = None;
        {
            let (Some(slots), Ring::Held(ring)) = (&self.held, &self.ring) else {
                return Err(io::Error::other("take_over needs a held ring"));
            };
            let tail = ring.tail();
            for idx in 0..=depth {
                if let Some(e) = self.entries.get_mut(idx) {
                    e.last = slots.last_command(idx);
                }
                if let SlotState::Pushing { pos, op, commit_id } = slots.state(idx) {
                    if (tail.wrapping_sub(pos) as i32) > 0 {
                        slots.with_kernel(idx);
                    } else if idx == slots.wake_slot() {
                        slots.empty(idx);
                    } else {
                        first = Some((idx, op, commit_id));
                    }
                }
            }
        }
        // Completions posted but not reaped: new requests for this server.
        // Reaped before the slots are read, so that one the previous server
        // reaped without moving the head is told apart (its slot no longer
        // says the kernel has it) and skipped.
        let mut fresh = Vec::new();
        while let Some(c) = self.next_completion() {
            if let Completion::Entry { idx, res } = c {
                fresh.push((idx, res));
            }
        }
        if let Some((idx, op, commit_id)) = first {
            self.push(idx, op, commit_id)?;
        }
        let Some(slots) = &self.held else {
            return Err(io::Error::other("take_over needs a held ring"));
        };
        let mut push_again = Vec::new();
        let mut commit_again = Vec::new();
        for idx in 0..depth {
            if let Some(&(_, res)) = fresh.iter().find(|(i, _)| *i == idx) {
                out.completions.push((idx, res, false));
                continue;
            }
            let e = &mut self.entries[idx];
            match slots.state(idx) {
                SlotState::Empty => push_again.push((idx, uring_cmd::REGISTER, 0)),
                SlotState::Pushing { .. } | SlotState::WithKernel => e.with_kernel = true,
                SlotState::Held => out.completions.push((idx, 0, true)),
                SlotState::Answering { undo_len } => {
                    // SAFETY: the entry is not with the kernel (its answer
                    // was never committed) and `&mut self` makes these the
                    // only views; the two buffers do not overlap.
                    let (header, payload) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(e.header.as_ptr(), HEADER_LEN),
                            std::slice::from_raw_parts_mut(e.payload.as_ptr(), e.payload_len),
                        )
                    };
                    match undo_len {
                        Some(n) => {
                            slots.undo(idx, n as usize, header, payload);
                            out.completions.push((idx, 0, true));
                        }
                        None => {
                            // The headers are whole again; the payload
                            // is not: only an error answer may go back.
                            slots.undo_headers(idx, header);
                            out.lost.push(idx);
                        }
                    }
                }
                SlotState::Lost => out.lost.push(idx),
                SlotState::Answered {
                    reply_len,
                    commit_id,
                } => commit_again.push((idx, commit_id, reply_len as usize)),
                SlotState::Failed { res } => out.completions.push((idx, res, false)),
            }
        }
        let armed = matches!(slots.state(slots.wake_slot()), SlotState::WithKernel);
        if let Some(w) = &mut self.wake {
            w.armed = armed;
        }
        for (idx, op, commit_id) in push_again {
            self.push(idx, op, commit_id)?;
        }
        for (idx, commit_id, reply_len) in commit_again {
            self.commit(idx, commit_id, reply_len)?;
        }
        Ok(out)
    }

    /// Whether this ring is one the supervisor holds.
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// How many ring entries, hence requests in flight, the queue has.
    pub fn depth(&self) -> usize {
        self.entries.len()
    }

    fn push(&mut self, idx: usize, cmd_op: u32, commit_id: u64) -> io::Result<()> {
        let req = abi::UringCmdReq {
            flags: 0,
            commit_id,
            qid: self.qid,
            padding: [0; 6],
        };
        let mut cmd = [0u8; 80];
        cmd[..size_of::<abi::UringCmdReq>()].copy_from_slice(req.as_bytes());
        let entry = self
            .entries
            .get_mut(idx)
            .ok_or_else(|| io::Error::other("no such ring entry"))?;
        // A second command on an entry the kernel already holds would give
        // it two views of the same buffers.
        if entry.with_kernel {
            return Err(io::Error::other("ring entry is already with the kernel"));
        }
        if entry.own.as_ref().is_some_and(|o| o.iov.is_none()) {
            return Err(io::Error::other("ring entry was torn down"));
        }
        let target = match (&self.device, self.device_fixed) {
            (_, true) => opcode::UringCmd80::new(types::Fixed(ring_area::DEVICE_INDEX), cmd_op),
            (Some(device), false) => opcode::UringCmd80::new(types::Fd(device.as_raw_fd()), cmd_op),
            (None, false) => return Err(io::Error::other("no device for the ring")),
        };
        let mut sqe = target
            .cmd(cmd)
            .addr(Some(entry.kernel_iov))
            .build()
            .user_data(idx as u64);
        // The crate has no setter for sqe->len, which REGISTER requires to be
        // the iovec count (2). `len` is the u32 at byte 24 of the SQE.
        // SAFETY: Entry128 is #[repr(C)] and begins with the 64-byte
        // io_uring_sqe, so byte offset 24..28 is inside it.
        unsafe {
            std::ptr::write_unaligned(
                (&mut sqe as *mut squeue::Entry128 as *mut u8).add(24) as *mut u32,
                2,
            )
        };
        let before = match (&self.held, &self.ring) {
            (Some(slots), Ring::Held(ring)) => {
                // Recorded first: pushing publishes the SQE (the tail
                // moves), and the SQ thread may take it at once.
                let before = slots.save(idx);
                slots.pushing(idx, ring.tail(), cmd_op, commit_id);
                Some(before)
            }
            _ => None,
        };
        // SAFETY: the iovecs and both buffers they point at live in
        // `self.entries` (or the held ring's area, which outlives the
        // ring) until the ring is dropped (ring first), and are not
        // touched again until this entry's completion is reaped.
        if let Err(e) = unsafe { push_sqe(&mut self.ring, &sqe) } {
            if let (Some(slots), Some(before)) = (&self.held, before) {
                slots.restore(idx, before);
            }
            return Err(e);
        }
        if let Some(slots) = &self.held {
            slots.with_kernel(idx);
        }
        entry.with_kernel = true;
        entry.last = (cmd_op, commit_id);
        self.unsubmitted += 1;
        Ok(())
    }

    /// Push the entry's last command again (after EAGAIN/EINTR): a failed
    /// COMMIT_AND_FETCH must be retried as such, or the answer is lost.
    pub fn resubmit(&mut self, idx: usize) -> io::Result<()> {
        let (op, commit_id) = self
            .entries
            .get(idx)
            .ok_or_else(|| io::Error::other("no such ring entry"))?
            .last;
        self.push(idx, op, commit_id)
    }

    /// Whether completions need this thread to enter the kernel to run task
    /// work (coop/defer taskrun): then spinning on the CQ finds nothing.
    pub fn task_work_deferred(&self) -> bool {
        self.flags.coop_taskrun || self.flags.defer_taskrun
    }

    /// Hand entry `idx` to the kernel to receive a first request.
    pub fn register(&mut self, idx: usize) -> io::Result<()> {
        self.push(idx, uring_cmd::REGISTER, 0)
    }

    /// Answer the request in entry `idx` (reply already written with
    /// [`QueueRing::reply_buffers`]) and fetch the next one. Queued, not
    /// submitted: several commits go to the kernel in one io_uring_enter.
    pub fn commit(&mut self, idx: usize, commit_id: u64, payload_len: usize) -> io::Result<()> {
        let ent = abi::UringEntInOut {
            flags: 0,
            commit_id,
            payload_sz: payload_len as u32,
            padding: 0,
            reserved: 0,
        };
        let bytes = ent.as_bytes();
        self.header_mut(idx)?[ENT_IN_OUT..ENT_IN_OUT + bytes.len()].copy_from_slice(bytes);
        self.push(idx, uring_cmd::COMMIT_AND_FETCH, commit_id)
    }

    /// Submit queued commands and wait for at least `want` completions. A
    /// signal ends the wait early (Ok, no completions): a paused server's
    /// queue thread is woken that way.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        match self.enter(want) {
            Ok(_) => {
                self.unsubmitted = 0;
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One io_uring_enter: submit what is queued, wait for `want`
    /// completions (and run pending task work either way).
    fn enter(&mut self, want: usize) -> io::Result<usize> {
        let ring = match &mut self.ring {
            // The SQ thread submits; enter only to wake it or to wait.
            Ring::Held(ring) => return ring.enter(want as u32).map(|()| 0),
            Ring::Own(ring) => ring,
        };
        let Some(index) = self.enter_index else {
            return ring.submit_and_wait(want);
        };
        let to_submit = ring.submission().len() as u32;
        // GETEVENTS even when not waiting: it runs pending task work, which
        // with coop taskrun is what delivers requests.
        let flags = IORING_ENTER_GETEVENTS | IORING_ENTER_REGISTERED_RING;
        // SAFETY: `index` names this ring, registered in `new` by this same
        // thread (registrations are per thread; QueueRing is not Send). The
        // SQEs it submits were pushed by `push`, whose safety comment
        // covers the buffers they point at.
        unsafe { io_uring_enter(index as i32, to_submit, want as u32, flags) }
    }

    /// Submit queued commands without waiting (and run pending task work).
    pub fn submit(&mut self) -> io::Result<()> {
        loop {
            match self.enter(0) {
                Ok(_) => {
                    self.unsubmitted = 0;
                    return Ok(());
                }
                // Transient: interrupted, or the CQ is momentarily full.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Completions ready without entering the kernel.
    pub fn has_completions(&mut self) -> bool {
        match &mut self.ring {
            Ring::Own(ring) => !ring.completion().is_empty(),
            Ring::Held(ring) => ring.peek().is_some(),
        }
    }

    /// Keep a read of eventfd `fd` armed on the ring: a write to it from
    /// any thread completes the read and wakes this one. Call again after
    /// each [`Completion::Wake`]. `fd` must stay open while the ring lives.
    /// A held ring reads its own eventfd (fixed file 1) and ignores `fd`.
    pub fn arm_wake(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let wake = self.wake.get_or_insert_with(|| {
            let buf = NonNull::from(Box::leak(Box::new(0u64)));
            WakeRead {
                target: WakeTarget::Fd(fd.as_raw_fd()),
                kernel_buf: buf.as_ptr() as u64,
                own: Some(buf),
                armed: false,
            }
        });
        if wake.armed {
            return Ok(());
        }
        let sqe: squeue::Entry128 = match wake.target {
            WakeTarget::Fd(fd) => opcode::Read::new(types::Fd(fd), wake.kernel_buf as *mut u8, 8),
            WakeTarget::Fixed(i) => {
                opcode::Read::new(types::Fixed(i), wake.kernel_buf as *mut u8, 8)
            }
        }
        .build()
        .user_data(WAKE_USER_DATA)
        .into();
        let before = match (&self.held, &self.ring) {
            (Some(slots), Ring::Held(ring)) => {
                let before = slots.save(slots.wake_slot());
                slots.pushing(slots.wake_slot(), ring.tail(), WAKE_OP, 0);
                Some(before)
            }
            _ => None,
        };
        // SAFETY: the 8-byte buffer stays allocated while the read is armed
        // (WakeRead leaks it if dropped armed; a held ring's is in the
        // area, which outlives the ring) and nothing else touches it.
        if let Err(e) = unsafe { push_sqe(&mut self.ring, &sqe) } {
            if let (Some(slots), Some(before)) = (&self.held, before) {
                slots.restore(slots.wake_slot(), before);
            }
            return Err(e);
        }
        if let Some(slots) = &self.held {
            slots.with_kernel(slots.wake_slot());
        }
        wake.armed = true;
        self.unsubmitted += 1;
        Ok(())
    }

    /// Reap one completion. In a held ring the entry's slot records it
    /// before the completion ring's head moves past it, and a completion
    /// the previous server had already taken is skipped.
    pub fn next_completion(&mut self) -> Option<Completion> {
        loop {
            let (user_data, res) = match &mut self.ring {
                Ring::Own(ring) => {
                    let cqe = ring.completion().next()?;
                    (cqe.user_data(), cqe.result())
                }
                // Consumed below, once the slot says what it brought.
                Ring::Held(ring) => ring.peek()?,
            };
            let taken = self.note_completion(user_data, res);
            if let Ring::Held(ring) = &self.ring {
                ring.advance();
            }
            if taken.is_some() {
                return taken;
            }
        }
    }

    /// Account for a completion; None if it is to be skipped.
    fn note_completion(&mut self, user_data: u64, res: i32) -> Option<Completion> {
        if user_data == WAKE_USER_DATA {
            if let Some(w) = &mut self.wake {
                w.armed = false;
            }
            if let Some(slots) = &self.held {
                slots.empty(slots.wake_slot());
            }
            return Some(Completion::Wake { res });
        }
        let idx = user_data as usize;
        let Some(entry) = self.entries.get_mut(idx) else {
            tracing::warn!(user_data, "completion for no ring entry ignored");
            return None;
        };
        if let Some(slots) = &self.held {
            if !matches!(
                slots.state(idx),
                SlotState::Pushing { .. } | SlotState::WithKernel
            ) {
                // Taken by the previous server, which died before the
                // head moved: its slot says what became of it.
                return None;
            }
            if res == 0 {
                // SAFETY: the kernel is done with the entry (its completion
                // is here) and nothing else writes it.
                let header =
                    unsafe { std::slice::from_raw_parts(entry.header.as_ptr(), HEADER_LEN) };
                slots.held(idx, header);
            } else {
                slots.failed(idx, res);
            }
        }
        entry.with_kernel = false;
        Some(Completion::Entry { idx, res })
    }

    fn header(&self, idx: usize) -> io::Result<&[u8]> {
        let e = &self.entries[idx];
        if e.with_kernel {
            return Err(io::Error::other("ring entry is with the kernel"));
        }
        // SAFETY: the entry is not with the kernel, so nothing writes the
        // buffer while this shared slice lives (it borrows `self`).
        Ok(unsafe { std::slice::from_raw_parts(e.header.as_ptr(), HEADER_LEN) })
    }

    fn header_mut(&mut self, idx: usize) -> io::Result<&mut [u8]> {
        let e = &mut self.entries[idx];
        if e.with_kernel {
            return Err(io::Error::other("ring entry is with the kernel"));
        }
        // SAFETY: as in `header`, and `&mut self` makes the slice unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(e.header.as_ptr(), HEADER_LEN) })
    }

    /// Entry `idx`'s header buffer with the FUSE header and the ring's
    /// entry header read from it.
    fn headers(&self, idx: usize) -> io::Result<(&[u8], abi::InHeader, abi::UringEntInOut)> {
        let h = self.header(idx)?;
        let header = abi::InHeader::read_from_prefix(&h[IN_OUT..])
            .map_err(|_| io::Error::other("short header"))?
            .0;
        let ent = abi::UringEntInOut::read_from_prefix(&h[ENT_IN_OUT..])
            .map_err(|_| io::Error::other("short header"))?
            .0;
        Ok((h, header, ent))
    }

    /// The request the kernel put in entry `idx`.
    pub fn request(&self, idx: usize) -> io::Result<RingRequest<'_>> {
        let (h, header, ent) = self.headers(idx)?;
        let e = &self.entries[idx];
        let payload_len = (ent.payload_sz as usize).min(e.payload_len);
        // in.len counts the header, op_in and payload; the difference is the
        // size of op_in (stale bytes beyond it are not the request's).
        let op_len = (header.len as usize)
            .saturating_sub(size_of::<abi::InHeader>() + payload_len)
            .min(128);
        // SAFETY: as in `header`: the kernel is done with this entry until
        // the next push, which needs `&mut self`.
        let payload = unsafe { std::slice::from_raw_parts(e.payload.as_ptr(), payload_len) };
        Ok(RingRequest {
            header,
            op_in: &h[OP_IN..OP_IN + op_len],
            payload,
            commit_id: ent.commit_id,
        })
    }

    /// The request in entry `idx` and, when it carries nothing in the
    /// payload buffer (READ, READDIR: fixed arguments only), that buffer to
    /// write the answer's data into in place. The two are separate
    /// allocations, so the request's slices and the buffer never overlap.
    pub fn request_and_spare(
        &mut self,
        idx: usize,
    ) -> io::Result<(RingRequest<'_>, Option<&mut [u8]>)> {
        let (_, header, ent) = self.headers(idx)?;
        if ent.payload_sz != 0 {
            return Ok((self.request(idx)?, None));
        }
        let e = &self.entries[idx];
        let op_len = (header.len as usize)
            .saturating_sub(size_of::<abi::InHeader>())
            .min(128);
        // SAFETY: the entry is not with the kernel (checked by `header`), so
        // nothing else writes either buffer until the next push, which needs
        // `&mut self`, held by both borrows returned here. The header
        // buffer is only read (shared slice), the payload buffer only
        // through this one mutable slice, and they do not overlap.
        let (op_in, spare) = unsafe {
            (
                std::slice::from_raw_parts(e.header.as_ptr().add(OP_IN), op_len),
                std::slice::from_raw_parts_mut(e.payload.as_ptr(), e.payload_len),
            )
        };
        Ok((
            RingRequest {
                header,
                op_in,
                payload: &[],
                commit_id: ent.commit_id,
            },
            Some(spare),
        ))
    }

    /// Buffers to write the answer of entry `idx` into.
    pub fn reply_buffers(&mut self, idx: usize) -> io::Result<ReplyBuffers<'_>> {
        let e = &mut self.entries[idx];
        if e.with_kernel {
            return Err(io::Error::other("ring entry is with the kernel"));
        }
        // SAFETY: the entry is not with the kernel and `&mut self` makes
        // these the only views; the two buffers do not overlap.
        let (in_out, payload) = unsafe {
            (
                std::slice::from_raw_parts_mut(e.header.as_ptr(), 128),
                std::slice::from_raw_parts_mut(e.payload.as_ptr(), e.payload_len),
            )
        };
        Ok(ReplyBuffers {
            in_out,
            payload,
            held: self.held.as_ref().map(|slots| (slots, idx)),
        })
    }

    /// Entries whose command is still with the kernel.
    pub fn outstanding(&self) -> usize {
        self.entries.iter().filter(|e| e.with_kernel).count()
    }
}

/// Push one SQE onto `ring`.
///
/// # Safety
/// Whatever the SQE points at must stay valid until its completion is
/// reaped (see the callers).
unsafe fn push_sqe(ring: &mut Ring, sqe: &squeue::Entry128) -> io::Result<()> {
    match ring {
        // SAFETY: the caller's promise.
        Ring::Own(ring) => unsafe { ring.submission().push(sqe) }
            .map_err(|_| io::Error::other("submission queue full")),
        Ring::Held(ring) => {
            // SAFETY: Entry128 is #[repr(C)], the 128 bytes of a kernel
            // io_uring_sqe with its command area, all initialised.
            let bytes = unsafe { &*(sqe as *const squeue::Entry128).cast::<[u8; 128]>() };
            ring.push(bytes)
        }
    }
}

/// io_uring_enter(2) with no argument struct: `fd` is a ring fd, or a
/// registered ring's index with IORING_ENTER_REGISTERED_RING in `flags`.
///
/// # Safety
/// The SQEs it may submit must point at memory that stays valid until
/// their completions are reaped.
pub(crate) unsafe fn io_uring_enter(
    fd: i32,
    to_submit: u32,
    want: u32,
    flags: u32,
) -> io::Result<usize> {
    // SAFETY: no argument struct (null, size 0); the caller vouches for
    // what the submitted SQEs point at.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            fd as libc::c_long,
            to_submit as libc::c_long,
            want as libc::c_long,
            flags as libc::c_long,
            std::ptr::null::<libc::c_void>(),
            0 as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}

const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_REGISTERED_RING: u32 = 16;
const IORING_REGISTER_RING_FDS: u32 = 20;

/// `struct io_uring_rsrc_update` (include/uapi/linux/io_uring.h).
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// Register ring fd `ring` with the calling thread; returns its index.
fn register_ring_fd(ring: std::os::fd::RawFd) -> io::Result<u32> {
    // offset u32::MAX: let the kernel pick a free slot and write it back.
    let mut update = RsrcUpdate {
        offset: u32::MAX,
        resv: 0,
        data: ring as u64,
    };
    // SAFETY: IORING_REGISTER_RING_FDS reads and writes back `nr_args` (1)
    // io_uring_rsrc_update structs at the pointer; `update` is a live,
    // properly laid out struct for the whole call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring as libc::c_long,
            IORING_REGISTER_RING_FDS as libc::c_long,
            &mut update as *mut RsrcUpdate,
            1 as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(update.offset)
}

impl Drop for QueueRing {
    fn drop(&mut self) {
        // Runs before the fields drop (the ring first, cancelling what is
        // outstanding). Buffers still with the kernel must outlive any write
        // it might yet do, so they are leaked instead of freed. A held
        // ring's buffers are the area's, which the supervisor keeps.
        for e in &mut self.entries {
            if let (true, Some(own)) = (e.with_kernel, &mut e.own) {
                own.header.owned = false;
                own.payload.owned = false;
                std::mem::forget(own.iov.take());
            }
        }
    }
}
