//! One filesystem instance for every process of a run, for filesystems
//! whose state lives in their process (memfs, a user's in-memory or
//! network filesystem): direct mode otherwise builds one instance per
//! process, which is right only where the state is in the kernel's files
//! (stackfs, pathfs) or there is none (nullfs).
//!
//! The instance runs in a server process of its own. Each process of the
//! run reaches it through a *door*: one end of a SOCK_SEQPACKET pair that
//! every process inherits (fork and exec keep it, like the metadata
//! cache's shared page). A process makes a connection by creating a stream
//! socket pair and passing one end through the door with a hello naming
//! who it is; the server serves that connection on a thread of its own.
//! On a connection, requests and replies are the FUSE protocol's own
//! messages (`fuse_in_header` + arguments, `fuse_out_header` + body),
//! written by the core's request encoder (`protocol::encode`), and the
//! server answers them with the same `Dispatcher` that serves /dev/fuse:
//! one protocol, one dispatcher, a third transport. What the run adds
//! travels as extension records (`extension` below) or as requests of its own
//! (`opcode`); RELEASE and RELEASEDIR are never answered (as FORGET:
//! the caller does not wait, as the kernel does not wait for a release).
//!
//! What the kernel does for a FUSE mount the server does for the run:
//! count node references and open handles per process (a *slot*), copy a
//! parent's slot into its child at fork (both now hold what was open and
//! looked up), and give back what a process held when it exits or
//! executes another program (watched with a pidfd), so the filesystem
//! sees one FORGET or RELEASE per thing, when its last holder lets go.

pub mod client;
mod door;
pub mod server;

pub use door::adopt as adopt_door;

pub use client::RemoteFs;
pub use server::serve;

/// The environment variable naming the door's descriptor in processes of
/// the run.
pub const DOOR_VAR: &str = "FUSEBOX_DIRECT_SERVER";

/// Opcodes of the run's own requests on a connection, outside FUSE's range.
pub(crate) mod opcode {
    /// Copy the asking process's slot for a child about to be forked;
    /// answered with the new slot's id (u64).
    pub const FORK_PREPARE: u32 = 0x7ffe_0001;
    /// The fork is done: the slot id (u64) and the child's process id
    /// (u32; 0 when the fork failed).
    pub const FORK_DONE: u32 = 0x7ffe_0002;
    /// The filesystem's own figures (`Filesystem::counters`), answered as
    /// JSON: what `--stats` prints of the run's one instance.
    pub const COUNTERS: u32 = 0x7ffe_0006;
    /// `Filesystem::drop_cached_data` of the node (posix_fadvise
    /// DONTNEED in a process of the run); answered with nothing.
    pub const DROP_CACHED_DATA: u32 = 0x7ffe_0007;
}

/// Extension records (`fuse_ext_header` types, above the kernel's) that
/// the run's processes add to FUSE requests.
pub(crate) mod extension {
    /// The CPU the asking thread runs on (u64): the server's thread moves
    /// there, so the answer wakes the caller on its own CPU.
    pub const CPU: u32 = 0x7ffe_0101;
    /// On a WRITE: write at the file's end, wherever that is when it is
    /// applied (O_APPEND). The server finds the size and writes under one
    /// lock per node, as the kernel does under the inode's lock; the
    /// answer is `fuse_write_out` and the offset written at (u64).
    pub const APPEND: u32 = 0x7ffe_0102;
}

/// What a new connection's hello says (one door message, with the
/// connection's socket attached).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// The first connection of a program image (the run's first process,
    /// or one that executed a new program): whatever its process held
    /// before is given back.
    Fresh { pid: u32 },
    /// Another connection of a process the server knows.
    More { pid: u32 },
    /// The first connection of a forked child: it takes the slot its
    /// parent prepared.
    Forked { pid: u32, slot: u64 },
}

impl Hello {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn encode(self) -> [u8; Self::LEN] {
        let (kind, pid, slot) = match self {
            Hello::Fresh { pid } => (1u32, pid, 0u64),
            Hello::More { pid } => (2, pid, 0),
            Hello::Forked { pid, slot } => (3, pid, slot),
        };
        let mut b = [0; Self::LEN];
        b[0..4].copy_from_slice(&kind.to_ne_bytes());
        b[4..8].copy_from_slice(&pid.to_ne_bytes());
        b[8..16].copy_from_slice(&slot.to_ne_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != Self::LEN {
            return None;
        }
        let kind = u32::from_ne_bytes(b[0..4].try_into().ok()?);
        let pid = u32::from_ne_bytes(b[4..8].try_into().ok()?);
        let slot = u64::from_ne_bytes(b[8..16].try_into().ok()?);
        match kind {
            1 => Some(Hello::Fresh { pid }),
            2 => Some(Hello::More { pid }),
            3 => Some(Hello::Forked { pid, slot }),
            _ => None,
        }
    }
}

/// The server's first message on the door, before the program starts:
/// `READY`, or a line saying why it cannot serve.
pub const READY: &[u8] = b"ready";

#[cfg(test)]
mod tests {
    use super::Hello;

    #[test]
    fn hellos_read_back_as_written() {
        for h in [
            Hello::Fresh { pid: 7 },
            Hello::More { pid: 8 },
            Hello::Forked {
                pid: 9,
                slot: 1 << 40,
            },
        ] {
            assert_eq!(Hello::decode(&h.encode()), Some(h));
        }
        assert_eq!(Hello::decode(&[0; 16]), None);
        assert_eq!(Hello::decode(&[1; 15]), None);
    }
}
