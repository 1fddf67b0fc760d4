//! Crash recovery: a server process can die (kill -9, panic, abort, OOM)
//! under a mounted filesystem, and the next one takes over without the
//! applications seeing an error.
//!
//! Three parts (DESIGN.md, "Recovery"):
//!
//! - the [`supervisor`] holds the mount, the /dev/fuse fd, one cloned fd
//!   per worker and the [`state`] file, does no filesystem work, and starts
//!   servers, handing them everything over a [`handoff`] socket;
//! - the [`ledger`] records, in the state file, what the kernel holds of
//!   the filesystem: node ids with their lookup counts and each node's key
//!   (the filesystem's own way to find it again), and open handles;
//! - a new server ([`Session::take_over`](crate::Session::take_over))
//!   reuses what INIT negotiated (the kernel sends INIT only once),
//!   restores the nodes and handles through the filesystem's
//!   [`Filesystem::restore_node`](crate::Filesystem::restore_node) and
//!   [`Filesystem::restore_handle`](crate::Filesystem::restore_handle),
//!   then asks the kernel to send again every request the dead server had
//!   read but not answered (FUSE_NOTIFY_RESEND, Linux 6.9+).
//!
//! A filesystem is recoverable when it gives a key for its nodes
//! ([`Filesystem::node_key`](crate::Filesystem::node_key)) and restores
//! from it; stackfs names files by kernel file handle, the path-level
//! adapter by parent and name.
//!
//! Over io_uring the supervisor also makes and holds the rings
//! (`sys::ring_area`): their commands are issued by its SQ thread, so a
//! server's death cancels none of them, and each entry's slot in the ring
//! area says where the next server goes on from (DESIGN.md, "Recovery over
//! io_uring").

pub mod failpoint;
pub mod handoff;
pub mod journal;
pub mod ledger;
pub mod pause;
pub(crate) mod server;
pub mod state;
pub mod supervisor;

pub use crate::error::RecoveryError;
pub use crate::fs::recoverable::{AppliedChange, HandleRecord, KeyChanges};
pub use handoff::{Channel, ToServer, ToSupervisor, HANDOFF_ENV};
pub use ledger::{Ledger, Restored};
pub use state::{Capacity, RecoveryTotals, StateFile};
pub use supervisor::{
    control_socket_for, request_upgrade, this_program_again, RingPlan, Supervisor,
    SupervisorConfig, SupervisorExit,
};
