//! Notifications: messages the daemon sends the kernel unasked.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use fusebox_abi as abi;
use fusebox_abi::NotifyCode;
use zerocopy::IntoBytes;

use super::reply::ReplySink;
use crate::types::NodeId;

/// Sends notifications on a session's device. Cheap to clone; usable from
/// any thread, including from inside a filesystem method.
#[derive(Clone)]
pub struct Notifier {
    sink: Arc<dyn ReplySink + Send + Sync>,
    /// The session's /dev/fuse fd, for passthrough backing-file ioctls.
    device: Option<Arc<crate::device::DevChannel>>,
    retrieves: Arc<Retrieves>,
}

/// A passthrough backing file registered with the kernel (FUSE 7.40+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackingId(pub i32);

#[derive(Default)]
struct Retrieves {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, mpsc::Sender<Vec<u8>>>>,
}

impl Notifier {
    /// A notifier writing to `sink` (a transport, or a test double).
    pub fn for_sink(sink: Arc<dyn ReplySink + Send + Sync>) -> Notifier {
        Notifier {
            sink,
            device: None,
            retrieves: Arc::new(Retrieves::default()),
        }
    }

    /// A notifier on a session's device, able to register backing files.
    pub(crate) fn for_device(device: Arc<crate::device::DevChannel>) -> Notifier {
        Notifier {
            sink: device.clone(),
            device: Some(device),
            retrieves: Arc::new(Retrieves::default()),
        }
    }

    /// Register `file` as a passthrough backing file: an open reply with
    /// FOPEN_PASSTHROUGH and this id makes the kernel do that file's reads
    /// and writes itself. Needs passthrough negotiated (and root).
    pub fn backing_open(&self, file: std::os::fd::BorrowedFd<'_>) -> io::Result<BackingId> {
        let dev = self
            .device
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        crate::sys::backing_open(std::os::fd::AsFd::as_fd(dev.fd()), file).map(BackingId)
    }

    /// Drop a backing id once no open file uses it.
    pub fn backing_close(&self, id: BackingId) -> io::Result<()> {
        let dev = self
            .device
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        crate::sys::backing_close(std::os::fd::AsFd::as_fd(dev.fd()), id.0)
    }

    fn send(&self, code: NotifyCode, parts: &[&[u8]]) -> io::Result<()> {
        let len = size_of::<abi::OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
        let header = abi::OutHeader {
            len: len as u32,
            error: code as i32,
            unique: 0,
        };
        let mut all: [&[u8]; 4] = [header.as_bytes(), &[], &[], &[]];
        for (slot, p) in all[1..].iter_mut().zip(parts) {
            *slot = p;
        }
        self.sink.send(&all[..=parts.len()])
    }

    /// Drop cached data of `node` in `[offset, offset+len)` (len 0 = to the
    /// end; offset < 0 = attributes only).
    pub fn inval_inode(&self, node: NodeId, offset: i64, len: i64) -> io::Result<()> {
        let m = abi::NotifyInvalInodeOut {
            ino: node.0,
            off: offset,
            len,
        };
        self.send(NotifyCode::InvalInode, &[m.as_bytes()])
    }

    /// Drop the cached name `name` in `parent`. With `expire_only` the entry
    /// is only marked stale (needs FUSE_HAS_EXPIRE_ONLY).
    pub fn inval_entry(&self, parent: NodeId, name: &OsStr, expire_only: bool) -> io::Result<()> {
        let flags = if expire_only {
            abi::flags::EXPIRE_ONLY
        } else {
            0
        };
        let m = abi::NotifyInvalEntryOut {
            parent: parent.0,
            namelen: name.len() as u32,
            flags,
        };
        self.send(
            NotifyCode::InvalEntry,
            &[m.as_bytes(), name.as_bytes(), b"\0"],
        )
    }

    /// Tell the kernel `name` in `parent` (node `child`) was deleted.
    pub fn delete(&self, parent: NodeId, child: NodeId, name: &OsStr) -> io::Result<()> {
        let m = abi::NotifyDeleteOut {
            parent: parent.0,
            child: child.0,
            namelen: name.len() as u32,
            padding: 0,
        };
        self.send(NotifyCode::Delete, &[m.as_bytes(), name.as_bytes(), b"\0"])
    }

    /// Put `data` into the kernel's page cache of `node` at `offset`.
    pub fn store(&self, node: NodeId, offset: u64, data: &[u8]) -> io::Result<()> {
        let m = abi::NotifyStoreOut {
            nodeid: node.0,
            offset,
            size: data.len() as u32,
            padding: 0,
        };
        self.send(NotifyCode::Store, &[m.as_bytes(), data])
    }

    /// Ask the kernel for cached data of `node`; the answer arrives as a
    /// NOTIFY_REPLY request and is handed to the returned receiver.
    pub fn retrieve(
        &self,
        node: NodeId,
        offset: u64,
        size: u32,
    ) -> io::Result<mpsc::Receiver<Vec<u8>>> {
        let id = self.retrieves.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel();
        self.retrieves
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let m = abi::NotifyRetrieveOut {
            notify_unique: id,
            nodeid: node.0,
            offset,
            size,
            padding: 0,
        };
        if let Err(e) = self.send(NotifyCode::Retrieve, &[m.as_bytes()]) {
            self.retrieves
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(e);
        }
        Ok(rx)
    }

    /// Deliver a NOTIFY_REPLY (called by dispatch; `unique` is the request's).
    pub(crate) fn complete_retrieve(&self, unique: u64, data: &[u8]) {
        let tx = self
            .retrieves
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&unique);
        if let Some(tx) = tx {
            let _ = tx.send(data.to_vec());
        }
    }

    /// Wake a poller: `kh` comes from the POLL request.
    pub fn poll_wakeup(&self, kh: u64) -> io::Result<()> {
        let m = abi::NotifyPollWakeupOut { kh };
        self.send(NotifyCode::Poll, &[m.as_bytes()])
    }

    /// Ask the kernel to send every pending request again (7.40+), e.g.
    /// after a new daemon took over the device.
    pub fn resend(&self) -> io::Result<()> {
        self.send(NotifyCode::Resend, &[])
    }
}
