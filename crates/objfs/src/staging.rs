//! The staging area: where a file open for writing, and a closed file not
//! yet in the store, lives on local disk, with a journal that says what
//! each staged file is waiting to become.
//!
//! ```text
//! STAGING/files/ID        the file's bytes (ID is also its handle number)
//! STAGING/journal/ID.json a closed file awaiting upload: key, metadata, size
//! ```
//!
//! A journal record is written (to a temporary name, then renamed) before
//! close(2) returns, and removed only once the object is in the store; a
//! server that starts finds the records and uploads them
//! (`ObjFs::resume`). A process that dies (kill -9, a panic, an upgrade)
//! loses nothing that way: the kernel holds what it wrote. The disk is
//! synced (`sync`) where a local filesystem would be: on fsync(2) of a
//! file whose upload cannot finish at once. After a crash of the machine
//! itself, a record whose data file is not the size it recorded was
//! closed but never synced, as an unsynced file on a local disk may be
//! lost: it is not uploaded (`Record::matches`). The size is the check a
//! filesystem that writes data before the size (ext4's default) makes
//! enough; it cannot see a rewrite of the same length that did not reach
//! the disk. A record names the data file's key as
//! of the last rename, so a file renamed before its upload lands under its
//! new name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fusebox::Timespec;
use serde::{Deserialize, Serialize};

use crate::meta::Meta;

/// A closed file's upload, as the journal keeps it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    /// The data file (`files/ID`).
    pub id: u64,
    /// The key it is to be stored under.
    pub key: String,
    /// `st_mode`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// mtime: seconds, nanoseconds.
    pub mtime: (i64, u32),
    /// ctime: seconds, nanoseconds.
    pub ctime: (i64, u32),
    /// The data file's size when sealed (absent in records written
    /// before it was kept).
    #[serde(default)]
    pub size: Option<u64>,
}

impl Record {
    /// The record for `key`'s data in `id` (`size` bytes) with `meta`.
    pub fn new(id: u64, key: &str, meta: &Meta, size: u64) -> Record {
        Record {
            size: Some(size),
            id,
            key: key.into(),
            mode: meta.mode,
            uid: meta.uid,
            gid: meta.gid,
            mtime: (meta.mtime.sec, meta.mtime.nsec),
            ctime: (meta.ctime.sec, meta.ctime.nsec),
        }
    }

    /// Whether `data` is what was sealed, as far as its size tells: a
    /// machine that stopped before writing back a closed file leaves it
    /// shorter or longer.
    pub fn matches(&self, data: &File) -> io::Result<bool> {
        let len = data.metadata()?.len();
        Ok(self.size.is_none_or(|s| s == len))
    }

    /// Its metadata.
    pub fn meta(&self) -> Meta {
        Meta {
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            mtime: Timespec {
                sec: self.mtime.0,
                nsec: self.mtime.1,
            },
            ctime: Timespec {
                sec: self.ctime.0,
                nsec: self.ctime.1,
            },
        }
    }
}

/// The staging directory of one mount.
#[derive(Debug)]
pub struct Staging {
    /// Where it is, for messages.
    dir: PathBuf,
    /// The directory as this server opened it: every path below goes
    /// through this descriptor (`/proc/self/fd/N/...`), so a server still
    /// sending its uploads after an unmount keeps to its own directory
    /// even if that was removed and a new one made at the same place
    /// (it then finds nothing, instead of the next mount's files).
    _root: File,
    files: PathBuf,
    journal: PathBuf,
}

impl Staging {
    /// Opens (making it if needed) the staging area at `dir`, private to
    /// its owner.
    pub fn open(dir: &Path) -> io::Result<Staging> {
        use std::os::unix::fs::DirBuilderExt;
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(dir.join("files"))?;
        b.create(dir.join("journal"))?;
        let root = File::open(dir)?;
        let held = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
        Ok(Staging {
            dir: dir.to_path_buf(),
            files: held.join("files"),
            journal: held.join("journal"),
            _root: root,
        })
    }

