//! Transports move request bytes between the kernel and the dispatcher.
//! Each hands the dispatcher the same parse contract and implements
//! [`crate::protocol::ReplySink`]; none contains a request handler.

pub mod dev;

/// Which transport serves a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// read/write on /dev/fuse, one cloned fd per worker thread.
    #[default]
    Classic,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportKind::Classic => f.write_str("classic"),
        }
    }
}
