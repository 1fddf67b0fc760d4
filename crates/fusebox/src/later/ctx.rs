//! A request's context: who asks, whether they gave up, and the way to
//! answer later. It lives with the later answers because each needs the
//! other: a context hands out the reply token, and a detached context
//! ([`OwnedCtx`](super::OwnedCtx)) lends a new one.

use std::sync::atomic::{AtomicU64, Ordering};

/// Who is asking, and whether they gave up.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The kernel's id for this request (`fuse_in_header.unique`); 0 for
    /// calls that do not come from the kernel.
    pub unique: u64,
    /// The caller's filesystem uid, for permission checks and new files' owner.
    pub uid: u32,
    /// The caller's filesystem gid.
    pub gid: u32,
    /// The calling thread's id, or 0 when no process is behind the request.
    pub pid: u32,
    /// The worker's "interrupted" slot: holds `unique` once the kernel sent
    /// an INTERRUPT for this request.
    pub(crate) interrupt_slot: Option<&'a AtomicU64>,
    /// How to answer this request later, if its transport allows.
    pub(crate) later: Option<&'a super::LaterRoute<'a>>,
}

impl Ctx<'_> {
    /// A context for calls that do not come from the kernel (tests, adapters).
    pub fn internal() -> Ctx<'static> {
        Ctx {
            unique: 0,
            uid: 0,
            gid: 0,
            pid: 0,
            interrupt_slot: None,
            later: None,
        }
    }

    /// Take this request's reply, to answer it later from any thread (see
    /// [`ReplyToken`](super::ReplyToken)); then return
    /// [`Errno::LATER`](crate::Errno::LATER). The serving thread moves on at
    /// once. Fails (EIO) when called twice for one request, and with ENOSYS
    /// where no later answer is possible (a `Ctx::internal`, or the async
    /// API, whose methods answer by returning).
    pub fn reply_later(&self) -> Result<super::ReplyToken, crate::Errno> {
        match self.later {
            Some(route) => route.take(self.unique),
            None => {
                tracing::error!(
                    unique = self.unique,
                    "reply_later: this request cannot be answered later"
                );
                Err(crate::Errno::ENOSYS)
            }
        }
    }

    /// Whether [`reply_later`](Ctx::reply_later) can work for this request
    /// (a request from the kernel over a transport that answers later).
    pub fn can_reply_later(&self) -> bool {
        self.later.is_some()
    }

    /// True once the application gave up on this request (a signal). A slow
    /// filesystem may check this and return `Errno::EINTR` early.
    pub fn interrupted(&self) -> bool {
        self.interrupt_slot
            .is_some_and(|s| s.load(Ordering::Acquire) == self.unique)
    }
}