    /// An exclusive lock on the staging area, held by the server that
    /// owns its journal: waited for while another holds it (a daemon
    /// still sending its uploads after an unmount, when the same bucket
    /// is mounted at the same place again). Released when the file is
    /// closed, or its process dies.
    pub fn lock(&self) -> io::Result<File> {
        use rustix::fs::{flock, FlockOperation};
        let path = self.files.with_file_name("lock");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        match flock(&f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {}
            Err(e) => return Err(e.into()),
        }
        tracing::warn!(
            "objfs: another server uses the staging area {} (one still sending its uploads \
             after an unmount?); waiting for it",
            self.dir.display()
        );
        flock(&f, FlockOperation::LockExclusive)?;
        Ok(f)
    }

    /// The data file of `id`.
    pub fn path(&self, id: u64) -> PathBuf {
        self.files.join(id.to_string())
    }

    /// A new, empty data file for `id` (replacing any leftover).
    pub fn create(&self, id: u64) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.path(id))
    }

    /// The data file of `id`, if it is there.
    pub fn reopen(&self, id: u64) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(id))
    }

    /// Removes `id`'s data file.
    pub fn remove(&self, id: u64) {
        if let Err(e) = fs::remove_file(self.path(id)) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!("staging: removing file {id}: {e}");
            }
        }
    }

    /// Records `r`, replacing its earlier record at once: after this
    /// returns, a crash of this process leaves the upload to be done (a
    /// crash of the machine too, after `sync`).
    pub fn journal(&self, r: &Record) -> io::Result<()> {
        let tmp = self.journal.join(format!("{}.tmp", r.id));
        let dst = self.journal.join(format!("{}.json", r.id));
        let mut f = File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(r).map_err(io::Error::other)?)?;
        fs::rename(&tmp, &dst)
    }

    /// Puts `id`'s data and record on the disk: a crash of the machine
    /// leaves the upload to be done.
    pub fn sync(&self, id: u64, data: &File) -> io::Result<()> {
        data.sync_data()?;
        File::open(&self.files)?.sync_all()?;
        match File::open(self.journal.join(format!("{id}.json"))) {
            Ok(f) => f.sync_all()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        File::open(&self.journal)?.sync_all()
    }

    /// The upload of `id` is done (or no longer wanted).
    pub fn forget(&self, id: u64) -> io::Result<()> {
        match fs::remove_file(self.journal.join(format!("{id}.json"))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every record in the journal, and every data file's id.
    pub fn scan(&self) -> io::Result<(Vec<Record>, Vec<u64>)> {
        let mut records = Vec::new();
        for e in fs::read_dir(&self.journal)? {
            let e = e?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if !name.ends_with(".json") {
                continue;
            }
            let bytes = match fs::read(e.path()) {
                Ok(b) => b,
                // Forgotten since the directory was read: uploaded.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            match serde_json::from_slice::<Record>(&bytes) {
                Ok(r) => records.push(r),
                Err(err) => tracing::warn!("staging: unreadable record {name}: {err}"),
            }
        }
        records.sort_by_key(|r| r.id);
        let mut ids = Vec::new();
        for e in fs::read_dir(&self.files)? {
            if let Some(id) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
                ids.push(id);
            }
        }
        Ok((records, ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_area_removed_and_made_again_is_not_the_old_servers() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("s");
        let old = Staging::open(&at).unwrap();
        fs::remove_dir_all(&at).unwrap();
        let new = Staging::open(&at).unwrap();
        new.create(1).unwrap();
        // The old server, still draining, removes "its" file 1.
        old.remove(1);
        assert!(new.path(1).exists());
        assert!(old.create(2).is_err());
        assert!(!at.join("files/2").exists());
    }

    #[test]
    fn records_survive_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let f = s.create(7).unwrap();
        let meta = Meta {
            mode: libc::S_IFREG | 0o640,
            uid: 1,
            gid: 2,
            mtime: Timespec { sec: 5, nsec: 6 },
            ctime: Timespec { sec: 7, nsec: 8 },
        };
        let r = Record::new(7, "a/b", &meta, 0);
        s.journal(&r).unwrap();
        s.sync(7, &f).unwrap();
        assert!(r.matches(&f).unwrap());
        f.set_len(3).unwrap();
        assert!(!r.matches(&f).unwrap());
        f.set_len(0).unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (records, ids) = s.scan().unwrap();
        assert_eq!(records, std::slice::from_ref(&r));
        assert_eq!(records[0].meta(), meta);
        assert_eq!(ids, [7]);
        s.forget(7).unwrap();
        s.forget(7).unwrap();
        s.remove(7);
        assert_eq!(s.scan().unwrap(), (vec![], vec![]));
    }
}
