//! The journal: requests that must not be applied twice (create, mknod,
//! mkdir, symlink, link, unlink, rmdir, rename, truncate, appending
//! writes). A server that dies after applying one but before its answer
//! reached the kernel gets it back through FUSE_NOTIFY_RESEND; run again,
//! an O_EXCL create would fail EEXIST and an unlink ENOENT. So each is
//! journaled in the state file, in three steps:
//!
//! 1. before it is applied: what its name looked like (absent, or which
//!    inode), or the file's size for an append, found by asking the
//!    filesystem itself (`lookup`, `getattr`);
//! 2. once applied: its answer;
//! 3. once the answer is written to the kernel: the record goes.
//!
//! A resent request (bit 63 of `unique`) with an answer recorded gets that
//! answer. One only begun is checked against the filesystem: if the name
//! now is what the request makes of it (created: present where it was
//! absent; removed: gone or another inode; renamed: the source inode now
//! under the new name; appended: the size grew by the write), it was
//! applied, and the answer is rebuilt from what is there (a create's entry
//! looked up, its file opened without O_CREAT, O_EXCL and O_TRUNC). Otherwise
//! it runs as if new. A truncate is simply run again: the same size twice
//! is the same file.
//!
//! The check is exact when nothing else changes the name in between (an
//! application whose request is in flight is waiting for it); a concurrent
//! writer in the source directory could make an unapplied create look
//! applied. DESIGN.md, "Recovery", says what remains.

use std::ffi::OsStr;

use fusebox_abi as abi;
use fusebox_abi::Opcode;
use zerocopy::{FromBytes, IntoBytes};

use super::ledger::Ledger;
use super::state::Before;
use crate::error::Errno;
use crate::fs::ops::{Ctx, Open};
pub use crate::fs::recoverable::AppliedChange;
use crate::fs::Filesystem;
use crate::protocol::opcodes::{Answer, Journal, OpFacts};
use crate::protocol::outcome::{open_out, Outcome};
use crate::protocol::Op;
use crate::types::NodeId;

/// The resend bit the kernel sets in `unique` (FUSE_UNIQUE_RESEND).
pub const RESENT: u64 = 1 << 63;

