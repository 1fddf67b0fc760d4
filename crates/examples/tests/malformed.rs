//! Malformed requests never panic the daemon: seed requests of every shape,
//! truncated, bit-flipped and length-corrupted, go through the parser and
//! the dispatcher into memfs. (The same seeds are the cargo-fuzz corpus in
//! fuzz/corpus/parse; this test runs without nightly Rust.)

use std::sync::{Arc, Mutex};

use fusebox::abi::{self, Opcode};
use fusebox::dispatch::{Dispatcher, Worker};
use fusebox::protocol::{DataOut, Notifier, ParseConfig, ReplySink};
use fusebox::stats::WorkerStats;
use fusebox::Timeouts;
use fusebox_examples::MemFs;
use zerocopy::IntoBytes;

#[derive(Default)]
struct Replies(Mutex<Vec<(u64, i32)>>);

impl ReplySink for Replies {
    fn send(&self, parts: &[&[u8]]) -> std::io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let h = parts[0];
        let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
        assert_eq!(len, total, "reply length field must match what is sent");
        let err = i32::from_le_bytes(h[4..8].try_into().unwrap());
        assert!(err <= 0 && err > -512, "errors are negated errnos: {err}");
        if err != 0 {
            assert_eq!(total, 16, "an error reply carries no body");
        }
        self.0
            .lock()
            .unwrap()
            .push((u64::from_le_bytes(h[8..16].try_into().unwrap()), err));
        Ok(())
    }
}

fn request(op: Opcode, nodeid: u64, args: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = args.concat();
    let h = abi::InHeader {
        len: (40 + body.len()) as u32,
        opcode: op.0,
        unique: 2,
        nodeid,
        uid: 0,
        gid: 0,
        pid: 1,
        total_extlen: 0,
        padding: 0,
    };
    [h.as_bytes(), &body].concat()
}

