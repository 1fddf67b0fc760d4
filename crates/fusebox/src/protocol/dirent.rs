//! Directory listings in the kernel's dirent format.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fusebox_abi as abi;
use zerocopy::IntoBytes;

use super::reply::DataOut;
use crate::types::{Entry, FileType};

const DIRENT_LEN: usize = size_of::<abi::Dirent>();
const ENTRY_OUT_LEN: usize = size_of::<abi::EntryOut>();

fn padded(len: usize) -> usize {
    (len + abi::DIRENT_ALIGN - 1) & !(abi::DIRENT_ALIGN - 1)
}

/// A READDIR or READDIRPLUS reply being filled. Each entry carries the
/// offset of the *next* entry: the kernel passes it back to continue.
pub struct DirEntries<'a, 'b> {
    out: &'a mut DataOut<'b>,
    plus: bool,
}

impl<'a, 'b> DirEntries<'a, 'b> {
    /// Entries written into `out`, for a READDIR (`plus` false) or a
    /// READDIRPLUS answer (a later answer builds its own).
    pub fn new(out: &'a mut DataOut<'b>, plus: bool) -> Self {
        DirEntries { out, plus }
    }

    /// Entries already encoded (by another `DirEntries` of the same kind),
    /// appended as they are.
    pub(crate) fn extend_encoded(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// True for READDIRPLUS: entries need attributes, and each one added
    /// with a non-zero node counts as a lookup (except "." and "..").
    pub fn is_plus(&self) -> bool {
        self.plus
    }

    /// Bytes an entry named `name` takes, padding included, in a READDIR
    /// (`plus` false) or READDIRPLUS answer.
    pub fn record_len(plus: bool, name: &OsStr) -> usize {
        record_len(plus, name.len())
    }

    /// Bytes left for records.
    pub fn remaining(&self) -> usize {
        self.out.remaining()
    }

    /// Whether an entry with this name still fits. Check before taking a
    /// lookup reference for READDIRPLUS, so a full buffer leaks nothing.
    pub fn has_room(&self, name: &OsStr) -> bool {
        Self::record_len(self.plus, name) <= self.out.remaining()
    }

    /// Add a plain entry; `false` (and nothing added) when the buffer is full.
    /// With READDIRPLUS this adds it without attributes (node 0), so the
    /// kernel does not count a lookup.
    pub fn push(&mut self, ino: u64, next_offset: u64, kind: FileType, name: &OsStr) -> bool {
        if self.plus {
            let mut e = Entry::negative(std::time::Duration::ZERO);
            e.attr.ino = ino;
            e.attr.mode = kind.mode_bits();
            return self.push_plus(&e, next_offset, name);
        }
        if !self.has_room(name) {
            return false;
        }
        self.write_dirent(ino, next_offset, kind.dirent_type(), name);
        true
    }

    /// Add an entry with its lookup answer (READDIRPLUS).
    pub fn push_plus(&mut self, entry: &Entry, next_offset: u64, name: &OsStr) -> bool {
        if !self.has_room(name) {
            return false;
        }
        if self.plus {
            self.out.extend_from_slice(entry.to_abi().as_bytes());
        }
        let typ = entry.attr.kind().map_or(0, FileType::dirent_type);
        self.write_dirent(entry.attr.ino, next_offset, typ, name);
        true
    }

    fn write_dirent(&mut self, ino: u64, off: u64, typ: u32, name: &OsStr) {
        let d = abi::Dirent {
            ino,
            off,
            namelen: name.len() as u32,
            typ,
        };
        self.out.extend_from_slice(d.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        let pad = padded(DIRENT_LEN + name.len()) - (DIRENT_LEN + name.len());
        self.out.extend_from_slice(&[0u8; 8][..pad]);
    }
}

/// One record of a READDIR or READDIRPLUS answer, as [`DirEntries`]
/// wrote it.
#[derive(Clone, Copy, Debug)]
pub struct DirRecord<'a> {
    /// READDIRPLUS's lookup answer (node 0: none counted).
    pub entry: Option<abi::EntryOut>,
    /// The inode number.
    pub ino: u64,
    /// The offset of the next record, to continue from.
    pub next_offset: u64,
    /// The file type in dirent form (`DT_*`, the mode's type bits >> 12).
    pub typ: u32,
    /// The name.
    pub name: &'a OsStr,
}

/// The records of a READDIR (`plus` false) or READDIRPLUS answer's data,
/// in order; a record cut short ends the list.
pub fn dir_records(mut data: &[u8], plus: bool) -> impl Iterator<Item = DirRecord<'_>> {
    use zerocopy::FromBytes;
    std::iter::from_fn(move || {
        let mut rest = data;
        let entry = if plus {
            let (e, r) = abi::EntryOut::read_from_prefix(rest).ok()?;
            rest = r;
            Some(e)
        } else {
            None
        };
        let (d, r) = abi::Dirent::read_from_prefix(rest).ok()?;
        let name = r.get(..d.namelen as usize)?;
        let len = record_len(plus, d.namelen as usize);
        data = data.get(len..).unwrap_or_default();
        Some(DirRecord {
            entry,
            ino: d.ino,
            next_offset: d.off,
            typ: d.typ,
            name: OsStr::from_bytes(name),
        })
    })
}

