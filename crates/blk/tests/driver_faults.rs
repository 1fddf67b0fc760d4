//! A driver written with the library (as a user would) that fails on
//! purpose: one block's reads return an I/O error, writes to another block
//! panic. The application must see EIO for those requests only, and the
//! device must go on serving everything else.
//!
//! No libtest harness: this binary is also the driver. Run with
//! `serve NAME`, it serves the faulty device (and, being supervised, is
//! started again by its supervisor under the same arguments).

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fusebox_blk::device::{self, DeviceConfig};
use fusebox_blk::drivers::RamDriver;
use fusebox_blk::registry;
use fusebox_blk::{BlkError, BlockDriver, Capabilities, Geometry};

const BLOCK: u64 = 4096;
const BAD_READ: u64 = 10;
const PANIC_WRITE: u64 = 20;

struct Faulty(RamDriver);

impl BlockDriver for Faulty {
    fn geometry(&self) -> Geometry {
        self.0.geometry()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        let blocks = offset / BLOCK..(offset + buf.len() as u64).div_ceil(BLOCK);
        if blocks.contains(&BAD_READ) {
            return Err(BlkError::Io(format!("block {BAD_READ} is unreadable")));
        }
        self.0.read(offset, buf)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        let blocks = offset / BLOCK..(offset + data.len() as u64).div_ceil(BLOCK);
        if blocks.contains(&PANIC_WRITE) {
            panic!("the driver's bug: a write to block {PANIC_WRITE}");
        }
        self.0.write(offset, data)
    }
}

fn serve(name: &str) {
    let mut cfg = DeviceConfig::new(name, "faulty-test-driver");
    cfg.kept_memory = Some(16 << 20);
    let r = device::run(
        &cfg,
        |mem| {
            let ram = match mem {
                Some(m) => RamDriver::from_memfd(m, BLOCK as u32)?,
                None => RamDriver::create(16 << 20, BLOCK as u32)?,
            };
            Ok(Faulty(ram))
        },
        |rec| {
            println!("ready {}", rec.device.display());
            let _ = std::io::Write::flush(&mut std::io::stdout());
        },
    );
    if let Err(e) = r {
        eprintln!("faulty driver: {e}");
        std::process::exit(1);
    }
}

/// Starts the driver; destroys the device when dropped.
struct Running {
    name: String,
    device: PathBuf,
    child: std::process::Child,
}

impl Running {
    fn start(name: &str) -> Running {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["serve", name])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let device = PathBuf::from(
            line.trim()
                .strip_prefix("ready ")
                .expect("the driver started"),
        );
        Running {
            name: name.to_string(),
            device,
            child,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(r) = registry::get(&self.name) {
            if let Some(pid) = rustix::process::Pid::from_raw(r.pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = registry::get(&self.name) {
            device::teardown_dead(&r);
        }
    }
}

fn direct(device: &Path, write: bool) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(device)
        .unwrap()
}

/// A block-aligned buffer for O_DIRECT.
fn aligned() -> Vec<u8> {
    // Over-allocate and pick the aligned window's start by offset.
    vec![0u8; 2 * BLOCK as usize]
}

fn window(buf: &mut [u8]) -> &mut [u8] {
    let skip = buf.as_ptr().align_offset(BLOCK as usize);
    &mut buf[skip..skip + BLOCK as usize]
}

fn an_unreadable_block_fails_only_its_own_reads() {
    let dev = Running::start(&format!("faulty-r{}", std::process::id()));
    let f = direct(&dev.device, true);
    let mut storage = aligned();
    let buf = window(&mut storage);
    buf.fill(0xab);
    f.write_all_at(buf, 11 * BLOCK).unwrap();
    let err = f.read_exact_at(buf, BAD_READ * BLOCK).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eio()), "{err}");
    buf.fill(0);
    f.read_exact_at(buf, 11 * BLOCK).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0xab),
        "the neighbouring block lost its data"
    );
    f.read_exact_at(buf, 9 * BLOCK).unwrap();
}

fn a_panicking_driver_fails_that_write_and_serves_on() {
    let name = format!("faulty-p{}", std::process::id());
    let dev = Running::start(&name);
    let pid_before = device::driver_pids(registry::get(&name).unwrap().pid);
    let f = direct(&dev.device, true);
    let mut storage = aligned();
    let buf = window(&mut storage);
    buf.fill(0x5a);
    let err = f.write_all_at(buf, PANIC_WRITE * BLOCK).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eio()), "{err}");
    f.write_all_at(buf, (PANIC_WRITE + 1) * BLOCK).unwrap();
    buf.fill(0);
    f.read_exact_at(buf, (PANIC_WRITE + 1) * BLOCK).unwrap();
    assert!(buf.iter().all(|&b| b == 0x5a));
    // The panic was caught in the request: the same driver process serves.
    assert_eq!(
        device::driver_pids(registry::get(&name).unwrap().pid),
        pid_before
    );
}

fn libc_eio() -> i32 {
    rustix::io::Errno::IO.raw_os_error()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve(&args[2]);
        return;
    }
    // libtest's flags (--test-threads, a filter) are accepted and ignored.
    let tests: [(&str, fn()); 2] = [
        (
            "an_unreadable_block_fails_only_its_own_reads",
            an_unreadable_block_fails_only_its_own_reads,
        ),
        (
            "a_panicking_driver_fails_that_write_and_serves_on",
            a_panicking_driver_fails_that_write_and_serves_on,
        ),
    ];
    let mut failed = 0;
    for (name, test) in tests {
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" },
        2 - failed
    );
    if failed > 0 {
        std::process::exit(101);
    }
}
