//! Transports move request bytes between the kernel and the dispatcher.
//! Each hands the dispatcher the same parse contract and implements
//! [`crate::protocol::ReplySink`]; none contains a request handler.

pub mod dev;
pub mod uring;

use std::str::FromStr;

/// Which transport serves a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// read/write on /dev/fuse, one cloned fd per worker thread.
    #[default]
    Classic,
    /// FUSE-over-io_uring: a ring per CPU queue (or several, see
    /// [`UringConfig::threads_per_queue`]).
    Uring,
    /// io_uring when the kernel offers it, classic otherwise.
    Auto,
}

impl TransportKind {
    /// Auto made concrete for this kernel.
    pub fn resolve(self) -> TransportKind {
        match self {
            TransportKind::Auto if uring::availability().is_ok() => TransportKind::Uring,
            TransportKind::Auto => TransportKind::Classic,
            other => other,
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportKind::Classic => "classic",
            TransportKind::Uring => "uring",
            TransportKind::Auto => "auto",
        })
    }
}

impl FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "classic" => Ok(TransportKind::Classic),
            "uring" | "io_uring" => Ok(TransportKind::Uring),
            "auto" => Ok(TransportKind::Auto),
            _ => Err(format!("unknown transport {s:?} (classic, uring or auto)")),
        }
    }
}

/// io_uring transport settings.
#[derive(Clone, Copy, Debug)]
pub struct UringConfig {
    /// Ring entries per queue thread.
    pub depth: usize,
    /// Threads serving each CPU's queue, each with its own ring of `depth`
    /// entries; the first is pinned (with `pin`), the others are not.
    pub threads_per_queue: usize,
    /// Pin the first thread of queue q to CPU q (the kernel queues a
    /// request on the caller's CPU); further threads are left unpinned.
    pub pin: bool,
    /// How a queue thread waits for work: block, spin, or spin while waits
    /// are short.
    pub poll: uring::PollPolicy,
    /// io_uring setup flags for each ring.
    pub ring: crate::sys::uring::RingFlags,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig {
            depth: 8,
            threads_per_queue: 1,
            pin: true,
            poll: uring::PollPolicy::Adaptive {
                window: std::time::Duration::from_micros(10),
            },
            ring: Default::default(),
        }
    }
}
