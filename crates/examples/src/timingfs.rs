//! TimingFS (XFUSE): files whose reads take as long as a storage device's.
//!
//! The root holds `files` regular files `file0`, `file1`, ... of `size`
//! bytes each. Their content is a fixed pattern, never stored. A read
//! replies after the profile's delay: "pmem" at once, "ssd" 100 us per
//! 4 KiB, as XFUSE used to show where framework overhead starts to matter.

use std::ffi::{OsStr, OsString};
use std::time::{Duration, Instant};

use fusebox::fs::ops::*;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;

/// How long a read of `n` bytes takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingProfile {
    /// Persistent memory: no added latency.
    Pmem,
    /// A fast SSD: 100 us per 4 KiB.
    Ssd,
    /// Custom: this much per 4 KiB.
    PerBlock(Duration),
}

impl TimingProfile {
    pub fn parse(s: &str) -> Option<TimingProfile> {
        match s {
            "pmem" => Some(TimingProfile::Pmem),
            "ssd" => Some(TimingProfile::Ssd),
            other => other
                .strip_suffix("us")
                .and_then(|n| n.parse().ok())
                .map(|us| TimingProfile::PerBlock(Duration::from_micros(us))),
        }
    }

    fn delay(self, bytes: u64) -> Duration {
        let per_block = match self {
            TimingProfile::Pmem => return Duration::ZERO,
            TimingProfile::Ssd => Duration::from_micros(100),
            TimingProfile::PerBlock(d) => d,
        };
        per_block * bytes.div_ceil(4096) as u32
    }
}

pub struct TimingFs {
    profile: TimingProfile,
    files: u64,
    size: u64,
    timeouts: Timeouts,
    created: Timespec,
}

const FIRST_FILE_NODE: u64 = 2;

impl TimingFs {
    pub fn new(profile: TimingProfile, files: u64, size: u64, timeouts: Timeouts) -> TimingFs {
        TimingFs {
            profile,
            files,
            size,
            timeouts,
            created: Timespec::now(),
        }
    }

    fn attr(&self, node: NodeId) -> Option<FileAttr> {
        let dir = node == NodeId::ROOT;
        if !dir && !(FIRST_FILE_NODE..FIRST_FILE_NODE + self.files).contains(&node.0) {
            return None;
        }
        let (mode, size) = if dir {
            (libc::S_IFDIR | 0o755, 0)
        } else {
            (libc::S_IFREG | 0o444, self.size)
        };
        Some(FileAttr::synthetic(node.0, mode, size, self.created))
    }

    fn name_of(i: u64) -> OsString {
        OsString::from(format!("file{i}"))
    }
}

/// Sleep most of the delay and spin the rest: plain sleeps overshoot by
/// tens of microseconds, which would swamp a 100 us profile.
fn wait_until(deadline: Instant) {
    const SPIN: Duration = Duration::from_micros(60);
    let now = Instant::now();
    if deadline > now + SPIN {
        std::thread::sleep(deadline - now - SPIN);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

impl Filesystem for TimingFs {
    fn lookup(&self, _: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent != NodeId::ROOT {
            return Err(Errno::ENOTDIR);
        }
        let idx = name
            .to_str()
            .and_then(|n| n.strip_prefix("file"))
            .and_then(|n| n.parse::<u64>().ok());
        match idx.filter(|i| *i < self.files && Self::name_of(*i) == name) {
            Some(i) => {
                let node = NodeId(FIRST_FILE_NODE + i);
                Ok(Entry::new(
                    node,
                    self.attr(node).ok_or(Errno::ENOENT)?,
                    &self.timeouts,
                ))
            }
            None => Err(Errno::ENOENT),
        }
    }

    fn getattr(&self, _: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node).ok_or(Errno::ENOENT)?,
            ttl: self.timeouts.attr,
        })
    }

    fn open(&self, _: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.attr(node).ok_or(Errno::ENOENT)?;
        if args.flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EACCES);
        }
        Ok(Opened {
            flags: fusebox::abi::flags::fopen::NOFLUSH,
            ..Default::default()
        })
    }

    fn read(&self, _: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let start = Instant::now();
        let attr = self.attr(node).ok_or(Errno::ENOENT)?;
        let len = attr.size.saturating_sub(args.offset).min(args.size as u64);
        // A deterministic pattern (byte = offset mod 251) lets tests check
        // that reads return the right bytes for the right offsets.
        let offset = args.offset;
        let _ = out.fill_with(len as usize, |buf| {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = ((offset + i as u64) % 251) as u8;
            }
            Ok::<usize, std::convert::Infallible>(buf.len())
        });
        wait_until(start + self.profile.delay(len));
        Ok(())
    }

    fn opendir(&self, _: &Ctx, node: NodeId, _: &Open) -> FsResult<Opened> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOTDIR);
        }
        Ok(Opened::default())
    }

    fn readdir(&self, _: &Ctx, _: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        // Offsets: 1 = ".", 2 = "..", 3 + i = file i.
        let mut off = args.offset;
        while off < 2 + self.files {
            let (ino, kind, name) = match off {
                0 => (1, FileType::Directory, OsString::from(".")),
                1 => (1, FileType::Directory, OsString::from("..")),
                n => (
                    FIRST_FILE_NODE + n - 2,
                    FileType::RegularFile,
                    Self::name_of(n - 2),
                ),
            };
            if !out.push(ino, off + 1, kind, &name) {
                break;
            }
            off += 1;
        }
        Ok(())
    }

    fn statfs(&self, _: &Ctx, _: NodeId) -> FsResult<Statfs> {
        let blocks = (self.files * self.size).div_ceil(4096);
        Ok(Statfs {
            blocks,
            files: self.files + 1,
            bsize: 4096,
            frsize: 4096,
            namelen: 255,
            ..Default::default()
        })
    }

    fn access(&self, _: &Ctx, _: NodeId, _: i32) -> FsResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_scale_with_blocks() {
        assert_eq!(TimingProfile::Pmem.delay(1 << 20), Duration::ZERO);
        assert_eq!(TimingProfile::Ssd.delay(4096), Duration::from_micros(100));
        assert_eq!(TimingProfile::Ssd.delay(4097), Duration::from_micros(200));
        assert_eq!(
            TimingProfile::parse("30us"),
            Some(TimingProfile::PerBlock(Duration::from_micros(30)))
        );
        assert_eq!(TimingProfile::parse("hdd"), None);
    }

    #[test]
    fn ssd_reads_take_their_time_and_return_the_pattern() {
        let fs = TimingFs::new(TimingProfile::Ssd, 1, 1 << 20, Timeouts::default());
        let e = fs
            .lookup(&Ctx::internal(), NodeId::ROOT, OsStr::new("file0"))
            .unwrap();
        let mut out = DataOut::with_capacity(8192);
        out.reset(8192);
        let t = Instant::now();
        let args = Read {
            fh: FileHandle(0),
            offset: 300,
            size: 8192,
            flags: 0,
            lock_owner: None,
        };
        fs.read(&Ctx::internal(), e.node, &args, &mut out).unwrap();
        assert!(t.elapsed() >= Duration::from_micros(200));
        assert_eq!(out.as_slice()[0], (300 % 251) as u8);
        assert_eq!(out.len(), 8192);
    }
}
