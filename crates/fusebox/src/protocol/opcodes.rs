//! The per-opcode table: what every layer needs to know about a kind of
//! request, one row per opcode, in one place.
//!
//! Dispatch reads which answer a request takes and how large it may be;
//! answers given later are checked against it; the recovery ledger reads
//! which references a request hands to or takes from the kernel, and the
//! journal whether running it twice differs from running it once; the
//! io_uring transport reads whether an answer is built straight into a ring
//! entry's buffer; the /dev/fuse readers read whether the kernel waits for
//! an answer at all. None of them names an opcode: a new one gets a row
//! here (the build fails until it has one) and is then handled everywhere.
//!
//! What depends on a request's arguments (a READ's size, an OPEN's flags)
//! comes from the parsed request's accessors ([`Op`](super::Op)), which
//! the parser keeps beside the one match that makes each `Op`.

use fusebox_abi::Opcode;

/// What a successful answer to a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The kernel waits for no answer (FORGET, BATCH_FORGET, INTERRUPT,
    /// NOTIFY_REPLY).
    Nothing,
    /// The header alone.
    Empty,
    /// `fuse_entry_out`.
    Entry,
    /// `fuse_attr_out`.
    Attr,
    /// `fuse_open_out`.
    Open,
    /// `fuse_entry_out` then `fuse_open_out`.
    Create,
    /// `fuse_write_out`.
    Written,
    /// `fuse_statfs_out`.
    Statfs,
    /// Data (or, for the xattr requests asked for a size, `fuse_getxattr_out`).
    Data,
    /// `fuse_lk_out`.
    Lock,
    /// `fuse_bmap_out`.
    Bmap,
    /// `fuse_ioctl_out` then data.
    Ioctl,
    /// `fuse_poll_out`.
    Poll,
    /// `fuse_lseek_out`.
    Offset,
    /// `fuse_copy_file_range_out` (a 64-bit count).
    Copied64,
    /// `fuse_statx_out`.
    Statx,
    /// `fuse_init_out`, answered by the session before any worker runs.
    Init,
    /// fusebox does not serve it: ENOSYS.
    Unsupported,
}

/// How large an answer's data may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// No data, or none bounded by the request.
    None,
    /// The size the request asks for (READ, READDIR, READDIRPLUS, IOCTL's
    /// out_size).
    Requested,
    /// A path: PATH_MAX (READLINK).
    PathMax,
    /// GETXATTR and LISTXATTR: the size asked for, or with 0 the value's
    /// size alone.
    Xattr,
}

/// What the recovery ledger must note of a request: the references it
/// hands to the kernel or takes back, and the handles it opens or closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum References {
    /// Nothing.
    None,
    /// A successful answer hands out one reference to the entry's node.
    Entry,
    /// Opens a file handle.
    Open,
    /// Opens a directory handle.
    OpenDir,
    /// Hands out a node reference and opens a handle.
    Create,
    /// Closes a file handle.
    Release,
    /// Closes a directory handle.
    ReleaseDir,
    /// Drops references to one node.
    Forget,
    /// Drops references to many nodes.
    BatchForget,
    /// Each entry of the answer's data hands out a reference.
    ReaddirPlus,
}

/// Whether running a request a second time (a new server answering what a
/// dead one applied) differs from running it once, and what the journal
/// must look at to tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Journal {
    /// Idempotent: run it again.
    No,
    /// Makes a name in the request's directory.
    Makes,
    /// Removes a name from the request's directory.
    Removes,
    /// Moves a name.
    Moves,
    /// Changes a file's size, when the request carries one (SETATTR).
    Truncates,
    /// Appends, when the handle was opened O_APPEND (WRITE).
    Appends,
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpFacts {
    /// What a successful answer carries.
    pub answer: Answer,
    /// How large its data may be.
    pub limit: Limit,
    /// What the ledger notes.
    pub references: References,
    /// What the journal keeps.
    pub journal: Journal,
    /// The io_uring transport builds the answer's data straight into the
    /// ring entry's payload buffer (the answer is data alone).
    pub in_place: bool,
}

impl OpFacts {
    /// Whether the kernel waits for an answer.
    pub const fn answered(&self) -> bool {
        !matches!(self.answer, Answer::Nothing)
    }

    /// Whether the request drops node references (FORGET, BATCH_FORGET).
    pub const fn forgets(&self) -> bool {
        matches!(
            self.references,
            References::Forget | References::BatchForget
        )
    }
}

const PLAIN: OpFacts = OpFacts {
    answer: Answer::Empty,
    limit: Limit::None,
    references: References::None,
    journal: Journal::No,
    in_place: false,
};

