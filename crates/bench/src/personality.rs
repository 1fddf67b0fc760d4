//! filebench's fileserver, webserver and varmail personalities, written
//! from their published definitions (fileserver.f, webserver.f,
//! varmail.f): the same flowop sequences per thread, scaled file counts and
//! sizes. Every flowop counts as one operation, as filebench reports them.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::engine::Sample;
use crate::workload::Personality;

/// xorshift64*: deterministic per thread, so runs are repeatable (the
/// recovery tests' stress workers use it too, reproducible from a seed).
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// A size around `mean` (filebench's gamma distribution, approximated
    /// by a uniform 0..2*mean).
    fn size(&mut self, mean: u64) -> u64 {
        1 + self.below(2 * mean)
    }
}

struct Fileset {
    dir: PathBuf,
    files: u32,
    /// Files per subdirectory (filebench's dirwidth).
    width: u32,
}

impl Fileset {
    fn path(&self, i: u32) -> PathBuf {
        self.dir
            .join(format!("d{}", i / self.width))
            .join(format!("f{i}"))
    }
    fn populate(&self, mean: u64, prealloc_percent: u64, rng: &mut Rng) -> Result<()> {
        for i in 0..self.files {
            let p = self.path(i);
            fs::create_dir_all(p.parent().expect("has parent"))?;
            if rng.below(100) < prealloc_percent {
                fs::write(&p, vec![b'f'; rng.size(mean) as usize])?;
            }
        }
        Ok(())
    }
}

fn read_whole(p: &Path, buf: &mut Vec<u8>) -> Result<u64> {
    buf.clear();
    Ok(File::open(p)?.read_to_end(buf)? as u64)
}

fn append(f: &mut File, n: u64) -> Result<()> {
    f.seek(SeekFrom::End(0))?;
    f.write_all(&vec![b'a'; n as usize])?;
    Ok(())
}

pub fn run(
    p: Personality,
    threads: u32,
    files: u32,
    runtime: Duration,
    dir: &Path,
) -> Result<Sample> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (set, mean) = match p {
        // fileserver.f: 10,000 files of 128 KiB mean, dirwidth 20, 50 threads.
        Personality::Fileserver => (
            Fileset {
                dir: dir.join("fs"),
                files,
                width: 20,
            },
            32 << 10,
        ),
        // webserver.f: 1,000 files of 16 KiB, dirwidth 20, 100 threads + a log.
        Personality::Webserver => (
            Fileset {
                dir: dir.join("ws"),
                files,
                width: 20,
            },
            16 << 10,
        ),
        // varmail.f: 1,000 files of 16 KiB in one directory, 16 threads.
        Personality::Varmail => (
            Fileset {
                dir: dir.join("vm"),
                files,
                width: 1_000_000,
            },
            16 << 10,
        ),
    };
    let prealloc = if p == Personality::Fileserver {
        80
    } else {
        100
    };
    set.populate(mean, prealloc, &mut rng)?;
    let log = dir.join("weblog");
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(runtime);
            stop.store(true, Ordering::Relaxed);
        })
    };
    let r = crate::engine::parallel(threads, |t| {
        let mut rng = Rng(0x1234_5678 + t as u64 * 7919);
        let mut buf = Vec::with_capacity(1 << 20);
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += match p {
                Personality::Fileserver => fileserver_loop(&set, mean, &mut rng, &mut buf)?,
                Personality::Webserver => webserver_loop(&set, &log, &mut rng, &mut buf)?,
                Personality::Varmail => varmail_loop(&set, mean, &mut rng, &mut buf)?,
            };
        }
        Ok(n)
    });
    stop.store(true, Ordering::Relaxed);
    let _ = timer.join();
    r
}

/// create, write whole, close, open, append, close, open, read whole,
/// close, delete, stat: 11 flowops.
fn fileserver_loop(set: &Fileset, mean: u64, rng: &mut Rng, buf: &mut Vec<u8>) -> Result<u64> {
    let a = set.path(rng.below(set.files as u64) as u32);
    let _ = fs::create_dir_all(a.parent().expect("has parent"));
    // Flowops race with other threads deleting the same names; filebench
    // serializes fileset entries, we skip the flowop instead of failing.
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&a)
    {
        let _ = f.write_all(&vec![b'w'; rng.size(mean) as usize]);
    }
    let b = set.path(rng.below(set.files as u64) as u32);
    // A file another thread deletes meanwhile may refuse the append on a
    // path-based passthrough (ENOENT): the flowop is skipped, not fatal.
    if let Ok(mut f) = OpenOptions::new().write(true).open(&b) {
        let _ = append(&mut f, rng.size(16 << 10));
    }
    let c = set.path(rng.below(set.files as u64) as u32);
    let _ = read_whole(&c, buf);
    let d = set.path(rng.below(set.files as u64) as u32);
    let _ = fs::remove_file(&d);
    let e = set.path(rng.below(set.files as u64) as u32);
    let _ = fs::metadata(&e);
    Ok(11)
}

/// 10 x (open, read whole, close), then append 16 KiB to the log: 31 flowops.
fn webserver_loop(set: &Fileset, log: &Path, rng: &mut Rng, buf: &mut Vec<u8>) -> Result<u64> {
    for _ in 0..10 {
        let p = set.path(rng.below(set.files as u64) as u32);
        read_whole(&p, buf)?;
    }
    let mut f = OpenOptions::new().create(true).append(true).open(log)?;
    f.write_all(&[b'l'; 16 << 10])?;
    Ok(31)
}

/// delete, create, append, fsync, close, open, read whole, append, fsync,
/// close, open, read whole, close: 13 flowops.
fn varmail_loop(set: &Fileset, mean: u64, rng: &mut Rng, buf: &mut Vec<u8>) -> Result<u64> {
    let a = set.path(rng.below(set.files as u64) as u32);
    let _ = fs::remove_file(&a);
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&a)
    {
        let _ = append(&mut f, rng.size(mean)).and_then(|()| Ok(f.sync_all()?));
    }
    let b = set.path(rng.below(set.files as u64) as u32);
    // Another thread may delete it between the read and the append
    // (filebench serializes fileset entries; we just skip that flowop).
    if read_whole(&b, buf).is_ok() {
        if let Ok(mut f) = OpenOptions::new().append(true).open(&b) {
            let _ = f
                .write_all(&vec![b'm'; rng.size(mean) as usize])
                .and_then(|()| f.sync_all());
        }
    }
    let c = set.path(rng.below(set.files as u64) as u32);
    let _ = read_whole(&c, buf);
    Ok(13)
}
