//! What an answered request hands to its caller or takes back: node
//! references (every entry answer is one the kernel must later FORGET) and
//! open handles (every open is one RELEASE). A FUSE server that keeps books
//! of these needs them from the typed answer, not by reading reply bytes
//! again; this module is the one reading of the opcode table's
//! [`References`] column, and [`ReferenceBook`] is what a book implements.
//! The dispatcher feeds them: the recovery ledger on a supervised mount,
//! and direct mode's shared server one per connection, counting into the
//! connection's process. READDIRPLUS's references are in its answer's
//! data, read here once for every book.

use super::opcodes::{OpFacts, References};
use super::outcome::Outcome;
use super::parse::{BatchForgetList, Op};
use crate::error::Errno;
use crate::types::{FileHandle, NodeId};

/// One reference handed out or given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// One more reference to `node` (an entry answer, a created file, a
    /// READDIRPLUS entry other than `.` and `..`).
    LookedUp {
        /// The node handed out.
        node: NodeId,
    },
    /// `count` references to `node` given back (FORGET, BATCH_FORGET).
    Forgot {
        /// The node.
        node: NodeId,
        /// How many references.
        count: u64,
    },
    /// A handle opened (OPEN, OPENDIR, CREATE).
    Opened {
        /// The handle the filesystem gave out.
        fh: FileHandle,
        /// The node it is open on.
        node: NodeId,
        /// The open(2) flags it was opened with.
        flags: u32,
        /// Its passthrough backing id (0: none).
        backing_id: i32,
        /// Opened by OPENDIR.
        dir: bool,
    },
    /// A handle released (RELEASE, RELEASEDIR).
    Released {
        /// The handle.
        fh: FileHandle,
        /// Released by RELEASEDIR.
        dir: bool,
    },
}

/// Keeps books of what a server's answers hand out. Called on the
/// dispatching thread after the filesystem answered and before the answer
/// is written, so a book is never behind its caller: a crash in between
/// leaves a reference the caller never got, never one it holds that the
/// book lacks.
pub trait ReferenceBook: Send + Sync {
    /// Note one change.
    fn change(&self, change: Change);
}

/// What a request may change, taken from it before the filesystem is
/// called (the call consumes the request's arguments).
pub(crate) enum Expected<'a> {
    Nothing,
    Entry,
    Open { flags: i32, dir: bool },
    Create { flags: i32 },
    Release { fh: FileHandle, dir: bool },
    Forget { nlookup: u64 },
    BatchForget(BatchForgetList<'a>),
    Readdirplus,
}

impl<'a> Expected<'a> {
    pub(crate) fn of(facts: &OpFacts, op: &Op<'a>) -> Expected<'a> {
        let expected = match facts.references {
            References::None => None,
            References::Entry => Some(Expected::Entry),
            References::Open => op
                .open_flags()
                .map(|flags| Expected::Open { flags, dir: false }),
            References::OpenDir => op
                .open_flags()
                .map(|flags| Expected::Open { flags, dir: true }),
            References::Create => op.open_flags().map(|flags| Expected::Create { flags }),
            References::Release => op.released().map(|fh| Expected::Release { fh, dir: false }),
            References::ReleaseDir => op.released().map(|fh| Expected::Release { fh, dir: true }),
            References::Forget => op
                .forget_count()
                .map(|nlookup| Expected::Forget { nlookup }),
            References::BatchForget => op.forgotten().map(Expected::BatchForget),
            References::ReaddirPlus => Some(Expected::Readdirplus),
        };
        expected.unwrap_or(Expected::Nothing)
    }

    /// The changes the request made, given how it was answered. `node` is
    /// the request's header node; `data` the answer's data (READDIRPLUS
    /// entries carry references). Forgets and releases count whatever the
    /// answer (the caller let go either way); what is handed out counts
    /// only with a successful answer of its kind.
    pub(crate) fn changes(
        self,
        node: NodeId,
        outcome: Result<&Outcome, Errno>,
        data: &[u8],
        mut note: impl FnMut(Change),
    ) {
        match (self, outcome) {
            (Expected::Nothing, _) => {}
            (Expected::Release { fh, dir }, _) => note(Change::Released { fh, dir }),
            (Expected::Forget { nlookup }, _) => note(Change::Forgot {
                node,
                count: nlookup,
            }),
            (Expected::BatchForget(nodes), _) => {
                for (node, count) in nodes.iter() {
                    note(Change::Forgot { node, count });
                }
            }
            (Expected::Entry, Ok(Outcome::Entry(e))) if e.nodeid != 0 => note(Change::LookedUp {
                node: NodeId(e.nodeid),
            }),
            (Expected::Open { flags, dir }, Ok(Outcome::Open(o))) => note(Change::Opened {
                fh: FileHandle(o.fh),
                node,
                flags: flags as u32,
                backing_id: o.backing_id,
                dir,
            }),
            // The handle before the node: a book that must give both back
            // at once (its holder is gone) then releases before it
            // forgets, in the kernel's order.
            (Expected::Create { flags }, Ok(Outcome::Create(e, o))) => {
                note(Change::Opened {
                    fh: FileHandle(o.fh),
                    node: NodeId(e.nodeid),
                    flags: flags as u32,
                    backing_id: o.backing_id,
                    dir: false,
                });
                note(Change::LookedUp {
                    node: NodeId(e.nodeid),
                });
            }
            (Expected::Readdirplus, Ok(Outcome::Data)) => {
                for node in direntplus_nodes(data) {
                    note(Change::LookedUp { node: NodeId(node) });
                }
            }
            _ => {}
        }
    }
}

/// Node ids a READDIRPLUS answer hands out. The kernel takes no
/// reference for "." and ".." (`fuse_direntplus_link`) nor for node 0.
fn direntplus_nodes(data: &[u8]) -> impl Iterator<Item = u64> + '_ {
    super::dirent::dir_records(data, true).filter_map(|r| {
        let node = r.entry?.nodeid;
        (node != 0 && r.name != "." && r.name != "..").then_some(node)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdirplus_entries_count_except_dot_and_dotdot() {
        use zerocopy::IntoBytes;
        let mut buf = Vec::new();
        for (node, name) in [
            (1u64, "."),
            (1, ".."),
            (42, "file"),
            (0, "skipped"),
            (43, "x"),
        ] {
            let e = fusebox_abi::EntryOut {
                nodeid: node,
                ..Default::default()
            };
            let d = fusebox_abi::Dirent {
                ino: node,
                off: 0,
                namelen: name.len() as u32,
                typ: 0,
            };
            buf.extend_from_slice(e.as_bytes());
            buf.extend_from_slice(d.as_bytes());
            buf.extend_from_slice(name.as_bytes());
            buf.resize(buf.len().next_multiple_of(8), 0);
        }
        assert_eq!(direntplus_nodes(&buf).collect::<Vec<_>>(), vec![42, 43]);
    }
}