const fn answers(answer: Answer) -> OpFacts {
    OpFacts { answer, ..PLAIN }
}

/// Unknown opcodes, and those without a row: answered ENOSYS.
const UNSUPPORTED: OpFacts = answers(Answer::Unsupported);

const ROWS: &[(Opcode, OpFacts)] = &[
    (
        Opcode::LOOKUP,
        OpFacts {
            references: References::Entry,
            ..answers(Answer::Entry)
        },
    ),
    (
        Opcode::FORGET,
        OpFacts {
            references: References::Forget,
            ..answers(Answer::Nothing)
        },
    ),
    (Opcode::GETATTR, answers(Answer::Attr)),
    (
        Opcode::SETATTR,
        OpFacts {
            journal: Journal::Truncates,
            ..answers(Answer::Attr)
        },
    ),
    (
        Opcode::READLINK,
        OpFacts {
            limit: Limit::PathMax,
            ..answers(Answer::Data)
        },
    ),
    (Opcode::SYMLINK, makes_entry()),
    (Opcode::MKNOD, makes_entry()),
    (Opcode::MKDIR, makes_entry()),
    (
        Opcode::UNLINK,
        OpFacts {
            journal: Journal::Removes,
            ..PLAIN
        },
    ),
    (
        Opcode::RMDIR,
        OpFacts {
            journal: Journal::Removes,
            ..PLAIN
        },
    ),
    (
        Opcode::RENAME,
        OpFacts {
            journal: Journal::Moves,
            ..PLAIN
        },
    ),
    (Opcode::LINK, makes_entry()),
    (
        Opcode::OPEN,
        OpFacts {
            references: References::Open,
            ..answers(Answer::Open)
        },
    ),
    (Opcode::READ, reads_data()),
    (
        Opcode::WRITE,
        OpFacts {
            journal: Journal::Appends,
            ..answers(Answer::Written)
        },
    ),
    (Opcode::STATFS, answers(Answer::Statfs)),
    (
        Opcode::RELEASE,
        OpFacts {
            references: References::Release,
            ..PLAIN
        },
    ),
    (Opcode::FSYNC, PLAIN),
    (Opcode::SETXATTR, PLAIN),
    (Opcode::GETXATTR, xattr_data()),
    (Opcode::LISTXATTR, xattr_data()),
    (Opcode::REMOVEXATTR, PLAIN),
    (Opcode::FLUSH, PLAIN),
    (Opcode::INIT, answers(Answer::Init)),
    (
        Opcode::OPENDIR,
        OpFacts {
            references: References::OpenDir,
            ..answers(Answer::Open)
        },
    ),
    (Opcode::READDIR, reads_data()),
    (
        Opcode::RELEASEDIR,
        OpFacts {
            references: References::ReleaseDir,
            ..PLAIN
        },
    ),
    (Opcode::FSYNCDIR, PLAIN),
    (Opcode::GETLK, answers(Answer::Lock)),
    (Opcode::SETLK, PLAIN),
    (Opcode::SETLKW, PLAIN),
    (Opcode::ACCESS, PLAIN),
    (
        Opcode::CREATE,
        OpFacts {
            references: References::Create,
            journal: Journal::Makes,
            ..answers(Answer::Create)
        },
    ),
    (Opcode::INTERRUPT, answers(Answer::Nothing)),
    (Opcode::BMAP, answers(Answer::Bmap)),
    (Opcode::DESTROY, PLAIN),
    (
        Opcode::IOCTL,
        OpFacts {
            limit: Limit::Requested,
            ..answers(Answer::Ioctl)
        },
    ),
    (Opcode::POLL, answers(Answer::Poll)),
    (Opcode::NOTIFY_REPLY, answers(Answer::Nothing)),
    (
        Opcode::BATCH_FORGET,
        OpFacts {
            references: References::BatchForget,
            ..answers(Answer::Nothing)
        },
    ),
    (Opcode::FALLOCATE, PLAIN),
    (
        Opcode::READDIRPLUS,
        OpFacts {
            references: References::ReaddirPlus,
            ..reads_data()
        },
    ),
    (
        Opcode::RENAME2,
        OpFacts {
            journal: Journal::Moves,
            ..PLAIN
        },
    ),
    (Opcode::LSEEK, answers(Answer::Offset)),
    (Opcode::COPY_FILE_RANGE, answers(Answer::Written)),
    // DAX mappings: fusebox serves no DAX device.
    (Opcode::SETUPMAPPING, UNSUPPORTED),
    (Opcode::REMOVEMAPPING, UNSUPPORTED),
    (Opcode::SYNCFS, PLAIN),
    (
        Opcode::TMPFILE,
        OpFacts {
            // Unnamed: nothing to find again after a crash, so not
            // journaled; its node and handle are the kernel's as CREATE's.
            references: References::Create,
            ..answers(Answer::Create)
        },
    ),
    (Opcode::STATX, answers(Answer::Statx)),
    (Opcode::COPY_FILE_RANGE_64, answers(Answer::Copied64)),
    // CUSE is a different device (/dev/cuse); a FUSE mount never sees it.
    (Opcode::CUSE_INIT, UNSUPPORTED),
];