/// What kind of non-idempotent request, and what to look at.
pub(crate) enum Kind<'a> {
    /// Makes `name` in `parent` (CREATE, MKNOD, MKDIR, SYMLINK, LINK).
    Makes {
        parent: NodeId,
        name: &'a OsStr,
        /// CREATE's open flags, to reopen the file it made.
        create_flags: Option<i32>,
    },
    /// Removes `name` from `parent` (UNLINK, RMDIR).
    Removes { parent: NodeId, name: &'a OsStr },
    /// Moves `from` to `to` (RENAME, RENAME2).
    Moves {
        from: (NodeId, &'a OsStr),
        to: (NodeId, &'a OsStr),
        flags: u32,
    },
    /// A write at the end of a file opened O_APPEND.
    Appends { node: NodeId, len: u32 },
    /// SETATTR with a size: rerun, but answered from the journal if done.
    Truncates,
}

impl<'a> Kind<'a> {
    pub(crate) fn of(
        facts: &OpFacts,
        op: &Op<'a>,
        node: NodeId,
        ledger: &Ledger,
    ) -> Option<Kind<'a>> {
        Some(match facts.journal {
            Journal::No => return None,
            Journal::Makes => Kind::Makes {
                parent: node,
                name: op.name_in_parent()?,
                // A CREATE's flags, to reopen the file it made.
                create_flags: match facts.answer {
                    Answer::Create => op.open_flags(),
                    _ => None,
                },
            },
            Journal::Removes => Kind::Removes {
                parent: node,
                name: op.name_in_parent()?,
            },
            Journal::Moves => {
                let r = op.rename()?;
                Kind::Moves {
                    from: (r.parent, r.name),
                    to: (r.new_parent, r.new_name),
                    flags: r.flags,
                }
            }
            Journal::Truncates => {
                op.new_size()?;
                Kind::Truncates
            }
            Journal::Appends => {
                let (fh, len) = op.written()?;
                let flags = ledger.handle_flags(fh.0)?;
                if flags as i32 & libc::O_APPEND == 0 {
                    return None;
                }
                Kind::Appends {
                    node,
                    len: len as u32,
                }
            }
        })
    }
}

/// The inode `name` in `parent` is now, if any (`Filesystem::probe`:
/// nothing is handed to the kernel or changed in the filesystem's view).
fn probe_name<F: Filesystem>(fs: &F, ctx: &Ctx, parent: NodeId, name: &OsStr) -> Before {
    match fs.probe(ctx, parent, name) {
        Ok(ino) => Before::Present { ino },
        Err(Errno::ENOENT) => Before::Absent,
        Err(_) => Before::Unknown,
    }
}

/// Step 1: what the request will change, as it is now.
pub(crate) fn before<F: Filesystem>(fs: &F, ctx: &Ctx, kind: &Kind<'_>) -> Before {
    match kind {
        Kind::Makes { parent, name, .. } => match probe_name(fs, ctx, *parent, name) {
            // Creating over an existing name is idempotent (or fails
            // EEXIST both times): nothing to decide later.
            Before::Absent => Before::Absent,
            _ => Before::Unknown,
        },
        Kind::Removes { parent, name } => probe_name(fs, ctx, *parent, name),
        Kind::Moves { from, .. } => probe_name(fs, ctx, from.0, from.1),
        Kind::Appends { node, .. } => fs
            .getattr(ctx, *node, None)
            .map_or(Before::Unknown, |a| Before::Size(a.attr.size)),
        Kind::Truncates => Before::Unknown,
    }
}

/// Where a replayed answer came from.
pub(crate) enum Replayed {
    /// The journal: its references are in the ledger already.
    Recorded,
    /// Rebuilt from what the filesystem shows: it hands over references
    /// (a lookup's, an open's) to record like a new answer's.
    Rebuilt,
}

/// The answer to a resent request from its record (and the record's slot,
/// still held), or None to run it.
pub(crate) fn replay<F: Filesystem>(
    fs: &F,
    ctx: &Ctx,
    kind: &Kind<'_>,
    opcode: Opcode,
    ledger: &Ledger,
    unique: u64,
) -> Option<(Result<Outcome, Errno>, Replayed, usize)> {
    let rec = ledger.state().journal_find(unique & !RESENT)?;
    // An answer given from the record keeps it until that answer is
    // written (the caller releases it then): a crash before that gets the
    // same answer again.
    if let Some((error, body)) = rec.done {
        tracing::info!(unique, ?opcode, "resent request answered from the journal");
        let result = if error != 0 {
            Err(Errno(error))
        } else {
            match decode(opcode, &body) {
                Some(o) => Ok(o),
                None => {
                    ledger.journal_release(rec.slot);
                    return None;
                }
            }
        };
        return Some((result, Replayed::Recorded, rec.slot));
    }
    let applied = match (kind, rec.before) {
        (
            Kind::Makes {
                parent,
                name,
                create_flags,
            },
            Before::Absent,
        ) => {
            match fs.lookup(ctx, *parent, name) {
                // The lookup's reference is the one the answer hands over.
                Ok(e) if e.node.0 != 0 => Some(match create_flags {
                    None => Ok(Outcome::Entry(e.to_abi())),
                    Some(flags) => {
                        let strip = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC;
                        let open = Open {
                            flags: flags & !strip,
                            kill_suidgid: false,
                        };
                        match fs.open(ctx, e.node, &open) {
                            Ok(o) => Ok(Outcome::Create(e.to_abi(), open_out(o))),
                            Err(err) => {
                                fs.forget(e.node, 1);
                                Err(err)
                            }
                        }
                    }
                }),
                _ => None,
            }
        }
        (Kind::Removes { parent, name }, Before::Present { ino }) => {
            match probe_name(fs, ctx, *parent, name) {
                Before::Present { ino: now } if now == ino => None,
                Before::Unknown => None,
                _ => {
                    fs.applied_before_crash(&AppliedChange::Removed {
                        parent: *parent,
                        name,
                    });
                    Some(Ok(Outcome::Empty))
                }
            }
        }
        (Kind::Moves { from, to, flags }, Before::Present { ino }) => {
            let source_moved = !matches!(
                probe_name(fs, ctx, from.0, from.1),
                Before::Present { ino: now } if now == ino
            );
            let target_is_it = matches!(
                probe_name(fs, ctx, to.0, to.1),
                Before::Present { ino: now } if now == ino
            );
            (source_moved && target_is_it).then(|| {
                let args = crate::fs::ops::Rename {
                    parent: from.0,
                    name: from.1,
                    new_parent: to.0,
                    new_name: to.1,
                    flags: *flags,
                };
                fs.applied_before_crash(&AppliedChange::Renamed(&args));
                Ok(Outcome::Empty)
            })
        }
        (Kind::Appends { node, len }, Before::Size(size)) => fs
            .getattr(ctx, *node, None)
            .ok()
            .filter(|a| a.attr.size == size + *len as u64)
            .map(|_| {
                Ok(Outcome::Write(abi::WriteOut {
                    size: *len,
                    padding: 0,
                }))
            }),
        _ => None,
    };
    if applied.is_some() {
        tracing::info!(
            unique,
            ?opcode,
            "resent request was applied before the crash; answered without applying it again"
        );
    }
    match applied {
        Some(r) => Some((r, Replayed::Rebuilt, rec.slot)),
        None => {
            // Runs again, under a record of its own.
            ledger.journal_release(rec.slot);
            None
        }
    }
}

/// The body of an answer worth journaling (the kinds above answer with).
pub(crate) fn encode(result: &Result<Outcome, Errno>) -> (i32, Vec<u8>) {
    match result {
        Err(e) => (e.0, Vec::new()),
        Ok(Outcome::Entry(e)) => (0, e.as_bytes().to_vec()),
        Ok(Outcome::Create(e, o)) => {
            let mut v = e.as_bytes().to_vec();
            v.extend_from_slice(o.as_bytes());
            (0, v)
        }
        Ok(Outcome::Attr(a)) => (0, a.as_bytes().to_vec()),
        Ok(Outcome::Write(w)) => (0, w.as_bytes().to_vec()),
        Ok(_) => (0, Vec::new()),
    }
}

fn decode(opcode: Opcode, body: &[u8]) -> Option<Outcome> {
    Some(match crate::protocol::opcodes::facts(opcode).answer {
        Answer::Create => {
            let (e, rest) = abi::EntryOut::read_from_prefix(body).ok()?;
            let (o, _) = abi::OpenOut::read_from_prefix(rest).ok()?;
            Outcome::Create(e, o)
        }
        Answer::Entry => Outcome::Entry(abi::EntryOut::read_from_prefix(body).ok()?.0),
        Answer::Attr => Outcome::Attr(abi::AttrOut::read_from_prefix(body).ok()?.0),
        Answer::Written => Outcome::Write(abi::WriteOut::read_from_prefix(body).ok()?.0),
        _ => Outcome::Empty,
    })
}

impl Ledger {
    /// Step 1 recorded; None if the journal is full (the request then
    /// runs unjournaled, as it would without a supervisor).
    pub(crate) fn journal_begin(
        &self,
        unique: u64,
        opcode: Opcode,
        before: Before,
    ) -> Option<usize> {
        let Some(slot) = self.journal_slots.take() else {
            self.full("journal");
            return None;
        };
        self.state()
            .journal_begin(slot, unique & !RESENT, opcode.0, before);
        Some(slot)
    }

    /// Step 2.
    pub(crate) fn journal_done(&self, slot: usize, result: &Result<Outcome, Errno>) {
        let (error, body) = encode(result);
        self.state().journal_done(slot, error, &body);
    }

    /// Step 3 (or a record used up by a replay).
    pub(crate) fn journal_release(&self, slot: usize) {
        self.state().journal_clear(slot);
        self.journal_slots.give_back(slot);
    }
}
