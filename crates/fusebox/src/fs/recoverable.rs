//! What a filesystem and crash recovery say to each other: the records a
//! filesystem restores from ([`HandleRecord`]), the changes a dead server
//! applied that the filesystem is told of ([`AppliedChange`]), and how a
//! filesystem whose node keys move says so ([`KeyChanges`]). The trait
//! methods that take them are `Filesystem::node_key`, `restore_node`,
//! `restore_handle`, `applied_before_crash` and `track_key_changes`;
//! the machinery that calls them is in `recovery`.

use std::ffi::OsStr;
use std::sync::Weak;

use crate::protocol::ops::Rename;
use crate::types::NodeId;

/// Bytes of identity a filesystem may keep per node (a kernel file handle
/// is at most 128 bytes; a parent id and a name at most 263).
pub const MAX_KEY: usize = 288;

/// An open file or directory the kernel holds a handle to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleRecord {
    /// The handle the filesystem gave out.
    pub fh: u64,
    /// The node it is open on.
    pub node: u64,
    /// The open(2) flags it was opened with.
    pub flags: u32,
    /// Its passthrough backing id (0: none): the id lives in the kernel
    /// connection and stays valid; a new server reuses it.
    pub backing_id: i32,
    /// Opened by OPENDIR rather than OPEN.
    pub dir: bool,
}

/// A namespace change the previous server applied but died before
/// answering; the new server answers it without applying it again, and
/// tells the filesystem (`Filesystem::applied_before_crash`), whose view
/// restored from the ledger may predate it.
#[derive(Debug)]
pub enum AppliedChange<'a> {
    /// UNLINK or RMDIR of `name` in `parent`.
    Removed {
        /// The directory the name was in.
        parent: NodeId,
        /// The name removed.
        name: &'a OsStr,
    },
    /// RENAME.
    Renamed(&'a Rename<'a>),
}

/// Where a changed key is reported: the recovery ledger.
pub(crate) trait Rekey: Send + Sync {
    /// `node`'s key is to be asked again.
    fn rekey(&self, node: NodeId);
}

/// How a filesystem whose node keys change (the path-level adapter: a
/// rename moves a node to another parent and name) tells the ledger, so
/// that a new server finds the node where it is now. Handed over by
/// [`Filesystem::track_key_changes`](crate::Filesystem::track_key_changes)
/// when a supervised session starts.
#[derive(Clone)]
pub struct KeyChanges(Weak<dyn Rekey>);

impl KeyChanges {
    pub(crate) fn new(ledger: Weak<dyn Rekey>) -> KeyChanges {
        KeyChanges(ledger)
    }

    /// `node`'s key is no longer what `node_key` gave: it is asked again.
    /// Call this once the change is what `node_key` sees, and never while
    /// holding a lock `node_key` takes.
    pub fn changed(&self, node: NodeId) {
        if let Some(ledger) = self.0.upgrade() {
            ledger.rekey(node);
        }
    }
}