/// One well-formed request of many kinds.
pub fn seeds() -> Vec<Vec<u8>> {
    let create = abi::CreateIn {
        flags: 0o102,
        mode: 0o100644,
        umask: 0o22,
        open_flags: 0,
    };
    let write = abi::WriteIn {
        fh: 1,
        offset: 0,
        size: 5,
        ..Default::default()
    };
    let read = abi::ReadIn {
        fh: 1,
        offset: 0,
        size: 4096,
        ..Default::default()
    };
    let rename2 = abi::Rename2In {
        newdir: 1,
        flags: 1,
        padding: 0,
    };
    let setx = abi::SetxattrIn {
        size: 3,
        flags: 0,
        setxattr_flags: 0,
        padding: 0,
    };
    let getx = abi::GetxattrIn {
        size: 64,
        padding: 0,
    };
    let setattr = abi::SetattrIn {
        valid: 0x1ff,
        size: 10,
        mode: 0o644,
        ..Default::default()
    };
    let forget = [
        abi::BatchForgetIn { count: 2, dummy: 0 }
            .as_bytes()
            .to_vec(),
        abi::ForgetOne {
            nodeid: 2,
            nlookup: 1,
        }
        .as_bytes()
        .to_vec(),
        abi::ForgetOne {
            nodeid: 3,
            nlookup: 1,
        }
        .as_bytes()
        .to_vec(),
    ]
    .concat();
    let init = abi::InitIn {
        major: 7,
        minor: 45,
        max_readahead: 1 << 17,
        flags: 0xffff_ffff,
        flags2: 0xffff,
        unused: [0; 11],
    };
    let mkdir = abi::MkdirIn {
        mode: 0o755,
        umask: 0o22,
    };
    let mknod = abi::MknodIn {
        mode: 0o10644,
        rdev: 0,
        umask: 0,
        padding: 0,
    };
    let lseek = abi::LseekIn {
        fh: 1,
        offset: 0,
        whence: 3,
        padding: 0,
    };
    let cfr = abi::CopyFileRangeIn {
        fh_in: 1,
        off_in: 0,
        nodeid_out: 2,
        fh_out: 1,
        off_out: 0,
        len: 100,
        flags: 0,
    };
    let falloc = abi::FallocateIn {
        fh: 1,
        offset: 0,
        length: 4096,
        mode: 0,
        padding: 0,
    };
    let ioctl = abi::IoctlIn {
        fh: 1,
        flags: 0,
        cmd: 1,
        arg: 0,
        in_size: 4,
        out_size: 8,
    };
    vec![
        request(Opcode::LOOKUP, 1, &[b"name\0"]),
        request(Opcode::GETATTR, 1, &[abi::GetattrIn::default().as_bytes()]),
        request(Opcode::CREATE, 1, &[create.as_bytes(), b"file\0"]),
        request(Opcode::WRITE, 2, &[write.as_bytes(), b"hello"]),
        request(Opcode::READ, 2, &[read.as_bytes()]),
        request(Opcode::READDIRPLUS, 1, &[read.as_bytes()]),
        request(Opcode::RENAME2, 1, &[rename2.as_bytes(), b"file\0other\0"]),
        request(Opcode::SETXATTR, 2, &[setx.as_bytes(), b"user.a\0abc"]),
        request(Opcode::GETXATTR, 2, &[getx.as_bytes(), b"user.a\0"]),
        request(Opcode::LISTXATTR, 2, &[getx.as_bytes()]),
        request(Opcode::SETATTR, 2, &[setattr.as_bytes()]),
        request(Opcode::BATCH_FORGET, 0, &[&forget]),
        request(Opcode::INIT, 0, &[init.as_bytes()]),
        request(Opcode::MKDIR, 1, &[mkdir.as_bytes(), b"d\0"]),
        request(Opcode::MKNOD, 1, &[mknod.as_bytes(), b"p\0"]),
        request(Opcode::SYMLINK, 1, &[b"link\0target\0"]),
        request(
            Opcode::LINK,
            1,
            &[abi::LinkIn { oldnodeid: 2 }.as_bytes(), b"hard\0"],
        ),
        request(Opcode::LSEEK, 2, &[lseek.as_bytes()]),
        request(Opcode::COPY_FILE_RANGE_64, 2, &[cfr.as_bytes()]),
        request(Opcode::FALLOCATE, 2, &[falloc.as_bytes()]),
        request(Opcode::IOCTL, 2, &[ioctl.as_bytes(), b"abcd"]),
        request(
            Opcode::INTERRUPT,
            0,
            &[abi::InterruptIn { unique: 77 }.as_bytes()],
        ),
        request(Opcode::STATX, 1, &[abi::StatxIn::default().as_bytes()]),
        request(Opcode(9999), 1, &[b"unknown opcode"]),
    ]
}

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn mutated_requests_never_panic() {
    let sink = Arc::new(Replies::default());
    let d = Dispatcher::new(
        Arc::new(MemFs::new(Timeouts::default())),
        ParseConfig { setxattr_ext: true },
        Notifier::for_sink(sink.clone()),
        1,
    );
    let mut w = Worker::new(
        DataOut::with_capacity(1 << 16),
        Arc::new(WorkerStats::new("t")),
        0,
    );
    let seeds = seeds();
    // The seeds themselves are served normally.
    for s in &seeds {
        d.dispatch_contiguous(s, &mut w, &*sink);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..10_000 {
        let mut m = seeds[(rng.next() % seeds.len() as u64) as usize].clone();
        match rng.next() % 4 {
            0 => m.truncate((rng.next() % (m.len() as u64 + 1)) as usize),
            1 => {
                for _ in 0..1 + rng.next() % 8 {
                    let i = (rng.next() % m.len() as u64) as usize;
                    m[i] ^= 1 << (rng.next() % 8);
                }
            }
            2 => {
                // Keep the header's length honest so the body is what is tested.
                let extra = (rng.next() % 64) as usize;
                m.extend((0..extra).map(|_| rng.next() as u8));
                let len = m.len() as u32;
                m[..4].copy_from_slice(&len.to_le_bytes());
            }
            _ => {
                let i = 4 + (rng.next() % 36) as usize;
                m[i] = rng.next() as u8;
            }
        }
        d.dispatch_contiguous(&m, &mut w, &*sink);
    }
    assert!(
        sink.0.lock().unwrap().len() > 1000,
        "most mutated requests still get an answer"
    );
}

#[test]
fn write_corpus_seeds() {
    // Keeps fuzz/corpus/parse in step with the seeds above.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/parse");
    if dir.is_dir() {
        for (i, s) in seeds().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s).unwrap();
        }
    }
}
