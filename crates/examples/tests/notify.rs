//! Notifications reach the kernel: invalidating an inode's attributes and a
//! directory entry makes the next stat ask the daemon again.

mod common;

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use common::{scratch_dir, test_options, TestMount};
use fusebox::fs::ops::Ctx;
use fusebox::protocol::{Connection, Notifier};
use fusebox::*;

const FILE: NodeId = NodeId(2);
const LONG: Duration = Duration::from_secs(3600);

/// A root holding one file "f" whose size the test changes behind the
/// kernel's back; everything is cached for an hour.
struct Flip {
    size: AtomicU64,
    notifier: OnceLock<Notifier>,
}

impl Flip {
    fn attr(&self, node: NodeId) -> FileAttr {
        if node == NodeId::ROOT {
            FileAttr {
                ino: 1,
                mode: libc::S_IFDIR | 0o755,
                nlink: 2,
                ..Default::default()
            }
        } else {
            FileAttr {
                ino: 2,
                mode: libc::S_IFREG | 0o644,
                nlink: 1,
                size: self.size.load(Ordering::SeqCst),
                ..Default::default()
            }
        }
    }
}

impl Filesystem for Flip {
    fn init(&self, _: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        let _ = self.notifier.set(notifier.clone());
        Ok(())
    }
    fn lookup(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent == NodeId::ROOT && name == "f" {
            Ok(Entry {
                node: FILE,
                generation: 0,
                attr: self.attr(FILE),
                entry_ttl: LONG,
                attr_ttl: LONG,
            })
        } else {
            Err(Errno::ENOENT)
        }
    }
    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node),
            ttl: LONG,
        })
    }
}

#[test]
fn inval_inode_and_inval_entry_reach_the_kernel() {
    let fs = Flip {
        size: AtomicU64::new(1),
        notifier: OnceLock::new(),
    };
    let m = TestMount::mount(fs, scratch_dir("notify"), None, &test_options());
    let f = m.mnt.join("f");
    assert_eq!(std::fs::metadata(&f).unwrap().size(), 1);
    let flip = m.filesystem::<Flip>();
    flip.size.store(2, Ordering::SeqCst);
    assert_eq!(
        std::fs::metadata(&f).unwrap().size(),
        1,
        "cached for an hour"
    );
    let n = flip.notifier.get().expect("init ran");
    // Negative offset: attributes only.
    n.inval_inode(FILE, -1, 0).expect("inval_inode");
    assert_eq!(std::fs::metadata(&f).unwrap().size(), 2);
    let lookups = |s: &fusebox::stats::Snapshot| s.op("LOOKUP").map_or(0, |o| o.count);
    let before = lookups(&m.snapshot_when(|s| lookups(s) >= 1));
    n.inval_entry(NodeId::ROOT, OsStr::new("f"), false)
        .expect("inval_entry");
    std::fs::metadata(&f).unwrap();
    let after = lookups(&m.snapshot_when(|s| lookups(s) > before));
    assert_eq!(after, before + 1, "the name was looked up again");
    // Unknown names are the kernel's to refuse, not a daemon failure.
    let e = n
        .inval_entry(NodeId::ROOT, OsStr::new("never-seen"), false)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
}
