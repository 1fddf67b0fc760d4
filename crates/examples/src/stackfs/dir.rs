//! Reading a source directory at the kernel's offsets.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fusebox::{Errno, FileType, FsResult};

/// An open source directory. Offsets handed to the kernel are the source
/// filesystem's own getdents cookies, so they stay valid across calls and
/// across concurrent changes exactly as they do natively.
pub(crate) struct DirState {
    fd: Arc<OwnedFd>,
    buf: Vec<u8>,
}

fn kind(t: rustix::fs::FileType) -> FileType {
    use rustix::fs::FileType as T;
    match t {
        T::Directory => FileType::Directory,
        T::Symlink => FileType::Symlink,
        T::Fifo => FileType::NamedPipe,
        T::Socket => FileType::Socket,
        T::CharacterDevice => FileType::CharDevice,
        T::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

impl DirState {
    pub fn new(fd: OwnedFd) -> DirState {
        DirState {
            fd: Arc::new(fd),
            buf: Vec::with_capacity(32 << 10),
        }
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The directory's fd, to use while `fill` borrows the state.
    pub fn shared_fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }

    /// Feed entries after `offset` to `push(name, ino, kind, next_offset)`
    /// until it returns false or the directory ends.
    pub fn fill(
        &mut self,
        offset: u64,
        mut push: impl FnMut(&OsStr, u64, FileType, u64) -> bool,
    ) -> FsResult<()> {
        rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Start(offset)).map_err(Errno::from)?;
        let mut dir = rustix::fs::RawDir::new(&self.fd, self.buf.spare_capacity_mut());
        while let Some(entry) = dir.next() {
            let e = entry.map_err(Errno::from)?;
            let name = OsStr::from_bytes(e.file_name().to_bytes());
            if !push(name, e.ino(), kind(e.file_type()), e.next_entry_cookie()) {
                break;
            }
        }
        Ok(())
    }
}
