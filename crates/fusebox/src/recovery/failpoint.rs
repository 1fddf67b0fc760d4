//! Failpoints for recovery tests: `FUSEBOX_FAILPOINT=POINT:OPCODE` makes
//! the first server of a supervised mount kill itself (SIGKILL, nothing
//! flushed, nothing unwound) at POINT of the first request of OPCODE:
//!
//! - `after-read`: read from the kernel, nothing done yet;
//! - `after-apply`: the filesystem applied it, its outcome not journaled;
//! - `after-journal`: its outcome journaled, the answer not yet written;
//! - `before-reply`: the answer about to be written to the kernel;
//! - `half-answered` (io_uring): part of the answer written over the
//!   request in its ring entry;
//! - `answered-uncommitted` (io_uring): the answer in its ring entry, its
//!   commit not yet handed to the kernel.
//!
//! Only generation 1 arms them, so the server that takes over does not
//! die on the same request. Unarmed, a failpoint costs one relaxed load.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};

use fusebox_abi::Opcode;

/// The environment variable that arms a failpoint: `POINT:OPCODE`.
pub const FAILPOINT_ENV: &str = "FUSEBOX_FAILPOINT";

/// Where in a request's life the server kills itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Point {
    /// `after-read`: read from the kernel, nothing done yet.
    AfterRead = 1,
    /// `after-apply`: the filesystem applied it, its outcome not journaled.
    AfterApply = 2,
    /// `after-journal`: its outcome journaled, the answer not yet written.
    AfterJournal = 3,
    /// `before-reply`: the answer about to be written to the kernel.
    BeforeReply = 4,
    /// `half-answered`: part of the answer written over the request in its
    /// io_uring entry.
    HalfAnswered = 5,
    /// `answered-uncommitted`: the answer in its io_uring entry, the commit
    /// not handed to the kernel.
    AnsweredUncommitted = 6,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static POINT: AtomicU8 = AtomicU8::new(0);
static OPCODE: AtomicU32 = AtomicU32::new(0);

/// Arm from the environment if this is the first server generation.
pub(crate) fn arm_from_env(generation: u64) {
    let Ok(spec) = std::env::var(FAILPOINT_ENV) else {
        return;
    };
    if generation != 1 {
        return;
    }
    let Some((point, op)) = spec.split_once(':') else {
        tracing::warn!(spec, "{FAILPOINT_ENV}: use POINT:OPCODE");
        return;
    };
    let point = match point {
        "after-read" => Point::AfterRead,
        "after-apply" => Point::AfterApply,
        "after-journal" => Point::AfterJournal,
        "before-reply" => Point::BeforeReply,
        "half-answered" => Point::HalfAnswered,
        "answered-uncommitted" => Point::AnsweredUncommitted,
        _ => {
            tracing::warn!(point, "{FAILPOINT_ENV}: unknown point");
            return;
        }
    };
    let Some(opcode) = (0..Opcode::TABLE_LEN as u32)
        .map(Opcode)
        .find(|o| o.name().eq_ignore_ascii_case(op))
    else {
        tracing::warn!(op, "{FAILPOINT_ENV}: unknown opcode");
        return;
    };
    POINT.store(point as u8, Ordering::Relaxed);
    OPCODE.store(opcode.0, Ordering::Relaxed);
    ARMED.store(true, Ordering::Release);
    tracing::warn!(
        ?point,
        ?opcode,
        "failpoint armed: this server will kill itself"
    );
}

/// Die here if armed for this point and opcode.
#[inline]
pub(crate) fn hit(point: Point, opcode: Opcode) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    if POINT.load(Ordering::Relaxed) == point as u8 && OPCODE.load(Ordering::Relaxed) == opcode.0 {
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
        // SIGKILL to oneself is delivered before kill(2) returns.
        std::process::abort();
    }
}