const fn makes_entry() -> OpFacts {
    OpFacts {
        references: References::Entry,
        journal: Journal::Makes,
        ..answers(Answer::Entry)
    }
}

const fn reads_data() -> OpFacts {
    OpFacts {
        limit: Limit::Requested,
        in_place: true,
        ..answers(Answer::Data)
    }
}

const fn xattr_data() -> OpFacts {
    OpFacts {
        limit: Limit::Xattr,
        ..answers(Answer::Data)
    }
}

/// The table, indexed by [`Opcode::table_index`]. Built at compile time,
/// which fails if an opcode the ABI crate knows has no row, or has two.
static TABLE: [OpFacts; Opcode::TABLE_LEN] = build();

const fn build() -> [OpFacts; Opcode::TABLE_LEN] {
    let mut table = [UNSUPPORTED; Opcode::TABLE_LEN];
    let mut seen = [false; Opcode::TABLE_LEN];
    let mut i = 0;
    while i < ROWS.len() {
        let (op, facts) = ROWS[i];
        if op.0 as usize >= Opcode::TABLE_LEN {
            // Only CUSE_INIT lives outside the table's range.
            assert!(
                op.0 == Opcode::CUSE_INIT.0,
                "Opcode::TABLE_LEN is too small"
            );
        } else {
            assert!(!seen[op.0 as usize], "an opcode has two rows");
            seen[op.0 as usize] = true;
            table[op.0 as usize] = facts;
        }
        i += 1;
    }
    let mut k = 0;
    while k < Opcode::ALL.len() {
        let op = Opcode::ALL[k];
        if op.0 != Opcode::CUSE_INIT.0 {
            assert!(
                (op.0 as usize) < Opcode::TABLE_LEN,
                "an opcode is past Opcode::TABLE_LEN"
            );
            assert!(
                seen[op.0 as usize],
                "an opcode has no row in protocol/opcodes.rs"
            );
        }
        k += 1;
    }
    table
}

/// The facts of `opcode`; an opcode fusebox does not know is unsupported.
pub fn facts(opcode: Opcode) -> &'static OpFacts {
    // Slot 0 (no opcode is 0) holds the unsupported row for every opcode
    // past the table, as for the numbers within it that have none.
    &TABLE[opcode.table_index()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_opcode_has_a_row_and_unknown_ones_are_unsupported() {
        for &op in Opcode::ALL {
            if op == Opcode::CUSE_INIT {
                continue;
            }
            let row = ROWS.iter().find(|(o, _)| *o == op);
            assert_eq!(row.map(|(_, f)| f), Some(facts(op)), "{op:?}");
        }
        assert_eq!(facts(Opcode(7)).answer, Answer::Unsupported);
        assert_eq!(facts(Opcode(9999)).answer, Answer::Unsupported);
        assert_eq!(facts(Opcode::CUSE_INIT).answer, Answer::Unsupported);
    }

    #[test]
    fn only_forgets_interrupts_and_notify_replies_go_unanswered() {
        let unanswered: Vec<_> = Opcode::ALL
            .iter()
            .filter(|o| !facts(**o).answered())
            .copied()
            .collect();
        assert_eq!(
            unanswered,
            [
                Opcode::FORGET,
                Opcode::INTERRUPT,
                Opcode::NOTIFY_REPLY,
                Opcode::BATCH_FORGET
            ]
        );
    }

    #[test]
    fn answers_built_in_place_are_data_alone() {
        for &op in Opcode::ALL {
            let f = facts(op);
            if f.in_place {
                assert_eq!(f.answer, Answer::Data, "{op:?}");
                assert_eq!(f.limit, Limit::Requested, "{op:?}");
            }
        }
    }

    #[test]
    fn what_the_journal_keeps_changes_the_namespace_or_a_size() {
        for &op in Opcode::ALL {
            let f = facts(op);
            if f.journal == Journal::Makes {
                assert!(matches!(f.answer, Answer::Entry | Answer::Create), "{op:?}");
            }
        }
    }
}