fn record_len(plus: bool, namelen: usize) -> usize {
    padded(if plus { ENTRY_OUT_LEN } else { 0 } + DIRENT_LEN + namelen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        for plus in [false, true] {
            let mut out = DataOut::with_capacity(4096);
            out.reset(4096);
            let mut d = DirEntries::new(&mut out, plus);
            assert!(d.push(5, 1, FileType::RegularFile, OsStr::new("a")));
            assert!(d.push(6, 2, FileType::Directory, OsStr::new("eight ch")));
            assert!(d.push(7, 3, FileType::Symlink, OsStr::new("")));
            let got: Vec<_> = dir_records(out.as_slice(), plus)
                .map(|r| {
                    (
                        r.ino,
                        r.next_offset,
                        r.typ,
                        r.name.to_owned(),
                        r.entry.is_some(),
                    )
                })
                .collect();
            let dt = |k: FileType| k.dirent_type();
            assert_eq!(
                got,
                vec![
                    (5, 1, dt(FileType::RegularFile), "a".into(), plus),
                    (6, 2, dt(FileType::Directory), "eight ch".into(), plus),
                    (7, 3, dt(FileType::Symlink), "".into(), plus),
                ]
            );
            // Cut short: the whole records before the cut only.
            let cut = out.len() - 1;
            assert_eq!(dir_records(&out.as_slice()[..cut], plus).count(), 2);
        }
    }

    #[test]
    fn dirent_records_are_padded_and_bounded() {
        let mut out = DataOut::with_capacity(64);
        out.reset(64);
        let mut d = DirEntries::new(&mut out, false);
        assert!(d.push(5, 1, FileType::RegularFile, OsStr::new("a")));
        // 24 + 1 -> 32 bytes; a second 32-byte record fits exactly, a third does not.
        assert!(d.push(6, 2, FileType::Directory, OsStr::new("bcdefgh")));
        assert!(!d.push(7, 3, FileType::Directory, OsStr::new("x")));
        assert_eq!(out.len(), 64);
        assert_eq!(&out.as_slice()[0..8], &5u64.to_le_bytes());
        assert_eq!(&out.as_slice()[8..16], &1u64.to_le_bytes());
        assert_eq!(&out.as_slice()[16..20], &1u32.to_le_bytes());
        assert_eq!(
            &out.as_slice()[20..24],
            &(libc::S_IFREG >> 12).to_le_bytes()
        );
        assert_eq!(out.as_slice()[24], b'a');
        assert_eq!(&out.as_slice()[25..32], &[0u8; 7]);
    }
}
