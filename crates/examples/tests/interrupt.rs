//! INTERRUPT reaches the filesystem: a read stuck in the daemon is
//! abandoned when the application takes a signal.

mod common;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::{scratch_dir, test_options, TestMount};
use fusebox::abi::flags::fopen;
use fusebox::fs::ops::{Ctx, Open, Read};
use fusebox::protocol::DataOut;
use fusebox::*;

/// One file, "slow", whose reads wait until interrupted (at most 10 s).
struct Slow;

fn attr(node: NodeId) -> FileAttr {
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
            size: 4096,
            ..Default::default()
        }
    }
}

impl Filesystem for Slow {
    fn lookup(&self, _: &Ctx, _: NodeId, name: &OsStr) -> FsResult<Entry> {
        if name == "slow" {
            Ok(Entry::new(NodeId(2), attr(NodeId(2)), &Timeouts::default()))
        } else {
            Err(Errno::ENOENT)
        }
    }
    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: attr(node),
            ttl: Duration::from_secs(1),
        })
    }
    fn open(&self, _: &Ctx, _: NodeId, _: &Open) -> FsResult<Opened> {
        // Direct I/O: the READ is synchronous, so a signal can interrupt it.
        Ok(Opened {
            flags: fopen::DIRECT_IO,
            ..Default::default()
        })
    }
    fn read(&self, ctx: &Ctx, _: NodeId, _: &Read, _: &mut DataOut) -> FsResult<()> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if ctx.interrupted() {
                return Err(Errno::EINTR);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(Errno::EIO)
    }
}

#[test]
fn a_signal_interrupts_a_request_in_the_daemon() {
    let m = TestMount::mount(Slow, scratch_dir("interrupt"), None, &test_options());
    let script = r#"
import os, signal, sys, time
class Alarm(Exception): pass
def on_alarm(*_): raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
fd = os.open(os.path.join(sys.argv[1], "slow"), os.O_RDONLY)
signal.setitimer(signal.ITIMER_REAL, 0.3)
t = time.time()
try:
    os.read(fd, 4096); print("read returned")
except Alarm:
    print("interrupted after %.1fs" % (time.time() - t))
except OSError as e:
    print("error", e.errno)
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&m.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("interrupted after 0."),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap = m.snapshot_when(|s| {
        s.op("INTERRUPT").is_some() && s.op("READ").is_some_and(|o| o.errors >= 1)
    });
    assert!(
        snap.op("INTERRUPT").is_some(),
        "the daemon saw the INTERRUPT"
    );
    let read = snap.op("READ").cloned().unwrap();
    assert!(read.errors >= 1, "the READ ended with EINTR: {read:?}");
}
